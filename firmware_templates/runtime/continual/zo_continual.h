/* zo_continual.h - continual, safe adaptation in the field (--mode continual).
 *
 * Static file; rules in docs/guides/continual.md.  The device serves inference with the DEPLOYED
 * weights on every incoming sample.  Labelled samples (the label with the sample, or later as
 * feedback with the same input) feed the drift detector (zo_drift.h: Page-Hinkley on the
 * deployed weights' loss; a second one watches the output margin of every sample, labelled or not,
 * for shifts that leave the loss level) and two rings: every `holdout_every`-th labelled sample goes to the
 * held-back ring (never trained on), the others to the training ring (--buffer slots).  An alarm
 * starts an adaptation episode: a CANDIDATE (a copy of the deployed weights, in RAM) trains
 * zeroth-order steps on the training ring once it holds only samples that came after the alarm,
 * interleaved with serving so that training takes at most `duty` of the episode's sample-passes
 * (prefix + suffix passes, as --budget counts them; serving one sample costs its prefix and
 * suffix pass).  After `episode_steps` steps, once the held-back ring holds only post-alarm
 * samples, both weights answer the held-back samples and the paired sign test (zo_paired.h)
 * decides: the candidate is PROMOTED only if significantly better (written to the other A/B slot,
 * zo_slots.h, then deployed), else discarded.  Serving never sees the candidate.  When the
 * candidate is not better, the built-in (factory) weights are tested against the deployed ones the
 * same way: significantly better, they come back (a rollback): adapted weights never stay deployed
 * where the factory weights would serve significantly better.  While adapted weights are
 * deployed, the factory weights also answer every held-back sample (a shadow pass: a quarter of the
 * serving passes more), the paired counts adding up while the same weights stay deployed; between
 * episodes a significant lead brings the factory weights back: a shift the detectors cannot see
 * (the loss and the margin stay level) cannot leave worse-than-factory weights deployed for long.
 *
 * Every decision is a `continual` telemetry frame (ZO_CL_EV_*; spec/wire.py CONTINUAL_DECISIONS), every
 * training step an update-log entry (a promotion marks SNAPSHOT, a discard RESTORE), so
 * `zoflash replay` rebuilds the deployed weights from the log (a return to the factory weights is
 * a step entry without an update, flagged FACTORY).
 */
#ifndef ZO_CONTINUAL_H
#define ZO_CONTINUAL_H

#include <stdint.h>

#include "zo_drift.h"
#include "zo_paired.h"
#include "zo_slots.h"
#include "zo_trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The continual frame's decision (spec/wire.py CONTINUAL_DECISIONS, in order).  ROLLBACK: the factory
 * weights were deployed again (at sample 0: the boot found a promotion cut short by a reset). */
#define ZO_CL_EV_WINDOW    0u
#define ZO_CL_EV_SUSPECTED 1u /* count: the detector (0 the loss, 1 the margin); statistic: its value */
#define ZO_CL_EV_EPISODE   2u
#define ZO_CL_EV_ACCEPTED  3u /* accepted, rejected: better/worse/ties (correct) of `count` samples; statistic: lr_1 */
#define ZO_CL_EV_REJECTED  4u /* count 0: abandoned (a new alarm restarted the episode) */
#define ZO_CL_EV_ROLLBACK  5u
#define ZO_CL_EV_BOOT      6u

#define ZO_CL_MARGIN_FRAC 4 /* the margin detector's units: 1/16 output LSB */
#define ZO_CL_NO_LABEL 0xFFFFu /* zo_cl_serve: the sample has no label (yet) */
#define ZO_CL_SHIFT    0xFFFEu /* zo_cl_serve: no label, and the conditions changed here (e.g. the sensor was
                                * remounted): an episode starts now, without waiting for the detector */

typedef struct {
    uint32_t duty_q16;      /* training's share of an episode's sample-passes, at most (65536 = all) */
    uint32_t episode_steps; /* training steps of an episode (--steps) */
    uint32_t holdout_every; /* every this-th labelled sample is held back */
    uint32_t alpha_log2;    /* the paired test's level for a candidate: 2^-alpha_log2 */
    uint32_t rollback_alpha_log2; /* ... for the factory weights against adapted ones (the safe direction) */
    uint32_t window;        /* a window frame every this many labelled samples (0: none) */
    uint32_t q;             /* directions per training step */
    uint32_t detector;      /* 1: the detector starts episodes; 0: only ZO_CL_SHIFT marks do (an oracle) */
    zo_ph_config_t ph;      /* the detector on the loss (labelled samples) */
    zo_ph_config_t margin;  /* the detector on the output margin (every sample; units of 2^-ZO_CL_MARGIN_FRAC LSB) */
} zo_cl_config_t;

/* The memory of the controller (the generated <prefix>_continual.c allocates it). */
typedef struct {
    int8_t *x;              /* training ring: slots * input_bytes */
    uint16_t *y;
    uint32_t slots;
    int8_t *hx;             /* held-back ring: hslots * input_bytes */
    uint16_t *hy;
    uint32_t hslots;
    uint8_t *candidate;     /* the candidate's trainable bytes (the snapshot layout) */
    uint8_t *factory;       /* the built-in weights, kept for a rollback (the same layout) */
    zo_slots_t *ab;         /* the A/B slots of the deployed weights */
} zo_cl_wiring_t;

/* Start: checks, hello, loads the deployed slot (or stores the built-in weights as generation 1).
 * Returns 0, or 1 if the configuration is invalid (a log frame says why). */
int zo_cl_init(const zo_train_model_t *m, const zo_train_config_t *cfg, const zo_cl_wiring_t *w,
               const zo_cl_config_t *cc);

/* The library form (--data-source app): zo_cl_init with the bundle's model, configuration and
 * memory (the generated <prefix>_continual.c), after the model's init.  Your firmware calls it
 * once after zo_port_init(), then zo_cl_serve per sample and zo_cl_end at the end (if ever). */
int zo_cl_start(void);

/* One incoming sample (model input bytes): the deployed weights' answer (argmax class; sigmoid:
 * 0/1).  With a label (not ZO_CL_NO_LABEL) it is also feedback: detector, rings, and the
 * episode's training steps the duty cycle allows now. */
int32_t zo_cl_serve(const int8_t *x, uint16_t label);

/* A label that came after its sample: the same as serving it again with the label. */
void zo_cl_feedback(const int8_t *x, uint16_t label);

/* The end of the stream: flushes the update log, sends the deployed weights and done. */
void zo_cl_end(void);

typedef struct {
    uint32_t samples, labelled, episodes, accepted, rejected, steps;
    int32_t deployed_slot;
    uint32_t generation;
    uint8_t adapting;
} zo_cl_status_t;

void zo_cl_status(zo_cl_status_t *s);

#ifdef __cplusplus
}
#endif

#endif /* ZO_CONTINUAL_H */
