/* zo_kernels_quantize.c - QUANTIZE at a model's edges: uint8 -> int8 and int8 -> uint8
 * requantization, float32 -> int8 quantization, bit-exact with the TFLite Micro reference kernels. */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

/* TFLM's Requantize: out = clamp(MultiplyByQuantizedMultiplier(in - input_zp) + output_zp).  Its
 * fast path for a pure 128 shift (in ^ 0x80) gives the same bytes: the multiplier is then exactly 1. */
void zo_requantize_u8_s8(const zo_requantize_params_t *p, const uint8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp;
        output[i] = (int8_t)zo_clamp32(v, -128, 127);
    }
}

void zo_requantize_s8_u8(const zo_requantize_params_t *p, const int8_t *input, uint8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp;
        output[i] = (uint8_t)zo_clamp32(v, 0, 255);
    }
}

/* Any |v| beyond this gives a saturated int8 whatever the zero point; clamping first keeps the
 * int32 conversion defined (TFLM's cast is undefined past int32, e.g. for infinities). */
#define ZO_QUANTIZE_LIMIT 1024.0f

/* std::round on a float: halves away from zero.  For |v| <= 1024 the truncation t is exact and
 * so is v - t (Sterbenz), so the comparison with 0.5 decides the rounding exactly. */
static int32_t zo_round_half_away(float v)
{
    int32_t t = (int32_t)v;
    const float frac = v - (float)t;
    if (frac >= 0.5f) {
        t += 1;
    } else if (frac <= -0.5f) {
        t -= 1;
    }
    return t;
}

/* TFLM's AffineQuantize: out = clamp(round(x / scale) + zero_point), the division in float32.
 * NaN becomes the zero point. */
void zo_quantize_f32_s8(const zo_quantize_params_t *p, const float *input, int8_t *output)
{
    const float scale = p->scale;
    for (int32_t i = 0; i < p->size; ++i) {
        float v = input[i] / scale;
        if (v != v) {
            v = 0.0f;
        } else if (v > ZO_QUANTIZE_LIMIT) {
            v = ZO_QUANTIZE_LIMIT;
        } else if (v < -ZO_QUANTIZE_LIMIT) {
            v = -ZO_QUANTIZE_LIMIT;
        }
        output[i] = (int8_t)zo_clamp32(zo_round_half_away(v) + p->zero_point, -128, 127);
    }
}
