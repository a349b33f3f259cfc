/* zo_telemetry.c - frame encoder (see zo_telemetry.h and docs/training.md, Telemetry). */
#include <string.h>

#include "zo_port.h"
#include "zo_telemetry.h"

/* A frame is its header + fixed payload + CRC, built on the stack (zo_tm_frame_t).  Variable
 * data (weights, log text) is not copied in: it is written straight from the caller's memory,
 * so no 1 KiB buffer is needed.  The fixed-layout encoders are generated (zo_wire.c). */

static uint16_t g_seq;
static int g_off; /* zo_tm_enable(0): no frames (the library form without telemetry) */

void zo_tm_enable(int on)
{
    g_off = !on;
}

void zo_tm_reset(void)
{
    g_seq = 0u;
}

/* Reflected polynomial 0xEDB88320, a nibble at a time: a 64-byte table instead of 1 KiB. */
uint32_t zo_tm_crc32(uint32_t crc, const uint8_t *p, uint32_t n)
{
    static const uint32_t t[16] = {
        0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
        0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
        0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu,
    };
    uint32_t c = ~crc;
    for (uint32_t k = 0; k < n; ++k) {
        c ^= p[k];
        c = (c >> 4) ^ t[c & 15u];
        c = (c >> 4) ^ t[c & 15u];
    }
    return ~c;
}

/* Append the low `bytes` bytes of v, least significant first. */
void zo_tm_put(zo_tm_frame_t *f, uint64_t v, uint32_t bytes)
{
    for (uint32_t k = 0; k < bytes; ++k) {
        f->b[f->n++] = (uint8_t)(v >> (8u * k));
    }
}

void zo_tm_put_bytes(zo_tm_frame_t *f, const uint8_t *p, uint32_t n)
{
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

void zo_tm_put_f32(zo_tm_frame_t *f, float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u); /* the IEEE bits, whatever the byte order */
    zo_tm_put(f, u, 4u);
}

void zo_tm_begin(zo_tm_frame_t *f, uint32_t type)
{
    f->n = 0u;
    zo_tm_put(f, ZO_TM_SYNC0, 1u);
    zo_tm_put(f, ZO_TM_SYNC1, 1u);
    zo_tm_put(f, ZO_TM_VERSION, 1u);
    zo_tm_put(f, type, 1u);
    zo_tm_put(f, g_seq, 2u);
    zo_tm_put(f, 0u, 2u); /* len, patched by zo_tm_finish() */
}

/* Patch len, append the CRC over version..payload and send; `tail` follows the fixed payload. */
void zo_tm_finish(zo_tm_frame_t *f, const uint8_t *tail, uint32_t tail_n)
{
    uint32_t len = f->n - ZO_TM_HEAD + tail_n;
    f->b[6] = (uint8_t)len;
    f->b[7] = (uint8_t)(len >> 8);
    uint32_t crc = zo_tm_crc32(zo_tm_crc32(0u, f->b + 2, f->n - 2u), tail, tail_n);
    if (g_off) {
        /* nothing leaves the device */
    } else if (tail_n == 0u) {
        zo_tm_put(f, crc, 4u);
        zo_port_write(f->b, f->n);
    } else {
        zo_port_write(f->b, f->n);
        zo_port_write(tail, tail_n);
        f->n = 0u;
        zo_tm_put(f, crc, 4u);
        zo_port_write(f->b, 4u);
    }
    g_seq = (uint16_t)(g_seq + 1u);
}

void zo_tm_weights(uint32_t tensor, uint8_t part, const void *data, uint32_t total)
{
    const uint8_t *bytes = (const uint8_t *)data;
    uint32_t offset = 0u;
    do {
        uint32_t n = total - offset;
        if (n > ZO_TM_WEIGHTS_CHUNK) {
            n = ZO_TM_WEIGHTS_CHUNK;
        }
        zo_tm_frame_t f;
        zo_tm_begin(&f, ZO_TM_WEIGHTS);
        zo_tm_put(&f, tensor, 4u);
        zo_tm_put(&f, part, 1u);
        zo_tm_put(&f, offset, 4u);
        zo_tm_put(&f, total, 4u);
        zo_tm_finish(&f, n ? bytes + offset : NULL, n); /* data may be NULL when total is 0 */
        offset += n;
    } while (offset < total);
}

void zo_tm_checkpoint(uint32_t step, uint32_t offset, uint32_t total, const uint8_t *data, uint32_t n)
{
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_CHECKPOINT);
    zo_tm_put(&f, step, 4u);
    zo_tm_put(&f, offset, 4u);
    zo_tm_put(&f, total, 4u);
    zo_tm_finish(&f, n ? data : NULL, n);
}

void zo_tm_log(const char *text)
{
    uint32_t n = 0u; /* bounded strlen: never scans past what can be sent */
    while (n < ZO_TM_MAX_PAYLOAD && text[n] != '\0') {
        ++n;
    }
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_LOG);
    zo_tm_finish(&f, (const uint8_t *)text, n);
}

/* --- update log: one buffer of entries (ZO_TM_UPDATES_CHUNK bytes of RAM) as one bit stream, bits
 * from each byte's least significant on, every field least significant bit first, zero bits up to a
 * whole byte at its end (docs/training.md "Update log", wire.Tail).  An entry: the header byte, q (8
 * bits) when it changed within the frame, and q binary16 coefficients: 16 raw bits each, or packed
 * (ZO_TM_UPDATE_PACKED) when that is shorter: E, the largest 5-bit exponent field, then per
 * coefficient sign, 10 mantissa bits and d = E - its exponent field as a Rice code (d >> K one bits,
 * a zero bit, d's K low bits).  Positions (n, last) count bits. */
static struct {
    uint8_t data[ZO_TM_UPDATES_CHUNK];
    uint32_t n, first, steps, last, q;
    uint8_t eps;
} g_upd;

static uint32_t exponent_field(uint16_t h)
{
    return ((uint32_t)h >> 10) & 31u;
}

/* Bits of the packed form of c16[0..q), and its E. */
static uint32_t packed_bits(uint32_t q, const uint16_t *c16, uint32_t *base)
{
    uint32_t e = 0u, bits = 5u;
    for (uint32_t i = 0; i < q; ++i) {
        e = exponent_field(c16[i]) > e ? exponent_field(c16[i]) : e;
    }
    for (uint32_t i = 0; i < q; ++i) {
        bits += 12u + ZO_TM_UPDATE_RICE_K + ((e - exponent_field(c16[i])) >> ZO_TM_UPDATE_RICE_K);
    }
    *base = e;
    return bits;
}

/* Writes the n low bits of value at bit *pos of dst; a byte is cleared at its first bit (no memset:
 * a zeroing loop would become one), so the padding of the last byte is zero. */
static void put_bits(uint8_t *dst, uint32_t *pos, uint32_t value, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i, ++*pos) {
        const uint8_t bit = (uint8_t)(((value >> i) & 1u) << (*pos & 7u));
        dst[*pos >> 3] = (*pos & 7u) == 0u ? bit : (uint8_t)(dst[*pos >> 3] | bit);
    }
}

static void pack_coefficients(uint8_t *dst, uint32_t *pos, uint32_t q, const uint16_t *c16, uint32_t base)
{
    put_bits(dst, pos, base, 5u);
    for (uint32_t i = 0; i < q; ++i) {
        const uint32_t d = base - exponent_field(c16[i]), u = d >> ZO_TM_UPDATE_RICE_K;
        put_bits(dst, pos, (uint32_t)c16[i] >> 15, 1u);
        put_bits(dst, pos, c16[i] & 0x3FFu, 10u);
        put_bits(dst, pos, (1u << u) - 1u, u + 1u); /* u ones, then the zero */
        put_bits(dst, pos, d, ZO_TM_UPDATE_RICE_K);
    }
}

/* Reads n bits (at most 16) at bit *pos of data[0..bytes) into *value; 0 past its end. */
static int take_bits(const uint8_t *data, uint32_t bytes, uint32_t *pos, uint32_t n, uint32_t *value)
{
    if (*pos > bytes * 8u || n > bytes * 8u - *pos) {
        return 0;
    }
    *value = 0u;
    for (uint32_t i = 0; i < n; ++i, ++*pos) {
        *value |= ((uint32_t)(data[*pos >> 3] >> (*pos & 7u)) & 1u) << i;
    }
    return 1;
}

static int read_packed(const uint8_t *data, uint32_t bytes, uint32_t *pos, uint32_t q, uint16_t *out)
{
    uint32_t base, sign_mantissa, one, low;
    if (!take_bits(data, bytes, pos, 5u, &base)) {
        return 0;
    }
    for (uint32_t k = 0; k < q; ++k) {
        uint32_t u = 0u;
        if (!take_bits(data, bytes, pos, 11u, &sign_mantissa)) {
            return 0;
        }
        for (;;) {
            if (!take_bits(data, bytes, pos, 1u, &one)) {
                return 0;
            }
            if (one == 0u) {
                break;
            }
            if (++u > (31u >> ZO_TM_UPDATE_RICE_K)) {
                return 0; /* an exponent offset beyond 31 */
            }
        }
        if (!take_bits(data, bytes, pos, ZO_TM_UPDATE_RICE_K, &low)) {
            return 0;
        }
        const uint32_t d = (u << ZO_TM_UPDATE_RICE_K) | low;
        if (d > base) {
            return 0; /* an exponent below 0 */
        }
        if (out != NULL) {
            out[k] = (uint16_t)(((sign_mantissa & 1u) << 15) | ((base - d) << 10) | (sign_mantissa >> 1));
        }
    }
    return 1;
}

int zo_tm_updates_entry(const uint8_t *data, uint32_t bytes, uint32_t *pos, uint32_t q_limit, uint8_t *flags,
                        uint32_t *q, uint16_t *out)
{
    uint32_t header, c16;
    if (!take_bits(data, bytes, pos, 8u, &header)) {
        return 0;
    }
    *flags = (uint8_t)header;
    if ((header & ZO_TM_UPDATE_Q) != 0u) {
        if (!take_bits(data, bytes, pos, 8u, q) || *q == 0u || *q > q_limit) {
            return 0;
        }
    }
    if ((header & ZO_TM_UPDATE_APPLIED) == 0u) {
        return 1;
    }
    if (*q == 0u) {
        return 0; /* applied, but no q stated yet */
    }
    if ((header & ZO_TM_UPDATE_PACKED) != 0u) {
        return read_packed(data, bytes, pos, *q, out);
    }
    for (uint32_t i = 0; i < *q; ++i) {
        if (!take_bits(data, bytes, pos, 16u, &c16)) {
            return 0;
        }
        if (out != NULL) {
            out[i] = (uint16_t)c16;
        }
    }
    return 1;
}

int zo_tm_updates_end(const uint8_t *data, uint32_t bytes, uint32_t pos)
{
    uint32_t rest;
    return pos <= bytes * 8u && bytes * 8u - pos < 8u && take_bits(data, bytes, &pos, bytes * 8u - pos, &rest)
        && rest == 0u;
}

void zo_tm_updates_begin(uint8_t eps)
{
    g_upd.n = 0u; /* no memset: the telemetry links against memcpy and the port only */
    g_upd.first = 0u;
    g_upd.steps = 0u;
    g_upd.last = 0u;
    g_upd.q = 0u;
    g_upd.eps = eps;
}

void zo_tm_updates_flush(void)
{
    if (g_upd.steps == 0u) {
        return;
    }
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_UPDATES);
    zo_tm_put(&f, g_upd.first, 4u);
    zo_tm_put(&f, g_upd.steps, 2u);
    zo_tm_put(&f, g_upd.eps, 1u);
    zo_tm_finish(&f, g_upd.data, (g_upd.n + 7u) / 8u);
    g_upd.n = 0u;
    g_upd.steps = 0u;
    g_upd.q = 0u;
}

void zo_tm_updates_step(uint32_t step, uint8_t flags, uint32_t q, const uint16_t *c16)
{
    flags = (uint8_t)(flags & ~(ZO_TM_UPDATE_Q | ZO_TM_UPDATE_PACKED));
    const uint32_t applied = (flags & ZO_TM_UPDATE_APPLIED) != 0u ? q : 0u;
    uint32_t base = 0u, body = 16u * applied;
    if (applied != 0u) {
        const uint32_t packed = packed_bits(applied, c16, &base);
        if (packed < body) {
            body = packed;
            flags = (uint8_t)(flags | ZO_TM_UPDATE_PACKED);
        }
    }
    int new_q = applied != 0u && applied != g_upd.q;
    /* a frame's entries are consecutive steps: a step out of sequence (a checkpoint restore moved
     * the counter) starts a new frame, and the host sees the jump */
    if ((g_upd.n + 8u + (new_q ? 8u : 0u) + body + 7u) / 8u > ZO_TM_UPDATES_CHUNK
        || (g_upd.steps != 0u && step != g_upd.first + g_upd.steps)) {
        zo_tm_updates_flush();
        new_q = applied != 0u; /* every frame states its first q */
    }
    if (g_upd.steps == 0u) {
        g_upd.first = step;
    }
    g_upd.last = g_upd.n;
    put_bits(g_upd.data, &g_upd.n, (uint32_t)flags | (new_q ? ZO_TM_UPDATE_Q : 0u), 8u);
    if (new_q) {
        put_bits(g_upd.data, &g_upd.n, applied, 8u);
        g_upd.q = applied;
    }
    if ((flags & ZO_TM_UPDATE_PACKED) != 0u) {
        pack_coefficients(g_upd.data, &g_upd.n, applied, c16, base);
    } else {
        for (uint32_t i = 0; i < applied; ++i) {
            put_bits(g_upd.data, &g_upd.n, c16[i], 16u);
        }
    }
    ++g_upd.steps;
}

void zo_tm_updates_resume(uint32_t step)
{
    zo_tm_updates_flush();
    zo_tm_frame_t f;
    zo_tm_begin(&f, ZO_TM_UPDATES);
    zo_tm_put(&f, step, 4u);
    zo_tm_put(&f, 0u, 2u);
    zo_tm_put(&f, g_upd.eps, 1u);
    zo_tm_finish(&f, NULL, 0u);
}

int zo_tm_updates_mark(uint8_t flag)
{
    if (g_upd.steps == 0u) {
        return 0;
    }
    for (uint32_t i = 0; i < 8u; ++i) { /* the header may straddle two bytes */
        const uint32_t at = g_upd.last + i;
        g_upd.data[at >> 3] = (uint8_t)(g_upd.data[at >> 3] | (((uint32_t)flag >> i) & 1u) << (at & 7u));
    }
    return 1;
}
