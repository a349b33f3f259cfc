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

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_TM_VERSION       3u
#define ZO_TM_SYNC0         0xA5u
#define ZO_TM_SYNC1         0x5Au
#define ZO_TM_MAX_PAYLOAD   1024u /* bytes; longer log text is truncated */
#define ZO_TM_WEIGHTS_CHUNK 512u  /* data bytes per weights frame, at most */

/* Frame types. */
#define ZO_TM_HELLO   1u
#define ZO_TM_STEP    2u
#define ZO_TM_EVAL    3u
#define ZO_TM_EVENT   4u
#define ZO_TM_DONE    5u
#define ZO_TM_WEIGHTS 6u
#define ZO_TM_LOG     7u
#define ZO_TM_STATUS  8u /* answer to a status command (zo_command.h) */
#define ZO_TM_ACK     9u /* one per command received */
#define ZO_TM_NEED    10u /* --data-source stream: the device asks for samples (zo_stream.h) */
/* --- checkpoint and resume */
#define ZO_TM_CHECKPOINT 11u /* a chunk of a checkpoint image (zo_port_checkpoint.h, zo_trainer.h) */
/* --- boundary checksum */
#define ZO_TM_BOUNDARY 12u /* CRC-32 of the boundary activations of the first test sample, once after hello */
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

/* zo_tm_event_t.code of ZO_TM_EV_LR events. */
#define ZO_TM_LR_CALIBRATED 0u /* value: the auto lr_1; aux: calibration steps */
#define ZO_TM_LR_TRIAL      1u /* value: a candidate's validation loss (+inf: its guard tripped); aux: j, lr_1 * 2^j (int32) */
#define ZO_TM_LR_CHOSEN     2u /* value: the lr_1 the trial chose; aux: the trial's steps */

/* zo_tm_event_t.code of ZO_TM_EV_ROLLBACK events: why the trainer rolled back. */
#define ZO_TM_ROLLBACK_GUARD 0u /* saturated logits or no loss differences for guard_steps steps */
#define ZO_TM_ROLLBACK_LOSS  1u /* validation loss above best * guard_loss + guard_loss_z * SE */

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

/* Payload structs: fields in wire order (the struct layout itself is never sent).
 * Times are zo_port_time_us() values filled in by the caller. */
typedef struct {
    uint32_t seed;
    uint16_t batch;
    uint16_t classes;
    uint32_t n_train;
    uint32_t n_test;
    uint32_t trainable_params;
    uint8_t scheduler;     /* 0 fixed, 1 plateau, 2 critical, 3 adazeta */
    uint8_t rounding;      /* zo_rounding_t: 0 split16, 1 nearest, 2 stochastic */
    uint8_t density_log2;
    uint8_t lr_auto;       /* 1: lr = auto (calibrated on the device) */
    float lr;
    uint32_t max_steps;
    uint64_t budget;       /* prefix + suffix sample-passes */
    uint16_t q_max;
    uint16_t n_tensors;    /* trainable tensors */
    uint8_t model_sha256[8]; /* first 8 bytes of the model file's SHA-256 */
    uint8_t loss_kind;     /* zo_loss_t: 0 softmax-ce, 1 sigmoid-bce, 2 mse */
    uint8_t headroom;      /* bits the trained layers were re-quantized with at build time (--headroom) */
} zo_tm_hello_t;

typedef struct {
    uint32_t step;
    uint16_t q;
    uint8_t state;         /* scheduler state id (docs/training.md, Schedulers) */
    uint8_t flags;         /* ZO_TM_FLAG_* */
    float lr;
    float loss;
    float m2;
    float v;
    float zero_frac;
    float sat_frac;
    uint64_t prefix_passes;
    uint64_t suffix_passes;
    uint64_t time_us;
} zo_tm_step_t;

typedef struct {
    uint32_t step;
    uint32_t correct;
    uint32_t count;
    float accuracy;
    float loss;
    uint64_t prefix_passes;
    uint64_t suffix_passes;
    uint64_t eval_passes;
    uint64_t time_us;
    uint32_t val_correct;  /* the validation split (correct, count, accuracy, loss above: the test set) */
    uint32_t val_count;
    float val_accuracy;
    float val_loss;
} zo_tm_eval_t;

typedef struct {
    uint32_t step;
    uint8_t kind;          /* ZO_TM_EV_* */
    uint8_t code;          /* scheduler event code */
    uint8_t state_from;
    uint8_t state_to;
    uint16_t q_from;
    uint16_t q_to;
    float value;
    uint32_t aux;
} zo_tm_event_t;

typedef struct {
    uint32_t steps;
    uint8_t reason;        /* ZO_TM_DONE_* */
    uint64_t prefix_passes;
    uint64_t suffix_passes;
    uint64_t time_us;
} zo_tm_done_t;

typedef struct {
    uint32_t step;         /* steps completed */
    uint16_t q;            /* q of the next step */
    uint8_t state;         /* scheduler state id */
    uint8_t paused;        /* 1 while paused by a command */
    uint8_t calibrating;   /* 1 while the next step calibrates lr */
    float lr;              /* lr of the next step (0 while calibrating), as in step frames */
    uint64_t prefix_passes;
    uint64_t suffix_passes;
    uint64_t eval_passes;
    uint64_t time_us;
    uint8_t model_sha256[8]; /* as in hello: identifies the model after a late attach */
    uint8_t headroom;      /* as in hello: the scales of a weights dump after a late attach */
} zo_tm_status_t;

typedef struct {
    uint32_t step;         /* steps completed when the command was handled */
    uint16_t command_seq;  /* the command frame's seq */
    uint8_t command;       /* its type */
    uint8_t result;        /* ZO_TM_ACK_* */
} zo_tm_ack_t;

/* --data-source stream: the samples the device asks for (zo_stream.h). */
typedef struct {
    uint32_t cursor;       /* the stream index of the sample wanted next */
    uint32_t offset;       /* bytes of it already received */
    uint32_t count;        /* samples wanted before the next step, that one included */
    uint32_t total;        /* bytes of one sample record */
    uint16_t window;       /* bytes the device can take in flight (its receive buffer) */
} zo_tm_need_t;

/* --- boundary checksum */
typedef struct {
    uint32_t crc32;        /* zlib's CRC-32 of the boundary bytes (feature-cache order) */
    uint32_t expected_crc32; /* the host simulation's (zoflash's C prefix), with ZO_TM_BOUNDARY_EXPECTED */
    uint32_t bytes;        /* boundary bytes per sample */
    uint8_t boundary_flags; /* ZO_TM_BOUNDARY_* */
} zo_tm_boundary_t;

/* 0: send nothing from now on (the library form without telemetry, zo_app.h); 1 (the default):
 * send. */
void zo_tm_enable(int on);

/* Restart the sequence counter at 0 (it starts there; call again only for a new stream). */
void zo_tm_reset(void);

/* zlib-compatible CRC-32: zo_tm_crc32(0, p, n) == zlib.crc32(p); chainable like zlib's.  (Declared in
 * zo_port.h too, with zo_tm_log: a port may call both.) */
uint32_t zo_tm_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

void zo_tm_hello(const zo_tm_hello_t *m);
void zo_tm_step(const zo_tm_step_t *m);
void zo_tm_eval(const zo_tm_eval_t *m);
void zo_tm_event(const zo_tm_event_t *m);
void zo_tm_done(const zo_tm_done_t *m);
void zo_tm_status(const zo_tm_status_t *m);
void zo_tm_ack(const zo_tm_ack_t *m);
void zo_tm_need(const zo_tm_need_t *m);
void zo_tm_boundary(const zo_tm_boundary_t *m); /* --- boundary checksum */

/* The `total` bytes at `data` (as stored in memory) as frames of at most ZO_TM_WEIGHTS_CHUNK
 * data bytes, in offset order; total == 0 still sends one (empty) frame. */
void zo_tm_weights(uint32_t tensor, uint8_t part, const void *data, uint32_t total);

/* One chunk (n <= ZO_TM_WEIGHTS_CHUNK bytes at `offset` of a `total`-byte image) of the checkpoint
 * taken after `step` steps. */
void zo_tm_checkpoint(uint32_t step, uint32_t offset, uint32_t total, const uint8_t *data, uint32_t n);

/* NUL-terminated UTF-8 text, truncated to ZO_TM_MAX_PAYLOAD bytes. */
void zo_tm_log(const char *text);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TELEMETRY_H */
