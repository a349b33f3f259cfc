/* zo_sched.c - table-driven q schedulers (see zo_sched.h and docs/training.md "Schedulers").
 *
 * Every float operation is one binary32 operation in source order (build with
 * -ffp-contract=off); host/zoflash/reference/schedulers.py performs the same ones. */
#include "zo_sched.h"

#include <float.h>
#include <stddef.h>

#include "zo_train_math.h"

#define SQRT2_F 1.41421354f /* geometric midpoint between powers of two */
/* critical: a window closes once z times the relative standard error of q* is at most
 * 1 - 1/sqrt(2), so that a target one octave away (q* = 2q) stands out of the threshold q*sqrt(2) */
#define CRIT_TOL 0.292893231f

/* Shorthands for the tables. */
#define R(st, ev, nx, cap, act) { ZO_ST_##st, ZO_EV_##ev, ZO_ST_##nx, ZO_ST_##cap, (uint16_t)(act) }
#define DIVERGE_ACTS (ZO_ACT_DOUBLE | ZO_ACT_WINDOW_RESET)

static const zo_sched_rule_t FIXED_RULES[] = {
    R(FIXED, STEP, FIXED, FIXED, 0),
};

/* plateau: doubling into COOLDOWN lands in CAPPED instead when q reaches q_max.  A rise only
 * counts as a stale window (noise must not double q); patience at a q whose raise brought no
 * significant gain holds q there (HOLD). */
#define NOTE_GAIN (ZO_ACT_BEST_SET | ZO_ACT_STALE_CLEAR | ZO_ACT_GAINED)
static const zo_sched_rule_t PLATEAU_RULES[] = {
    R(WARMUP, STEP, WARMUP, WARMUP, 0),
    R(WARMUP, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_STALE_CLEAR),
    R(WARMUP, WINDOW_FIRST, MONITOR, CAPPED, ZO_ACT_BEST_SET),
    R(MONITOR, STEP, MONITOR, CAPPED, 0),
    R(MONITOR, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_STALE_CLEAR),
    R(MONITOR, IMPROVED, MONITOR, CAPPED, NOTE_GAIN),
    R(MONITOR, STALE, MONITOR, CAPPED, ZO_ACT_BEST_MIN | ZO_ACT_STALE_INC),
    R(MONITOR, PATIENCE, COOLDOWN, CAPPED, ZO_ACT_BEST_MIN | ZO_ACT_STALE_CLEAR | ZO_ACT_DOUBLE),
    R(MONITOR, RISE, MONITOR, CAPPED, ZO_ACT_STALE_INC),
    R(MONITOR, NO_GAIN, HOLD, HOLD, ZO_ACT_BEST_MIN | ZO_ACT_STALE_CLEAR | ZO_ACT_STOP),
    R(COOLDOWN, STEP, COOLDOWN, COOLDOWN, 0),
    R(COOLDOWN, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_STALE_CLEAR),
    R(COOLDOWN, COOLED, MONITOR, CAPPED, ZO_ACT_STALE_CLEAR), /* best stays: the raise's gain is judged next */
    R(CAPPED, STEP, CAPPED, CAPPED, 0),
    R(CAPPED, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_STALE_CLEAR),
    R(CAPPED, IMPROVED, CAPPED, CAPPED, NOTE_GAIN),
    R(CAPPED, STALE, CAPPED, CAPPED, ZO_ACT_BEST_MIN | ZO_ACT_STALE_INC),
    R(CAPPED, PATIENCE, CAPPED, CAPPED, ZO_ACT_BEST_MIN | ZO_ACT_STALE_CLEAR | ZO_ACT_STOP),
    R(CAPPED, RISE, CAPPED, CAPPED, ZO_ACT_STALE_INC),
    R(HOLD, STEP, HOLD, HOLD, 0),
    R(HOLD, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_STALE_CLEAR),
    R(HOLD, IMPROVED, HOLD, HOLD, NOTE_GAIN),
    R(HOLD, STALE, HOLD, HOLD, ZO_ACT_BEST_MIN | ZO_ACT_STALE_INC),
    R(HOLD, PATIENCE, HOLD, HOLD, ZO_ACT_BEST_MIN | ZO_ACT_STALE_CLEAR | ZO_ACT_STOP),
    R(HOLD, RISE, HOLD, HOLD, ZO_ACT_STALE_INC),
    R(DIVERGE, STEP, DIVERGE, DIVERGE, 0),
    R(DIVERGE, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_STALE_CLEAR),
    R(DIVERGE, COOLED, MONITOR, CAPPED, ZO_ACT_BEST_SET | ZO_ACT_STALE_CLEAR),
};

/* critical: a confirmed raise whose predecessor brought no gain in loss decrease per pass holds
 * q there (HOLD: no more raises; lowering stays possible). */
static const zo_sched_rule_t CRITICAL_RULES[] = {
    R(CALIBRATE, STEP, CALIBRATE, CALIBRATE, 0),
    R(CALIBRATE, CALIBRATED, TRACK, TRACK, 0),
    R(CALIBRATE, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_PENDING_CLEAR),
    R(TRACK, STEP, TRACK, TRACK, 0),
    R(TRACK, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_PENDING_CLEAR),
    R(TRACK, TARGET_HOLD, TRACK, TRACK, ZO_ACT_TARGET),
    R(TRACK, TARGET_PENDING, TRACK, TRACK, ZO_ACT_TARGET),
    R(TRACK, TARGET_UP, TRACK, TRACK, ZO_ACT_TARGET | ZO_ACT_COUNT_CLEAR | ZO_ACT_DOUBLE),
    R(TRACK, TARGET_DOWN, TRACK, TRACK, ZO_ACT_TARGET | ZO_ACT_COUNT_CLEAR | ZO_ACT_HALVE),
    R(TRACK, NO_GAIN, HOLD, HOLD, ZO_ACT_TARGET | ZO_ACT_COUNT_CLEAR),
    R(HOLD, STEP, HOLD, HOLD, 0),
    R(HOLD, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_PENDING_CLEAR),
    R(HOLD, TARGET_HOLD, HOLD, HOLD, ZO_ACT_TARGET),
    R(HOLD, TARGET_PENDING, HOLD, HOLD, ZO_ACT_TARGET),
    R(HOLD, TARGET_DOWN, HOLD, HOLD, ZO_ACT_TARGET | ZO_ACT_COUNT_CLEAR | ZO_ACT_HALVE),
    R(HOLD, NO_GAIN, HOLD, HOLD, ZO_ACT_TARGET | ZO_ACT_COUNT_CLEAR),
    R(DIVERGE, STEP, DIVERGE, DIVERGE, 0),
    R(DIVERGE, DIVERGED, DIVERGE, DIVERGE, DIVERGE_ACTS | ZO_ACT_PENDING_CLEAR),
    R(DIVERGE, COOLED, TRACK, TRACK, 0),
};

static const zo_sched_rule_t ADAZETA_RULES[] = {
    R(RAMP, STEP, RAMP, CAPPED, 0),
    R(RAMP, EPOCH_HOLD, RAMP, CAPPED, 0),
    R(RAMP, EPOCH_UP, RAMP, CAPPED, ZO_ACT_DOUBLE),
    R(RAMP, EPOCH_DOWN, RAMP, CAPPED, ZO_ACT_HALVE),
    R(CAPPED, STEP, CAPPED, CAPPED, 0),
    R(CAPPED, EPOCH_HOLD, CAPPED, CAPPED, 0),
    R(CAPPED, EPOCH_DOWN, RAMP, CAPPED, ZO_ACT_HALVE),
};

#undef R
#undef NOTE_GAIN

typedef struct {
    const zo_sched_rule_t *rules;
    uint32_t n;
    uint8_t init, init_at_cap; /* first state (the second if q0 == q_max) */
} zo_sched_kind_def_t;

#define KIND(rules, init, cap) { rules, (uint32_t)(sizeof rules / sizeof rules[0]), ZO_ST_##init, ZO_ST_##cap }
static const zo_sched_kind_def_t KINDS[ZO_SCHED_N_KINDS] = {
    KIND(FIXED_RULES, FIXED, FIXED),
    KIND(PLATEAU_RULES, WARMUP, WARMUP),
    KIND(CRITICAL_RULES, CALIBRATE, CALIBRATE),
    KIND(ADAZETA_RULES, RAMP, CAPPED),
};
#undef KIND

static const char *const KIND_NAMES[ZO_SCHED_N_KINDS] = { "fixed", "plateau", "critical", "adazeta" };
static const char *const STATE_NAMES[ZO_SCHED_N_STATES] = {
    "FIXED", "WARMUP", "MONITOR", "COOLDOWN", "CAPPED", "DIVERGE", "CALIBRATE", "TRACK", "RAMP", "HOLD"
};
static const char *const EVENT_NAMES[ZO_SCHED_N_EVENTS] = {
    "NONE", "STEP", "DIVERGED", "WINDOW_FIRST", "IMPROVED", "STALE", "PATIENCE", "RISE", "COOLED",
    "CALIBRATED", "TARGET_HOLD", "TARGET_PENDING", "TARGET_UP", "TARGET_DOWN", "EPOCH_HOLD",
    "EPOCH_UP", "EPOCH_DOWN", "NO_GAIN"
};

static const char *name_of(const char *const *names, int32_t n, int32_t id)
{
    return (id >= 0 && id < n) ? names[id] : "?";
}

const char *zo_sched_kind_name(int32_t kind) { return name_of(KIND_NAMES, ZO_SCHED_N_KINDS, kind); }
const char *zo_sched_state_name(int32_t state) { return name_of(STATE_NAMES, ZO_SCHED_N_STATES, state); }
const char *zo_sched_event_name(int32_t event) { return name_of(EVENT_NAMES, ZO_SCHED_N_EVENTS, event); }

const zo_sched_rule_t *zo_sched_rules(int32_t kind, uint32_t *n)
{
    if (kind < 0 || kind >= ZO_SCHED_N_KINDS) {
        *n = 0;
        return NULL;
    }
    *n = KINDS[kind].n;
    return KINDS[kind].rules;
}

/* ------------------------------------------------------------------ validation */

static int is_pow2_in(uint32_t v, uint32_t lo, uint32_t hi)
{
    return v >= lo && v <= hi && (v & (v - 1u)) == 0u;
}

/* The negated comparisons also reject NaN. */
static int finite_ge0(float x) { return x >= 0.0f && x <= FLT_MAX; }
static int finite_gt0(float x) { return x > 0.0f && x <= FLT_MAX; }

const char *zo_sched_check(const zo_sched_config_t *c)
{
    if (c->kind < 0 || c->kind >= ZO_SCHED_N_KINDS) {
        return "unknown scheduler kind";
    }
    if (!is_pow2_in(c->q_min, 1u, ZO_SCHED_Q_LIMIT) || !is_pow2_in(c->q_max, c->q_min, ZO_SCHED_Q_LIMIT)) {
        return "q_min and q_max must be powers of two with 1 <= q_min <= q_max <= 64";
    }
    if (c->kind != ZO_SCHED_CRITICAL && !is_pow2_in(c->q0, c->q_min, c->q_max)) {
        return "q0 must be a power of two in [q_min, q_max]";
    }
    if ((c->kind == ZO_SCHED_PLATEAU || c->kind == ZO_SCHED_CRITICAL) &&
        (c->window_passes < 1u || c->window_min_steps < 1u)) {
        return "window_passes and window_min_steps must be >= 1";
    }
    if ((c->kind == ZO_SCHED_PLATEAU || c->kind == ZO_SCHED_CRITICAL) && c->window_max_steps < c->window_min_steps) {
        return "window_max_steps must be >= window_min_steps";
    }
    if (c->kind == ZO_SCHED_PLATEAU) {
        if (!finite_ge0(c->tau) || !finite_ge0(c->z) || !finite_ge0(c->rise)) {
            return "tau, z and rise must be finite and >= 0";
        }
        if (c->patience < 1u) {
            return "patience must be >= 1";
        }
        if (c->stop_when_capped != 0 && c->stop_when_capped != 1) {
            return "stop_when_capped must be 0 or 1";
        }
    }
    if (c->kind == ZO_SCHED_CRITICAL) {
        if (!finite_gt0(c->c) || !finite_ge0(c->z)) {
            return "c must be finite and > 0, z finite and >= 0";
        }
        if (!(c->floor > 0.0f && c->floor <= 1.0f)) {
            return "floor must be in (0, 1]";
        }
        if (!(c->p > 0.0f && c->p <= 1.0f)) {
            return "p must be in (0, 1]";
        }
        if (c->centre_every < 1u || c->calib_steps < 1u || c->confirm < 1u) {
            return "centre_every, calib_steps and confirm must be >= 1";
        }
        if (!is_pow2_in(c->calib_q, c->q_min, c->q_max)) {
            return "calib_q must be a power of two in [q_min, q_max]";
        }
    }
    if (c->kind == ZO_SCHED_ADAZETA) {
        if (!finite_gt0(c->alpha) || !(c->beta >= -FLT_MAX && c->beta <= FLT_MAX)) {
            return "alpha must be finite and > 0, beta finite";
        }
        if (c->steps_per_epoch < 1u) {
            return "steps_per_epoch must be >= 1";
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ state machine */

static void window_reset(zo_sched_t *s)
{
    s->w_passes = 0u;
    s->w_steps = 0u;
    s->w_sum = 0.0f;
    s->w_sq = 0.0f;
    s->w_m2 = 0.0f;
    s->w_s = 0.0f;
    s->w_s2 = 0.0f;
    s->w_k = 0.0f;
    s->w_k2 = 0.0f;
    s->w_kn = 0u;
}

void zo_sched_init(zo_sched_t *s, const zo_sched_config_t *cfg)
{
    const zo_sched_kind_def_t *k = &KINDS[cfg->kind];
    *s = (zo_sched_t){ 0 };
    s->cfg = *cfg;
    s->q = (cfg->kind == ZO_SCHED_CRITICAL) ? cfg->calib_q : cfg->q0;
    s->state = (s->q == cfg->q_max) ? k->init_at_cap : k->init;
    s->last_event = ZO_EV_NONE;
    s->c_rse2 = -1.0f;
}

uint32_t zo_sched_q(const zo_sched_t *s) { return s->q; }
int32_t zo_sched_state(const zo_sched_t *s) { return s->state; }
int32_t zo_sched_should_stop(const zo_sched_t *s) { return s->stop; }

int32_t zo_sched_wants_centre(const zo_sched_t *s)
{
    return s->cfg.kind == ZO_SCHED_CRITICAL && s->n_obs % s->cfg.centre_every == 0u;
}

/* What the measurement phase found out about this step. */
typedef struct {
    int closed;          /* a window closed at this step */
    float mean, se2;     /* its loss mean and squared standard error */
    uint64_t passes;     /* its passes */
    float m2, sig, kappa, rse2; /* critical: its means of m2, m2 - v, kappa; rse2 of q* (-1: unknown) */
    uint32_t pending;    /* critical: target to store (ZO_ACT_TARGET) */
    uint32_t count;
    float q_star;
} zo_meas_t;

/* mean = sum / n, returns the squared standard error of the mean (var / n, var >= 0) */
static float mean_se2(float sum, float sq, float n, float *mean)
{
    *mean = sum / n;
    float var = sq / n - *mean * *mean;
    if (var < 0.0f) {
        var = 0.0f;
    }
    return var / n;
}

/* critical: the window's means and the squared relative standard error of q* (delta method:
 * kappa's, plus that of m2 - v when it is the denominator; m2's own error is much smaller) */
static void critical_stats(const zo_sched_t *s, zo_meas_t *m)
{
    const float n = (float)s->w_steps;
    m->m2 = s->w_m2 / n;
    const float se2_s = mean_se2(s->w_s, s->w_s2, n, &m->sig);
    m->kappa = 0.0f;
    m->rse2 = -1.0f;
    if (s->w_kn < 2u) {
        return;
    }
    const float se2_k = mean_se2(s->w_k, s->w_k2, (float)s->w_kn, &m->kappa);
    if (!(m->kappa > 0.0f) || !(m->m2 > 0.0f)) {
        return;
    }
    m->rse2 = se2_k / (m->kappa * m->kappa);
    if (m->sig > s->cfg.floor * m->m2) {
        m->rse2 = m->rse2 + se2_s / (m->sig * m->sig);
    }
}

/* Window statistics of a kept (not rolled back) step. */
static void measure(zo_sched_t *s, const zo_sched_obs_t *o, zo_meas_t *m)
{
    const zo_sched_config_t *c = &s->cfg;
    s->w_passes += o->passes;
    s->w_steps += 1u;
    s->w_sum += o->loss;
    s->w_sq += o->loss * o->loss;
    if (c->kind == ZO_SCHED_CRITICAL) {
        const float sig = o->m2 - o->v;
        s->w_m2 += o->m2;
        s->w_s += sig;
        s->w_s2 += sig * sig;
        if (o->has_kappa) {
            s->w_k += o->kappa;
            s->w_k2 += o->kappa * o->kappa;
            s->w_kn += 1u;
        }
    }
    if (s->w_passes < c->window_passes || s->w_steps < c->window_min_steps) {
        return;
    }
    float mean;
    const float se2 = mean_se2(s->w_sum, s->w_sq, (float)s->w_steps, &mean);
    const int open = s->w_steps < c->window_max_steps;
    /* plateau: the window grows until its standard error is below tau * mean / z (so a gain of
     * tau * mean stands out of the noise), at most window_max_steps */
    const float tol = c->tau * mean;
    if (c->kind == ZO_SCHED_PLATEAU && open && (c->z * c->z) * se2 > tol * tol) {
        return;
    }
    if (c->kind == ZO_SCHED_CRITICAL) {
        critical_stats(s, m);
        if (open && !(m->rse2 >= 0.0f && (c->z * c->z) * m->rse2 <= CRIT_TOL * CRIT_TOL)) {
            return;
        }
    }
    m->closed = 1;
    m->mean = mean;
    m->se2 = se2;
    m->passes = s->w_passes;
    window_reset(s);
}

/* Rounded target of a critical window (docs: "At each window close in TRACK"), q unless q* is
 * significantly beyond the threshold toward it; *qs = q*. */
static uint32_t critical_target(const zo_sched_t *s, float lr, const zo_meas_t *m, float *qs)
{
    const zo_sched_config_t *c = &s->cfg;
    *qs = 0.0f;
    if (!(m->rse2 >= 0.0f)) {
        return s->q;
    }
    const float d2 = c->floor * m->m2;
    const float den = (m->sig > d2) ? m->sig : d2;
    *qs = ((c->c * lr) * m->kappa) * m->m2 / (c->p * den);
    uint32_t t = c->q_min;
    while (t < c->q_max && *qs >= (float)t * SQRT2_F) {
        t *= 2u;
    }
    if (t != s->q) {
        const float thr = (t > s->q) ? (float)s->q * SQRT2_F : (float)s->q / SQRT2_F;
        const float d = *qs - thr;
        if (!(d * d > ((c->z * c->z) * m->rse2) * (*qs * *qs))) {
            t = s->q;
        }
    }
    return t;
}

/* adazeta target of epoch e: the largest power of two <= q_e, at least q_min. */
static uint32_t adazeta_target(const zo_sched_config_t *c, uint32_t e)
{
    int32_t qe = zo_floor_f32(c->alpha * zo_expf(c->beta * zo_logf((float)e)));
    if (qe < 1) {
        qe = 1;
    }
    uint32_t t = c->q_min;
    while (t < c->q_max && 2u * t <= (uint32_t)qe) {
        t *= 2u;
    }
    return t;
}

static uint8_t plateau_judge(const zo_sched_t *s, const zo_meas_t *m)
{
    const zo_sched_config_t *c = &s->cfg;
    const float gain = s->best - m->mean;
    const float z2se2 = (c->z * c->z) * (s->best_se2 + m->se2); /* both windows are noisy */
    if (gain > c->tau * s->best && gain * gain > z2se2) {
        return ZO_EV_IMPROVED;
    }
    if (s->stale + 1u >= c->patience) {
        /* raise q again only if the last raise brought a significant gain: the loss was flat
         * (zero decrease per pass) before it, so a gain is a higher decrease per pass */
        return (s->state == ZO_ST_MONITOR && s->raised && !s->gained) ? ZO_EV_NO_GAIN : ZO_EV_PATIENCE;
    }
    if (m->mean > s->best * (1.0f + c->rise) && gain * gain > z2se2) {
        return ZO_EV_RISE;
    }
    return ZO_EV_STALE;
}

/* critical: the loss decrease per pass over the segment (from its first window's centre to the
 * centre of the window m) and its squared standard error */
static float critical_rate(const zo_sched_t *s, const zo_meas_t *m, float *se2)
{
    const float dist = (s->base_gap + (float)s->since_passes) + 0.5f * (float)m->passes;
    *se2 = (s->base_se2 + m->se2) / (dist * dist);
    return (s->base_mean - m->mean) / dist;
}

/* critical: did the last raise increase the loss decrease per pass?  The rate of the segment
 * since the raise against that of the segment before it: 1 higher by more than z combined
 * standard errors, -1 not higher, 0 higher but not yet significantly (wait for more windows). */
static int critical_raise_gain(const zo_sched_t *s, const zo_meas_t *m)
{
    float se2;
    const float d = critical_rate(s, m, &se2) - s->base_rate;
    if (!(d > 0.0f)) {
        return -1;
    }
    return (d * d > (s->cfg.z * s->cfg.z) * (se2 + s->base_rate_se2)) ? 1 : 0;
}

/* critical: a segment starts at window m (the first one, and at every raise) */
static void critical_segment_start(zo_sched_t *s, const zo_meas_t *m)
{
    s->base_mean = m->mean;
    s->base_se2 = m->se2;
    s->base_gap = 0.5f * (float)m->passes;
    s->since_passes = 0u;
}

static uint8_t critical_judge(const zo_sched_t *s, float lr, zo_meas_t *m)
{
    const uint32_t target = critical_target(s, lr, m, &m->q_star);
    m->pending = target;
    m->count = (target == s->pending) ? s->count + 1u : 1u;
    if (target == s->q) {
        return ZO_EV_TARGET_HOLD;
    }
    if (m->count < s->cfg.confirm) {
        return ZO_EV_TARGET_PENDING;
    }
    if (target < s->q) {
        return ZO_EV_TARGET_DOWN;
    }
    /* raise again only if the last raise paid off (never in HOLD) */
    const int gain = (s->state == ZO_ST_HOLD) ? -1 : s->raised ? critical_raise_gain(s, m) : 1;
    return (gain > 0) ? ZO_EV_TARGET_UP : (gain < 0) ? ZO_EV_NO_GAIN : ZO_EV_TARGET_PENDING;
}

/* The event of this observation (measure() has run for plateau and critical). */
static uint8_t classify(const zo_sched_t *s, const zo_sched_obs_t *o, zo_meas_t *m)
{
    switch (s->cfg.kind) {
    case ZO_SCHED_PLATEAU:
        if (!m->closed) {
            return ZO_EV_STEP;
        }
        if (s->state == ZO_ST_WARMUP) {
            return ZO_EV_WINDOW_FIRST;
        }
        if (s->state == ZO_ST_COOLDOWN || s->state == ZO_ST_DIVERGE) {
            return ZO_EV_COOLED;
        }
        return plateau_judge(s, m);
    case ZO_SCHED_CRITICAL:
        if (s->state == ZO_ST_CALIBRATE) {
            return (s->n_obs >= s->cfg.calib_steps) ? ZO_EV_CALIBRATED : ZO_EV_STEP;
        }
        if (!m->closed) {
            return ZO_EV_STEP;
        }
        return (s->state == ZO_ST_DIVERGE) ? ZO_EV_COOLED : critical_judge(s, o->lr, m);
    case ZO_SCHED_ADAZETA:
        if (s->n_obs % s->cfg.steps_per_epoch != 0u) {
            return ZO_EV_STEP;
        }
        {
            const uint32_t t = adazeta_target(&s->cfg, s->n_obs / s->cfg.steps_per_epoch + 1u);
            return (t > s->q) ? ZO_EV_EPOCH_UP : (t < s->q) ? ZO_EV_EPOCH_DOWN : ZO_EV_EPOCH_HOLD;
        }
    default:
        return ZO_EV_STEP;
    }
}

static void apply(zo_sched_t *s, uint16_t act, const zo_meas_t *m)
{
    const zo_sched_config_t *c = &s->cfg;
    if (act & ZO_ACT_TARGET) {
        s->pending = m->pending;
        s->count = m->count;
        s->q_star = m->q_star;
    }
    if (act & ZO_ACT_COUNT_CLEAR) {
        s->count = 0u;
    }
    if (act & ZO_ACT_PENDING_CLEAR) {
        s->pending = 0u;
        s->count = 0u;
    }
    if (act & ZO_ACT_BEST_SET) {
        s->best = m->mean;
        s->best_se2 = m->se2;
        s->has_best = 1;
    }
    if ((act & ZO_ACT_BEST_MIN) && m->mean < s->best) {
        s->best = m->mean;
        s->best_se2 = m->se2;
    }
    if (act & ZO_ACT_STALE_INC) {
        s->stale += 1u;
    }
    if (act & ZO_ACT_STALE_CLEAR) {
        s->stale = 0u;
    }
    if ((act & ZO_ACT_STOP) && c->stop_when_capped) {
        s->stop = 1;
    }
    if ((act & ZO_ACT_DOUBLE) && s->q < c->q_max) {
        s->q *= 2u;
        if (c->kind == ZO_SCHED_PLATEAU || m->closed) { /* critical: a rollback's raise is not judged */
            s->raised = 1;
            s->gained = 0;
        }
        if (c->kind == ZO_SCHED_CRITICAL && m->closed) {
            /* the segment before the raise gives the rate the next raise must beat */
            s->base_rate = 0.0f;
            s->base_rate_se2 = 0.0f;
            if (s->base_gap > 0.0f) {
                s->base_rate = critical_rate(s, m, &s->base_rate_se2);
            }
            critical_segment_start(s, m);
        }
    }
    if ((act & ZO_ACT_HALVE) && s->q > c->q_min) {
        s->q /= 2u;
    }
    if (act & ZO_ACT_WINDOW_RESET) {
        window_reset(s);
    }
    if (act & ZO_ACT_GAINED) {
        s->gained = 1;
    }
}

int32_t zo_sched_observe(zo_sched_t *s, const zo_sched_obs_t *obs, zo_sched_event_t *ev)
{
    const zo_sched_kind_def_t *k = &KINDS[s->cfg.kind];
    const uint32_t q_from = s->q;
    const int32_t state_from = s->state;
    zo_meas_t m = { 0, 0.0f, 0.0f, 0u, 0.0f, 0.0f, 0.0f, -1.0f, 0u, 0u, 0.0f };
    uint8_t event;

    s->n_obs += 1u;
    /* fixed and adazeta ignore rollbacks; the others drop the step's statistics */
    const int windowed = s->cfg.kind == ZO_SCHED_PLATEAU || s->cfg.kind == ZO_SCHED_CRITICAL;
    if (windowed && obs->diverged) {
        event = ZO_EV_DIVERGED;
    } else {
        if (windowed && s->state != ZO_ST_CALIBRATE) { /* critical's windows start after calibration */
            measure(s, obs, &m);
        }
        event = classify(s, obs, &m);
    }
    s->last_event = event;

    for (uint32_t i = 0; i < k->n; ++i) {
        const zo_sched_rule_t *r = &k->rules[i];
        if (r->state == state_from && r->event == event) {
            apply(s, r->actions, &m);
            s->state = (s->q == s->cfg.q_max) ? r->next_at_cap : r->next;
            break;
        }
    }
    if (m.closed) {
        s->w_mean = m.mean;
        s->w_se2 = m.se2;
        if (s->cfg.kind == ZO_SCHED_CRITICAL) {
            if (!(s->base_gap > 0.0f)) {
                critical_segment_start(s, &m); /* the first window after calibration */
            } else if (s->q <= q_from) {
                s->since_passes += m.passes; /* (a raise started a new segment at this window) */
            }
            s->c_m2 = m.m2;
            s->c_s = m.sig;
            s->c_kappa = m.kappa;
            s->c_rse2 = m.rse2;
        }
    }
    const int32_t changed = s->q != q_from || s->state != state_from;
    if (changed && ev != NULL) {
        ev->step = obs->step;
        ev->code = event;
        ev->state_from = (uint8_t)state_from;
        ev->state_to = (uint8_t)s->state;
        ev->q_from = (uint16_t)q_from;
        ev->q_to = (uint16_t)s->q;
    }
    return changed;
}
