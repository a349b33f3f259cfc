/* zo_neuralart.c - the frozen prefix on the STM32N6's Neural-ART NPU (see zo_neuralart.h).
 *
 * The bring-up follows the sequence of ST's getting-started applications (docs: targets.md): the
 * NPU and NPU-cache clocks on and their resets pulsed, the NPU cache enabled, the NPU a secure
 * privileged bus master (RIF), then ll_aton's runtime and the network initialised once.  The
 * NPU's RAMs (AXISRAM3..6, RCC and RAMCFG; the cache RAM) are turned on by the start-up code: the
 * build adds their memory switches to the plan's (__zo_enable_memories).  Register numbers:
 * zo_port_stm32n6_regs.h, checked against ST's device header by tests/test_n6_regs.py.  Not
 * executed here. */
#include "zo_neuralart.h"

#include <stddef.h>
#include <string.h>

#include "zo_port_stm32n6_regs.h"
#include "zo_telemetry.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define CACHE_LINE  32u /* the Cortex-M55's D-cache line */

/* The SCB's cache maintenance by address (Armv8-M): clean, invalidate. */
#define SCB_DCCMVAC REG32(0xE000EF68u)
#define SCB_DCIMVAC REG32(0xE000EF5Cu)

volatile int32_t zo_neuralart_state;

static void dsb(void)
{
    __asm volatile("dsb\n\tisb" ::: "memory");
}

static void dcache_by_line(volatile uint32_t *op, const void *p, uint32_t n)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(CACHE_LINE - 1u);
    const uintptr_t end = (uintptr_t)p + n;
    __asm volatile("dsb" ::: "memory");
    for (; a < end; a += CACHE_LINE) {
        *op = (uint32_t)a;
    }
    dsb();
}

static void npu_power_up(void)
{
    volatile uint32_t *rcc = (volatile uint32_t *)(uintptr_t)ZO_RCC_BASE;
    const uint32_t npu = ZO_RCC_NPUEN | ZO_RCC_CACHEAXIEN;
    rcc[ZO_RCC_AHB5ENSR / 4u] = npu;
    (void)rcc[ZO_RCC_AHB5ENR / 4u];
    rcc[ZO_RCC_AHB5RSTSR / 4u] = ZO_RCC_NPURST | ZO_RCC_CACHEAXIRST;
    rcc[ZO_RCC_AHB5RSTCR / 4u] = ZO_RCC_NPURST | ZO_RCC_CACHEAXIRST;

    /* The NPU cache on: its RAM is then no plain RAM (the plan keeps the CPU out of it). */
    REG32(ZO_CACHEAXI_BASE + ZO_CACHEAXI_CR1) |= ZO_CACHEAXI_CR1_EN;

    /* RIF: the NPU a secure, privileged bus master of compartment 1, its registers secure and privileged. */
    rcc[ZO_RCC_AHB3ENSR / 4u] = ZO_RCC_RIFSCEN;
    (void)rcc[ZO_RCC_AHB3ENR / 4u];
    REG32(ZO_RIFSC_BASE + ZO_RIFSC_RIMC_ATTR0 + 4u * ZO_RIF_MASTER_NPU) =
        (1u << ZO_RIFSC_RIMC_MCID_POS) | ZO_RIFSC_RIMC_MSEC | ZO_RIFSC_RIMC_MPRIV;
    REG32(ZO_RIFSC_BASE + ZO_RIFSC_RISC_SECCFGR0 + 4u * ZO_RIF_PERIPH_NPU_REG) |= 1u << ZO_RIF_PERIPH_NPU_BIT;
    REG32(ZO_RIFSC_BASE + ZO_RIFSC_RISC_PRIVCFGR0 + 4u * ZO_RIF_PERIPH_NPU_REG) |= 1u << ZO_RIF_PERIPH_NPU_BIT;
    dsb();
}

static uint32_t elements(const LL_Buffer_InfoTypeDef *b)
{
    uint32_t n = 1u;
    for (uint32_t i = 0; i < b->mem_ndims; ++i) {
        n *= b->mem_shape[i];
    }
    return n;
}

/* Equal up to float32 rounding (the scale may be recomputed from the TFLite file's). */
static int same_scale(float a, float b)
{
    const float d = a > b ? a - b : b - a;
    return d <= 1e-6f * (b > 0.0f ? b : -b);
}

/* The output buffer holds the boundary tensor as TFLite lays it out: int8, channels last (or no
 * channel axis), as many elements, the same scale and zero point.  NULL, or what differs. */
static const char *output_mismatch(const zo_neuralart_prefix_t *p, const LL_Buffer_InfoTypeDef *out)
{
    if (out == NULL || out->name == NULL) {
        return "the network has no output buffer";
    }
    if (out->nbits != 8u || LL_Buffer_len(out) != p->boundary_bytes || elements(out) != p->boundary_bytes) {
        return "its size or element type differs from the boundary tensor's (int8)";
    }
    if (out->mem_ndims >= 3u && out->chpos != CHPos_Last) {
        return "its channels are not last (TFLite's layout): the features would be permuted";
    }
    if (out->scale == NULL || out->offset == NULL || !same_scale(out->scale[0], p->boundary_scale) ||
        (int32_t)out->offset[0] != p->boundary_zero_point) {
        return "its scale or zero point differs from the boundary tensor's";
    }
    return NULL;
}

static void bring_up(const zo_neuralart_prefix_t *p)
{
    npu_power_up();
    LL_ATON_RT_RuntimeInit();
    LL_ATON_RT_Init_Network(p->instance);
    const char *why = output_mismatch(p, p->outputs());
    const LL_Buffer_InfoTypeDef *in = p->inputs();
    if (why == NULL && (in == NULL || LL_Buffer_len(in) != p->input_bytes)) {
        why = "its input buffer's size differs from the model input's";
    }
    if (why != NULL) {
        char text[160] = "neural-art: the NPU's output does not match the boundary tensor: ";
        strncat(text, why, sizeof(text) - strlen(text) - 1u);
        strncat(text, "; the prefix runs on the CPU", sizeof(text) - strlen(text) - 1u);
        zo_tm_log(text);
        zo_neuralart_state = -1;
        return;
    }
    zo_neuralart_state = 1;
}

static void run_prefix(const zo_neuralart_prefix_t *p)
{
    const LL_Buffer_InfoTypeDef *in = p->inputs();
    const LL_Buffer_InfoTypeDef *out = p->outputs();
    uint8_t *dst = LL_Buffer_addr_start(in);
    memcpy(dst, p->input, p->input_bytes);
    dcache_by_line(&SCB_DCCMVAC, dst, p->input_bytes); /* the NPU reads memory, not the CPU's cache */
    /* polling: the runtime returns after each epoch block; no interrupt is routed to it */
    while (LL_ATON_RT_RunEpochBlock(p->instance) != LL_ATON_RT_DONE) {
    }
    LL_ATON_RT_Reset_Network(p->instance);
    const uint8_t *src = LL_Buffer_addr_start(out);
    dcache_by_line(&SCB_DCIMVAC, src, p->boundary_bytes); /* drop stale lines over what the NPU wrote */
    memcpy(p->boundary, src, p->boundary_bytes);
}

void zo_neuralart_run_steps(const zo_neuralart_prefix_t *p, int32_t first, int32_t end)
{
    if (first == 0 && end >= p->split && p->split > 0) {
        if (zo_neuralart_state == 0) {
            bring_up(p);
        }
        if (zo_neuralart_state == 1) {
            run_prefix(p);
            first = p->split;
        }
    }
    if (first < end) {
        p->cpu_run_steps(first, end);
    }
}
