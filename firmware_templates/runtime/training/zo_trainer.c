/* zo_trainer.c - the zeroth-order training loop.  Rules: docs/training.md. */
#include "zo_trainer.h"

#include <math.h>
#include <string.h>

#include "zo_command.h"
#include "zo_port.h"
#include "zo_telemetry.h"

#define SAT_LO (-128)
#define SAT_HI 127
#define MAX_COMMANDS_PER_STEP 8u /* a flood of commands cannot stall training */
#define CKPT_HEAD_BYTES (ZO_CKPT_HEADER_BYTES + (uint32_t)sizeof(zo_ckpt_state_t)) /* header + state */

typedef struct {
    const zo_train_model_t *m;
    const zo_train_config_t *cfg;
    zo_sched_t sched;
    float lr1;
    uint64_t prefix_passes, suffix_passes, eval_passes;
    uint32_t sat_run, zero_run;
    uint32_t snapshot_step;
    uint64_t t0;
    /* --- checkpoint and resume: the image's header and state, built to send or
     * received from a restore; the restore in progress */
    uint8_t ck_head[CKPT_HEAD_BYTES];
    uint32_t ck_next;       /* restore: bytes received so far */
    uint32_t ck_last;       /* restore: offset of the last chunk taken (a repeat is harmless) */
    int ck_restoring;       /* a restore's header was accepted and its body is arriving */
    int ck_restored;        /* a restore completed: the loop takes its state (ck_head) */
} trainer_t;

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
static float lr_of_step(const trainer_t *tr, uint32_t t, uint32_t q, int calibrating)
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

static uint64_t now_us(const trainer_t *tr)
{
    return zo_port_time_us() - tr->t0;
}

/* ---- auto lr step size ------------------------------------------------------------------- */

/* LSB RMS per step of the first updates (over the directions' nonzero entries, density p): rho,
 * at most max(1, w_rms / ZO_LR_W_RMS_DIV / sqrt(p)) where w_rms is the RMS of the trainable int8
 * weights, so that a few hundred mostly-noise steps do not move a pretrained layer by more than
 * its own size (docs/training.md "Learning rate"). */
static float auto_step_lsb(const zo_train_model_t *m, float rho, float p)
{
    uint64_t sq = 0u, n = 0u;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        if (tt->eps_b == NULL) {
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

/* ---- perturbation of every trainable tensor along direction (t, i) ---------------------- */

static void perturb_all(const trainer_t *tr, int32_t sign, uint32_t t, uint32_t i)
{
    const zo_train_model_t *m = tr->m;
    sign *= (int32_t)tr->cfg->eps;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        zo_dir_t d = { tr->cfg->seed, t, i, tt->stream, tr->cfg->density_log2 };
        if (tt->eps_b != NULL) {
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
    const int memo = m->stream == NULL && m->split > 0 && m->boundary_bytes > 0;
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

/* Saturated outputs (-128 or 127).  softmax-ce counts every one; sigmoid-bce and mse only those
 * saturated away from their target (a confident right answer, or a target beyond the output's
 * range, is no collapse). */
static uint32_t count_saturated(const zo_train_model_t *m, uint32_t label, const float *target)
{
    uint32_t n = 0;
    for (int32_t k = 0; k < m->classes; ++k) {
        const int32_t v = m->logits[k];
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
    for (int32_t k = 0; k < m->classes; ++k) {
        const int32_t v = m->logits[k];
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
        return zo_sigmoid_bce_s8(m->logits[0], m->logits_scale, m->logits_zp, (int32_t)label);
    }
    if (m->loss == ZO_LOSS_MSE) {
        return zo_mse_s8(m->logits, m->classes, m->logits_scale, m->logits_zp, target);
    }
    return zo_cross_entropy_s8(m->logits, m->classes, m->logits_scale, m->logits_zp, (int32_t)label);
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
        uint32_t idx = zo_sample_index(tr->cfg->seed, t, j, m->n_train);
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

static void snapshot_copy(const zo_train_model_t *m, int restore)
{
    uint8_t *s = m->snapshot;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        size_t bytes = (size_t)tt->count * (tt->eps_b != NULL ? sizeof(int32_t) : sizeof(int8_t));
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
    snapshot_copy(tr->m, 1);
    tr->lr1 = tr->lr1 * 0.5f;
    tr->sat_run = 0;
    tr->zero_run = 0;
}

/* ---- telemetry helpers -------------------------------------------------------------------- */

static void send_event(const trainer_t *tr, uint32_t step, uint8_t kind, uint8_t code, uint8_t from,
                       uint8_t to, uint32_t q_from, uint32_t q_to, float value, uint32_t aux)
{
    zo_tm_event_t ev = { step, kind, code, from, to, (uint16_t)q_from, (uint16_t)q_to, value, aux };
    (void)tr;
    zo_tm_event(&ev);
}

/* ---- evaluation on the validation and the test split -------------------------------------- */

typedef struct {
    uint32_t correct, saturated;
    float loss, se; /* the mean loss and its standard error */
} split_eval_t;

/* One split in sample order: correct answers, mean loss, saturated logits.  Correct: the argmax
 * is the label (softmax-ce), sigmoid(x) > 0.5 iff the label is 1 (sigmoid-bce); mse has no
 * accuracy (correct 0). */
static split_eval_t evaluate_split(trainer_t *tr, const int8_t *x, const uint16_t *y, const float *t,
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
            r.correct += (((int32_t)m->logits[0] > m->logits_zp) == (label != 0u)) ? 1u : 0u;
        } else {
            r.correct += (zo_argmax_s8(m->logits, m->classes) == (int32_t)label) ? 1u : 0u;
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
static split_eval_t evaluate(trainer_t *tr, uint32_t steps_done)
{
    const zo_train_model_t *m = tr->m;
    const split_eval_t val = evaluate_split(tr, m->x_val, m->y_val, m->t_val, m->n_val);
    const split_eval_t test = evaluate_split(tr, m->x_test, m->y_test, m->t_test, m->n_test);
    zo_tm_eval_t e = { steps_done, test.correct, m->n_test, (float)test.correct / (float)m->n_test, test.loss,
                       tr->prefix_passes, tr->suffix_passes, tr->eval_passes, now_us(tr),
                       val.correct, m->n_val, (float)val.correct / (float)m->n_val, val.loss };
    zo_tm_eval(&e);
    return val;
}

/* ---- one step ------------------------------------------------------------------------------ */

typedef struct {
    float loss, m2, v, zero_frac, sat_frac, kappa;
    int has_kappa;
} step_stats_t;

static step_stats_t run_step(trainer_t *tr, uint32_t t, uint32_t q, int centre)
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

static void update_all(const trainer_t *tr, uint32_t t, uint32_t q, float lr)
{
    const zo_train_model_t *m = tr->m;
    for (uint32_t i = 0; i < q; ++i) {
        m->c[i] = (lr * m->delta[i]) / (float)q;
    }
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        zo_dir_t d = { tr->cfg->seed, t, 0, tt->stream, tr->cfg->density_log2 };
        if (tt->eps_b != NULL) {
            zo_update_s32((int32_t *)tt->values, tt->count, m->c, (int32_t)q, tt->eps_b, tt->max_step, &d);
        } else {
            zo_update_s8((int8_t *)tt->values, tt->residual, tt->count, m->c, (int32_t)q, &d, tr->cfg->rounding,
                         INT8_MAX - (int32_t)tr->cfg->eps);
        }
    }
}

/* The saturation and dead-zone runs after a step; 1 when either reached guard_steps. */
static int guard_tripped(trainer_t *tr, const step_stats_t *st)
{
    const zo_train_config_t *cfg = tr->cfg;
    tr->sat_run = (st->sat_frac >= cfg->guard_sat) ? tr->sat_run + 1u : 0u;
    tr->zero_run = (st->zero_frac >= cfg->guard_zero) ? tr->zero_run + 1u : 0u;
    return tr->sat_run >= cfg->guard_steps || tr->zero_run >= cfg->guard_steps;
}

/* ---- the run -------------------------------------------------------------------------------- */

static void send_hello(const trainer_t *tr)
{
    const zo_train_model_t *m = tr->m;
    const zo_train_config_t *cfg = tr->cfg;
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
        uint32_t bytes = (uint32_t)tt->count * (uint32_t)(tt->eps_b != NULL ? sizeof(int32_t) : sizeof(int8_t));
        zo_tm_weights(tt->tensor_index, ZO_TM_PART_VALUES, tt->values, bytes);
        if (tt->residual != NULL) {
            zo_tm_weights(tt->tensor_index, ZO_TM_PART_RESIDUAL, tt->residual, (uint32_t)tt->count);
        }
    }
    const uint8_t *s = m->snapshot;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        uint32_t bytes = (uint32_t)tt->count * (uint32_t)(tt->eps_b != NULL ? sizeof(int32_t) : sizeof(int8_t));
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
    s.lr = lr_of_step(tr, t, q, calibrating);
    s.prefix_passes = tr->prefix_passes;
    s.suffix_passes = tr->suffix_passes;
    s.eval_passes = tr->eval_passes;
    s.time_us = now_us(tr);
    memcpy(s.model_sha256, tr->m->model_sha256, sizeof s.model_sha256);
    s.headroom = tr->m->headroom_bits;
    zo_tm_status(&s);
}

/* Serve the commands that arrived, between steps (t = steps done); each gets an ack.  While
 * paused nothing else runs until resume or stop.  Reads nothing and sends nothing when no
 * command came, so a run without commands is unchanged.  Returns 1 when the run must stop. */
static uint8_t restore_chunk(trainer_t *tr, const zo_cmd_t *c);

static int serve_commands(trainer_t *tr, uint32_t t, uint32_t calib)
{
    int paused = 0;
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
            result = restore_chunk(tr, &c);
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
        const int served = serve_commands(tr, t, calib);
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

/* ---- checkpoint and resume (docs/training.md "Checkpoint and resume") ------------------------- */

static uint32_t trainable_bytes(const zo_train_model_t *m)
{
    uint32_t n = 0u;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        n += (uint32_t)tt->count * (uint32_t)(tt->eps_b != NULL ? sizeof(int32_t) : sizeof(int8_t));
        n += tt->residual != NULL ? (uint32_t)tt->count : 0u;
    }
    return n;
}

static uint32_t ckpt_total(const zo_train_model_t *m)
{
    return CKPT_HEAD_BYTES + 2u * trainable_bytes(m);
}

/* Where byte `offset` of the image lives (header and state, a tensor's values or residuals, the
 * snapshot), and how many bytes follow it there; NULL past the end. */
static uint8_t *ckpt_at(trainer_t *tr, uint32_t offset, uint32_t *avail)
{
    const zo_train_model_t *m = tr->m;
    if (offset < CKPT_HEAD_BYTES) {
        *avail = CKPT_HEAD_BYTES - offset;
        return tr->ck_head + offset;
    }
    offset -= CKPT_HEAD_BYTES;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        uint32_t bytes = (uint32_t)tt->count * (uint32_t)(tt->eps_b != NULL ? sizeof(int32_t) : sizeof(int8_t));
        if (offset < bytes) {
            *avail = bytes - offset;
            return (uint8_t *)tt->values + offset;
        }
        offset -= bytes;
        if (tt->residual != NULL) {
            if (offset < (uint32_t)tt->count) {
                *avail = (uint32_t)tt->count - offset;
                return (uint8_t *)tt->residual + offset;
            }
            offset -= (uint32_t)tt->count;
        }
    }
    if (offset < trainable_bytes(m)) {
        *avail = trainable_bytes(m) - offset;
        return m->snapshot + offset;
    }
    *avail = 0u;
    return NULL;
}

/* n bytes of the image at `offset` to dst. */
static void ckpt_read(trainer_t *tr, uint32_t offset, uint8_t *dst, uint32_t n)
{
    while (n > 0u) {
        uint32_t avail;
        const uint8_t *p = ckpt_at(tr, offset, &avail);
        uint32_t k = n < avail ? n : avail;
        memcpy(dst, p, k);
        offset += k;
        dst += k;
        n -= k;
    }
}

/* n bytes from src into the image at `offset` (the caller keeps offset + n within it). */
static void ckpt_write(trainer_t *tr, uint32_t offset, const uint8_t *src, uint32_t n)
{
    while (n > 0u) {
        uint32_t avail;
        uint8_t *p = ckpt_at(tr, offset, &avail);
        uint32_t k = n < avail ? n : avail;
        memcpy(p, src, k);
        offset += k;
        src += k;
        n -= k;
    }
}

static uint32_t ckpt_body_crc(trainer_t *tr)
{
    uint32_t crc = 0u, offset = ZO_CKPT_HEADER_BYTES;
    const uint32_t total = ckpt_total(tr->m);
    while (offset < total) {
        uint32_t avail;
        const uint8_t *p = ckpt_at(tr, offset, &avail);
        crc = zo_tm_crc32(crc, p, avail);
        offset += avail;
    }
    return crc;
}

static void put_le(uint8_t *p, uint32_t v, uint32_t bytes)
{
    for (uint32_t k = 0; k < bytes; ++k) {
        p[k] = (uint8_t)(v >> (8u * k));
    }
}

static uint32_t get_le(const uint8_t *p, uint32_t bytes)
{
    uint32_t v = 0u;
    for (uint32_t k = 0; k < bytes; ++k) {
        v |= (uint32_t)p[k] << (8u * k);
    }
    return v;
}

/* The image's header and state into tr->ck_head (the tensors and the snapshot are read in place);
 * returns the image's size. */
static uint32_t ckpt_build_head(trainer_t *tr, uint32_t t, int last_eval, float best_loss, uint32_t rollbacks,
                                float m2_calib)
{
    const zo_train_model_t *m = tr->m;
    zo_ckpt_state_t s;
    memset(&s, 0, sizeof s); /* padding too: the same state gives the same bytes */
    s.sched = tr->sched;
    s.lr1 = tr->lr1;
    s.best_loss = best_loss;
    s.m2_calib = m2_calib;
    s.step = t;
    s.last_eval = (uint32_t)last_eval;
    s.sat_run = tr->sat_run;
    s.zero_run = tr->zero_run;
    s.snapshot_step = tr->snapshot_step;
    s.rollbacks = rollbacks;
    s.prefix_passes = tr->prefix_passes;
    s.suffix_passes = tr->suffix_passes;
    s.eval_passes = tr->eval_passes;
    uint8_t *h = tr->ck_head;
    const uint32_t total = ckpt_total(m);
    memcpy(h + ZO_CKPT_HEADER_BYTES, &s, sizeof s);
    memcpy(h, ZO_CKPT_MAGIC, 4u);
    put_le(h + 4, ZO_CKPT_VERSION, 2u);
    put_le(h + 6, (uint32_t)sizeof s, 2u);
    memcpy(h + 8, m->model_sha256, 8u);
    memcpy(h + 16, m->options_sha256, 8u);
    put_le(h + 24, t, 4u);
    put_le(h + 28, total - ZO_CKPT_HEADER_BYTES, 4u);
    put_le(h + 32, ckpt_body_crc(tr), 4u);
    return total;
}

static void send_checkpoint(trainer_t *tr, uint32_t t, int last_eval, float best_loss, uint32_t rollbacks,
                            float m2_calib)
{
    const uint32_t total = ckpt_build_head(tr, t, last_eval, best_loss, rollbacks, m2_calib);
    uint8_t chunk[ZO_TM_WEIGHTS_CHUNK];
    for (uint32_t offset = 0u; offset < total;) {
        uint32_t n = total - offset < ZO_TM_WEIGHTS_CHUNK ? total - offset : ZO_TM_WEIGHTS_CHUNK;
        ckpt_read(tr, offset, chunk, n);
        zo_tm_checkpoint(t, offset, total, chunk, n);
        zo_port_checkpoint_save(offset, chunk, n, total);
        offset += n;
    }
}

/* ZO_CKPT_OK if the header at h is this build's, else a ZO_CKPT_* code and *why. */
static int ckpt_header_problem(const trainer_t *tr, const uint8_t *h, uint32_t total, const char **why)
{
    const zo_train_model_t *m = tr->m;
    if (memcmp(h, ZO_CKPT_MAGIC, 4u) != 0 || get_le(h + 4, 2u) != ZO_CKPT_VERSION
        || get_le(h + 6, 2u) != (uint32_t)sizeof(zo_ckpt_state_t)) {
        *why = "checkpoint refused: not a checkpoint of this firmware's format";
        return ZO_CKPT_BAD;
    }
    if (memcmp(h + 8, m->model_sha256, 8u) != 0) {
        *why = "checkpoint refused: it was taken by a run of another model";
        return ZO_CKPT_OTHER_MODEL;
    }
    if (memcmp(h + 16, m->options_sha256, 8u) != 0) {
        *why = "checkpoint refused: it was taken by a build with other training options or data";
        return ZO_CKPT_OTHER_BUILD;
    }
    if (total != ckpt_total(m) || get_le(h + 28, 4u) != total - ZO_CKPT_HEADER_BYTES) {
        *why = "checkpoint refused: its size does not match this build";
        return ZO_CKPT_BAD;
    }
    return ZO_CKPT_OK;
}

/* NULL if the header at h is this build's, else why not. */
static const char *ckpt_check_header(const trainer_t *tr, const uint8_t *h, uint32_t total)
{
    const char *why = NULL;
    (void)ckpt_header_problem(tr, h, total, &why);
    return why;
}

/* A body that fails its CRC after it overwrote the trainable state: nothing to go on with. */
static _Noreturn void ckpt_broken(const char *why)
{
    zo_tm_log(why);
    zo_port_exit(3);
}

/* One restore chunk (u32 offset, u32 total, data): the header is checked before anything is
 * written; the chunks must come in order (a repeat of the last one is ignored); the last one
 * checks the body's CRC and hands the state to the loop. */
static uint8_t restore_chunk(trainer_t *tr, const zo_cmd_t *c)
{
    if (c->len < 8u) {
        zo_tm_log("restore refused: a chunk needs offset and total");
        return ZO_TM_ACK_REFUSED;
    }
    const uint32_t offset = get_le(c->payload, 4u), total = get_le(c->payload + 4, 4u);
    const uint32_t n = (uint32_t)c->len - 8u;
    if (tr->ck_restoring && offset == tr->ck_last && offset + n == tr->ck_next) {
        return ZO_TM_ACK_IGNORED; /* the host sent the last chunk again (its ack was lost) */
    }
    if (offset == 0u) {
        const char *why = n < ZO_CKPT_HEADER_BYTES ? "checkpoint refused: the first chunk must hold the header"
                                                   : ckpt_check_header(tr, c->payload + 8, total);
        if (why != NULL) {
            zo_tm_log(why);
            if (tr->ck_restoring) {
                ckpt_broken("restore broken off after part of it was written: reset the device");
            }
            return ZO_TM_ACK_REFUSED;
        }
        tr->ck_restoring = 1;
        tr->ck_next = 0u;
    } else if (!tr->ck_restoring || offset != tr->ck_next || total != ckpt_total(tr->m)) {
        if (tr->ck_restoring) {
            ckpt_broken("restore broken off (a chunk out of order) after part of it was written: reset the device");
        }
        zo_tm_log("restore refused: no restore in progress (send the checkpoint from offset 0)");
        return ZO_TM_ACK_REFUSED;
    }
    if (n > total - offset) {
        ckpt_broken("restore broken off (a chunk past the end) after part of it was written: reset the device");
    }
    ckpt_write(tr, offset, c->payload + 8, n);
    tr->ck_last = offset;
    tr->ck_next = offset + n;
    if (tr->ck_next == total) {
        tr->ck_restoring = 0;
        if (ckpt_body_crc(tr) != get_le(tr->ck_head + 32, 4u)) {
            ckpt_broken("checkpoint refused: its CRC does not match after it was written: reset the device");
        }
        tr->ck_restored = 1;
    }
    return ZO_TM_ACK_OK;
}

/* A checkpoint the port kept (zo_port_checkpoint_load), restored chunk by chunk like a restore
 * command; 1 when the loop starts from it.  A stored image of another build is reported and
 * left alone. */
static int load_stored_checkpoint(trainer_t *tr)
{
    const uint32_t total = ckpt_total(tr->m);
    zo_cmd_t c;
    c.type = ZO_CMD_RESTORE;
    c.seq = 0u;
    uint8_t head[ZO_CKPT_HEADER_BYTES];
    if (zo_port_checkpoint_load(0u, head, ZO_CKPT_HEADER_BYTES) != ZO_CKPT_HEADER_BYTES) {
        return 0;
    }
    const char *why = ckpt_check_header(tr, head, total);
    if (why != NULL) {
        zo_tm_log(why); /* the stored image is left alone; the run starts afresh */
        return 0;
    }
    for (uint32_t offset = 0u; offset < total;) {
        uint32_t n = total - offset < ZO_CMD_MAX_PAYLOAD - 8u ? total - offset : ZO_CMD_MAX_PAYLOAD - 8u;
        if (zo_port_checkpoint_load(offset, c.payload + 8, n) != n) {
            ckpt_broken("the stored checkpoint ends early after part of it was written: reset the device");
        }
        put_le(c.payload, offset, 4u);
        put_le(c.payload + 4, total, 4u);
        c.len = (uint16_t)(n + 8u);
        (void)restore_chunk(tr, &c);
        offset += n;
    }
    zo_tm_log("resumed from the stored checkpoint");
    return 1;
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

__attribute__((weak)) void zo_port_checkpoint_save(uint32_t offset, const uint8_t *data, uint32_t n, uint32_t total)
{
    (void)offset;
    (void)data;
    (void)n;
    (void)total;
}

__attribute__((weak)) uint32_t zo_port_checkpoint_load(uint32_t offset, uint8_t *data, uint32_t n)
{
    (void)offset;
    (void)data;
    (void)n;
    return 0u;
}

/* The run between steps: the trainer and the loop's own state (zo_train_begin/step/end). */
typedef struct {
    trainer_t tr;
    float best_loss;
    float sat_good;    /* a snapshot is good only with few saturated validation logits (< guard_sat / 2) */
    uint32_t rollbacks;
    uint32_t calib;
    float m2_calib;
    uint32_t t;
    int last_eval;
    zo_done_reason_t reason;
    uint32_t ck_sent; /* the step of the last checkpoint sent or restored */
    int served;       /* the last serve_commands result: 2 after a restore */
} run_t;

static run_t g_run; /* one run at a time (the firmware's, or the library's: zo_app.h) */

/* The loop's state from a restored image's (tr->ck_head; the tensors are already in place). */
static void take_restored_state(run_t *r)
{
    trainer_t *tr = &r->tr;
    zo_ckpt_state_t s;
    memcpy(&s, tr->ck_head + ZO_CKPT_HEADER_BYTES, sizeof s);
    tr->sched = s.sched;
    tr->lr1 = s.lr1;
    tr->sat_run = s.sat_run;
    tr->zero_run = s.zero_run;
    tr->snapshot_step = s.snapshot_step;
    tr->prefix_passes = s.prefix_passes;
    tr->suffix_passes = s.suffix_passes;
    tr->eval_passes = s.eval_passes;
    r->t = s.step;
    r->last_eval = (int)s.last_eval;
    r->best_loss = s.best_loss;
    r->rollbacks = s.rollbacks;
    r->m2_calib = s.m2_calib;
    r->ck_sent = r->t;
    tr->ck_restored = 0;
}

int zo_train_begin(const zo_train_model_t *m, const zo_train_config_t *cfg)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    memset(r, 0, sizeof *r);
    tr->m = m;
    tr->cfg = cfg;
    tr->t0 = zo_port_time_us();
    const char *problem = check_config(m, cfg);
    if (problem != NULL) {
        zo_tm_log(problem);
        return 1;
    }
    send_hello(tr);
    send_boundary_check(m);
    zo_sched_init(&tr->sched, &cfg->sched);
    tr->lr1 = cfg->lr;
    r->best_loss = evaluate(tr, 0).loss; /* validation loss of the snapshot */
    snapshot_copy(m, 0);
    /* a snapshot is good only with few saturated validation logits (< guard_sat / 2) */
    r->sat_good = (cfg->guard_sat * 0.5f) * (float)m->n_val * (float)m->classes;
    r->calib = cfg->lr_auto ? cfg->calib_steps : 0u;
    r->last_eval = 1;
    r->reason = ZO_DONE_STEPS;
    if (load_stored_checkpoint(tr)) {
        take_restored_state(r); /* zo_train_steps_done() is the checkpoint's step from here on */
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
        send_checkpoint(tr, r->t, r->last_eval, r->best_loss, r->rollbacks, r->m2_calib);
        r->ck_sent = r->t;
    }
    if (r->served == 2) { /* a checkpoint was restored (stored, or sent down): continue from its state */
        take_restored_state(r);
    }
}

uint32_t zo_train_steps_done(void)
{
    return g_run.t;
}

/* --- checkpoint get/put for the library form (zo_app.h) -------------------------------------- */
uint32_t zo_train_checkpoint_bytes(const zo_train_model_t *m)
{
    return ckpt_total(m);
}

void zo_train_checkpoint_get(uint8_t *image)
{
    run_t *r = &g_run;
    if (r->served == 2) { /* a restore command completed in the last step: its state first */
        take_restored_state(r);
        r->served = 0;
    }
    const uint32_t total = ckpt_build_head(&r->tr, r->t, r->last_eval, r->best_loss, r->rollbacks, r->m2_calib);
    ckpt_read(&r->tr, 0u, image, total);
}

int zo_train_checkpoint_put(const uint8_t *image, uint32_t n)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    const char *why = "checkpoint refused: it is shorter than a checkpoint header";
    int problem = n < ZO_CKPT_HEADER_BYTES ? ZO_CKPT_BAD : ckpt_header_problem(tr, image, n, &why);
    if (problem == ZO_CKPT_OK
        && zo_tm_crc32(0u, image + ZO_CKPT_HEADER_BYTES, n - ZO_CKPT_HEADER_BYTES) != get_le(image + 32, 4u)) {
        why = "checkpoint refused: its CRC does not match (a damaged copy)";
        problem = ZO_CKPT_BAD;
    }
    if (problem != ZO_CKPT_OK) {
        zo_tm_log(why);
        return problem;
    }
    ckpt_write(tr, 0u, image, n);
    take_restored_state(r);
    r->served = 0;
    return ZO_CKPT_OK;
}
/* --- end checkpoint get/put */

/* --- lr trial (docs/training.md "lr trial") ---------------------------------------------------
 * Before training, candidates lr_1 * 2^j each train lr_trial_steps steps at q = 1 from the same
 * weights, on the same minibatches and directions (the seeds of steps t0 .. t0 + T - 1: the
 * comparison is paired), and are judged by the validation loss after them.  j walks from 0 up
 * while the loss improves, else down, at most ZO_LR_TRIAL_MAX_MOVES either way.  The weights
 * are then put back (the snapshot still holds them: nothing has moved before) and training
 * starts at the best candidate's lr_1 / 2^ZO_LR_TRIAL_BACKOFF: the best rate over T steps from
 * the start is larger than the best over the whole run (short-horizon bias).  A run longer than
 * ZO_LR_TRIAL_HORIZON candidates also gets lr_trial_horizon_factor.  The steps are reported
 * (ZO_TM_FLAG_TRIAL) and counted. */
static int lr_trial_fits(const trainer_t *tr)
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
    snapshot_copy(tr->m, 1);
    tr->sat_run = 0u;
    tr->zero_run = 0u;
    const float lr = zo_lr_at_q(lr1, 1u, cfg->lr_scaling);
    for (uint32_t i = 0; i < cfg->lr_trial_steps; ++i) {
        const step_stats_t st = run_step(tr, t0 + i, 1u, 0);
        update_all(tr, t0 + i, 1u, lr);
        const int diverged = guard_tripped(tr, &st);
        zo_tm_step_t rec = { *t, 1u, (uint8_t)zo_sched_state(&tr->sched),
                             (uint8_t)(ZO_TM_FLAG_TRIAL | (diverged ? ZO_TM_FLAG_DIVERGED : 0u)),
                             lr, st.loss, st.m2, st.v, st.zero_frac, st.sat_frac,
                             tr->prefix_passes, tr->suffix_passes, now_us(tr) };
        zo_tm_step(&rec);
        ++*t;
        if (diverged) {
            return INFINITY;
        }
    }
    return evaluate_split(tr, tr->m->x_val, tr->m->y_val, tr->m->t_val, tr->m->n_val).loss;
}

/* lr1 * 2^j, exact (no libm call on the device) */
static float times_pow2(float lr1, int32_t j)
{
    for (int32_t k = 0; k < (j > 0 ? j : -j); ++k) {
        lr1 = lr1 * (j > 0 ? 2.0f : 0.5f);
    }
    return lr1;
}

/* sqrt(ZO_LR_TRIAL_HORIZON * P / H), when below 1: P the passes of one candidate, H the run's
 * (its budget, else its steps at q = 1); 1 for a run without either.  Past a horizon of a few
 * hundred thousand passes the best constant rate keeps falling (as 1 / sqrt(horizon) once the
 * noise dominates), and nothing else lowers the trial's rate (docs/training.md "lr trial"). */
static float lr_trial_horizon_factor(const trainer_t *tr)
{
    const zo_train_config_t *cfg = tr->cfg;
    const float per_step = (float)cfg->batch * (float)((tr->m->split > 0 ? 1u : 0u) + 2u);
    const float candidate = (float)cfg->lr_trial_steps * per_step;
    const float horizon = cfg->budget != 0u ? (float)cfg->budget : (float)cfg->max_steps * per_step;
    const float ratio = horizon > 0.0f ? (float)ZO_LR_TRIAL_HORIZON * candidate / horizon : 1.0f;
    return ratio < 1.0f ? sqrtf(ratio) : 1.0f;
}

static void lr_trial(trainer_t *tr, uint32_t *t)
{
    const uint32_t t0 = *t;
    const float base = tr->lr1;
    const uint8_t state = (uint8_t)zo_sched_state(&tr->sched);
    int32_t best_j = 0;
    float best = lr_trial_candidate(tr, t, t0, base);
    send_event(tr, t0, ZO_TM_EV_LR, ZO_TM_LR_TRIAL, state, state, 1u, 1u, best, 0u);
    for (int32_t dir = 1; dir >= -1; dir -= 2) {
        for (int32_t j = dir; j * dir <= (int32_t)ZO_LR_TRIAL_MAX_MOVES; j += dir) {
            const float lr1 = times_pow2(base, j);
            const float loss = lr_trial_candidate(tr, t, t0, lr1);
            send_event(tr, t0, ZO_TM_EV_LR, ZO_TM_LR_TRIAL, state, state, 1u, 1u, loss, (uint32_t)j);
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
    snapshot_copy(tr->m, 1);
    tr->sat_run = 0u;
    tr->zero_run = 0u;
    /* the short-horizon best is too greedy, and more so before a long run */
    tr->lr1 = times_pow2(base, best_j - ZO_LR_TRIAL_BACKOFF) * lr_trial_horizon_factor(tr);
    send_event(tr, *t - 1u, ZO_TM_EV_LR, ZO_TM_LR_CHOSEN, state, state, 1u, 1u, tr->lr1, *t - t0);
}
/* --- end lr trial */

int zo_train_step(void)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    const zo_train_model_t *m = tr->m;
    const zo_train_config_t *cfg = tr->cfg;
    checkpoint_between_steps(r);
    const uint32_t t = r->t;
    const uint32_t calib = r->calib;
    r->served = serve_commands(tr, t, calib);
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
    if (t == calib && cfg->lr_trial_steps != 0u && m->stream == NULL && lr_trial_fits(tr)) {
        lr_trial(tr, &r->t); /* the whole trial in this call; the weights end as they began */
        return 0;
    }
    const int calibrating = t < calib;
    const uint32_t q = calibrating ? cfg->calib_q : zo_sched_q(&tr->sched);
    const int centre = !calibrating && zo_sched_wants_centre(&tr->sched);
    const float lr = lr_of_step(tr, t, q, calibrating);
    const uint8_t state = (uint8_t)zo_sched_state(&tr->sched);
    step_stats_t st = run_step(tr, t, q, centre);
    if (!calibrating) {
        update_all(tr, t, q, lr);
    }
    /* guard: a collapsed head (saturated logits, no loss differences) rolls back */
    int diverged = 0;
    if (!calibrating) {
        if (guard_tripped(tr, &st)) {
            diverged = 1;
            rollback(tr);
            ++r->rollbacks;
        }
    }
    zo_tm_step_t rec = { t, (uint16_t)q, state,
                         (uint8_t)((calibrating ? ZO_TM_FLAG_CALIBRATING : 0u) | (centre ? ZO_TM_FLAG_CENTRE : 0u)
                                   | (diverged ? ZO_TM_FLAG_DIVERGED : 0u)),
                         lr, st.loss, st.m2, st.v, st.zero_frac, st.sat_frac,
                         tr->prefix_passes, tr->suffix_passes, now_us(tr) };
    zo_tm_step(&rec);
    if (diverged) {
        send_event(tr, t, ZO_TM_EV_ROLLBACK, ZO_TM_ROLLBACK_GUARD, state, state, q, q, tr->lr1, tr->snapshot_step);
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
            tr->lr1 = auto_step_lsb(m, cfg->rho, p) * sqrtf(p / r->m2_calib);
            send_event(tr, t, ZO_TM_EV_LR, ZO_TM_LR_CALIBRATED, state, state, q, q, tr->lr1, calib);
        }
    } else {
        zo_sched_obs_t obs = { t, q, (2u * q + (centre ? 1u : 0u)) * cfg->batch, st.loss, st.m2, st.v,
                               st.has_kappa, st.kappa, diverged, lr };
        zo_sched_event_t ev;
        if (zo_sched_observe(&tr->sched, &obs, &ev)) {
            send_event(tr, t, ZO_TM_EV_SCHEDULER, ev.code, ev.state_from, ev.state_to, ev.q_from, ev.q_to, 0.0f, 0u);
        }
    }
    const uint32_t done = t + 1u;
    r->t = done;
    r->last_eval = 0;
    if (done % cfg->eval_every == 0u) {
        const split_eval_t val = evaluate(tr, done);
        const float loss = val.loss;
        r->last_eval = 1;
        if (!calibrating && cfg->guard_loss > 0.0f && loss > r->best_loss * cfg->guard_loss + cfg->guard_loss_z * val.se) {
            /* the validation loss ran away from the best so far, beyond its noise: back to the best state */
            rollback(tr);
            ++r->rollbacks;
            r->last_eval = 0; /* the weights changed: a run ending here evaluates them again */
            send_event(tr, done - 1u, ZO_TM_EV_ROLLBACK, ZO_TM_ROLLBACK_LOSS, state, state, q, q, tr->lr1,
                       tr->snapshot_step);
        } else if (loss < r->best_loss && tr->sat_run == 0u && tr->zero_run == 0u && (float)val.saturated < r->sat_good) {
            /* the last good state: the lowest validation loss so far, no guard run active */
            r->best_loss = loss;
            snapshot_copy(m, 0);
            tr->snapshot_step = done;
        }
    }
    if (cfg->guard_max_rollbacks != 0u && r->rollbacks >= cfg->guard_max_rollbacks) {
        r->reason = ZO_DONE_GUARD;
        return 1;
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

int zo_train_end(void)
{
    run_t *r = &g_run;
    trainer_t *tr = &r->tr;
    if (!r->last_eval) {
        (void)evaluate(tr, r->t);
    }
    dump_weights(tr->m);
    zo_tm_done_t done = { r->t, (uint8_t)r->reason, tr->prefix_passes, tr->suffix_passes, now_us(tr) };
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
