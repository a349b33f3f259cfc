/* zo_trainer_internal.h - the training loop's private state and what its files share:
 * zo_trainer.c (the loop: begin/step/end, evaluation, guards, commands), zo_checkpoint.c
 * (checkpoint and resume) and zo_lr.c (the learning rate and the lr trial).  Not an API: a
 * program includes zo_trainer.h (or zo_app.h).  Rules: docs/training.md.
 */
#ifndef ZO_TRAINER_INTERNAL_H
#define ZO_TRAINER_INTERNAL_H

#include <stdint.h>

#include "zo_command.h"
#include "zo_telemetry.h"
#include "zo_trainer.h"

#define ZO_CKPT_HEAD_BYTES (ZO_CKPT_HEADER_BYTES + (uint32_t)sizeof(zo_ckpt_state_t)) /* header + state */

typedef struct {
    const zo_train_model_t *m;
    const zo_train_config_t *cfg;
    zo_sched_t sched;
    float lr1;
    uint64_t prefix_passes, suffix_passes, eval_passes;
    uint32_t sat_run, zero_run;
    uint32_t snapshot_step;
    uint32_t seed; /* the directions' and minibatches' seed: the build's, or a fleet round's */
    uint64_t t0;
    /* --- checkpoint and resume: the image's header and state, built to send or received from a
     * restore; the restore in progress */
    uint8_t ck_head[ZO_CKPT_HEAD_BYTES];
    uint32_t ck_next;       /* restore: bytes received so far */
    uint32_t ck_last;       /* restore: offset of the last chunk taken (a repeat is harmless) */
    int ck_restoring;       /* a restore's header was accepted and its body is arriving */
    int ck_restored;        /* a restore completed: the loop takes its state (ck_head) */
} trainer_t;

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
    /* --- fleet learning (--mode fleet): the device holds (serves commands only) between rounds; the
     * snapshot is the global weights while it trains a round (a rollback goes back to them) */
    int held;
    uint32_t round_first, round_end; /* the steps the round in training starts and ends at */
} run_t;

typedef struct {
    uint32_t correct, saturated;
    float loss, se; /* the mean loss and its standard error */
} split_eval_t;

typedef struct {
    float loss, m2, v, zero_frac, sat_frac, kappa;
    int has_kappa;
} step_stats_t;

/* ---- zo_trainer.c: the loop's pieces the lr trial runs too ---- */
uint64_t zo_now_us(const trainer_t *tr);
void zo_snapshot_copy(const zo_train_model_t *m, int restore);
void zo_send_event(const trainer_t *tr, uint32_t step, uint8_t kind, uint8_t code, uint8_t from, uint8_t to,
                   uint32_t q_from, uint32_t q_to, float value, uint32_t aux);
split_eval_t zo_evaluate_split(trainer_t *tr, const int8_t *x, const uint16_t *y, const float *t,
                               uint32_t n_samples);
step_stats_t zo_run_step(trainer_t *tr, uint32_t t, uint32_t q, int centre);
void zo_update_all(const trainer_t *tr, uint32_t t, uint32_t q, float lr, uint16_t *c16);
int zo_guard_tripped(trainer_t *tr, const step_stats_t *st);
/* the update of step t along its q directions with the coefficients in m->c (zo_update_all, push) */
void zo_apply_update(const trainer_t *tr, uint32_t t, uint32_t q);
/* the hello frame of a run of `m` with `cfg` (a continual run then sets its own limits) */
void zo_hello_fill(const zo_train_model_t *m, const zo_train_config_t *cfg, zo_tm_hello_t *out);
/* the validation and test sets evaluated (an eval frame); returns the validation's */
split_eval_t zo_evaluate(trainer_t *tr, uint32_t steps_done);

/* ---- zo_lr.c: the learning rate ---- */
float zo_lr_of_step(const trainer_t *tr, uint32_t t, uint32_t q, int calibrating);
float zo_lr_auto_step_lsb(const zo_train_model_t *m, float rho, float p);
int zo_lr_trial_fits(const trainer_t *tr);
void zo_lr_trial(trainer_t *tr, uint32_t *t);

/* ---- zo_checkpoint.c: checkpoint and resume ---- */
uint32_t zo_ckpt_total(const zo_train_model_t *m);
void zo_ckpt_send(run_t *r);
void zo_ckpt_get(run_t *r, uint8_t *image);
int zo_ckpt_put(run_t *r, const uint8_t *image, uint32_t n);
uint8_t zo_ckpt_restore_chunk(trainer_t *tr, const zo_cmd_t *c);
int zo_ckpt_load_stored(trainer_t *tr);
void zo_ckpt_take_state(run_t *r);

/* ---- zo_push.c: the trained tensors' checksum and the push command ---- */
void zo_send_crc(const trainer_t *tr, uint32_t step);
uint8_t zo_push_chunk(run_t *r, const zo_cmd_t *c, int paused);
uint32_t zo_tensors_crc(const zo_train_model_t *m, uint32_t *bytes);
/* 1 when `data` holds exactly `steps` whole update-log entries (the updates frame's tail format)
 * whose q fit the device's buffers (q_limit) and whose header bits are all in `allowed`; nothing is
 * applied from a chunk that does not */
int zo_updates_fit(const uint8_t *data, uint32_t n, uint32_t steps, uint32_t q_limit, uint8_t allowed);
/* apply `steps` entries that fit (zo_updates_fit) from step `first` on, with the trainer's seed: the
 * updates with this device's update maths, the rollback and snapshot marks; returns the updates */
uint32_t zo_apply_entries(const trainer_t *tr, const uint8_t *data, uint32_t n, uint32_t first, uint32_t steps);

/* ---- zo_fleet.c: fleet learning's round and merge commands ---- */
uint8_t zo_fleet_round(run_t *r, const zo_cmd_t *c);
uint8_t zo_fleet_merge(run_t *r, const zo_cmd_t *c);

#endif /* ZO_TRAINER_INTERNAL_H */
