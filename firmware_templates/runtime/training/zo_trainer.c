/* zo_trainer.c - the zeroth-order training loop: begin, step, end, the evaluation, the guards and
 * the host's commands.  Its checkpoints are in zo_checkpoint.c, its learning rate in zo_lr.c.
 * Rules: docs/training.md. */
#include "zo_trainer.h"

#include <math.h>
#include <string.h>

#include "zo_command.h"
#include "zo_port.h"
#include "zo_telemetry.h"
#include "zo_trainer_internal.h"

#define MAX_COMMANDS_PER_STEP 8u /* a flood of commands cannot stall training */

static run_t g_run; /* one run at a time (the firmware's, or the library's: zo_app.h) */

uint64_t zo_now_us(const trainer_t *tr)
{
    return zo_port_time_us() - tr->t0;
}

/* ---- perturbation of every trainable tensor along direction (t, i) ---------------------- */

static void perturb_all(const trainer_t *tr, int32_t sign, uint32_t t, uint32_t i)
{
    const zo_train_model_t *m = tr->m;
    sign *= (int32_t)tr->cfg->eps;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        zo_dir_t d = { tr->seed, t, i, tt->stream, tr->cfg->density_log2 };
        if (tt->value_bytes == 8u) {
            zo_perturb_s64((int64_t *)tt->values, tt->count, sign, tt->eps_b, &d);
        } else if (tt->value_bytes == 4u) {
            zo_perturb_s32((int32_t *)tt->values, tt->count, sign, tt->eps_b, &d);
        } else {
            zo_perturb_s8((int8_t *)tt->values, tt->count, sign, &d);
        }
    }
}

/* ---- forward passes ----------------------------------------------------------------------- */

/* The boundary activations (the arena spans the suffix reads) to / from boundary_bytes at p. */
static void boundary_to(const zo_train_model_t *m, int8_t *dst)
{
    for (int32_t k = 0; k < m->n_boundary; ++k) {
        memcpy(dst, m->boundary[k].data, (size_t)m->boundary[k].bytes);
        dst += m->boundary[k].bytes;
    }
}

static void boundary_from(const zo_train_model_t *m, const int8_t *src)
{
    for (int32_t k = 0; k < m->n_boundary; ++k) {
        memcpy(m->boundary[k].data, src, (size_t)m->boundary[k].bytes);
        src += m->boundary[k].bytes;
    }
}

static void save_boundary(const zo_train_model_t *m, uint32_t j)
{
    boundary_to(m, m->feature_cache + (size_t)j * (size_t)m->boundary_bytes);
}

static void load_boundary(const zo_train_model_t *m, uint32_t j)
{
    boundary_from(m, m->feature_cache + (size_t)j * (size_t)m->boundary_bytes);
}

/* The frozen prefix on the sample whose input is at x: its boundary activations end in the
 * arena.  For embedded samples (constant) the port may remember them (zo_port.h, prefix memo:
 * the host simulation does); the results are the same, and so are the passes counted. */
static void run_prefix(const zo_train_model_t *m, const int8_t *x)
{
    const int memo = m->stream == NULL && m->split > 0 && m->boundary_bytes > 0 && !m->prefix_state;
    const int8_t *known = memo ? zo_port_prefix_memo_find(x, (uint32_t)m->boundary_bytes) : NULL;
    if (known != NULL) {
        boundary_from(m, known);
        return;
    }
    memcpy(m->input, x, (size_t)m->input_bytes);
    m->run_steps(0, m->split);
    int8_t *slot = memo ? zo_port_prefix_memo_add(x, (uint32_t)m->boundary_bytes) : NULL;
    if (slot != NULL) {
        boundary_to(m, slot);
    }
}

/* Saturated outputs (the output type's extremes: -128 or 127 for int8).  softmax-ce counts every one; sigmoid-bce and mse only those
 * saturated away from their target (a confident right answer, or a target beyond the output's
 * range, is no collapse). */
static uint32_t count_saturated(const zo_train_model_t *m, uint32_t label, const float *target)
{
    const int32_t SAT_LO = zo_logit_min(m), SAT_HI = zo_logit_max(m);
    uint32_t n = 0;
    for (int32_t k = 0; k < m->classes; ++k) {
        const int32_t v = zo_logit(m, k);
        if (v != SAT_LO && v != SAT_HI) {
            continue;
        }
        if (m->loss == ZO_LOSS_SOFTMAX_CE) {
            ++n;
        } else if (m->loss == ZO_LOSS_SIGMOID_BCE) {
            n += ((v == SAT_HI) == (label == 0u)) ? 1u : 0u;
        } else {
            const float x = m->logits_scale * (float)(v - m->logits_zp);
            n += ((v == SAT_HI) ? (target[k] < x) : (target[k] > x)) ? 1u : 0u;
        }
    }
    return n;
}

/* 1 when every output is saturated towards its target (sigmoid-bce, mse): the output is pinned
 * where the target lies beyond its range, so a zero loss difference there is no dead zone. */
static uint8_t is_settled(const zo_train_model_t *m, uint32_t label, const float *target)
{
    if (m->loss == ZO_LOSS_SOFTMAX_CE) {
        return 0u;
    }
    const int32_t SAT_LO = zo_logit_min(m), SAT_HI = zo_logit_max(m);
    for (int32_t k = 0; k < m->classes; ++k) {
        const int32_t v = zo_logit(m, k);
        int towards;
        if (m->loss == ZO_LOSS_SIGMOID_BCE) {
            towards = (v == SAT_HI && label != 0u) || (v == SAT_LO && label == 0u);
        } else {
            const float x = m->logits_scale * (float)(v - m->logits_zp);
            towards = (v == SAT_HI && target[k] >= x) || (v == SAT_LO && target[k] <= x);
        }
        if (!towards) {
            return 0u;
        }
    }
    return 1u;
}

/* The loss of the output now in the arena. */
static float sample_loss(const zo_train_model_t *m, uint32_t label, const float *target)
{
    if (m->loss == ZO_LOSS_SIGMOID_BCE) {
        return zo_sigmoid_bce(zo_logit(m, 0), m->logits_scale, m->logits_zp, (int32_t)label);
    }
    if (m->logits_bytes == 2u) {
        return m->loss == ZO_LOSS_MSE
                   ? zo_mse_s16((const int16_t *)m->logits, m->classes, m->logits_scale, m->logits_zp, target)
                   : zo_cross_entropy_s16((const int16_t *)m->logits, m->classes, m->logits_scale, m->logits_zp,
                                          (int32_t)label);
    }
    if (m->loss == ZO_LOSS_MSE) {
        return zo_mse_s8((const int8_t *)m->logits, m->classes, m->logits_scale, m->logits_zp, target);
    }
    return zo_cross_entropy_s8((const int8_t *)m->logits, m->classes, m->logits_scale, m->logits_zp, (int32_t)label);
}

/* The mse target of sample idx of a split: its target row, or its own input dequantized. */
static void load_target(const zo_train_model_t *m, const float *t, const int8_t *x, uint32_t idx, float *out)
{
    if (t != NULL) {
        memcpy(out, t + (size_t)idx * (size_t)m->classes, (size_t)m->classes * sizeof(float));
        return;
    }
    const int8_t *in = x + (size_t)idx * (size_t)m->input_bytes;
    for (int32_t k = 0; k < m->classes; ++k) {
        out[k] = m->target_scale * (float)((int32_t)in[k] - m->target_zp);
    }
}

static const float *batch_target(const zo_train_model_t *m, uint32_t j)
{
    return m->loss == ZO_LOSS_MSE ? m->targets + (size_t)j * (size_t)m->classes : NULL;
}

/* The suffix on every cached sample of the minibatch: per-sample losses into out[] and, when
 * settled is not NULL, which samples are settled (is_settled). */
static uint32_t suffix_losses(trainer_t *tr, float *out, uint8_t *settled)
{
    const zo_train_model_t *m = tr->m;
    uint32_t saturated = 0;
    for (uint32_t j = 0; j < tr->cfg->batch; ++j) {
        load_boundary(m, j);
        m->run_steps(m->split, m->logits_end);
        out[j] = sample_loss(m, m->labels[j], batch_target(m, j));
        saturated += count_saturated(m, m->labels[j], batch_target(m, j));
        if (settled != NULL) {
            settled[j] = is_settled(m, m->labels[j], batch_target(m, j));
        }
    }
    tr->suffix_passes += tr->cfg->batch;
    return saturated;
}

static void load_minibatch(trainer_t *tr, uint32_t t)
{
    const zo_train_model_t *m = tr->m;
    for (uint32_t j = 0; j < tr->cfg->batch; ++j) {
        uint32_t idx = zo_sample_index(tr->seed, t, j, m->n_train);
        if (m->loss == ZO_LOSS_MSE) {
            m->labels[j] = 0u;
            load_target(m, m->t_train, m->x_train, idx, m->targets + (size_t)j * (size_t)m->classes);
        } else {
            m->labels[j] = m->y_train[idx];
        }
        run_prefix(m, m->x_train + (size_t)idx * (size_t)m->input_bytes);
        save_boundary(m, j);
    }
    if (m->split > 0) {
        tr->prefix_passes += tr->cfg->batch;
    }
}

/* ---- snapshot / rollback of the trainable bytes ------------------------------------------ */

void zo_snapshot_copy(const zo_train_model_t *m, int restore)
{
    uint8_t *s = m->snapshot;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        size_t bytes = zo_trainable_bytes(tt);
        if (restore) {
            memcpy(tt->values, s, bytes);
        } else {
            memcpy(s, tt->values, bytes);
        }
        s += bytes;
        if (tt->residual != NULL) {
            if (restore) {
                memcpy(tt->residual, s, (size_t)tt->count);
            } else {
                memcpy(s, tt->residual, (size_t)tt->count);
            }
            s += tt->count;
        }
    }
}

/* Back to the last good snapshot with half the learning rate. */
static void rollback(trainer_t *tr)
{
    zo_snapshot_copy(tr->m, 1);
    zo_tm_updates_mark(ZO_TM_UPDATE_RESTORE);
    tr->lr1 = tr->lr1 * 0.5f;
    tr->sat_run = 0;
    tr->zero_run = 0;
}

/* ---- telemetry helpers -------------------------------------------------------------------- */

void zo_send_event(const trainer_t *tr, uint32_t step, uint8_t kind, uint8_t code, uint8_t from,
                   uint8_t to, uint32_t q_from, uint32_t q_to, float value, uint32_t aux)
{
    zo_tm_event_t ev = { step, kind, code, from, to, (uint16_t)q_from, (uint16_t)q_to, value, aux };
    (void)tr;
    zo_tm_event(&ev);
}

/* ---- evaluation on the validation and the test split -------------------------------------- */

/* One split in sample order: correct answers, mean loss, saturated logits.  Correct: the argmax
 * is the label (softmax-ce), sigmoid(x) > 0.5 iff the label is 1 (sigmoid-bce); mse has no
 * accuracy (correct 0). */
split_eval_t zo_evaluate_split(trainer_t *tr, const int8_t *x, const uint16_t *y, const float *t,
                               uint32_t n_samples)
{
    const zo_train_model_t *m = tr->m;
    float loss_sum = 0.0f, sq_sum = 0.0f;
    split_eval_t r = { 0u, 0u, 0.0f, 0.0f };
    const float *target = batch_target(m, 0); /* the minibatch's row 0 is reloaded at the next step */
    for (uint32_t n = 0; n < n_samples; ++n) {
        run_prefix(m, x + (size_t)n * (size_t)m->input_bytes);
        m->run_steps(m->split, m->logits_end);
        const uint32_t label = m->loss == ZO_LOSS_MSE ? 0u : y[n];
        if (m->loss == ZO_LOSS_MSE) {
            load_target(m, t, x, n, m->targets);
        } else if (m->loss == ZO_LOSS_SIGMOID_BCE) {
            r.correct += ((zo_logit(m, 0) > m->logits_zp) == (label != 0u)) ? 1u : 0u;
        } else {
            r.correct += (zo_logits_argmax(m) == (int32_t)label) ? 1u : 0u;
        }
        const float loss = sample_loss(m, label, target);
        loss_sum += loss;
        sq_sum += loss * loss;
        r.saturated += count_saturated(m, label, target);
    }
    r.loss = loss_sum / (float)n_samples;
    const float var = sq_sum / (float)n_samples - r.loss * r.loss;
    r.se = var > 0.0f ? sqrtf(var / (float)n_samples) : 0.0f;
    tr->eval_passes += n_samples;
    return r;
}

/* Evaluates the validation split, then the test split, and reports both; returns the validation
 * split's result (the only one the guards and the snapshots look at). */
split_eval_t zo_evaluate(trainer_t *tr, uint32_t steps_done)
{
    const zo_train_model_t *m = tr->m;
    const split_eval_t val = zo_evaluate_split(tr, m->x_val, m->y_val, m->t_val, m->n_val);
    const split_eval_t test = zo_evaluate_split(tr, m->x_test, m->y_test, m->t_test, m->n_test);
    zo_tm_eval_t e = { steps_done, test.correct, m->n_test, (float)test.correct / (float)m->n_test, test.loss,
                       tr->prefix_passes, tr->suffix_passes, tr->eval_passes, zo_now_us(tr),
                       val.correct, m->n_val, (float)val.correct / (float)m->n_val, val.loss };
    zo_tm_eval(&e);
    return val;
}

/* ---- one step ------------------------------------------------------------------------------ */

step_stats_t zo_run_step(trainer_t *tr, uint32_t t, uint32_t q, int centre)
{
    const zo_train_model_t *m = tr->m;
    const uint32_t b = tr->cfg->batch;
    step_stats_t st = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, centre };
    const float half_per_eps = 0.5f / (float)tr->cfg->eps; /* differences per unit (1 LSB) perturbation */
    float loss_sum = 0.0f, m2_sum = 0.0f, v_sum = 0.0f, k_sum = 0.0f;
    uint32_t zeros = 0, saturated = 0;

    load_minibatch(tr, t);
    if (centre) {
        saturated += suffix_losses(tr, m->l0, NULL);
    }
    for (uint32_t i = 0; i < q; ++i) {
        perturb_all(tr, +1, t, i);
        saturated += suffix_losses(tr, m->lp, m->settled);
        perturb_all(tr, -2, t, i);
        saturated += suffix_losses(tr, m->lm, NULL);
        perturb_all(tr, +1, t, i);

        float dsum = 0.0f;
        for (uint32_t j = 0; j < b; ++j) {
            dsum += (m->lp[j] - m->lm[j]) * half_per_eps;
        }
        float delta = dsum / (float)b;
        float ssum = 0.0f;
        for (uint32_t j = 0; j < b; ++j) {
            float e = (m->lp[j] - m->lm[j]) * half_per_eps - delta;
            ssum += e * e;
        }
        float vi = (b > 1u) ? (ssum / (float)(b - 1u)) / (float)b : 0.0f;
        for (uint32_t j = 0; j < b; ++j) {
            zeros += (m->lp[j] == m->lm[j] && !m->settled[j]) ? 1u : 0u;
            loss_sum += m->lp[j];
            loss_sum += m->lm[j];
            if (centre) {
                k_sum += (m->lp[j] + m->lm[j]) - (2.0f * m->l0[j]);
            }
        }
        m->delta[i] = delta;
        m2_sum += delta * delta;
        v_sum += vi;
    }
    st.m2 = m2_sum / (float)q;
    st.v = v_sum / (float)q;
    st.loss = loss_sum / (float)(2u * q * b);
    st.zero_frac = (float)zeros / (float)(q * b);
    uint32_t passes = (2u * q + (centre ? 1u : 0u)) * b;
    st.sat_frac = (float)saturated / ((float)passes * (float)m->classes);
    st.kappa = centre ? k_sum / (float)(q * b) : 0.0f;
    return st;
}

void zo_update_all(const trainer_t *tr, uint32_t t, uint32_t q, float lr, uint16_t *c16)
{
    const zo_train_model_t *m = tr->m;
    for (uint32_t i = 0; i < q; ++i) {
        /* the coefficient applied is the binary16 one the update log carries (zoflash replay) */
        c16[i] = zo_f16_from_f32((lr * m->delta[i]) / (float)q);
        m->c[i] = zo_f32_from_f16(c16[i]);
    }
    zo_apply_update(tr, t, q);
}

void zo_apply_update(const trainer_t *tr, uint32_t t, uint32_t q)
{
    const zo_train_model_t *m = tr->m;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        zo_dir_t d = { tr->seed, t, 0, tt->stream, tr->cfg->density_log2 };
        if (tt->value_bytes == 8u) {
            zo_update_s64((int64_t *)tt->values, tt->count, m->c, (int32_t)q, tt->eps_b, tt->max_step, &d);
        } else if (tt->value_bytes == 4u) {
            zo_update_s32((int32_t *)tt->values, tt->count, m->c, (int32_t)q, tt->eps_b, tt->max_step, &d);
        } else {
            zo_update_s8((int8_t *)tt->values, tt->residual, tt->count, m->c, (int32_t)q, &d, tr->cfg->rounding,
                         INT8_MAX - (int32_t)tr->cfg->eps);
        }
    }
}

/* The saturation and dead-zone runs after a step; 1 when either reached guard_steps. */
int zo_guard_tripped(trainer_t *tr, const step_stats_t *st)
{
    const zo_train_config_t *cfg = tr->cfg;
    tr->sat_run = (st->sat_frac >= cfg->guard_sat) ? tr->sat_run + 1u : 0u;
    tr->zero_run = (st->zero_frac >= cfg->guard_zero) ? tr->zero_run + 1u : 0u;
    return tr->sat_run >= cfg->guard_steps || tr->zero_run >= cfg->guard_steps;
}

/* ---- the run -------------------------------------------------------------------------------- */

void zo_hello_fill(const zo_train_model_t *m, const zo_train_config_t *cfg, zo_tm_hello_t *out)
{
    zo_tm_hello_t h;
    memset(&h, 0, sizeof h);
    h.seed = cfg->seed;
    h.batch = (uint16_t)cfg->batch;
    h.classes = (uint16_t)m->classes;
    h.n_train = m->n_train;
    h.n_test = m->n_test;
    h.trainable_params = m->trainable_params;
    h.scheduler = (uint8_t)cfg->sched.kind;
    h.rounding = (uint8_t)cfg->rounding;
    h.density_log2 = (uint8_t)cfg->density_log2;
    h.lr_auto = (uint8_t)(cfg->lr_auto ? 1 : 0);
    h.lr = cfg->lr_auto ? 0.0f : cfg->lr;
    h.max_steps = cfg->max_steps;
    h.budget = cfg->budget;
    h.q_max = (uint16_t)cfg->sched.q_max;
    h.n_tensors = (uint16_t)m->n_tensors;
    memcpy(h.model_sha256, m->model_sha256, sizeof h.model_sha256);
    h.loss_kind = (uint8_t)m->loss;
    h.headroom = m->headroom_bits;
    *out = h;
}

static void send_hello(const trainer_t *tr)
{
    zo_tm_hello_t h;
    zo_hello_fill(tr->m, tr->cfg, &h);
    zo_tm_hello(&h);
}

/* --- boundary checksum: the prefix on the first test sample (a known input in every
 * data source), its boundary's CRC-32 in one frame; not a training pass (no pass is counted).  On
 * an NPU build the NPU computes it; the host simulation computes it with zoflash's C prefix. */
static void send_boundary_check(const zo_train_model_t *m)
{
    if (m->split <= 0) {
        return; /* the first layer trains: no prefix */
    }
    memcpy(m->input, m->x_test, (size_t)m->input_bytes);
    m->run_steps(0, m->split);
    uint32_t crc = 0u;
    for (int32_t k = 0; k < m->n_boundary; ++k) {
        crc = zo_tm_crc32(crc, (const uint8_t *)m->boundary[k].data, (uint32_t)m->boundary[k].bytes);
    }
    zo_tm_boundary_t b = { crc, m->boundary_crc_expected, (uint32_t)m->boundary_bytes, m->boundary_flags };
    zo_tm_boundary(&b);
}
/* --- end boundary checksum */

/* Every trainable tensor's values and residuals, then its best values (the snapshot, laid out
 * as snapshot_copy writes it). */
static void dump_weights(const zo_train_model_t *m)
{
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        uint32_t bytes = zo_trainable_bytes(tt);
        zo_tm_weights(tt->tensor_index, ZO_TM_PART_VALUES, tt->values, bytes);
        if (tt->residual != NULL) {
            zo_tm_weights(tt->tensor_index, ZO_TM_PART_RESIDUAL, tt->residual, (uint32_t)tt->count);
        }
    }
    const uint8_t *s = m->snapshot;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        uint32_t bytes = zo_trainable_bytes(tt);
        zo_tm_weights(tt->tensor_index, ZO_TM_PART_BEST_VALUES, s, bytes);
        s += bytes + (tt->residual != NULL ? (uint32_t)tt->count : 0u);
    }
}

/* ---- commands from the host (zo_command.h, docs/training.md "Commands") ------------------ */

static void send_status(const trainer_t *tr, uint32_t t, uint32_t calib, int paused)
{
    const zo_train_config_t *cfg = tr->cfg;
    const int calibrating = t < calib;
    const uint32_t q = calibrating ? cfg->calib_q : zo_sched_q(&tr->sched);
    zo_tm_status_t s;
    memset(&s, 0, sizeof s);
    s.step = t;
    s.q = (uint16_t)q;
    s.state = (uint8_t)zo_sched_state(&tr->sched);
    s.paused = (uint8_t)(paused ? 1 : 0);
    s.calibrating = (uint8_t)(calibrating ? 1 : 0);
    s.lr = zo_lr_of_step(tr, t, q, calibrating);
    s.prefix_passes = tr->prefix_passes;
    s.suffix_passes = tr->suffix_passes;
    s.eval_passes = tr->eval_passes;
    s.time_us = zo_now_us(tr);
    memcpy(s.model_sha256, tr->m->model_sha256, sizeof s.model_sha256);
    s.headroom = tr->m->headroom_bits;
    zo_tm_status(&s);
}

/* Serve the commands that arrived, between steps (t = steps done); each gets an ack.  While
 * paused nothing else runs until resume or stop.  Reads nothing and sends nothing when no
 * command came, so a run without commands is unchanged.  Returns 1 when the run must stop, 2 when
 * a restore completed. */
static int serve_commands(trainer_t *tr, uint32_t t, uint32_t calib, int held)
{
    int paused = held; /* a fleet device between rounds: serve commands until the next round */
    uint32_t served = 0;
    while (paused || tr->ck_restoring || served < MAX_COMMANDS_PER_STEP) {
        zo_cmd_t c;
        if (!zo_cmd_poll(&c)) {
            if (!paused && !tr->ck_restoring) {
                return 0;
            }
            continue;
        }
        if (c.type < ZO_CMD_FIRST) {
            continue; /* a telemetry frame echoed back (a loopback), not a command */
        }
        ++served;
        uint8_t result = ZO_TM_ACK_OK;
        int stop = 0;
        switch (c.type) {
        case ZO_CMD_PAUSE:
            result = paused ? ZO_TM_ACK_IGNORED : ZO_TM_ACK_OK;
            paused = 1;
            break;
        case ZO_CMD_RESUME:
            result = paused ? ZO_TM_ACK_OK : ZO_TM_ACK_IGNORED;
            paused = 0;
            break;
        case ZO_CMD_STATUS:
            send_status(tr, t, calib, paused);
            break;
        case ZO_CMD_DUMP:
            dump_weights(tr->m);
            break;
        case ZO_CMD_STOP:
            stop = 1;
            break;
        case ZO_CMD_SAMPLE: /* answered by the next need frame, not by an ack */
            if (tr->m->stream != NULL) {
                zo_stream_accept(tr->m->stream, &c);
                continue;
            }
            result = ZO_TM_ACK_UNKNOWN;
            break;
        case ZO_CMD_RESTORE:
            result = zo_ckpt_restore_chunk(tr, &c);
            break;
        case ZO_CMD_PUSH: /* another run's updates (zo_push.c); g_run holds tr */
            result = zo_push_chunk(&g_run, &c, paused);
            break;
        case ZO_CMD_ROUND: /* fleet learning (zo_fleet.c): train a round's steps */
            result = zo_fleet_round(&g_run, &c);
            paused = g_run.held;
            break;
        case ZO_CMD_MERGE:
            result = zo_fleet_merge(&g_run, &c);
            break;
        default:
            result = ZO_TM_ACK_UNKNOWN;
            break;
        }
        zo_tm_ack_t ack = { t, c.seq, c.type, result };
        zo_tm_ack(&ack);
        if (stop) {
            return 1;
        }
        if (tr->ck_restored) {
            return 2; /* the loop continues from the checkpoint's state */
        }
    }
    return 0;
}

/* --data-source stream: wait (serving commands) until the ring holds the samples step t trains
 * on (zo_stream.h).  Returns serve_commands' 1 (stop) or 2 (restored) when that came meanwhile. */
static int wait_for_samples(trainer_t *tr, uint32_t t, uint32_t calib)
{
    zo_stream_t *s = tr->m->stream;
    const uint32_t want = zo_stream_target(s, t);
    while (zo_stream_ask(s, want, zo_port_time_us())) {
        const int served = serve_commands(tr, t, calib, 0);
        if (served != 0) {
            return served;
        }
        if (zo_stream_late(s, zo_port_time_us())) {
            zo_port_idle();
        }
    }
    return 0;
}

static const char *check_config(const zo_train_model_t *m, const zo_train_config_t *cfg)
{
    if (cfg->batch < 1u || m->n_train < 1u || m->n_val < 1u || m->n_test < 1u) {
        return "batch and the three data splits must be non-empty";
    }
    if (cfg->calib_q > m->q_buffer || cfg->sched.q_max > m->q_buffer) {
        return "q exceeds the statistics buffers";
    }
    if (cfg->eps < ZO_TRAIN_EPS_MIN || cfg->eps > ZO_TRAIN_EPS_MAX) {
        return "eps must be 1..8 LSB";
    }
    if (m->loss == ZO_LOSS_MSE ? (m->targets == NULL || (m->t_train == NULL && m->input_bytes != m->classes))
                               : (m->loss > ZO_LOSS_MSE || m->y_train == NULL || m->y_val == NULL
                                  || m->y_test == NULL)) {
        return "the loss has no labels or targets";
    }
    if (cfg->max_steps == 0u && cfg->budget == 0u) {
        return "neither a step limit nor a budget";
    }
    return zo_sched_check(&cfg->sched);
}

/* No prefix memo unless the port keeps one (zo_port.h). */
__attribute__((weak)) const int8_t *zo_port_prefix_memo_find(const void *sample, uint32_t bytes)
{
    (void)sample;
    (void)bytes;
    return NULL;
}

__attribute__((weak)) int8_t *zo_port_prefix_memo_add(const void *sample, uint32_t bytes)
{
    (void)sample;
    (void)bytes;
    return NULL;
}

int zo_train_begin(const zo_train_model_t *m, const zo_train_config_t *cfg)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    memset(r, 0, sizeof *r);
    tr->m = m;
    tr->cfg = cfg;
    tr->t0 = zo_port_time_us();
    tr->seed = cfg->seed;
    r->held = cfg->fleet != 0; /* a fleet device waits for its first round */
    const char *problem = check_config(m, cfg);
    if (problem != NULL) {
        zo_tm_log(problem);
        return 1;
    }
    zo_tm_updates_begin((uint8_t)cfg->eps);
    send_hello(tr);
    send_boundary_check(m);
    zo_sched_init(&tr->sched, &cfg->sched);
    tr->lr1 = cfg->lr;
    r->best_loss = zo_evaluate(tr, 0).loss; /* validation loss of the snapshot */
    zo_snapshot_copy(m, 0);
    /* a snapshot is good only with few saturated validation logits (< guard_sat / 2) */
    r->sat_good = (cfg->guard_sat * 0.5f) * (float)m->n_val * (float)m->classes;
    r->calib = cfg->lr_auto ? cfg->calib_steps : 0u;
    r->last_eval = 1;
    r->reason = ZO_DONE_STEPS;
    if (zo_ckpt_load_stored(tr)) {
        zo_ckpt_take_state(r); /* zo_train_steps_done() is the checkpoint's step from here on */
    }
    return 0;
}

/* --- checkpoint and resume: between steps the run's whole state is in g_run and the trainer. */
static void checkpoint_between_steps(run_t *r)
{
    trainer_t *tr = &r->tr;
    const zo_train_config_t *cfg = tr->cfg;
    if (r->served == 0 && cfg->checkpoint_every != 0u && r->t != 0u && r->t % cfg->checkpoint_every == 0u
        && r->t != r->ck_sent) {
        zo_ckpt_send(r);
        r->ck_sent = r->t;
    }
    if (r->served == 2) { /* a checkpoint was restored (stored, or sent down): continue from its state */
        zo_ckpt_take_state(r);
    }
}

uint32_t zo_train_steps_done(void)
{
    return g_run.t;
}

/* --- checkpoint get/put for the library form (zo_app.h) -------------------------------------- */
uint32_t zo_train_checkpoint_bytes(const zo_train_model_t *m)
{
    return zo_ckpt_total(m);
}

void zo_train_checkpoint_get(uint8_t *image)
{
    run_t *r = &g_run;
    if (r->served == 2) { /* a restore command completed in the last step: its state first */
        zo_ckpt_take_state(r);
        r->served = 0;
    }
    zo_ckpt_get(r, image);
}

int zo_train_checkpoint_put(const uint8_t *image, uint32_t n)
{
    run_t *r = &g_run;
    const int problem = zo_ckpt_put(r, image, n);
    if (problem == ZO_CKPT_OK) {
        r->served = 0;
    }
    return problem;
}
/* --- end checkpoint get/put */

int zo_train_step(void)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    const zo_train_model_t *m = tr->m;
    const zo_train_config_t *cfg = tr->cfg;
    checkpoint_between_steps(r);
    const uint32_t t = r->t;
    const uint32_t calib = r->calib;
    r->served = serve_commands(tr, t, calib, r->held);
    if (r->served == 0 && m->stream != NULL) {
        r->served = wait_for_samples(tr, t, calib);
    }
    if (r->served == 2) {
        return 0; /* restored: the next step starts from the checkpoint */
    }
    if (r->served == 1) {
        r->reason = ZO_DONE_COMMAND;
        return 1;
    }
    if (t == calib && cfg->lr_trial_steps != 0u && m->stream == NULL && !cfg->fleet && zo_lr_trial_fits(tr)) {
        zo_lr_trial(tr, &r->t); /* the whole trial in this call; the weights end as they began */
        return 0;
    }
    const int calibrating = t < calib;
    const uint32_t q = calibrating ? cfg->calib_q : zo_sched_q(&tr->sched);
    const int centre = !calibrating && zo_sched_wants_centre(&tr->sched);
    const float lr = zo_lr_of_step(tr, t, q, calibrating);
    const uint8_t state = (uint8_t)zo_sched_state(&tr->sched);
    step_stats_t st = zo_run_step(tr, t, q, centre);
    uint16_t c16[ZO_SCHED_Q_LIMIT];
    if (!calibrating) {
        zo_update_all(tr, t, q, lr, c16);
    }
    zo_tm_updates_step(t, calibrating ? 0u : ZO_TM_UPDATE_APPLIED, q, c16);
    /* guard: a collapsed head (saturated logits, no loss differences) rolls back */
    int diverged = 0;
    if (!calibrating) {
        if (zo_guard_tripped(tr, &st)) {
            diverged = 1;
            rollback(tr);
            ++r->rollbacks;
        }
    }
    zo_tm_step_t rec = { t, (uint16_t)q, state,
                         (uint8_t)((calibrating ? ZO_TM_FLAG_CALIBRATING : 0u) | (centre ? ZO_TM_FLAG_CENTRE : 0u)
                                   | (diverged ? ZO_TM_FLAG_DIVERGED : 0u)),
                         lr, st.loss, st.m2, st.v, st.zero_frac, st.sat_frac,
                         tr->prefix_passes, tr->suffix_passes, zo_now_us(tr) };
    zo_tm_step(&rec);
    zo_sched_event_t ev;
    int sched_ev = 0;
    if (!calibrating) {
        zo_sched_obs_t obs = { t, q, (2u * q + (centre ? 1u : 0u)) * cfg->batch, st.loss, st.m2, st.v,
                               st.has_kappa, st.kappa, diverged, lr };
        sched_ev = zo_sched_observe(&tr->sched, &obs, &ev);
        const uint32_t q_next = zo_sched_q(&tr->sched);
        if (diverged && q_next != q) {
            /* the scheduler answers a rollback with a larger q: the rollback must still halve the lr
             * used at q, not only lr_1 (with linear scaling the doubled q would undo the halving) */
            tr->lr1 = tr->lr1 * (zo_lr_at_q(1.0f, q, cfg->lr_scaling) / zo_lr_at_q(1.0f, q_next, cfg->lr_scaling));
        }
    }
    if (diverged) {
        zo_send_event(tr, t, ZO_TM_EV_ROLLBACK, ZO_TM_ROLLBACK_GUARD, state, state, q, q, tr->lr1, tr->snapshot_step);
    }
    if (calibrating) {
        r->m2_calib += st.m2;
        if (t + 1u == calib) {
            r->m2_calib = r->m2_calib / (float)calib;
            if (!(r->m2_calib > 0.0f)) {
                r->reason = ZO_DONE_DEAD_ZONE;
                r->t = t + 1u;
                r->last_eval = 0;
                return 1;
            }
            float p = 1.0f / (float)(1u << cfg->density_log2);
            tr->lr1 = zo_lr_auto_step_lsb(m, cfg->rho, p) * sqrtf(p / r->m2_calib);
            zo_send_event(tr, t, ZO_TM_EV_LR, ZO_TM_LR_CALIBRATED, state, state, q, q, tr->lr1, calib);
        }
    } else if (sched_ev) {
        zo_send_event(tr, t, ZO_TM_EV_SCHEDULER, ev.code, ev.state_from, ev.state_to, ev.q_from, ev.q_to, 0.0f, 0u);
    }
    const uint32_t done = t + 1u;
    r->t = done;
    r->last_eval = 0;
    if (done % cfg->eval_every == 0u) {
        const split_eval_t val = zo_evaluate(tr, done);
        const float loss = val.loss;
        r->last_eval = 1;
        if (!calibrating && cfg->guard_loss > 0.0f && loss > r->best_loss * cfg->guard_loss + cfg->guard_loss_z * val.se) {
            /* the validation loss ran away from the best so far, beyond its noise: back to the best state */
            rollback(tr);
            ++r->rollbacks;
            r->last_eval = 0; /* the weights changed: a run ending here evaluates them again */
            zo_send_event(tr, done - 1u, ZO_TM_EV_ROLLBACK, ZO_TM_ROLLBACK_LOSS, state, state, q, q, tr->lr1,
                       tr->snapshot_step);
        } else if (!cfg->fleet && loss < r->best_loss && tr->sat_run == 0u && tr->zero_run == 0u && (float)val.saturated < r->sat_good) {
            /* the last good state: the lowest validation loss so far, no guard run active */
            r->best_loss = loss;
            zo_snapshot_copy(m, 0);
            zo_tm_updates_mark(ZO_TM_UPDATE_SNAPSHOT);
            tr->snapshot_step = done;
        }
    }
    const int rolled_out = cfg->guard_max_rollbacks != 0u && r->rollbacks >= cfg->guard_max_rollbacks;
    if (cfg->fleet && (done >= r->round_end || rolled_out)) {
        /* the round is over (a fleet device's run goes on: it holds until the next round) */
        zo_tm_updates_flush();
        zo_send_event(tr, t, ZO_TM_EV_ROUND, rolled_out ? ZO_TM_ROUND_ROLLBACKS : ZO_TM_ROUND_STEPS, state, state, q, q,
                      tr->lr1, done - r->round_first);
        r->held = 1;
        return 0;
    }
    if (rolled_out) {
        r->reason = ZO_DONE_GUARD;
        return 1;
    }
    if (cfg->fleet) {
        return 0; /* a fleet device trains the steps its rounds give it, until the host stops it */
    }
    if (cfg->max_steps != 0u && done >= cfg->max_steps) {
        r->reason = ZO_DONE_STEPS;
        return 1;
    }
    if (cfg->budget != 0u && tr->prefix_passes + tr->suffix_passes >= cfg->budget) {
        r->reason = ZO_DONE_BUDGET;
        return 1;
    }
    if (!calibrating && zo_sched_should_stop(&tr->sched)) {
        r->reason = ZO_DONE_SCHEDULER;
        return 1;
    }
    return 0;
}

/* Whether the run ends on its best weights: its validation loss is above the best's beyond the
 * noise (guard_loss_z standard errors), so the late steps damaged what the best snapshot holds. */
static int ends_worse_than_best(run_t *r)
{
    trainer_t *tr = &r->tr;
    const zo_train_model_t *m = tr->m;
    const zo_train_config_t *cfg = tr->cfg;
    if (cfg->fleet || cfg->guard_loss <= 0.0f) {
        return 0;
    }
    const split_eval_t val = zo_evaluate_split(tr, m->x_val, m->y_val, m->t_val, m->n_val);
    return val.loss > r->best_loss + cfg->guard_loss_z * val.se;
}

int zo_train_end(void)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    /* the restore must be in the update log, which marks it on the last step it holds */
    const int restored = ends_worse_than_best(r) && zo_tm_updates_mark(ZO_TM_UPDATE_RESTORE);
    if (restored) {
        zo_snapshot_copy(tr->m, 1);
        const uint32_t q = zo_sched_q(&tr->sched);
        const uint8_t state = (uint8_t)zo_sched_state(&tr->sched);
        zo_send_event(tr, r->t == 0u ? 0u : r->t - 1u, ZO_TM_EV_ROLLBACK, ZO_TM_ROLLBACK_END, state, state, q, q,
                      tr->lr1, tr->snapshot_step);
    }
    zo_tm_updates_flush();
    if (!r->last_eval || restored) {
        (void)zo_evaluate(tr, r->t);
    }
    dump_weights(tr->m);
    zo_send_crc(tr, r->t);
    zo_tm_done_t done = { r->t, (uint8_t)r->reason, tr->prefix_passes, tr->suffix_passes, zo_now_us(tr) };
    zo_tm_done(&done);
    return (int)r->reason;
}

int zo_train_run(const zo_train_model_t *m, const zo_train_config_t *cfg)
{
    if (zo_train_begin(m, cfg)) {
        return 1;
    }
    while (!zo_train_step()) {
    }
    (void)zo_train_end();
    return 0;
}
