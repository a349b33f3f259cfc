/* zo_kernels_lstm.c - UNIDIRECTIONAL_SEQUENCE_LSTM, int8 input, weights and hidden state, int16
 * cell state, bit-exact with TFLite Micro's integer path (lstm_eval.h, lstm_eval.cc).
 *
 * TFLM computes each stage on whole vectors in four scratch buffers. Every stage is element-wise
 * per unit once the gates' matrix products are done, so this kernel runs one unit at a time with
 * the same int16 intermediates and needs no scratch: the new hidden state goes straight to the
 * output row of the step and becomes the state (copied) once every unit has read the old one.
 * On the Cortex-M55 the gates' row products are Helium dot products (zo_kernels_mve.h).
 */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>
#include <string.h>

#if defined(ZO_KERNELS_MVE)
#include "zo_kernels_mve.h"
#endif

enum { ZO_GATE_INPUT, ZO_GATE_FORGET, ZO_GATE_CELL, ZO_GATE_OUTPUT };

/* sigmoid(i / 24) in Q0.16 for i = 0..255: the table TFLM's int16 logistic and tanh interpolate
 * (tensorflow/lite/kernels/internal/common.h, Apache-2.0; not reproducible from a formula). */
static const uint16_t zo_sigmoid_table[256] = {
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149,
    40794, 41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369,
    47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409, 51865, 52311, 52745, 53169,
    53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370,
    60565, 60753, 60935, 61110, 61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302,
    62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186, 63279, 63368, 63454, 63536,
    63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786,
    64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079,
    65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234, 65246, 65258,
    65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433,
    65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474,
    65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498,
    65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522,
    65523, 65523, 65524, 65524, 65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528,
    65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530, 65530, 65530, 65531, 65531,
    65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534,
    65534, 65534, 65534, 65535,
};

static int16_t zo_sat16(int32_t v) { return (int16_t)zo_clamp32(v, -32768, 32767); }

/* TFLM's int16 Logistic of an input already scaled to Q3.12 x 3: Q0.15 in [0, 32767]. */
static int16_t zo_sigmoid_s16(int32_t v)
{
    const uint32_t a = v < 0 ? (uint32_t)(-v) : (uint32_t)v;
    const uint32_t k = a >> 9;
    uint32_t r = 0x7FFFu << 10;
    if (k < 255) {
        const uint32_t lo = zo_sigmoid_table[k], hi = zo_sigmoid_table[k + 1];
        r = (lo << 9) + (a & 0x1FFu) * (hi - lo);
    }
    r = v >= 0 ? r + (1u << 9) : (1u << 25) - r + (1u << 9) - 1u;
    return (int16_t)(r >> 10);
}

/* TFLM's int16 Tanh of a scaled input (tanh(x) = 2 sigmoid(2x) - 1): Q0.15. */
static int16_t zo_tanh_s16(int32_t v)
{
    const uint32_t a = v < 0 ? (uint32_t)(-v) : (uint32_t)v;
    const uint32_t k = a >> 8;
    int32_t r = (int32_t)(0xFFFFu << 8);
    if (k < 255) {
        const uint32_t lo = zo_sigmoid_table[k], hi = zo_sigmoid_table[k + 1];
        r = (int32_t)((lo << 8) + (a & 0xFFu) * (hi - lo));
    }
    r = v >= 0 ? r - (1 << 23) + (1 << 7) : -r + (1 << 23) + (1 << 7) - 1;
    return (int16_t)(r >> 8); /* arithmetic shift, as TFLM's */
}

/* One row of a fully connected layer to int16 Q3.12: w . (x - zp) (+ bias), requantized, clamped. */
static int16_t zo_lstm_fc(const int8_t *x, int32_t zp, const int8_t *w, int32_t depth, const int32_t *bias,
                          int32_t multiplier, int32_t shift)
{
#if defined(ZO_KERNELS_MVE)
    int32_t acc = zo_mve_dot_s8_zp(x, zp, w, depth);
#else
    int32_t acc = zo_dot_s8_zp(x, zp, w, depth);
#endif
    if (bias != NULL) {
        acc = zo_wrap_add(acc, *bias);
    }
    return zo_sat16(zo_mbqm(acc, multiplier, shift));
}

/* A gate of unit j: input and recurrent products to Q3.12, their saturating sum, then the
 * activation's input scaling (x 3, TFLM's scale power -12) and the sigmoid or tanh. */
static int16_t zo_lstm_gate(const zo_lstm_params_t *p, int32_t g, int32_t j, const int8_t *x, const int8_t *h,
                            const int8_t *input_weights, const int8_t *recurrent_weights, const int32_t *bias)
{
    const int16_t a = zo_lstm_fc(x, p->input_zp, input_weights + (size_t)j * (size_t)p->input_size, p->input_size,
                                 bias + j, p->input_multiplier[g], p->input_shift[g]);
    const int16_t r = zo_lstm_fc(h, p->hidden_zp, recurrent_weights + (size_t)j * (size_t)p->units, p->units, NULL,
                                 p->recurrent_multiplier[g], p->recurrent_shift[g]);
    const int32_t s = (int32_t)zo_sat16((int32_t)a + (int32_t)r) * 3;
    return g == ZO_GATE_CELL ? zo_tanh_s16(s) : zo_sigmoid_s16(s);
}

/* The int16 x int16 products of the cell update, to the cell state's scale. */
static int16_t zo_lstm_mul16(int16_t a, int16_t b, int32_t multiplier, int32_t shift)
{
    return zo_sat16(zo_mbqm((int32_t)a * (int32_t)b, multiplier, shift));
}

#if defined(ZO_KERNELS_MVE)
/* ---- Helium: four units at a time, lane for lane the scalar functions above ---------------- */

static inline int32x4_t zo_mve_sat16(int32x4_t v)
{
    return vmaxq_s32(vminq_s32(v, vdupq_n_s32(32767)), vdupq_n_s32(-32768));
}

/* zo_sigmoid_s16 (table step 9 bits) or zo_tanh_s16 (8 bits) on 4 lanes: the table read by gathers. */
static inline int32x4_t zo_mve_sigmoid_tanh_s16(int32x4_t v, int tanh)
{
    const uint32x4_t a = vreinterpretq_u32_s32(vabsq_s32(v));
    const uint32x4_t k = tanh ? vshrq_n_u32(a, 8) : vshrq_n_u32(a, 9);
    const mve_pred16_t inside = vcmphiq_u32(vdupq_n_u32(255u), k);
    const uint32x4_t kc = vminq_u32(k, vdupq_n_u32(254u));
    const uint32x4_t lo = vldrhq_gather_shifted_offset_u32(zo_sigmoid_table, kc);
    const uint32x4_t hi = vldrhq_gather_shifted_offset_u32(zo_sigmoid_table, vaddq_n_u32(kc, 1u));
    const uint32x4_t frac = vandq_u32(a, vdupq_n_u32(tanh ? 0xFFu : 0x1FFu));
    const uint32x4_t base = tanh ? vshlq_n_u32(lo, 8) : vshlq_n_u32(lo, 9);
    uint32x4_t r = vaddq_u32(base, vmulq_u32(frac, vsubq_u32(hi, lo)));
    r = vpselq_u32(r, vdupq_n_u32(tanh ? 0xFFFFu << 8 : 0x7FFFu << 10), inside);
    const mve_pred16_t nonneg = vcmpgeq_n_s32(v, 0);
    int32x4_t out;
    if (tanh) {
        const int32x4_t ri = vreinterpretq_s32_u32(r);
        const int32x4_t pos = vaddq_n_s32(ri, -(1 << 23) + (1 << 7));
        const int32x4_t neg = vsubq_s32(vdupq_n_s32((1 << 23) + (1 << 7) - 1), ri);
        out = vshrq_n_s32(vpselq_s32(pos, neg, nonneg), 8);
    } else {
        const uint32x4_t pos = vaddq_n_u32(r, 1u << 9);
        const uint32x4_t neg = vsubq_u32(vdupq_n_u32((1u << 25) + (1u << 9) - 1u), r);
        out = vreinterpretq_s32_u32(vshrq_n_u32(vpselq_u32(pos, neg, nonneg), 10));
    }
    return out;
}

/* zo_lstm_gate for units j..j+3 (all inside the layer). */
static inline int32x4_t zo_mve_lstm_gate(const zo_lstm_params_t *p, int32_t g, int32_t j, const int8_t *x,
                                         const int8_t *h, const int8_t *input_weights,
                                         const int8_t *recurrent_weights, const int32_t *bias)
{
    int32_t in[4], rec[4];
    zo_mve_dot4_s8_zp(x, p->input_zp, input_weights + (size_t)j * (size_t)p->input_size, (size_t)p->input_size,
                      p->input_size, in);
    zo_mve_dot4_s8_zp(h, p->hidden_zp, recurrent_weights + (size_t)j * (size_t)p->units, (size_t)p->units, p->units,
                      rec);
    int32x4_t a = vaddq_s32(vldrwq_s32(in), vldrwq_s32(bias + j)); /* wrapping, as zo_wrap_add */
    a = zo_mve_sat16(zo_mve_mbqm(a, vdupq_n_s32(p->input_multiplier[g]), vdupq_n_s32(p->input_shift[g])));
    int32x4_t r = vldrwq_s32(rec);
    r = zo_mve_sat16(zo_mve_mbqm(r, vdupq_n_s32(p->recurrent_multiplier[g]), vdupq_n_s32(p->recurrent_shift[g])));
    const int32x4_t sum = vmulq_n_s32(zo_mve_sat16(vaddq_s32(a, r)), 3);
    return zo_mve_sigmoid_tanh_s16(sum, g == ZO_GATE_CELL);
}

/* One time step's units j..j+3: the gates, the cell state, the new hidden values into y. */
static void zo_mve_lstm_units(const zo_lstm_params_t *p, int32_t j, const int8_t *x, const int8_t *h,
                              const int8_t *const *w, const int8_t *const *r, const int32_t *const *bias, int16_t *c,
                              int8_t *y)
{
    const int32x4_t i_gate = zo_mve_lstm_gate(p, ZO_GATE_INPUT, j, x, h, w[0], r[0], bias[0]);
    const int32x4_t f_gate = zo_mve_lstm_gate(p, ZO_GATE_FORGET, j, x, h, w[1], r[1], bias[1]);
    const int32x4_t c_gate = zo_mve_lstm_gate(p, ZO_GATE_CELL, j, x, h, w[2], r[2], bias[2]);
    const int32x4_t o_gate = zo_mve_lstm_gate(p, ZO_GATE_OUTPUT, j, x, h, w[3], r[3], bias[3]);
    const int32x4_t cj_old = vldrhq_s32(c + j);
    const int32x4_t fc = zo_mve_sat16(zo_mve_mbqm(vmulq_s32(f_gate, cj_old), vdupq_n_s32(p->forget_multiplier),
                                                  vdupq_n_s32(p->forget_shift)));
    const int32x4_t ic = zo_mve_sat16(zo_mve_mbqm(vmulq_s32(i_gate, c_gate), vdupq_n_s32(p->input_gate_multiplier),
                                                  vdupq_n_s32(p->input_gate_shift)));
    int32x4_t cj = zo_mve_sat16(vaddq_s32(fc, ic));
    if (p->use_cell_clip) {
        cj = vmaxq_s32(vminq_s32(cj, vdupq_n_s32(p->cell_clip)), vdupq_n_s32(-p->cell_clip));
    }
    vstrhq_s32(c + j, cj);
    const int32_t round = p->tanh_shift > 0 ? (int32_t)1 << (p->tanh_shift - 1) : 0;
    const int32x4_t scaled = vshlq_s32(vaddq_n_s32(vmulq_n_s32(cj, p->tanh_multiplier), round),
                                       vdupq_n_s32(-p->tanh_shift));
    const int32x4_t tanh_c = zo_mve_sigmoid_tanh_s16(scaled, 1);
    int32x4_t v = zo_mve_mbqm(vmulq_s32(tanh_c, o_gate), vdupq_n_s32(p->hidden_multiplier),
                              vdupq_n_s32(p->hidden_shift));
    v = vmaxq_s32(vminq_s32(vaddq_n_s32(v, p->hidden_zp), vdupq_n_s32(127)), vdupq_n_s32(-128));
    vstrbq_s32(y + j, v);
}
#endif

void zo_lstm_s8_s16(const zo_lstm_params_t *p, const int8_t *input, const int8_t *w_input, const int8_t *w_forget,
                    const int8_t *w_cell, const int8_t *w_output, const int8_t *r_input, const int8_t *r_forget,
                    const int8_t *r_cell, const int8_t *r_output, const int32_t *b_input, const int32_t *b_forget,
                    const int32_t *b_cell, const int32_t *b_output, int8_t *hidden, int16_t *cell, int8_t *output)
{
    const size_t n = (size_t)p->units, depth = (size_t)p->input_size;
    const int32_t round = p->tanh_shift > 0 ? (int32_t)1 << (p->tanh_shift - 1) : 0;
    /* Every batch row runs its own sequence (rows never mix), time-major or not. */
    for (int32_t b = 0; b < p->batches; ++b) {
        int8_t *h = hidden + (size_t)b * n;
        int16_t *c = cell + (size_t)b * n;
        for (int32_t t = 0; t < p->time_steps; ++t) {
            const size_t row = p->time_major ? (size_t)t * (size_t)p->batches + (size_t)b
                                             : (size_t)b * (size_t)p->time_steps + (size_t)t;
            const int8_t *x = input + row * depth;
            int8_t *y = output + row * n;
            int32_t j = 0;
#if defined(ZO_KERNELS_MVE)
            {
                const int8_t *const w[4] = {w_input, w_forget, w_cell, w_output};
                const int8_t *const r[4] = {r_input, r_forget, r_cell, r_output};
                const int32_t *const bias[4] = {b_input, b_forget, b_cell, b_output};
                const int biased = b_input != NULL && b_forget != NULL && b_cell != NULL && b_output != NULL;
                for (; biased && j + 4 <= p->units; j += 4) {
                    zo_mve_lstm_units(p, j, x, h, w, r, bias, c, y);
                }
            }
#endif
            for (; j < p->units; ++j) {
                const int16_t i_gate = zo_lstm_gate(p, ZO_GATE_INPUT, j, x, h, w_input, r_input, b_input);
                const int16_t f_gate = zo_lstm_gate(p, ZO_GATE_FORGET, j, x, h, w_forget, r_forget, b_forget);
                const int16_t c_gate = zo_lstm_gate(p, ZO_GATE_CELL, j, x, h, w_cell, r_cell, b_cell);
                const int16_t o_gate = zo_lstm_gate(p, ZO_GATE_OUTPUT, j, x, h, w_output, r_output, b_output);
                int16_t cj = zo_sat16((int32_t)zo_lstm_mul16(f_gate, c[j], p->forget_multiplier, p->forget_shift)
                                      + (int32_t)zo_lstm_mul16(i_gate, c_gate, p->input_gate_multiplier,
                                                               p->input_gate_shift));
                if (p->use_cell_clip) {
                    cj = (int16_t)zo_clamp32(cj, -p->cell_clip, p->cell_clip);
                }
                c[j] = cj;
                const int16_t tanh_c = zo_tanh_s16((cj * p->tanh_multiplier + round) >> p->tanh_shift);
                const int32_t v = zo_mbqm((int32_t)tanh_c * (int32_t)o_gate, p->hidden_multiplier, p->hidden_shift);
                y[j] = (int8_t)zo_clamp32(v + p->hidden_zp, -128, 127);
            }
            memcpy(h, y, n);
        }
    }
}
