/* zo_slots.c - A/B weight slots (zo_slots.h). */
#include "zo_slots.h"

#include <string.h>

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

uint32_t zo_slots_crc32(uint32_t crc, const uint8_t *p, uint32_t n)
{
    crc = ~crc;
    for (uint32_t i = 0; i < n; ++i) {
        crc ^= p[i];
        for (int b = 0; b < 8; ++b) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

static int valid(const zo_slots_t *s, int k)
{
    const uint8_t *h = s->slot[k];
    return get32(h) == ZO_SLOT_MAGIC && get32(h + 8) == s->payload_bytes
           && get32(h + 12) == zo_slots_crc32(0u, h + ZO_SLOT_HEADER_BYTES, s->payload_bytes);
}

uint32_t zo_slots_generation(const zo_slots_t *s, int slot)
{
    return (slot == 0 || slot == 1) && valid(s, slot) ? get32(s->slot[slot] + 4) : 0u;
}

int zo_slots_deployed(const zo_slots_t *s)
{
    const uint32_t g0 = zo_slots_generation(s, 0), g1 = zo_slots_generation(s, 1);
    if (g0 == 0u && g1 == 0u) {
        return -1;
    }
    return g1 > g0 ? 1 : 0;
}

const uint8_t *zo_slots_payload(const zo_slots_t *s, int slot)
{
    return s->slot[slot] + ZO_SLOT_HEADER_BYTES;
}

static int write_bytes(const zo_slots_t *s, uint8_t *dst, const uint8_t *src, uint32_t n)
{
    if (s->write != NULL) {
        return s->write(dst, src, n);
    }
    memcpy(dst, src, n);
    return 0;
}

int zo_slots_promote(zo_slots_t *s, const uint8_t *payload)
{
    const int old = zo_slots_deployed(s);
    const int target = old == 0 ? 1 : 0;
    const uint32_t generation = (old < 0 ? 0u : zo_slots_generation(s, old)) + 1u;
    uint8_t head[ZO_SLOT_HEADER_BYTES];
    memset(head, 0xFF, sizeof head); /* erased: no magic, so invalid while the payload is written */
    if (write_bytes(s, s->slot[target], head, ZO_SLOT_HEADER_BYTES) != 0
        || write_bytes(s, s->slot[target] + ZO_SLOT_HEADER_BYTES, payload, s->payload_bytes) != 0) {
        return -1;
    }
    put32(head, ZO_SLOT_MAGIC);
    put32(head + 4, generation);
    put32(head + 8, s->payload_bytes);
    put32(head + 12, zo_slots_crc32(0u, payload, s->payload_bytes));
    if (write_bytes(s, s->slot[target], head, ZO_SLOT_HEADER_BYTES) != 0) {
        return -1;
    }
    return zo_slots_deployed(s);
}
