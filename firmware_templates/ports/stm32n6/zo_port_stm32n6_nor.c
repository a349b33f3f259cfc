/* zo_port_stm32n6_nor.c - the checkpoint hooks of zo_port.h on the STM32N6: checkpoints kept in
 * a reserved range at the end of the external NOR (the board's [checkpoint_store] region, e.g.
 * XSPI2_CKPT: its origin and size come from link.ld as __zo_ckpt_store, __zo_ckpt_store_bytes),
 * so that after a reset or a power cut the trainer resumes alone from the last one.
 *
 * NOT VERIFIED ON HARDWARE: no STM32N6 board was available; it builds warning-free for both
 * boards, and its register addresses and bits agree with ST's stm32n657xx.h
 * (zo_port_stm32n6_regs.h, tests/test_n6_regs.py).  The flash commands are the 1-line SPI ones
 * with 4-byte addresses that the MX66UW1G45G (STM32N6570-DK) and the MX25UM51245G
 * (NUCLEO-N657X0-Q) both take after power-on (their data sheets: WREN 06h, RDSR 05h, SE4B 21h
 * 4 KiB sector erase, PP4B 12h 256-byte page program); the same mode and clock as the
 * memory-mapped reads of zo_port_stm32n6_xspi.c.  (verify) on a board.
 *
 * Two slots of half the range each.  A save writes the slot that does not hold the newest valid
 * image, sector by sector as the chunks come (XSPI2 leaves memory-mapped mode for each chunk's
 * erase and page programs, and returns to it after), everything but the first page; the last
 * chunk reads the slot back through the memory-mapped window, checks the body's CRC, and only
 * then programs the first page, which holds the magic "ZOCK".  So a power cut at any moment
 * leaves the previous image valid, and a slot without the magic or with a wrong CRC is never
 * offered.  The load offers the valid slot with the higher step; the trainer then checks the
 * header (model, options) as for a restore command.  Code and data of this file are in RAM: no
 * read of the NOR while it is out of memory-mapped mode.  The port never enables the data cache;
 * (verify) that the boot ROM leaves it off, or the read-back could see stale lines (the CRC
 * check would then fail safe: the image is not marked valid).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "zo_port.h"
#include "zo_port_checkpoint.h"
#include "zo_port_cortex_m.h"
#include "zo_port_stm32n6_regs.h"

#define XSPI2_REG(off) ZO_REG32(ZO_XSPI2_BASE + (off))
#define XSPI2_DR8      (*(volatile uint8_t *)(ZO_XSPI2_BASE + ZO_XSPI_DR))

/* the flashes (MX66UW1G45G, MX25UM51245G data sheets) */
#define NOR_WREN       0x06u
#define NOR_RDSR       0x05u
#define NOR_SE4B       0x21u
#define NOR_PP4B       0x12u
#define NOR_SR_WIP     0x01u   /* status register: write in progress */
#define SECTOR_BYTES   4096u   /* the smallest erase */
#define PAGE_BYTES     256u    /* a page program never crosses a page boundary */
#define BUSY_LIMIT_US  2000000u /* > the flashes' maximum sector erase (400 ms) and page program time */

/* XSPI field values (RM0486, XSPI registers), as in zo_port_stm32n6_xspi.c */
#define FMODE_INDIRECT_WRITE 0u
#define FMODE_INDIRECT_READ  1u
#define LINES_ONE            1u
#define ADSIZE_32BIT         3u

extern const uint8_t __zo_ckpt_store[] __attribute__((weak));       /* absent: no store, nothing kept */
extern const uint8_t __zo_ckpt_store_bytes[] __attribute__((weak)); /* its value is the size */

static int g_xspi_ready;   /* XSPI2 configured (zo_stm32n6_xspi2_map) */
static int g_slot = -1;    /* the slot being written (-1: none) */
static int g_load_slot = -1; /* the slot the load reads (-1: none) */
static int g_failed;       /* the image being written failed (too big, a flash error): abandoned */
static uint32_t g_erased;  /* bytes of the slot erased so far */
static uint8_t g_first_page[PAGE_BYTES]; /* the image's first page, programmed last */

static uint32_t slot_bytes(void)
{
    return ((uint32_t)(uintptr_t)__zo_ckpt_store_bytes / 2u) / SECTOR_BYTES * SECTOR_BYTES;
}

/* The NOR offset (address inside the flash) of byte `offset` of slot k. */
static uint32_t nor_address(int k, uint32_t offset)
{
    return (uint32_t)((uintptr_t)__zo_ckpt_store - ZO_XSPI2_MEM_BASE) + (uint32_t)k * slot_bytes() + offset;
}

static const uint8_t *mapped(int k)
{
    return __zo_ckpt_store + (uint32_t)k * slot_bytes();
}

static void memory_mapped(void)
{
    if (!g_xspi_ready) {
        zo_stm32n6_xspi2_map(); /* development mode: the boot did not map it */
        g_xspi_ready = 1;
    } else {
        zo_stm32n6_xspi2_memory_mapped();
    }
}

/* Out of memory-mapped mode (abort, wait until idle). */
static void leave_memory_mapped(void)
{
    if (!g_xspi_ready) {
        memory_mapped();
    }
    XSPI2_REG(ZO_XSPI_CR) |= ZO_XSPI_CR_ABORT;
    while ((XSPI2_REG(ZO_XSPI_CR) & ZO_XSPI_CR_ABORT) || (XSPI2_REG(ZO_XSPI_SR) & ZO_XSPI_SR_BUSY)) {
    }
}

/* One indirect-mode command: instruction, then a 4-byte address if with_address, then n data
 * bytes written from out or read into in (n 0: none).  0 on a transfer error. */
static int command(uint32_t instruction, int with_address, uint32_t address, const uint8_t *out, uint8_t *in,
                   uint32_t n)
{
    const uint32_t fmode = in != NULL ? FMODE_INDIRECT_READ : FMODE_INDIRECT_WRITE;
    while (XSPI2_REG(ZO_XSPI_SR) & ZO_XSPI_SR_BUSY) {
    }
    XSPI2_REG(ZO_XSPI_FCR) = ZO_XSPI_FCR_CTCF | ZO_XSPI_FCR_CTEF;
    XSPI2_REG(ZO_XSPI_CR) = (fmode << ZO_XSPI_CR_FMODE_POS) | ZO_XSPI_CR_EN;
    if (n != 0u) {
        XSPI2_REG(ZO_XSPI_DLR) = n - 1u;
    }
    XSPI2_REG(ZO_XSPI_CCR) = (LINES_ONE << ZO_XSPI_CCR_IMODE_POS)
                             | ((with_address ? LINES_ONE : 0u) << ZO_XSPI_CCR_ADMODE_POS)
                             | (ADSIZE_32BIT << ZO_XSPI_CCR_ADSIZE_POS)
                             | ((n != 0u ? LINES_ONE : 0u) << ZO_XSPI_CCR_DMODE_POS);
    XSPI2_REG(ZO_XSPI_TCR) = 0u; /* no dummy cycles */
    XSPI2_REG(ZO_XSPI_IR) = instruction; /* starts a command with neither address nor data */
    if (with_address) {
        XSPI2_REG(ZO_XSPI_AR) = address; /* starts one with an address (and a read) */
    }
    for (uint32_t k = 0; k < n; ++k) { /* a write starts with its first data byte */
        while (!(XSPI2_REG(ZO_XSPI_SR) & (ZO_XSPI_SR_FTF | ZO_XSPI_SR_TEF))) {
        }
        if (in != NULL) {
            in[k] = XSPI2_DR8;
        } else {
            XSPI2_DR8 = out[k];
        }
    }
    while (!(XSPI2_REG(ZO_XSPI_SR) & (ZO_XSPI_SR_TCF | ZO_XSPI_SR_TEF))) {
    }
    const int ok = !(XSPI2_REG(ZO_XSPI_SR) & ZO_XSPI_SR_TEF);
    XSPI2_REG(ZO_XSPI_FCR) = ZO_XSPI_FCR_CTCF | ZO_XSPI_FCR_CTEF;
    return ok;
}

/* Write enable, the erase or program command, then wait until the flash is done with it. */
static int write_command(uint32_t instruction, uint32_t address, const uint8_t *data, uint32_t n)
{
    if (!command(NOR_WREN, 0, 0u, NULL, NULL, 0u) || !command(instruction, 1, address, data, NULL, n)) {
        return 0;
    }
    const uint64_t start = zo_port_time_us();
    uint8_t status = NOR_SR_WIP;
    while (status & NOR_SR_WIP) {
        if (!command(NOR_RDSR, 0, 0u, NULL, &status, 1u) || zo_port_time_us() - start > BUSY_LIMIT_US) {
            return 0;
        }
    }
    return 1;
}

/* n bytes at `offset` of the slot being written: sectors erased as they are reached, pages
 * programmed without crossing a page boundary.  0 on a flash error. */
static int program(uint32_t offset, const uint8_t *data, uint32_t n)
{
    while (n > 0u) {
        while (g_erased < offset + n) {
            if (!write_command(NOR_SE4B, nor_address(g_slot, g_erased), NULL, 0u)) {
                return 0;
            }
            g_erased += SECTOR_BYTES;
        }
        const uint32_t room = PAGE_BYTES - offset % PAGE_BYTES;
        const uint32_t k = n < room ? n : room;
        if (!write_command(NOR_PP4B, nor_address(g_slot, offset), data, k)) {
            return 0;
        }
        offset += k;
        data += k;
        n -= k;
    }
    return 1;
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The CRC of an image's body whose first page is at `page` and the rest in slot k. */
static uint32_t body_crc(int k, const uint8_t *page, uint32_t total)
{
    const uint32_t head = total < PAGE_BYTES ? total : PAGE_BYTES;
    const uint32_t crc = zo_tm_crc32(0u, page + ZO_CKPT_HEADER_BYTES, head - ZO_CKPT_HEADER_BYTES);
    return zo_tm_crc32(crc, mapped(k) + head, total - head);
}

/* The step of slot k's image if it is complete (magic, a size that fits, its CRC), else -1. */
static int64_t slot_step(int k)
{
    const uint8_t *p = mapped(k);
    const uint32_t total = ZO_CKPT_HEADER_BYTES + get_le32(p + ZO_CKPT_AT_BODY_BYTES);
    if (memcmp(p, ZO_CKPT_MAGIC, 4u) != 0 || total > slot_bytes() || total < ZO_CKPT_HEADER_BYTES
        || body_crc(k, p, total) != get_le32(p + ZO_CKPT_AT_CRC)) {
        return -1;
    }
    return (int64_t)get_le32(p + ZO_CKPT_AT_STEP);
}

/* The slot with the newest complete image (-1: none); the store is memory-mapped. */
static int newest_slot(void)
{
    memory_mapped();
    const int64_t a = slot_step(0), b = slot_step(1);
    return a < 0 && b < 0 ? -1 : (b > a ? 1 : 0);
}

void zo_port_checkpoint_save(uint32_t offset, const uint8_t *data, uint32_t n, uint32_t total)
{
    if (__zo_ckpt_store == NULL) {
        return;
    }
    if (offset == 0u) {
        g_slot = newest_slot() == 0 ? 1 : 0; /* keep the newest complete image until this one is */
        g_erased = 0u;
        g_failed = total > slot_bytes() || total < ZO_CKPT_HEADER_BYTES;
        if (total > slot_bytes()) {
            zo_tm_log("zo_port_stm32n6: the checkpoint does not fit the NOR's checkpoint slot: not kept");
        }
    }
    if (g_failed || g_slot < 0) {
        return;
    }
    /* the first page waits in RAM; the rest goes to the flash now */
    const uint32_t in_page = offset < PAGE_BYTES ? (PAGE_BYTES - offset < n ? PAGE_BYTES - offset : n) : 0u;
    if (in_page != 0u) {
        memcpy(g_first_page + offset, data, in_page);
    }
    leave_memory_mapped();
    int ok = program(offset + in_page, data + in_page, n - in_page);
    if (ok && offset + n == total) {
        memory_mapped(); /* read back: the body's CRC before the page with the magic makes it valid */
        ok = body_crc(g_slot, g_first_page, total) == get_le32(g_first_page + ZO_CKPT_AT_CRC);
        if (ok) {
            const uint32_t head = total < PAGE_BYTES ? total : PAGE_BYTES;
            leave_memory_mapped();
            ok = program(0u, g_first_page, head);
            memory_mapped();
            ok = ok && memcmp(mapped(g_slot), g_first_page, head) == 0;
        }
    }
    memory_mapped();
    if (!ok) {
        g_failed = 1;
        zo_tm_log("zo_port_stm32n6: writing the checkpoint to the NOR failed: the previous one is kept");
    }
}

uint32_t zo_port_checkpoint_load(uint32_t offset, uint8_t *data, uint32_t n)
{
    if (__zo_ckpt_store == NULL) {
        return 0u;
    }
    if (offset == 0u) {
        g_load_slot = newest_slot();
    }
    if (g_load_slot < 0) {
        return 0u;
    }
    const uint32_t total = ZO_CKPT_HEADER_BYTES + get_le32(mapped(g_load_slot) + ZO_CKPT_AT_BODY_BYTES);
    const uint32_t k = offset >= total ? 0u : (total - offset < n ? total - offset : n);
    memcpy(data, mapped(g_load_slot) + offset, k);
    return k;
}

/* --- the A/B weight slots of --mode continual (zo_slots.h; zo_bundle.h names these hooks in a
 * continual bundle).  The continual firmware keeps no checkpoint, so its two slots are the
 * store's two halves, each starting on a sector.  BUILT, NOT RUN: like the checkpoint store above,
 * never exercised on a board. */

uint8_t *zo_port_cl_slot(int k, uint32_t bytes)
{
    if (__zo_ckpt_store == NULL || bytes > slot_bytes() || (k != 0 && k != 1)) {
        zo_tm_log("zo_port_stm32n6: the weight slots do not fit the NOR's checkpoint store");
        return NULL;
    }
    memory_mapped(); /* the slots are read through the memory-mapped window */
    return (uint8_t *)(uintptr_t)mapped(k);
}

/* n bytes from src (RAM: the NOR is out of memory-mapped mode while they are programmed) to dst
 * in a slot, sector by sector: a sector whose bytes in the range cannot be programmed as they are
 * (a bit must go from 0 to 1) is erased WHOLE first, its bytes outside the range with it.  That is
 * what zo_slots_promote expects: it erases the slot's header first (which erases the sector the
 * payload starts in), writes the payload, then programs the header last onto erased bytes, so the
 * slot only becomes valid once everything else is in.  Read back through the window; 0 on
 * success, 1 on a flash error or a range outside the store. */
int zo_port_cl_slot_write(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    const uintptr_t base = (uintptr_t)__zo_ckpt_store;
    if (base == 0u || (uintptr_t)dst < base || (uintptr_t)dst - base + n > 2u * slot_bytes()) {
        return 1;
    }
    uint32_t at = (uint32_t)((uintptr_t)dst - ZO_XSPI2_MEM_BASE); /* the NOR address */
    while (n > 0u) {
        const uint32_t in_sector = SECTOR_BYTES - at % SECTOR_BYTES;
        const uint32_t part = n < in_sector ? n : in_sector;
        const uint8_t *now = (const uint8_t *)(ZO_XSPI2_MEM_BASE + at);
        memory_mapped();
        int erase = 0;
        for (uint32_t i = 0; i < part && !erase; ++i) {
            erase = (now[i] & src[i]) != src[i];
        }
        leave_memory_mapped();
        int ok = !erase || write_command(NOR_SE4B, at - at % SECTOR_BYTES, NULL, 0u);
        for (uint32_t done = 0; ok && done < part;) {
            const uint32_t room = PAGE_BYTES - (at + done) % PAGE_BYTES;
            const uint32_t k = part - done < room ? part - done : room;
            ok = write_command(NOR_PP4B, at + done, src + done, k);
            done += k;
        }
        memory_mapped();
        if (!ok || memcmp(now, src, part) != 0) {
            zo_tm_log("zo_port_stm32n6: writing a weight slot to the NOR failed: the deployed slot is kept");
            return 1;
        }
        at += part;
        src += part;
        n -= part;
    }
    return 0;
}
