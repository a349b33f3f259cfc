/* zo_port_cortex_m.h - what every Cortex-M55 port shares: the core's system registers (from the
 * Armv8-M architecture reference manual and the Cortex-M55 TRM), the start-up sequence and a
 * SysTick-based microsecond clock.  Static file of the cortex-m port base; a port adds its
 * console UART and its exit (zo_port_<port>.c), both behind zo_port.h.
 *
 * Start-up (zo_port_cortex_m.c): zo_reset_handler sets MSP and MSPLIM from the linker script,
 * points VTOR at our vector table, enables CP10/CP11 (FPU and MVE) in CPACR, and only then runs
 * C code that may use floating-point or Helium instructions: copy .data, zero .bss and the
 * arena, call main().  Every fault prints one text line on the console and exits with code 3.
 *
 * Interrupts: SysTick (the clock) and the console's receive interrupt, which the port enables
 * (zo_cm_irq_enable) and serves in zo_port_irq by moving received bytes into a ring buffer
 * (zo_cm_rx_push); zo_port_read_byte takes them out (zo_cm_rx_pop).  So command frames that
 * arrive while the firmware is busy in a training step are kept (a UART holds 1 to 8 bytes),
 * and a full buffer stops taking bytes rather than dropping them.
 */
#ifndef ZO_PORT_CORTEX_M_H
#define ZO_PORT_CORTEX_M_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

/* System control space (architecture-defined addresses). */
#define ZO_SCB_ICSR   ZO_REG32(0xE000ED04u) /* interrupt control and state */
#define ZO_SCB_VTOR   ZO_REG32(0xE000ED08u) /* vector table offset */
#define ZO_SCB_AIRCR  ZO_REG32(0xE000ED0Cu)
#define ZO_SCB_SHCSR  ZO_REG32(0xE000ED24u) /* system handler control and state */
#define ZO_SCB_CFSR   ZO_REG32(0xE000ED28u) /* configurable fault status */
#define ZO_SCB_HFSR   ZO_REG32(0xE000ED2Cu) /* hard fault status */
#define ZO_SCB_MMFAR  ZO_REG32(0xE000ED34u)
#define ZO_SCB_BFAR   ZO_REG32(0xE000ED38u)
#define ZO_SCB_CPACR  ZO_REG32(0xE000ED88u) /* coprocessor access control */
#define ZO_SAU_SFSR   ZO_REG32(0xE000EDE4u) /* secure fault status */
#define ZO_SYST_CSR   ZO_REG32(0xE000E010u) /* SysTick control and status */
#define ZO_SYST_RVR   ZO_REG32(0xE000E014u) /* SysTick reload value */
#define ZO_SYST_CVR   ZO_REG32(0xE000E018u) /* SysTick current value */
#define ZO_NVIC_ISER(n) ZO_REG32(0xE000E100u + 4u * (n)) /* interrupt set-enable, 32 per register */
#define ZO_NVIC_ICER(n) ZO_REG32(0xE000E180u + 4u * (n)) /* interrupt clear-enable */

#define ZO_ICSR_PENDSTSET   (1u << 26)
#define ZO_AIRCR_VECTKEY    (0x05FAu << 16)
#define ZO_AIRCR_SYSRESETREQ (1u << 2)
#define ZO_SHCSR_ENABLES    ((1u << 16) | (1u << 17) | (1u << 18) | (1u << 19)) /* Mem, Bus, Usage, Secure */
#define ZO_CPACR_CP10_CP11  (0xFu << 20)                                       /* full access */
#define ZO_SYST_ENABLE      (1u << 0)
#define ZO_SYST_TICKINT     (1u << 1)
#define ZO_SYST_CLKSOURCE   (1u << 2) /* 1: the processor clock */
#define ZO_SYST_RELOAD      0x00FFFFFFu

/* The core clock SysTick counts (board file: [cpu] clock_hz, passed by the bundle's Makefile). */
#ifndef ZO_CPU_CLOCK_HZ
#error "ZO_CPU_CLOCK_HZ must be defined (the bundle's Makefile does)"
#endif

#define ZO_CM_DEVICE_IRQS 240 /* device interrupt vectors: numbers 0..239 */
#define ZO_CM_RX_BUFFER   512 /* received bytes kept until zo_port_read_byte takes them */

/* Provided by the port: serve device interrupt `irq` (only those it enabled can occur). */
void zo_port_irq(uint32_t irq);

/* Turn on the memories the linker script's plan uses (bit i: the port's port.toml `memories`[i])
 * before any RAM is touched: system registers only, no floating point, no stack beyond a few
 * words.  Weak no-op by default; a port with memories off at reset defines it. */
void zo_port_enable_memories(uint32_t mask);

/* Enable device interrupt `irq` in the NVIC (priority 0). */
void zo_cm_irq_enable(uint32_t irq);

/* The console receive buffer, filled by the port's interrupt `irq`:
 *     while (<a byte is in the UART> && !zo_cm_rx_full(irq)) { <clear its flag>; zo_cm_rx_push(<it>); }
 * zo_cm_rx_full masks `irq` while the buffer is full, leaving the byte in the UART;
 * zo_cm_rx_pop (in zo_port_read_byte) unmasks it once there is room. */
int zo_cm_rx_full(uint32_t irq);
void zo_cm_rx_push(uint8_t byte);
int zo_cm_rx_pop(uint8_t *byte);
void zo_cm_rx_overrun(void);      /* the port saw its UART's overrun flag: bytes were lost */
uint32_t zo_cm_rx_overruns(void); /* how many times */

/* Start the SysTick time base (called from zo_port_init).  zo_port_time_us counts from here. */
void zo_cm_timer_start(void);

/* Write a NUL-terminated string through zo_port_write (fault reports, start-up text). */
void zo_cm_puts(const char *s);

/* Format v as 8 hex digits into out[0..7] (no terminator). */
void zo_cm_hex32(char *out, uint32_t v);

#ifdef __cplusplus
}
#endif

#endif /* ZO_PORT_CORTEX_M_H */
