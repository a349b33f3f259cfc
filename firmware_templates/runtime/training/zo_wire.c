/* zo_wire.c - the fixed-layout frame encoders (see zo_wire.h).
 *
 * GENERATED from host/zoflash/spec/wire.py (LAYOUTS) by
 *     python -m zoflash.spec.wire_c firmware_templates/runtime/training
 * Do not edit: change LAYOUTS and regenerate (tests/test_spec.py fails when this file is stale).
 * Static file, copied verbatim into each bundle; the frame format is in zo_telemetry.h.
 */

#include <stddef.h>

#include "zo_telemetry.h"

void zo_tm_hello(const zo_tm_hello_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_HELLO);
    zo_tm_put(&f, m->seed, 4u);
    zo_tm_put(&f, m->batch, 2u);
    zo_tm_put(&f, m->classes, 2u);
    zo_tm_put(&f, m->n_train, 4u);
    zo_tm_put(&f, m->n_test, 4u);
    zo_tm_put(&f, m->trainable_params, 4u);
    zo_tm_put(&f, m->scheduler, 1u);
    zo_tm_put(&f, m->rounding, 1u);
    zo_tm_put(&f, m->density_log2, 1u);
    zo_tm_put(&f, m->lr_auto, 1u);
    zo_tm_put_f32(&f, m->lr);
    zo_tm_put(&f, m->max_steps, 4u);
    zo_tm_put(&f, m->budget, 8u);
    zo_tm_put(&f, m->q_max, 2u);
    zo_tm_put(&f, m->n_tensors, 2u);
    zo_tm_put_bytes(&f, m->model_sha256, sizeof m->model_sha256);
    zo_tm_put(&f, m->loss_kind, 1u);
    zo_tm_put(&f, m->headroom, 1u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_step(const zo_tm_step_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_STEP);
    zo_tm_put(&f, m->step, 4u);
    zo_tm_put(&f, m->q, 2u);
    zo_tm_put(&f, m->state, 1u);
    zo_tm_put(&f, m->flags, 1u);
    zo_tm_put_f32(&f, m->lr);
    zo_tm_put_f32(&f, m->loss);
    zo_tm_put_f32(&f, m->m2);
    zo_tm_put_f32(&f, m->v);
    zo_tm_put_f32(&f, m->zero_frac);
    zo_tm_put_f32(&f, m->sat_frac);
    zo_tm_put(&f, m->prefix_passes, 8u);
    zo_tm_put(&f, m->suffix_passes, 8u);
    zo_tm_put(&f, m->time_us, 8u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_eval(const zo_tm_eval_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_EVAL);
    zo_tm_put(&f, m->step, 4u);
    zo_tm_put(&f, m->correct, 4u);
    zo_tm_put(&f, m->count, 4u);
    zo_tm_put_f32(&f, m->accuracy);
    zo_tm_put_f32(&f, m->loss);
    zo_tm_put(&f, m->prefix_passes, 8u);
    zo_tm_put(&f, m->suffix_passes, 8u);
    zo_tm_put(&f, m->eval_passes, 8u);
    zo_tm_put(&f, m->time_us, 8u);
    zo_tm_put(&f, m->val_correct, 4u);
    zo_tm_put(&f, m->val_count, 4u);
    zo_tm_put_f32(&f, m->val_accuracy);
    zo_tm_put_f32(&f, m->val_loss);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_event(const zo_tm_event_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_EVENT);
    zo_tm_put(&f, m->step, 4u);
    zo_tm_put(&f, m->kind, 1u);
    zo_tm_put(&f, m->code, 1u);
    zo_tm_put(&f, m->state_from, 1u);
    zo_tm_put(&f, m->state_to, 1u);
    zo_tm_put(&f, m->q_from, 2u);
    zo_tm_put(&f, m->q_to, 2u);
    zo_tm_put_f32(&f, m->value);
    zo_tm_put(&f, m->aux, 4u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_done(const zo_tm_done_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_DONE);
    zo_tm_put(&f, m->steps, 4u);
    zo_tm_put(&f, m->reason, 1u);
    zo_tm_put(&f, m->prefix_passes, 8u);
    zo_tm_put(&f, m->suffix_passes, 8u);
    zo_tm_put(&f, m->time_us, 8u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_status(const zo_tm_status_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_STATUS);
    zo_tm_put(&f, m->step, 4u);
    zo_tm_put(&f, m->q, 2u);
    zo_tm_put(&f, m->state, 1u);
    zo_tm_put(&f, m->paused, 1u);
    zo_tm_put(&f, m->calibrating, 1u);
    zo_tm_put_f32(&f, m->lr);
    zo_tm_put(&f, m->prefix_passes, 8u);
    zo_tm_put(&f, m->suffix_passes, 8u);
    zo_tm_put(&f, m->eval_passes, 8u);
    zo_tm_put(&f, m->time_us, 8u);
    zo_tm_put_bytes(&f, m->model_sha256, sizeof m->model_sha256);
    zo_tm_put(&f, m->headroom, 1u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_ack(const zo_tm_ack_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_ACK);
    zo_tm_put(&f, m->step, 4u);
    zo_tm_put(&f, m->command_seq, 2u);
    zo_tm_put(&f, m->command, 1u);
    zo_tm_put(&f, m->result, 1u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_need(const zo_tm_need_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_NEED);
    zo_tm_put(&f, m->cursor, 4u);
    zo_tm_put(&f, m->offset, 4u);
    zo_tm_put(&f, m->count, 4u);
    zo_tm_put(&f, m->total, 4u);
    zo_tm_put(&f, m->window, 2u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_boundary(const zo_tm_boundary_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_BOUNDARY);
    zo_tm_put(&f, m->crc32, 4u);
    zo_tm_put(&f, m->expected_crc32, 4u);
    zo_tm_put(&f, m->bytes, 4u);
    zo_tm_put(&f, m->boundary_flags, 1u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_continual(const zo_tm_continual_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_CONTINUAL);
    zo_tm_put(&f, m->sample, 4u);
    zo_tm_put(&f, m->decision, 1u);
    zo_tm_put(&f, m->slot, 1u);
    zo_tm_put(&f, m->generation, 2u);
    zo_tm_put(&f, m->episode, 2u);
    zo_tm_put(&f, m->steps, 4u);
    zo_tm_put(&f, m->better, 2u);
    zo_tm_put(&f, m->worse, 2u);
    zo_tm_put(&f, m->correct, 4u);
    zo_tm_put(&f, m->count, 4u);
    zo_tm_put_f32(&f, m->statistic);
    zo_tm_put(&f, m->train_passes, 8u);
    zo_tm_put(&f, m->serve_passes, 8u);
    zo_tm_finish(&f, NULL, 0u);
}

void zo_tm_crc(const zo_tm_crc_t *m)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_CRC);
    zo_tm_put(&f, m->step, 4u);
    zo_tm_put(&f, m->crc32, 4u);
    zo_tm_put(&f, m->bytes, 4u);
    zo_tm_put(&f, m->pushed, 4u);
    zo_tm_finish(&f, NULL, 0u);
}

static uint64_t zo_cmd_get(const uint8_t *p, uint32_t bytes)
{
    uint64_t v = 0u;
    for (uint32_t i = bytes; i-- > 0u;) {
        v = (v << 8) | p[i];
    }
    return v;
}

static void zo_cmd_set(uint8_t *p, uint64_t v, uint32_t bytes)
{
    for (uint32_t i = 0u; i < bytes; ++i) {
        p[i] = (uint8_t)(v >> (8u * i));
    }
}

void zo_cmd_sample_read(const uint8_t *p, zo_cmd_sample_t *out)
{
    out->index = (uint32_t)zo_cmd_get(p + 0, 4u);
    out->label = (uint16_t)zo_cmd_get(p + 4, 2u);
    out->offset = (uint32_t)zo_cmd_get(p + 6, 4u);
    out->total = (uint32_t)zo_cmd_get(p + 10, 4u);
}

void zo_cmd_sample_write(uint8_t *p, const zo_cmd_sample_t *m)
{
    zo_cmd_set(p + 0, m->index, 4u);
    zo_cmd_set(p + 4, m->label, 2u);
    zo_cmd_set(p + 6, m->offset, 4u);
    zo_cmd_set(p + 10, m->total, 4u);
}

void zo_cmd_restore_read(const uint8_t *p, zo_cmd_restore_t *out)
{
    out->offset = (uint32_t)zo_cmd_get(p + 0, 4u);
    out->total = (uint32_t)zo_cmd_get(p + 4, 4u);
}

void zo_cmd_restore_write(uint8_t *p, const zo_cmd_restore_t *m)
{
    zo_cmd_set(p + 0, m->offset, 4u);
    zo_cmd_set(p + 4, m->total, 4u);
}

void zo_cmd_push_read(const uint8_t *p, zo_cmd_push_t *out)
{
    out->step = (uint32_t)zo_cmd_get(p + 0, 4u);
    out->steps = (uint16_t)zo_cmd_get(p + 4, 2u);
    out->eps = (uint8_t)zo_cmd_get(p + 6, 1u);
    out->rounding = (uint8_t)zo_cmd_get(p + 7, 1u);
    out->density_log2 = (uint8_t)zo_cmd_get(p + 8, 1u);
    out->last = (uint8_t)zo_cmd_get(p + 9, 1u);
    out->seed = (uint32_t)zo_cmd_get(p + 10, 4u);
    out->trainable_params = (uint32_t)zo_cmd_get(p + 14, 4u);
}

void zo_cmd_push_write(uint8_t *p, const zo_cmd_push_t *m)
{
    zo_cmd_set(p + 0, m->step, 4u);
    zo_cmd_set(p + 4, m->steps, 2u);
    zo_cmd_set(p + 6, m->eps, 1u);
    zo_cmd_set(p + 7, m->rounding, 1u);
    zo_cmd_set(p + 8, m->density_log2, 1u);
    zo_cmd_set(p + 9, m->last, 1u);
    zo_cmd_set(p + 10, m->seed, 4u);
    zo_cmd_set(p + 14, m->trainable_params, 4u);
}

void zo_cmd_round_read(const uint8_t *p, zo_cmd_round_t *out)
{
    out->round = (uint32_t)zo_cmd_get(p + 0, 4u);
    out->seed = (uint32_t)zo_cmd_get(p + 4, 4u);
    out->steps = (uint32_t)zo_cmd_get(p + 8, 4u);
}

void zo_cmd_round_write(uint8_t *p, const zo_cmd_round_t *m)
{
    zo_cmd_set(p + 0, m->round, 4u);
    zo_cmd_set(p + 4, m->seed, 4u);
    zo_cmd_set(p + 8, m->steps, 4u);
}

void zo_cmd_merge_read(const uint8_t *p, zo_cmd_merge_t *out)
{
    out->round = (uint32_t)zo_cmd_get(p + 0, 4u);
    out->seed = (uint32_t)zo_cmd_get(p + 4, 4u);
    out->step = (uint32_t)zo_cmd_get(p + 8, 4u);
    out->steps = (uint16_t)zo_cmd_get(p + 12, 2u);
    out->chunk = (uint16_t)zo_cmd_get(p + 14, 2u);
    out->last = (uint8_t)zo_cmd_get(p + 16, 1u);
}

void zo_cmd_merge_write(uint8_t *p, const zo_cmd_merge_t *m)
{
    zo_cmd_set(p + 0, m->round, 4u);
    zo_cmd_set(p + 4, m->seed, 4u);
    zo_cmd_set(p + 8, m->step, 4u);
    zo_cmd_set(p + 12, m->steps, 2u);
    zo_cmd_set(p + 14, m->chunk, 2u);
    zo_cmd_set(p + 16, m->last, 1u);
}
