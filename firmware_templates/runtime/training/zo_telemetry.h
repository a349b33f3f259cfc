/* zo_telemetry.h - binary telemetry frames from the training firmware to the host.
 *
 * Static file, copied verbatim into each bundle.  The wire format is specified in
 * docs/training.md, "Telemetry (protocol version 2)"; the host decoder and a byte-identical
 * Python encoder are in host/zoflash/monitor/telemetry.py and protocol.py (tests/test_telemetry.py
 * checks both); the ids below are those of host/zoflash/spec/training.py (tests/test_spec.py).
 *
 *     0xA5 0x5A | version u8 | type u8 | seq u16 | len u16 | payload[len] | crc32 u32
 *
 * Every field is packed little-endian byte by byte (no struct images), so the stream is the
 * same on any target.  Each zo_tm_* call writes whole frames through zo_port_write and bumps
 * the sequence number once per frame.  Not reentrant (one static sequence counter).
 */
#ifndef ZO_TELEMETRY_H
#define ZO_TELEMETRY_H

#include <stdint.h>

/* Frame type ids, payload sizes, payload structs and their encoders: zo_wire.h, generated from
 * the layouts of host/zoflash/spec/wire.py. */
#include "zo_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_TM_BOUNDARY_EXPECTED 0x01u /* zo_tm_boundary_t.boundary_flags: `expected_crc32` holds the host simulation's CRC */
#define ZO_TM_BOUNDARY_NPU      0x02u /* the prefix ran on the NPU (--npu) */

/* zo_tm_step_t.flags bits. */
#define ZO_TM_FLAG_CALIBRATING 0x01u
#define ZO_TM_FLAG_CENTRE      0x02u
#define ZO_TM_FLAG_DIVERGED    0x04u
#define ZO_TM_FLAG_TRIAL       0x08u /* a step of the lr trial: its update is undone after the trial */

/* zo_tm_event_t.kind. */
#define ZO_TM_EV_SCHEDULER 1u
#define ZO_TM_EV_LR        2u
#define ZO_TM_EV_ROLLBACK  3u
#define ZO_TM_EV_STOP      4u
#define ZO_TM_EV_ROUND     5u /* --mode fleet: a round's training ended; aux: its steps */

/* zo_tm_event_t.code of ZO_TM_EV_ROUND events. */
#define ZO_TM_ROUND_STEPS     0u /* all its steps */
#define ZO_TM_ROUND_ROLLBACKS 1u /* cut short by guard_max_rollbacks rollbacks: the weights are the global ones */

/* zo_tm_event_t.code of ZO_TM_EV_LR events. */
#define ZO_TM_LR_CALIBRATED 0u /* value: the auto lr_1; aux: calibration steps */
#define ZO_TM_LR_TRIAL      1u /* value: a candidate's validation loss (+inf: its guard tripped); aux: j, lr_1 * 2^j (int32) */
#define ZO_TM_LR_CHOSEN     2u /* value: the lr_1 the trial chose; aux: the trial's steps */

/* zo_tm_event_t.code of ZO_TM_EV_ROLLBACK events: why the trainer rolled back. */
#define ZO_TM_ROLLBACK_GUARD 0u /* saturated logits or no loss differences for guard_steps steps */
#define ZO_TM_ROLLBACK_LOSS  1u /* validation loss above best * guard_loss + guard_loss_z * SE */
#define ZO_TM_ROLLBACK_END   2u /* the run ended with a validation loss above best + guard_loss_z * SE */

/* zo_tm_done_t.reason. */
#define ZO_TM_DONE_STEPS     0u
#define ZO_TM_DONE_BUDGET    1u
#define ZO_TM_DONE_SCHEDULER 2u
#define ZO_TM_DONE_COMMAND   3u
#define ZO_TM_DONE_DEAD_ZONE 4u
#define ZO_TM_DONE_GUARD     5u

/* zo_tm_ack_t.result. */
#define ZO_TM_ACK_OK      0u
#define ZO_TM_ACK_IGNORED 1u /* nothing to do in this state (pause while paused, resume while running) */
#define ZO_TM_ACK_UNKNOWN 2u /* not a command this firmware knows */
#define ZO_TM_ACK_REFUSED 3u /* restore: a checkpoint of another model, options or format (a log frame says why) */

/* zo_tm_weights part. */
#define ZO_TM_PART_VALUES   0u
#define ZO_TM_PART_RESIDUAL 1u
#define ZO_TM_PART_BEST_VALUES 2u /* the snapshot: the best values by validation */

/* 0: send nothing from now on (the library form without telemetry, zo_app.h); 1 (the default):
 * send. */
void zo_tm_enable(int on);

/* Restart the sequence counter at 0 (it starts there; call again only for a new stream). */
void zo_tm_reset(void);

/* zlib-compatible CRC-32: zo_tm_crc32(0, p, n) == zlib.crc32(p); chainable like zlib's. */
uint32_t zo_tm_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

/* The `total` bytes at `data` (as stored in memory) as frames of at most ZO_TM_WEIGHTS_CHUNK
 * data bytes, in offset order; total == 0 still sends one (empty) frame. */
void zo_tm_weights(uint32_t tensor, uint8_t part, const void *data, uint32_t total);

/* One chunk (n <= ZO_TM_WEIGHTS_CHUNK bytes at `offset` of a `total`-byte image) of the checkpoint
 * taken after `step` steps. */
void zo_tm_checkpoint(uint32_t step, uint32_t offset, uint32_t total, const uint8_t *data, uint32_t n);

/* NUL-terminated UTF-8 text, truncated to ZO_TM_MAX_PAYLOAD bytes. */
void zo_tm_log(const char *text);

/* Update log (docs/training.md "Update log"): the applied updates, buffered into updates frames.
 * zo_tm_updates_begin(eps) empties the buffer; zo_tm_updates_step appends step t's entry (flags
 * ZO_TM_UPDATE_APPLIED with its q binary16 coefficients c16, or ZO_TM_UPDATE_TRIAL, or 0), sending
 * the buffered frame first when the entry does not fit; zo_tm_updates_mark ORs ZO_TM_UPDATE_RESTORE
 * or _SNAPSHOT into the last entry; zo_tm_updates_flush sends what is buffered. */
void zo_tm_updates_begin(uint8_t eps);
void zo_tm_updates_step(uint32_t step, uint8_t flags, uint32_t q, const uint16_t *c16);
int zo_tm_updates_mark(uint8_t flag); /* 0: no step held, nothing marked */
void zo_tm_updates_flush(void);
/* A checkpoint restored: the log's chain continues from `step` (the buffer flushed first, then an
 * updates frame of 0 steps at `step`; zoflash replay takes the steps before it from the run that
 * took the checkpoint). */
void zo_tm_updates_resume(uint32_t step);
/* Reads the entry at bit *pos of an updates tail data[0..bytes) (docs/training.md "Update log"):
 * its header into *flags, the q it states into *q (at most q_limit; else *q is the q in force, 0 for
 * none yet) and, when applied, its q coefficients into out (NULL: only checks), and moves *pos past
 * it; 0 when it does not decode (cut short, q 0 or above q_limit, applied without a q, an exponent
 * offset beyond 31 or below exponent 0). */
int zo_tm_updates_entry(const uint8_t *data, uint32_t bytes, uint32_t *pos, uint32_t q_limit, uint8_t *flags,
                        uint32_t *q, uint16_t *out);
/* Whether bit pos is the end of the tail data[0..bytes): fewer than 8 bits after it, all zero. */
int zo_tm_updates_end(const uint8_t *data, uint32_t bytes, uint32_t pos);

/* Frame building, for the encoders (zo_wire.c, the ones above): begin, put the fixed payload
 * little-endian in wire order, finish (which appends `tail`, the CRC, and sends).  Not for
 * application code. */
typedef struct {
    uint8_t b[ZO_TM_HEAD + ZO_TM_FIXED_MAX + 4u];
    uint32_t n;
} zo_tm_frame_t;

void zo_tm_begin(zo_tm_frame_t *f, uint32_t type);
void zo_tm_put(zo_tm_frame_t *f, uint64_t v, uint32_t bytes); /* the low `bytes` bytes of v */
void zo_tm_put_f32(zo_tm_frame_t *f, float x);
void zo_tm_put_bytes(zo_tm_frame_t *f, const uint8_t *p, uint32_t n);
void zo_tm_finish(zo_tm_frame_t *f, const uint8_t *tail, uint32_t tail_n);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TELEMETRY_H */
