/* zo_lr.c - the learning rate of the training loop: its scaling with q, its decay, the auto lr's
 * step size and the lr trial.  Rules: docs/training.md "Learning rate", "lr trial". */
#include <math.h>
#include <stddef.h>

#include "zo_telemetry.h"
#include "zo_trainer_internal.h"

float zo_lr_at_q(float lr1, uint32_t q, zo_lr_scaling_t scaling)
{
    if (scaling == ZO_LR_FIXED) {
        return lr1;
    }
    if (scaling == ZO_LR_LINEAR) {
        return lr1 * (float)q;
    }
    uint32_t k = 0;
    while ((1u << k) < q) {
        ++k;
    }
    float g = (float)(1u << (k / 2u)); /* 2^(k/2) for even k, exact */
    if (k % 2u) {
        g = g * 1.41421354f;
    }
    return lr1 * g;
}

float zo_lr_decay_factor(const zo_train_config_t *cfg, uint32_t t, uint64_t passes)
{
    if (cfg->lr_decay == ZO_LR_DECAY_NONE) {
        return 1.0f;
    }
    /* f: the fraction of the run done, by the budget when there is one, else by the steps */
    const float f = (cfg->budget != 0u) ? (float)passes / (float)cfg->budget : (float)t / (float)cfg->max_steps;
    if (cfg->lr_decay == ZO_LR_DECAY_LINEAR) {
        return (f < 1.0f) ? 1.0f - f : 0.0f;
    }
    if (cfg->lr_decay == ZO_LR_DECAY_TAIL) {
        const float div = (float)ZO_LR_DECAY_TAIL_DIV;
        return (f < 1.0f - 1.0f / div) ? 1.0f : (f < 1.0f) ? (1.0f - f) * div : 0.0f;
    }
    return (f < 0.5f) ? 1.0f : (f < 0.75f) ? 0.1f : 0.01f;
}

/* the lr of step t at q (0 while calibrating) */
float zo_lr_of_step(const trainer_t *tr, uint32_t t, uint32_t q, int calibrating)
{
    const zo_train_config_t *cfg = tr->cfg;
    if (calibrating) {
        return 0.0f;
    }
    const float lr = zo_lr_at_q(tr->lr1, q, cfg->lr_scaling);
    if (cfg->lr_decay == ZO_LR_DECAY_NONE) {
        return lr;
    }
    return lr * zo_lr_decay_factor(cfg, t, tr->prefix_passes + tr->suffix_passes);
}

/* ---- auto lr step size ------------------------------------------------------------------- */

/* LSB RMS per step of the first updates (over the directions' nonzero entries, density p): rho,
 * at most max(1, w_rms / ZO_LR_W_RMS_DIV / sqrt(p)) where w_rms is the RMS of the trainable int8
 * weights, so that a few hundred mostly-noise steps do not move a pretrained layer by more than
 * its own size (docs/training.md "Learning rate"). */
float zo_lr_auto_step_lsb(const zo_train_model_t *m, float rho, float p)
{
    uint64_t sq = 0u, n = 0u;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        if (tt->value_bytes == 1u) {
            const int8_t *w = (const int8_t *)tt->values;
            for (int32_t e = 0; e < tt->count; ++e) {
                sq += (uint64_t)((int32_t)w[e] * (int32_t)w[e]);
            }
            n += (uint64_t)tt->count;
        }
    }
    if (n == 0u) {
        return rho;
    }
    const float by_w = (sqrtf((float)sq / (float)n) / (float)ZO_LR_W_RMS_DIV) / sqrtf(p);
    const float bound = (by_w > 1.0f) ? by_w : 1.0f;
    return (rho < bound) ? rho : bound;
}

/* --- lr trial (docs/training.md "lr trial") ---------------------------------------------------
 * Before training, candidates lr_1 * 2^j each train lr_trial_steps steps at q = 1 from the same
 * weights, on the same minibatches and directions (the seeds of steps t0 .. t0 + T - 1: the
 * comparison is paired), and are judged by the validation loss after them.  j walks from 0 up
 * while the loss improves, else down, at most ZO_LR_TRIAL_MAX_MOVES either way.  The weights
 * are then put back (the snapshot still holds them: nothing has moved before) and training
 * starts at the best candidate's lr_1 / 2^ZO_LR_TRIAL_BACKOFF: the best rate over T steps from
 * the start is larger than the best over the whole run (short-horizon bias).  A run longer than
 * cfg->lr_trial_horizon candidates also gets lr_trial_horizon_factor.  The steps are reported
 * (ZO_TM_FLAG_TRIAL) and counted. */
int zo_lr_trial_fits(const trainer_t *tr)
{
    const zo_train_config_t *cfg = tr->cfg;
    const uint64_t steps = (uint64_t)cfg->lr_trial_steps * (uint64_t)(ZO_LR_TRIAL_MAX_MOVES + 2u);
    const uint64_t per_step = (uint64_t)cfg->batch * ((tr->m->split > 0 ? 1u : 0u) + 2u);
    if (cfg->budget != 0u) {
        return steps * per_step * ZO_LR_TRIAL_SHARE <= cfg->budget;
    }
    return cfg->max_steps == 0u || steps * ZO_LR_TRIAL_SHARE <= (uint64_t)cfg->max_steps;
}

/* One candidate from the snapshot: its steps, then its validation loss (+inf when the guard tripped). */
static float lr_trial_candidate(trainer_t *tr, uint32_t *t, uint32_t t0, float lr1)
{
    const zo_train_config_t *cfg = tr->cfg;
    zo_snapshot_copy(tr->m, 1);
    tr->sat_run = 0u;
    tr->zero_run = 0u;
    const float lr = zo_lr_at_q(lr1, 1u, cfg->lr_scaling);
    for (uint32_t i = 0; i < cfg->lr_trial_steps; ++i) {
        const step_stats_t st = zo_run_step(tr, t0 + i, 1u, 0);
        uint16_t c16[1];
        zo_update_all(tr, t0 + i, 1u, lr, c16);
        zo_tm_updates_step(*t, ZO_TM_UPDATE_TRIAL, 0u, NULL);
        const int diverged = zo_guard_tripped(tr, &st);
        zo_tm_step_t rec = { *t, 1u, (uint8_t)zo_sched_state(&tr->sched),
                             (uint8_t)(ZO_TM_FLAG_TRIAL | (diverged ? ZO_TM_FLAG_DIVERGED : 0u)),
                             lr, st.loss, st.m2, st.v, st.zero_frac, st.sat_frac,
                             tr->prefix_passes, tr->suffix_passes, zo_now_us(tr) };
        zo_tm_step(&rec);
        ++*t;
        if (diverged) {
            return INFINITY;
        }
    }
    return zo_evaluate_split(tr, tr->m->x_val, tr->m->y_val, tr->m->t_val, tr->m->n_val).loss;
}

/* lr1 * 2^j, exact (no libm call on the device) */
static float times_pow2(float lr1, int32_t j)
{
    for (int32_t k = 0; k < (j > 0 ? j : -j); ++k) {
        lr1 = lr1 * (j > 0 ? 2.0f : 0.5f);
    }
    return lr1;
}

/* sqrt(lr_trial_horizon * P / H), when below 1 (and lr_trial_horizon > 0): P the passes of one candidate, H the run's
 * (its budget, else its steps at q = 1); 1 for a run without either.  Past a horizon of a few
 * hundred thousand passes the best constant rate keeps falling (as 1 / sqrt(horizon) once the
 * noise dominates), and nothing else lowers the trial's rate (docs/training.md "lr trial"). */
static float lr_trial_horizon_factor(const trainer_t *tr)
{
    const zo_train_config_t *cfg = tr->cfg;
    const float per_step = (float)cfg->batch * (float)((tr->m->split > 0 ? 1u : 0u) + 2u);
    const float candidate = (float)cfg->lr_trial_steps * per_step;
    const float horizon = cfg->budget != 0u ? (float)cfg->budget : (float)cfg->max_steps * per_step;
    if (cfg->lr_trial_horizon == 0u) {
        return 1.0f;
    }
    const float ratio = horizon > 0.0f ? (float)cfg->lr_trial_horizon * candidate / horizon : 1.0f;
    return ratio < 1.0f ? sqrtf(ratio) : 1.0f;
}

void zo_lr_trial(trainer_t *tr, uint32_t *t)
{
    const uint32_t t0 = *t;
    const float base = tr->lr1;
    const uint8_t state = (uint8_t)zo_sched_state(&tr->sched);
    int32_t best_j = 0;
    float best = lr_trial_candidate(tr, t, t0, base);
    zo_send_event(tr, t0, ZO_TM_EV_LR, ZO_TM_LR_TRIAL, state, state, 1u, 1u, best, 0u);
    for (int32_t dir = 1; dir >= -1; dir -= 2) {
        for (int32_t j = dir; j * dir <= (int32_t)ZO_LR_TRIAL_MAX_MOVES; j += dir) {
            const float lr1 = times_pow2(base, j);
            const float loss = lr_trial_candidate(tr, t, t0, lr1);
            zo_send_event(tr, t0, ZO_TM_EV_LR, ZO_TM_LR_TRIAL, state, state, 1u, 1u, loss, (uint32_t)j);
            if (!(loss < best)) {
                break;
            }
            best = loss;
            best_j = j;
        }
        if (best_j != 0) {
            break; /* going up helped: no need to look down */
        }
    }
    zo_snapshot_copy(tr->m, 1);
    zo_tm_updates_mark(ZO_TM_UPDATE_RESTORE);
    tr->sat_run = 0u;
    tr->zero_run = 0u;
    /* the short-horizon best is too greedy, and more so before a long run */
    tr->lr1 = times_pow2(base, best_j - ZO_LR_TRIAL_BACKOFF) * lr_trial_horizon_factor(tr);
    zo_send_event(tr, *t - 1u, ZO_TM_EV_LR, ZO_TM_LR_CHOSEN, state, state, 1u, 1u, tr->lr1, *t - t0);
}
/* --- end lr trial */
