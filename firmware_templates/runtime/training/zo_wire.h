/* zo_wire.h - the telemetry frame layouts: ids, payload sizes, payload structs.
 *
 * GENERATED from host/zoflash/spec/wire.py (LAYOUTS) by
 *     python -m zoflash.spec.wire_c firmware_templates/runtime/training
 * Do not edit: change LAYOUTS and regenerate (tests/test_spec.py fails when this file is stale).
 * Static file, copied verbatim into each bundle; the frame format is in zo_telemetry.h.
 */

#ifndef ZO_WIRE_H
#define ZO_WIRE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_TM_VERSION            3u
#define ZO_TM_SYNC0              0xA5u
#define ZO_TM_SYNC1              0x5Au
#define ZO_TM_HEAD               8u /* sync, version, type, seq, len */
#define ZO_TM_MAX_PAYLOAD        1024u /* bytes; longer log text is truncated */
#define ZO_TM_WEIGHTS_CHUNK      512u /* data bytes per weights frame, at most */
#define ZO_TM_UPDATES_CHUNK      256u /* tail bytes per updates frame, at most */

/* Update log: the header byte of each step in an updates frame's tail. */
#define ZO_TM_UPDATE_APPLIED     0x01u
#define ZO_TM_UPDATE_Q           0x02u
#define ZO_TM_UPDATE_RESTORE     0x04u
#define ZO_TM_UPDATE_SNAPSHOT    0x08u
#define ZO_TM_UPDATE_TRIAL       0x10u
#define ZO_TM_UPDATE_FACTORY     0x20u
#define ZO_TM_UPDATE_PACKED      0x40u
#define ZO_TM_UPDATE_RICE_K      0u /* packed coefficients: the exponent offset's low bits */

/* Frame types. */
#define ZO_TM_HELLO              1u
#define ZO_TM_STEP               2u
#define ZO_TM_EVAL               3u
#define ZO_TM_EVENT              4u
#define ZO_TM_DONE               5u
#define ZO_TM_WEIGHTS            6u
#define ZO_TM_LOG                7u
#define ZO_TM_STATUS             8u /* answer to a status command (zo_command.h) */
#define ZO_TM_ACK                9u /* one per command received */
#define ZO_TM_NEED               10u /* --data-source stream: the device asks for samples (zo_stream.h) */
#define ZO_TM_CHECKPOINT         11u /* a chunk of a checkpoint image (zo_trainer.h, ZO_CKPT_*) */
#define ZO_TM_BOUNDARY           12u /* CRC-32 of the boundary activations of the first test sample, once after hello */
#define ZO_TM_UPDATES            13u /* the applied updates of consecutive steps (update log, zoflash replay) */
#define ZO_TM_CONTINUAL          14u /* --mode continual: a decision or a serving window (zo_continual.h, ZO_CL_EV_*) */
#define ZO_TM_CRC                15u /* CRC-32 of the trainable tensors' values, before done and at the end of a push (zoflash push) */

/* Payload bytes of each frame (of the fields before the tail, for weights, log and checkpoint). */
#define ZO_TM_SIZE_HELLO         54u
#define ZO_TM_SIZE_STEP          56u
#define ZO_TM_SIZE_EVAL          68u
#define ZO_TM_SIZE_EVENT         20u
#define ZO_TM_SIZE_DONE          29u
#define ZO_TM_SIZE_WEIGHTS       13u
#define ZO_TM_SIZE_LOG           0u
#define ZO_TM_SIZE_STATUS        54u
#define ZO_TM_SIZE_ACK           8u
#define ZO_TM_SIZE_NEED          18u
#define ZO_TM_SIZE_CHECKPOINT    12u
#define ZO_TM_SIZE_BOUNDARY      13u
#define ZO_TM_SIZE_UPDATES       7u
#define ZO_TM_SIZE_CONTINUAL     46u
#define ZO_TM_SIZE_CRC           16u
#define ZO_TM_FIXED_MAX          68u /* the largest of them */

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

/* Boundary checksum: the first test sample's boundary activations, once after hello. */
typedef struct {
    uint32_t crc32;        /* zlib's CRC-32 of the boundary bytes (feature-cache order) */
    uint32_t expected_crc32; /* the host simulation's (zoflash's C prefix), with ZO_TM_BOUNDARY_EXPECTED */
    uint32_t bytes;        /* boundary bytes per sample */
    uint8_t boundary_flags; /* ZO_TM_BOUNDARY_* */
} zo_tm_boundary_t;

typedef struct {
    uint32_t sample;
    uint8_t decision;
    uint8_t slot;
    uint16_t generation;
    uint16_t episode;
    uint32_t steps;
    uint16_t better;
    uint16_t worse;
    uint32_t correct;
    uint32_t count;
    float statistic;
    uint64_t train_passes;
    uint64_t serve_passes;
} zo_tm_continual_t;

typedef struct {
    uint32_t step;
    uint32_t crc32;
    uint32_t bytes;
    uint32_t pushed;
} zo_tm_crc_t;

/* One frame each, fields in wire order (zo_wire.c). */
void zo_tm_hello(const zo_tm_hello_t *m);
void zo_tm_step(const zo_tm_step_t *m);
void zo_tm_eval(const zo_tm_eval_t *m);
void zo_tm_event(const zo_tm_event_t *m);
void zo_tm_done(const zo_tm_done_t *m);
void zo_tm_status(const zo_tm_status_t *m);
void zo_tm_ack(const zo_tm_ack_t *m);
void zo_tm_need(const zo_tm_need_t *m);
void zo_tm_boundary(const zo_tm_boundary_t *m);
void zo_tm_continual(const zo_tm_continual_t *m);
void zo_tm_crc(const zo_tm_crc_t *m);

/* Command payloads that begin with fixed fields (a data tail after them): their sizes, the
 * fields, and a reader and a writer each (zo_wire.c). */
#define ZO_CMD_SIZE_SAMPLE       14u /* the data tail follows */
#define ZO_CMD_SIZE_RESTORE      8u /* the data tail follows */
#define ZO_CMD_SIZE_PUSH         18u /* the data tail follows */
#define ZO_CMD_SIZE_ROUND        12u /* the data tail follows */
#define ZO_CMD_SIZE_MERGE        17u /* the data tail follows */
typedef struct {
    uint32_t index;
    uint16_t label;
    uint32_t offset;
    uint32_t total;
} zo_cmd_sample_t;
typedef struct {
    uint32_t offset;
    uint32_t total;
} zo_cmd_restore_t;
typedef struct {
    uint32_t step;
    uint16_t steps;
    uint8_t eps;
    uint8_t rounding;
    uint8_t density_log2;
    uint8_t last;
    uint32_t seed;
    uint32_t trainable_params;
} zo_cmd_push_t;
typedef struct {
    uint32_t round;
    uint32_t seed;
    uint32_t steps;
} zo_cmd_round_t;
typedef struct {
    uint32_t round;
    uint32_t seed;
    uint32_t step;
    uint16_t steps;
    uint16_t chunk;
    uint8_t last;
} zo_cmd_merge_t;
void zo_cmd_sample_read(const uint8_t *p, zo_cmd_sample_t *out);  /* p: ZO_CMD_SIZE_SAMPLE bytes */
void zo_cmd_sample_write(uint8_t *p, const zo_cmd_sample_t *m);
void zo_cmd_restore_read(const uint8_t *p, zo_cmd_restore_t *out);  /* p: ZO_CMD_SIZE_RESTORE bytes */
void zo_cmd_restore_write(uint8_t *p, const zo_cmd_restore_t *m);
void zo_cmd_push_read(const uint8_t *p, zo_cmd_push_t *out);  /* p: ZO_CMD_SIZE_PUSH bytes */
void zo_cmd_push_write(uint8_t *p, const zo_cmd_push_t *m);
void zo_cmd_round_read(const uint8_t *p, zo_cmd_round_t *out);  /* p: ZO_CMD_SIZE_ROUND bytes */
void zo_cmd_round_write(uint8_t *p, const zo_cmd_round_t *m);
void zo_cmd_merge_read(const uint8_t *p, zo_cmd_merge_t *out);  /* p: ZO_CMD_SIZE_MERGE bytes */
void zo_cmd_merge_write(uint8_t *p, const zo_cmd_merge_t *m);

#ifdef __cplusplus
}
#endif

#endif /* ZO_WIRE_H */
