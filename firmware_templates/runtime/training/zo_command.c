/* zo_command.c - command frame parser (see zo_command.h and docs/training.md, Commands). */
#include <string.h>

#include "zo_command.h"
#include "zo_port.h"
#include "zo_telemetry.h"

#define HEAD 8u /* sync, version, type, seq, len */

static zo_cmd_parser_t g_parser; /* zero = empty, as zo_cmd_parser_init leaves it */

void zo_cmd_parser_init(zo_cmd_parser_t *p)
{
    memset(p, 0, sizeof *p);
}

/* 1: a complete valid frame starts the buffer; 0: more bytes needed; -1: no frame starts there.
 * Each header byte is checked as soon as it is here, so garbage never waits for a length. */
static int check_front(zo_cmd_parser_t *p)
{
    const uint8_t *b = p->buf;
    const uint32_t n = p->n;
    if ((n >= 1u && b[0] != ZO_TM_SYNC0) || (n >= 2u && b[1] != ZO_TM_SYNC1) || (n >= 3u && b[2] != ZO_TM_VERSION)) {
        return -1;
    }
    if (n < HEAD) {
        return 0;
    }
    const uint32_t len = (uint32_t)b[6] | ((uint32_t)b[7] << 8);
    if (len > ZO_CMD_MAX_PAYLOAD) {
        return -1;
    }
    const uint32_t total = HEAD + len + 4u;
    if (n < total) {
        return 0;
    }
    const uint32_t crc = (uint32_t)b[total - 4u] | ((uint32_t)b[total - 3u] << 8) | ((uint32_t)b[total - 2u] << 16)
                         | ((uint32_t)b[total - 1u] << 24);
    if (zo_tm_crc32(0u, b + 2, total - 6u) != crc) {
        p->crc_errors++;
        return -1;
    }
    return 1;
}

/* Give up bytes from the front until a frame is complete (1) or may still be (0). */
static int scan(zo_cmd_parser_t *p, zo_cmd_t *out)
{
    while (p->n > 0u) {
        const int r = check_front(p);
        if (r == 0) {
            return 0;
        }
        if (r > 0) {
            const uint8_t *b = p->buf;
            out->type = b[3];
            out->seq = (uint16_t)(b[4] | (b[5] << 8));
            out->len = (uint16_t)(b[6] | (b[7] << 8));
            memcpy(out->payload, b + HEAD, out->len);
            const uint32_t total = HEAD + out->len + 4u;
            p->n -= total;
            memmove(p->buf, p->buf + total, p->n);
            p->frames++;
            return 1;
        }
        p->n--;
        memmove(p->buf, p->buf + 1, p->n);
        p->dropped++;
    }
    return 0;
}

int zo_cmd_parse_pending(zo_cmd_parser_t *p, zo_cmd_t *out)
{
    return scan(p, out);
}

int zo_cmd_parse_byte(zo_cmd_parser_t *p, uint8_t byte, zo_cmd_t *out)
{
    if (p->n >= ZO_CMD_FRAME_MAX) { /* cannot happen (scan keeps n below a frame), but never overflow */
        p->n--;
        memmove(p->buf, p->buf + 1, p->n);
        p->dropped++;
    }
    p->buf[p->n++] = byte;
    return scan(p, out);
}

int zo_cmd_poll(zo_cmd_t *out)
{
    if (zo_cmd_parse_pending(&g_parser, out)) {
        return 1;
    }
    for (uint32_t k = 0; k < ZO_CMD_POLL_BYTES; ++k) {
        uint8_t byte;
        if (!zo_port_read_byte(&byte)) {
            return 0;
        }
        if (zo_cmd_parse_byte(&g_parser, byte, out)) {
            return 1;
        }
    }
    return 0;
}

const zo_cmd_parser_t *zo_cmd_state(void)
{
    return &g_parser;
}

void zo_cmd_reset(void)
{
    zo_cmd_parser_init(&g_parser);
}
