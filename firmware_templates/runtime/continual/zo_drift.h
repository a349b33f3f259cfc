/* zo_drift.h - the drift detector of --mode continual: a Page-Hinkley test on the serving loss.
 *
 * Static file (docs/guides/continual.md).  Integer arithmetic only, so the host simulation and the
 * Cortex-M55 raise the same alarms on the same losses bit for bit; the Python mirror is
 * host/zoflash/reference/continual.py (tests/test_continual_c.py compares them).
 *
 * Each labelled sample's loss x (the loss of the deployed weights, quantized by
 * zo_ph_quantize: round(loss * 2^ZO_PH_FRAC), clipped to `clip`) updates, two-sided and in units
 * of the loss's own spread since the reset (so one setting holds for an accurate model and for a
 * struggling one):
 *
 *     n += 1;  sum += x;  sq += x^2;  mean = floor(sum / n)
 *     sd = max(min_sd, isqrt(floor(sq / n) - mean^2));  k = floor(delta sd / 256)
 *     up += x - mean - k;    up_min = min(up_min, up)        (the loss rose)
 *     down += x - mean + k;  down_max = max(down_max, down)  (the loss fell)
 *
 * and the detector alarms once n >= warmup when up - up_min or down_max - down exceeds
 * floor(lambda sd / 256): the loss moved by more than delta/256 standard deviations per sample for
 * long enough.  A fall counts too: conditions changed, and weights adapted to the old ones may now
 * serve worse than the factory weights.  The caller resets it after an alarm and a decision.
 * False alarms: for each side a CUSUM with reference k and threshold h (in sd) has an average run
 * length near exp(2k(h + 1.166)) / (2k^2) samples on a stationary stream (Siegmund's
 * approximation; the losses are not Gaussian): the rate the stream benchmark measures is stated
 * in docs/guides/continual.md.
 */
#ifndef ZO_DRIFT_H
#define ZO_DRIFT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_PH_FRAC 8 /* losses in units of 2^-8 */

typedef struct {
    int32_t delta;   /* tolerated change of the loss per sample, in 1/256 of its standard deviation */
    int32_t lambda;  /* alarm threshold, in 1/256 of the loss's standard deviation */
    int32_t clip;    /* a sample's loss is clipped to this (units of 2^-8): one outlier cannot alarm */
    int32_t min_sd;  /* the standard deviation is at least this (units of 2^-8): a near-perfect model's */
    uint32_t warmup; /* samples after a reset before an alarm may be raised */
} zo_ph_config_t;

typedef struct {
    int64_t sum, sq, up, up_min, down, down_max, threshold;
    uint32_t n;
} zo_ph_t;

void zo_ph_reset(zo_ph_t *d);

/* One sample's quantized loss; returns 1 when the detector alarms (it keeps its state: reset it). */
int zo_ph_update(zo_ph_t *d, const zo_ph_config_t *cfg, int32_t x);

/* The test statistic max(up - up_min, down_max - down) (units of 2^-8). */
int64_t zo_ph_statistic(const zo_ph_t *d);

/* The alarm threshold at the last update (units of 2^-8). */
int64_t zo_ph_threshold(const zo_ph_t *d);

/* floor(sqrt(v)), exactly. */
uint32_t zo_isqrt64(uint64_t v);

/* A loss in units of 2^-8, rounded half up, clipped to [0, clip] (NaN: clip). */
int32_t zo_ph_quantize(float loss, int32_t clip);

#ifdef __cplusplus
}
#endif

#endif /* ZO_DRIFT_H */
