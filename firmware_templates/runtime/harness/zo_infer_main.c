/* zo_infer_main.c - a model's inference on a board with no application around it (an emulated
 * board: `zoflash infer --board mps3-an547`, the M55 conformance tests, benchmarks/bench_m55.py).
 *
 * Static file, linked with an inference bundle, the board's port and zo_infer_inputs.h (generated
 * by targets/emulated.py: the samples and the model's entry points).  Runs the samples in order
 * after one init, so a stateful model's state carries from each sample to the next as in TFLM,
 * and prints every output of every sample as one line "out <sample> <output> <hex bytes>".  With
 * ZO_INFER_TIME_US > 0 it then times repeated inferences of sample 0 with the port's clock (under
 * QEMU -icount shift=0, 1 us of it is 1000 executed instructions).  With ZO_INFER_TRACE it runs
 * one inference between two calls of zo_infer_mark and stops (benchmarks/mve_trace.py).
 */
#include <stdint.h>
#include <string.h>

#include "zo_port.h"
#include "zo_infer_inputs.h"

static void put(const char *s)
{
    zo_port_write((const uint8_t *)s, (uint32_t)strlen(s));
}

static void put_u64(uint64_t v)
{
    char text[21];
    int n = 0;
    do {
        text[sizeof text - 1 - n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    zo_port_write((const uint8_t *)text + sizeof text - n, (uint32_t)n);
}

static void put_hex(const uint8_t *data, int32_t n)
{
    char text[64];
    for (int32_t i = 0; i < n; i += (int32_t)sizeof text / 2) {
        int32_t k = n - i < (int32_t)sizeof text / 2 ? n - i : (int32_t)sizeof text / 2;
        for (int32_t j = 0; j < k; ++j) {
            text[2 * j] = "0123456789abcdef"[data[i + j] >> 4];
            text[2 * j + 1] = "0123456789abcdef"[data[i + j] & 0xFu];
        }
        zo_port_write((const uint8_t *)text, (uint32_t)(2 * k));
    }
}

/* Sample n's bytes are its inputs' bytes, one input after the other. */
static void load_sample(int32_t n)
{
    const uint8_t *src = zo_infer_samples[n];
    for (int32_t i = 0; i < ZO_INFER_NUM_INPUTS; ++i) {
        memcpy(ZO_INFER_INPUT(i), src, (size_t)ZO_INFER_INPUT_BYTES(i));
        src += ZO_INFER_INPUT_BYTES(i);
    }
}

#if ZO_INFER_TIME_US > 0
static void put_line(const char *name, uint64_t a, uint64_t b)
{
    put(name);
    put(" ");
    put_u64(a);
    put(" ");
    put_u64(b);
    put("\n");
}

static void time_inference(void)
{
    uint32_t n = 1000000u; /* a 2-instruction loop: checks 1 us = 1000 instructions */
    uint64_t t0 = zo_port_time_us();
    __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    put_line("calibration", 2000000u, zo_port_time_us() - t0);
    uint32_t reps = 1u;
    uint64_t us;
    for (;;) {
        t0 = zo_port_time_us();
        for (uint32_t r = 0; r < reps; ++r) {
            load_sample(0);
            ZO_INFER_INVOKE();
        }
        us = zo_port_time_us() - t0;
        if (us >= ZO_INFER_TIME_US || reps >= (1u << 16)) {
            break;
        }
        reps *= 2u;
    }
    put_line("invoke", reps, us);
    t0 = zo_port_time_us(); /* the input copy alone, to subtract */
    for (uint32_t r = 0; r < reps; ++r) {
        load_sample(0);
        __asm volatile("" ::: "memory");
    }
    put_line("copy", reps, zo_port_time_us() - t0);
#if ZO_INFER_PROFILE
    for (int32_t s = 0; s < ZO_INFER_NUM_STEPS; ++s) { /* each kernel call alone, in nanoseconds */
        t0 = zo_port_time_us();
        for (uint32_t r = 0; r < reps; ++r) {
            ZO_INFER_RUN_STEPS(s, s + 1);
        }
        put_line("step", (uint64_t)s, (zo_port_time_us() - t0) * 1000u / reps);
    }
#endif
}
#endif

#ifdef ZO_INFER_TRACE
/* benchmarks/mve_trace.py counts the instructions executed between the two calls of this. */
void zo_infer_mark(void);
__attribute__((noinline)) void zo_infer_mark(void)
{
    __asm volatile("" ::: "memory");
}
#endif

int main(void)
{
    zo_port_init();
    (void)ZO_INFER_INIT();
#ifdef ZO_INFER_TRACE
    load_sample(0); /* one inference of sample 0 between two marks, then stop */
    zo_infer_mark();
    ZO_INFER_INVOKE();
    zo_infer_mark();
    put("end\n");
    zo_port_exit(0);
#endif
    for (int32_t n = 0; n < ZO_INFER_SAMPLES; ++n) {
        load_sample(n);
        ZO_INFER_INVOKE();
        for (int32_t o = 0; o < ZO_INFER_NUM_OUTPUTS; ++o) {
            put("out ");
            put_u64((uint64_t)n);
            put(" ");
            put_u64((uint64_t)o);
            put(" ");
            put_hex((const uint8_t *)ZO_INFER_OUTPUT(o), ZO_INFER_OUTPUT_BYTES(o));
            put("\n");
        }
    }
#if ZO_INFER_TIME_US > 0
    time_inference();
#endif
    put("end\n");
    zo_port_exit(0);
}
