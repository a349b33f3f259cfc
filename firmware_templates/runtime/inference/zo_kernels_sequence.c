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

/* The Helium building blocks (zo_kernels_mve.h) on the Cortex-M55, the scalar ones elsewhere: the
 * row products sum w * (x - zp) (wrapping int32), the state's shift towards older slots, and the
 * requantisation of up to 4 sums: TFLM's MultiplyByQuantizedMultiplier, + add_in, clamped to
 * [lo, hi], + add_out. */
#if defined(ZO_KERNELS_MVE)
#include "zo_kernels_mve.h"

#define ZO_SVDF_DOT_S8(x, zp, w, n) zo_mve_dot_s8_zp((x), (zp), (w), (n))
#define ZO_SVDF_DOT4_S8(x, zp, w, stride, n, out) zo_mve_dot4_s8_zp((x), (zp), (w), (stride), (n), (out))
#define ZO_SVDF_DOT_T(s, zp, w, n) \
    _Generic((s), int8_t *: zo_mve_dot_s8_zp, int16_t *: zo_mve_dot_s16_zp)((s), (zp), (w), (n))

static inline void zo_svdf_shift_state(uint8_t *state, size_t bytes, size_t element)
{
    zo_mve_copy_down(state, state + element, bytes - element);
}

static inline void zo_svdf_requant4(int32_t *v, int32_t n, int32_t multiplier, int32_t shift, int32_t add_in,
                                    int32_t lo, int32_t hi, int32_t add_out)
{
    const mve_pred16_t p = vctp32q((uint32_t)n);
    int32x4_t x = zo_mve_mbqm(vldrwq_z_s32(v, p), vdupq_n_s32(multiplier), vdupq_n_s32(shift));
    x = vminq_s32(vmaxq_s32(vaddq_n_s32(x, add_in), vdupq_n_s32(lo)), vdupq_n_s32(hi));
    vstrwq_p_s32(v, vaddq_n_s32(x, add_out), p);
}
#else
#define ZO_SVDF_DOT_S8(x, zp, w, n) zo_dot_s8_zp((x), (zp), (w), (n))
#define ZO_SVDF_DOT4_S8(x, zp, w, stride, n, out)                        \
    for (int32_t l4 = 0; l4 < 4; ++l4) {                                 \
        (out)[l4] = zo_dot_s8_zp((x), (zp), (w) + (size_t)l4 * (stride), (n)); \
    }
#define ZO_SVDF_DOT_T(s, zp, w, n) \
    _Generic((s), int8_t *: zo_dot_s8_zp, int16_t *: zo_dot_s16_zp)((s), (zp), (w), (n))

static inline void zo_svdf_shift_state(uint8_t *state, size_t bytes, size_t element)
{
    for (size_t i = 0; i + element < bytes; ++i) {
        state[i] = state[i + element];
    }
}

static inline void zo_svdf_requant4(int32_t *v, int32_t n, int32_t multiplier, int32_t shift, int32_t add_in,
                                    int32_t lo, int32_t hi, int32_t add_out)
{
    for (int32_t l = 0; l < n; ++l) {
        v[l] = zo_clamp32(zo_mbqm(v[l], multiplier, shift) + add_in, lo, hi) + add_out;
    }
}
#endif

/* The body shared by both state types (T = the element type of weights_time and the state). */
#define ZO_SVDF_BODY(T, T_MIN, T_MAX)                                                                  \
    const int32_t filters = p->num_filters, memory = p->memory_size;                                   \
    const size_t state_len = (size_t)p->batches * (size_t)filters * (size_t)memory;                    \
    /* Shift the whole state left by one; each filter's newest slot is then overwritten. */             \
    if (state_len > 1) {                                                                               \
        zo_svdf_shift_state((uint8_t *)state, state_len * sizeof(T), sizeof(T));                       \
    }                                                                                                  \
    for (int32_t b = 0; b < p->batches; ++b) {                                                         \
        const int8_t *x = input + (size_t)b * (size_t)p->input_size;                                   \
        T *st = state + (size_t)b * (size_t)filters * (size_t)memory;                                  \
        /* Feature matmul: one new activation per filter, in the state's quantization; TFLM adds the   \
         * zero point after clamping and narrows without saturating. Four filters at a time. */       \
        for (int32_t f0 = 0; f0 < filters; f0 += 4) {                                                 \
            const int32_t n = filters - f0 < 4 ? filters - f0 : 4;                                     \
            int32_t acc[4];                                                                            \
            const int8_t *w = weights_feature + (size_t)f0 * (size_t)p->input_size;                    \
            if (n == 4) {                                                                              \
                ZO_SVDF_DOT4_S8(x, p->input_zp, w, (size_t)p->input_size, p->input_size, acc);         \
            } else {                                                                                   \
                for (int32_t l = 0; l < n; ++l) {                                                      \
                    acc[l] = ZO_SVDF_DOT_S8(x, p->input_zp, w + (size_t)l * (size_t)p->input_size,     \
                                            p->input_size);                                            \
                }                                                                                      \
            }                                                                                          \
            zo_svdf_requant4(acc, n, p->multiplier_1, p->shift_1, 0, T_MIN, T_MAX, p->state_zp);       \
            for (int32_t l = 0; l < n; ++l) {                                                          \
                st[(size_t)(f0 + l) * (size_t)memory + (size_t)(memory - 1)] = (T)acc[l];              \
            }                                                                                          \
        }                                                                                              \
        /* Time: each filter's memory against its time weights, summed over rank per unit: a unit's    \
         * rank filters are consecutive rows, so one product over rank * memory values (the wrapping   \
         * sum of the rows' products).  TFLM's int8 path clamps to int8 only (no fused activation). */ \
        const int32_t span = p->rank * memory;                                                         \
        for (int32_t u0 = 0; u0 < p->num_units; u0 += 4) {                                             \
            const int32_t n = p->num_units - u0 < 4 ? p->num_units - u0 : 4;                           \
            int32_t sum[4];                                                                            \
            for (int32_t l = 0; l < n; ++l) {                                                          \
                const size_t at = (size_t)(u0 + l) * (size_t)span;                                     \
                T *s = st + at;                                                                        \
                const int32_t dot = ZO_SVDF_DOT_T(s, p->state_zp, weights_time + at, span);            \
                sum[l] = zo_wrap_add(bias != NULL ? bias[u0 + l] : 0, dot);                            \
            }                                                                                          \
            zo_svdf_requant4(sum, n, p->multiplier_2, p->shift_2, p->output_zp, -128, 127, 0);         \
            for (int32_t l = 0; l < n; ++l) {                                                          \
                output[(size_t)b * (size_t)p->num_units + (size_t)(u0 + l)] = (int8_t)sum[l];          \
            }                                                                                          \
        }                                                                                              \
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
    int32_t i = 0;
#if defined(ZO_KERNELS_MVE)
    const int32x4_t m = vdupq_n_s32(p->multiplier), sh = vdupq_n_s32(p->shift);
    for (; i + 4 <= p->size; i += 4) {
        int32x4_t v = zo_mve_mbqm(vsubq_n_s32(vldrhq_s32(input + i), p->input_zp), m, sh);
        v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, p->output_zp), vdupq_n_s32(-128)), vdupq_n_s32(127));
        vstrbq_s32(output + i, v);
    }
#endif
    for (; i < p->size; ++i) {
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp;
        output[i] = (int8_t)zo_clamp32(v, -128, 127);
    }
}
