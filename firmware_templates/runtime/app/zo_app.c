/* zo_app.c - the trainer as a library (see zo_app.h, docs/training.md "Data sources"). */
#include <string.h>

#include "zo_app.h"
#include "zo_bundle.h"
#include "zo_telemetry.h"
#include "zo_trainer.h"

extern const zo_train_model_t zo_train_model;
extern const zo_train_config_t zo_train_config;
extern zo_stream_t zo_train_ring; /* the generated wiring's ring (x_train/y_train/t_train point into it) */

static int g_done;
static uint8_t g_reason;
static int g_ready; /* init succeeded */

/* The ring restarts at the first sample step t trains on: pushes [t R, N + t R) refill it
 * (after a checkpoint is put or restored; t = 0: a fresh ring). */
static void restart_ring(void)
{
    zo_stream_t *s = &zo_train_ring;
    s->cursor = zo_stream_target(s, zo_train_steps_done()) - s->slots;
    s->got = 0u;
}

int zo_app_init(int telemetry)
{
    zo_tm_enable(telemetry);
    ZO_MODEL_INIT();
    g_done = 0;
    g_ready = !zo_train_begin(&zo_train_model, &zo_train_config);
    restart_ring(); /* a checkpoint the port kept may have been restored */
    return g_ready ? ZO_APP_OK : ZO_APP_INVALID;
}

int zo_app_push(const int8_t *x, uint16_t label, const float *target)
{
    zo_stream_t *s = &zo_train_ring;
    if (g_done) {
        return ZO_APP_DONE;
    }
    if (s->cursor >= zo_stream_target(s, zo_train_steps_done())) {
        return ZO_APP_NEED_SAMPLES; /* the next step's samples are all here: step first */
    }
    const uint32_t slot = s->cursor % s->slots;
    memcpy(s->x + (size_t)slot * s->input_bytes, x, s->input_bytes);
    if (s->y != NULL) {
        s->y[slot] = label;
    }
    if (s->t != NULL && target != NULL) {
        memcpy((uint8_t *)s->t + (size_t)slot * s->target_bytes, target, s->target_bytes);
    }
    s->cursor++;
    return ZO_APP_OK;
}

int zo_app_step(void)
{
    zo_stream_t *s = &zo_train_ring;
    if (g_done) {
        return ZO_APP_DONE;
    }
    if (s->cursor < zo_stream_target(s, zo_train_steps_done())) {
        return ZO_APP_NEED_SAMPLES;
    }
    if (!zo_train_step()) {
        return ZO_APP_OK;
    }
    g_reason = (uint8_t)zo_train_end();
    g_done = 1;
    return ZO_APP_DONE;
}

void zo_app_status(zo_app_status_t *st)
{
    const zo_stream_t *s = &zo_train_ring;
    st->steps_done = zo_train_steps_done();
    st->pushed = s->cursor;
    st->needed = zo_stream_target(s, st->steps_done);
    st->done = (uint8_t)g_done;
    st->done_reason = g_reason;
}

const int8_t *zo_app_forward(const int8_t *x)
{
    memcpy(ZO_MODEL_INPUT(0), x, (size_t)ZO_MODEL_INPUTS[0].bytes);
    ZO_MODEL_INVOKE();
    return (const int8_t *)ZO_MODEL_OUTPUT(0);
}

uint32_t zo_app_input_bytes(void)
{
    return (uint32_t)zo_train_model.input_bytes;
}

/* --- checkpoints (zo_app.h) */
uint32_t zo_app_checkpoint_size(void)
{
    return zo_train_checkpoint_bytes(&zo_train_model);
}

int zo_app_checkpoint_get(uint8_t *buf, uint32_t cap)
{
    if (!g_ready) {
        return ZO_APP_INVALID;
    }
    if (cap < zo_app_checkpoint_size()) {
        return ZO_APP_SMALL_BUFFER;
    }
    zo_train_checkpoint_get(buf);
    return ZO_APP_OK;
}

int zo_app_checkpoint_put(const uint8_t *buf, uint32_t len)
{
    if (!g_ready) {
        return ZO_APP_INVALID;
    }
    if (g_done) {
        return ZO_APP_DONE;
    }
    switch (zo_train_checkpoint_put(buf, len)) {
    case ZO_CKPT_OK:
        break;
    case ZO_CKPT_OTHER_MODEL:
        return ZO_APP_CKPT_MODEL;
    case ZO_CKPT_OTHER_BUILD:
        return ZO_APP_CKPT_BUILD;
    default:
        return ZO_APP_CKPT_BAD;
    }
    restart_ring();
    return ZO_APP_OK;
}
