/* zo_port_stm32n6.c - the port contract (zo_port.h) on the STM32N657 (STM32N6570-DK,
 * NUCLEO-N657X0-Q).  Static file of the stm32n6 port; start-up, faults and the SysTick clock are
 * in zo_port_cortex_m.c.
 *
 * NOT VERIFIED ON HARDWARE: no STM32N6 board was available.  The register addresses and bits
 * (zo_port_stm32n6_regs.h) were written for this project and agree with ST's device header
 * stm32n657xx.h (STMicroelectronics/cmsis-device-n6 v1.1.0, commit f818b00f; checked by
 * tests/test_n6_regs.py); with ZO_DEVICE_HEADERS the port takes them from that header.  Not in
 * that header, so unchecked: USART1SEL value 6 = HSI (from the HAL's documentation).
 *
 * Console: USART1, TX on PE5 and RX on PE6 (alternate function 7), the ST-LINK V3 virtual COM
 * port on both boards, 8N1 at the board file's baud rate; transmit polled, receive by interrupt
 * (USART1 is interrupt 159) into the port base's buffer.  The core runs in the Secure state and
 * uses the Secure aliases of the peripherals.  The firmware does not touch the PLLs: it runs on
 * the clock it finds (HSI, 64 MHz after reset; development mode leaves it so).  So that the baud
 * rate does not depend on the bus clocks, USART1's kernel clock is switched to the HSI.
 *
 * Exit: the boards have no process to return to: wait until the last byte has left the UART,
 * stop SysTick and stay in an idle loop (the debugger, or the reset button, takes over).
 */
#include <stdint.h>

#include "zo_port.h"
#include "zo_port_cortex_m.h"
#include "zo_port_stm32n6_regs.h"

#ifndef ZO_CONSOLE_BAUD
#error "ZO_CONSOLE_BAUD and ZO_CONSOLE_CLOCK_HZ come from the board file through the Makefile"
#endif

/* Register facts: zo_port_stm32n6_regs.h (the port's own, or ST's header with
 * ZO_DEVICE_HEADERS). */
#define RCC_REG(off)        ZO_REG32(ZO_RCC_BASE + (off))
#define RAMCFG_CR_REG(block) ZO_REG32(ZO_RAMCFG_BASE + ZO_RAMCFG_STRIDE * (block))
#define GPIOE_REG(off)      ZO_REG32(ZO_GPIOE_BASE + (off))
#define USART1_REG(off)     ZO_REG32(ZO_USART1_BASE + (off))
#define USART1SEL_HSI   0x6u

/* The port's memory switches, in port.toml `memories` order (bit i of the plan's mask): the
 * RCC_MEMENR bit of each and its RAMCFG block (-1: none); XSPI2 (the external NOR mapped for
 * flash boot) is the last switch and no memory of the chip. */
static const struct {
    uint32_t rcc_bit;
    int32_t ramcfg_block;
} memory_switches[] = {
    {ZO_RCC_AXISRAM3EN, 2}, /* AXISRAM3..6: RAMCFG blocks 2..5, shut down at reset (the NPU's RAMs) */
    {ZO_RCC_AXISRAM4EN, 3},
    {ZO_RCC_AXISRAM5EN, 4},
    {ZO_RCC_AXISRAM6EN, 5},
    {ZO_RCC_CACHEAXIRAMEN, -1}, /* CACHEAXIRAM: the NPU cache's RAM, used as plain RAM while the cache is off */
};
#define SWITCH_XSPI2 5u /* zo_port_stm32n6_xspi.c */
#define PIN_TX          5u
#define PIN_RX          6u
#define AF_USART1       7u

/* Called from the reset code before RAM is touched (zo_port_cortex_m.c): clock the memories the
 * plan uses, take AXISRAM3..6 out of shut-down, map the external NOR (flash boot). */
void zo_port_enable_memories(uint32_t mask)
{
    if (mask & (1u << SWITCH_XSPI2)) {
        zo_stm32n6_xspi2_map();
    }
    mask &= ~(1u << SWITCH_XSPI2);
    if (mask == 0u) {
        return;
    }
    uint32_t rcc = 0u;
    for (uint32_t i = 0; i < sizeof(memory_switches) / sizeof(memory_switches[0]); ++i) {
        if (mask & (1u << i)) {
            rcc |= memory_switches[i].rcc_bit;
        }
    }
    RCC_REG(ZO_RCC_AHB2ENSR) = ZO_RCC_RAMCFGEN;
    RCC_REG(ZO_RCC_MEMENSR) = rcc;
    (void)RCC_REG(ZO_RCC_AHB2ENR); /* read back: the clocks are on before the first access */
    (void)RCC_REG(ZO_RCC_MEMENR);
    for (uint32_t i = 0; i < sizeof(memory_switches) / sizeof(memory_switches[0]); ++i) {
        if ((mask & (1u << i)) && memory_switches[i].ramcfg_block >= 0) {
            RAMCFG_CR_REG((uint32_t)memory_switches[i].ramcfg_block) &= ~ZO_RAMCFG_SRAMSD;
        }
    }
    __asm volatile("dsb\n\tisb" ::: "memory");
}

void zo_port_init(void)
{
    RCC_REG(ZO_RCC_AHB4ENSR) = ZO_RCC_GPIOEEN;
    RCC_REG(ZO_RCC_APB2ENSR) = ZO_RCC_USART1EN;
    (void)RCC_REG(ZO_RCC_AHB4ENR); /* read back: the clocks are on before the first access */
    (void)RCC_REG(ZO_RCC_APB2ENR);
    zo_set_field(&RCC_REG(ZO_RCC_CCIPR13), ZO_RCC_USART1SEL_POS, 3u, USART1SEL_HSI);

    zo_set_field(&GPIOE_REG(ZO_GPIO_AFRL), 4u * PIN_TX, 4u, AF_USART1);
    zo_set_field(&GPIOE_REG(ZO_GPIO_AFRL), 4u * PIN_RX, 4u, AF_USART1);
    zo_set_field(&GPIOE_REG(ZO_GPIO_OSPEEDR), 2u * PIN_TX, 2u, 1u); /* medium speed is plenty for 115200 baud */
    zo_set_field(&GPIOE_REG(ZO_GPIO_PUPDR), 2u * PIN_RX, 2u, 1u);   /* idle-high RX if the ST-LINK is absent */
    zo_set_field(&GPIOE_REG(ZO_GPIO_MODER), 2u * PIN_TX, 2u, 2u);
    zo_set_field(&GPIOE_REG(ZO_GPIO_MODER), 2u * PIN_RX, 2u, 2u);

    USART1_REG(ZO_USART_CR1) = 0u; /* UE = 0: configurable */
    USART1_REG(ZO_USART_CR2) = 0u; /* 1 stop bit */
    USART1_REG(ZO_USART_CR3) = 0u;
    USART1_REG(ZO_USART_PRESC) = 0u; /* kernel clock / 1 */
    USART1_REG(ZO_USART_BRR) = ((uint32_t)ZO_CONSOLE_CLOCK_HZ + (uint32_t)ZO_CONSOLE_BAUD / 2u) / (uint32_t)ZO_CONSOLE_BAUD;
    USART1_REG(ZO_USART_CR1) = ZO_USART_CR1_FIFOEN | ZO_USART_CR1_RXFNEIE | ZO_USART_CR1_TE | ZO_USART_CR1_RE |
                           ZO_USART_CR1_UE; /* 8N1, oversampling 16 */
    while ((USART1_REG(ZO_USART_ISR) & (ZO_USART_ISR_TEACK | ZO_USART_ISR_REACK)) != (ZO_USART_ISR_TEACK | ZO_USART_ISR_REACK)) {
    }
    zo_cm_irq_enable(ZO_USART1_IRQ);
    zo_cm_timer_start();
}

/* Received bytes go to the port base's buffer at once: the FIFO holds only 8, and a command
 * frame is longer than that while the firmware may be busy for a whole training step. */
void zo_port_irq(uint32_t irq)
{
    if (irq != ZO_USART1_IRQ) {
        return;
    }
    /* RXFNE asserts the interrupt while the FIFO holds a byte, so what a full buffer leaves
     * there is taken when zo_cm_rx_pop unmasks it. */
    while ((USART1_REG(ZO_USART_ISR) & ZO_USART_ISR_RXFNE) && !zo_cm_rx_full(ZO_USART1_IRQ)) {
        zo_cm_rx_push((uint8_t)USART1_REG(ZO_USART_RDR));
    }
    if (USART1_REG(ZO_USART_ISR) & ZO_USART_ISR_ORE) {
        USART1_REG(ZO_USART_ICR) = ZO_USART_ICR_ORECF; /* bytes were lost; the command parser resynchronises */
        zo_cm_rx_overrun();
    }
}

void zo_port_write(const uint8_t *data, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        while (!(USART1_REG(ZO_USART_ISR) & ZO_USART_ISR_TXFNF)) {
        }
        USART1_REG(ZO_USART_TDR) = data[i];
    }
}

int zo_port_read_byte(uint8_t *byte)
{
    return zo_cm_rx_pop(byte);
}

_Noreturn void zo_port_exit(int code)
{
    (void)code; /* the host learns the outcome from the telemetry (the done record) */
    while (!(USART1_REG(ZO_USART_ISR) & ZO_USART_ISR_TC)) {
    }
    ZO_SYST_CSR = 0u;
    for (;;) {
    }
}
