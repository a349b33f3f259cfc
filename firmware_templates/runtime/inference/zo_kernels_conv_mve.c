/* zo_kernels_conv_mve.c - Helium (MVE) CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED for the
 * Cortex-M55, bit-exact with the portable kernels (zo_kernels_conv.c), and so with TFLM's reference
 * kernels.  Compiled to nothing where ZO_KERNELS_MVE is not set (zo_kernels_base.h); the shared
 * requantisation is in zo_kernels_mve.h.
 *
 * - CONV_2D and FULLY_CONNECTED are matrix products: int8 dot products of 16 lanes (VMLADAVA)
 *   with the input zero point folded into the bias, as the portable kernels do.  Tiles of 4
 *   (rows <= 16 bytes) or 2 (<= 48) output pixels keep their inputs in registers and share each
 *   weight vector; longer rows go 3 pixels against 2 weight rows (6 dot products per 5 loads), a
 *   single pixel (FULLY_CONNECTED) against 4 rows.  Other convolutions gather each output
 *   pixel's receptive field into a patch on the stack (im2col), except small filters
 *   (filter_h <= 4 rows of <= 16 bytes, more than 16 in all), whose interior pixels are read in
 *   place, one register per filter row (a patch of at most 16 bytes is one register: im2col
 *   with tiles of 4 pixels).
 * - Stack: up to ~3.5 KiB in CONV_2D (a 2 KiB patch, as the portable kernel, and the
 *   accumulators of a tile), ~6.3 KiB in DEPTHWISE_CONV_2D (a 2 KiB band, up to 2 KiB of packed
 *   weights, a row segment's accumulators).
 * - DEPTHWISE_CONV_2D: per block of 16 channels, each input row a row segment reads is copied once
 *   into a band on the stack (kept while the next output rows read it), 16 bytes a pixel, the
 *   padding as the input zero point (and, for a depth
 *   multiplier > 1, each lane the input channel its output channel reads), so every output
 *   pixel, at the borders too, is interior: 4 pixels x 4 channels a tile, int32 products of raw
 *   int8 values (the zero point's share starts the sums with the bias), each weight vector loaded
 *   once for the 4 pixels; a 3x3 filter in assembly (13 instructions a tap). A tall, narrow map
 *   is walked transposed (its columns as rows), so rows are long. A filter whose band would not
 *   fit (filter rows x (3 strides + its span) past 128 pixels) takes the portable kernel.
 * Tails are predicated (VCTP): no load or store goes past a buffer.
 */
#include "zo_kernels.h"

#if defined(ZO_KERNELS_MVE)

#include "zo_kernels_mve.h"

/* A macro's value as a string, for assembly offsets. */
#define ZO_MVE_STR_(x) #x
#define ZO_MVE_STR(x) ZO_MVE_STR_(x)

/* Same limits as the portable kernels. */
#ifndef ZO_CONV_PATCH_MAX
#define ZO_CONV_PATCH_MAX 2048
#endif
#define ZO_MVE_OC_BLOCK 64

/* ------------------------------------------------------------------ matrix products */

/* eff[j] = bias[j] - input_zp * sum(w row j), as zo_fold_bias (wrapping int32): the precomputed
 * `folded` (+ oc0) when the generator gave it, else computed into eff (weights that change at run
 * time: trained layers, on every pass), four rows at a time, whole 16-byte blocks unpredicated:
 * one VADDVA per 16 weights. */
static const int32_t *zo_mve_fold_bias(const int32_t *folded, int32_t oc0, const int8_t *w, int32_t k, int32_t n,
                                       const int32_t *bias, int32_t input_zp, int32_t *eff)
{
    if (folded != NULL) {
        return folded + oc0;
    }
    for (int32_t j = 0; j < n; j += 4) {
        /* 1 to 3 rows left: the missing ones repeat the last row, their sums are not stored */
        const int8_t *p0 = w + (size_t)j * (size_t)k;
        const int8_t *p1 = j + 1 < n ? p0 + k : p0;
        const int8_t *p2 = j + 2 < n ? p1 + k : p1;
        const int8_t *p3 = j + 3 < n ? p2 + k : p2;
        int32_t s[4] = {0, 0, 0, 0};
        int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int32_t blocks = k >> 4; blocks > 0; --blocks) {
            s0 = vaddvaq_s8(s0, vldrbq_s8(p0));
            s1 = vaddvaq_s8(s1, vldrbq_s8(p1));
            s2 = vaddvaq_s8(s2, vldrbq_s8(p2));
            s3 = vaddvaq_s8(s3, vldrbq_s8(p3));
            p0 += 16, p1 += 16, p2 += 16, p3 += 16;
        }
        if (k & 15) {
            const mve_pred16_t pt = vctp8q((uint32_t)(k & 15));
            s0 = vaddvaq_s8(s0, vldrbq_z_s8(p0, pt));
            s1 = vaddvaq_s8(s1, vldrbq_z_s8(p1, pt));
            s2 = vaddvaq_s8(s2, vldrbq_z_s8(p2, pt));
            s3 = vaddvaq_s8(s3, vldrbq_z_s8(p3, pt));
        }
        s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
        for (int32_t i = 0; i < 4 && j + i < n; ++i) {
            const int32_t b = bias != NULL ? bias[oc0 + j + i] : 0;
            eff[j + i] = zo_wrap_sub(b, zo_wrap_mul(input_zp, s[i]));
        }
    }
    return eff;
}

/* a0..a3 += dot(x, w0..w3) over k bytes: whole 16-byte blocks unpredicated, the tail predicated. */
#define ZO_MVE_DOT4(x, w0, w1, w2, w3, k, a0, a1, a2, a3)                                           \
    do {                                                                                            \
        const int8_t *px = (x), *p0 = (w0), *p1 = (w1), *p2 = (w2), *p3 = (w3);                     \
        for (int32_t blocks = (k) >> 4; blocks > 0; --blocks) {                                     \
            const int8x16_t xv = vldrbq_s8(px);                                                     \
            a0 = vmladavaq_s8(a0, xv, vldrbq_s8(p0));                                               \
            a1 = vmladavaq_s8(a1, xv, vldrbq_s8(p1));                                               \
            a2 = vmladavaq_s8(a2, xv, vldrbq_s8(p2));                                               \
            a3 = vmladavaq_s8(a3, xv, vldrbq_s8(p3));                                               \
            px += 16, p0 += 16, p1 += 16, p2 += 16, p3 += 16;                                       \
        }                                                                                           \
        if ((k) & 15) {                                                                             \
            const mve_pred16_t pt = vctp8q((uint32_t)((k) & 15));                                   \
            const int8x16_t xv = vldrbq_z_s8(px, pt);                                               \
            a0 = vmladavaq_s8(a0, xv, vldrbq_z_s8(p0, pt));                                         \
            a1 = vmladavaq_s8(a1, xv, vldrbq_z_s8(p1, pt));                                         \
            a2 = vmladavaq_s8(a2, xv, vldrbq_z_s8(p2, pt));                                         \
            a3 = vmladavaq_s8(a3, xv, vldrbq_z_s8(p3, pt));                                         \
        }                                                                                           \
    } while (0)

/* One group of 4 channels of zo_mve_requant_pixels over every pixel.  The flags are constants at
 * each call, so each use compiles to its own loop: `full` = 4 channels (stores unpredicated),
 * `right` = right shifts only (zo_mve_mbqm_right). */
__attribute__((always_inline)) static inline void zo_mve_requant_group(const int32_t *a, int32_t acc_stride,
                                                                       int32_t pixels, int32x4_t m, int32x4_t left,
                                                                       int32x4_t right, int32_t zp, int32x4_t lo,
                                                                       int32x4_t hi, int8_t *o, int32_t out_stride,
                                                                       mve_pred16_t p, const int full,
                                                                       const int right_only)
{
    for (int32_t px = 0; px < pixels; ++px) {
        int32x4_t v = vldrwq_s32(a);
        v = right_only ? zo_mve_mbqm_right(v, m, right) : zo_mve_mbqm_lr(v, m, left, right);
        v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, zp), lo), hi);
        if (full) {
            vstrbq_s32(o, v);
        } else {
            vstrbq_p_s32(o, v, p);
        }
        a += acc_stride;
        o += out_stride;
    }
}

/* out[px * out_stride + j] = requant(acc[px * acc_stride + j]) for px < pixels, j < n (the bias is
 * in the sums): each channel group's multiplier and shifts are loaded once for all the pixels
 * (acc_stride >= n rounded up to 4: a last group of fewer channels loads its whole vector of
 * sums). */
__attribute__((always_inline)) static inline void zo_mve_requant_pixels_body(const int32_t *acc, int32_t acc_stride,
                                                                              int32_t pixels, int32_t n,
                                                                              const int32_t *mult,
                                                                              const int32_t *shift,
                                                                              const zo_mve_out_t *q, int8_t *out,
                                                                              int32_t out_stride)
{
    /* in locals: the stores to out (int8) could alias *q */
    const int32_t zp = q->zp, right_only = q->right_only;
    const int32x4_t zero = vdupq_n_s32(0), lo = vdupq_n_s32(q->act_min), hi = vdupq_n_s32(q->act_max);
    const mve_pred16_t all = vctp32q(4u);
    int32_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const int32x4_t m = vldrwq_s32(mult + j), s = vldrwq_s32(shift + j);
        const int32x4_t left = vmaxq_s32(s, zero), right = vminq_s32(s, zero);
        if (right_only) {
            zo_mve_requant_group(acc + j, acc_stride, pixels, m, left, right, zp, lo, hi, out + j, out_stride, all, 1,
                                 1);
        } else {
            zo_mve_requant_group(acc + j, acc_stride, pixels, m, left, right, zp, lo, hi, out + j, out_stride, all, 1,
                                 0);
        }
    }
    if (j < n) { /* 1 to 3 channels left: predicated loads and stores */
        const mve_pred16_t p = vctp32q((uint32_t)(n - j));
        const int32x4_t m = vldrwq_z_s32(mult + j, p), s = vldrwq_z_s32(shift + j, p);
        zo_mve_requant_group(acc + j, acc_stride, pixels, m, vmaxq_s32(s, zero), vminq_s32(s, zero), zp, lo, hi,
                             out + j, out_stride, p, 0, 0);
    }
}

__attribute__((noinline)) static void zo_mve_requant_pixels(const int32_t *acc, int32_t acc_stride, int32_t pixels,
                                                            int32_t n, const int32_t *mult, const int32_t *shift,
                                                            const zo_mve_out_t *q, int8_t *out, int32_t out_stride)
{
    zo_mve_requant_pixels_body(acc, acc_stride, pixels, n, mult, shift, q, out, out_stride);
}

/* zo_mve_requant_pixels for a depthwise row's sums (16 a pixel): loads that step on their own. */
__attribute__((noinline)) static void zo_mve_requant_dw_row(const int32_t *acc, int32_t pixels, int32_t n,
                                                            const int32_t *mult, const int32_t *shift,
                                                            const zo_mve_out_t *q, int8_t *out, int32_t out_stride)
{
    zo_mve_requant_pixels_body(acc, 16, pixels, n, mult, shift, q, out, out_stride);
}

/* One group of 4 outputs of zo_mve_requant_store: `full` (a constant) 4 lanes, loads and stores
 * unpredicated, else the lanes of p. */
#define ZO_MVE_LD(ptr) (full ? vldrwq_s32(ptr) : vldrwq_z_s32((ptr), p))
__attribute__((always_inline)) static inline void zo_mve_requant4(const int32_t *acc, const int32_t *mult,
                                                                  const int32_t *shift, int32_t zp, int32x4_t lo,
                                                                  int32x4_t hi, mve_pred16_t p, int8_t *out,
                                                                  const int right, const int full)
{
    int32x4_t v = ZO_MVE_LD(acc);
    if (right) {
        v = zo_mve_mbqm_right(v, ZO_MVE_LD(mult), ZO_MVE_LD(shift));
    } else {
        v = zo_mve_mbqm(v, ZO_MVE_LD(mult), ZO_MVE_LD(shift));
    }
    v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, zp), lo), hi);
    if (full) {
        vstrbq_s32(out, v);
    } else {
        vstrbq_p_s32(out, v, p);
    }
}
#undef ZO_MVE_LD

/* out[j] = requant(acc[j]) for j < n (the bias is in the sums), 4 lanes at a time. */
static void zo_mve_requant_store(const int32_t *acc, int32_t n, const int32_t *mult, const int32_t *shift,
                                 const zo_mve_out_t *q, int8_t *out)
{
    const int32x4_t lo = vdupq_n_s32(q->act_min), hi = vdupq_n_s32(q->act_max);
    const mve_pred16_t all = vctp32q(4u);
    int32_t j = 0;
    if (q->right_only) {
        for (; j + 4 <= n; j += 4) {
            zo_mve_requant4(acc + j, mult + j, shift + j, q->zp, lo, hi, all, out + j, 1, 1);
        }
    } else {
        for (; j + 4 <= n; j += 4) {
            zo_mve_requant4(acc + j, mult + j, shift + j, q->zp, lo, hi, all, out + j, 0, 1);
        }
    }
    if (j < n) {
        zo_mve_requant4(acc + j, mult + j, shift + j, q->zp, lo, hi, vctp32q((uint32_t)(n - j)), out + j, 0, 0);
    }
}

/* acc[j] = eff[j] + dot(x, w row j) for n rows of k <= 16 * blocks weights, with x's blocks held
 * in registers: each row costs its weight loads and VMLADAVAs (rows are contiguous: one
 * pointer). blocks is a constant at each call. */
__attribute__((always_inline)) static inline void zo_mve_rows_x_in_regs(const int8_t *x, const int8_t *w, int32_t k,
                                                                        int32_t n, const int32_t *eff, int32_t *acc,
                                                                        const int blocks)
{
    const mve_pred16_t pt = vctp8q((uint32_t)(k - 16 * (blocks - 1))); /* the last block */
    int8x16_t x0 = vdupq_n_s8(0), x1 = x0, x2 = x0, x3 = x0;
    x0 = blocks == 1 ? vldrbq_z_s8(x, pt) : vldrbq_s8(x);
    if (blocks >= 2) {
        x1 = blocks == 2 ? vldrbq_z_s8(x + 16, pt) : vldrbq_s8(x + 16);
    }
    if (blocks >= 3) {
        x2 = blocks == 3 ? vldrbq_z_s8(x + 32, pt) : vldrbq_s8(x + 32);
    }
    if (blocks >= 4) {
        x3 = vldrbq_z_s8(x + 48, pt);
    }
    for (int32_t j = 0; j < n; ++j) {
        int32_t a = eff[j];
        a = vmladavaq_s8(a, x0, blocks == 1 ? vldrbq_z_s8(w, pt) : vldrbq_s8(w));
        if (blocks >= 2) {
            a = vmladavaq_s8(a, x1, blocks == 2 ? vldrbq_z_s8(w + 16, pt) : vldrbq_s8(w + 16));
        }
        if (blocks >= 3) {
            a = vmladavaq_s8(a, x2, blocks == 3 ? vldrbq_z_s8(w + 32, pt) : vldrbq_s8(w + 32));
        }
        if (blocks >= 4) {
            a = vmladavaq_s8(a, x3, vldrbq_z_s8(w + 48, pt));
        }
        acc[j] = a;
        w += k;
    }
}

/* acc[j] = eff[j] + dot(x, w row j) for n <= ZO_MVE_OC_BLOCK rows of k weights. */
static void zo_mve_dots(const int8_t *x, const int8_t *w, int32_t k, int32_t n, const int32_t *eff, int32_t *acc)
{
    if (k <= 16) {
        zo_mve_rows_x_in_regs(x, w, k, n, eff, acc, 1);
    } else if (k <= 32) {
        zo_mve_rows_x_in_regs(x, w, k, n, eff, acc, 2);
    } else if (k <= 48) {
        zo_mve_rows_x_in_regs(x, w, k, n, eff, acc, 3);
    } else if (k <= 64) {
        zo_mve_rows_x_in_regs(x, w, k, n, eff, acc, 4);
    } else {
        /* longer rows: four rows share each load of x */
        int32_t j = 0;
        for (; j + 4 <= n; j += 4) {
            const int8_t *w0 = w + (size_t)j * (size_t)k;
            int32_t a0 = eff[j], a1 = eff[j + 1], a2 = eff[j + 2], a3 = eff[j + 3];
            ZO_MVE_DOT4(x, w0, w0 + k, w0 + 2 * k, w0 + 3 * k, k, a0, a1, a2, a3);
            acc[j] = a0, acc[j + 1] = a1, acc[j + 2] = a2, acc[j + 3] = a3;
        }
        if (j < n) {
            /* 1 to 3 rows left: the missing ones repeat the last row, their sums are not stored */
            const int8_t *w0 = w + (size_t)j * (size_t)k;
            const int8_t *w1 = j + 1 < n ? w0 + k : w0;
            const int8_t *w2 = j + 2 < n ? w1 + k : w1;
            int32_t a0 = eff[j], a1 = 0, a2 = 0, a3 = 0;
            ZO_MVE_DOT4(x, w0, w1, w2, w2, k, a0, a1, a2, a3);
            acc[j] = a0;
            if (j + 1 < n) {
                acc[j + 1] = zo_wrap_add(a1, eff[j + 1]);
            }
            if (j + 2 < n) {
                acc[j + 2] = zo_wrap_add(a2, eff[j + 2]);
            }
        }
    }
}

/* out[j] = requant(eff[j] + dot(x, w row j)) for n <= ZO_MVE_OC_BLOCK rows of k weights. */
static void zo_mve_gemv(const int8_t *x, const int8_t *w, int32_t k, int32_t n, const int32_t *eff,
                        const int32_t *mult, const int32_t *shift, const zo_mve_out_t *q, int8_t *out)
{
    int32_t acc[ZO_MVE_OC_BLOCK];
    zo_mve_dots(x, w, k, n, eff, acc);
    zo_mve_requant_store(acc, n, mult, shift, q, out);
}

/* Two pixels at once: acc0[j], acc1[j] = eff[j] + dot(x0 or x1, w row j), k <= 16 * blocks <= 48,
 * both pixels' blocks in registers, so each weight vector loaded serves two dot products. */
__attribute__((always_inline)) static inline void zo_mve_rows2_x_in_regs(const int8_t *x0, const int8_t *x1,
                                                                         const int8_t *w, int32_t k, int32_t n,
                                                                         const int32_t *eff, int32_t *acc0,
                                                                         int32_t *acc1, const int blocks)
{
    const mve_pred16_t pt = vctp8q((uint32_t)(k - 16 * (blocks - 1)));
    int8x16_t a0 = vdupq_n_s8(0), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
    a0 = blocks == 1 ? vldrbq_z_s8(x0, pt) : vldrbq_s8(x0);
    b0 = blocks == 1 ? vldrbq_z_s8(x1, pt) : vldrbq_s8(x1);
    if (blocks >= 2) {
        a1 = blocks == 2 ? vldrbq_z_s8(x0 + 16, pt) : vldrbq_s8(x0 + 16);
        b1 = blocks == 2 ? vldrbq_z_s8(x1 + 16, pt) : vldrbq_s8(x1 + 16);
    }
    if (blocks >= 3) {
        a2 = vldrbq_z_s8(x0 + 32, pt);
        b2 = vldrbq_z_s8(x1 + 32, pt);
    }
    for (int32_t j = 0; j < n; ++j) {
        int32_t s0 = eff[j], s1 = s0;
        int8x16_t wv = blocks == 1 ? vldrbq_z_s8(w, pt) : vldrbq_s8(w);
        s0 = vmladavaq_s8(s0, a0, wv);
        s1 = vmladavaq_s8(s1, b0, wv);
        if (blocks >= 2) {
            wv = blocks == 2 ? vldrbq_z_s8(w + 16, pt) : vldrbq_s8(w + 16);
            s0 = vmladavaq_s8(s0, a1, wv);
            s1 = vmladavaq_s8(s1, b1, wv);
        }
        if (blocks >= 3) {
            wv = vldrbq_z_s8(w + 32, pt);
            s0 = vmladavaq_s8(s0, a2, wv);
            s1 = vmladavaq_s8(s1, b2, wv);
        }
        acc0[j] = s0;
        acc1[j] = s1;
        w += k;
    }
}

/* Four pixels at once for rows of k <= 16 bytes: one register per pixel, each weight vector
 * serves four dot products; acc[i * ZO_MVE_OC_BLOCK + j] for pixel i. */
__attribute__((always_inline)) static inline void zo_mve_rows4_k(const int8_t *const *x, const int8_t *w, int32_t k,
                                                                 int32_t n, const int32_t *eff, int32_t *acc,
                                                                 const int whole)
{
    const mve_pred16_t pt = vctp8q((uint32_t)k);
#define ZO_MVE_LD(ptr) (whole ? vldrbq_s8(ptr) : vldrbq_z_s8((ptr), pt))
    const int8x16_t x0 = ZO_MVE_LD(x[0]), x1 = ZO_MVE_LD(x[1]);
    const int8x16_t x2 = ZO_MVE_LD(x[2]), x3 = ZO_MVE_LD(x[3]);
    for (int32_t j = 0; j < n; ++j) {
        const int8x16_t wv = ZO_MVE_LD(w);
        const int32_t e = eff[j];
        acc[j] = vmladavaq_s8(e, x0, wv);
        acc[ZO_MVE_OC_BLOCK + j] = vmladavaq_s8(e, x1, wv);
        acc[2 * ZO_MVE_OC_BLOCK + j] = vmladavaq_s8(e, x2, wv);
        acc[3 * ZO_MVE_OC_BLOCK + j] = vmladavaq_s8(e, x3, wv);
        w += k;
    }
#undef ZO_MVE_LD
}

/* Rows of exactly 16 bytes (a 1x1 convolution on 16 channels) load unpredicated. */
static void zo_mve_rows4_k16(const int8_t *const *x, const int8_t *w, int32_t k, int32_t n, const int32_t *eff,
                             int32_t *acc)
{
    if (k == 16) {
        zo_mve_rows4_k(x, w, 16, n, eff, acc, 1);
    } else {
        zo_mve_rows4_k(x, w, k, n, eff, acc, 0);
    }
}

/* Three pixels at once for longer rows, two weight rows at a time: each 16 bytes load 5 vectors for
 * 6 VMLADAVAs (one pixel against four rows: 5 for 4).  Six accumulators is what VMLADAVA's even
 * registers hold; acc[i * ZO_MVE_OC_BLOCK + j] for pixel i.  The loop over pairs of rows is in
 * assembly too: around gcc's, each pair cost about 45 instructions of sums and pointers moved
 * between registers and the stack; here the values a pair needs once live on the stack (`m`
 * operands: sp-relative) and the thirteen registers hold the sums, pointers and loop count.
 * A row's last k % 16 bytes are loaded predicated: gcc has no clobber for VPR, and none is needed
 * as nothing in this function is predicated before the assembly (nor is VPR kept across calls).
 * An odd last row goes pixel by pixel. Out of line: inlined, it costs the
 * other tiles of zo_mve_conv2d_gemm registers. */
__attribute__((noinline)) static void zo_mve_rows3x2(const int8_t *const *x, const int8_t *w, int32_t k,
                                                     int32_t n, const int32_t *eff, int32_t *acc)
{
    const int8_t *x0 = x[0], *x1 = x[1], *x2 = x[2];
    struct {
        const int32_t *eff;
        int32_t *acc;
        int32_t pairs, k, blocks, tail, xback, wstep;
    } m = {eff, acc, n >> 1, k, k >> 4, k & 15, (k >> 4) * 16, 2 * k - (k >> 4) * 16};
    if (m.pairs > 0) {
        int32_t a0, a1, a2, a3, a4, a5, t;
        const int8_t *w1;
        register int32_t b __asm__("lr"); /* the block loop's count (WLS/LE), set inside */
        __asm__ volatile(
            "1:\n\t"
            "ldr %[t], %[eff]\n\t"
            "ldrd %[a0], %[a1], [%[t]], #8\n\t"
            "str %[t], %[eff]\n\t"
            "mov %[a2], %[a0]\n\t"
            "mov %[a3], %[a1]\n\t"
            "mov %[a4], %[a0]\n\t"
            "mov %[a5], %[a1]\n\t"
            "ldr %[t], %[k]\n\t"
            "add %[w1], %[w0], %[t]\n\t"
            "ldr lr, %[blocks]\n\t"
            "wls lr, lr, 3f\n"
            "2:\n\t"
            "vldrb.u8 q0, [%[w0]], #16\n\t"
            "vldrb.u8 q1, [%[w1]], #16\n\t"
            "vldrb.u8 q2, [%[x0]], #16\n\t"
            "vmlava.s8 %[a0], q2, q0\n\t"
            "vmlava.s8 %[a1], q2, q1\n\t"
            "vldrb.u8 q2, [%[x1]], #16\n\t"
            "vmlava.s8 %[a2], q2, q0\n\t"
            "vmlava.s8 %[a3], q2, q1\n\t"
            "vldrb.u8 q2, [%[x2]], #16\n\t"
            "vmlava.s8 %[a4], q2, q0\n\t"
            "vmlava.s8 %[a5], q2, q1\n\t"
            "le lr, 2b\n"
            "3:\n\t"
            "ldr %[t], %[tail]\n\t"
            "cbz %[t], 4f\n\t"
            "vctp.8 %[t]\n\t"
            "vpstt\n\t"
            "vldrbt.u8 q0, [%[w0]]\n\t"
            "vldrbt.u8 q1, [%[w1]]\n\t"
            "vpst\n\t"
            "vldrbt.u8 q2, [%[x0]]\n\t"
            "vmlava.s8 %[a0], q2, q0\n\t"
            "vmlava.s8 %[a1], q2, q1\n\t"
            "vpst\n\t"
            "vldrbt.u8 q2, [%[x1]]\n\t"
            "vmlava.s8 %[a2], q2, q0\n\t"
            "vmlava.s8 %[a3], q2, q1\n\t"
            "vpst\n\t"
            "vldrbt.u8 q2, [%[x2]]\n\t"
            "vmlava.s8 %[a4], q2, q0\n\t"
            "vmlava.s8 %[a5], q2, q1\n"
            "4:\n\t"
            "ldr %[t], %[acc]\n\t"
            "strd %[a2], %[a3], [%[t], #4*" ZO_MVE_STR(ZO_MVE_OC_BLOCK) "]\n\t"
            "strd %[a4], %[a5], [%[t], #8*" ZO_MVE_STR(ZO_MVE_OC_BLOCK) "]\n\t"
            "strd %[a0], %[a1], [%[t]], #8\n\t"
            "str %[t], %[acc]\n\t"
            "ldr %[t], %[xback]\n\t"
            "sub %[x0], %[x0], %[t]\n\t"
            "sub %[x1], %[x1], %[t]\n\t"
            "sub %[x2], %[x2], %[t]\n\t"
            "ldr %[t], %[wstep]\n\t"
            "add %[w0], %[w0], %[t]\n\t"
            "ldr %[t], %[pairs]\n\t"
            "subs %[t], %[t], #1\n\t"
            "str %[t], %[pairs]\n\t"
            "bne 1b\n\t"
            : [a0] "=&Te"(a0), [a1] "=&Te"(a1), [a2] "=&Te"(a2), [a3] "=&Te"(a3), [a4] "=&Te"(a4),
              [a5] "=&Te"(a5), [t] "=&l"(t), [w1] "=&r"(w1),
              [x0] "+r"(x0), [x1] "+r"(x1), [x2] "+r"(x2), [w0] "+r"(w), [b] "=&r"(b), [eff] "+m"(m.eff),
              [acc] "+m"(m.acc), [pairs] "+m"(m.pairs)
            : [k] "m"(m.k), [blocks] "m"(m.blocks), [tail] "m"(m.tail), [xback] "m"(m.xback), [wstep] "m"(m.wstep)
            : "q0", "q1", "q2", "memory", "cc");
    }
    if (n & 1) { /* after the pairs: x0..x2 back at their rows' starts, w at the last row */
        const int32_t j = n - 1;
        zo_mve_dots(x0, w, k, 1, eff + j, acc + j);
        zo_mve_dots(x1, w, k, 1, eff + j, acc + ZO_MVE_OC_BLOCK + j);
        zo_mve_dots(x2, w, k, 1, eff + j, acc + 2 * ZO_MVE_OC_BLOCK + j);
    }
}

/* acc[i * ZO_MVE_OC_BLOCK + j] = eff[j] + dot(x[i], w row j) for a tile of `tile` pixels (4 when
 * k <= 16, 2 when k <= 48, else 3; see zo_mve_tile). */
static void zo_mve_tile_dots(const int8_t *const *x, int32_t tile, const int8_t *w, int32_t k, int32_t n,
                             const int32_t *eff, int32_t *acc)
{
    if (tile == 4) {
        zo_mve_rows4_k16(x, w, k, n, eff, acc);
    } else if (tile == 2 && k <= 16) {
        zo_mve_rows2_x_in_regs(x[0], x[1], w, k, n, eff, acc, acc + ZO_MVE_OC_BLOCK, 1);
    } else if (tile == 2 && k <= 32) {
        zo_mve_rows2_x_in_regs(x[0], x[1], w, k, n, eff, acc, acc + ZO_MVE_OC_BLOCK, 2);
    } else if (tile == 2) {
        zo_mve_rows2_x_in_regs(x[0], x[1], w, k, n, eff, acc, acc + ZO_MVE_OC_BLOCK, 3);
    } else if (tile == 3) {
        zo_mve_rows3x2(x, w, k, n, eff, acc);
    } else {
        zo_mve_dots(x[0], w, k, n, eff, acc);
    }
}

/* Pixels per tile for rows of k bytes. */
static inline int32_t zo_mve_tile(int32_t k)
{
    return k <= 16 ? 4 : (k <= 48 ? 2 : 3);
}

static inline void zo_mve_copy(int8_t *dst, const int8_t *src, int32_t n)
{
    if (n <= 16) { /* the common case of a filter row: no loop */
        const mve_pred16_t p = vctp8q((uint32_t)n);
        vstrbq_p_s8(dst, vldrbq_z_s8(src, p), p);
        return;
    }
    for (; n >= 16; n -= 16) { /* whole blocks unpredicated, then the tail */
        vstrbq_s8(dst, vldrbq_s8(src));
        src += 16, dst += 16;
    }
    if (n > 0) {
        const mve_pred16_t p = vctp8q((uint32_t)n);
        vstrbq_p_s8(dst, vldrbq_z_s8(src, p), p);
    }
}

static inline void zo_mve_fill(int8_t *dst, int8_t v, int32_t n)
{
    const int8x16_t vv = vdupq_n_s8(v);
    if (n <= 16) {
        vstrbq_p_s8(dst, vv, vctp8q((uint32_t)n));
        return;
    }
    for (int32_t i = 0; i < n; i += 16) {
        vstrbq_p_s8(dst + i, vv, vctp8q((uint32_t)(n - i)));
    }
}

/* Taps kx in [lo, hi) of a filter row read inside the image: ix0 + kx * d in [0, size). */
static inline void zo_mve_tap_range(int32_t ix0, int32_t d, int32_t size, int32_t taps, int32_t *lo, int32_t *hi)
{
    int32_t a, b;
    if (d == 1) {
        a = -ix0, b = size - ix0;
    } else {
        a = ix0 < 0 ? (-ix0 + d - 1) / d : 0;
        b = size - ix0 <= 0 ? 0 : (size - ix0 + d - 1) / d;
    }
    *lo = zo_min32(zo_max32(a, 0), taps);
    *hi = zo_max32(zo_min32(b, taps), *lo);
}

/* What zo_mve_im2col_runs reads of a layer, copied once into a local: the patch's int8 stores
 * could alias the parameters, which the compiler would then reload for every pixel. */
typedef struct {
    int32_t c, run, filter_w, filter_h, dilation_h, stride_h, stride_w, pad_h, pad_w, input_h, input_w;
    size_t in_row, row_step; /* bytes of an input row; from a filter row's input row to the next */
    int8_t zp;
} zo_mve_runs_t;

static inline zo_mve_runs_t zo_mve_runs(const zo_conv2d_params_t *p)
{
    const size_t in_row = (size_t)p->input_w * (size_t)p->input_c;
    return (zo_mve_runs_t){p->input_c, p->filter_w * p->input_c, p->filter_w, p->filter_h, p->dilation_h,
                           p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->input_h, p->input_w,
                           in_row, (size_t)p->dilation_h * in_row, (int8_t)p->input_zp};
}

/* zo_mve_im2col for unit horizontal dilation and whole-pixel channels: each filter row's taps
 * inside the image are one run of the input row (the row is filled with the zero point first
 * when some are not). */
__attribute__((noinline)) static void zo_mve_im2col_runs(const zo_mve_runs_t *r, const int8_t *input, int32_t oy,
                                                          int32_t ox, int8_t *patch)
{
    const int32_t c = r->c, run = r->run;
    const int32_t iy0 = oy * r->stride_h - r->pad_h;
    const int32_t ix0 = ox * r->stride_w - r->pad_w;
    const int32_t lo = zo_min32(zo_max32(0, -ix0), r->filter_w);
    const int32_t hi = zo_max32(zo_min32(r->filter_w, r->input_w - ix0), lo);
    const int32_t take = (hi - lo) * c;
    const int8_t *src = input + (size_t)(ix0 + lo) * (size_t)c;
    if (run <= 16) { /* a row in one register: predicated loads and stores, no loop */
        const mve_pred16_t pr = vctp8q((uint32_t)run), pt = vctp8q((uint32_t)take);
        if (take == run && iy0 >= 0 && iy0 + (r->filter_h - 1) * r->dilation_h < r->input_h) {
            /* every tap inside the image (most pixels) */
            src += (size_t)iy0 * r->in_row;
            for (int32_t ky = 0; ky < r->filter_h; ++ky, patch += run, src += r->row_step) {
                vstrbq_p_s8(patch, vldrbq_z_s8(src, pr), pr);
            }
            return;
        }
        const int8x16_t zpv = vdupq_n_s8(r->zp);
        for (int32_t ky = 0; ky < r->filter_h; ++ky, patch += run) {
            const int32_t iy = iy0 + ky * r->dilation_h;
            if (take < run || iy < 0 || iy >= r->input_h) {
                vstrbq_p_s8(patch, zpv, pr);
            }
            if (take > 0 && iy >= 0 && iy < r->input_h) {
                vstrbq_p_s8(patch + lo * c, vldrbq_z_s8(src + (size_t)iy * r->in_row, pt), pt);
            }
        }
        return;
    }
    for (int32_t ky = 0; ky < r->filter_h; ++ky, patch += run) {
        const int32_t iy = iy0 + ky * r->dilation_h;
        const int inside = iy >= 0 && iy < r->input_h;
        if (!inside || take < run) {
            zo_mve_fill(patch, r->zp, run);
        }
        if (inside && take > 0) {
            zo_mve_copy(patch + lo * c, src + (size_t)iy * r->in_row, take);
        }
    }
}

/* The receptive field of output pixel (oy, ox), channels [c0, c0 + fc), laid out like a filter
 * row; taps outside the image get the input zero point (whose folded contribution is zero). For a
 * dilated or grouped convolution, tap by tap (the others take zo_mve_im2col_runs). */
static void zo_mve_im2col(const zo_conv2d_params_t *p, const int8_t *input, int32_t oy, int32_t ox, int32_t c0,
                          int8_t *patch)
{
    const int32_t fc = p->filter_c;
    const int32_t c = p->input_c;
    const int8_t zp = (int8_t)p->input_zp;
    const int32_t iy0 = oy * p->stride_h - p->pad_h;
    const int32_t ix0 = ox * p->stride_w - p->pad_w;
    const int32_t row_bytes = p->filter_w * fc;
    int32_t lo, hi;
    zo_mve_tap_range(ix0, p->dilation_w, p->input_w, p->filter_w, &lo, &hi);
    for (int32_t ky = 0; ky < p->filter_h; ++ky) {
        int8_t *dst = patch + (size_t)ky * (size_t)row_bytes;
        const int32_t iy = iy0 + ky * p->dilation_h;
        if (iy < 0 || iy >= p->input_h || lo == hi) {
            zo_mve_fill(dst, zp, row_bytes);
            continue;
        }
        const int8_t *src = input + ((size_t)iy * (size_t)p->input_w + (size_t)(ix0 + lo * p->dilation_w)) * (size_t)c
                            + (size_t)c0;
        if (lo > 0) {
            zo_mve_fill(dst, zp, lo * fc);
        }
        for (int32_t kx = lo; kx < hi; ++kx) {
            zo_mve_copy(dst + kx * fc, src, fc);
            src += (size_t)p->dilation_w * (size_t)c;
        }
        if (hi < p->filter_w) {
            zo_mve_fill(dst + hi * fc, zp, (p->filter_w - hi) * fc);
        }
    }
}

/* acc[j] = eff[j] + dot(patch, w row j) where the patch is `rows` runs of `run` <= 16 bytes read
 * in place (x[r]: one input row of a pixel whose taps are all inside the image), each in one
 * register; w row j's run r starts at r * run. rows is a constant at each call. */
__attribute__((always_inline)) static inline void zo_mve_rows_runs(const int8_t *const *x, int32_t run,
                                                                   const int8_t *w, int32_t k, int32_t n,
                                                                   const int32_t *eff, int32_t *acc, const int rows)
{
    const mve_pred16_t pr = vctp8q((uint32_t)run);
    const int8x16_t zero = vdupq_n_s8(0);
    const int8x16_t x0 = vldrbq_z_s8(x[0], pr);
    const int8x16_t x1 = rows >= 2 ? vldrbq_z_s8(x[1], pr) : zero;
    const int8x16_t x2 = rows >= 3 ? vldrbq_z_s8(x[2], pr) : zero;
    const int8x16_t x3 = rows >= 4 ? vldrbq_z_s8(x[3], pr) : zero;
    for (int32_t j = 0; j < n; ++j) {
        int32_t a = vmladavaq_s8(eff[j], x0, vldrbq_z_s8(w, pr));
        if (rows >= 2) {
            a = vmladavaq_s8(a, x1, vldrbq_z_s8(w + run, pr));
        }
        if (rows >= 3) {
            a = vmladavaq_s8(a, x2, vldrbq_z_s8(w + 2 * run, pr));
        }
        if (rows >= 4) {
            a = vmladavaq_s8(a, x3, vldrbq_z_s8(w + 3 * run, pr));
        }
        acc[j] = a;
        w += k;
    }
}

/* Whether output pixel (oy, ox) of a convolution with unit dilation and whole-pixel channels can
 * be read in place: every tap inside the image; then x[ky] = its filter row ky's input run. */
static inline int zo_mve_interior_runs(const zo_conv2d_params_t *p, const int8_t *input, int32_t oy, int32_t ox,
                                       const int8_t **x)
{
    const int32_t iy0 = oy * p->stride_h - p->pad_h;
    const int32_t ix0 = ox * p->stride_w - p->pad_w;
    if (iy0 < 0 || ix0 < 0 || iy0 + p->filter_h > p->input_h || ix0 + p->filter_w > p->input_w) {
        return 0;
    }
    const size_t row = (size_t)p->input_w * (size_t)p->input_c;
    for (int32_t ky = 0; ky < p->filter_h; ++ky) {
        x[ky] = input + (size_t)(iy0 + ky) * row + (size_t)ix0 * (size_t)p->input_c;
    }
    return 1;
}

/* Small-patch convolutions (unit dilation, one group, filter_h <= 4, filter_w * input_c <= 16):
 * interior pixels straight from the input rows, border pixels through a patch. */
static void zo_mve_conv2d_runs(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                               const int32_t *bias, int8_t *output)
{
    const int32_t k = p->filter_h * p->filter_w * p->filter_c;
    const int32_t run = p->filter_w * p->filter_c;
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max, zo_mve_right_only(p->shift, p->output_c)};
    const zo_mve_runs_t runs = zo_mve_runs(p);
    int32_t eff[ZO_MVE_OC_BLOCK], acc[ZO_MVE_OC_BLOCK];
    int8_t patch[64];
    for (int32_t oc0 = 0; oc0 < p->output_c; oc0 += ZO_MVE_OC_BLOCK) {
        const int32_t n = zo_min32(ZO_MVE_OC_BLOCK, p->output_c - oc0);
        const int8_t *w = filter + (size_t)oc0 * (size_t)k;
        const int32_t *e = zo_mve_fold_bias(p->folded_bias, oc0, w, k, n, bias, p->input_zp, eff);
        for (int32_t oy = 0; oy < p->output_h; ++oy) {
            for (int32_t ox = 0; ox < p->output_w; ++ox) {
                int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c
                              + (size_t)oc0;
                const int8_t *x[4];
                if (!zo_mve_interior_runs(p, input, oy, ox, x)) {
                    zo_mve_im2col_runs(&runs, input, oy, ox, patch);
                    zo_mve_gemv(patch, w, k, n, e, p->multiplier + oc0, p->shift + oc0, &q, out);
                    continue;
                }
                switch (p->filter_h) {
                case 1:
                    zo_mve_rows_runs(x, run, w, k, n, e, acc, 1);
                    break;
                case 2:
                    zo_mve_rows_runs(x, run, w, k, n, e, acc, 2);
                    break;
                case 3:
                    zo_mve_rows_runs(x, run, w, k, n, e, acc, 3);
                    break;
                default:
                    zo_mve_rows_runs(x, run, w, k, n, e, acc, 4);
                    break;
                }
                zo_mve_requant_store(acc, n, p->multiplier + oc0, p->shift + oc0, &q, out);
            }
        }
    }
}

/* x[i] for the pixels pix .. pix + t - 1 of a tile (a short last tile repeats its last pixel; those
 * sums are not stored): in place (patch NULL: 1x1 without padding), else im2col rows in patch. Out
 * of line: its divisions and im2col calls would take zo_mve_conv2d_gemm's registers. */
__attribute__((noinline)) static void zo_mve_tile_inputs(const zo_conv2d_params_t *p, const zo_mve_runs_t *runs,
                                                         const int8_t *input, int32_t pix, int32_t t, int32_t count,
                                                         int32_t c0, int8_t *patch, const int8_t **x)
{
    const int32_t k = p->filter_h * p->filter_w * p->filter_c;
    for (int32_t i = 0; i < t; ++i) {
        const int32_t at = pix + zo_min32(i, count - 1);
        const int32_t oy = at / p->output_w, ox = at - oy * p->output_w;
        if (patch == NULL) {
            x[i] = input + ((size_t)(oy * p->stride_h) * (size_t)p->input_w + (size_t)(ox * p->stride_w))
                               * (size_t)p->input_c + (size_t)c0;
        } else {
            if (p->dilation_w == 1 && p->filter_c == p->input_c) {
                zo_mve_im2col_runs(runs, input, oy, ox, patch + i * k);
            } else {
                zo_mve_im2col(p, input, oy, ox, c0, patch + i * k);
            }
            x[i] = patch + i * k;
        }
    }
}

/* The matrix product over output pixels: 1x1 without padding reads pixels in place (patch NULL),
 * the others through im2col. */
static void zo_mve_conv2d_gemm(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                               const int32_t *bias, int8_t *output, int8_t *patch)
{
    const int32_t fc = p->filter_c;
    const int32_t groups = p->input_c / fc;
    const int32_t oc_per_group = p->output_c / groups;
    const int32_t k = p->filter_h * p->filter_w * fc;
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max, zo_mve_right_only(p->shift, p->output_c)};
    const zo_mve_runs_t runs = zo_mve_runs(p);
    int32_t eff[ZO_MVE_OC_BLOCK], acc[4 * ZO_MVE_OC_BLOCK];
    for (int32_t g = 0; g < groups; ++g) {
        const int32_t c0 = g * fc;
        const int32_t oc_end = (g + 1) * oc_per_group;
        for (int32_t oc0 = g * oc_per_group; oc0 < oc_end; oc0 += ZO_MVE_OC_BLOCK) {
            const int32_t n = zo_min32(ZO_MVE_OC_BLOCK, oc_end - oc0);
            const int8_t *w = filter + (size_t)oc0 * (size_t)k;
            const int32_t *e = zo_mve_fold_bias(p->folded_bias, oc0, w, k, n, bias, p->input_zp, eff);
            /* output pixels in tiles that share each weight vector (patches permitting) */
            const int32_t pixels = p->output_h * p->output_w;
            /* 1x1 at stride 1: output pixel i reads input pixel i (no division per pixel) */
            const int dense = patch == NULL && p->stride_h == 1 && p->stride_w == 1;
            int32_t tile = zo_mve_tile(k);
            while (patch != NULL && tile * k > ZO_CONV_PATCH_MAX) {
                tile /= 2;
            }
            for (int32_t pix = 0; pix < pixels;) {
                /* a short last tile of three goes pixel by pixel (repeats would cost as much) */
                const int32_t t = tile == 3 && pixels - pix < 3 ? 1 : tile;
                const int32_t count = zo_min32(t, pixels - pix);
                int8_t *out = output + (size_t)pix * (size_t)p->output_c + (size_t)oc0;
                const int8_t *x[4];
                if (dense) {
                    for (int32_t i = 0; i < t; ++i) {
                        x[i] = input + (size_t)(pix + zo_min32(i, count - 1)) * (size_t)p->input_c + (size_t)c0;
                    }
                } else {
                    zo_mve_tile_inputs(p, &runs, input, pix, t, count, c0, patch, x);
                }
                zo_mve_tile_dots(x, t, w, k, n, e, acc);
                if (t >= 3) {
                    /* the channel constants loaded once for the tile's pixels */
                    zo_mve_requant_pixels(acc, ZO_MVE_OC_BLOCK, count, n, p->multiplier + oc0,
                                              p->shift + oc0, &q, out, p->output_c);
                } else {
                    for (int32_t i = 0; i < count; ++i) {
                        zo_mve_requant_store(acc + i * ZO_MVE_OC_BLOCK, n, p->multiplier + oc0, p->shift + oc0,
                                             &q, out + i * p->output_c);
                    }
                }
                pix += t;
            }
        }
    }
}

/* Kept out of line so only this path's stack frame holds the patch buffer. */
__attribute__((noinline)) static void zo_mve_conv2d_im2col(const zo_conv2d_params_t *p, const int8_t *input,
                                                           const int8_t *filter, const int32_t *bias,
                                                           int8_t *output)
{
    int8_t patch[ZO_CONV_PATCH_MAX];
    zo_mve_conv2d_gemm(p, input, filter, bias, output, patch);
}

static int zo_mve_conv2d_as_depthwise(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                                      const int32_t *bias, int8_t *output);

void zo_conv2d_s8(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                  int8_t *output)
{
    const int32_t k = p->filter_h * p->filter_w * p->filter_c;
    if (p->filter_h == 1 && p->filter_w == 1 && p->pad_h == 0 && p->pad_w == 0) {
        zo_mve_conv2d_gemm(p, input, filter, bias, output, NULL);
    } else if (p->input_c == 1 && p->filter_c == 1 && p->output_c <= 16
               && zo_mve_conv2d_as_depthwise(p, input, filter, bias, output)) {
        return;
    } else if (p->dilation_h == 1 && p->dilation_w == 1 && p->filter_c == p->input_c && p->filter_h <= 4
               && p->filter_w * p->filter_c <= 16 && k > 16) {
        zo_mve_conv2d_runs(p, input, filter, bias, output);
    } else if (k <= ZO_CONV_PATCH_MAX) {
        zo_mve_conv2d_im2col(p, input, filter, bias, output);
    } else {
        zo_conv2d_s8_direct(p, input, filter, bias, output); /* links only that part of the portable C */
    }
}

void zo_fully_connected_s8(const zo_fully_connected_params_t *p, const int8_t *input, const int8_t *weights,
                           const int32_t *bias, int8_t *output)
{
    const int32_t k = p->depth;
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max, zo_mve_right_only(p->shift, p->units)};
    int32_t eff[ZO_MVE_OC_BLOCK];
    for (int32_t oc0 = 0; oc0 < p->units; oc0 += ZO_MVE_OC_BLOCK) {
        const int32_t n = zo_min32(ZO_MVE_OC_BLOCK, p->units - oc0);
        const int8_t *w = weights + (size_t)oc0 * (size_t)k;
        const int32_t *e = zo_mve_fold_bias(p->folded_bias, oc0, w, k, n, bias, p->input_zp, eff);
        for (int32_t r = 0; r < p->rows; ++r) {
            zo_mve_gemv(input + (size_t)r * (size_t)k, w, k, n, e, p->multiplier + oc0, p->shift + oc0, &q,
                        output + (size_t)r * (size_t)p->units + (size_t)oc0);
        }
    }
}

/* ------------------------------------------------------------------------ depthwise */

/* Output pixels of one row whose accumulators are kept before requantisation. */
#define ZO_MVE_DW_PIXELS 32

/* Bytes of input a depthwise band may hold on the stack (zo_mve_dw_banded). */
#ifndef ZO_MVE_DW_BAND_MAX
#define ZO_MVE_DW_BAND_MAX 2048
#endif

/* Where the taps of a 4-pixel tile are in a band: from one pixel's first tap to the next pixel's
 * (px_step), to the next tap along a row (x_tap); the filter's size. */
typedef struct {
    size_t px_step, x_tap;
    int32_t filter_h, filter_w;
} zo_mve_dw_taps_t;

/* Four lanes (channels c..c+3) of four output pixels: int32 products of the raw int8 values (no
 * zero point: `eff` = bias - input_zp * sum of each channel's taps starts the sums), so each
 * weight vector (packed: 16 bytes a tap) serves four pixels; filter row ky's taps start at
 * rows[ky] + off. */
__attribute__((always_inline)) static inline void zo_mve_dw_lanes4(const int8_t *const *rows, size_t off,
                                                                   const int8_t *w, const zo_mve_dw_taps_t *t,
                                                                   const int32_t *eff, int32_t *acc)
{
    const size_t px_step = t->px_step;
    int32x4_t a0 = vldrwq_s32(eff), a1 = a0, a2 = a0, a3 = a0;
    for (int32_t ky = 0; ky < t->filter_h; ++ky) {
        const int8_t *x = rows[ky] + off;
        for (int32_t kx = 0; kx < t->filter_w; ++kx, x += t->x_tap, w += 16) {
            const int32x4_t wv = vldrbq_s32(w);
            a0 = vaddq_s32(a0, vmulq_s32(vldrbq_s32(x), wv));
            a1 = vaddq_s32(a1, vmulq_s32(vldrbq_s32(x + px_step), wv));
            a2 = vaddq_s32(a2, vmulq_s32(vldrbq_s32(x + 2 * px_step), wv));
            a3 = vaddq_s32(a3, vmulq_s32(vldrbq_s32(x + 3 * px_step), wv));
        }
    }
    vstrwq_s32(acc, a0);
    vstrwq_s32(acc + 16, a1);
    vstrwq_s32(acc + 32, a2);
    vstrwq_s32(acc + 48, a3);
}

/* A depthwise layer as zo_mve_dw_banded walks it: along its rows, or transposed (rows and columns
 * swapped, filter included: a tall narrow map then has long rows). Strides in bytes. */
typedef struct {
    int32_t in_h, in_w, out_h, out_w;
    size_t in_px, in_row, out_px, out_row; /* to the next pixel along a row, to the next row */
    int32_t filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w, pad_h, pad_w;
    size_t w_col, w_row, w_ch; /* the weights' step to the next tap along a row, down a column, to
                                  the next channel */
} zo_mve_dw_view_t;

/* The layer walked along its rows or transposed. `ohwi`: the filter is a CONV_2D's on one input
 * channel ([output_c][filter_h][filter_w][1]), not a depthwise one ([1][filter_h][filter_w][output_c]). */
__attribute__((noinline)) static zo_mve_dw_view_t zo_mve_dw_view(const zo_depthwise_conv2d_params_t *p, int ohwi)
{
    /* rows along the longer side (fewer pixels past a row's whole tiles), or along the filter's
     * longer side (a 1-D filter along H runs as one row) */
    const int transposed = p->output_h > p->output_w || (p->output_h == p->output_w && p->filter_h > p->filter_w);
    const size_t in_c = (size_t)p->input_c, oc = (size_t)p->output_c;
    const size_t in_x = in_c, in_y = (size_t)p->input_w * in_c, out_x = oc, out_y = (size_t)p->output_w * oc;
    const size_t w_x = ohwi ? 1 : oc, w_y = (size_t)p->filter_w * w_x;
    const size_t w_ch = ohwi ? (size_t)p->filter_h * (size_t)p->filter_w : 1;
    if (!transposed) {
        return (zo_mve_dw_view_t){p->input_h, p->input_w, p->output_h, p->output_w, in_x, in_y, out_x, out_y,
                                  p->filter_h, p->filter_w, p->stride_h, p->stride_w, p->dilation_h, p->dilation_w,
                                  p->pad_h, p->pad_w, w_x, w_y, w_ch};
    }
    return (zo_mve_dw_view_t){p->input_w, p->input_h, p->output_w, p->output_h, in_y, in_x, out_y, out_x,
                              p->filter_w, p->filter_h, p->stride_w, p->stride_h, p->dilation_w, p->dilation_h,
                              p->pad_w, p->pad_h, w_y, w_x, w_ch};
}

/* A band of 4 pixels or more holds filter_h rows of (3 * stride_w + span) >= 4 pixels of 16
 * bytes, so a filter that fits has at most ZO_MVE_DW_ROWS rows and ZO_MVE_DW_TAPS taps
 * (filter_h * filter_w <= filter_h * span). */
#define ZO_MVE_DW_ROWS (ZO_MVE_DW_BAND_MAX / 64)
#define ZO_MVE_DW_TAPS (ZO_MVE_DW_BAND_MAX / 16)

/* Output pixels of a band's row segment: the most, a multiple of 4 up to ZO_MVE_DW_PIXELS, whose
 * band fits ZO_MVE_DW_BAND_MAX bytes; 0 if not even 4 do. */
__attribute__((noinline)) static int32_t zo_mve_dw_band_pixels(const zo_mve_dw_view_t *v)
{
    /* the widest band row that fits (filter_h rows of `width` pixels of 16 bytes) must hold the
     * filter's span, (filter_w - 1) * dilation_w + 1 (compared without forming it: no overflow) */
    const int32_t width = (ZO_MVE_DW_BAND_MAX / 16) / v->filter_h;
    if (width == 0 || (v->filter_w > 1 && v->dilation_w > (width - 1) / (v->filter_w - 1))) {
        return 0;
    }
    const int32_t seg = (width - (v->filter_w - 1) * v->dilation_w - 1) / v->stride_w + 1;
    return seg < ZO_MVE_DW_PIXELS ? seg & ~3 : ZO_MVE_DW_PIXELS;
}

/* The input of one band pixel, lanes j < n: channel c0 + j (depth multiplier 1), else the
 * channel output channel oc0 + j reads (c0 = oc0 / dm; offs: j's channel - c0): one channel for
 * all (`one`: broadcast), or gathered (a gather costs a cycle an element on silicon, though it
 * counts as one instruction: done once a band pixel, not once a tap). */
__attribute__((always_inline)) static inline int8x16_t zo_mve_dw_pixel(const int8_t *x, mve_pred16_t pn,
                                                                       uint8x16_t offs, const int full,
                                                                       const int mult, const int one)
{
    if (!mult) {
        return full ? vldrbq_s8(x) : vldrbq_z_s8(x, pn);
    }
    return one ? vdupq_n_s8(*x) : vldrbq_gather_offset_z_s8(x, offs, pn);
}

/* row[b][j], b < width, j < 16: the input at row iy, column ix0 + b, read for output channel
 * oc0 + j (0 past n); the input zero point where that is outside the image (its products then
 * cancel against eff's). The flags are constants at each call: `full` 16 channels of multiplier
 * 1, `mult` a depth multiplier > 1, `one` all n from one input channel. */
__attribute__((always_inline)) static inline void zo_mve_dw_fill_row(const zo_mve_dw_view_t *v, const int8_t *input,
                                                                     int32_t iy, int32_t ix0, int32_t width,
                                                                     int32_t c0, mve_pred16_t pn, uint8x16_t offs,
                                                                     int8x16_t zp, int8_t *row, const int full,
                                                                     const int mult, const int one)
{
    const int inside = iy >= 0 && iy < v->in_h;
    const int32_t b_lo = inside ? zo_min32(zo_max32(-ix0, 0), width) : width;
    const int32_t b_hi = inside ? zo_max32(zo_min32(v->in_w - ix0, width), b_lo) : width;
    int32_t b = 0;
    for (; b < b_lo; ++b) {
        vstrbq_s8(row + (size_t)b * 16, zp);
    }
    if (b < b_hi) {
        const size_t step = v->in_px; /* in a local: the stores to row could alias *v */
        const int8_t *x = input + (size_t)iy * v->in_row + (size_t)(ix0 + b) * step + (size_t)c0;
        for (; b < b_hi; ++b, x += step) {
            vstrbq_s8(row + (size_t)b * 16, zo_mve_dw_pixel(x, pn, offs, full, mult, one));
        }
    }
    for (; b < width; ++b) {
        vstrbq_s8(row + (size_t)b * 16, zp);
    }
}

__attribute__((noinline)) static void zo_mve_dw_fill(const zo_depthwise_conv2d_params_t *p,
                                                     const zo_mve_dw_view_t *v, const int8_t *input, int32_t iy,
                                                     int32_t ix0, int32_t width, int32_t oc0, int32_t n, int8_t *row)
{
    const int8x16_t zp = vdupq_n_s8((int8_t)p->input_zp);
    const mve_pred16_t pn = vctp8q((uint32_t)n);
    const int32_t dm = p->depth_multiplier, c0 = oc0 / dm;
    if (dm == 1) {
        const uint8x16_t none = vdupq_n_u8(0);
        if (n == 16) {
            zo_mve_dw_fill_row(v, input, iy, ix0, width, c0, pn, none, zp, row, 1, 0, 0);
        } else {
            zo_mve_dw_fill_row(v, input, iy, ix0, width, c0, pn, none, zp, row, 0, 0, 0);
        }
        return;
    }
    if ((oc0 + n - 1) / dm == c0) {
        zo_mve_dw_fill_row(v, input, iy, ix0, width, c0, pn, vdupq_n_u8(0), zp, row, 0, 1, 1);
        return;
    }
    uint8_t o[16] = {0}; /* lane j reads channel c0 + o[j]: counted, not divided */
    for (int32_t j = 0, r = oc0 - c0 * dm, ch = 0; j < n; ++j) {
        o[j] = (uint8_t)ch;
        if (++r == dm) {
            r = 0, ++ch;
        }
    }
    zo_mve_dw_fill_row(v, input, iy, ix0, width, c0, pn, vld1q_u8(o), zp, row, 0, 1, 0);
}

/* One filter row of a 3x3 tile (zo_mve_dw_row3x3) in assembly: gcc's scheduling of the same
 * intrinsics keeps the input vectors that neighbouring taps share in registers and spills the
 * sums. Pixels 0 and 1 read at x, 2 and 3 at x2 (two pixels on), so every offset fits the load's 7
 * bits (a widening load takes r0-r7: "l"); two temporaries alternate so a multiply need not wait
 * for the load just before it; w moves on to the next filter row's weights. */
#define ZO_MVE_DW_ASM_TAP(kx, px)                                  \
    "vldrb.s32 %q[wv], [%[w], #16*" #kx "]\n\t"                    \
    "vldrb.s32 %q[t0], [%[x], #16*" #kx "]\n\t"                    \
    "vldrb.s32 %q[t1], [%[x], #16*" #kx "+" #px "]\n\t"            \
    "vmul.i32 %q[t0], %q[t0], %q[wv]\n\t"                          \
    "vadd.i32 %q[a0], %q[a0], %q[t0]\n\t"                          \
    "vldrb.s32 %q[t0], [%[x2], #16*" #kx "]\n\t"                   \
    "vmul.i32 %q[t1], %q[t1], %q[wv]\n\t"                          \
    "vadd.i32 %q[a1], %q[a1], %q[t1]\n\t"                          \
    "vldrb.s32 %q[t1], [%[x2], #16*" #kx "+" #px "]\n\t"           \
    "vmul.i32 %q[t0], %q[t0], %q[wv]\n\t"                          \
    "vadd.i32 %q[a2], %q[a2], %q[t0]\n\t"                          \
    "vmul.i32 %q[t1], %q[t1], %q[wv]\n\t"                          \
    "vadd.i32 %q[a3], %q[a3], %q[t1]\n\t"
#define ZO_MVE_DW_ASM_ROW(px, ky)                                                                         \
    do {                                                                                                  \
        const int8_t *x = rows[ky] + off, *x2 = x + 2 * (px);                                             \
        __asm__ volatile(ZO_MVE_DW_ASM_TAP(0, px) ZO_MVE_DW_ASM_TAP(1, px) ZO_MVE_DW_ASM_TAP(2, px)       \
                         "adds %[w], #48\n\t"                                                             \
                         : [a0] "+w"(a0), [a1] "+w"(a1), [a2] "+w"(a2), [a3] "+w"(a3), [wv] "=&w"(wv),    \
                           [t0] "=&w"(t0), [t1] "=&w"(t1), [w] "+l"(wc)                                   \
                         : [x] "l"(x), [x2] "l"(x2)                                                       \
                         : "memory", "cc");                                                               \
    } while (0)

/* A row segment of `tiles` output pixels (a multiple of 4) through a 3x3 filter along rows of
 * stride 1 or 2 (px_step 16 or 32), 4 pixels x 4 channels at a time in assembly (rows[ky]: filter
 * row ky's band row; packed weights 16 bytes a tap): acc[px * 16 + j]. Each stride in its own
 * function. (Requantising each tile straight from its registers cost more: the channel
 * constants and clamps do not fit the registers beside the four sums.) */
__attribute__((always_inline)) static inline void zo_mve_dw_row3x3(const int8_t *const *rows, const int8_t *w,
                                                                   const int32_t *eff, int32_t *acc, int32_t tiles,
                                                                   int32_t n, const size_t px_step)
{
    for (int32_t px = 0; px < tiles; px += 4) {
        for (int32_t c = 0; c < n; c += 4) {
            const size_t off = (size_t)px * px_step + (size_t)c;
            const int8_t *wc = w + c;
            int32x4_t a0 = vldrwq_s32(eff + c), a1 = a0, a2 = a0, a3 = a0, wv, t0, t1;
            if (px_step == 16) {
                ZO_MVE_DW_ASM_ROW(16, 0);
                ZO_MVE_DW_ASM_ROW(16, 1);
                ZO_MVE_DW_ASM_ROW(16, 2);
            } else {
                ZO_MVE_DW_ASM_ROW(32, 0);
                ZO_MVE_DW_ASM_ROW(32, 1);
                ZO_MVE_DW_ASM_ROW(32, 2);
            }
            int32_t *a = acc + px * 16 + c;
            vstrwq_s32(a, a0);
            vstrwq_s32(a + 16, a1);
            vstrwq_s32(a + 32, a2);
            vstrwq_s32(a + 48, a3);
        }
    }
}
#undef ZO_MVE_DW_ASM_ROW
#undef ZO_MVE_DW_ASM_TAP

__attribute__((noinline)) static void zo_mve_dw_row3x3_s1(const int8_t *const *rows, const int8_t *w,
                                                          const int32_t *eff, int32_t *acc, int32_t tiles, int32_t n)
{
    zo_mve_dw_row3x3(rows, w, eff, acc, tiles, n, 16);
}

__attribute__((noinline)) static void zo_mve_dw_row3x3_s2(const int8_t *const *rows, const int8_t *w,
                                                          const int32_t *eff, int32_t *acc, int32_t tiles, int32_t n)
{
    zo_mve_dw_row3x3(rows, w, eff, acc, tiles, n, 32);
}

/* One 4-pixel tile of zo_mve_dw_banded starting `off` bytes into its band rows: every group of 4
 * channels up to n (the band and the packed weights hold 0 past n). */
__attribute__((always_inline)) static inline void zo_mve_dw_band_tile(const int8_t *const *rows, size_t off,
                                                                      const int8_t *w, const zo_mve_dw_taps_t *t,
                                                                      const int32_t *eff, int32_t *acc, int32_t n)
{
    for (int32_t c = 0; c < n; c += 4) {
        zo_mve_dw_lanes4(rows, off + (size_t)c, w + c, t, eff + c, acc + c);
    }
}

/* The 1 to 3 pixels past a row segment's whole tiles, one at a time (a tile's fourth would cost
 * more): acc[px * 16 + j] for the pixel whose taps start `off` + px * px_step bytes into the band
 * rows. `three`: a 3x3 filter (t->x_tap 16), in assembly as zo_mve_dw_row3x3. */
__attribute__((always_inline)) static inline void zo_mve_dw_tail(const int8_t *const *rows, size_t off,
                                                                 const int8_t *w, const zo_mve_dw_taps_t *t,
                                                                 const int32_t *eff, int32_t *acc, int32_t pixels,
                                                                 int32_t n, const int three)
{
    for (int32_t px = 0; px < pixels; ++px, off += t->px_step, acc += 16) {
        for (int32_t c = 0; c < n; c += 4) {
            const int8_t *wt = w + c;
            int32x4_t a = vldrwq_s32(eff + c);
            if (three) {
                int32x4_t t0, t1;
#define ZO_MVE_DW_ASM_TAP1(kx)                                  \
    "vldrb.s32 %q[t0], [%[x], #16*" #kx "]\n\t"                \
    "vldrb.s32 %q[t1], [%[w], #16*" #kx "]\n\t"                \
    "vmul.i32 %q[t0], %q[t0], %q[t1]\n\t"                     \
    "vadd.i32 %q[a], %q[a], %q[t0]\n\t"
#define ZO_MVE_DW_ASM_ROW1(ky)                                                                         \
    __asm__ volatile(ZO_MVE_DW_ASM_TAP1(0) ZO_MVE_DW_ASM_TAP1(1) ZO_MVE_DW_ASM_TAP1(2) "adds %[w], #48\n\t" \
                     : [a] "+w"(a), [t0] "=&w"(t0), [t1] "=&w"(t1), [w] "+l"(wt)                         \
                     : [x] "l"(rows[ky] + off + c)                                                       \
                     : "memory", "cc")
                ZO_MVE_DW_ASM_ROW1(0);
                ZO_MVE_DW_ASM_ROW1(1);
                ZO_MVE_DW_ASM_ROW1(2);
#undef ZO_MVE_DW_ASM_ROW1
#undef ZO_MVE_DW_ASM_TAP1
            } else {
                for (int32_t ky = 0; ky < t->filter_h; ++ky) {
                    const int8_t *xt = rows[ky] + off + c;
                    for (int32_t kx = 0; kx < t->filter_w; ++kx, xt += t->x_tap, wt += 16) {
                        a = vaddq_s32(a, vmulq_s32(vldrbq_s32(xt), vldrbq_s32(wt)));
                    }
                }
            }
            vstrwq_s32(acc + c, a);
        }
    }
}

__attribute__((noinline)) static void zo_mve_dw_band_tail(const int8_t *const *rows, size_t off, const int8_t *w,
                                                          const zo_mve_dw_taps_t *t, const int32_t *eff,
                                                          int32_t *acc, int32_t pixels, int32_t n)
{
    if (t->filter_h == 3 && t->filter_w == 3 && t->x_tap == 16) {
        zo_mve_dw_tail(rows, off, w, t, eff, acc, pixels, n, 1);
    } else {
        zo_mve_dw_tail(rows, off, w, t, eff, acc, pixels, n, 0);
    }
}

/* DEPTHWISE_CONV_2D, one channel block [oc0, oc0 + n) over every output pixel, walked as the
 * view says. The block's weights are first packed 16 bytes a tap; each row segment of up to `seg`
 * output pixels reads its input from a band (zo_mve_dw_fill: the padding as the input zero point;
 * each input row copied once, kept while the next output rows read it), so every pixel, at the borders too, goes four at a time through zo_mve_dw_lanes4 (the 1
 * to 3 left at a segment's end one at a time). The bias starts the sums with -input_zp * the
 * taps' sum (wrapping int32, as TFLM's bias added last). A 3x3 filter along rows of stride 1 or
 * 2 has its own functions (assembly, every offset a constant). */
static void zo_mve_dw_banded(const zo_depthwise_conv2d_params_t *p, const zo_mve_dw_view_t *v, const int8_t *input,
                             const int8_t *filter, const int32_t *bias, int8_t *output, int32_t oc0, int32_t n,
                             int32_t seg)
{
    int8_t band[ZO_MVE_DW_BAND_MAX] __attribute__((aligned(16)));
    int8_t w[ZO_MVE_DW_TAPS * 16] __attribute__((aligned(16)));
    int32_t acc[ZO_MVE_DW_PIXELS * 16] __attribute__((aligned(16)));
    int32_t eff[16] __attribute__((aligned(16)));
    const mve_pred16_t pn = vctp8q((uint32_t)n);
    const int32_t taps = v->filter_h * v->filter_w;
    for (int32_t ky = 0; ky < v->filter_h; ++ky) {
        for (int32_t kx = 0; kx < v->filter_w; ++kx) {
            const int8_t *src = filter + (size_t)ky * v->w_row + (size_t)kx * v->w_col + (size_t)oc0 * v->w_ch;
            int8_t *dst = w + (size_t)(ky * v->filter_w + kx) * 16;
            if (v->w_ch == 1) {
                vstrbq_s8(dst, vldrbq_z_s8(src, pn));
            } else { /* a CONV_2D's filter: the channels a filter apart */
                vstrbq_s8(dst, vdupq_n_s8(0));
                for (int32_t j = 0; j < n; ++j) {
                    dst[j] = src[(size_t)j * v->w_ch];
                }
            }
        }
    }
    /* eff = bias - input_zp * the sum of each channel's taps */
    for (int32_t c = 0; c < n; c += 4) {
        const mve_pred16_t pc = vctp32q((uint32_t)(n - c));
        int32x4_t sum = vdupq_n_s32(0);
        for (int32_t t = 0; t < taps; ++t) {
            sum = vaddq_s32(sum, vldrbq_s32(w + (size_t)t * 16 + (size_t)c));
        }
        const int32x4_t b = bias != NULL ? vldrwq_z_s32(bias + oc0 + c, pc) : vdupq_n_s32(0);
        vstrwq_s32(eff + c, vaddq_s32(b, vmulq_n_s32(sum, -p->input_zp)));
    }
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max, zo_mve_right_only(p->shift + oc0, n)};
    const int32_t span = (v->filter_w - 1) * v->dilation_w + 1;
    const int three = v->filter_h == 3 && v->filter_w == 3 && v->dilation_w == 1;
    /* Input row iy is kept in band row (iy mod filter_h) while the next output rows need it: a
     * filter's rows are filter_h consecutive input rows, never two in one band row (with a
     * dilation, band row ky holds filter row ky, refilled for every output row). */
    const int32_t fh = v->filter_h, ring = v->dilation_h == 1;
    int32_t held[ZO_MVE_DW_ROWS];      /* the input row each band row holds */
    const int8_t *rows[ZO_MVE_DW_ROWS]; /* filter row ky's band row */
    for (int32_t ox0 = 0; ox0 < v->out_w; ox0 += seg) {
        const int32_t pixels = zo_min32(seg, v->out_w - ox0);
        const int32_t tiles = pixels & ~3; /* pixels in whole tiles of 4 */
        const int32_t width = (pixels - 1) * v->stride_w + span;
        const int32_t ix0 = ox0 * v->stride_w - v->pad_w;
        const zo_mve_dw_taps_t t = {(size_t)v->stride_w * 16, (size_t)v->dilation_w * 16, fh, v->filter_w};
        for (int32_t r = 0; r < fh; ++r) {
            held[r] = INT32_MIN;
        }
        for (int32_t oy = 0; oy < v->out_h; ++oy) {
            for (int32_t ky = 0; ky < fh; ++ky) {
                const int32_t iy = oy * v->stride_h - v->pad_h + ky * v->dilation_h;
                const int32_t r = ring ? ((iy % fh) + fh) % fh : ky;
                int8_t *row = band + (size_t)r * (size_t)width * 16;
                if (held[r] != iy) {
                    zo_mve_dw_fill(p, v, input, iy, ix0, width, oc0, n, row);
                    held[r] = iy;
                }
                rows[ky] = row;
            }
            if (three && v->stride_w == 1) {
                zo_mve_dw_row3x3_s1(rows, w, eff, acc, tiles, n);
            } else if (three && v->stride_w == 2) {
                zo_mve_dw_row3x3_s2(rows, w, eff, acc, tiles, n);
            } else {
                for (int32_t px = 0; px < tiles; px += 4) {
                    zo_mve_dw_band_tile(rows, (size_t)px * t.px_step, w, &t, eff, acc + px * 16, n);
                }
            }
            if (tiles < pixels) {
                zo_mve_dw_band_tail(rows, (size_t)tiles * t.px_step, w, &t, eff, acc + tiles * 16, pixels - tiles, n);
            }
            int8_t *out = output + (size_t)oy * v->out_row + (size_t)ox0 * v->out_px + (size_t)oc0;
            zo_mve_requant_dw_row(acc, pixels, n, p->multiplier + oc0, p->shift + oc0, &q, out, (int32_t)v->out_px);
        }
    }
}

void zo_depthwise_conv2d_s8(const zo_depthwise_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                            const int32_t *bias, int8_t *output)
{
    const zo_mve_dw_view_t view = zo_mve_dw_view(p, 0);
    const int32_t seg = zo_mve_dw_band_pixels(&view);
    if (seg == 0) { /* a filter, stride or dilation too wide for a band of 4 pixels: rare */
        zo_depthwise_conv2d_s8_portable(p, input, filter, bias, output);
        return;
    }
    for (int32_t oc0 = 0; oc0 < p->output_c; oc0 += 16) {
        zo_mve_dw_banded(p, &view, input, filter, bias, output, oc0, zo_min32(16, p->output_c - oc0), seg);
    }
}

/* CONV_2D on one input channel with at most 16 output channels (a first layer on a grey image or a
 * spectrogram) is a depthwise convolution of depth multiplier output_c: banded, every output
 * pixel's taps are 4 pixels x 4 channels of multiply-adds, where the matrix product would gather a
 * patch of a few bytes for every pixel. 0 if the filter does not fit a band. */
static int zo_mve_conv2d_as_depthwise(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                                      const int32_t *bias, int8_t *output)
{
    const zo_depthwise_conv2d_params_t d = {p->input_h,    p->input_w,    1,          p->output_h, p->output_w,
                                            p->output_c,   p->filter_h,   p->filter_w, p->output_c, p->stride_h,
                                            p->stride_w,   p->dilation_h, p->dilation_w, p->pad_h,  p->pad_w,
                                            p->input_zp,   p->output_zp,  p->act_min,  p->act_max,  p->multiplier,
                                            p->shift};
    const zo_mve_dw_view_t view = zo_mve_dw_view(&d, 1);
    const int32_t seg = zo_mve_dw_band_pixels(&view);
    if (seg == 0) {
        return 0;
    }
    zo_mve_dw_banded(&d, &view, input, filter, bias, output, 0, d.output_c, seg);
    return 1;
}

#else
typedef int zo_kernels_conv_mve_unused; /* ISO C: a translation unit is never empty */
#endif /* ZO_KERNELS_MVE */
