/* zo_stream.h - training samples fed by the host over the serial link (--data-source stream).
 *
 * Static file, copied verbatim into training bundles; rules in docs/training.md, "Data sources".
 * The device keeps a ring of the last `slots` samples the host sent: stream sample k (k = 0, 1,
 * ... in arrival order) lives in slot k % slots.  Before training step t the trainer waits until
 * samples [0, slots + t * refresh) have arrived, so the ring then holds exactly the samples
 * [t * refresh, slots + t * refresh) and the minibatch sampler (zo_sample_index over `slots`)
 * sees the same data whatever the link's timing: the records depend only on the arrival order.
 *
 * The exchange is stop-and-wait: the device sends a `need` telemetry frame (its cursor, the bytes
 * of that sample it holds, how many samples it wants, its receive window) and the host answers
 * with one `sample` command frame (ZO_CMD_SAMPLE) of at most `window` bytes: the next chunk of
 * the sample at the cursor.  A chunk that is not the one asked for (a duplicate, a stale resend)
 * is ignored; a need with no answer within ZO_STREAM_TIMEOUT_US is sent again, so a frame lost to
 * corruption is resent.  Sample record on the wire: the input_bytes of the quantized input, then,
 * for mse with targets, `classes` little-endian float32 targets.
 */
#ifndef ZO_STREAM_H
#define ZO_STREAM_H

#include <stdint.h>

#include "zo_command.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_STREAM_TIMEOUT_US 200000u /* a need unanswered this long is sent again: a 512-byte window takes 44 ms at 115200 baud */
#define ZO_STREAM_IDLE_US 20000u     /* an answer this late: the device sleeps between polls (zo_port_idle) */

typedef struct {
    /* the ring (the generator allocates it) */
    int8_t *x;           /* slots * input_bytes */
    uint16_t *y;         /* slots labels, NULL for mse */
    float *t;            /* slots * classes mse targets, NULL without */
    uint32_t slots;
    uint32_t input_bytes;
    uint32_t target_bytes; /* classes * 4 with targets, else 0 */
    uint32_t refresh;      /* new samples before each step */
    /* state */
    uint32_t cursor;       /* samples complete */
    uint32_t got;          /* bytes of sample `cursor` received */
    uint32_t want;         /* the cursor the trainer waits for */
    uint64_t asked_us;     /* when the last need went out */
    int asked;             /* a need is outstanding */
    uint32_t accepted, ignored, resent; /* chunks taken, chunks ignored, needs sent again */
} zo_stream_t;

/* The cursor step t waits for: slots + t * refresh. */
uint32_t zo_stream_target(const zo_stream_t *s, uint32_t t);

/* Ask for samples up to `want` when no need is outstanding or the last one timed out (now_us:
 * zo_port_time_us()).  Returns 1 while samples are missing, 0 once the cursor reached `want`. */
int zo_stream_ask(zo_stream_t *s, uint32_t want, uint64_t now_us);

/* 1 when the outstanding need has waited ZO_STREAM_IDLE_US: the answer is late (lost?), so the
 * trainer may let the port sleep between polls; a prompt answer is never slowed down. */
int zo_stream_late(const zo_stream_t *s, uint64_t now_us);

/* A sample command frame: taken when it is the chunk asked for, else ignored. */
void zo_stream_accept(zo_stream_t *s, const zo_cmd_t *c);

#ifdef __cplusplus
}
#endif

#endif /* ZO_STREAM_H */
