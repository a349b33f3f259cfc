/* zo_kernels_pool.c - AVERAGE_POOL_2D and MAX_POOL_2D, int8, bit-exact with the TFLite Micro
 * reference kernels (the Helium variant: zo_kernels_pool_mve.c). */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>

/* Channels whose running sums are kept on the stack. */
#define ZO_CH_BLOCK 64

/* ------------------------------------------------------------------------------------ pooling */

/* Window of output (oy, ox) clipped to the image, as [ky0, ky1) x [kx0, kx1) filter offsets. */
static void zo_pool_window(const zo_pool_params_t *p, int32_t oy, int32_t ox, int32_t *iy0, int32_t *ix0,
                           int32_t *ky0, int32_t *ky1, int32_t *kx0, int32_t *kx1)
{
    *iy0 = oy * p->stride_h - p->pad_h;
    *ix0 = ox * p->stride_w - p->pad_w;
    *ky0 = zo_max32(0, -*iy0);
    *ky1 = zo_min32(p->filter_h, p->input_h - *iy0);
    *kx0 = zo_max32(0, -*ix0);
    *kx1 = zo_min32(p->filter_w, p->input_w - *ix0);
}

void ZO_PORTABLE(zo_avg_pool_s8)(const zo_pool_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t ch = p->channels;
    int32_t acc[ZO_CH_BLOCK];
    int8_t *out = output;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int32_t iy0, ix0, ky0, ky1, kx0, kx1;
            zo_pool_window(p, oy, ox, &iy0, &ix0, &ky0, &ky1, &kx0, &kx1);
            const int32_t count = (ky1 - ky0) * (kx1 - kx0);
            for (int32_t c0 = 0; c0 < ch; c0 += ZO_CH_BLOCK) {
                const int32_t n = zo_min32(ZO_CH_BLOCK, ch - c0);
                for (int32_t j = 0; j < n; ++j) {
                    acc[j] = 0;
                }
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        const int8_t *x = input + ((size_t)(iy0 + ky) * (size_t)p->input_w + (size_t)(ix0 + kx)) * (size_t)ch + (size_t)c0;
                        for (int32_t j = 0; j < n; ++j) {
                            acc[j] += x[j];
                        }
                    }
                }
                for (int32_t j = 0; j < n; ++j) {
                    int32_t v = 0;
                    if (count > 0) {
                        /* TFLM rounds half away from zero with truncating division. */
                        v = acc[j] > 0 ? (acc[j] + count / 2) / count : (acc[j] - count / 2) / count;
                    }
                    out[c0 + j] = (int8_t)zo_clamp32(v, p->act_min, p->act_max);
                }
            }
            out += ch;
        }
    }
}

void ZO_PORTABLE(zo_max_pool_s8)(const zo_pool_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t ch = p->channels;
    int8_t mx[ZO_CH_BLOCK];
    int8_t *out = output;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int32_t iy0, ix0, ky0, ky1, kx0, kx1;
            zo_pool_window(p, oy, ox, &iy0, &ix0, &ky0, &ky1, &kx0, &kx1);
            for (int32_t c0 = 0; c0 < ch; c0 += ZO_CH_BLOCK) {
                const int32_t n = zo_min32(ZO_CH_BLOCK, ch - c0);
                for (int32_t j = 0; j < n; ++j) {
                    mx[j] = -128;
                }
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        const int8_t *x = input + ((size_t)(iy0 + ky) * (size_t)p->input_w + (size_t)(ix0 + kx)) * (size_t)ch + (size_t)c0;
                        for (int32_t j = 0; j < n; ++j) {
                            mx[j] = x[j] > mx[j] ? x[j] : mx[j];
                        }
                    }
                }
                for (int32_t j = 0; j < n; ++j) {
                    out[c0 + j] = (int8_t)zo_clamp32(mx[j], p->act_min, p->act_max);
                }
            }
            out += ch;
        }
    }
}
