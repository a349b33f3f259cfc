/* Minimal Cortex-M55 start-up for QEMU mps3-an547: vector table at 0x0, FPU/MVE enabled through
 * CPACR before any C code that may use them, .bss cleared, semihosting console and exit. */
#include <stddef.h>
#include <stdint.h>

extern uint32_t __bss_start__, __bss_end__, __stack_top__;
int main(void);
void Reset_Handler(void);
void semihost_write0(const char *s);
void semihost_exit(int code);

static int semihost_call(int op, void *arg)
{
    register int r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void semihost_write0(const char *s)
{
    semihost_call(0x04, (void *)s); /* SYS_WRITE0 */
}

void semihost_exit(int code)
{
    uint32_t block[2] = {0x20026u, (uint32_t)code}; /* ADP_Stopped_ApplicationExit, status */
    semihost_call(0x20, block);                      /* SYS_EXIT_EXTENDED */
    for (;;) {
    }
}

static void fault_handler(void)
{
    semihost_write0("FAULT\n");
    semihost_exit(3);
}

/* Called only after the FPU is on: the compiler may vectorise these loops with MVE. */
__attribute__((noinline)) static void c_start(void)
{
    for (uint32_t *p = &__bss_start__; p < &__bss_end__; ++p) {
        *p = 0u;
    }
    semihost_exit(main());
}

void Reset_Handler(void)
{
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    c_start();
}

/* Freestanding memset/memcpy/memmove (what GCC requires of a freestanding environment; it may
 * emit calls to them for plain loops, and the kernels call them; define ZO_STARTUP_USE_LIBC to
 * link newlib's faster ones instead, e.g. for instruction counts). */
#ifndef ZO_STARTUP_USE_LIBC
void *memset(void *d, int c, size_t n)
{
    volatile unsigned char *p = d;
    while (n--) {
        *p++ = (unsigned char)c;
    }
    return d;
}

void *memcpy(void *d, const void *s, size_t n)
{
    volatile unsigned char *p = d;
    const unsigned char *q = s;
    while (n--) {
        *p++ = *q++;
    }
    return d;
}

void *memmove(void *d, const void *s, size_t n)
{
    volatile unsigned char *p = d;
    const unsigned char *q = s;
    if (p < q) {
        while (n--) {
            *p++ = *q++;
        }
    } else {
        while (n--) {
            p[n] = q[n];
        }
    }
    return d;
}
#endif

typedef void (*vector_t)(void);

__attribute__((section(".vectors"), used)) static const vector_t vectors[16] = {
    (vector_t)(uintptr_t)&__stack_top__,
    Reset_Handler,
    fault_handler, /* NMI */
    fault_handler, /* HardFault */
    fault_handler, /* MemManage */
    fault_handler, /* BusFault */
    fault_handler, /* UsageFault */
    fault_handler, /* SecureFault */
    0, 0, 0,
    fault_handler, /* SVCall */
    fault_handler, /* DebugMonitor */
    0,
    fault_handler, /* PendSV */
    fault_handler, /* SysTick */
};
