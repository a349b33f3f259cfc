/* zo_app.h - the zeroth-order trainer as a library for your own firmware (--data-source app).
 *
 * Static file, copied into bundles built with `zoflash build --data-source app`; rules in
 * docs/training.md, "Data sources".  No main(): your firmware brings up its board (or links the
 * bundle's port), then
 *
 *     zo_app_init(1);                          // 1: telemetry frames through zo_port_write; 0: none
 *     for (;;) {
 *         while (zo_app_push(x, label, NULL) == ZO_APP_OK) { read the next sample into x }
 *         if (zo_app_step() == ZO_APP_DONE) break;
 *     }
 *     const int8_t *y = zo_app_forward(x);     // the trained model on a new input
 *
 * The samples go to a ring of the last N = --buffer samples, as with --data-source stream: push
 * k goes to slot k % N, and step t runs only once pushes [0, N + t R) happened (R = --refresh),
 * so a run is determined by the order of the pushes.  One run per program.  The run's length,
 * scheduler and learning rate are the build's options; the test split is built in for the
 * evaluations.
 *
 * Checkpoints: zo_app_checkpoint_get() copies the run's whole state between steps (the image of
 * the checkpoint frames: docs/training.md "Checkpoint and resume") to a buffer that your
 * firmware keeps wherever it wants (flash, an SD card, the host); after a reset,
 * zo_app_init() then zo_app_checkpoint_put() continues the run from that step:
 *
 *     static uint8_t image[MAX];                 // zo_app_checkpoint_size() <= MAX
 *     zo_app_checkpoint_get(image, MAX);         // ... and store it
 *     ... reset ...
 *     zo_app_init(1);
 *     if (zo_app_checkpoint_put(image, n) == ZO_APP_OK) { push from zo_app_status().pushed on }
 *
 * The ring of samples is not in the image: after a put the trainer waits for the N samples of
 * the ring at that step (status.pushed = t R, needed = N + t R), so pushing the same samples an
 * uninterrupted run got gives its records and weights bit for bit; fresh samples continue the
 * run on fresh data.  put checks the image whole before it writes anything: another model,
 * other training options or data, a damaged copy are refused with a code, the run untouched.
 */
#ifndef ZO_APP_H
#define ZO_APP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_APP_OK           0 /* push: taken; step: one step done */
#define ZO_APP_NEED_SAMPLES 1 /* step: push more first; push: the ring is full for this step, step first */
#define ZO_APP_DONE         2 /* the run is over (weights final, done frame sent) */
#define ZO_APP_INVALID      3 /* init: the build's configuration is invalid (a log frame says why); else: before init */
/* --- checkpoints: get and put (a log frame says why a put was refused) */
#define ZO_APP_SMALL_BUFFER 4 /* get: cap < zo_app_checkpoint_size() */
#define ZO_APP_CKPT_BAD     5 /* put: not a checkpoint of this firmware's format, the wrong size, or damaged (CRC) */
#define ZO_APP_CKPT_MODEL   6 /* put: a checkpoint of another model */
#define ZO_APP_CKPT_BUILD   7 /* put: a checkpoint of a build with other training options or data */

typedef struct {
    uint32_t steps_done;
    uint32_t pushed;       /* samples pushed so far */
    uint32_t needed;       /* pushes the next step waits for (in total) */
    uint8_t done;          /* 1 once the run is over */
    uint8_t done_reason;   /* zo_done_reason_t, when done */
} zo_app_status_t;

/* Start the run from the model's pretrained weights (its init copies them into RAM) or from the
 * checkpoint the port keeps: checks the configuration, sends hello and the first evaluation.  telemetry 0
 * sends no frame at all (zo_port_write is never called). */
int zo_app_init(int telemetry);

/* One labelled sample: x holds the model input's bytes (int8 quantized as the model's input,
 * ZO_APP_INPUT_BYTES); label the class (ignored for mse); target the mse targets (float32, one
 * per output) when the build trains against targets, else NULL. */
int zo_app_push(const int8_t *x, uint16_t label, const float *target);

/* One training step when enough samples were pushed. */
int zo_app_step(void);

void zo_app_status(zo_app_status_t *s);

/* The model (with the weights as trained so far) on one input: returns output 0. */
const int8_t *zo_app_forward(const int8_t *x);

/* The model input's bytes per sample. */
uint32_t zo_app_input_bytes(void);

/* --- checkpoints (see the top of this file) */

/* The checkpoint image's bytes (fixed by the build; callable before init). */
uint32_t zo_app_checkpoint_size(void);

/* The run's state between steps into buf (zo_app_checkpoint_size() bytes): ZO_APP_OK,
 * ZO_APP_SMALL_BUFFER, or ZO_APP_INVALID before init. */
int zo_app_checkpoint_get(uint8_t *buf, uint32_t cap);

/* Continue from a checkpoint (after init, before the run is over): ZO_APP_OK, a ZO_APP_CKPT_*
 * refusal (nothing changed), ZO_APP_DONE, or ZO_APP_INVALID before init. */
int zo_app_checkpoint_put(const uint8_t *buf, uint32_t len);

#ifdef __cplusplus
}
#endif

#endif /* ZO_APP_H */
