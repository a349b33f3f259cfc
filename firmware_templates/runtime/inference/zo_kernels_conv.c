/* zo_kernels_conv.c - CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED, int8, bit-exact with the
 * TFLite Micro reference kernels.
 *
 * TFLM accumulates sum(w * (x - input_zp)) + bias in int32 and requantizes.  Integer addition is
 * associative modulo 2^32, so we may reorder freely: for conv and FC we compute
 * sum(w * x) + (bias - input_zp * sum(w)) with the second term folded once per output channel,
 * which leaves a pure int8 dot product in the hot loop.  Padded taps are fed the input zero
 * point, whose contribution w * (zp - zp) is exactly the zero TFLM gets by skipping them.
 *
 * Inner loops run in fixed blocks of 16 so GCC vectorises them even at -O2 (its "very cheap"
 * cost model needs a trip count that is a multiple of the vector length); the same shape maps
 * onto 16-lane Helium vectors later.
 */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>

/* Bytes of stack for one im2col patch (filter_h * filter_w * filter_c); larger non-1x1
 * convolutions fall back to a slower direct loop. */
#ifndef ZO_CONV_PATCH_MAX
#define ZO_CONV_PATCH_MAX 2048
#endif

/* Output channels processed together (their folded biases live on the stack). */
#define ZO_OC_BLOCK 64

static inline int8_t zo_requant(int32_t acc, int32_t multiplier, int32_t shift, int32_t zp,
                                int32_t act_min, int32_t act_max)
{
    const int32_t v = zo_mbqm(acc, multiplier, shift) + zp;
    return (int8_t)zo_clamp32(v, act_min, act_max);
}

/* Sum of the k weights of one row (for folding input_zp into the bias). */
static int32_t zo_sum_s8(const int8_t *w, int32_t k)
{
    int32_t s = 0;
    int32_t i = 0;
    for (; i + 16 <= k; i += 16) {
        for (int32_t j = 0; j < 16; ++j) {
            s += w[i + j];
        }
    }
    for (; i < k; ++i) {
        s += w[i];
    }
    return s;
}

/* eff[j] = bias[j] - input_zp * sum(w row j), wrapping like TFLM's int32 accumulator: the
 * precomputed `folded` (+ oc0) when the generator gave it, else computed into eff. */
static const int32_t *zo_fold_bias(const int32_t *folded, int32_t oc0, const int8_t *w, int32_t k, int32_t n,
                                   const int32_t *bias, int32_t input_zp, int32_t *eff)
{
    if (folded != NULL) {
        return folded + oc0;
    }
    for (int32_t j = 0; j < n; ++j) {
        const int32_t b = bias != NULL ? bias[oc0 + j] : 0;
        eff[j] = zo_wrap_sub(b, zo_wrap_mul(input_zp, zo_sum_s8(w + (size_t)j * (size_t)k, k)));
    }
    return eff;
}

/* out[j] = requant(eff[j] + dot(x, w row j)) for n rows of k weights.  Four rows share each
 * load of x.  Accumulation depth k < 2^17 cannot overflow the int32 dot product. */
static void zo_gemv_s8(const int8_t *x, const int8_t *w, int32_t k, int32_t n, const int32_t *eff,
                       const int32_t *mult, const int32_t *shift, int32_t out_zp, int32_t act_min,
                       int32_t act_max, int8_t *out)
{
    int32_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const int8_t *w0 = w + (size_t)j * (size_t)k;
        const int8_t *w1 = w0 + k;
        const int8_t *w2 = w1 + k;
        const int8_t *w3 = w2 + k;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int32_t i = 0;
        for (; i + 16 <= k; i += 16) {
            for (int32_t t = 0; t < 16; ++t) {
                const int32_t xv = x[i + t];
                a0 += xv * w0[i + t];
                a1 += xv * w1[i + t];
                a2 += xv * w2[i + t];
                a3 += xv * w3[i + t];
            }
        }
        for (; i < k; ++i) {
            const int32_t xv = x[i];
            a0 += xv * w0[i];
            a1 += xv * w1[i];
            a2 += xv * w2[i];
            a3 += xv * w3[i];
        }
        out[j + 0] = zo_requant(zo_wrap_add(a0, eff[j + 0]), mult[j + 0], shift[j + 0], out_zp, act_min, act_max);
        out[j + 1] = zo_requant(zo_wrap_add(a1, eff[j + 1]), mult[j + 1], shift[j + 1], out_zp, act_min, act_max);
        out[j + 2] = zo_requant(zo_wrap_add(a2, eff[j + 2]), mult[j + 2], shift[j + 2], out_zp, act_min, act_max);
        out[j + 3] = zo_requant(zo_wrap_add(a3, eff[j + 3]), mult[j + 3], shift[j + 3], out_zp, act_min, act_max);
    }
    for (; j < n; ++j) {
        const int8_t *w0 = w + (size_t)j * (size_t)k;
        int32_t a0 = 0;
        int32_t i = 0;
        for (; i + 16 <= k; i += 16) {
            for (int32_t t = 0; t < 16; ++t) {
                a0 += (int32_t)x[i + t] * w0[i + t];
            }
        }
        for (; i < k; ++i) {
            a0 += (int32_t)x[i] * w0[i];
        }
        out[j] = zo_requant(zo_wrap_add(a0, eff[j]), mult[j], shift[j], out_zp, act_min, act_max);
    }
}

/* Gather the receptive field of output pixel (oy, ox) for channels [c0, c0 + fc) into patch,
 * laid out [kh][kw][fc] like the filter; taps outside the image get the input zero point. */
static void zo_im2col(const zo_conv2d_params_t *p, const int8_t *input, int32_t oy, int32_t ox,
                      int32_t c0, int8_t *patch)
{
    const int32_t fc = p->filter_c;
    const int32_t c = p->input_c;
    const int8_t zp = (int8_t)p->input_zp;
    const int32_t iy0 = oy * p->stride_h - p->pad_h;
    const int32_t ix0 = ox * p->stride_w - p->pad_w;
    int8_t *dst = patch;
    for (int32_t ky = 0; ky < p->filter_h; ++ky) {
        const int32_t iy = iy0 + ky * p->dilation_h;
        if (iy < 0 || iy >= p->input_h) {
            for (int32_t i = 0; i < p->filter_w * fc; ++i) {
                dst[i] = zp;
            }
            dst += p->filter_w * fc;
            continue;
        }
        const int8_t *row = input + (size_t)iy * (size_t)p->input_w * (size_t)c + (size_t)c0;
        if (p->dilation_w == 1 && fc == c) {
            /* Whole-pixel channels and unit dilation: the valid taps are one contiguous run. */
            const int32_t kx_lo = ix0 < 0 ? -ix0 : 0;
            int32_t kx_hi = p->input_w - ix0;
            if (kx_hi > p->filter_w) {
                kx_hi = p->filter_w;
            }
            int32_t kx = 0;
            for (; kx < kx_lo && kx < p->filter_w; ++kx) {
                for (int32_t i = 0; i < fc; ++i) {
                    *dst++ = zp;
                }
            }
            if (kx_hi > kx) {
                const int8_t *src = row + (size_t)(ix0 + kx) * (size_t)c;
                const int32_t len = (kx_hi - kx) * fc;
                for (int32_t i = 0; i < len; ++i) {
                    dst[i] = src[i];
                }
                dst += len;
                kx = kx_hi;
            }
            for (; kx < p->filter_w; ++kx) {
                for (int32_t i = 0; i < fc; ++i) {
                    *dst++ = zp;
                }
            }
        } else {
            for (int32_t kx = 0; kx < p->filter_w; ++kx) {
                const int32_t ix = ix0 + kx * p->dilation_w;
                if (ix < 0 || ix >= p->input_w) {
                    for (int32_t i = 0; i < fc; ++i) {
                        dst[i] = zp;
                    }
                } else {
                    const int8_t *src = row + (size_t)ix * (size_t)c;
                    for (int32_t i = 0; i < fc; ++i) {
                        dst[i] = src[i];
                    }
                }
                dst += fc;
            }
        }
    }
}

/* Plain int8 dot product, in blocks of 16 for the vectoriser. */
static int32_t zo_dot_s8(const int8_t *x, const int8_t *w, int32_t k)
{
    int32_t s = 0;
    int32_t i = 0;
    for (; i + 16 <= k; i += 16) {
        for (int32_t t = 0; t < 16; ++t) {
            s += (int32_t)x[i + t] * w[i + t];
        }
    }
    for (; i < k; ++i) {
        s += (int32_t)x[i] * w[i];
    }
    return s;
}

/* For patches too big for the stack buffer: per output, sum over the taps inside the image of
 * dot(x, w) - input_zp * sum(w), which equals TFLM's sum of w * (x - zp) modulo 2^32. */
void ZO_FALLBACK zo_conv2d_s8_direct(const zo_conv2d_params_t *p, const int8_t *input,
                                     const int8_t *filter, const int32_t *bias, int8_t *output)
{
    const int32_t fc = p->filter_c;
    const int32_t groups = p->input_c / fc;
    const int32_t oc_per_group = p->output_c / groups;
    const int32_t k = p->filter_h * p->filter_w * fc;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_h;
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_w;
            int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c;
            for (int32_t oc = 0; oc < p->output_c; ++oc) {
                const int32_t c0 = (oc / oc_per_group) * fc;
                const int8_t *w = filter + (size_t)oc * (size_t)k;
                int32_t acc = 0;
                for (int32_t ky = 0; ky < p->filter_h; ++ky) {
                    const int32_t iy = iy0 + ky * p->dilation_h;
                    if (iy < 0 || iy >= p->input_h) {
                        continue;
                    }
                    for (int32_t kx = 0; kx < p->filter_w; ++kx) {
                        const int32_t ix = ix0 + kx * p->dilation_w;
                        if (ix < 0 || ix >= p->input_w) {
                            continue;
                        }
                        const int8_t *x = input + ((size_t)iy * (size_t)p->input_w + (size_t)ix) * (size_t)p->input_c + (size_t)c0;
                        const int8_t *wt = w + ((size_t)ky * (size_t)p->filter_w + (size_t)kx) * (size_t)fc;
                        acc = zo_wrap_add(acc, zo_wrap_sub(zo_dot_s8(x, wt, fc), zo_wrap_mul(p->input_zp, zo_sum_s8(wt, fc))));
                    }
                }
                if (bias != NULL) {
                    acc = zo_wrap_add(acc, bias[oc]);
                }
                out[oc] = zo_requant(acc, p->multiplier[oc], p->shift[oc], p->output_zp, p->act_min, p->act_max);
            }
        }
    }
}

/* The blocked matrix-product loop shared by the pointwise (patch == NULL: read pixels in place)
 * and im2col paths. */
static void zo_conv2d_gemm(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                           const int32_t *bias, int8_t *output, int8_t *patch)
{
    const int32_t fc = p->filter_c;
    const int32_t groups = p->input_c / fc;
    const int32_t oc_per_group = p->output_c / groups;
    const int32_t k = p->filter_h * p->filter_w * fc;
    const size_t out_c = (size_t)p->output_c;
    int32_t eff[ZO_OC_BLOCK];
    for (int32_t g = 0; g < groups; ++g) {
        const int32_t c0 = g * fc;
        const int32_t oc_end = (g + 1) * oc_per_group;
        for (int32_t oc0 = g * oc_per_group; oc0 < oc_end; oc0 += ZO_OC_BLOCK) {
            const int32_t n = zo_min32(ZO_OC_BLOCK, oc_end - oc0);
            const int8_t *w = filter + (size_t)oc0 * (size_t)k;
            const int32_t *e = zo_fold_bias(p->folded_bias, oc0, w, k, n, bias, p->input_zp, eff);
            for (int32_t oy = 0; oy < p->output_h; ++oy) {
                for (int32_t ox = 0; ox < p->output_w; ++ox) {
                    const int8_t *x;
                    if (patch == NULL) {
                        x = input + ((size_t)(oy * p->stride_h) * (size_t)p->input_w + (size_t)(ox * p->stride_w))
                                        * (size_t)p->input_c + (size_t)c0;
                    } else {
                        zo_im2col(p, input, oy, ox, c0, patch);
                        x = patch;
                    }
                    int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * out_c + (size_t)oc0;
                    zo_gemv_s8(x, w, k, n, e, p->multiplier + oc0, p->shift + oc0, p->output_zp,
                               p->act_min, p->act_max, out);
                }
            }
        }
    }
}

/* Kept out of line so only this path's stack frame holds the patch buffer. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void zo_conv2d_im2col(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                             const int32_t *bias, int8_t *output)
{
    int8_t patch[ZO_CONV_PATCH_MAX];
    zo_conv2d_gemm(p, input, filter, bias, output, patch);
}

void ZO_PORTABLE(zo_conv2d_s8)(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                  const int32_t *bias, int8_t *output)
{
    const int32_t k = p->filter_h * p->filter_w * p->filter_c;
    if (p->filter_h == 1 && p->filter_w == 1 && p->pad_h == 0 && p->pad_w == 0) {
        /* 1x1 without padding reads each pixel's channels in place: a plain matrix product. */
        zo_conv2d_gemm(p, input, filter, bias, output, NULL);
    } else if (k <= ZO_CONV_PATCH_MAX) {
        zo_conv2d_im2col(p, input, filter, bias, output);
    } else {
        zo_conv2d_s8_direct(p, input, filter, bias, output);
    }
}

/* acc[j] += w[j] * (x[j] - zp) over n channels (depth multiplier 1). */
static inline void zo_dw_tap(int32_t *acc, const int8_t *w, const int8_t *x, int32_t zp, int32_t n)
{
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        for (int32_t t = 0; t < 16; ++t) {
            acc[j + t] += (int32_t)w[j + t] * ((int32_t)x[j + t] - zp);
        }
    }
    for (; j < n; ++j) {
        acc[j] += (int32_t)w[j] * ((int32_t)x[j] - zp);
    }
}

void ZO_PORTABLE(zo_depthwise_conv2d_s8)(const zo_depthwise_conv2d_params_t *p, const int8_t *input,
                            const int8_t *filter, const int32_t *bias, int8_t *output)
{
    const int32_t dm = p->depth_multiplier;
    const int32_t oc_total = p->output_c;
    const size_t in_c = (size_t)p->input_c;
    const int32_t zp = p->input_zp;
    int32_t acc[ZO_OC_BLOCK];
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_h;
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_w;
            int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)oc_total;
            for (int32_t oc0 = 0; oc0 < oc_total; oc0 += ZO_OC_BLOCK) {
                const int32_t n = zo_min32(ZO_OC_BLOCK, oc_total - oc0);
                for (int32_t j = 0; j < n; ++j) {
                    acc[j] = 0;  /* bias is added last, as TFLM does */
                }
                for (int32_t ky = 0; ky < p->filter_h; ++ky) {
                    const int32_t iy = iy0 + ky * p->dilation_h;
                    if (iy < 0 || iy >= p->input_h) {
                        continue;  /* TFLM skips padded taps */
                    }
                    for (int32_t kx = 0; kx < p->filter_w; ++kx) {
                        const int32_t ix = ix0 + kx * p->dilation_w;
                        if (ix < 0 || ix >= p->input_w) {
                            continue;
                        }
                        const int8_t *x = input + ((size_t)iy * (size_t)p->input_w + (size_t)ix) * in_c;
                        const int8_t *w = filter + ((size_t)ky * (size_t)p->filter_w + (size_t)kx) * (size_t)oc_total + (size_t)oc0;
                        if (dm == 1) {
                            zo_dw_tap(acc, w, x + oc0, zp, n);
                        } else {
                            /* Output channel oc reads input channel oc / dm. */
                            int32_t ic = oc0 / dm;
                            int32_t m = oc0 - ic * dm;
                            for (int32_t j = 0; j < n; ++j) {
                                acc[j] += (int32_t)w[j] * ((int32_t)x[ic] - zp);
                                if (++m == dm) {
                                    m = 0;
                                    ++ic;
                                }
                            }
                        }
                    }
                }
                for (int32_t j = 0; j < n; ++j) {
                    const int32_t a = bias != NULL ? zo_wrap_add(acc[j], bias[oc0 + j]) : acc[j];
                    out[oc0 + j] = zo_requant(a, p->multiplier[oc0 + j], p->shift[oc0 + j], p->output_zp,
                                              p->act_min, p->act_max);
                }
            }
        }
    }
}

void ZO_PORTABLE(zo_fully_connected_s8)(const zo_fully_connected_params_t *p, const int8_t *input,
                           const int8_t *weights, const int32_t *bias, int8_t *output)
{
    int32_t eff[ZO_OC_BLOCK];
    const int32_t k = p->depth;
    for (int32_t oc0 = 0; oc0 < p->units; oc0 += ZO_OC_BLOCK) {
        const int32_t n = zo_min32(ZO_OC_BLOCK, p->units - oc0);
        const int8_t *w = weights + (size_t)oc0 * (size_t)k;
        const int32_t *e = zo_fold_bias(p->folded_bias, oc0, w, k, n, bias, p->input_zp, eff);
        for (int32_t r = 0; r < p->rows; ++r) {
            zo_gemv_s8(input + (size_t)r * (size_t)k, w, k, n, e, p->multiplier + oc0, p->shift + oc0,
                       p->output_zp, p->act_min, p->act_max, output + (size_t)r * (size_t)p->units + (size_t)oc0);
        }
    }
}
