/* zo_kernels_int16_mve.c - Helium (MVE) 16x8 CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED for the
 * Cortex-M55, bit-exact with the portable kernels (zo_kernels_int16.c), and so with TFLM's reference
 * kernels.  Compiled to nothing where ZO_KERNELS_MVE is not set (zo_kernels_base.h).
 *
 * - CONV_2D and FULLY_CONNECTED: int16 x int8 dot products of 8 lanes (VMLALDAVA: 64-bit sums, as
 *   the portable kernels' int64 accumulator, so exact), two output channels sharing each input
 *   vector.  A convolution gathers each output pixel's receptive field (per group) into a patch on
 *   the stack, padded taps as zeros (im2col), and takes one dot product per output channel over
 *   it; a 1x1 filter over whole pixels reads the input in place.  Filters of more than
 *   ZO_S16_PATCH_MAX values run the portable kernel.
 * - DEPTHWISE_CONV_2D with depth multiplier 1: 8 channels in int16 lanes, even and odd ones widened
 *   by VMULLB/VMULLT into int32 sums; a product fits 2^22, so the sum over at most
 *   ZO_S16_DW_TAPS_MAX taps fits int32 and equals the int64 one.  Other depth
 *   multipliers and larger filters run the portable kernel.
 * - The requantisation is the portable one (zo_fixedpoint.h), per output value.
 * Tails are predicated (VCTP): no load goes past a buffer, inactive lanes read as 0.
 */
#include "zo_kernels.h"

#if defined(ZO_KERNELS_MVE)

#include <arm_mve.h>
#include <stddef.h>

#include "zo_fixedpoint.h"

/* int16 values of one output pixel's receptive field on the stack (2 KiB); larger filters run the
 * portable kernel */
#define ZO_S16_PATCH_MAX 1024
/* taps whose int16 x int8 products (each within 2^22 in magnitude) sum exactly in int32 */
#define ZO_S16_DW_TAPS_MAX 511

/* acc + sum x[i] * w[i] over i < n: whole blocks of 8 unpredicated, the tail predicated. */
static inline int64_t zo_dot_s16_s8(int64_t acc, const int16_t *x, const int8_t *w, int32_t n)
{
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        acc = vmlaldavaq_s16(acc, vldrhq_s16(x + i), vldrbq_s16(w + i));
    }
    if (i < n) {
        const mve_pred16_t p = vctp16q((uint32_t)(n - i));
        acc = vmlaldavaq_p_s16(acc, vldrhq_z_s16(x + i, p), vldrbq_z_s16(w + i, p), p);
    }
    return acc;
}

/* The same for two weight rows sharing each input vector. */
static inline void zo_dot2_s16_s8(int64_t *acc0, int64_t *acc1, const int16_t *x, const int8_t *w0,
                                  const int8_t *w1, int32_t n)
{
    int64_t a0 = *acc0, a1 = *acc1;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const int16x8_t xv = vldrhq_s16(x + i);
        a0 = vmlaldavaq_s16(a0, xv, vldrbq_s16(w0 + i));
        a1 = vmlaldavaq_s16(a1, xv, vldrbq_s16(w1 + i));
    }
    if (i < n) {
        const mve_pred16_t p = vctp16q((uint32_t)(n - i));
        const int16x8_t xv = vldrhq_z_s16(x + i, p);
        a0 = vmlaldavaq_p_s16(a0, xv, vldrbq_z_s16(w0 + i, p), p);
        a1 = vmlaldavaq_p_s16(a1, xv, vldrbq_z_s16(w1 + i, p), p);
    }
    *acc0 = a0;
    *acc1 = a1;
}

/* The first and one past the last filter index k whose input coordinate o * stride - pad + k * dilation
 * lies in [0, size). */
static inline void zo_valid_taps(int32_t o, int32_t stride, int32_t pad, int32_t dilation, int32_t taps, int32_t size,
                                 int32_t *first, int32_t *end)
{
    const int32_t start = o * stride - pad;
    int32_t k0 = 0, k1 = taps;
    while (k0 < taps && start + k0 * dilation < 0) {
        ++k0;
    }
    while (k1 > k0 && start + (k1 - 1) * dilation >= size) {
        --k1;
    }
    *first = k0;
    *end = k1;
}

/* One output pixel's receptive field for the input channels [c0, c0 + fc), in the filter's order
 * (rows, taps, channels), padded taps as zeros: their products are 0, as the skipped taps of the
 * portable kernel add nothing (the input zero point of a 16x8 layer is 0). */
static void zo_patch_s16(const zo_conv2d_params_t *p, const int16_t *input, int32_t oy, int32_t ox, int32_t c0,
                         int16_t *patch)
{
    const int32_t fc = p->filter_c;
    for (int32_t ky = 0; ky < p->filter_h; ++ky) {
        const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dilation_h;
        for (int32_t kx = 0; kx < p->filter_w; ++kx) {
            const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dilation_w;
            int16_t *dst = patch + ((size_t)ky * (size_t)p->filter_w + (size_t)kx) * (size_t)fc;
            if (iy < 0 || iy >= p->input_h || ix < 0 || ix >= p->input_w) {
                for (int32_t i = 0; i < fc; i += 8) {
                    vstrhq_p_s16(dst + i, vdupq_n_s16(0), vctp16q((uint32_t)(fc - i)));
                }
                continue;
            }
            const int16_t *src = input + ((size_t)iy * (size_t)p->input_w + (size_t)ix) * (size_t)p->input_c + (size_t)c0;
            for (int32_t i = 0; i < fc; i += 8) {
                const mve_pred16_t pr = vctp16q((uint32_t)(fc - i));
                vstrhq_p_s16(dst + i, vldrhq_z_s16(src + i, pr), pr);
            }
        }
    }
}

void zo_conv2d_s16(const zo_conv2d_params_t *p, const int16_t *input, const int8_t *filter, const int64_t *bias,
                   int16_t *output)
{
    const int32_t fc = p->filter_c;
    const int32_t k = p->filter_h * p->filter_w * fc;
    if (k > ZO_S16_PATCH_MAX) {
        zo_conv2d_s16_portable(p, input, filter, bias, output);
        return;
    }
    const int32_t groups = p->input_c / fc;
    const int32_t per_group = p->output_c / groups;
    /* a 1x1 filter over whole pixels reads the input in place (its padding is always 0) */
    const int direct = p->filter_h == 1 && p->filter_w == 1 && groups == 1;
    int16_t patch[ZO_S16_PATCH_MAX];
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int16_t *y = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c;
            for (int32_t g = 0; g < groups; ++g) {
                const int16_t *x = patch;
                if (direct) {
                    x = input + ((size_t)(oy * p->stride_h) * (size_t)p->input_w + (size_t)(ox * p->stride_w))
                                    * (size_t)p->input_c;
                } else {
                    zo_patch_s16(p, input, oy, ox, g * fc, patch);
                }
                const int32_t end = (g + 1) * per_group;
                int32_t oc = g * per_group;
                for (; oc + 2 <= end; oc += 2) {
                    const int8_t *w = filter + (size_t)oc * (size_t)k;
                    int64_t acc0 = 0, acc1 = 0;
                    zo_dot2_s16_s8(&acc0, &acc1, x, w, w + k, k);
                    y[oc] = zo_requant_s16(acc0, bias, oc, p->multiplier, p->shift, p->act_min, p->act_max);
                    y[oc + 1] = zo_requant_s16(acc1, bias, oc + 1, p->multiplier, p->shift, p->act_min, p->act_max);
                }
                if (oc < end) {
                    const int64_t acc = zo_dot_s16_s8(0, x, filter + (size_t)oc * (size_t)k, k);
                    y[oc] = zo_requant_s16(acc, bias, oc, p->multiplier, p->shift, p->act_min, p->act_max);
                }
            }
        }
    }
}

void zo_depthwise_conv2d_s16(const zo_depthwise_conv2d_params_t *p, const int16_t *input, const int8_t *filter,
                             const int64_t *bias, int16_t *output)
{
    if (p->depth_multiplier != 1 || p->filter_h * p->filter_w > ZO_S16_DW_TAPS_MAX) {
        zo_depthwise_conv2d_s16_portable(p, input, filter, bias, output);
        return;
    }
    const int32_t channels = p->output_c;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        int32_t ky0, ky1;
        zo_valid_taps(oy, p->stride_h, p->pad_h, p->dilation_h, p->filter_h, p->input_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int32_t kx0, kx1;
            zo_valid_taps(ox, p->stride_w, p->pad_w, p->dilation_w, p->filter_w, p->input_w, &kx0, &kx1);
            int16_t *y = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)channels;
            for (int32_t c = 0; c < channels; c += 8) {
                const mve_pred16_t pr = vctp16q((uint32_t)(channels - c));
                /* even and odd channels of the 8, widened to int32 by the multiplies */
                int32x4_t even = vdupq_n_s32(0), odd = vdupq_n_s32(0);
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dilation_h;
                    const int32_t ix = ox * p->stride_w - p->pad_w + kx0 * p->dilation_w;
                    const int16_t *x = input + ((size_t)iy * (size_t)p->input_w + (size_t)ix) * (size_t)channels + (size_t)c;
                    const int8_t *w = filter + ((size_t)ky * (size_t)p->filter_w + (size_t)kx0) * (size_t)channels + (size_t)c;
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        const int16x8_t xv = vldrhq_z_s16(x, pr);
                        const int16x8_t wv = vldrbq_z_s16(w, pr);
                        even = vaddq_s32(even, vmullbq_int_s16(xv, wv));
                        odd = vaddq_s32(odd, vmulltq_int_s16(xv, wv));
                        x += (size_t)p->dilation_w * (size_t)channels;
                        w += channels;
                    }
                }
                int32_t sums[2][4];
                vstrwq_s32(sums[0], even);
                vstrwq_s32(sums[1], odd);
                const int32_t lanes = channels - c < 8 ? channels - c : 8;
                for (int32_t l = 0; l < lanes; ++l) {
                    y[c + l] = zo_requant_s16(sums[l & 1][l >> 1], bias, c + l, p->multiplier, p->shift, p->act_min,
                                              p->act_max);
                }
            }
        }
    }
}

void zo_fully_connected_s16(const zo_fully_connected_params_t *p, const int16_t *input, const int8_t *weights,
                            const int64_t *bias, int16_t *output)
{
    for (int32_t r = 0; r < p->rows; ++r) {
        const int16_t *x = input + (size_t)r * (size_t)p->depth;
        int16_t *y = output + (size_t)r * (size_t)p->units;
        int32_t u = 0;
        for (; u + 2 <= p->units; u += 2) {
            const int8_t *w = weights + (size_t)u * (size_t)p->depth;
            int64_t acc0 = 0, acc1 = 0;
            zo_dot2_s16_s8(&acc0, &acc1, x, w, w + p->depth, p->depth);
            y[u] = zo_requant_s16(acc0, bias, u, p->multiplier, p->shift, p->act_min, p->act_max);
            y[u + 1] = zo_requant_s16(acc1, bias, u + 1, p->multiplier, p->shift, p->act_min, p->act_max);
        }
        if (u < p->units) {
            const int64_t acc = zo_dot_s16_s8(0, x, weights + (size_t)u * (size_t)p->depth, p->depth);
            y[u] = zo_requant_s16(acc, bias, u, p->multiplier, p->shift, p->act_min, p->act_max);
        }
    }
}

#endif /* ZO_KERNELS_MVE */
