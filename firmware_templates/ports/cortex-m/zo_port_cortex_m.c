/* zo_port_cortex_m.c - vector table, reset handler, memory initialisation, fault reports and the
 * SysTick microsecond clock shared by the Cortex-M55 ports.  Static file of the cortex-m port
 * base.  The linker script (link.ld, rendered from the board file) defines the __zo_* symbols.
 */
#include <stddef.h>
#include <stdint.h>

#include "zo_port.h"
#include "zo_port_cortex_m.h"

extern uint32_t __zo_stack_top[], __zo_stack_limit[];
extern uint32_t __zo_data_start[], __zo_data_end[], __zo_data_load[];
extern uint32_t __zo_bss_start[], __zo_bss_end[], __zo_arena_start[], __zo_arena_end[];
extern const uint8_t __zo_enable_memories[]; /* an absolute symbol: its address is the mask */

int main(void);
void zo_reset_handler(void);
void zo_cm_start(void);
void zo_cm_fault(const uint32_t *frame, uint32_t exc_return);
static void fault_entry(void);
static void systick_handler(void);
static void device_irq(void);

/* ---- vector table -------------------------------------------------------------------------- */

typedef void (*zo_vector_t)(void);

#define DEV4 device_irq, device_irq, device_irq, device_irq
#define DEV16 DEV4, DEV4, DEV4, DEV4
#define DEV80 DEV16, DEV16, DEV16, DEV16, DEV16

/* The 16 system exceptions, then ZO_CM_DEVICE_IRQS device interrupts, all to device_irq, which
 * hands the interrupt number to the port (zo_port_irq).  256 entries: 1 KiB, aligned to 1 KiB
 * as VTOR requires for a table of that size (so the code region must start 1 KiB aligned). */
__attribute__((section(".zo_vectors"), used, aligned(1024))) static const zo_vector_t
    zo_vectors[16 + ZO_CM_DEVICE_IRQS] = {
        (zo_vector_t)(uintptr_t)__zo_stack_top,
        zo_reset_handler,
        fault_entry, /* NMI */
        fault_entry, /* HardFault */
        fault_entry, /* MemManage */
        fault_entry, /* BusFault */
        fault_entry, /* UsageFault */
        fault_entry, /* SecureFault */
        NULL,
        NULL,
        NULL,
        fault_entry, /* SVCall */
        fault_entry, /* DebugMonitor */
        NULL,
        fault_entry, /* PendSV */
        systick_handler,
        DEV80, DEV80, DEV80,
};

/* ---- start-up ---------------------------------------------------------------------------- */

/* Entered from the reset vector, or directly at the ELF entry point when a debugger loads the
 * image into RAM (STM32N6 development mode leaves SP and VTOR pointing at the boot ROM's):
 * set the stack and its limit (a stack overflow then faults instead of corrupting .bss). */
__attribute__((naked, noreturn)) void zo_reset_handler(void)
{
    __asm volatile(
        "ldr r0, =__zo_stack_limit\n\t"
        "msr msplim, r0\n\t"
        "ldr r0, =__zo_stack_top\n\t"
        "msr msp, r0\n\t"
        "b zo_cm_start\n\t"
        ".ltorg\n\t");
}

static void zero_words(uint32_t *p, const uint32_t *end)
{
    while (p < end) {
        *p++ = 0u;
    }
}

/* Runs after the FPU is on: the compiler may use floating-point or Helium registers here. */
__attribute__((noinline, noreturn)) static void init_memory_and_run(void)
{
    const uint32_t *src = __zo_data_load;
    for (uint32_t *dst = __zo_data_start; dst < __zo_data_end;) {
        *dst++ = *src++;
    }
    zero_words(__zo_bss_start, __zo_bss_end);
    zero_words(__zo_arena_start, __zo_arena_end);
    zo_port_exit(main());
}

/* No floating-point or Helium instruction may run before CPACR grants CP10/CP11: this function
 * only writes system registers (volatile stores the compiler cannot vectorise). */
__attribute__((noreturn)) void zo_cm_start(void)
{
    ZO_SCB_VTOR = (uint32_t)(uintptr_t)zo_vectors;
    ZO_SCB_CPACR |= ZO_CPACR_CP10_CP11;
    ZO_SCB_SHCSR |= ZO_SHCSR_ENABLES;
    __asm volatile("dsb\n\tisb" ::: "memory");
    zo_port_enable_memories((uint32_t)(uintptr_t)__zo_enable_memories);
    init_memory_and_run();
}

/* Ports whose memories are all on at reset need nothing. */
__attribute__((weak)) void zo_port_enable_memories(uint32_t mask)
{
    (void)mask;
}

/* ---- faults ------------------------------------------------------------------------------ */

void zo_cm_hex32(char *out, uint32_t v)
{
    for (int s = 28, i = 0; s >= 0; s -= 4, ++i) {
        out[i] = "0123456789abcdef"[(v >> s) & 0xFu];
    }
}

void zo_cm_puts(const char *s)
{
    uint32_t n = 0;
    while (s[n] != '\0') {
        ++n;
    }
    zo_port_write((const uint8_t *)s, n);
}

/* Selects the stack the exception frame was pushed on and hands it to zo_cm_fault. */
__attribute__((naked)) static void fault_entry(void)
{
    __asm volatile(
        "tst lr, #4\n\t"
        "ite eq\n\t"
        "mrseq r0, msp\n\t"
        "mrsne r0, psp\n\t"
        "mov r1, lr\n\t"
        "b zo_cm_fault\n\t");
}

/* One text line, e.g. "zoflash: fault 3 (HardFault) pc=... lr=... cfsr=... hfsr=... bfar=...
 * sfsr=...", then exit code 3. */
__attribute__((noreturn)) void zo_cm_fault(const uint32_t *frame, uint32_t exc_return)
{
    static const char *const names[] = {"?", "?", "NMI", "HardFault", "MemManage", "BusFault", "UsageFault",
                                        "SecureFault", "?", "?", "?", "SVCall", "DebugMonitor", "?", "PendSV",
                                        "SysTick"};
    uint32_t ipsr;
    __asm volatile("mrs %0, ipsr" : "=r"(ipsr));
    const uint32_t exc = ipsr & 0x1FFu;
    const struct {
        const char *label;
        uint32_t value;
    } fields[] = {
        {" pc=", frame[6]}, {" lr=", frame[5]}, {" exc_return=", exc_return}, {" cfsr=", ZO_SCB_CFSR},
        {" hfsr=", ZO_SCB_HFSR}, {" mmfar=", ZO_SCB_MMFAR}, {" bfar=", ZO_SCB_BFAR}, {" sfsr=", ZO_SAU_SFSR},
    };
    char num[9] = {0};
    zo_cm_puts("\nzoflash: fault ");
    zo_cm_hex32(num, exc);
    zo_cm_puts(num + 6);
    zo_cm_puts(" (");
    zo_cm_puts(exc < 16u ? names[exc] : "interrupt");
    zo_cm_puts(")");
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); ++i) {
        zo_cm_puts(fields[i].label);
        zo_cm_hex32(num, fields[i].value);
        zo_cm_puts(num);
    }
    zo_cm_puts("\n");
    zo_port_exit(3);
}

/* ---- device interrupts and the console's receive buffer ---------------------------------- */

static void device_irq(void)
{
    uint32_t ipsr;
    __asm volatile("mrs %0, ipsr" : "=r"(ipsr));
    zo_port_irq((ipsr & 0x1FFu) - 16u);
}

void zo_cm_irq_enable(uint32_t irq)
{
    ZO_NVIC_ISER(irq / 32u) = 1u << (irq % 32u);
}

/* Single producer (the port's receive interrupt), single consumer (zo_port_read_byte): the
 * interrupt only moves head, the reader only moves tail.  A full buffer takes no byte: the port
 * leaves it in its UART and its interrupt is masked until the reader makes room.  QEMU then
 * holds the rest of its input (it delivers a byte only when the UART's is taken), so none is
 * lost however fast the host writes; a real UART's sender overruns it instead (counted). */
static volatile uint8_t g_rx[ZO_CM_RX_BUFFER];
static volatile uint32_t g_rx_head, g_rx_tail, g_rx_overruns;
static volatile uint32_t g_rx_held_irq = ZO_CM_DEVICE_IRQS; /* none */

int zo_cm_rx_full(uint32_t irq)
{
    if (g_rx_head - g_rx_tail < ZO_CM_RX_BUFFER) {
        return 0;
    }
    ZO_NVIC_ICER(irq / 32u) = 1u << (irq % 32u);
    g_rx_held_irq = irq;
    return 1;
}

void zo_cm_rx_push(uint8_t byte)
{
    const uint32_t head = g_rx_head;
    g_rx[head % ZO_CM_RX_BUFFER] = byte;
    __asm volatile("dmb" ::: "memory");
    g_rx_head = head + 1u;
}

int zo_cm_rx_pop(uint8_t *byte)
{
    const uint32_t tail = g_rx_tail;
    if (tail == g_rx_head) {
        return 0;
    }
    *byte = g_rx[tail % ZO_CM_RX_BUFFER];
    __asm volatile("dmb" ::: "memory");
    g_rx_tail = tail + 1u;
    /* Read once.  If set, that interrupt is masked and cannot change it; if not, an interrupt
     * setting it after this read leaves a full buffer, whose next pop unmasks it. */
    const uint32_t held = g_rx_held_irq;
    if (held != ZO_CM_DEVICE_IRQS) {
        g_rx_held_irq = ZO_CM_DEVICE_IRQS;
        zo_cm_irq_enable(held); /* the byte left in the UART still asserts it */
    }
    return 1;
}

void zo_cm_rx_overrun(void)
{
    g_rx_overruns++;
}

uint32_t zo_cm_rx_overruns(void)
{
    return g_rx_overruns;
}

uint32_t zo_port_rx_window(void)
{
    return ZO_CM_RX_BUFFER;
}

/* Sleep until the next interrupt (a received byte, or SysTick's wrap: at most 2^24 clock cycles,
 * 0.52 s at 32 MHz) unless bytes are waiting.  Interrupts are masked around the check so a byte
 * arriving between it and WFI still wakes the core (a pending interrupt ends WFI under PRIMASK);
 * it is served once they are unmasked.  Under QEMU's -icount, virtual time then runs at wall
 * speed instead of one instruction per nanosecond of a polling loop. */
void zo_port_idle(void)
{
    __asm volatile("cpsid i" ::: "memory");
    if (g_rx_head == g_rx_tail) {
        __asm volatile("dsb\n\twfi" ::: "memory");
    }
    __asm volatile("cpsie i" ::: "memory");
}

/* ---- SysTick microseconds ---------------------------------------------------------------- */

static volatile uint64_t g_ticks_hi; /* ticks of completed SysTick periods */
static volatile int g_timer_started;

static void systick_handler(void)
{
    g_ticks_hi += (uint64_t)ZO_SYST_RELOAD + 1u;
}

void zo_cm_timer_start(void)
{
    ZO_SYST_CSR = 0u;
    ZO_SYST_RVR = ZO_SYST_RELOAD;
    ZO_SYST_CVR = 0u; /* any write clears the counter; it reloads on the next tick */
    g_ticks_hi = 0u;
    ZO_SYST_CSR = ZO_SYST_CLKSOURCE | ZO_SYST_TICKINT | ZO_SYST_ENABLE;
    g_timer_started = 1;
}

uint64_t zo_port_time_us(void)
{
    if (!g_timer_started) {
        return 0u;
    }
    uint64_t hi;
    uint32_t cur, pending;
    do { /* a SysTick interrupt between the reads changes g_ticks_hi: read again */
        hi = g_ticks_hi;
        cur = ZO_SYST_CVR;
        pending = ZO_SCB_ICSR & ZO_ICSR_PENDSTSET;
    } while (hi != g_ticks_hi);
    /* The counter runs 0 (just started), RELOAD, RELOAD-1, ..., 1, 0, RELOAD, ... and the
     * interrupt is raised as it reaches 0, so tick t of a period (1..RELOAD+1) reads
     * RELOAD+1-t, and 0 at its last tick, which g_ticks_hi already counts. */
    if (pending && (cur == 0u || cur > ZO_SYST_RELOAD / 2u)) { /* reached 0, interrupt not taken yet */
        hi += (uint64_t)ZO_SYST_RELOAD + 1u;
    }
    const uint64_t ticks = hi + (cur == 0u ? 0u : (uint64_t)(ZO_SYST_RELOAD + 1u - cur));
#if ZO_CPU_CLOCK_HZ % 1000000 == 0
    return ticks / (uint64_t)(ZO_CPU_CLOCK_HZ / 1000000);
#else
    const uint64_t hz = (uint64_t)ZO_CPU_CLOCK_HZ;
    return ticks / hz * 1000000u + ticks % hz * 1000000u / hz;
#endif
}
