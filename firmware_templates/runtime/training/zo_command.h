/* zo_command.h - commands from the host to the training firmware (the command channel).
 *
 * Static file, copied verbatim into training bundles.  Commands use the telemetry frame format
 * (docs/training.md, "Telemetry", "Commands"):
 *
 *     0xA5 0x5A | version u8 = 2 | type u8 | seq u16 | len u16 | payload[len] | crc32 u32
 *
 * with the command types below and `len` <= ZO_CMD_MAX_PAYLOAD.  The parser is fed one byte at
 * a time from zo_port_read_byte and never blocks: zo_cmd_poll reads at most ZO_CMD_POLL_BYTES
 * bytes per call.  A candidate frame needs the sync, version 2, a length within the bound and a
 * matching CRC-32; if any check fails only its first byte is given up and the scan goes on from
 * the next byte (as the host decoder does), so a frame starting inside a damaged one is found.
 * The parser returns every valid frame of any type; the trainer ignores types below 16 (its own
 * frames echoed back) and acknowledges unknown command types as such.
 */
#ifndef ZO_COMMAND_H
#define ZO_COMMAND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Command frame types (host -> device): host/zoflash/spec/training.py COMMANDS. */
#define ZO_CMD_PAUSE  16u /* stop stepping until resume or stop */
#define ZO_CMD_RESUME 17u
#define ZO_CMD_STATUS 18u /* answer with a status frame */
#define ZO_CMD_DUMP   19u /* send the trainable tensors as weights frames */
#define ZO_CMD_STOP   20u /* finish the run now (done reason 3, command) */
#define ZO_CMD_SAMPLE 21u /* a chunk of a training sample (--data-source stream, zo_stream.h) */
/* --- checkpoint and resume */
#define ZO_CMD_RESTORE 22u /* a chunk of a checkpoint image: u32 offset, u32 total, data */
/* --- push */
#define ZO_CMD_PUSH 30u /* a chunk of another run's update log to apply (zo_push.c, zoflash push) */
/* --- fleet learning (zo_fleet.c, zoflash fleet) */
#define ZO_CMD_ROUND 31u /* train a round's steps from the global weights */
#define ZO_CMD_MERGE 32u /* a chunk of a round's merged update log to apply */
#define ZO_CMD_FIRST  16u /* types below are telemetry types, never commands */

#define ZO_CMD_MAX_PAYLOAD 1024u /* a longer frame is rejected from its header */
#define ZO_CMD_POLL_BYTES  64u /* bytes zo_cmd_poll reads per call, at most */
#define ZO_CMD_FRAME_MAX   (8u + ZO_CMD_MAX_PAYLOAD + 4u)

typedef struct {
    uint8_t type;
    uint16_t seq;  /* the host's sequence number, echoed in the ack */
    uint16_t len;
    uint8_t payload[ZO_CMD_MAX_PAYLOAD];
} zo_cmd_t;

typedef struct {
    uint8_t buf[ZO_CMD_FRAME_MAX]; /* the candidate frame so far */
    uint32_t n;
    uint32_t frames;     /* valid frames returned */
    uint32_t crc_errors; /* complete candidates whose CRC did not match */
    uint32_t dropped;    /* bytes given up while resynchronising */
} zo_cmd_parser_t;

void zo_cmd_parser_init(zo_cmd_parser_t *p);

/* Add one byte.  Returns 1 and fills *out when a valid frame is complete, else 0.  A buffered
 * frame may remain after a return of 1: call zo_cmd_parse_pending before the next byte. */
int zo_cmd_parse_byte(zo_cmd_parser_t *p, uint8_t byte, zo_cmd_t *out);

/* A complete valid frame already in the buffer (left there by a resynchronisation): 1 and *out,
 * else 0. */
int zo_cmd_parse_pending(zo_cmd_parser_t *p, zo_cmd_t *out);

/* The firmware's parser, fed from zo_port_read_byte: 1 and *out if a command frame arrived,
 * 0 if none (yet).  Reads at most ZO_CMD_POLL_BYTES bytes, so it returns promptly even under a
 * flood of garbage. */
int zo_cmd_poll(zo_cmd_t *out);

/* The firmware parser's state (counters included), e.g. for tests. */
const zo_cmd_parser_t *zo_cmd_state(void);

/* Forget any partial frame and zero the counters of the firmware's parser. */
void zo_cmd_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* ZO_COMMAND_H */
