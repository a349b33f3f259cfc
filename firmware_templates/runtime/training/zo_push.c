/* zo_push.c - the trained tensors' checksum (the crc frame) and the push command: another run's
 * update log applied with this device's own update maths (zoflash push).  Rules: docs/training.md
 * "Update log" and "Commands". */
#include <string.h>

#include "zo_telemetry.h"
#include "zo_trainer_internal.h"

/* The push in progress: the chunk last taken (a repeat is harmless) and the next step expected. */
static uint32_t g_push_first, g_push_next;

/* CRC-32 of every trainable tensor's values in training order (int8 weights, int32 biases as the
 * device holds them: little-endian on every port), and their bytes (wire.py "crc"). */
uint32_t zo_tensors_crc(const zo_train_model_t *m, uint32_t *bytes)
{
    uint32_t crc = 0u;
    *bytes = 0u;
    for (int32_t k = 0; k < m->n_tensors; ++k) {
        const zo_trainable_t *tt = &m->tensors[k];
        const uint32_t n = zo_trainable_bytes(tt);
        crc = zo_tm_crc32(crc, (const uint8_t *)tt->values, n);
        *bytes += n;
    }
    return crc;
}

void zo_send_crc(const trainer_t *tr, uint32_t step)
{
    zo_tm_crc_t f;
    f.step = step;
    f.crc32 = zo_tensors_crc(tr->m, &f.bytes);
    f.pushed = g_push_next;
    zo_tm_crc(&f);
}

int zo_updates_fit(const uint8_t *data, uint32_t n, uint32_t steps, uint32_t q_limit, uint8_t allowed)
{
    uint32_t pos = 0u, q = 0u;
    for (uint32_t k = 0u; k < steps; ++k) {
        uint8_t flags;
        if (!zo_tm_updates_entry(data, n, &pos, q_limit, &flags, &q, NULL) || (flags & (uint8_t)~allowed) != 0u) {
            return 0;
        }
    }
    return zo_tm_updates_end(data, n, pos);
}

uint32_t zo_apply_entries(const trainer_t *tr, const uint8_t *data, uint32_t n, uint32_t first, uint32_t steps)
{
    const zo_train_model_t *m = tr->m;
    uint32_t pos = 0u, q = 0u, applied = 0u;
    for (uint32_t k = 0u; k < steps; ++k) {
        uint8_t flags;
        uint16_t c16[ZO_SCHED_Q_LIMIT];
        (void)zo_tm_updates_entry(data, n, &pos, ZO_SCHED_Q_LIMIT, &flags, &q, c16); /* fit: checked */
        if ((flags & ZO_TM_UPDATE_APPLIED) != 0u) {
            for (uint32_t i = 0u; i < q; ++i) {
                m->c[i] = zo_f32_from_f16(c16[i]);
            }
            zo_apply_update(tr, first + k, q);
            ++applied;
        }
        if ((flags & ZO_TM_UPDATE_RESTORE) != 0u) {
            zo_snapshot_copy(m, 1);
        }
        if ((flags & ZO_TM_UPDATE_SNAPSHOT) != 0u) {
            zo_snapshot_copy(m, 0);
        }
    }
    return applied;
}

static uint8_t refuse(const char *why)
{
    zo_tm_log(why);
    return ZO_TM_ACK_REFUSED;
}

uint8_t zo_push_chunk(run_t *r, const zo_cmd_t *c, int paused)
{
    trainer_t *tr = &r->tr;
    const zo_train_model_t *m = tr->m;
    const zo_train_config_t *cfg = tr->cfg;
    if (c->len < ZO_CMD_SIZE_PUSH) {
        return refuse("push refused: a chunk needs its header");
    }
    zo_cmd_push_t h;
    zo_cmd_push_read(c->payload, &h);
    const uint8_t *data = c->payload + ZO_CMD_SIZE_PUSH;
    const uint32_t n = (uint32_t)c->len - ZO_CMD_SIZE_PUSH;
    if (h.steps != 0u && g_push_next != 0u && h.step == g_push_first && h.step + h.steps == g_push_next) {
        if (h.last != 0u) {
            zo_send_crc(tr, r->t); /* the answer the lost ack came with */
        }
        return ZO_TM_ACK_IGNORED; /* the host sent the last chunk again (its ack was lost) */
    }
    if (!paused) {
        return refuse("push refused: the device is training; pause it first");
    }
    if (h.eps != cfg->eps || h.rounding != (uint8_t)cfg->rounding || h.density_log2 != cfg->density_log2
        || h.seed != cfg->seed || h.trainable_params != m->trainable_params) {
        return refuse("push refused: the run was trained with other options (seed, eps, rounding, density or "
                      "trained tensors) than this firmware's");
    }
    if (h.steps != 0u && h.step != g_push_next) {
        return refuse("push refused: a chunk out of order (the push starts at step 0 and goes on without a gap)");
    }
    const uint32_t q_limit = m->q_buffer < ZO_SCHED_Q_LIMIT ? m->q_buffer : ZO_SCHED_Q_LIMIT; /* c16 below */
    if (!zo_updates_fit(data, n, h.steps, q_limit, 0xFFu)) {
        return refuse("push refused: a chunk whose entries do not decode");
    }
    if (h.steps != 0u && h.step == 0u) {
        zo_snapshot_copy(m, 0); /* the run began with the snapshot of its base weights, as here */
    }
    (void)zo_apply_entries(tr, data, n, h.step, h.steps);
    if (h.steps != 0u) {
        g_push_first = h.step;
        g_push_next = h.step + h.steps;
    }
    if (h.last != 0u) {
        zo_send_crc(tr, r->t);
        if (h.steps != 0u && cfg->checkpoint_every != 0u) {
            zo_ckpt_send(r); /* the pushed weights are checkpointed like trained ones */
            r->ck_sent = r->t;
        }
    }
    return ZO_TM_ACK_OK;
}
