/* zo_port_host.c - the port contract on a host computer: telemetry to stdout (binary), a
 * monotonic clock, commands from stdin when stdin is a pipe or a socket (never a terminal or a
 * file: those are not a command channel), exit(). Static file of the host port. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, poll, fstat */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zo_port.h"

void zo_port_init(void)
{
}

void zo_port_write(const uint8_t *data, uint32_t n)
{
    fwrite(data, 1, n, stdout);
    fflush(stdout); /* the host decodes frames live, as a board streams them */
}

uint64_t zo_port_time_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Command input: stdin, read without blocking (poll with a zero timeout, then one read of what
 * is there).  When the empty reads come back to back (the trainer paused, waiting for resume:
 * 1000 in a row, each within 5 us of the previous one) each waits up to 1 ms, so a paused
 * program does not spin a core; a training step takes far longer than 5 us, so a running
 * program never waits. */
static int g_in_state;          /* 0 not checked yet, 1 reading, -1 no command input, -2 EOF */
static uint8_t g_in[64];
static uint32_t g_in_n, g_in_pos;
static uint64_t g_last_empty_us;
static uint32_t g_quick_empties;

static int stdin_is_channel(void)
{
    struct stat st;
    return fstat(STDIN_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

static int fill_input(void)
{
    if (g_in_state == 0) {
        g_in_state = stdin_is_channel() ? 1 : -1;
    }
    if (g_in_state == -1) {
        return 0;
    }
    const uint64_t start = zo_port_time_us();
    g_quick_empties = (start - g_last_empty_us < 5u) ? g_quick_empties + 1u : 0u;
    if (g_in_state == -2) {
        if (g_quick_empties >= 1000u) { /* paused, and nothing can ever resume it */
            fputs("zo_port_host: the command input closed while paused; exiting\n", stderr);
            zo_port_exit(3);
        }
        g_last_empty_us = zo_port_time_us();
        return 0;
    }
    struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
    if (poll(&pfd, 1, g_quick_empties >= 1000u ? 1 : 0) > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t r = read(STDIN_FILENO, g_in, sizeof g_in);
        if (r > 0) {
            g_in_n = (uint32_t)r;
            g_in_pos = 0;
            g_quick_empties = 0;
            return 1;
        }
        if (r == 0 || (pfd.revents & POLLIN) == 0) {
            g_in_state = -2; /* the host closed its end: no more commands */
            return 0;
        }
    }
    g_last_empty_us = zo_port_time_us();
    return 0;
}

int zo_port_read_byte(uint8_t *byte)
{
    if (g_in_pos == g_in_n && !fill_input()) {
        return 0;
    }
    *byte = g_in[g_in_pos++];
    return 1;
}

/* A pipe buffers far more than one frame; 4 KiB keeps the host's chunks at their largest. */
uint32_t zo_port_rx_window(void)
{
    return 4096u;
}

/* Wait up to 1 ms for command input (none buffered), so a program waiting for samples does not
 * spin a core. */
void zo_port_idle(void)
{
    if (g_in_pos == g_in_n && g_in_state == 1) {
        struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
        (void)poll(&pfd, 1, 1);
    }
}

static void memo_report(void);

void zo_port_exit(int code)
{
    fflush(stdout);
    memo_report();
    exit(code);
}

/* --- checkpoint persistence: the file named by ZOFLASH_CHECKPOINT_FILE, if set.  Each
 * image goes to <file>.tmp and is renamed over <file> once complete, so a kill leaves the last
 * complete image (or none); at start-up the trainer resumes from it. */
#define CKPT_ENV "ZOFLASH_CHECKPOINT_FILE"
static FILE *g_ckpt_out;

static const char *ckpt_tmp_name(const char *path)
{
    static char name[4096];
    return snprintf(name, sizeof name, "%s.tmp", path) < (int)sizeof name ? name : NULL;
}

void zo_port_checkpoint_save(uint32_t offset, const uint8_t *data, uint32_t n, uint32_t total)
{
    const char *path = getenv(CKPT_ENV);
    const char *tmp = path != NULL ? ckpt_tmp_name(path) : NULL;
    if (tmp == NULL) {
        return;
    }
    if (offset == 0u) {
        if (g_ckpt_out != NULL) {
            fclose(g_ckpt_out);
        }
        g_ckpt_out = fopen(tmp, "wb");
    }
    if (g_ckpt_out == NULL) {
        return;
    }
    int ok = fwrite(data, 1, n, g_ckpt_out) == n;
    if (offset + n == total || !ok) {
        ok = fclose(g_ckpt_out) == 0 && ok;
        g_ckpt_out = NULL;
        if (!ok || rename(tmp, path) != 0) {
            fputs("zo_port_host: cannot write the checkpoint file " CKPT_ENV " names\n", stderr);
        }
    }
}

uint32_t zo_port_checkpoint_load(uint32_t offset, uint8_t *data, uint32_t n)
{
    const char *path = getenv(CKPT_ENV);
    FILE *f = path != NULL ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        return 0u;
    }
    uint32_t got = 0u;
    if (fseek(f, (long)offset, SEEK_SET) == 0) {
        got = (uint32_t)fread(data, 1, n, f);
    }
    fclose(f);
    return got;
}

/* --- --mode continual's A/B weight slots (zo_bundle.h, ZO_CL_SLOTS_IN_STORE): zero-initialised
 * RAM, kept in the file named by ZOFLASH_CL_SLOTS_FILE when set, so a restarted program boots
 * with the slots the last one left, as a board's NOR keeps them across a reset.  Every slot write
 * goes through to the file (whole, via <file>.tmp and a rename): a kill between the writes of a
 * promotion (header erased, payload, header) leaves what the NOR would hold. */
#define CL_SLOTS_ENV "ZOFLASH_CL_SLOTS_FILE"
uint8_t *zo_port_cl_slot(int k, uint32_t bytes);
int zo_port_cl_slot_write(uint8_t *dst, const uint8_t *src, uint32_t n);
static uint8_t *g_cl_slots;
static uint32_t g_cl_slot_bytes;

uint8_t *zo_port_cl_slot(int k, uint32_t bytes)
{
    if (g_cl_slots == NULL) {
        g_cl_slots = calloc(2u, bytes);
        g_cl_slot_bytes = bytes;
        const char *path = getenv(CL_SLOTS_ENV);
        FILE *f = g_cl_slots != NULL && path != NULL ? fopen(path, "rb") : NULL;
        if (f != NULL) {
            if (fread(g_cl_slots, 1, 2u * (size_t)bytes, f) != 2u * (size_t)bytes) {
                memset(g_cl_slots, 0, 2u * (size_t)bytes); /* another build's slots: start afresh */
            }
            fclose(f);
        }
    }
    if (g_cl_slots == NULL || bytes != g_cl_slot_bytes || k < 0 || k > 1) {
        fputs("zo_port_host: no room for the continual A/B slots\n", stderr);
        return NULL;
    }
    return g_cl_slots + (size_t)k * bytes;
}

int zo_port_cl_slot_write(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    memcpy(dst, src, n);
    const char *path = getenv(CL_SLOTS_ENV);
    const char *tmp = path != NULL ? ckpt_tmp_name(path) : NULL;
    if (tmp == NULL) {
        return 0;
    }
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL && fwrite(g_cl_slots, 1, 2u * (size_t)g_cl_slot_bytes, f) == 2u * (size_t)g_cl_slot_bytes;
    ok = f != NULL && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fputs("zo_port_host: cannot write the slot file " CL_SLOTS_ENV " names\n", stderr);
        return 1;
    }
    return 0;
}

/* Prefix memo (zo_port.h): the frozen prefix's boundary of every embedded sample, computed once
 * per run; a simulation step then costs the suffix only.  Open addressing on the sample's
 * address, at most half full.  ZOFLASH_NO_PREFIX_MEMO (set, any value) turns it off: the tests
 * run both ways and compare.  ZOFLASH_PREFIX_MEMO_STATS names a file that gets "hits H stored S"
 * at exit (the tests check the memo was used). */
#define MEMO_OFF_ENV "ZOFLASH_NO_PREFIX_MEMO"
#define MEMO_STATS_ENV "ZOFLASH_PREFIX_MEMO_STATS"

typedef struct {
    const void *key;
    int8_t *data;
} memo_entry_t;

static memo_entry_t *g_memo;
static size_t g_memo_cap, g_memo_used, g_memo_hits;
static int g_memo_state; /* 0 not checked yet, 1 on, -1 off */

static size_t memo_home(const void *key, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    return (size_t)(h >> 32) & (cap - 1u);
}

static memo_entry_t *memo_lookup(memo_entry_t *table, size_t cap, const void *key)
{
    size_t i = memo_home(key, cap);
    while (table[i].key != NULL && table[i].key != key) {
        i = (i + 1u) & (cap - 1u);
    }
    return &table[i];
}

static int memo_on(void)
{
    if (g_memo_state == 0) {
        g_memo_state = getenv(MEMO_OFF_ENV) != NULL ? -1 : 1;
    }
    return g_memo_state > 0;
}

const int8_t *zo_port_prefix_memo_find(const void *sample, uint32_t bytes)
{
    (void)bytes;
    if (!memo_on() || g_memo == NULL) {
        return NULL;
    }
    const int8_t *data = memo_lookup(g_memo, g_memo_cap, sample)->data;
    g_memo_hits += data != NULL;
    return data;
}

int8_t *zo_port_prefix_memo_add(const void *sample, uint32_t bytes)
{
    if (!memo_on()) {
        return NULL;
    }
    if (2u * (g_memo_used + 1u) > g_memo_cap) { /* grow: rehash into twice the slots */
        const size_t cap = g_memo_cap ? 2u * g_memo_cap : 1024u;
        memo_entry_t *table = calloc(cap, sizeof *table);
        if (table == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < g_memo_cap; ++i) {
            if (g_memo[i].key != NULL) {
                *memo_lookup(table, cap, g_memo[i].key) = g_memo[i];
            }
        }
        free(g_memo);
        g_memo = table;
        g_memo_cap = cap;
    }
    memo_entry_t *e = memo_lookup(g_memo, g_memo_cap, sample);
    if (e->key == NULL) {
        e->data = malloc(bytes);
        if (e->data == NULL) {
            return NULL;
        }
        e->key = sample;
        g_memo_used += 1u;
    }
    return e->data;
}

static void memo_report(void)
{
    const char *path = getenv(MEMO_STATS_ENV);
    FILE *f = path != NULL ? fopen(path, "w") : NULL;
    if (f != NULL) {
        fprintf(f, "hits %zu stored %zu\n", g_memo_hits, g_memo_used);
        fclose(f);
    }
}
