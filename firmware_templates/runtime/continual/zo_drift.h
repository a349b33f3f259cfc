/* zo_drift.h - the drift detector of --mode continual: a Page-Hinkley test on the serving loss.
 *
 * Static file (docs/guides/continual.md).  Integer arithmetic only, so the host simulation and the
 * Cortex-M55 raise the same alarms on the same losses bit for bit; the Python mirror is
 * host/zoflash/reference/continual.py (tests/test_continual_c.py compares them).
 *
 * Each labelled sample's loss x (the loss of the deployed weights, quantized by
 * zo_ph_quantize: round(loss * 2^ZO_PH_FRAC), clipped to `clip`) updates
 *
 *     n += 1;  sum += x;  mean = floor(sum / n)
 *     cum += x - mean - delta;  min = min(min, cum)
 *
 * and the detector alarms when cum - min > lambda once n >= warmup: the loss rose by more than
 * delta per sample for long enough.  After an alarm (and after a promotion) the caller resets it.
 * False alarms: on a stationary stream cum - min is a random walk with drift -delta reflected at
 * 0; its excursions above lambda become rarer as exp(-2 delta lambda / var(x)) (Page's bound);
 * the rate the stream benchmark measures is stated in docs/guides/continual.md.
 */
#ifndef ZO_DRIFT_H
#define ZO_DRIFT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_PH_FRAC 8 /* losses in units of 2^-8 */

typedef struct {
    int32_t delta;   /* tolerated rise of the loss per sample (units of 2^-8) */
    int32_t lambda;  /* alarm threshold on cum - min (units of 2^-8) */
    int32_t clip;    /* a sample's loss is clipped to this (units of 2^-8): one outlier cannot alarm */
    uint32_t warmup; /* samples after a reset before an alarm may be raised */
} zo_ph_config_t;

typedef struct {
    int64_t sum, cum, min;
    uint32_t n;
} zo_ph_t;

void zo_ph_reset(zo_ph_t *d);

/* One sample's quantized loss; returns 1 when the detector alarms (it keeps its state: reset it). */
int zo_ph_update(zo_ph_t *d, const zo_ph_config_t *cfg, int32_t x);

/* The test statistic cum - min (units of 2^-8). */
int64_t zo_ph_statistic(const zo_ph_t *d);

/* A loss in units of 2^-8, rounded half up, clipped to [0, clip] (NaN: clip). */
int32_t zo_ph_quantize(float loss, int32_t clip);

#ifdef __cplusplus
}
#endif

#endif /* ZO_DRIFT_H */
