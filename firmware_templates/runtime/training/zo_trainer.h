/* zo_trainer.h - the zeroth-order training loop (static C, copied verbatim into bundles).
 *
 * The generated <prefix>_train.c only wires a model to it: it fills a zo_train_model_t (the
 * model's step runner, where the boundary and the logits live, the trainable tensors, the
 * embedded data and the work buffers) and a zo_train_config_t (the options). Every rule is in
 * docs/training.md and mirrored by host/zoflash/reference/trainer.py bit for bit.  The ids and
 * limits are those of host/zoflash/spec/training.py (tests/test_spec.py checks them).
 */
#ifndef ZO_TRAINER_H
#define ZO_TRAINER_H

#include <stdint.h>

#include "zo_port_checkpoint.h" /* the checkpoint image's header: ZO_CKPT_MAGIC, ZO_CKPT_HEADER_BYTES, ... */
#include "zo_sched.h"
#include "zo_stream.h"
#include "zo_train_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One trainable tensor, in RAM. */
typedef struct {
    void *values;           /* int8_t weights, int32_t biases, or int64_t biases (16x8 layers) */
    int8_t *residual;       /* split-16 residuals of int8 weights (NULL for biases) */
    const int32_t *eps_b;   /* bias perturbation per element (NULL for int8 weights) */
    int32_t count;          /* elements */
    int32_t max_step;       /* bias: bound of one step's change; unused for weights */
    uint32_t stream;        /* hash stream id */
    uint32_t tensor_index;  /* the model's tensor index (weight dumps) */
    uint8_t value_bytes;    /* bytes per value: 1 (int8 weights), 4 or 8 (int32 or int64 biases) */
} zo_trainable_t;

/* Bytes of a trainable tensor's values (not its residuals). */
static inline uint32_t zo_trainable_bytes(const zo_trainable_t *tt)
{
    return (uint32_t)tt->count * (uint32_t)tt->value_bytes;
}

/* A range of arena bytes (a boundary activation). */
typedef struct {
    int8_t *data;
    int32_t bytes;
} zo_span_t;

typedef struct {
    /* the model */
    void (*run_steps)(int32_t first, int32_t end); /* runs kernel calls [first, end) */
    int8_t *input;                                 /* model input 0 in the arena */
    int32_t input_bytes;
    int32_t split;                                 /* [0, split) prefix */
    int32_t logits_end;                            /* [split, logits_end) suffix */
    const zo_span_t *boundary;
    int32_t n_boundary;
    int32_t boundary_bytes;
    const void *logits;                            /* the output the loss reads: int8, or int16 (16x8) */
    uint8_t logits_bytes;                          /* 1 (int8) or 2 (int16) */
    int32_t classes;                               /* its elements */
    float logits_scale;
    int32_t logits_zp;
    zo_loss_t loss;
    uint8_t headroom_bits;                         /* --headroom of the build (reported in the hello) */
    const zo_trainable_t *tensors;
    int32_t n_tensors;
    uint32_t trainable_params;
    uint8_t model_sha256[8];
    uint8_t options_sha256[8];  /* the build's options and data: checkpoints of other builds are refused */
    /* the data */
    const int8_t *x_train;
    const uint16_t *y_train;    /* labels (softmax-ce, sigmoid-bce; NULL for mse) */
    uint32_t n_train;
    const int8_t *x_val;        /* validation split, carved from the training data at build time: */
    const uint16_t *y_val;      /* the guards, the snapshots (the best weights) use it */
    uint32_t n_val;
    const int8_t *x_test;       /* test split: only reported */
    const uint16_t *y_test;
    uint32_t n_test;
    /* mse targets, `classes` floats per sample; NULL: the sample's own int8 input (input_bytes ==
     * classes), dequantized as target_scale * (x - target_zp) */
    const float *t_train, *t_val, *t_test;
    float target_scale;
    int32_t target_zp;
    /* work memory (sizes in docs/training.md; the generator allocates them) */
    int8_t *feature_cache;  /* batch * boundary_bytes */
    uint8_t *snapshot;      /* sum of trainable bytes + residual bytes: the best state by validation */
    float *lp, *lm, *l0;    /* batch each */
    uint16_t *labels;       /* batch */
    uint8_t *settled;       /* batch: outputs of the + pass pinned towards their target */
    float *targets;         /* batch * classes (mse), else unused */
    float *delta, *c;       /* q_buffer each */
    uint32_t q_buffer;
    /* ---- data sources (docs/training.md "Data sources") ----
     * --data-source stream: x_train/y_train/t_train are the ring of zo_stream.h (n_train = its
     * slots), refilled by the host before each step; NULL: the embedded training data. */
    zo_stream_t *stream;
    /* ---- end data sources ---- */
    /* --- boundary checksum: the boundary of the first test sample is reported once */
    uint32_t boundary_crc_expected; /* the host simulation's CRC-32 (valid with ZO_TM_BOUNDARY_EXPECTED) */
    uint8_t boundary_flags;         /* ZO_TM_BOUNDARY_EXPECTED, ZO_TM_BOUNDARY_NPU */
    /* 1: the frozen prefix keeps state across invokes (variables, SVDF, LSTM): it runs on every
     * pass, sample by sample, and a sample's boundary is never reused (no prefix memo) */
    uint8_t prefix_state;
    /* the model's state array (variable tensors; NULL for a stateless model): a checkpoint carries
     * it, so a resumed run's prefix goes on from the state the run had */
    int8_t *model_state;
    uint32_t model_state_bytes;
} zo_train_model_t;

/* Output k of the model's output the loss reads, int8 or int16, and that type's range. */
static inline int32_t zo_logit(const zo_train_model_t *m, int32_t k)
{
    return m->logits_bytes == 2u ? (int32_t)((const int16_t *)m->logits)[k] : (int32_t)((const int8_t *)m->logits)[k];
}

static inline int32_t zo_logit_min(const zo_train_model_t *m)
{
    return m->logits_bytes == 2u ? INT16_MIN : INT8_MIN;
}

static inline int32_t zo_logit_max(const zo_train_model_t *m)
{
    return m->logits_bytes == 2u ? INT16_MAX : INT8_MAX;
}

/* The index of the first largest output. */
static inline int32_t zo_logits_argmax(const zo_train_model_t *m)
{
    return m->logits_bytes == 2u ? zo_argmax_s16((const int16_t *)m->logits, m->classes)
                                 : zo_argmax_s8((const int8_t *)m->logits, m->classes);
}

typedef enum { ZO_LR_SQRT = 0, ZO_LR_LINEAR = 1, ZO_LR_FIXED = 2 } zo_lr_scaling_t;
/* lr decay: the lr's factor at fraction f of the run (docs/training.md "Learning rate") */
typedef enum { ZO_LR_DECAY_NONE = 0, ZO_LR_DECAY_LINEAR = 1, ZO_LR_DECAY_STEP = 2, ZO_LR_DECAY_TAIL = 3 } zo_lr_decay_t;
/* tail: 1, then linear to 0 over the last 1 / ZO_LR_DECAY_TAIL_DIV of the run */
#define ZO_LR_DECAY_TAIL_DIV 5u

#define ZO_TRAIN_EPS_MIN 1u /* perturbation size in LSB */
#define ZO_TRAIN_EPS_MAX 8u
/* auto lr: the first updates move the int8 weights min(rho, max(1, w_rms / this)) LSB RMS per step */
#define ZO_LR_W_RMS_DIV 32u
/* lr trial (docs/training.md "lr trial"): candidates lr_1 * 2^j for |j| <= ZO_LR_TRIAL_MAX_MOVES;
 * it runs only when its worst case (ZO_LR_TRIAL_MAX_MOVES + 2 candidates) is at most
 * 1 / ZO_LR_TRIAL_SHARE of the run's budget or steps */
#define ZO_LR_TRIAL_MAX_MOVES 3u
#define ZO_LR_TRIAL_SHARE 4u
/* ... and training runs at the best candidate's rate / 2^ZO_LR_TRIAL_BACKOFF (short-horizon bias),
 * times sqrt(lr_trial_horizon * trial passes / run passes) when the run is longer than
 * lr_trial_horizon candidates (the best constant rate falls as 1 / sqrt(horizon)) */
#define ZO_LR_TRIAL_BACKOFF 1

typedef struct {
    uint32_t seed;
    uint32_t batch;
    zo_rounding_t rounding;
    uint32_t density_log2;
    uint32_t eps;             /* perturbation size in LSB (weights: eps, biases: eps * eps_b) */
    int32_t lr_auto;          /* 1: calibrate lr_1 from calib_steps steps at calib_q */
    float lr;                 /* lr_1 when not auto */
    float rho;
    zo_lr_scaling_t lr_scaling;
    zo_lr_decay_t lr_decay;
    uint32_t lr_trial_steps;  /* lr trial: steps per candidate lr_1 before training; 0: off */
    uint32_t lr_trial_horizon; /* lr trial: candidates' worth of passes past which the rate falls; 0: never */
    uint32_t calib_steps;
    uint32_t calib_q;
    uint32_t max_steps;       /* 0: no limit */
    uint64_t budget;          /* forward passes; 0: no limit */
    uint32_t eval_every;
    float guard_sat;
    float guard_zero;
    uint32_t guard_steps;
    float guard_loss;            /* roll back when a validation loss exceeds best * this (0: off) ... */
    float guard_loss_z;          /* ... + this many standard errors of the validation mean */
    uint32_t guard_max_rollbacks; /* stop after this many rollbacks (0: never) */
    uint32_t checkpoint_every;    /* send a checkpoint every N steps (0: never) */
    int32_t fleet;                /* 1: --mode fleet, train in rounds the host commands (zo_fleet.c) */
    zo_sched_config_t sched;
} zo_train_config_t;

/* Why a run ended (telemetry "done" reason). */
typedef enum {
    ZO_DONE_STEPS = 0, ZO_DONE_BUDGET = 1, ZO_DONE_SCHEDULER = 2, ZO_DONE_COMMAND = 3, ZO_DONE_DEAD_ZONE = 4,
    ZO_DONE_GUARD = 5 /* too many rollbacks: the weights are the last good snapshot */
} zo_done_reason_t;

/* --- checkpoint and resume (docs/training.md "Checkpoint and resume") ---------------------------
 * A checkpoint image: a ZO_CKPT_HEADER_BYTES header (its layout: zo_port_checkpoint.h, which a
 * port's checkpoint store reads too), then the body: the trainer state (zo_ckpt_state_t as stored
 * in memory, so an image belongs to one firmware build), every trainable tensor's values and
 * residuals in tensor order, and the snapshot (the best state by validation). */

/* Everything the loop carries from one step to the next; the RNG is counter-based (seed, step,
 * direction), so the step is its counter, and the minibatch cursor too. */
typedef struct {
    zo_sched_t sched;
    float lr1, best_loss, m2_calib;
    uint32_t step, last_eval, sat_run, zero_run, snapshot_step, rollbacks;
    uint64_t prefix_passes, suffix_passes, eval_passes;
} zo_ckpt_state_t;

/* Runs the whole training with telemetry through the port; returns 0, or 1 if the
 * configuration is invalid (reported as a log frame). */
int zo_train_run(const zo_train_model_t *m, const zo_train_config_t *cfg);

/* The same run a step at a time (zo_train_run is begin, step until it returns 1, end), for the
 * library form (zo_app.h).  One run at a time.  zo_train_begin: check the configuration (1 and a
 * log frame if invalid), hello, the first evaluation.  zo_train_step: serve commands, one step,
 * its records and evaluation; 1 when the run is over.  zo_train_end: the final evaluation if
 * due, the weights frames and done; returns the done reason. */
int zo_train_begin(const zo_train_model_t *m, const zo_train_config_t *cfg);
int zo_train_step(void);
int zo_train_end(void);
uint32_t zo_train_steps_done(void);

/* --- checkpoint get/put for the library form (zo_app.h) -------------------------------------
 * The image of the checkpoint frames (zo_port_checkpoint.h) between steps, as one buffer.  put
 * checks it whole (format, size, model, options, the body's CRC) before anything is written, so
 * a refused image leaves the run untouched; the log frame says why. */
#define ZO_CKPT_OK 0
#define ZO_CKPT_BAD 1         /* not this firmware's format, the wrong size, or its CRC does not match */
#define ZO_CKPT_OTHER_MODEL 2 /* taken by a run of another model */
#define ZO_CKPT_OTHER_BUILD 3 /* taken by a build with other training options or data */
uint32_t zo_train_checkpoint_bytes(const zo_train_model_t *m);
void zo_train_checkpoint_get(uint8_t *image); /* zo_train_checkpoint_bytes(m) bytes; after zo_train_begin */
int zo_train_checkpoint_put(const uint8_t *image, uint32_t n);
/* --- end checkpoint get/put */

/* lr at q for the scaling rule (docs/training.md "Learning rate"). */
float zo_lr_at_q(float lr1, uint32_t q, zo_lr_scaling_t scaling);
/* lr decay: the factor of step t with `passes` training passes done before it (1 without decay) */
float zo_lr_decay_factor(const zo_train_config_t *cfg, uint32_t t, uint64_t passes);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRAINER_H */
