/* zo_train_math.c - perturbation, update, loss of a ZO training step (see zo_train_math.h).
 *
 * Every float operation below is a single IEEE-754 binary32 operation written out in source
 * order; build with -ffp-contract=off so none is fused.  The NumPy mirror performs the same
 * operations in the same order. */
#include "zo_train_math.h"

#include <string.h>

/* 4-byte copies for unaligned word access; the builtin is inlined even under -ffreestanding. */
#if defined(__GNUC__)
#define ZO_MEMCPY __builtin_memcpy
#else
#define ZO_MEMCPY memcpy
#endif

/* Helium (MVE) versions of the hot loops (the perturbation, the accumulation of u, the rounding
 * of full blocks), used when the target has MVE (-mcpu=cortex-m55) unless ZO_NO_MVE is
 * defined.  They compute exactly the same values as the portable loops (the QEMU test runs
 * both builds against the NumPy mirror). */
#if defined(__ARM_FEATURE_MVE) && !defined(ZO_NO_MVE)
#include <arm_mve.h>
#define ZO_MVE_INT 1
#if (__ARM_FEATURE_MVE & 2)
#define ZO_MVE_FLOAT 1
#endif
#endif

#define ZO_BLOCK 32
#define ZO_CACHED_KEYS 64 /* direction keys precomputed by the update (q above this recomputes) */
#define ZO_ROUND_LIMIT 1073741824.0f /* 2^30 */

typedef union {
    float f;
    uint32_t u;
} zo_f32_bits_t;

static inline float zo_f32_from_bits(uint32_t u)
{
    zo_f32_bits_t v;
    v.u = u;
    return v.f;
}

static inline uint32_t zo_bits_from_f32(float f)
{
    zo_f32_bits_t v;
    v.f = f;
    return v.u;
}

static inline int32_t zo_clamp_i32(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* floor(x / 256) for any int32 x without relying on signed shifts. */
static inline int32_t zo_floor_div256(int32_t x)
{
    return (int32_t)(((uint32_t)x + 0x80000000u) >> 8) - 0x800000;
}

/* ---------------------------------------------------------------- rounding */

/* The common case (|x| < 2^30) takes one range test; NaN and huge values take the slow path. */
static inline int32_t zo_round_inl(float x)
{
    if (!(x > -ZO_ROUND_LIMIT && x < ZO_ROUND_LIMIT)) {
        if (x != x) {
            return 0;
        }
        return x > 0.0f ? 1073741824 : -1073741824;
    }
    int32_t t = (int32_t)x;        /* truncation toward zero */
    float f = x - (float)t;        /* exact: the fractional part of x */
    return t + (int32_t)(f >= 0.5f) - (int32_t)(f <= -0.5f);
}

static inline int32_t zo_floor_inl(float x)
{
    if (!(x > -ZO_ROUND_LIMIT && x < ZO_ROUND_LIMIT)) {
        if (x != x) {
            return 0;
        }
        return x > 0.0f ? 1073741824 : -1073741824;
    }
    int32_t t = (int32_t)x;
    return t - (int32_t)((float)t > x);
}

int32_t zo_round_f32(float x)
{
    return zo_round_inl(x);
}

int32_t zo_floor_f32(float x)
{
    return zo_floor_inl(x);
}

/* ---------------------------------------------------------------- perturbation */

/* p[l] += sign * z_l for one block: sign bits s (set = -1), nonzero bits nz. */
static inline void zo_perturb_block_s8(int8_t *p, int32_t len, uint32_t s, uint32_t nz, uint32_t sign)
{
    for (int32_t l = 0; l < len; ++l) {
        uint32_t sb = (s >> l) & 1u;
        uint32_t nb = (nz >> l) & 1u;
        uint32_t delta = ((sign ^ (0u - sb)) + sb) & (0u - nb); /* +-sign or 0 */
        p[l] = (int8_t)(uint8_t)((uint32_t)(uint8_t)p[l] + delta);
    }
}

#ifndef ZO_MVE_INT
/* Nibble -> 4 bytes, byte j = 0xFF if bit j is set. */
static const uint32_t zo_byte_mask[16] = {
    0x00000000u, 0x000000FFu, 0x0000FF00u, 0x0000FFFFu, 0x00FF0000u, 0x00FF00FFu, 0x00FFFF00u, 0x00FFFFFFu,
    0xFF000000u, 0xFF0000FFu, 0xFF00FF00u, 0xFF00FFFFu, 0xFFFF0000u, 0xFFFF00FFu, 0xFFFFFF00u, 0xFFFFFFFFu,
};

/* A full block, four bytes per 32-bit word (bytewise add without carries between bytes);
 * the same result as zo_perturb_block_s8 on any byte order. */
static inline void zo_perturb_block32_swar(int8_t *p, uint32_t s, uint32_t nz, uint32_t sign)
{
    const uint32_t pos = (sign & 0xFFu) * 0x01010101u;
    const uint32_t neg = ((0u - sign) & 0xFFu) * 0x01010101u;
    for (int32_t g = 0; g < ZO_BLOCK; g += 4) {
        uint32_t v;
        ZO_MEMCPY(&v, p + g, 4);
        uint32_t sm = zo_byte_mask[s & 15u];
        uint32_t delta = ((pos & ~sm) | (neg & sm)) & zo_byte_mask[nz & 15u];
        v = ((v & 0x7F7F7F7Fu) + (delta & 0x7F7F7F7Fu)) ^ ((v ^ delta) & 0x80808080u);
        ZO_MEMCPY(p + g, &v, 4);
        s >>= 4;
        nz >>= 4;
    }
}
#endif

void zo_perturb_s8(int8_t *w, int32_t n, int32_t sign, const zo_dir_t *d)
{
    const uint32_t key = zo_hash_key(d->seed, d->step, d->direction, d->stream);
    const uint32_t dl2 = d->density_log2;
    const uint32_t us = (uint32_t)sign;
#ifdef ZO_MVE_INT
    const int8x16_t pos = vdupq_n_s8((int8_t)(uint8_t)us);
    const int8x16_t neg = vdupq_n_s8((int8_t)(uint8_t)(0u - us));
#endif
    for (int32_t base = 0; base < n; base += ZO_BLOCK) {
        uint32_t nz;
        uint32_t s = zo_dir_block(key, (uint32_t)base >> 5, dl2, &nz);
        int8_t *p = w + base;
        if (n - base >= ZO_BLOCK) {
#ifdef ZO_MVE_INT
            /* one predicate bit per byte lane: select -sign where the sign bit is set, add where
             * the nonzero bit is set */
            for (int32_t h = 0; h < 2; ++h) {
                int8x16_t v = vld1q_s8(p);
                int8x16_t delta = vpselq_s8(neg, pos, (mve_pred16_t)(s & 0xFFFFu));
                v = vaddq_m_s8(v, v, delta, (mve_pred16_t)(nz & 0xFFFFu));
                vst1q_s8(p, v);
                p += 16;
                s >>= 16;
                nz >>= 16;
            }
#else
            zo_perturb_block32_swar(p, s, nz, us);
#endif
        } else {
            zo_perturb_block_s8(p, n - base, s, nz, us);
        }
    }
}

/* b[k] += sign * eps_b[k] * z_k for int32 (bytes 4) or int64 (bytes 8) biases, wrapping. */
static void zo_perturb_bias(void *b, int32_t bytes, int32_t n, int32_t sign, const int32_t *eps_b, const zo_dir_t *d)
{
    const uint32_t key = zo_hash_key(d->seed, d->step, d->direction, d->stream);
    const uint32_t dl2 = d->density_log2;
    for (int32_t base = 0; base < n; base += ZO_BLOCK) {
        uint32_t nonzero;
        uint32_t s = zo_dir_block(key, (uint32_t)base >> 5, dl2, &nonzero);
        int32_t len = n - base < ZO_BLOCK ? n - base : ZO_BLOCK;
        for (int32_t l = 0; l < len; ++l) {
            if ((nonzero >> l) & 1u) {
                uint64_t delta = (uint64_t)(int64_t)sign * (uint64_t)(int64_t)eps_b[base + l];
                if ((s >> l) & 1u) {
                    delta = 0u - delta;
                }
                if (bytes == 8) {
                    int64_t *v = (int64_t *)b + base + l;
                    *v = (int64_t)((uint64_t)*v + delta);
                } else {
                    int32_t *v = (int32_t *)b + base + l;
                    *v = (int32_t)((uint32_t)*v + (uint32_t)delta);
                }
            }
        }
    }
}

void zo_perturb_s32(int32_t *b, int32_t n, int32_t sign, const int32_t *eps_b, const zo_dir_t *d)
{
    zo_perturb_bias(b, 4, n, sign, eps_b, d);
}

void zo_perturb_s64(int64_t *b, int32_t n, int32_t sign, const int32_t *eps_b, const zo_dir_t *d)
{
    zo_perturb_bias(b, 8, n, sign, eps_b, d);
}

/* ---------------------------------------------------------------- update */

#ifdef ZO_MVE_INT
/* zo_mix32 on 4 lanes. */
static inline uint32x4_t zo_mix32x4(uint32x4_t x)
{
    x = veorq_u32(x, vshrq_n_u32(x, 16));
    x = vmulq_n_u32(x, 0x7FEB352Du);
    x = veorq_u32(x, vshrq_n_u32(x, 15));
    x = vmulq_n_u32(x, 0x846CA68Bu);
    return veorq_u32(x, vshrq_n_u32(x, 16));
}
#endif

#ifdef ZO_MVE_FLOAT
/* Nibble -> 16-bit predicate with each bit repeated for the 4 bytes of a 32-bit lane. */
static const uint16_t zo_pred_nibble[16] = {
    0x0000u, 0x000Fu, 0x00F0u, 0x00FFu, 0x0F00u, 0x0F0Fu, 0x0FF0u, 0x0FFFu,
    0xF000u, 0xF00Fu, 0xF0F0u, 0xF0FFu, 0xFF00u, 0xFF0Fu, 0xFFF0u, 0xFFFFu,
};
#endif

/* u[0..len-1] = sum_i c[i] z_i over the block starting at coordinate `base`.
 * A zero z adds +0.0f instead of being skipped: u starts at +0.0f and a round-to-nearest sum
 * is -0.0f only if both operands are -0.0f, so u is never -0.0f and u + (+0.0f) == u
 * bit for bit (also for inf and NaN).  -c is c with its sign bit flipped, as in IEEE negation. */
static void zo_accumulate_block(float *u, int32_t base, int32_t len, const float *c, int32_t q,
                                const uint32_t *keys, const zo_dir_t *d0)
{
    const uint32_t dl2 = d0->density_log2;
    const uint32_t block = (uint32_t)base >> 5;
#ifdef ZO_MVE_FLOAT
    for (int32_t g = 0; g < ZO_BLOCK; g += 4) {
        vst1q_f32(u + g, vdupq_n_f32(0.0f));
    }
#else
    for (int32_t l = 0; l < ZO_BLOCK; ++l) {
        u[l] = 0.0f;
    }
#endif
    for (int32_t i = 0; i < q; ++i) {
        uint32_t key = i < ZO_CACHED_KEYS
                           ? keys[i]
                           : zo_hash_key(d0->seed, d0->step, (uint32_t)i, d0->stream);
        uint32_t nz;
        uint32_t s = zo_dir_block(key, block, dl2, &nz);
#ifdef ZO_MVE_FLOAT
        (void)len; /* the whole 32-lane buffer is computed; lanes >= len are ignored */
        const float32x4_t cp = vdupq_n_f32(c[i]);
        const float32x4_t cn = vnegq_f32(cp);
        for (int32_t g = 0; g < ZO_BLOCK; g += 4) {
            float32x4_t t = vpselq_f32(cn, cp, (mve_pred16_t)zo_pred_nibble[s & 15u]);
            float32x4_t uv = vld1q_f32(u + g);
            uv = vaddq_m_f32(uv, uv, t, (mve_pred16_t)zo_pred_nibble[nz & 15u]);
            vst1q_f32(u + g, uv);
            s >>= 4;
            nz >>= 4;
        }
#else
        const uint32_t cb = zo_bits_from_f32(c[i]);
        if (len == ZO_BLOCK) {
            for (int32_t l = 0; l < ZO_BLOCK; ++l) {
                uint32_t tb = (cb ^ (((s >> l) & 1u) << 31)) & (0u - ((nz >> l) & 1u));
                u[l] = u[l] + zo_f32_from_bits(tb);
            }
        } else {
            for (int32_t l = 0; l < len; ++l) {
                uint32_t tb = (cb ^ (((s >> l) & 1u) << 31)) & (0u - ((nz >> l) & 1u));
                u[l] = u[l] + zo_f32_from_bits(tb);
            }
        }
#endif
    }
}

static int32_t zo_prepare_keys(uint32_t *keys, int32_t q, const zo_dir_t *d0)
{
    int32_t nk = q < ZO_CACHED_KEYS ? q : ZO_CACHED_KEYS;
    for (int32_t i = 0; i < nk; ++i) {
        keys[i] = zo_hash_key(d0->seed, d0->step, (uint32_t)i, d0->stream);
    }
    return nk;
}

#ifdef ZO_MVE_FLOAT
/* The rounding step of a full block, four lanes at a time.  VCVTA (nearest, ties away) and
 * VCVTM (floor) saturate out-of-range values and turn NaN into 0, so clamping their result to
 * [-2^30, 2^30] gives exactly zo_round_inl / zo_floor_inl. */
static inline int32x4_t zo_clamp_s32x4(int32x4_t v, int32_t lo, int32_t hi)
{
    return vminq_s32(vmaxq_s32(v, vdupq_n_s32(lo)), vdupq_n_s32(hi));
}

static void zo_round_block_mve(int8_t *wb, int8_t *rb, const float *u, zo_rounding_t mode,
                               uint32_t round_key, uint32_t base, int32_t w_max)
{
    const uint32x4_t lane = vidupq_n_u32(0u, 1);
    for (int32_t g = 0; g < ZO_BLOCK; g += 4) {
        float32x4_t uv = vld1q_f32(u + g);
        int32x4_t wv = vldrbq_s32(wb + g);
        if (mode == ZO_ROUND_SPLIT16) {
            int32x4_t rr = zo_clamp_s32x4(vcvtaq_s32_f32(vmulq_n_f32(uv, 256.0f)), -1073741824, 1073741824);
            int32x4_t m = vsubq_s32(vaddq_s32(vshlq_n_s32(wv, 8), vldrbq_s32(rb + g)), rr);
            int32x4_t wn = zo_clamp_s32x4(vshrq_n_s32(vaddq_n_s32(m, 128), 8), -w_max, w_max);
            int32x4_t rn = zo_clamp_s32x4(vsubq_s32(m, vshlq_n_s32(wn, 8)), -128, 127);
            vstrbq_s32(rb + g, rn);
            wv = wn;
        } else if (mode == ZO_ROUND_STOCHASTIC) {
            uint32x4_t ctr = vaddq_n_u32(lane, base + (uint32_t)g);
            uint32x4_t h = zo_mix32x4(veorq_u32(vdupq_n_u32(round_key), ctr));
            h = zo_mix32x4(veorq_u32(h, vdupq_n_u32(round_key)));
            float32x4_t xi = vmulq_n_f32(vcvtq_f32_u32(vshrq_n_u32(h, 8)), 1.0f / 16777216.0f);
            int32x4_t f = zo_clamp_s32x4(vcvtmq_s32_f32(vaddq_f32(uv, xi)), -1073741824, 1073741824);
            wv = zo_clamp_s32x4(vsubq_s32(wv, f), -w_max, w_max);
        } else {
            int32x4_t rr = zo_clamp_s32x4(vcvtaq_s32_f32(uv), -1073741824, 1073741824);
            wv = zo_clamp_s32x4(vsubq_s32(wv, rr), -w_max, w_max);
        }
        vstrbq_s32(wb + g, wv);
    }
}
#endif

#ifndef ZO_MVE_FLOAT
/* Dense directions, small q, deterministic rounding: u_k takes one of 2^q values, fixed by the
 * signs of z_0k..z_(q-1)k.  Each value is summed once (in the same order, from the same +0.0f,
 * as zo_accumulate_block) and rounded into a table, so the per-weight work is integer only. */
#define ZO_LUT_Q_MAX 6

static void zo_update_s8_lut(int8_t *w, int8_t *residual, int32_t n, const float *c, int32_t q,
                             const zo_dir_t *d0, zo_rounding_t mode, int32_t w_max)
{
    int32_t step_of[1 << ZO_LUT_Q_MAX];
    uint32_t keys[ZO_LUT_Q_MAX];
    uint32_t sign[ZO_LUT_Q_MAX];
    const int32_t split16 = mode == ZO_ROUND_SPLIT16;
    for (uint32_t pat = 0; pat < (1u << q); ++pat) {
        float u = 0.0f;
        for (int32_t i = 0; i < q; ++i) {
            u = u + (((pat >> i) & 1u) ? -c[i] : c[i]);
        }
        step_of[pat] = zo_round_inl(split16 ? 256.0f * u : u);
    }
    zo_prepare_keys(keys, q, d0);
    for (int32_t base = 0; base < n; base += ZO_BLOCK) {
        const int32_t len = n - base < ZO_BLOCK ? n - base : ZO_BLOCK;
        for (int32_t i = 0; i < q; ++i) {
            sign[i] = zo_hash_ctr(keys[i], (uint32_t)base >> 5);
        }
        int8_t *restrict wb = w + base;
        if (q == 1 && split16 && len == ZO_BLOCK) {
            /* the common q = 1 full block: two possible steps, a straight loop that vectorizes */
            const int32_t up = step_of[0], down = step_of[1];
            int8_t *restrict rb = residual + base;
            for (int32_t l = 0; l < ZO_BLOCK; ++l) {
                int32_t m = 256 * (int32_t)wb[l] + (int32_t)rb[l] - ((sign[0] & (1u << l)) ? down : up);
                int32_t wn = zo_floor_div256(m + 128);
                wn = wn < -w_max ? -w_max : wn;
                wn = wn > w_max ? w_max : wn;
                int32_t rn = m - 256 * wn;
                rn = rn < -128 ? -128 : rn;
                rn = rn > 127 ? 127 : rn;
                rb[l] = (int8_t)rn;
                wb[l] = (int8_t)wn;
            }
            continue;
        }
        uint8_t pat[ZO_BLOCK];
        for (int32_t l = 0; l < ZO_BLOCK; ++l) {
            const uint32_t bit = 1u << l;
            uint32_t p = 0;
            for (int32_t i = 0; i < q; ++i) {
                p |= (sign[i] & bit) ? (1u << i) : 0u;
            }
            pat[l] = (uint8_t)p;
        }
        if (split16) {
            int8_t *restrict rb = residual + base;
            for (int32_t l = 0; l < len; ++l) {
                int32_t m = 256 * (int32_t)wb[l] + (int32_t)rb[l] - step_of[pat[l]];
                int32_t wn = zo_clamp_i32(zo_floor_div256(m + 128), -w_max, w_max);
                rb[l] = (int8_t)zo_clamp_i32(m - 256 * wn, -128, 127);
                wb[l] = (int8_t)wn;
            }
        } else {
            for (int32_t l = 0; l < len; ++l) {
                wb[l] = (int8_t)zo_clamp_i32((int32_t)wb[l] - step_of[pat[l]], -w_max, w_max);
            }
        }
    }
}
#endif

#ifdef ZO_MVE_INT
/* Dense directions, q = 1, deterministic rounding: the step is one of two integers S (z = +1:
 * R(256 c) or R(c); z = -1: the same of -c, summed from +0.0f as zo_accumulate_block does), so a
 * full block is integer work on 8 int16 lanes.  SPLIT16: with S = 256 Sh + Sl (Sl in [-128, 127])
 * and x = r - Sl in [-255, 255], m + 128 = 256 (w - Sh) + x + 128, so w' = clamp(w - Sh + carry)
 * with carry = (x + 128) >> 8 (VRSHR) in {-1, 0, 1}, and r' = sat8(256 (w - Sh - w') + x): the
 * remainder x - 256 carry where w' is not clamped, 127 / -128 (saturation) where it is.  Sh is
 * clamped to +-1024 first: beyond it w' clamps the same way and r' saturates the same way. */
/* Byte -> 16-bit predicate of 8 int16 lanes: lane l (predicate bits 2l, 2l + 1) set if bit l is. */
#define ZO_PB2(b) (((b) & 1u) * 3u)
#define ZO_PB8(b)                                                                                     \
    (ZO_PB2((b) >> 0) | ZO_PB2((b) >> 1) << 2 | ZO_PB2((b) >> 2) << 4 | ZO_PB2((b) >> 3) << 6 |       \
     ZO_PB2((b) >> 4) << 8 | ZO_PB2((b) >> 5) << 10 | ZO_PB2((b) >> 6) << 12 | ZO_PB2((b) >> 7) << 14)
#define ZO_PB8_4(b) ZO_PB8(b), ZO_PB8((b) + 1u), ZO_PB8((b) + 2u), ZO_PB8((b) + 3u)
#define ZO_PB8_16(b) ZO_PB8_4(b), ZO_PB8_4((b) + 4u), ZO_PB8_4((b) + 8u), ZO_PB8_4((b) + 12u)
#define ZO_PB8_64(b) ZO_PB8_16(b), ZO_PB8_16((b) + 16u), ZO_PB8_16((b) + 32u), ZO_PB8_16((b) + 48u)
static const uint16_t zo_pred_byte16[256] = {ZO_PB8_64(0u), ZO_PB8_64(64u), ZO_PB8_64(128u), ZO_PB8_64(192u)};

static inline int32_t zo_clamp_step16(int32_t v)
{
    return zo_clamp_i32(v, -1024, 1024);
}

static void zo_update_s8_q1_mve(int8_t *w, int8_t *residual, int32_t n, float c, const zo_dir_t *d0,
                                zo_rounding_t mode, int32_t w_max)
{
    const int32_t split16 = mode == ZO_ROUND_SPLIT16;
    const float up_u = 0.0f + c, down_u = 0.0f + -c;
    const int32_t up = zo_round_inl(split16 ? 256.0f * up_u : up_u);
    const int32_t down = zo_round_inl(split16 ? 256.0f * down_u : down_u);
    /* high and low parts of each step (for NEAREST the whole step, clamped, is the high part) */
    const int32_t up_hi = split16 ? zo_floor_div256(up + 128) : up;
    const int32_t down_hi = split16 ? zo_floor_div256(down + 128) : down;
    const int16x8_t hi_up = vdupq_n_s16((int16_t)zo_clamp_step16(up_hi));
    const int16x8_t hi_down = vdupq_n_s16((int16_t)zo_clamp_step16(down_hi));
    /* the low parts as scalars: x = r - lo_up, minus (lo_down - lo_up) more on the down lanes */
    const int16_t lo_up_s = (int16_t)(up - 256 * up_hi);
    const int16_t lo_diff_s = (int16_t)((down - 256 * down_hi) - (up - 256 * up_hi));
    const int16x8_t lo = vdupq_n_s16((int16_t)-w_max), hi = vdupq_n_s16((int16_t)w_max);
    const uint32_t key = zo_hash_key(d0->seed, d0->step, 0u, d0->stream);
    int32_t base = 0;
    uint32_t words[4];
    for (; base + ZO_BLOCK <= n; base += ZO_BLOCK) {
        const int32_t block = base >> 5;
        if ((block & 3) == 0) {
            /* the sign words of the next 4 blocks (some maybe past the end) at once:
             * zo_hash_ctr(key, block + l) on lane l */
            const uint32x4_t kv = vdupq_n_u32(key);
            const uint32x4_t ctr = vidupq_n_u32((uint32_t)block, 1);
            vst1q_u32(words, zo_mix32x4(veorq_u32(zo_mix32x4(veorq_u32(kv, ctr)), kv)));
        }
        uint32_t s = words[block & 3]; /* bit set: z = -1, the down step */
        int8_t *wb = w + base;
        if (split16) {
            int8_t *rb = residual + base;
            for (int32_t g = 0; g < ZO_BLOCK / 8; ++g) {
                const mve_pred16_t down_lanes = (mve_pred16_t)zo_pred_byte16[s & 0xFFu];
                const int16x8_t e = vsubq_s16(vldrbq_s16(wb), vpselq_s16(hi_down, hi_up, down_lanes));
                int16x8_t x = vsubq_n_s16(vldrbq_s16(rb), lo_up_s);
                x = vsubq_m_n_s16(x, x, lo_diff_s, down_lanes);
                const int16x8_t wn = vminq_s16(vmaxq_s16(vaddq_s16(e, vrshrq_n_s16(x, 8)), lo), hi);
                const int16x8_t rn = vqaddq_s16(vqshlq_n_s16(vsubq_s16(e, wn), 8), x);
                vstrbq_s16(rb, vreinterpretq_s16_s8(vqmovnbq_s16(vreinterpretq_s8_s16(x), rn))); /* x: any vector */
                vstrbq_s16(wb, wn);
                wb += 8, rb += 8, s >>= 8;
            }
        } else {
            for (int32_t g = 0; g < ZO_BLOCK / 8; ++g) {
                const mve_pred16_t down_lanes = (mve_pred16_t)zo_pred_byte16[s & 0xFFu];
                const int16x8_t sh = vpselq_s16(hi_down, hi_up, down_lanes);
                vstrbq_s16(wb, vminq_s16(vmaxq_s16(vsubq_s16(vldrbq_s16(wb), sh), lo), hi));
                wb += 8, s >>= 8;
            }
        }
    }
    if (base < n) {
        /* the last partial block, as the portable table path */
        const uint32_t s = zo_hash_ctr(key, (uint32_t)base >> 5);
        int8_t *wb = w + base;
        for (int32_t l = 0; l < n - base; ++l) {
            const int32_t st = ((s >> l) & 1u) ? down : up;
            if (split16) {
                int8_t *rb = residual + base;
                int32_t m = 256 * (int32_t)wb[l] + (int32_t)rb[l] - st;
                int32_t wn = zo_clamp_i32(zo_floor_div256(m + 128), -w_max, w_max);
                rb[l] = (int8_t)zo_clamp_i32(m - 256 * wn, -128, 127);
                wb[l] = (int8_t)wn;
            } else {
                wb[l] = (int8_t)zo_clamp_i32((int32_t)wb[l] - st, -w_max, w_max);
            }
        }
    }
}
#endif

void zo_update_s8(int8_t *w, int8_t *residual, int32_t n, const float *c, int32_t q,
                  const zo_dir_t *d0, zo_rounding_t mode, int32_t w_max)
{
#ifdef ZO_MVE_INT
    if (d0->density_log2 == 0u && q == 1 && mode != ZO_ROUND_STOCHASTIC) {
        zo_update_s8_q1_mve(w, residual, n, c[0], d0, mode, w_max);
        return;
    }
#endif
#ifndef ZO_MVE_FLOAT
    if (d0->density_log2 == 0u && q >= 1 && q <= ZO_LUT_Q_MAX && mode != ZO_ROUND_STOCHASTIC) {
        zo_update_s8_lut(w, residual, n, c, q, d0, mode, w_max);
        return;
    }
#endif
    uint32_t keys[ZO_CACHED_KEYS];
    float u[ZO_BLOCK];
    zo_prepare_keys(keys, q, d0);
    const uint32_t round_key =
        zo_hash_key(d0->seed, d0->step, 0u, d0->stream | ZO_STREAM_ROUNDING);
    for (int32_t base = 0; base < n; base += ZO_BLOCK) {
        int32_t len = n - base < ZO_BLOCK ? n - base : ZO_BLOCK;
        zo_accumulate_block(u, base, len, c, q, keys, d0);
        int8_t *wb = w + base;
#ifdef ZO_MVE_FLOAT
        if (len == ZO_BLOCK) {
            zo_round_block_mve(wb, mode == ZO_ROUND_SPLIT16 ? residual + base : (int8_t *)0, u, mode,
                               round_key, (uint32_t)base, w_max);
            continue;
        }
#endif
        if (mode == ZO_ROUND_SPLIT16) {
            int8_t *rb = residual + base;
            for (int32_t l = 0; l < len; ++l) {
                int32_t m = 256 * (int32_t)wb[l] + (int32_t)rb[l] - zo_round_inl(256.0f * u[l]);
                int32_t wn = zo_clamp_i32(zo_floor_div256(m + 128), -w_max, w_max);
                rb[l] = (int8_t)zo_clamp_i32(m - 256 * wn, -128, 127);
                wb[l] = (int8_t)wn;
            }
        } else if (mode == ZO_ROUND_STOCHASTIC) {
            for (int32_t l = 0; l < len; ++l) {
                float xi = zo_u01_from_hash(zo_hash_ctr(round_key, (uint32_t)(base + l)));
                int32_t wn = (int32_t)wb[l] - zo_floor_inl(u[l] + xi);
                wb[l] = (int8_t)zo_clamp_i32(wn, -w_max, w_max);
            }
        } else {
            for (int32_t l = 0; l < len; ++l) {
                int32_t wn = (int32_t)wb[l] - zo_round_inl(u[l]);
                wb[l] = (int8_t)zo_clamp_i32(wn, -w_max, w_max);
            }
        }
    }
}

/* b[l] = sat32(b[l] - clamp(R((float)eps_b[l] * u[l]), -max_step, max_step)) for l < len. */
static inline void zo_update_s32_lanes(int32_t *b, const int32_t *eps_b, const float *u, int32_t len,
                                       int32_t max_step)
{
    for (int32_t l = 0; l < len; ++l) {
        int32_t st = zo_round_inl((float)eps_b[l] * u[l]);
        st = zo_clamp_i32(st, -max_step, max_step);
        int64_t nb = (int64_t)b[l] - (int64_t)st;
        if (nb > (int64_t)INT32_MAX) {
            nb = INT32_MAX;
        } else if (nb < (int64_t)INT32_MIN) {
            nb = INT32_MIN;
        }
        b[l] = (int32_t)nb;
    }
}

static inline void zo_update_s64_lanes(int64_t *b, const int32_t *eps_b, const float *u, int32_t len,
                                       int32_t max_step)
{
    for (int32_t l = 0; l < len; ++l) {
        const int64_t st = zo_clamp_i32(zo_round_inl((float)eps_b[l] * u[l]), -max_step, max_step);
        /* saturate at the int64 range, as the int32 update does at its own */
        if (st < 0 && b[l] > INT64_MAX + st) {
            b[l] = INT64_MAX;
        } else if (st > 0 && b[l] < INT64_MIN + st) {
            b[l] = INT64_MIN;
        } else {
            b[l] -= st;
        }
    }
}

/* The bias update of int32 (bytes 4) or int64 (bytes 8) values after q directions. */
static void zo_update_bias(void *b, int32_t bytes, int32_t n, const float *c, int32_t q, const int32_t *eps_b,
                           int32_t max_step, const zo_dir_t *d0)
{
    uint32_t keys[ZO_CACHED_KEYS];
    float u[ZO_BLOCK];
    zo_prepare_keys(keys, q, d0);
    for (int32_t base = 0; base < n; base += ZO_BLOCK) {
        int32_t len = n - base < ZO_BLOCK ? n - base : ZO_BLOCK;
        zo_accumulate_block(u, base, len, c, q, keys, d0);
        if (bytes == 8) {
            zo_update_s64_lanes((int64_t *)b + base, eps_b + base, u, len, max_step);
        } else {
            zo_update_s32_lanes((int32_t *)b + base, eps_b + base, u, len, max_step);
        }
    }
}

void zo_update_s32(int32_t *b, int32_t n, const float *c, int32_t q, const int32_t *eps_b,
                   int32_t max_step, const zo_dir_t *d0)
{
    if (d0->density_log2 == 0u && q == 1) {
        /* dense, one direction: u_k is +0.0f + c or +0.0f + -c (zo_accumulate_block's sum), picked
         * by the sign bit, with one key and no per-block buffer */
        const float up = 0.0f + c[0], down = 0.0f + -c[0];
        const uint32_t key = zo_hash_key(d0->seed, d0->step, 0u, d0->stream);
        for (int32_t base = 0; base < n; base += ZO_BLOCK) {
            const int32_t len = n - base < ZO_BLOCK ? n - base : ZO_BLOCK;
            const uint32_t s = zo_hash_ctr(key, (uint32_t)base >> 5);
            float u[ZO_BLOCK];
            for (int32_t l = 0; l < len; ++l) {
                u[l] = ((s >> l) & 1u) ? down : up;
            }
            zo_update_s32_lanes(b + base, eps_b + base, u, len, max_step);
        }
        return;
    }
    zo_update_bias(b, 4, n, c, q, eps_b, max_step, d0);
}

void zo_update_s64(int64_t *b, int32_t n, const float *c, int32_t q, const int32_t *eps_b,
                   int32_t max_step, const zo_dir_t *d0)
{
    zo_update_bias(b, 8, n, c, q, eps_b, max_step, d0);
}

/* ---------------------------------------------------------------- exp, log, loss */

/* exp: x = n ln2 + r, n = round(x log2 e) (ties away), |r| <= ln2/2 (+ rounding), with
 * ln2 = ZO_LN2_HI + ZO_LN2_LO (HI has 9 significant bits so n * HI is exact for |n| <= 127),
 * e^r = 1 + r + r^2 P(r), P of degree 5 (Cephes expf coefficients), times 2^n built from
 * the exponent bits (n in [-126, 127] after the clamp, so 2^n is normal). */
#define ZO_EXP_LO (-87.0f)
#define ZO_EXP_HI 88.0f
#define ZO_LOG2E 0x1.715476p+0f       /* 1.44269504 */
#define ZO_LN2_HI 0x1.63p-1f         /* 0.693359375 = 355/512 */
#define ZO_LN2_LO (-0x1.bd0106p-13f) /* -2.12194440e-4 */

float zo_expf(float x)
{
    if (!(x >= ZO_EXP_LO)) { /* also NaN */
        x = ZO_EXP_LO;
    } else if (x > ZO_EXP_HI) {
        x = ZO_EXP_HI;
    }
    int32_t n = zo_round_inl(x * ZO_LOG2E);
    float fn = (float)n;
    float r = x - fn * ZO_LN2_HI;
    r = r - fn * ZO_LN2_LO;
    float r2 = r * r;
    float p = 0x1.a0d2cep-13f; /* 1.9875691500e-4 */
    p = p * r + 0x1.6e879cp-10f; /* 1.3981999507e-3 */
    p = p * r + 0x1.11121p-7f;   /* 8.3334519073e-3 */
    p = p * r + 0x1.555382p-5f;  /* 4.1665795894e-2 */
    p = p * r + 0x1.555554p-3f;  /* 1.6666665459e-1 */
    p = p * r + 0x1p-1f;         /* 5.0000001201e-1 rounds to 0.5 */
    p = p * r2 + r;
    p = p + 1.0f;
    return p * zo_f32_from_bits((uint32_t)(n + 127) << 23);
}

/* log: x = 2^e * f with f in [sqrt(1/2), sqrt(2)) from the exponent/mantissa bits, g = f - 1,
 * log(f) = g - g^2/2 + g^3 P(g), P of degree 8 (Cephes logf coefficients),
 * plus e * (ZO_LN2_LO + ZO_LN2_HI) added low part first. */
#define ZO_FLT_MIN_BITS 0x00800000u
#define ZO_FLT_MAX_BITS 0x7F7FFFFFu
#define ZO_SQRTHF 0x1.6a09e6p-1f /* sqrt(1/2) */

float zo_logf(float x)
{
    if (!(x >= zo_f32_from_bits(ZO_FLT_MIN_BITS))) { /* also NaN, zero, negatives */
        x = zo_f32_from_bits(ZO_FLT_MIN_BITS);
    } else if (x > zo_f32_from_bits(ZO_FLT_MAX_BITS)) {
        x = zo_f32_from_bits(ZO_FLT_MAX_BITS);
    }
    uint32_t bits = zo_bits_from_f32(x);
    int32_t e = (int32_t)(bits >> 23) - 126;
    float f = zo_f32_from_bits((bits & 0x007FFFFFu) | 0x3F000000u); /* [0.5, 1) */
    float g;
    if (f < ZO_SQRTHF) {
        e -= 1;
        g = f + f;
        g = g - 1.0f;
    } else {
        g = f - 1.0f;
    }
    float z = g * g;
    float y = 0x1.204376p-4f;    /* 7.0376836292e-2 */
    y = y * g + -0x1.d7a37p-4f;  /* -1.1514610310e-1 */
    y = y * g + 0x1.de4a34p-4f;  /* 1.1676998740e-1 */
    y = y * g + -0x1.fcba9ep-4f; /* -1.2420140846e-1 */
    y = y * g + 0x1.23d37ep-3f;  /* 1.4249322787e-1 */
    y = y * g + -0x1.555cap-3f;  /* -1.6668057665e-1 */
    y = y * g + 0x1.999d58p-3f;  /* 2.0000714765e-1 */
    y = y * g + -0x1.fffff8p-3f; /* -2.4999993993e-1 */
    y = y * g + 0x1.555554p-2f;  /* 3.3333331174e-1 */
    y = y * g;
    y = y * z;
    float fe = (float)e;
    y = y + fe * ZO_LN2_LO;
    y = y + -0.5f * z;
    float r = g + y;
    r = r + fe * ZO_LN2_HI;
    return r;
}

/* Element k of an int8 (bytes 1) or int16 (bytes 2) output: the losses read both widths. */
static inline int32_t zo_q_at(const void *x, int32_t bytes, int32_t k)
{
    return bytes == 2 ? (int32_t)((const int16_t *)x)[k] : (int32_t)((const int8_t *)x)[k];
}

static float zo_cross_entropy_q(const void *logits, int32_t bytes, int32_t classes, float scale,
                                int32_t zero_point, int32_t label)
{
    float m = scale * (float)(zo_q_at(logits, bytes, 0) - zero_point);
    for (int32_t j = 1; j < classes; ++j) {
        float x = scale * (float)(zo_q_at(logits, bytes, j) - zero_point);
        if (x > m) {
            m = x;
        }
    }
    float s = 0.0f;
    for (int32_t j = 0; j < classes; ++j) {
        float x = scale * (float)(zo_q_at(logits, bytes, j) - zero_point);
        s = s + zo_expf(x - m);
    }
    float xl = scale * (float)(zo_q_at(logits, bytes, label) - zero_point);
    return zo_logf(s) - (xl - m);
}

float zo_cross_entropy_s8(const int8_t *logits, int32_t classes, float scale, int32_t zero_point,
                          int32_t label)
{
    return zo_cross_entropy_q(logits, 1, classes, scale, zero_point, label);
}

float zo_cross_entropy_s16(const int16_t *logits, int32_t classes, float scale, int32_t zero_point,
                           int32_t label)
{
    return zo_cross_entropy_q(logits, 2, classes, scale, zero_point, label);
}

float zo_sigmoid_bce(int32_t logit, float scale, int32_t zero_point, int32_t label)
{
    float x = scale * (float)(logit - zero_point);
    float a = x < 0.0f ? -x : x;
    return ((x > 0.0f ? x : 0.0f) - (label ? x : 0.0f)) + zo_logf(1.0f + zo_expf(-a));
}

static float zo_mse_q(const void *out, int32_t bytes, int32_t n, float scale, int32_t zero_point,
                      const float *target)
{
    float s = 0.0f;
    for (int32_t j = 0; j < n; ++j) {
        float d = scale * (float)(zo_q_at(out, bytes, j) - zero_point) - target[j];
        s = s + d * d;
    }
    return s / (float)n;
}

float zo_mse_s8(const int8_t *out, int32_t n, float scale, int32_t zero_point, const float *target)
{
    return zo_mse_q(out, 1, n, scale, zero_point, target);
}

float zo_mse_s16(const int16_t *out, int32_t n, float scale, int32_t zero_point, const float *target)
{
    return zo_mse_q(out, 2, n, scale, zero_point, target);
}

static int32_t zo_argmax_q(const void *x, int32_t bytes, int32_t n)
{
    int32_t best = 0;
    for (int32_t j = 1; j < n; ++j) {
        if (zo_q_at(x, bytes, j) > zo_q_at(x, bytes, best)) {
            best = j;
        }
    }
    return best;
}

int32_t zo_argmax_s8(const int8_t *x, int32_t n)
{
    return zo_argmax_q(x, 1, n);
}

int32_t zo_argmax_s16(const int16_t *x, int32_t n)
{
    return zo_argmax_q(x, 2, n);
}

/* ---- update coefficients as binary16 (docs/zo-math.md) ----------------------------------- */

#define F16_SAT_BITS 0x477FF000u /* 65520.0f: from here round-to-nearest would give infinity */
#define F16_MIN_NORMAL_BITS 0x38800000u /* 2^-14 */

uint16_t zo_f16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) {
        return 0u; /* NaN: no update */
    }
    if (a >= F16_SAT_BITS) {
        return (uint16_t)(sign | 0x7BFFu); /* saturate: inf - inf would cancel two huge steps to 0 */
    }
    uint32_t h, rem, half;
    if (a >= F16_MIN_NORMAL_BITS) {
        h = (a >> 13) - (112u << 10); /* rebias the exponent 127 -> 15, keep 10 mantissa bits */
        rem = a & 0x1FFFu;
        half = 0x1000u;
    } else {
        const uint32_t e = a >> 23;
        if (e < 102u) {
            return sign; /* below 2^-25 (or exactly 2^-25, a tie to the even 0) */
        }
        const uint32_t m = (a & 0x007FFFFFu) | 0x00800000u; /* value = m * 2^(e - 150) */
        const uint32_t shift = 126u - e;                     /* units of 2^-24: 14..24 bits go */
        h = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
    }
    if (rem > half || (rem == half && (h & 1u) != 0u)) {
        ++h; /* a carry into the exponent is the right result */
    }
    return (uint16_t)(sign | h);
}

float zo_f32_from_f16(uint16_t h)
{
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    const uint32_t e = ((uint32_t)h >> 10) & 0x1Fu;
    const uint32_t m = (uint32_t)h & 0x3FFu;
    uint32_t u;
    if (e == 0u) {
        const float f = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign != 0u ? -f : f;
    }
    if (e == 31u) {
        u = sign | 0x7F800000u | (m << 13);
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
