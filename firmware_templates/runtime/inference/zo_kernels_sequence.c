/* zo_kernels_sequence.c - stateful sequence ops: SVDF (int8 input, int8 or int16 activation
 * state), bit-exact with TFLite Micro's integer reference (svdf_common.cc), and the QUANTIZE
 * int16 -> int8 that feeds keyword models' int16 input to them.
 *
 * The state is a variable tensor in the model's state array: [batches][filters][memory], the
 * newest activation last in each filter's row. It is updated in place on every call.
 */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>

/* The body shared by both state types (T = the element type of weights_time and the state). */
#define ZO_SVDF_BODY(T, T_MIN, T_MAX)                                                              \
    const int32_t filters = p->num_filters, memory = p->memory_size;                               \
    const size_t state_len = (size_t)p->batches * (size_t)filters * (size_t)memory;                \
    /* Shift the whole state left by one; each filter's newest slot is then overwritten. */         \
    for (size_t i = 0; i + 1 < state_len; ++i) {                                                   \
        state[i] = state[i + 1];                                                                   \
    }                                                                                              \
    for (int32_t b = 0; b < p->batches; ++b) {                                                     \
        const int8_t *x = input + (size_t)b * (size_t)p->input_size;                               \
        T *st = state + (size_t)b * (size_t)filters * (size_t)memory;                              \
        /* Feature matmul: one new activation per filter, in the state's quantization. */          \
        for (int32_t f = 0; f < filters; ++f) {                                                    \
            const int8_t *w = weights_feature + (size_t)f * (size_t)p->input_size;                 \
            int32_t acc = 0;                                                                       \
            for (int32_t c = 0; c < p->input_size; ++c) {                                          \
                acc += (int32_t)w[c] * ((int32_t)x[c] - p->input_zp);                              \
            }                                                                                      \
            acc = zo_clamp32(zo_mbqm(acc, p->multiplier_1, p->shift_1), T_MIN, T_MAX);             \
            /* TFLM adds the zero point after clamping and narrows without saturating. */          \
            st[(size_t)f * (size_t)memory + (size_t)(memory - 1)] = (T)(p->state_zp + acc);        \
        }                                                                                          \
        /* Time: each filter's memory against its time weights, summed over rank per unit. */      \
        for (int32_t u = 0; u < p->num_units; ++u) {                                               \
            int32_t sum = bias != NULL ? bias[u] : 0;                                              \
            for (int32_t r = 0; r < p->rank; ++r) {                                                \
                const size_t f = (size_t)u * (size_t)p->rank + (size_t)r;                          \
                const T *wt = weights_time + f * (size_t)memory;                                   \
                const T *s = st + f * (size_t)memory;                                              \
                int32_t dot = 0;                                                                   \
                for (int32_t j = 0; j < memory; ++j) {                                             \
                    dot += (int32_t)wt[j] * ((int32_t)s[j] - p->state_zp);                         \
                }                                                                                  \
                sum = zo_wrap_add(sum, dot);                                                       \
            }                                                                                      \
            /* TFLM's int8 path clamps to int8 only: the fused activation is not applied. */       \
            const int32_t y = zo_mbqm(sum, p->multiplier_2, p->shift_2) + p->output_zp;            \
            output[(size_t)b * (size_t)p->num_units + (size_t)u] = (int8_t)zo_clamp32(y, -128, 127); \
        }                                                                                          \
    }

void zo_svdf_s8(const zo_svdf_params_t *p, const int8_t *input, const int8_t *weights_feature,
                const int8_t *weights_time, const int32_t *bias, int8_t *state, int8_t *output)
{
    ZO_SVDF_BODY(int8_t, -128, 127)
}

void zo_svdf_s8_s16(const zo_svdf_params_t *p, const int8_t *input, const int8_t *weights_feature,
                    const int16_t *weights_time, const int32_t *bias, int16_t *state, int8_t *output)
{
    ZO_SVDF_BODY(int16_t, -32768, 32767)
}

/* QUANTIZE int16 -> int8, TFLM's Requantize: clamp(MultiplyByQuantizedMultiplier(in - input_zp)
 * + output_zp). */
void zo_requantize_s16_s8(const zo_requantize_params_t *p, const int16_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp;
        output[i] = (int8_t)zo_clamp32(v, -128, 127);
    }
}
