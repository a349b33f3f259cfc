/* zo_sched.h - the q schedulers of zeroth-order training (fixed, plateau, critical, adazeta).
 *
 * Static file, copied verbatim into each bundle.  Rules: docs/training.md, "Schedulers"; the
 * independent NumPy model is host/zoflash/reference/schedulers.py and must stay bit-identical
 * (float32 only, operations in source order, -ffp-contract=off, no libm, no malloc).  The ids,
 * names and limits are those of host/zoflash/spec/training.py (tests/test_spec.py checks them).
 *
 * Each scheduler is a state machine.  observe() first measures the step (window statistics),
 * then computes ONE scheduler event from the observation and the current state, then
 * looks (state, event) up in the kind's const rule table, which gives the next state (or the
 * alternative next state when q ends at q_max) and a set of actions.  Only the event
 * computation looks at numbers; every change of state or q comes from a table row.
 *
 * Usage per training step (after the trainer's lr calibration, if any):
 *     q = zo_sched_q(&s);  centre = zo_sched_wants_centre(&s);
 *     ... run the step at q (with a centre pass if asked) ...
 *     zo_sched_obs_t obs = {step, q, passes, loss, m2, v, has_kappa, kappa, diverged, lr};
 *     if (zo_sched_observe(&s, &obs, &ev)) { ... report ev (telemetry "event", kind 1) ... }
 *     if (zo_sched_should_stop(&s)) { ... stop (done reason 2) ... }
 */
#ifndef ZO_SCHED_H
#define ZO_SCHED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_SCHED_Q_LIMIT 64u /* q_max may not exceed this (the statistics buffers) */

/* Scheduler kinds (telemetry "hello" field). */
typedef enum {
    ZO_SCHED_FIXED = 0,
    ZO_SCHED_PLATEAU = 1,
    ZO_SCHED_CRITICAL = 2,
    ZO_SCHED_ADAZETA = 3,
    ZO_SCHED_N_KINDS = 4
} zo_sched_kind_t;

/* States (ids shared with Python and telemetry). */
typedef enum {
    ZO_ST_FIXED = 0,     /* fixed: q = q0 forever */
    ZO_ST_WARMUP = 1,    /* plateau: first window, no best loss yet */
    ZO_ST_MONITOR = 2,   /* plateau: judging windows against the best loss */
    ZO_ST_COOLDOWN = 3,  /* plateau: first window after doubling q */
    ZO_ST_CAPPED = 4,    /* plateau, adazeta: q == q_max */
    ZO_ST_DIVERGE = 5,   /* plateau, critical: first window after a rollback */
    ZO_ST_CALIBRATE = 6, /* critical: the first calib_steps steps at calib_q (no window yet) */
    ZO_ST_TRACK = 7,     /* critical: following the confirmed target q* */
    ZO_ST_RAMP = 8,      /* adazeta: open-loop growth per epoch */
    ZO_ST_HOLD = 9,      /* plateau, critical: the last raise brought no significant gain: q is not raised */
    ZO_SCHED_N_STATES = 10
} zo_sched_state_t;

/* Scheduler events: what one observation means, computed before the table lookup.  Their
 * codes are the "code" of telemetry events of kind 1 (scheduler). */
typedef enum {
    ZO_EV_NONE = 0,           /* no observation yet */
    ZO_EV_STEP = 1,           /* an ordinary step: no window closed, nothing due */
    ZO_EV_DIVERGED = 2,       /* the trainer rolled this step back (plateau, critical) */
    ZO_EV_WINDOW_FIRST = 3,   /* plateau: the first window closed (WARMUP) */
    ZO_EV_IMPROVED = 4,       /* plateau: mean beat best by > tau*best and z * both windows' se */
    ZO_EV_STALE = 5,          /* plateau: no improvement, patience not yet exhausted */
    ZO_EV_PATIENCE = 6,       /* plateau: no improvement for `patience` windows */
    ZO_EV_RISE = 7,           /* plateau: mean > best * (1 + rise), significant; counts as stale */
    ZO_EV_COOLED = 8,         /* plateau, critical: the window after a change closed */
    ZO_EV_CALIBRATED = 9,     /* critical: calib_steps observations done */
    ZO_EV_TARGET_HOLD = 10,   /* critical: window closed, target q* == q */
    ZO_EV_TARGET_PENDING = 11,/* critical: target != q, not yet confirmed */
    ZO_EV_TARGET_UP = 12,     /* critical: target > q confirmed `confirm` times */
    ZO_EV_TARGET_DOWN = 13,   /* critical: target < q confirmed `confirm` times */
    ZO_EV_EPOCH_HOLD = 14,    /* adazeta: new epoch, target == q */
    ZO_EV_EPOCH_UP = 15,      /* adazeta: new epoch, target > q */
    ZO_EV_EPOCH_DOWN = 16,    /* adazeta: new epoch, target < q */
    ZO_EV_NO_GAIN = 17,       /* plateau: patience ran out at a q whose raise brought no gain; critical: a raise is due but the last one brought no gain */
    ZO_SCHED_N_EVENTS = 18
} zo_sched_event_code_t;

/* Actions of a rule (bit set), applied in this bit order. */
enum {
    ZO_ACT_TARGET = 1u << 0,        /* critical: store q*, the new pending target and its count */
    ZO_ACT_COUNT_CLEAR = 1u << 1,   /* critical: count = 0 */
    ZO_ACT_PENDING_CLEAR = 1u << 2, /* critical: pending = none, count = 0 */
    ZO_ACT_BEST_SET = 1u << 3,      /* plateau: best = window mean */
    ZO_ACT_BEST_MIN = 1u << 4,      /* plateau: best = min(best, window mean) */
    ZO_ACT_STALE_INC = 1u << 5,     /* plateau: stale += 1 */
    ZO_ACT_STALE_CLEAR = 1u << 6,   /* plateau: stale = 0 */
    ZO_ACT_STOP = 1u << 7,          /* plateau: stop, if stop_when_capped */
    ZO_ACT_DOUBLE = 1u << 8,        /* q = min(2q, q_max) */
    ZO_ACT_HALVE = 1u << 9,         /* q = max(q/2, q_min) */
    ZO_ACT_WINDOW_RESET = 1u << 10, /* drop the open window */
    ZO_ACT_GAINED = 1u << 11        /* plateau: a significant improvement since the last raise */
};

/* One table row: in `state`, on `event`, apply `actions`; then go to `next`, or to
 * `next_at_cap` if q is now q_max. */
typedef struct {
    uint8_t state;
    uint8_t event;
    uint8_t next;
    uint8_t next_at_cap;
    uint16_t actions;
} zo_sched_rule_t;

/* Parameters (defaults and meaning: docs/training.md).  Fields a kind does not use are
 * ignored (and not checked). */
typedef struct {
    int32_t kind;               /* zo_sched_kind_t */
    uint32_t q0, q_min, q_max;  /* powers of two, q_min <= q0 <= q_max <= 64 (critical: no q0) */
    uint32_t window_passes;     /* plateau, critical: a window needs this many suffix passes */
    uint32_t window_min_steps;  /* ... and this many steps */
    uint32_t window_max_steps;  /* plateau, critical: ... and a small enough standard error, or this many */
    float tau, z, rise;         /* plateau (critical: z) */
    uint32_t patience;          /* plateau */
    int32_t stop_when_capped;   /* plateau: 0 or 1 */
    float c, floor, p;          /* critical (p = density 2^-L, set by the trainer) */
    uint32_t centre_every, calib_steps, calib_q, confirm; /* critical */
    float alpha, beta;          /* adazeta */
    uint32_t steps_per_epoch;   /* adazeta: ceil(n_train / batch) */
} zo_sched_config_t;

/* What the trainer saw in one step (docs/training.md "Schedulers"). */
typedef struct {
    uint32_t step;
    uint32_t q;          /* q used (informative: the scheduler keeps its own) */
    uint32_t passes;     /* suffix sample-passes of this step, centre pass included */
    float loss, m2, v;
    int32_t has_kappa;   /* 1 after a centre pass */
    float kappa;
    int32_t diverged;    /* 1 if the guard rolled this step back */
    float lr;            /* lr used at this step */
} zo_sched_obs_t;

/* A change of state or q. */
typedef struct {
    uint32_t step;
    uint8_t code;        /* zo_sched_event_code_t */
    uint8_t state_from, state_to;
    uint16_t q_from, q_to;
} zo_sched_event_t;

/* All scheduler state (a copy of the config, no pointers). */
typedef struct {
    zo_sched_config_t cfg;
    uint32_t q;
    int32_t state;
    int32_t stop;
    uint32_t n_obs;        /* observations so far (the scheduler's own step count) */
    uint32_t last_event;   /* event of the last observation (ZO_EV_NONE before the first) */
    /* window (plateau, critical) */
    uint64_t w_passes;
    uint32_t w_steps;
    float w_sum, w_sq;
    float w_mean, w_se2;   /* of the last closed window (for logs) */
    /* plateau */
    int32_t has_best;
    float best;
    float best_se2;        /* squared standard error of the window that set best */
    uint32_t stale;
    int32_t raised;        /* q was raised at least once */
    int32_t gained;        /* a significant improvement since the last raise */
    /* critical: window sums of m2, s = m2 - v and kappa (centre steps), and their means at the
     * last close */
    float w_m2, w_s, w_s2, w_k, w_k2;
    uint32_t w_kn;
    float c_m2, c_s, c_kappa, c_rse2; /* c_rse2: squared relative standard error of q* (-1: unknown) */
    float q_star;          /* last unrounded target (0 while kappa, m2 unknown or <= 0) */
    /* segment: from the first window after calibration, restarted at every raise */
    float base_mean, base_se2, base_gap; /* its first window's loss mean, se2 and half its passes */
    uint64_t since_passes;               /* passes of its windows after the first */
    float base_rate, base_rate_se2;      /* loss decrease per pass of the segment before the last raise */
    uint32_t pending;      /* target being confirmed (0: none) */
    uint32_t count;        /* consecutive windows that gave `pending` */
} zo_sched_t;

/* NULL if cfg is valid, else a short description of the first problem. */
const char *zo_sched_check(const zo_sched_config_t *cfg);

/* Start (cfg must pass zo_sched_check). */
void zo_sched_init(zo_sched_t *s, const zo_sched_config_t *cfg);

/* q for the next step. */
uint32_t zo_sched_q(const zo_sched_t *s);

/* Current state id (zo_sched_state_t). */
int32_t zo_sched_state(const zo_sched_t *s);

/* 1 if the next step must run a centre pass (critical: every centre_every steps, counted from
 * the scheduler's first step, which has one). */
int32_t zo_sched_wants_centre(const zo_sched_t *s);

/* Take one step's observation.  Returns 1 if the state or q changed, and then fills *ev
 * (unless ev is NULL). */
int32_t zo_sched_observe(zo_sched_t *s, const zo_sched_obs_t *obs, zo_sched_event_t *ev);

/* 1 once the scheduler asked to stop (plateau with stop_when_capped). */
int32_t zo_sched_should_stop(const zo_sched_t *s);

/* The rule table of a kind (*n rows), or NULL for an unknown kind. */
const zo_sched_rule_t *zo_sched_rules(int32_t kind, uint32_t *n);

/* Names for logs ("?" when out of range). */
const char *zo_sched_kind_name(int32_t kind);
const char *zo_sched_state_name(int32_t state);
const char *zo_sched_event_name(int32_t event);

#ifdef __cplusplus
}
#endif

#endif /* ZO_SCHED_H */
