/* zo_stream.c - the ring of host-fed samples (see zo_stream.h, docs/training.md "Data sources"). */
#include <string.h>

#include "zo_port.h"
#include "zo_stream.h"
#include "zo_telemetry.h"

uint32_t zo_stream_target(const zo_stream_t *s, uint32_t t)
{
    return s->slots + t * s->refresh;
}

int zo_stream_ask(zo_stream_t *s, uint32_t want, uint64_t now_us)
{
    s->want = want;
    if (s->cursor >= want) {
        return 0;
    }
    const int timed_out = s->asked && now_us - s->asked_us >= ZO_STREAM_TIMEOUT_US;
    if (!s->asked || timed_out) {
        zo_tm_need_t n = { s->cursor, s->got, want - s->cursor, s->input_bytes + s->target_bytes,
                           (uint16_t)zo_port_rx_window() };
        zo_tm_need(&n);
        s->asked = 1;
        s->asked_us = now_us;
        s->resent += timed_out ? 1u : 0u;
    }
    return 1;
}

int zo_stream_late(const zo_stream_t *s, uint64_t now_us)
{
    return s->asked && now_us - s->asked_us >= ZO_STREAM_IDLE_US;
}

/* Copy `n` bytes of the record at `offset` into the sample's slot: the input, then the targets. */
static void store(const zo_stream_t *s, uint32_t slot, uint32_t offset, const uint8_t *data, uint32_t n)
{
    if (offset < s->input_bytes) {
        const uint32_t k = n < s->input_bytes - offset ? n : s->input_bytes - offset;
        memcpy(s->x + (size_t)slot * s->input_bytes + offset, data, k);
        offset += k;
        data += k;
        n -= k;
    }
    if (n > 0u) {
        memcpy((uint8_t *)s->t + (size_t)slot * s->target_bytes + (offset - s->input_bytes), data, n);
    }
}

void zo_stream_accept(zo_stream_t *s, const zo_cmd_t *c)
{
    const uint32_t total = s->input_bytes + s->target_bytes;
    if (c->len < ZO_CMD_SIZE_SAMPLE) {
        s->ignored++;
        return;
    }
    zo_cmd_sample_t head;
    zo_cmd_sample_read(c->payload, &head);
    const uint32_t index = head.index;
    const uint16_t label = head.label;
    const uint32_t offset = head.offset;
    const uint32_t sent_total = head.total;
    const uint32_t n = (uint32_t)c->len - ZO_CMD_SIZE_SAMPLE;
    if (s->cursor >= s->want || index != s->cursor || offset != s->got || sent_total != total || n == 0u
        || n > total - offset) {
        s->ignored++; /* not the chunk asked for: a duplicate or a stale resend */
        return;
    }
    const uint32_t slot = index % s->slots;
    store(s, slot, offset, c->payload + ZO_CMD_SIZE_SAMPLE, n);
    s->got += n;
    s->accepted++;
    s->asked = 0; /* the answer came: the next need goes out at once */
    if (s->got == total) {
        if (s->y != NULL) {
            s->y[slot] = label;
        }
        s->cursor++;
        s->got = 0u;
    }
}
