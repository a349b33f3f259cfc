/* zo_port_checkpoint.h - the checkpoint image as a port's store sees it (docs/training.md
 * "Checkpoint and resume").  Static file, copied verbatim into training bundles.
 *
 * A port that keeps checkpoints (the hooks zo_port_checkpoint_save/load of zo_port.h) only needs
 * the header, to tell a complete image from a torn one and the newest from an older one: it
 * never looks inside the body.  The trainer (zo_checkpoint.c) writes and checks the same layout.
 *
 * The image: a ZO_CKPT_HEADER_BYTES header (little-endian: magic "ZOCK", u16 format version, u16
 * state bytes, model_sha256[8], options_sha256[8], u32 step, u32 body bytes, u32 CRC-32 of the
 * body), then the body: the trainer state (zo_ckpt_state_t of zo_trainer.h as stored in memory,
 * so an image belongs to one firmware build), every trainable tensor's values and residuals in
 * tensor order, the snapshot (the best state by validation), and the model's state (variable
 * tensors; none for a stateless model).  The CRC is zo_tm_crc32's
 * (zo_port.h), chained over the body from 0.
 */
#ifndef ZO_PORT_CHECKPOINT_H
#define ZO_PORT_CHECKPOINT_H

#define ZO_CKPT_MAGIC "ZOCK"
#define ZO_CKPT_VERSION 1u
#define ZO_CKPT_HEADER_BYTES 36u

/* byte offsets of the header's fields (the magic is at 0) */
#define ZO_CKPT_AT_VERSION 4u     /* u16 */
#define ZO_CKPT_AT_STATE_BYTES 6u /* u16: sizeof(zo_ckpt_state_t) */
#define ZO_CKPT_AT_MODEL 8u       /* model_sha256[8] */
#define ZO_CKPT_AT_OPTIONS 16u    /* options_sha256[8] */
#define ZO_CKPT_AT_STEP 24u       /* u32: the steps done */
#define ZO_CKPT_AT_BODY_BYTES 28u /* u32: the image's size is ZO_CKPT_HEADER_BYTES + this */
#define ZO_CKPT_AT_CRC 32u        /* u32: CRC-32 of the body */

#endif /* ZO_PORT_CHECKPOINT_H */
