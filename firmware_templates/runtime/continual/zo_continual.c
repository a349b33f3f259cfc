/* zo_continual.c - the continual adaptation controller (zo_continual.h, docs/guides/continual.md).
 * It reuses the training loop's step (zo_run_step, zo_update_all: zo_trainer_internal.h) on its
 * own copy of the model description whose training split is the continual training ring. */
#include "zo_continual.h"

#include <math.h>
#include <string.h>

#include "zo_port.h"
#include "zo_telemetry.h"
#include "zo_trainer_internal.h"

typedef struct {
    trainer_t tr;
    zo_train_model_t m; /* the model with x_train/y_train on the training ring */
    const zo_cl_wiring_t *w;
    const zo_cl_config_t *cc;
    zo_ph_t ph;                        /* the loss detector (labelled samples) */
    zo_ph_t margin;                    /* the output-margin detector (every sample) */
    uint32_t samples, labelled;
    uint32_t train_count, hold_count;  /* samples ever put in each ring */
    uint32_t train_fresh, hold_fresh;  /* ... since the episode began */
    int adapting;
    uint32_t episode, accepted, rejected;
    uint32_t t;                        /* training steps, over all episodes (the RNG counter) */
    uint32_t ep_steps;                 /* steps of this episode (calibration included) */
    uint32_t ep_applied;               /* ... that updated the candidate */
    uint32_t calib_left;               /* auto lr: calibration steps still to run */
    float m2_calib;
    uint64_t ep_train, ep_serve;       /* sample-passes of the episode */
    uint64_t serve_passes;
    int deployed;                      /* the deployed A/B slot */
    uint32_t win_correct, win_count;
    uint64_t shadow_passes;            /* sample-passes of the factory's shadow answers */
    int adapted;                       /* the deployed weights are not the factory's */
    int calibrated;                    /* auto lr: lr1 holds a calibrated rate */
    zo_paired_t fac;                   /* factory vs deployed since the deployed weights changed */
} cl_t;

static cl_t g_cl;
static zo_stream_t g_ram_samples; /* only marks the samples as RAM (see zo_cl_init) */

static void compare_on(cl_t *c, uint8_t *other, const int8_t *x, const uint16_t *y, uint32_t n, zo_paired_t *p);

/* A forward pass of the model: sample-passes it costs (prefix, suffix) as the budget counts them. */
static uint64_t full_pass(const cl_t *c)
{
    return c->m.split > 0 ? 2u : 1u;
}

static uint64_t step_cost(const cl_t *c)
{
    const uint64_t b = c->tr.cfg->batch;
    return b * ((c->m.split > 0 ? 1u : 0u) + 2u * c->cc->q);
}

/* Whether `cost` more training passes keep training's share of the episode at most duty. */
static int affordable(const cl_t *c, uint64_t cost)
{
    const uint64_t train = c->ep_train + cost;
    return train * 65536u <= (uint64_t)c->cc->duty_q16 * (train + c->ep_serve);
}

static void send(const cl_t *c, uint8_t kind, uint32_t better, uint32_t worse, uint32_t correct, uint32_t count,
                 float statistic)
{
    zo_tm_continual_t f;
    memset(&f, 0, sizeof f);
    f.sample = c->samples;
    f.decision = kind;
    f.slot = (uint8_t)c->deployed;
    f.generation = (uint16_t)zo_slots_generation(c->w->ab, c->deployed);
    f.episode = (uint16_t)c->episode;
    f.steps = c->ep_steps;
    f.better = (uint16_t)(better > 0xFFFFu ? 0xFFFFu : better);
    f.worse = (uint16_t)(worse > 0xFFFFu ? 0xFFFFu : worse);
    f.correct = correct;
    f.count = count;
    f.statistic = statistic;
    f.train_passes = c->tr.prefix_passes + c->tr.suffix_passes; /* training steps (serving: serve_passes) */
    f.serve_passes = c->serve_passes;
    zo_tm_continual(&f);
}

/* Swap the trainable tensors (values, residuals) with the bytes at s (the candidate's, the
 * factory's): the training step runs on the candidate, serving on the deployed weights. */
static void swap_with(const cl_t *c, uint8_t *s)
{
    for (int32_t k = 0; k < c->m.n_tensors; ++k) {
        const zo_trainable_t *tt = &c->m.tensors[k];
        const uint32_t parts = tt->residual != NULL ? 2u : 1u;
        for (uint32_t p = 0; p < parts; ++p) {
            uint8_t *v = p == 0u ? (uint8_t *)tt->values : (uint8_t *)tt->residual;
            const size_t bytes = p == 0u ? (size_t)zo_trainable_bytes(tt) : (size_t)tt->count;
            for (size_t i = 0; i < bytes; ++i) {
                const uint8_t tmp = v[i];
                v[i] = s[i];
                s[i] = tmp;
            }
            s += bytes;
        }
    }
}

/* The trainable tensors to / from a buffer in the snapshot layout (zo_snapshot_copy's). */
static void tensors_to(const cl_t *c, uint8_t *dst)
{
    zo_train_model_t m = c->m;
    m.snapshot = dst;
    zo_snapshot_copy(&m, 0);
}

/* The trainable bytes in the snapshot layout: values, then the residuals of int8 weights. */
static uint32_t trainable_bytes(const zo_train_model_t *m)
{
    uint32_t n = 0u;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        n += zo_trainable_bytes(tt) + (tt->residual != NULL ? (uint32_t)tt->count : 0u);
    }
    return n;
}

static void tensors_from(const cl_t *c, const uint8_t *src)
{
    zo_train_model_t m = c->m;
    m.snapshot = (uint8_t *)(uintptr_t)src;
    zo_snapshot_copy(&m, 1);
}

static void send_hello(const cl_t *c)
{
    zo_tm_hello_t h;
    zo_hello_fill(&c->m, c->tr.cfg, &h);
    h.max_steps = c->cc->episode_steps; /* an episode's steps; no budget */
    h.budget = 0u;
    h.q_max = (uint16_t)c->cc->q;
    zo_tm_hello(&h);
}

static const char *check(const zo_train_model_t *m, const zo_train_config_t *cfg, const zo_cl_wiring_t *w,
                         const zo_cl_config_t *cc)
{
    if (m->loss == ZO_LOSS_MSE) {
        return "continual: the mse loss has no per-sample correctness for the paired test (labels needed)";
    }
    if (w->slots == 0u || w->hslots == 0u || cc->holdout_every < 2u) {
        return "continual: the training and held-back rings need slots (holdout_every >= 2)";
    }
    if (cc->q == 0u || cc->q > m->q_buffer || cfg->batch == 0u) {
        return "continual: q must be in 1..q_buffer and the batch >= 1";
    }
    if (cc->duty_q16 == 0u || cc->duty_q16 > 65536u || cc->episode_steps == 0u) {
        return "continual: duty must be in (0, 1] and the episode at least one step";
    }
    if (w->ab->payload_bytes != trainable_bytes(m)) {
        return "continual: the A/B slots do not hold this model's trainable bytes";
    }
    return NULL;
}

int zo_cl_init(const zo_train_model_t *m, const zo_train_config_t *cfg, const zo_cl_wiring_t *w,
               const zo_cl_config_t *cc)
{
    cl_t *c = &g_cl;
    memset(c, 0, sizeof *c);
    c->m = *m;
    c->m.x_train = w->x;
    c->m.y_train = w->y;
    c->m.n_train = w->slots;
    /* the samples are in RAM rings that change: a non-NULL stream turns the port's prefix memo off
     * (it keys embedded samples by their address) */
    c->m.stream = m->stream != NULL ? m->stream : &g_ram_samples;
    c->tr.m = &c->m;
    c->tr.cfg = cfg;
    c->tr.t0 = zo_port_time_us();
    c->w = w;
    c->cc = cc;
    const char *problem = check(m, cfg, w, cc);
    if (problem != NULL) {
        zo_tm_log(problem);
        return 1;
    }
    zo_tm_updates_begin((uint8_t)cfg->eps);
    send_hello(c);
    c->tr.lr1 = cfg->lr;
    /* an erased header in a slot: a promotion was cut short by a reset (zo_slots.h) */
    int interrupted = 0;
    for (int k = 0; k < 2; ++k) {
        if (zo_slots_generation(w->ab, k) == 0u && w->ab->slot[k][0] == 0xFFu && w->ab->slot[k][1] == 0xFFu) {
            interrupted = 1;
        }
    }
    tensors_to(c, w->factory); /* the built-in weights, before a slot replaces them */
    c->deployed = zo_slots_deployed(w->ab);
    if (c->deployed < 0) {
        tensors_to(c, w->candidate); /* the built-in weights become generation 1 */
        c->deployed = zo_slots_promote(w->ab, w->candidate);
        if (c->deployed < 0) {
            zo_tm_log("continual: the A/B slot store refused the built-in weights");
            return 1;
        }
    }
    tensors_from(c, zo_slots_payload(w->ab, c->deployed));
    zo_snapshot_copy(&c->m, 0); /* the snapshot: the deployed weights (sent as the best values) */
    c->adapted = memcmp(zo_slots_payload(w->ab, c->deployed), w->factory, w->ab->payload_bytes) != 0;
    zo_ph_reset(&c->ph);
    zo_ph_reset(&c->margin);
    send(c, interrupted ? ZO_CL_EV_ROLLBACK : ZO_CL_EV_BOOT, 0u, 0u, 0u, 0u, 0.0f);
    return 0;
}

/* The output's margin after a forward pass, in output LSB: the top output over the runner-up
 * (sigmoid: the distance from the decision point).  It needs no label. */
static int32_t margin(const cl_t *c)
{
    if (c->m.loss == ZO_LOSS_SIGMOID_BCE) {
        const int32_t d = zo_logit(&c->m, 0) - c->m.logits_zp;
        return d < 0 ? -d : d;
    }
    int32_t first = INT32_MIN, second = INT32_MIN;
    for (int32_t k = 0; k < c->m.classes; ++k) {
        const int32_t v = zo_logit(&c->m, k);
        if (v > first) {
            second = first;
            first = v;
        } else if (v > second) {
            second = v;
        }
    }
    return c->m.classes > 1 ? first - second : 0;
}

/* The model on one input with the current tensors: 1 if right; *loss its loss. */
static int answer(cl_t *c, const int8_t *x, uint16_t label, float *loss, int32_t *pred)
{
    const split_eval_t r = zo_evaluate_split(&c->tr, x, &label, NULL, 1u);
    if (c->m.loss == ZO_LOSS_SIGMOID_BCE) {
        *pred = zo_logit(&c->m, 0) > c->m.logits_zp ? 1 : 0;
    } else {
        *pred = zo_logits_argmax(&c->m);
    }
    *loss = r.loss;
    return r.correct != 0u;
}

static void start_episode(cl_t *c)
{
    zo_paired_reset(&c->fac); /* conditions changed: the factory's evidence starts again */
    /* auto lr: calibrated again on each episode's data (the first steps measure the gradient) */
    c->calib_left = c->tr.cfg->lr_auto ? c->tr.cfg->calib_steps : 0u;
    c->m2_calib = 0.0f;
    zo_ph_reset(&c->ph);
    zo_ph_reset(&c->margin);
    ++c->episode;
    c->adapting = 1;
    c->ep_steps = 0u;
    c->ep_applied = 0u;
    c->ep_train = 0u;
    c->ep_serve = 0u;
    c->train_fresh = 0u;
    c->hold_fresh = 0u;
    tensors_to(c, c->w->candidate); /* the candidate starts from the deployed weights */
    send(c, ZO_CL_EV_EPISODE, 0u, 0u, 0u, 0u, 0.0f);
}

/* The update log's record of a return to the factory weights (a step with no update, so that
 * `zoflash replay` follows): of the candidate (flags 0) or of the deployed weights (SNAPSHOT). */
static void log_factory(cl_t *c, uint8_t flags)
{
    zo_tm_updates_step(c->t, (uint8_t)(ZO_TM_UPDATE_FACTORY | flags), 0u, NULL);
    ++c->t;
}

/* Before the first step: the candidate starts from the factory weights instead of the deployed ones
 * when they answer the (fresh) training ring better: adapted weights are not always the best start. */
static void choose_start(cl_t *c)
{
    if (memcmp(c->w->candidate, c->w->factory, c->w->ab->payload_bytes) == 0) {
        return;
    }
    const uint64_t before = c->tr.eval_passes;
    zo_paired_t p;
    zo_paired_reset(&p);
    compare_on(c, c->w->factory, c->w->x, c->w->y, c->w->slots, &p);
    if (p.better > p.worse) {
        memcpy(c->w->candidate, c->w->factory, c->w->ab->payload_bytes);
        log_factory(c, 0u);
    }
    c->ep_train += (c->tr.eval_passes - before) * full_pass(c);
}

/* One training step of the candidate (or a calibration step of the auto lr). */
static void train_step(cl_t *c)
{
    trainer_t *tr = &c->tr;
    const zo_train_config_t *cfg = tr->cfg;
    const int calibrating = c->calib_left != 0u;
    const uint32_t q = calibrating ? cfg->calib_q : c->cc->q;
    const uint64_t before = tr->prefix_passes + tr->suffix_passes;
    uint16_t c16[ZO_SCHED_Q_LIMIT];
    swap_with(c, c->w->candidate);
    const step_stats_t st = zo_run_step(tr, c->t, q, 0);
    if (!calibrating) {
        zo_update_all(tr, c->t, q, zo_lr_at_q(tr->lr1, q, cfg->lr_scaling), c16);
    }
    swap_with(c, c->w->candidate);
    zo_tm_updates_step(c->t, calibrating ? 0u : ZO_TM_UPDATE_APPLIED, q, c16);
    c->ep_train += tr->prefix_passes + tr->suffix_passes - before;
    ++c->t;
    ++c->ep_steps;
    c->ep_applied += calibrating ? 0u : 1u;
    if (calibrating) {
        c->m2_calib += st.m2;
        if (--c->calib_left == 0u) {
            const float m2 = c->m2_calib / (float)cfg->calib_steps;
            const float p = 1.0f / (float)(1u << cfg->density_log2);
            /* the smallest rate calibrated so far: an accurate model's tiny gradient would give a rate
             * too large for the next regime (a dead zone, no loss differences: the last rate stays) */
            if (m2 > 0.0f) {
                const float lr1 = zo_lr_auto_step_lsb(&c->m, cfg->rho, p) * sqrtf(p / m2);
                tr->lr1 = c->calibrated && tr->lr1 < lr1 ? tr->lr1 : lr1;
                c->calibrated = 1;
            }
        }
    }
}

/* n samples (x, y) answered by the weights in the tensors and by `other` (candidate or factory
 * bytes): the paired counts added to *p (better: `other` right where the tensors' weights are wrong). */
static void compare_on(cl_t *c, uint8_t *other, const int8_t *x, const uint16_t *y, uint32_t n, zo_paired_t *p)
{
    uint8_t mine[64];
    const size_t in = (size_t)c->m.input_bytes;
    float loss;
    int32_t pred;
    for (uint32_t base = 0; base < n; base += 64u) {
        const uint32_t chunk = n - base < 64u ? n - base : 64u;
        for (uint32_t i = 0; i < chunk; ++i) {
            mine[i] = (uint8_t)answer(c, x + (size_t)(base + i) * in, y[base + i], &loss, &pred);
        }
        swap_with(c, other);
        for (uint32_t i = 0; i < chunk; ++i) {
            const int right = answer(c, x + (size_t)(base + i) * in, y[base + i], &loss, &pred);
            zo_paired_add(p, right, mine[i]);
        }
        swap_with(c, other);
    }
}

/* `other` (the candidate) against the deployed weights on the held-back ring. */
static zo_paired_t compare(cl_t *c, uint8_t *other)
{
    zo_paired_t p;
    zo_paired_reset(&p);
    compare_on(c, other, c->w->hx, c->w->hy, c->w->hslots, &p);
    return p;
}

/* The factory weights against the deployed ones: the shadow passes' counts since the episode
 * began, plus the training ring (fresh since the episode began; neither weights trained
 * on it, and no shadow pass saw it). */
static zo_paired_t factory_evidence(cl_t *c)
{
    compare_on(c, c->w->factory, c->w->x, c->w->y, c->w->slots, &c->fac);
    return c->fac;
}

/* Deploy `payload` through the A/B slots; 0 if the medium failed (the deployed weights stay). */
static int deploy(cl_t *c, const uint8_t *payload)
{
    const int slot = zo_slots_promote(c->w->ab, payload);
    if (slot < 0) {
        zo_tm_log("continual: the A/B slot store failed: the deployed weights stay");
        return 0;
    }
    c->deployed = slot;
    zo_paired_reset(&c->fac); /* new deployed weights: the factory's evidence starts again */
    c->adapted = memcmp(payload, c->w->factory, c->w->ab->payload_bytes) != 0;
    tensors_from(c, zo_slots_payload(c->w->ab, slot));
    zo_snapshot_copy(&c->m, 0);
    return 1;
}

/* The paired tests on the held-back ring.  The candidate, and the factory weights when other
 * weights are deployed, each against the deployed weights: of those significantly better, the one
 * with more correct answers is deployed (a promotion, or a rollback to the factory weights); none:
 * the candidate is discarded and the deployed weights stay. */
static void decide(cl_t *c)
{
    const uint32_t n = c->w->hslots;
    const uint64_t before = c->tr.eval_passes;
    const zo_paired_t p = compare(c, c->w->candidate);
    const int cand_ok = zo_paired_better(&p, c->cc->alpha_log2);
    const int factory_differs = c->adapted;
    zo_paired_t f = { 0u, 0u, 0u };
    int fac_ok = 0;
    if (factory_differs) {
        f = factory_evidence(c);
        fac_ok = zo_paired_better(&f, c->cc->rollback_alpha_log2);
    }
    /* correct answers relative to the deployed weights: better - worse */
    const int fac_first = fac_ok && (!cand_ok || (int64_t)f.better - f.worse > (int64_t)p.better - p.worse);
    if (cand_ok && !fac_first && deploy(c, c->w->candidate)) {
        zo_tm_updates_mark(ZO_TM_UPDATE_SNAPSHOT);
        ++c->accepted;
        send(c, ZO_CL_EV_ACCEPTED, p.better, p.worse, p.ties, n, c->tr.lr1);
    } else {
        zo_tm_updates_mark(ZO_TM_UPDATE_RESTORE);
        ++c->rejected;
        send(c, ZO_CL_EV_REJECTED, p.better, p.worse, p.ties, n, c->tr.lr1);
        if (fac_first && deploy(c, c->w->factory)) {
            log_factory(c, ZO_TM_UPDATE_SNAPSHOT);
            send(c, ZO_CL_EV_ROLLBACK, f.better, f.worse, f.ties, n, 0.0f);
        }
    }
    c->ep_train += (c->tr.eval_passes - before) * full_pass(c);
    c->adapting = 0;
    c->hold_fresh = 0u;
    zo_ph_reset(&c->ph);
    zo_ph_reset(&c->margin);
}

/* A held-back sample while adapted weights are deployed: the factory weights answer it too (a
 * shadow pass), the paired counts add up while the same weights stay deployed, and between episodes
 * a significant lead of the factory weights brings them back.  So a shift the detectors cannot see
 * (the loss and the margin stay level) cannot leave worse-than-factory weights deployed for long.
 * (Testing after every sample makes a rollback easier than its level says: the safe direction,
 * back to the weights the device shipped with.) */
static void shadow(cl_t *c, const int8_t *x, uint16_t label, int deployed_correct)
{
    float loss;
    int32_t pred;
    swap_with(c, c->w->factory);
    const int right = answer(c, x, label, &loss, &pred);
    swap_with(c, c->w->factory);
    c->shadow_passes += full_pass(c);
    zo_paired_add(&c->fac, right, deployed_correct);
    if (!c->adapting && zo_paired_better(&c->fac, c->cc->rollback_alpha_log2)) {
        const zo_paired_t f = c->fac;
        if (deploy(c, c->w->factory)) {
            log_factory(c, ZO_TM_UPDATE_SNAPSHOT);
            send(c, ZO_CL_EV_ROLLBACK, f.better, f.worse, f.ties, f.better + f.worse + f.ties, 0.0f);
            zo_ph_reset(&c->ph);
            zo_ph_reset(&c->margin);
        }
    }
}

/* The episode's work the duty cycle allows after one more served sample. */
static void adapt(cl_t *c)
{
    for (;;) {
        if (c->ep_applied < c->cc->episode_steps) {
            if (c->train_fresh < c->w->slots || !affordable(c, step_cost(c))) {
                return;
            }
            if (c->ep_steps == 0u) {
                choose_start(c);
            }
            train_step(c);
            continue;
        }
        const uint64_t decide_cost = 2u * (uint64_t)c->w->hslots * full_pass(c);
        if (c->hold_fresh < c->w->hslots || !affordable(c, decide_cost)) {
            return;
        }
        decide(c);
        return;
    }
}

/* A detector alarmed (detector 0: the loss, 1: the output margin): an episode starts, or starts
 * again when one was under way (conditions changed under it: its candidate is discarded). */
static void suspect(cl_t *c, uint32_t detector, float statistic)
{
    send(c, ZO_CL_EV_SUSPECTED, 0u, 0u, 0u, detector, statistic);
    if (c->adapting) {
        if (c->ep_steps != 0u) {
            zo_tm_updates_mark(ZO_TM_UPDATE_RESTORE);
        }
        ++c->rejected;
        send(c, ZO_CL_EV_REJECTED, 0u, 0u, 0u, 0u, 0.0f); /* count 0: abandoned, not tested */
    }
    start_episode(c);
}

static void feedback(cl_t *c, const int8_t *x, uint16_t label, int correct, float loss)
{
    const size_t in = (size_t)c->m.input_bytes;
    ++c->labelled;
    if (c->labelled % c->cc->holdout_every == 0u) {
        const uint32_t k = c->hold_count++ % c->w->hslots;
        memcpy(c->w->hx + (size_t)k * in, x, in);
        c->w->hy[k] = label;
        ++c->hold_fresh;
        if (c->adapted) {
            shadow(c, x, label, correct);
        }
    } else {
        const uint32_t k = c->train_count++ % c->w->slots;
        memcpy(c->w->x + (size_t)k * in, x, in);
        c->w->y[k] = label;
        ++c->train_fresh;
    }
    c->win_correct += correct ? 1u : 0u;
    ++c->win_count;
    if (c->cc->window != 0u && c->win_count == c->cc->window) {
        send(c, ZO_CL_EV_WINDOW, 0u, 0u, c->win_correct, c->win_count, 0.0f);
        c->win_correct = 0u;
        c->win_count = 0u;
    }
    if (zo_ph_update(&c->ph, &c->cc->ph, zo_ph_quantize(loss, c->cc->ph.clip)) && c->cc->detector) {
        suspect(c, 0u, (float)zo_ph_statistic(&c->ph) / (float)(1 << ZO_PH_FRAC));
    } else if (c->adapting) {
        adapt(c);
    }
}

int32_t zo_cl_serve(const int8_t *x, uint16_t label)
{
    cl_t *c = &g_cl;
    float loss;
    int32_t pred;
    const int labelled = label != ZO_CL_NO_LABEL && label != ZO_CL_SHIFT;
    const int correct = answer(c, x, labelled ? label : 0u, &loss, &pred);
    ++c->samples;
    c->serve_passes += full_pass(c);
    if (c->adapting) {
        c->ep_serve += full_pass(c);
    }
    if (label == ZO_CL_SHIFT) {
        if (!c->adapting) {
            start_episode(c);
        }
        return pred;
    }
    if (zo_ph_update(&c->margin, &c->cc->margin, margin(c) << ZO_CL_MARGIN_FRAC) && c->cc->detector) {
        suspect(c, 1u, (float)zo_ph_statistic(&c->margin) / (float)(1 << ZO_CL_MARGIN_FRAC));
    }
    if (label != ZO_CL_NO_LABEL) {
        feedback(c, x, label, correct, loss);
    }
    return pred;
}

void zo_cl_feedback(const int8_t *x, uint16_t label)
{
    cl_t *c = &g_cl;
    float loss;
    int32_t pred;
    const int correct = answer(c, x, label, &loss, &pred);
    feedback(c, x, label, correct, loss);
}

void zo_cl_end(void)
{
    cl_t *c = &g_cl;
    const zo_train_model_t *m = &c->m;
    if (c->adapting && c->ep_steps != 0u) {
        zo_tm_updates_mark(ZO_TM_UPDATE_RESTORE); /* the unfinished candidate is dropped */
    }
    zo_tm_updates_flush();
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        const uint32_t bytes = zo_trainable_bytes(tt);
        zo_tm_weights(tt->tensor_index, ZO_TM_PART_VALUES, tt->values, bytes);
        if (tt->residual != NULL) {
            zo_tm_weights(tt->tensor_index, ZO_TM_PART_RESIDUAL, tt->residual, (uint32_t)tt->count);
        }
        /* the best values are the deployed ones: serving only ever used them */
        zo_tm_weights(tt->tensor_index, ZO_TM_PART_BEST_VALUES, tt->values, bytes);
    }
    zo_tm_done_t done = { c->t, (uint8_t)ZO_DONE_COMMAND, c->tr.prefix_passes, c->tr.suffix_passes,
                          zo_now_us(&c->tr) };
    zo_tm_done(&done);
}

void zo_cl_status(zo_cl_status_t *s)
{
    const cl_t *c = &g_cl;
    s->samples = c->samples;
    s->labelled = c->labelled;
    s->episodes = c->episode;
    s->accepted = c->accepted;
    s->rejected = c->rejected;
    s->steps = c->t;
    s->deployed_slot = c->deployed;
    s->generation = zo_slots_generation(c->w->ab, c->deployed);
    s->adapting = (uint8_t)c->adapting;
}
