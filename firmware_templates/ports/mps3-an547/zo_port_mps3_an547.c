/* zo_port_mps3_an547.c - the port contract (zo_port.h) on the Arm MPS3 AN547 (Corstone-300,
 * Cortex-M55) as QEMU 7.2 emulates it (`qemu-system-arm -M mps3-an547`).  Static file of the
 * mps3-an547 port; start-up, faults and the SysTick clock are in zo_port_cortex_m.c.
 *
 * Console: CMSDK APB UART0.  The core runs in the Secure state, so we use the Secure alias
 * 0x59303000 of 0x49303000.  Registers (Arm CoreLink CMSDK technical reference, APB UART):
 * DATA 0x00, STATE 0x04 (bit 0 TX buffer full, bit 1 RX buffer full, bit 2 TX overrun, bit 3 RX
 * overrun; write 1 to clear an overrun), CTRL 0x08 (bit 0 TX enable, bit 1 RX enable), BAUDDIV
 * 0x10 (at least 16), INTSTATUS/INTCLEAR 0x0C (bit 1 RX; write 1 to clear).  QEMU accepts a
 * byte only when its character back end (stdout, a TCP socket, a pty) can take it and keeps TX
 * full until then, so polling STATE is flow control.  Received bytes raise UART0's receive
 * interrupt, number 33 on the AN547 (seen under QEMU 7.2; 43 is UART0's combined interrupt),
 * and go to the port base's receive buffer.
 *
 * Time: SysTick on the 32 MHz system clock; with `-icount shift=0` QEMU advances virtual time by
 * 1 ns per instruction, so the microseconds are deterministic (and unrelated to wall time).
 * Exit: semihosting SYS_EXIT_EXTENDED, so QEMU's exit status is the firmware's exit code; QEMU
 * must run with `-semihosting` (without it the BKPT halts the core: always use a timeout).
 */
#include <stdint.h>

#include "zo_port.h"
#include "zo_port_cortex_m.h"

/* --- NPU: a --npu build defines ZO_NPU_IRQ (the board's [npu] irq); the Ethos-U
 * driver's interrupt handler runs from here. --- */
#ifdef ZO_NPU_IRQ
void zo_ethosu_irq(void);
#endif

#ifndef ZO_CONSOLE_BAUD
#error "ZO_CONSOLE_BAUD and ZO_CONSOLE_CLOCK_HZ come from the board file through the Makefile"
#endif

#define UART0_BASE     0x59303000u
#define UART_DATA      ZO_REG32(UART0_BASE + 0x00u)
#define UART_STATE     ZO_REG32(UART0_BASE + 0x04u)
#define UART_CTRL      ZO_REG32(UART0_BASE + 0x08u)
#define UART_INTCLEAR  ZO_REG32(UART0_BASE + 0x0Cu)
#define UART_BAUDDIV   ZO_REG32(UART0_BASE + 0x10u)
#define STATE_TX_FULL  (1u << 0)
#define STATE_RX_FULL  (1u << 1)
#define STATE_RX_OVR   (1u << 3)
#define CTRL_TX_EN     (1u << 0)
#define CTRL_RX_EN     (1u << 1)
#define CTRL_RX_INT_EN (1u << 3)
#define INT_RX         (1u << 1)
#define UART0_RX_IRQ   33u

#define SYS_EXIT_EXTENDED 0x20u
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

void zo_port_init(void)
{
    UART_CTRL = 0u;
    UART_BAUDDIV = (uint32_t)ZO_CONSOLE_CLOCK_HZ / (uint32_t)ZO_CONSOLE_BAUD;
    UART_CTRL = CTRL_TX_EN | CTRL_RX_EN | CTRL_RX_INT_EN;
    zo_cm_irq_enable(UART0_RX_IRQ);
#ifdef ZO_NPU_IRQ
    zo_cm_irq_enable(ZO_NPU_IRQ);
#endif
    zo_cm_timer_start();
}

void zo_port_irq(uint32_t irq)
{
#ifdef ZO_NPU_IRQ
    if (irq == ZO_NPU_IRQ) {
        zo_ethosu_irq();
        return;
    }
#endif
    if (irq != UART0_RX_IRQ) {
        return;
    }
    /* The flag is cleared before each byte is taken, so one left in a full buffer's UART keeps
     * the interrupt asserted for when zo_cm_rx_pop unmasks it. */
    while ((UART_STATE & STATE_RX_FULL) && !zo_cm_rx_full(UART0_RX_IRQ)) {
        UART_INTCLEAR = INT_RX;
        zo_cm_rx_push((uint8_t)UART_DATA);
    }
    if (UART_STATE & STATE_RX_OVR) {
        UART_STATE = STATE_RX_OVR; /* a byte was lost; the command parser resynchronises */
        zo_cm_rx_overrun();
    }
}

void zo_port_write(const uint8_t *data, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        while (UART_STATE & STATE_TX_FULL) {
        }
        UART_DATA = data[i];
    }
}

int zo_port_read_byte(uint8_t *byte)
{
    return zo_cm_rx_pop(byte);
}

_Noreturn void zo_port_exit(int code)
{
    while (UART_STATE & STATE_TX_FULL) { /* the last byte is handed to QEMU before it exits */
    }
    volatile uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
    register uint32_t r0 __asm__("r0") = SYS_EXIT_EXTENDED;
    register volatile uint32_t *r1 __asm__("r1") = block;
    __asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    for (;;) {
    }
}
