/* zo_drift.c - Page-Hinkley on the serving loss, integers only (zo_drift.h). */
#include "zo_drift.h"

void zo_ph_reset(zo_ph_t *d)
{
    d->sum = 0;
    d->cum = 0;
    d->min = 0;
    d->n = 0u;
}

int zo_ph_update(zo_ph_t *d, const zo_ph_config_t *cfg, int32_t x)
{
    d->n += 1u;
    d->sum += x;
    const int64_t mean = d->sum / (int64_t)d->n; /* sum >= 0: the floor */
    d->cum += (int64_t)x - mean - cfg->delta;
    if (d->cum < d->min) {
        d->min = d->cum;
    }
    return d->n >= cfg->warmup && d->cum - d->min > cfg->lambda;
}

int64_t zo_ph_statistic(const zo_ph_t *d)
{
    return d->cum - d->min;
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
