/* zo_telemetry.c - frame encoder (see zo_telemetry.h and docs/training.md, Telemetry). */
#include <string.h>

#include "zo_port.h"
#include "zo_telemetry.h"

#define HEAD 8u       /* sync, version, type, seq, len */
#define FIXED_MAX 68u /* largest fixed payload (eval) */

/* Header + fixed payload + CRC, built on the stack.  Variable data (weights, log text) is not
 * copied in: it is written straight from the caller's memory, so no 1 KiB buffer is needed. */
typedef struct {
    uint8_t b[HEAD + FIXED_MAX + 4u];
    uint32_t n;
} frame_t;

static uint16_t g_seq;
static int g_off; /* zo_tm_enable(0): no frames (the library form without telemetry) */

void zo_tm_enable(int on)
{
    g_off = !on;
}

void zo_tm_reset(void)
{
    g_seq = 0u;
}

/* Reflected polynomial 0xEDB88320, a nibble at a time: a 64-byte table instead of 1 KiB. */
uint32_t zo_tm_crc32(uint32_t crc, const uint8_t *p, uint32_t n)
{
    static const uint32_t t[16] = {
        0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
        0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
        0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu,
    };
    uint32_t c = ~crc;
    for (uint32_t k = 0; k < n; ++k) {
        c ^= p[k];
        c = (c >> 4) ^ t[c & 15u];
        c = (c >> 4) ^ t[c & 15u];
    }
    return ~c;
}

/* Append the low `bytes` bytes of v, least significant first. */
static void put(frame_t *f, uint64_t v, uint32_t bytes)
{
    for (uint32_t k = 0; k < bytes; ++k) {
        f->b[f->n++] = (uint8_t)(v >> (8u * k));
    }
}

static void put_bytes(frame_t *f, const uint8_t *p, uint32_t n)
{
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

static void put_f32(frame_t *f, float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u); /* the IEEE bits, whatever the byte order */
    put(f, u, 4u);
}

static void begin(frame_t *f, uint32_t type)
{
    f->n = 0u;
    put(f, ZO_TM_SYNC0, 1u);
    put(f, ZO_TM_SYNC1, 1u);
    put(f, ZO_TM_VERSION, 1u);
    put(f, type, 1u);
    put(f, g_seq, 2u);
    put(f, 0u, 2u); /* len, patched by finish() */
}

/* Patch len, append the CRC over version..payload and send; `tail` follows the fixed payload. */
static void finish(frame_t *f, const uint8_t *tail, uint32_t tail_n)
{
    uint32_t len = f->n - HEAD + tail_n;
    f->b[6] = (uint8_t)len;
    f->b[7] = (uint8_t)(len >> 8);
    uint32_t crc = zo_tm_crc32(zo_tm_crc32(0u, f->b + 2, f->n - 2u), tail, tail_n);
    if (g_off) {
        /* nothing leaves the device */
    } else if (tail_n == 0u) {
        put(f, crc, 4u);
        zo_port_write(f->b, f->n);
    } else {
        zo_port_write(f->b, f->n);
        zo_port_write(tail, tail_n);
        f->n = 0u;
        put(f, crc, 4u);
        zo_port_write(f->b, 4u);
    }
    g_seq = (uint16_t)(g_seq + 1u);
}

void zo_tm_hello(const zo_tm_hello_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_HELLO);
    put(&f, m->seed, 4u);
    put(&f, m->batch, 2u);
    put(&f, m->classes, 2u);
    put(&f, m->n_train, 4u);
    put(&f, m->n_test, 4u);
    put(&f, m->trainable_params, 4u);
    put(&f, m->scheduler, 1u);
    put(&f, m->rounding, 1u);
    put(&f, m->density_log2, 1u);
    put(&f, m->lr_auto, 1u);
    put_f32(&f, m->lr);
    put(&f, m->max_steps, 4u);
    put(&f, m->budget, 8u);
    put(&f, m->q_max, 2u);
    put(&f, m->n_tensors, 2u);
    put_bytes(&f, m->model_sha256, sizeof m->model_sha256);
    put(&f, m->loss_kind, 1u);
    put(&f, m->headroom, 1u);
    finish(&f, NULL, 0u);
}

void zo_tm_step(const zo_tm_step_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_STEP);
    put(&f, m->step, 4u);
    put(&f, m->q, 2u);
    put(&f, m->state, 1u);
    put(&f, m->flags, 1u);
    put_f32(&f, m->lr);
    put_f32(&f, m->loss);
    put_f32(&f, m->m2);
    put_f32(&f, m->v);
    put_f32(&f, m->zero_frac);
    put_f32(&f, m->sat_frac);
    put(&f, m->prefix_passes, 8u);
    put(&f, m->suffix_passes, 8u);
    put(&f, m->time_us, 8u);
    finish(&f, NULL, 0u);
}

void zo_tm_eval(const zo_tm_eval_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_EVAL);
    put(&f, m->step, 4u);
    put(&f, m->correct, 4u);
    put(&f, m->count, 4u);
    put_f32(&f, m->accuracy);
    put_f32(&f, m->loss);
    put(&f, m->prefix_passes, 8u);
    put(&f, m->suffix_passes, 8u);
    put(&f, m->eval_passes, 8u);
    put(&f, m->time_us, 8u);
    put(&f, m->val_correct, 4u);
    put(&f, m->val_count, 4u);
    put_f32(&f, m->val_accuracy);
    put_f32(&f, m->val_loss);
    finish(&f, NULL, 0u);
}

void zo_tm_event(const zo_tm_event_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_EVENT);
    put(&f, m->step, 4u);
    put(&f, m->kind, 1u);
    put(&f, m->code, 1u);
    put(&f, m->state_from, 1u);
    put(&f, m->state_to, 1u);
    put(&f, m->q_from, 2u);
    put(&f, m->q_to, 2u);
    put_f32(&f, m->value);
    put(&f, m->aux, 4u);
    finish(&f, NULL, 0u);
}

void zo_tm_done(const zo_tm_done_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_DONE);
    put(&f, m->steps, 4u);
    put(&f, m->reason, 1u);
    put(&f, m->prefix_passes, 8u);
    put(&f, m->suffix_passes, 8u);
    put(&f, m->time_us, 8u);
    finish(&f, NULL, 0u);
}

void zo_tm_status(const zo_tm_status_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_STATUS);
    put(&f, m->step, 4u);
    put(&f, m->q, 2u);
    put(&f, m->state, 1u);
    put(&f, m->paused, 1u);
    put(&f, m->calibrating, 1u);
    put_f32(&f, m->lr);
    put(&f, m->prefix_passes, 8u);
    put(&f, m->suffix_passes, 8u);
    put(&f, m->eval_passes, 8u);
    put(&f, m->time_us, 8u);
    put_bytes(&f, m->model_sha256, sizeof m->model_sha256);
    put(&f, m->headroom, 1u);
    finish(&f, NULL, 0u);
}

void zo_tm_ack(const zo_tm_ack_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_ACK);
    put(&f, m->step, 4u);
    put(&f, m->command_seq, 2u);
    put(&f, m->command, 1u);
    put(&f, m->result, 1u);
    finish(&f, NULL, 0u);
}

void zo_tm_need(const zo_tm_need_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_NEED);
    put(&f, m->cursor, 4u);
    put(&f, m->offset, 4u);
    put(&f, m->count, 4u);
    put(&f, m->total, 4u);
    put(&f, m->window, 2u);
    finish(&f, NULL, 0u);
}

/* --- boundary checksum */
void zo_tm_boundary(const zo_tm_boundary_t *m)
{
    frame_t f;
    begin(&f, ZO_TM_BOUNDARY);
    put(&f, m->crc32, 4u);
    put(&f, m->expected_crc32, 4u);
    put(&f, m->bytes, 4u);
    put(&f, m->boundary_flags, 1u);
    finish(&f, NULL, 0u);
}

void zo_tm_weights(uint32_t tensor, uint8_t part, const void *data, uint32_t total)
{
    const uint8_t *bytes = (const uint8_t *)data;
    uint32_t offset = 0u;
    do {
        uint32_t n = total - offset;
        if (n > ZO_TM_WEIGHTS_CHUNK) {
            n = ZO_TM_WEIGHTS_CHUNK;
        }
        frame_t f;
        begin(&f, ZO_TM_WEIGHTS);
        put(&f, tensor, 4u);
        put(&f, part, 1u);
        put(&f, offset, 4u);
        put(&f, total, 4u);
        finish(&f, n ? bytes + offset : NULL, n); /* data may be NULL when total is 0 */
        offset += n;
    } while (offset < total);
}

void zo_tm_checkpoint(uint32_t step, uint32_t offset, uint32_t total, const uint8_t *data, uint32_t n)
{
    frame_t f;
    begin(&f, ZO_TM_CHECKPOINT);
    put(&f, step, 4u);
    put(&f, offset, 4u);
    put(&f, total, 4u);
    finish(&f, n ? data : NULL, n);
}

void zo_tm_log(const char *text)
{
    uint32_t n = 0u; /* bounded strlen: never scans past what can be sent */
    while (n < ZO_TM_MAX_PAYLOAD && text[n] != '\0') {
        ++n;
    }
    frame_t f;
    begin(&f, ZO_TM_LOG);
    finish(&f, (const uint8_t *)text, n);
}
