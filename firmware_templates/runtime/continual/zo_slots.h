/* zo_slots.h - the A/B weight slots of --mode continual (docs/guides/continual.md).
 *
 * Static file.  Two slots, each a ZO_SLOT_HEADER_BYTES header (magic, generation, payload bytes,
 * CRC-32 of the payload; little-endian) then the payload: the trainable tensors' values and
 * residuals as zo_snapshot_copy lays them out.  The deployed weights are the valid slot with the
 * highest generation.  A promotion writes the candidate into the OTHER slot: its header is erased
 * first, the payload written, the header last (generation + 1), so a reset at any point leaves
 * either the old deployed slot or the new one valid, never neither: the boot loads the deployed
 * slot and an interrupted episode is simply lost.  Slots live in RAM on the host and under QEMU
 * and in NOR flash on the STM32N6: `write` is the medium's write (NULL: memcpy, RAM).
 */
#ifndef ZO_SLOTS_H
#define ZO_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_SLOT_MAGIC 0x534C4F5Au /* "ZOLS" little-endian */

/* Where a port keeps the slots and how it writes them: a port with NOR flash defines the section
 * attribute and its write function (before this header, e.g. in its compiler flags); the default
 * is RAM and memcpy. */
#ifndef ZO_CL_SLOT_ATTR
#define ZO_CL_SLOT_ATTR
#endif
#ifndef ZO_CL_SLOT_WRITE
#define ZO_CL_SLOT_WRITE NULL
#endif
#define ZO_SLOT_HEADER_BYTES 16u

typedef struct {
    uint8_t *slot[2];        /* ZO_SLOT_HEADER_BYTES + payload_bytes each */
    uint32_t payload_bytes;
    /* the medium's write (NOR: erase then program; returns 0 on success); NULL: memcpy */
    int (*write)(uint8_t *dst, const uint8_t *src, uint32_t n);
} zo_slots_t;

/* The deployed slot (0 or 1): valid (magic, size, CRC) with the highest generation; -1 if none. */
int zo_slots_deployed(const zo_slots_t *s);

/* The generation of a valid slot (0 if invalid). */
uint32_t zo_slots_generation(const zo_slots_t *s, int slot);

const uint8_t *zo_slots_payload(const zo_slots_t *s, int slot);

/* Writes `payload` into the slot that is not deployed with the next generation: it becomes the
 * deployed slot.  Returns the new deployed slot, or -1 if the medium failed (the old one stays). */
int zo_slots_promote(zo_slots_t *s, const uint8_t *payload);

/* CRC-32 (zlib's), chainable: zo_slots_crc32(0, p, n) == zlib.crc32(p[:n]). */
uint32_t zo_slots_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

#ifdef __cplusplus
}
#endif

#endif /* ZO_SLOTS_H */
