/* zo_checkpoint.c - checkpoint and resume of the training loop: the image (its layout is in
 * zo_port_checkpoint.h), sent in chunks, restored from chunks (a restore command, or the port's
 * stored image at start-up), or got and put whole (zo_app.h).  Rules: docs/training.md
 * "Checkpoint and resume". */
#include <string.h>

#include "zo_port.h"
#include "zo_telemetry.h"
#include "zo_trainer_internal.h"

static uint32_t trainable_bytes(const zo_train_model_t *m)
{
    uint32_t n = 0u;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        n += zo_trainable_bytes(tt);
        n += tt->residual != NULL ? (uint32_t)tt->count : 0u;
    }
    return n;
}

uint32_t zo_ckpt_total(const zo_train_model_t *m)
{
    return ZO_CKPT_HEAD_BYTES + 2u * trainable_bytes(m) + m->model_state_bytes;
}

/* Where byte `offset` of the image lives (header and state, a tensor's values or residuals, the
 * snapshot, the model's state), and how many bytes follow it there; NULL past the end. */
static uint8_t *ckpt_at(trainer_t *tr, uint32_t offset, uint32_t *avail)
{
    const zo_train_model_t *m = tr->m;
    if (offset < ZO_CKPT_HEAD_BYTES) {
        *avail = ZO_CKPT_HEAD_BYTES - offset;
        return tr->ck_head + offset;
    }
    offset -= ZO_CKPT_HEAD_BYTES;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        uint32_t bytes = zo_trainable_bytes(tt);
        if (offset < bytes) {
            *avail = bytes - offset;
            return (uint8_t *)tt->values + offset;
        }
        offset -= bytes;
        if (tt->residual != NULL) {
            if (offset < (uint32_t)tt->count) {
                *avail = (uint32_t)tt->count - offset;
                return (uint8_t *)tt->residual + offset;
            }
            offset -= (uint32_t)tt->count;
        }
    }
    if (offset < trainable_bytes(m)) {
        *avail = trainable_bytes(m) - offset;
        return m->snapshot + offset;
    }
    offset -= trainable_bytes(m);
    if (offset < m->model_state_bytes) {
        *avail = m->model_state_bytes - offset;
        return (uint8_t *)m->model_state + offset;
    }
    *avail = 0u;
    return NULL;
}

/* n bytes of the image at `offset` to dst. */
static void ckpt_read(trainer_t *tr, uint32_t offset, uint8_t *dst, uint32_t n)
{
    while (n > 0u) {
        uint32_t avail;
        const uint8_t *p = ckpt_at(tr, offset, &avail);
        uint32_t k = n < avail ? n : avail;
        memcpy(dst, p, k);
        offset += k;
        dst += k;
        n -= k;
    }
}

/* n bytes from src into the image at `offset` (the caller keeps offset + n within it). */
static void ckpt_write(trainer_t *tr, uint32_t offset, const uint8_t *src, uint32_t n)
{
    while (n > 0u) {
        uint32_t avail;
        uint8_t *p = ckpt_at(tr, offset, &avail);
        uint32_t k = n < avail ? n : avail;
        memcpy(p, src, k);
        offset += k;
        src += k;
        n -= k;
    }
}

static uint32_t ckpt_body_crc(trainer_t *tr)
{
    uint32_t crc = 0u, offset = ZO_CKPT_HEADER_BYTES;
    const uint32_t total = zo_ckpt_total(tr->m);
    while (offset < total) {
        uint32_t avail;
        const uint8_t *p = ckpt_at(tr, offset, &avail);
        crc = zo_tm_crc32(crc, p, avail);
        offset += avail;
    }
    return crc;
}

static void put_le(uint8_t *p, uint32_t v, uint32_t bytes)
{
    for (uint32_t k = 0; k < bytes; ++k) {
        p[k] = (uint8_t)(v >> (8u * k));
    }
}

static uint32_t get_le(const uint8_t *p, uint32_t bytes)
{
    uint32_t v = 0u;
    for (uint32_t k = 0; k < bytes; ++k) {
        v |= (uint32_t)p[k] << (8u * k);
    }
    return v;
}

/* The image's header and state into tr->ck_head (the tensors and the snapshot are read in place);
 * returns the image's size. */
static uint32_t ckpt_build_head(trainer_t *tr, uint32_t t, int last_eval, float best_loss, uint32_t rollbacks,
                                float m2_calib)
{
    const zo_train_model_t *m = tr->m;
    zo_ckpt_state_t s;
    memset(&s, 0, sizeof s); /* padding too: the same state gives the same bytes */
    s.sched = tr->sched;
    s.lr1 = tr->lr1;
    s.best_loss = best_loss;
    s.m2_calib = m2_calib;
    s.step = t;
    s.last_eval = (uint32_t)last_eval;
    s.sat_run = tr->sat_run;
    s.zero_run = tr->zero_run;
    s.snapshot_step = tr->snapshot_step;
    s.rollbacks = rollbacks;
    s.prefix_passes = tr->prefix_passes;
    s.suffix_passes = tr->suffix_passes;
    s.eval_passes = tr->eval_passes;
    uint8_t *h = tr->ck_head;
    const uint32_t total = zo_ckpt_total(m);
    memcpy(h + ZO_CKPT_HEADER_BYTES, &s, sizeof s);
    memcpy(h, ZO_CKPT_MAGIC, 4u);
    put_le(h + ZO_CKPT_AT_VERSION, ZO_CKPT_VERSION, 2u);
    put_le(h + ZO_CKPT_AT_STATE_BYTES, (uint32_t)sizeof s, 2u);
    memcpy(h + ZO_CKPT_AT_MODEL, m->model_sha256, 8u);
    memcpy(h + ZO_CKPT_AT_OPTIONS, m->options_sha256, 8u);
    put_le(h + ZO_CKPT_AT_STEP, t, 4u);
    put_le(h + ZO_CKPT_AT_BODY_BYTES, total - ZO_CKPT_HEADER_BYTES, 4u);
    put_le(h + ZO_CKPT_AT_CRC, ckpt_body_crc(tr), 4u);
    return total;
}

/* The run's checkpoint between steps, in telemetry chunks, each also offered to the port's store. */
void zo_ckpt_send(run_t *r)
{
    trainer_t *tr = &r->tr;
    const uint32_t t = r->t;
    const uint32_t total = ckpt_build_head(tr, t, r->last_eval, r->best_loss, r->rollbacks, r->m2_calib);
    zo_tm_updates_flush(); /* the log holds every step before the checkpoint: a resume replays */
    uint8_t chunk[ZO_TM_WEIGHTS_CHUNK];
    for (uint32_t offset = 0u; offset < total;) {
        uint32_t n = total - offset < ZO_TM_WEIGHTS_CHUNK ? total - offset : ZO_TM_WEIGHTS_CHUNK;
        ckpt_read(tr, offset, chunk, n);
        zo_tm_checkpoint(t, offset, total, chunk, n);
        zo_port_checkpoint_save(offset, chunk, n, total);
        offset += n;
    }
}

/* ZO_CKPT_OK if the header at h is this build's, else a ZO_CKPT_* code and *why. */
static int ckpt_header_problem(const trainer_t *tr, const uint8_t *h, uint32_t total, const char **why)
{
    const zo_train_model_t *m = tr->m;
    if (memcmp(h, ZO_CKPT_MAGIC, 4u) != 0 || get_le(h + ZO_CKPT_AT_VERSION, 2u) != ZO_CKPT_VERSION
        || get_le(h + ZO_CKPT_AT_STATE_BYTES, 2u) != (uint32_t)sizeof(zo_ckpt_state_t)) {
        *why = "checkpoint refused: not a checkpoint of this firmware's format";
        return ZO_CKPT_BAD;
    }
    if (memcmp(h + ZO_CKPT_AT_MODEL, m->model_sha256, 8u) != 0) {
        *why = "checkpoint refused: it was taken by a run of another model";
        return ZO_CKPT_OTHER_MODEL;
    }
    if (memcmp(h + ZO_CKPT_AT_OPTIONS, m->options_sha256, 8u) != 0) {
        *why = "checkpoint refused: it was taken by a build with other training options or data";
        return ZO_CKPT_OTHER_BUILD;
    }
    if (total != zo_ckpt_total(m) || get_le(h + ZO_CKPT_AT_BODY_BYTES, 4u) != total - ZO_CKPT_HEADER_BYTES) {
        *why = "checkpoint refused: its size does not match this build";
        return ZO_CKPT_BAD;
    }
    return ZO_CKPT_OK;
}

/* NULL if the header at h is this build's, else why not. */
static const char *ckpt_check_header(const trainer_t *tr, const uint8_t *h, uint32_t total)
{
    const char *why = NULL;
    (void)ckpt_header_problem(tr, h, total, &why);
    return why;
}

/* A body that fails its CRC after it overwrote the trainable state: nothing to go on with. */
static _Noreturn void ckpt_broken(const char *why)
{
    zo_tm_log(why);
    zo_port_exit(3);
}

/* One restore chunk (u32 offset, u32 total, data): the header is checked before anything is
 * written; the chunks must come in order (a repeat of the last one is ignored); the last one
 * checks the body's CRC and hands the state to the loop. */
uint8_t zo_ckpt_restore_chunk(trainer_t *tr, const zo_cmd_t *c)
{
    if (c->len < ZO_CMD_SIZE_RESTORE) {
        zo_tm_log("restore refused: a chunk needs offset and total");
        return ZO_TM_ACK_REFUSED;
    }
    zo_cmd_restore_t head;
    zo_cmd_restore_read(c->payload, &head);
    const uint32_t offset = head.offset, total = head.total;
    const uint32_t n = (uint32_t)c->len - ZO_CMD_SIZE_RESTORE;
    if (tr->ck_restoring && offset == tr->ck_last && offset + n == tr->ck_next) {
        return ZO_TM_ACK_IGNORED; /* the host sent the last chunk again (its ack was lost) */
    }
    if (offset == 0u) {
        const char *why = n < ZO_CKPT_HEADER_BYTES ? "checkpoint refused: the first chunk must hold the header"
                                                   : ckpt_check_header(tr, c->payload + ZO_CMD_SIZE_RESTORE, total);
        if (why != NULL) {
            zo_tm_log(why);
            if (tr->ck_restoring) {
                ckpt_broken("restore broken off after part of it was written: reset the device");
            }
            return ZO_TM_ACK_REFUSED;
        }
        tr->ck_restoring = 1;
        tr->ck_next = 0u;
    } else if (!tr->ck_restoring || offset != tr->ck_next || total != zo_ckpt_total(tr->m)) {
        if (tr->ck_restoring) {
            ckpt_broken("restore broken off (a chunk out of order) after part of it was written: reset the device");
        }
        zo_tm_log("restore refused: no restore in progress (send the checkpoint from offset 0)");
        return ZO_TM_ACK_REFUSED;
    }
    if (n > total - offset) {
        ckpt_broken("restore broken off (a chunk past the end) after part of it was written: reset the device");
    }
    ckpt_write(tr, offset, c->payload + ZO_CMD_SIZE_RESTORE, n);
    tr->ck_last = offset;
    tr->ck_next = offset + n;
    if (tr->ck_next == total) {
        tr->ck_restoring = 0;
        if (ckpt_body_crc(tr) != get_le(tr->ck_head + ZO_CKPT_AT_CRC, 4u)) {
            ckpt_broken("checkpoint refused: its CRC does not match after it was written: reset the device");
        }
        tr->ck_restored = 1;
    }
    return ZO_TM_ACK_OK;
}

/* A checkpoint the port kept (zo_port_checkpoint_load), restored chunk by chunk like a restore
 * command; 1 when the loop starts from it.  A stored image of another build is reported and
 * left alone. */
int zo_ckpt_load_stored(trainer_t *tr)
{
    const uint32_t total = zo_ckpt_total(tr->m);
    zo_cmd_t c;
    c.type = ZO_CMD_RESTORE;
    c.seq = 0u;
    uint8_t head[ZO_CKPT_HEADER_BYTES];
    if (zo_port_checkpoint_load(0u, head, ZO_CKPT_HEADER_BYTES) != ZO_CKPT_HEADER_BYTES) {
        return 0;
    }
    const char *why = ckpt_check_header(tr, head, total);
    if (why != NULL) {
        zo_tm_log(why); /* the stored image is left alone; the run starts afresh */
        return 0;
    }
    for (uint32_t offset = 0u; offset < total;) {
        const uint32_t room = ZO_CMD_MAX_PAYLOAD - ZO_CMD_SIZE_RESTORE;
        uint32_t n = total - offset < room ? total - offset : room;
        if (zo_port_checkpoint_load(offset, c.payload + ZO_CMD_SIZE_RESTORE, n) != n) {
            ckpt_broken("the stored checkpoint ends early after part of it was written: reset the device");
        }
        const zo_cmd_restore_t head = {offset, total};
        zo_cmd_restore_write(c.payload, &head);
        c.len = (uint16_t)(n + ZO_CMD_SIZE_RESTORE);
        (void)zo_ckpt_restore_chunk(tr, &c);
        offset += n;
    }
    zo_tm_log("resumed from the stored checkpoint");
    return 1;
}


/* No checkpoint kept unless the port keeps them (zo_port.h). */
__attribute__((weak)) void zo_port_checkpoint_save(uint32_t offset, const uint8_t *data, uint32_t n, uint32_t total)
{
    (void)offset;
    (void)data;
    (void)n;
    (void)total;
}

__attribute__((weak)) uint32_t zo_port_checkpoint_load(uint32_t offset, uint8_t *data, uint32_t n)
{
    (void)offset;
    (void)data;
    (void)n;
    return 0u;
}


/* The loop's state from a restored image's (tr->ck_head; the tensors are already in place). */
void zo_ckpt_take_state(run_t *r)
{
    trainer_t *tr = &r->tr;
    zo_ckpt_state_t s;
    memcpy(&s, tr->ck_head + ZO_CKPT_HEADER_BYTES, sizeof s);
    tr->sched = s.sched;
    tr->lr1 = s.lr1;
    tr->sat_run = s.sat_run;
    tr->zero_run = s.zero_run;
    tr->snapshot_step = s.snapshot_step;
    tr->prefix_passes = s.prefix_passes;
    tr->suffix_passes = s.suffix_passes;
    tr->eval_passes = s.eval_passes;
    r->t = s.step;
    r->last_eval = (int)s.last_eval;
    r->best_loss = s.best_loss;
    r->rollbacks = s.rollbacks;
    r->m2_calib = s.m2_calib;
    r->ck_sent = r->t;
    tr->ck_restored = 0;
    zo_tm_updates_resume(r->t); /* the update log says where its chain continues, and with what */
    zo_send_crc(tr, r->t);
}

/* The run's image, whole (zo_train_checkpoint_get). */
void zo_ckpt_get(run_t *r, uint8_t *image)
{
    const uint32_t total = ckpt_build_head(&r->tr, r->t, r->last_eval, r->best_loss, r->rollbacks, r->m2_calib);
    ckpt_read(&r->tr, 0u, image, total);
}

/* A whole image (zo_train_checkpoint_put): checked whole before anything is written, then taken
 * into the run; ZO_CKPT_OK, or why not (a log frame says it and the run is untouched). */
int zo_ckpt_put(run_t *r, const uint8_t *image, uint32_t n)
{
    trainer_t *tr = &r->tr;
    const char *why = "checkpoint refused: it is shorter than a checkpoint header";
    int problem = n < ZO_CKPT_HEADER_BYTES ? ZO_CKPT_BAD : ckpt_header_problem(tr, image, n, &why);
    if (problem == ZO_CKPT_OK
        && zo_tm_crc32(0u, image + ZO_CKPT_HEADER_BYTES, n - ZO_CKPT_HEADER_BYTES)
               != get_le(image + ZO_CKPT_AT_CRC, 4u)) {
        why = "checkpoint refused: its CRC does not match (a damaged copy)";
        problem = ZO_CKPT_BAD;
    }
    if (problem != ZO_CKPT_OK) {
        zo_tm_log(why);
        return problem;
    }
    ckpt_write(tr, 0u, image, n);
    zo_ckpt_take_state(r);
    return ZO_CKPT_OK;
}
