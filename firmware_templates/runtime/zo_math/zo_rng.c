/* zo_rng.c - counter-based hash, directions and minibatch sampling (see zo_rng.h). */
#include "zo_rng.h"

uint32_t zo_hash(uint32_t seed, uint32_t step, uint32_t direction, uint32_t stream, uint32_t counter)
{
    return zo_hash_ctr(zo_hash_key(seed, step, direction, stream), counter);
}

int32_t zo_direction_value(const zo_dir_t *d, uint32_t k)
{
    uint32_t key = zo_hash_key(d->seed, d->step, d->direction, d->stream);
    uint32_t nonzero;
    uint32_t sign = zo_dir_block(key, k >> 5, d->density_log2, &nonzero);
    uint32_t bit = k & 31u;
    if (((nonzero >> bit) & 1u) == 0u) {
        return 0;
    }
    return ((sign >> bit) & 1u) ? -1 : 1;
}

uint32_t zo_sample_index(uint32_t seed, uint32_t step, uint32_t j, uint32_t n)
{
    uint32_t r = zo_hash(seed, step, 0u, ZO_STREAM_SAMPLE, j);
    return (uint32_t)(((uint64_t)r * (uint64_t)n) >> 32);
}
