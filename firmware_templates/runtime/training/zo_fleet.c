/* zo_fleet.c - fleet learning (--mode fleet): the device trains in rounds the host commands and
 * takes the round's merged update log, so that every device of the fleet holds the same global
 * weights after each round.  Rules: docs/guides/fleet.md and docs/training.md "Commands".
 *
 * Between rounds the device holds (serves commands, trains nothing).  `round` makes its weights the
 * round's global weights (the snapshot: a rollback during the round goes back to them), evaluates
 * them, and trains `steps` steps along the directions of the round's seed.  Their update log goes
 * up as usual; the device holds again.  `merge` chunks then carry every device's updates of the
 * round (the host's merged log): chunk 0 restores the global weights first, each chunk applies its
 * entries with this device's own update maths and the directions of the chunk's seed, and the
 * last one makes the result the new global weights, answered with a crc frame. */
#include "zo_telemetry.h"
#include "zo_trainer_internal.h"

#define MERGED_CRC 0x80000000u /* wire.MERGED_CRC: a crc frame answering a merge */
#define ROUND_CRC  0x40000000u /* wire.ROUND_CRC: a crc frame answering a round (the weights it starts from) */

/* The merge in progress: its round and the next chunk expected; the last chunk taken (a repeat,
 * sent again when its ack was lost, is harmless). */
static uint32_t g_merge_round, g_merge_next, g_merge_applied;
static int g_merge_open;
static uint32_t g_merged;    /* the round of the last complete merge + 1 (0: none yet) */
static int g_local;          /* a round was trained and not merged since: the weights are not global */

static void send_fleet_crc(const run_t *r, uint32_t pushed)
{
    zo_tm_crc_t f;
    f.step = r->t;
    f.crc32 = zo_tensors_crc(r->tr.m, &f.bytes);
    f.pushed = pushed;
    zo_tm_crc(&f);
}

static uint8_t refuse(const char *why)
{
    zo_tm_log(why);
    return ZO_TM_ACK_REFUSED;
}

uint8_t zo_fleet_round(run_t *r, const zo_cmd_t *c)
{
    trainer_t *tr = &r->tr;
    if (!tr->cfg->fleet) {
        return refuse("round refused: this firmware was not built with --mode fleet");
    }
    if (!r->held) {
        return refuse("round refused: the device is training a round; wait for its updates");
    }
    if (c->len < ZO_CMD_SIZE_ROUND) {
        return refuse("round refused: the command needs its fields");
    }
    zo_cmd_round_t h;
    zo_cmd_round_read(c->payload, &h);
    if (h.steps == 0u) {
        return refuse("round refused: a round of 0 steps");
    }
    if (g_local) {
        zo_snapshot_copy(tr->m, 1); /* the last round was not merged here: back to the global weights */
    }
    g_local = 1;
    zo_snapshot_copy(tr->m, 0); /* the global weights: where a rollback of this round goes */
    tr->snapshot_step = r->t;
    send_fleet_crc(r, ROUND_CRC); /* the host uploads it with the round: the aggregator checks it is global */
    r->best_loss = zo_evaluate(tr, r->t).loss; /* the global weights on this device's data */
    r->last_eval = 1;
    tr->seed = h.seed;
    r->round_first = r->t;
    r->round_end = r->t + h.steps;
    r->rollbacks = 0; /* guard_max_rollbacks counts per round */
    r->held = 0;
    g_merge_open = 0;
    return ZO_TM_ACK_OK;
}


uint8_t zo_fleet_merge(run_t *r, const zo_cmd_t *c)
{
    trainer_t *tr = &r->tr;
    const zo_train_model_t *m = tr->m;
    if (!tr->cfg->fleet) {
        return refuse("merge refused: this firmware was not built with --mode fleet");
    }
    if (c->len < ZO_CMD_SIZE_MERGE) {
        return refuse("merge refused: a chunk needs its header");
    }
    zo_cmd_merge_t h;
    zo_cmd_merge_read(c->payload, &h);
    if (g_merge_next != 0u && h.round == g_merge_round && h.chunk + 1u == g_merge_next) {
        if (h.last != 0u) {
            send_fleet_crc(r, MERGED_CRC | g_merge_applied); /* the answer the lost ack came with */
        }
        return ZO_TM_ACK_IGNORED; /* the chunk taken last, sent again */
    }
    if (!r->held) {
        return refuse("merge refused: the device is training a round; wait for its updates");
    }
    if (h.chunk == 0u && g_merged == h.round + 1u) {
        send_fleet_crc(r, MERGED_CRC | g_merge_applied);
        return ZO_TM_ACK_IGNORED; /* this round is merged here already */
    }
    if (h.chunk != 0u && (!g_merge_open || h.round != g_merge_round || h.chunk != g_merge_next)) {
        return refuse("merge refused: a chunk out of order (a merge starts at chunk 0 and goes on without a gap)");
    }
    const uint8_t *data = c->payload + ZO_CMD_SIZE_MERGE;
    const uint32_t n = (uint32_t)c->len - ZO_CMD_SIZE_MERGE;
    const uint32_t q_limit = m->q_buffer < ZO_SCHED_Q_LIMIT ? m->q_buffer : ZO_SCHED_Q_LIMIT;
    /* a merged log carries updates only: no rollback or snapshot mark */
    if (!zo_updates_fit(data, n, h.steps, q_limit, ZO_TM_UPDATE_APPLIED | ZO_TM_UPDATE_Q | ZO_TM_UPDATE_PACKED)) {
        return refuse("merge refused: a chunk whose entries do not decode");
    }
    if (h.chunk == 0u) {
        zo_snapshot_copy(m, 1); /* back to the global weights the round started from */
        g_merge_open = 1;
        g_merge_round = h.round;
        g_merge_applied = 0u;
    }
    const uint32_t own_seed = tr->seed;
    tr->seed = h.seed; /* the directions of the device that made these updates */
    g_merge_applied += zo_apply_entries(tr, data, n, h.step, h.steps);
    tr->seed = own_seed;
    g_merge_next = (uint32_t)h.chunk + 1u;
    if (h.last != 0u) {
        zo_snapshot_copy(m, 0); /* the new global weights: the next round (or merge) starts from them */
        g_merge_open = 0;
        g_merged = h.round + 1u;
        g_local = 0;
        r->last_eval = 0; /* a run ending now evaluates the merged weights */
        send_fleet_crc(r, MERGED_CRC | g_merge_applied);
    }
    return ZO_TM_ACK_OK;
}
