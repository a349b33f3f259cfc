/* zo_drift.c - two-sided Page-Hinkley on the serving loss, integers only (zo_drift.h). */
#include "zo_drift.h"

void zo_ph_reset(zo_ph_t *d)
{
    d->sum = 0;
    d->sq = 0;
    d->threshold = 0;
    d->up = 0;
    d->up_min = 0;
    d->down = 0;
    d->down_max = 0;
    d->n = 0u;
}

uint32_t zo_isqrt64(uint64_t v)
{
    uint64_t r = 0u, bit = (uint64_t)1 << 62;
    while (bit > v) {
        bit >>= 2;
    }
    while (bit != 0u) {
        if (v >= r + bit) {
            v -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    return (uint32_t)r;
}

int zo_ph_update(zo_ph_t *d, const zo_ph_config_t *cfg, int32_t x)
{
    d->n += 1u;
    d->sum += x;
    d->sq += (int64_t)x * x;
    const int64_t n = (int64_t)d->n;
    const int64_t mean = d->sum / n; /* sum >= 0: the floor */
    const int64_t var = d->sq / n - mean * mean;
    int64_t sd = var > 0 ? (int64_t)zo_isqrt64((uint64_t)var) : 0;
    if (sd < cfg->min_sd) {
        sd = cfg->min_sd;
    }
    const int64_t k = (int64_t)cfg->delta * sd / 256;
    d->threshold = (int64_t)cfg->lambda * sd / 256;
    d->up += (int64_t)x - mean - k;
    if (d->up < d->up_min) {
        d->up_min = d->up;
    }
    d->down += (int64_t)x - mean + k;
    if (d->down > d->down_max) {
        d->down_max = d->down;
    }
    return d->n >= cfg->warmup && zo_ph_statistic(d) > d->threshold;
}

int64_t zo_ph_threshold(const zo_ph_t *d)
{
    return d->threshold;
}

int64_t zo_ph_statistic(const zo_ph_t *d)
{
    const int64_t rise = d->up - d->up_min, fall = d->down_max - d->down;
    return rise > fall ? rise : fall;
}

int32_t zo_ph_quantize(float loss, int32_t clip)
{
    const float scaled = loss * (float)(1 << ZO_PH_FRAC);
    if (!(scaled >= 0.0f)) {
        return scaled < 0.0f ? 0 : clip; /* negative: 0; NaN: the clip */
    }
    if (scaled >= (float)clip) {
        return clip;
    }
    return (int32_t)(scaled + 0.5f);
}
