/* zo_port_stm32n6.c - the port contract (zo_port.h) on the STM32N657 (STM32N6570-DK,
 * NUCLEO-N657X0-Q).  Static file of the stm32n6 port; start-up, faults and the SysTick clock are
 * in zo_port_cortex_m.c.
 *
 * NOT VERIFIED ON HARDWARE: no STM32N6 board was available.  The register addresses and bits
 * below were written for this project and cross-checked against ST's device header
 * stm32n657xx.h (STMicroelectronics/cmsis-device-n6 v1.1.0, commit f818b00f): every base
 * address, register offset and bit position here agrees with it.  Not in that header, so
 * unchecked: USART1SEL value 6 = HSI (from the HAL's documentation).
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

#ifndef ZO_CONSOLE_BAUD
#error "ZO_CONSOLE_BAUD and ZO_CONSOLE_CLOCK_HZ come from the board file through the Makefile"
#endif

/* RCC, Secure alias 0x56028000 (non-secure 0x46028000).  Each enable register xxxENR has an
 * atomic set register xxxENSR at +0x800. */
#define RCC_BASE        0x56028000u
#define RCC_CCIPR13     ZO_REG32(RCC_BASE + 0x174u) /* bits 2:0 USART1SEL: 0 PCLK2 ... 6 HSI */
#define RCC_AHB2ENR     ZO_REG32(RCC_BASE + 0x254u) /* bit 12 RAMCFGEN */
#define RCC_AHB4ENR     ZO_REG32(RCC_BASE + 0x25Cu) /* bit 4 GPIOEEN */
#define RCC_MEMENR      ZO_REG32(RCC_BASE + 0x24Cu) /* embedded memories: bits 0-3 AXISRAM3..6, 10 CACHEAXIRAM */
#define RCC_APB2ENR     ZO_REG32(RCC_BASE + 0x26Cu) /* bit 4 USART1EN */
#define RCC_AHB2ENSR    ZO_REG32(RCC_BASE + 0xA54u)
#define RCC_AHB4ENSR    ZO_REG32(RCC_BASE + 0xA5Cu)
#define RCC_MEMENSR     ZO_REG32(RCC_BASE + 0xA4Cu)
#define RCC_APB2ENSR    ZO_REG32(RCC_BASE + 0xA6Cu)
#define RCC_GPIOE_EN    (1u << 4)
#define RCC_USART1_EN   (1u << 4)
#define RCC_RAMCFG_EN   (1u << 12)
#define USART1SEL_MASK  0x7u
#define USART1SEL_HSI   0x6u

/* RAMCFG, Secure alias 0x52023000: one block of registers per SRAM, CR first; AXISRAM3..6 are
 * blocks 2..5 (0x80 bytes each).  CR bit 20 SRAMSD: the SRAM is shut down (its reset
 * state for AXISRAM3..6, the NPU's RAMs). */
#define RAMCFG_BASE     0x52023000u
#define RAMCFG_CR(block) ZO_REG32(RAMCFG_BASE + 0x80u * (block))
#define RAMCFG_SRAMSD   (1u << 20)

/* The port's memory switches, in port.toml `memories` order (bit i of the plan's mask): the
 * RCC_MEMENR bit of each and its RAMCFG block (-1: none). */
static const struct {
    uint32_t rcc_bit;
    int32_t ramcfg_block;
} memory_switches[] = {
    {1u << 0, 2}, /* AXISRAM3 */
    {1u << 1, 3}, /* AXISRAM4 */
    {1u << 2, 4}, /* AXISRAM5 */
    {1u << 3, 5}, /* AXISRAM6 */
    {1u << 10, -1}, /* CACHEAXIRAM: the NPU cache's RAM, used as plain RAM while the cache is off */
};

/* GPIO port E, Secure alias: GPIOA at 0x56020000, one port every 0x400. */
#define GPIOE_BASE      0x56021000u
#define GPIOE_MODER     ZO_REG32(GPIOE_BASE + 0x00u) /* 2 bits per pin: 0b10 alternate function */
#define GPIOE_OSPEEDR   ZO_REG32(GPIOE_BASE + 0x08u) /* 2 bits per pin */
#define GPIOE_PUPDR     ZO_REG32(GPIOE_BASE + 0x0Cu) /* 2 bits per pin: 0b01 pull-up */
#define GPIOE_AFRL      ZO_REG32(GPIOE_BASE + 0x20u) /* 4 bits per pin 0..7 */
#define PIN_TX          5u
#define PIN_RX          6u
#define AF_USART1       7u

/* USART1, Secure alias 0x52001000 (non-secure 0x42001000); the STM32 USART register layout. */
#define USART1_BASE     0x52001000u
#define USART_CR1       ZO_REG32(USART1_BASE + 0x00u)
#define USART_CR2       ZO_REG32(USART1_BASE + 0x04u)
#define USART_CR3       ZO_REG32(USART1_BASE + 0x08u)
#define USART_BRR       ZO_REG32(USART1_BASE + 0x0Cu)
#define USART_ISR       ZO_REG32(USART1_BASE + 0x1Cu)
#define USART_ICR       ZO_REG32(USART1_BASE + 0x20u)
#define USART_RDR       ZO_REG32(USART1_BASE + 0x24u)
#define USART_TDR       ZO_REG32(USART1_BASE + 0x28u)
#define USART_PRESC     ZO_REG32(USART1_BASE + 0x2Cu)
#define CR1_UE          (1u << 0)
#define CR1_RE          (1u << 2)
#define CR1_TE          (1u << 3)
#define CR1_RXFNEIE     (1u << 5)  /* interrupt when the receive FIFO is not empty (or overrun) */
#define CR1_FIFOEN      (1u << 29) /* 8-byte FIFOs */
#define USART1_IRQ      159u       /* USART1 global interrupt (stm32n657xx.h USART1_IRQn) */
#define ISR_ORE         (1u << 3)
#define ISR_RXFNE       (1u << 5)
#define ISR_TC          (1u << 6)
#define ISR_TXFNF       (1u << 7)
#define ISR_TEACK       (1u << 21)
#define ISR_REACK       (1u << 22)
#define ICR_ORECF       (1u << 3)

/* Called from the reset code before RAM is touched (zo_port_cortex_m.c): clock the memories the
 * plan uses and take AXISRAM3..6 out of shut-down. */
void zo_port_enable_memories(uint32_t mask)
{
    if (mask == 0u) {
        return;
    }
    uint32_t rcc = 0u;
    for (uint32_t i = 0; i < sizeof(memory_switches) / sizeof(memory_switches[0]); ++i) {
        if (mask & (1u << i)) {
            rcc |= memory_switches[i].rcc_bit;
        }
    }
    RCC_AHB2ENSR = RCC_RAMCFG_EN;
    RCC_MEMENSR = rcc;
    (void)RCC_AHB2ENR; /* read back: the clocks are on before the first access */
    (void)RCC_MEMENR;
    for (uint32_t i = 0; i < sizeof(memory_switches) / sizeof(memory_switches[0]); ++i) {
        if ((mask & (1u << i)) && memory_switches[i].ramcfg_block >= 0) {
            RAMCFG_CR((uint32_t)memory_switches[i].ramcfg_block) &= ~RAMCFG_SRAMSD;
        }
    }
    __asm volatile("dsb\n\tisb" ::: "memory");
}

static void set_field(volatile uint32_t *reg, uint32_t shift, uint32_t width, uint32_t value)
{
    const uint32_t mask = ((1u << width) - 1u) << shift;
    *reg = (*reg & ~mask) | ((value << shift) & mask);
}

void zo_port_init(void)
{
    RCC_AHB4ENSR = RCC_GPIOE_EN;
    RCC_APB2ENSR = RCC_USART1_EN;
    (void)RCC_AHB4ENR; /* read back: the clocks are on before the first access */
    (void)RCC_APB2ENR;
    set_field(&RCC_CCIPR13, 0u, 3u, USART1SEL_HSI);

    set_field(&GPIOE_AFRL, 4u * PIN_TX, 4u, AF_USART1);
    set_field(&GPIOE_AFRL, 4u * PIN_RX, 4u, AF_USART1);
    set_field(&GPIOE_OSPEEDR, 2u * PIN_TX, 2u, 1u); /* medium speed is plenty for 115200 baud */
    set_field(&GPIOE_PUPDR, 2u * PIN_RX, 2u, 1u);   /* idle-high RX if the ST-LINK is absent */
    set_field(&GPIOE_MODER, 2u * PIN_TX, 2u, 2u);
    set_field(&GPIOE_MODER, 2u * PIN_RX, 2u, 2u);

    USART_CR1 = 0u; /* UE = 0: configurable */
    USART_CR2 = 0u; /* 1 stop bit */
    USART_CR3 = 0u;
    USART_PRESC = 0u; /* kernel clock / 1 */
    USART_BRR = ((uint32_t)ZO_CONSOLE_CLOCK_HZ + (uint32_t)ZO_CONSOLE_BAUD / 2u) / (uint32_t)ZO_CONSOLE_BAUD;
    USART_CR1 = CR1_FIFOEN | CR1_RXFNEIE | CR1_TE | CR1_RE | CR1_UE; /* 8N1, oversampling 16 */
    while ((USART_ISR & (ISR_TEACK | ISR_REACK)) != (ISR_TEACK | ISR_REACK)) {
    }
    zo_cm_irq_enable(USART1_IRQ);
    zo_cm_timer_start();
}

/* Received bytes go to the port base's buffer at once: the FIFO holds only 8, and a command
 * frame is longer than that while the firmware may be busy for a whole training step. */
void zo_port_irq(uint32_t irq)
{
    if (irq != USART1_IRQ) {
        return;
    }
    while (USART_ISR & ISR_RXFNE) {
        zo_cm_rx_push((uint8_t)USART_RDR);
    }
    if (USART_ISR & ISR_ORE) {
        USART_ICR = ICR_ORECF; /* bytes were lost; the command parser resynchronises */
    }
}

void zo_port_write(const uint8_t *data, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        while (!(USART_ISR & ISR_TXFNF)) {
        }
        USART_TDR = data[i];
    }
}

int zo_port_read_byte(uint8_t *byte)
{
    return zo_cm_rx_pop(byte);
}

_Noreturn void zo_port_exit(int code)
{
    (void)code; /* the host learns the outcome from the telemetry (the done record) */
    while (!(USART_ISR & ISR_TC)) {
    }
    ZO_SYST_CSR = 0u;
    for (;;) {
    }
}
