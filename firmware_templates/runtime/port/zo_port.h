/* zo_port.h - what the training firmware needs from its board (the port contract).
 *
 * Static file, copied verbatim into each bundle.  Each port (the host simulation, a UART board,
 * semihosting under QEMU, ...) implements these functions (and optionally the checkpoint hooks
 * and the prefix memo at the end); the trainer and the telemetry encoder (zo_telemetry.c) use
 * nothing else of the platform.  Single-threaded: none of them is called from an interrupt by the
 * runtime.  A port includes this file (and zo_port_checkpoint.h if it keeps checkpoints), never
 * the trainer's headers: the few services of the runtime it may call are declared at the end.
 */
#ifndef ZO_PORT_H
#define ZO_PORT_H

#include <stdint.h>

#ifdef __cplusplus
#define ZO_NORETURN [[noreturn]]
extern "C" {
#else
#define ZO_NORETURN _Noreturn
#endif

/* Bring up the output channel (clock, UART, ...) and the timer.  Called once, before any
 * other zo_port_* function. */
void zo_port_init(void);

/* Send n bytes to the host.  Blocks until every byte is accepted: the telemetry stream has no
 * retransmission, so a short write would corrupt a frame.  n may be 0. */
void zo_port_write(const uint8_t *data, uint32_t n);

/* Microseconds since an arbitrary origin (typically zo_port_init); monotonic, never wraps in
 * practice (64 bits).  Only differences are meaningful. */
uint64_t zo_port_time_us(void);

/* Non-blocking read of one byte from the host: the command channel (zo_command.c polls it once
 * per training step, and continuously while paused).  Returns 1 and stores the byte if one was
 * available, 0 otherwise; never waits for a byte.  A port without input returns 0. */
int zo_port_read_byte(uint8_t *byte);

/* Bytes of input the port buffers until zo_port_read_byte takes them (its receive buffer): the
 * host never has more than this in flight towards the device (--data-source stream). */
uint32_t zo_port_rx_window(void);

/* Nothing to do until input arrives (the trainer waits for the host's samples): the port may
 * sleep until its next interrupt, a received byte or its timer's (Cortex-M: WFI), and must return
 * within a few hundred milliseconds so that zo_port_time_us timeouts still fire.  A port may
 * return at once. */
void zo_port_idle(void);

/* End the program with an exit code (0 = success).  On a board without a process model this
 * may halt or reset; it never returns. */
ZO_NORETURN void zo_port_exit(int code);

/* --- checkpoint persistence: optional; zo_checkpoint.c has weak defaults that keep nothing.
 * save: every checkpoint chunk as it is sent (offset 0 starts a new image, the chunk with
 * offset + n == total completes it: write the image so that a power cut leaves the last complete
 * one, or none; its header's layout is in zo_port_checkpoint.h).  load: at start-up, copy up to n bytes at `offset` of the stored image
 * to data and return how many there were (0: no image); the trainer checks it (header, CRC,
 * model, options) and resumes from it exactly as from a restore command. */
void zo_port_checkpoint_save(uint32_t offset, const uint8_t *data, uint32_t n, uint32_t total);
uint32_t zo_port_checkpoint_load(uint32_t offset, uint8_t *data, uint32_t n);

/* --- prefix memo: optional; zo_trainer.c has weak defaults that keep nothing.  The boundary
 * activations (`bytes` of them, the model's boundary spans in order) the frozen prefix computes
 * for the embedded sample whose input is at `sample` (a constant address: the trainer asks only
 * for embedded data, never for a stream's ring).  find: the stored bytes, or NULL; add: storage
 * for them that stays valid for the run (the trainer fills it at once), or NULL to keep none.
 * A memo changes no result and no pass count (the prefix is frozen), only the time a step takes:
 * the host simulation keeps one; the boards keep none, so their timings are those of the
 * forward passes counted. */
const int8_t *zo_port_prefix_memo_find(const void *sample, uint32_t bytes);
int8_t *zo_port_prefix_memo_add(const void *sample, uint32_t bytes);

/* --- what the runtime offers its port (implemented by zo_telemetry.c, in training builds) ---- */

/* zlib-compatible CRC-32: zo_tm_crc32(0, p, n) == zlib.crc32(p); chainable like zlib's. */
uint32_t zo_tm_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

/* A text line to the host (a telemetry log frame). */
void zo_tm_log(const char *text);

#ifdef __cplusplus
}
#endif

#endif /* ZO_PORT_H */
