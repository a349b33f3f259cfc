/* zo_rng.h - stateless counter-based random numbers for zeroth-order training.
 *
 * Static file, copied verbatim into each bundle.  Everything here is a pure function of its
 * arguments (no state, no tables), so the firmware, the host build and the NumPy mirror
 * (host/zoflash/reference/zo_math.py) regenerate exactly the same numbers.  The rules are
 * written down in docs/zo-math.md; change them only together with the mirror and the
 * known-answer values in tests/test_train_math.py.
 *
 * Hash: words are absorbed one at a time into a 32-bit state through the "lowbias32" integer
 * mixer (C. Wellons, hash-prospector), a bijection of uint32:
 *     key = M(M(M(M(ZO_HASH_IV ^ seed) ^ step) ^ direction) ^ stream)
 *     zo_hash(seed, step, direction, stream, counter) = M(M(key ^ counter) ^ key)
 * The key depends only on (seed, step, direction, stream), so a tensor's sweep computes it
 * once and then pays two mixes (4 multiplies) per 32-bit word.
 */
#ifndef ZO_RNG_H
#define ZO_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_HASH_IV 0x243F6A88u /* first 32 fraction bits of pi */

/* Stream ids (the "stream" word of the hash).
 *   0x00000000 .. 0x0FFFFFFF  perturbation directions, one id per trainable tensor
 *                             (weights and biases each get their own id; the generator assigns them)
 *   0x40000000 | s            stochastic-rounding dither for tensor s (direction word = 0)
 *   0x80000000                minibatch sampling (direction word = 0)
 *   0xC0000000 .. 0xFFFFFFFF  free for applications (augmentation, ...)
 */
#define ZO_STREAM_TENSOR_MAX 0x0FFFFFFFu
#define ZO_STREAM_ROUNDING   0x40000000u
#define ZO_STREAM_SAMPLE     0x80000000u
#define ZO_STREAM_USER       0xC0000000u

/* Counter layout of a direction stream: bits 0..27 = block index (32 coordinates per block),
 * bits 28..31 = lane (0 = sign word, 1..density_log2 = sparsity mask words). */
#define ZO_LANE_SHIFT 28
#define ZO_DENSITY_LOG2_MAX 15

/* One perturbation direction of one tensor.  z_k in {-1, 0, +1}:
 *   block = k / 32, bit = k % 32, key = zo_hash_key(seed, step, direction, stream)
 *   sign word S = zo_hash_ctr(key, block)                 (bit set -> z = -1, clear -> z = +1)
 *   density 2^-L (L = density_log2, 0 = dense Rademacher): mask words
 *   M_j = zo_hash_ctr(key, block | j << 28) for j = 1..L; z_k != 0 iff bit k%32 of
 *   ~(M_1 | ... | M_L) is set, i.e. with probability exactly 2^-L.
 * The sign of a nonzero z does not depend on L: a sparse direction is the dense one masked. */
typedef struct {
    uint32_t seed;         /* run seed */
    uint32_t step;         /* training step t */
    uint32_t direction;    /* direction index i, 0-based (0 .. q-1) */
    uint32_t stream;       /* tensor stream id (0 .. ZO_STREAM_TENSOR_MAX) */
    uint32_t density_log2; /* 0 = dense (p = 1), 1 = p 1/2, 2 = 1/4, 3 = 1/8, 4 = 1/16 (max 15) */
} zo_dir_t;

/* lowbias32: xorshift-multiply integer mixer, a bijection of uint32. */
static inline uint32_t zo_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

static inline uint32_t zo_hash_key(uint32_t seed, uint32_t step, uint32_t direction, uint32_t stream)
{
    uint32_t k = zo_mix32(ZO_HASH_IV ^ seed);
    k = zo_mix32(k ^ step);
    k = zo_mix32(k ^ direction);
    return zo_mix32(k ^ stream);
}

static inline uint32_t zo_hash_ctr(uint32_t key, uint32_t counter)
{
    return zo_mix32(zo_mix32(key ^ counter) ^ key);
}

/* Sign word and nonzero mask of block `block` of a direction (see zo_dir_t). */
static inline uint32_t zo_dir_block(uint32_t key, uint32_t block, uint32_t density_log2,
                                    uint32_t *nonzero)
{
    uint32_t any = 0u;
    for (uint32_t j = 1u; j <= density_log2; ++j) {
        any |= zo_hash_ctr(key, block | (j << ZO_LANE_SHIFT));
    }
    *nonzero = ~any;
    return zo_hash_ctr(key, block);
}

/* The full five-word hash (out of line; the inline pieces above are what loops use). */
uint32_t zo_hash(uint32_t seed, uint32_t step, uint32_t direction, uint32_t stream, uint32_t counter);

/* z_k of one direction as -1, 0 or +1 (one coordinate; loops should use zo_dir_block). */
int32_t zo_direction_value(const zo_dir_t *d, uint32_t k);

/* Index of sample j of step t's minibatch among n >= 1 training samples: uniform with
 * replacement, r = zo_hash(seed, step, 0, ZO_STREAM_SAMPLE, j), index = (r * n) >> 32 (64-bit
 * product; bias at most n / 2^32). */
uint32_t zo_sample_index(uint32_t seed, uint32_t step, uint32_t j, uint32_t n);

/* Uniform float32 in [0, 1) from the top 24 bits of a hash word: (h >> 8) * 2^-24 (exact). */
static inline float zo_u01_from_hash(uint32_t h)
{
    return (float)(h >> 8) * (1.0f / 16777216.0f);
}

#ifdef __cplusplus
}
#endif

#endif /* ZO_RNG_H */
