"""Training benchmark: the host simulation's C training program against the Python reference
engine (same run), and a C harness that times the parts of one ZO step.

For the digits head task (digits_cnn.tflite + digits_shift.npz, last FC trained) and the MLP
(mlp.tflite on the same digits, flattened):
  * throughput of the C training program (`build/<prefix>_train`, the whole process timed, build
    excluded) at fixed q = 1, 4, 16: steps/s and forward passes/s (prefix + suffix sample-passes);
    the Python reference engine runs the same run in the same invocation as the peer (ratio C/ref);
    both logs must be identical apart from times;
  * a C harness generated next to the bundle (linked with the bundle's sources except
    zo_train_main.c, using zo_train_model) times one suffix pass, one prefix pass, one full
    forward, one direction's perturbation work (+1, -2, +1 over all trainable tensors) and one
    q = 1 update: the ZO machinery per step at q = 1 as a fraction of its 2*b suffix passes;
  * the speed-up of feature reuse: (2*q*b full passes) / (b prefix + 2*q*b suffix passes), from
    the per-pass times, at q = 1, 4, 16; and a real minibatch timed directly;
  * the same parts on the Cortex-M55 in instructions (when arm-none-eabi-gcc and qemu-system-arm
    are installed; a few seconds): the mps3-an547 training bundle with an M55 harness in place of
    zo_train_main.c, run in QEMU under -icount shift=0 (1 ns of virtual time per instruction, which
    the port's SysTick clock follows), as generated (Helium) and with -DZO_NO_MVE.

Usage: python benchmarks/bench_training.py [--write docs/benchmarks.md] [--rounds 7] [--no-m55 | --m55-only]
Machines are noisy: read the ratios, not the absolute times (the M55 counts are deterministic).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import cpu_name, write_section

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SECTION = "training"
QS = (1, 4, 16)
# Steps per run at each q: long enough for the C program (~0.1-0.5 s for the digits head), short
# enough for the Python reference (~10 s).
STEPS = {1: 3000, 4: 1200, 16: 400}
HARNESS_ROUND_S = 0.01  # seconds per part per harness round
COMMAND = "python benchmarks/bench_training.py --write docs/benchmarks.md"


@dataclass
class Task:
    name: str
    model: Path
    data: Path
    note: str


# ---------------------------------------------------------------------------- the C harness

# The parts of one step, as the trainer runs them, through zo_train_model: shared by the host
# harness (clock_gettime) and the Cortex-M55 one (the port's clock under QEMU -icount).
HARNESS_OPS_C = r"""#include <stdint.h>
#include <string.h>

#include "zo_bundle.h"
#include "zo_trainer.h"

extern const zo_train_model_t zo_train_model;
extern const zo_train_config_t zo_train_config;

static const zo_train_model_t *M;
static uint32_t B;
static volatile float sink;
static volatile uint32_t sink_u;
static float coef[1] = { 0.015625f }; /* c[0] of the q = 1 update: 2^-6 */

static uint32_t sample(uint32_t j)
{
    return zo_sample_index(zo_train_config.seed, 0u, j, M->n_train);
}

static void set_input(uint32_t j)
{
    memcpy(M->input, M->x_train + (size_t)sample(j) * (size_t)M->input_bytes, (size_t)M->input_bytes);
}

static void save_boundary(uint32_t j)
{
    int8_t *dst = M->feature_cache + (size_t)j * (size_t)M->boundary_bytes;
    for (int32_t k = 0; k < M->n_boundary; ++k) {
        memcpy(dst, M->boundary[k].data, (size_t)M->boundary[k].bytes);
        dst += M->boundary[k].bytes;
    }
}

static void load_boundary(uint32_t j)
{
    const int8_t *src = M->feature_cache + (size_t)j * (size_t)M->boundary_bytes;
    for (int32_t k = 0; k < M->n_boundary; ++k) {
        memcpy(M->boundary[k].data, src, (size_t)M->boundary[k].bytes);
        src += M->boundary[k].bytes;
    }
}

static float loss(uint32_t j)
{
    return zo_cross_entropy_s8(M->logits, M->classes, M->logits_scale, M->logits_zp, M->labels[j]);
}

/* the passes, as the trainer runs them */
static void prefix_pass(uint32_t j)
{
    set_input(j);
    M->run_steps(0, M->split);
    save_boundary(j);
}

static void suffix_pass(uint32_t j)
{
    load_boundary(j);
    M->run_steps(M->split, M->logits_end);
    sink += loss(j);
}

static void full_pass(uint32_t j)
{
    set_input(j);
    M->run_steps(0, M->logits_end);
    sink += loss(j);
}

static void perturb_all(int32_t sign, uint32_t t)
{
    sign *= (int32_t)zo_train_config.eps;
    for (int32_t k = 0; k < M->n_tensors; ++k) {
        const zo_trainable_t *tt = &M->tensors[k];
        zo_dir_t d = { zo_train_config.seed, t, 0u, tt->stream, zo_train_config.density_log2 };
        if (tt->eps_b != NULL) {
            zo_perturb_s32((int32_t *)tt->values, tt->count, sign, tt->eps_b, &d);
        } else {
            zo_perturb_s8((int8_t *)tt->values, tt->count, sign, &d);
        }
    }
}

/* ops timed; r counts repetitions (used as the step t of the direction) */
static void op_suffix(uint32_t r) { (void)r; suffix_pass(0); }
static void op_prefix(uint32_t r) { (void)r; prefix_pass(0); }
static void op_full(uint32_t r) { (void)r; full_pass(0); }

static void op_perturb(uint32_t r)
{
    perturb_all(+1, r);
    perturb_all(-2, r);
    perturb_all(+1, r);
}

static void op_update(uint32_t r)
{
    for (int32_t k = 0; k < M->n_tensors; ++k) {
        const zo_trainable_t *tt = &M->tensors[k];
        zo_dir_t d = { zo_train_config.seed, r, 0u, tt->stream, zo_train_config.density_log2 };
        if (tt->eps_b != NULL) {
            zo_update_s32((int32_t *)tt->values, tt->count, coef, 1, tt->eps_b, tt->max_step, &d);
        } else {
            zo_update_s8((int8_t *)tt->values, tt->residual, tt->count, coef, 1, &d, zo_train_config.rounding,
                         127 - (int32_t)zo_train_config.eps);
        }
    }
}

/* the random numbers alone: one direction's sign/mask words over all trainable tensors */
static void op_rng(uint32_t r)
{
    uint32_t acc = 0u;
    for (int32_t k = 0; k < M->n_tensors; ++k) {
        const zo_trainable_t *tt = &M->tensors[k];
        uint32_t key = zo_hash_key(zo_train_config.seed, r, 0u, tt->stream);
        for (int32_t base = 0; base < tt->count; base += 32) {
            uint32_t nz;
            acc ^= zo_dir_block(key, (uint32_t)base >> 5, zo_train_config.density_log2, &nz);
            acc ^= nz;
        }
    }
    sink_u ^= acc;
}

/* a real minibatch: b distinct samples */
static void op_batch_prefix(uint32_t r) { (void)r; for (uint32_t j = 0; j < B; ++j) prefix_pass(j); }
static void op_batch_suffix(uint32_t r) { (void)r; for (uint32_t j = 0; j < B; ++j) suffix_pass(j); }
static void op_batch_full(uint32_t r) { (void)r; for (uint32_t j = 0; j < B; ++j) full_pass(j); }

typedef struct {
    const char *name;
    void (*fn)(uint32_t);
} op_t;

static const op_t OPS[] = {
    { "suffix", op_suffix },
    { "prefix", op_prefix },
    { "full", op_full },
    { "perturb", op_perturb },
    { "update", op_update },
    { "rng", op_rng },
    { "batch_prefix", op_batch_prefix },
    { "batch_suffix", op_batch_suffix },
    { "batch_full", op_batch_full },
};
#define N_OPS (sizeof OPS / sizeof OPS[0])

static uint32_t counter; /* keeps directions distinct across all repetitions */

/* op o repeated reps times: the time taken in BENCH_NOW's units (the platform part defines it) */
static uint64_t run_op(size_t o, uint32_t reps)
{
    uint64_t t0 = BENCH_NOW();
    for (uint32_t r = 0; r < reps; ++r) {
        OPS[o].fn(counter + r);
    }
    uint64_t dt = BENCH_NOW() - t0;
    counter += reps;
    return dt;
}

/* copy the trainable bytes (values, then residuals, tensor by tensor) to `saved`, or back from
 * it (the update changes them) */
static void keep_trainable(uint8_t *saved, int restore)
{
    for (int32_t t = 0; t < M->n_tensors; ++t) {
        const zo_trainable_t *tt = &M->tensors[t];
        size_t bytes = (size_t)tt->count * (tt->eps_b != NULL ? 4u : 1u);
        memcpy(restore ? (uint8_t *)tt->values : saved, restore ? saved : (const uint8_t *)tt->values, bytes);
        saved += bytes;
        if (tt->residual != NULL) {
            memcpy(restore ? (uint8_t *)tt->residual : saved, restore ? saved : (const uint8_t *)tt->residual,
                   (size_t)tt->count);
            saved += tt->count;
        }
    }
}

/* the model, the minibatch's labels and its cached boundary features */
static void bench_setup(void)
{
    M = &zo_train_model;
    B = zo_train_config.batch;
    ZO_MODEL_INIT();
    for (uint32_t j = 0; j < B; ++j) {
        M->labels[j] = M->y_train[sample(j)];
        prefix_pass(j);
    }
}
"""

HARNESS_C = (
    r"""/* zo_bench_train.c - times the parts of one ZO training step (benchmarks/bench_training.py).
 * Linked with the bundle's sources except zo_train_main.c; uses zo_train_model's descriptor. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#define BENCH_NOW now_ns

"""
    + HARNESS_OPS_C
    + r"""
static uint32_t REPS[N_OPS];
static double NS[N_OPS][64];

/* ns per repetition */
static double per_rep(size_t o, uint32_t reps)
{
    return (double)run_op(o, reps) / (double)reps;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    uint32_t rounds = argc > 1 ? (uint32_t)atoi(argv[1]) : 7u;
    double target_ns = (argc > 2 ? atof(argv[2]) : 0.02) * 1e9; /* per op per round */
    if (rounds < 1u || rounds > 64u) {
        fprintf(stderr, "rounds must be 1..64\n");
        return 2;
    }
    bench_setup();
    /* the update changes the trainable bytes: keep a copy and restore it after each round */
    size_t total = 0;
    for (int32_t k = 0; k < M->n_tensors; ++k) {
        total += (size_t)M->tensors[k].count * (M->tensors[k].eps_b != NULL ? 5u : 2u);
    }
    uint8_t *saved = malloc(total);
    if (saved == NULL) {
        return 3;
    }
    /* calibrate the repetitions of each op to about target_ns */
    for (size_t o = 0; o < N_OPS; ++o) {
        uint32_t reps = 1;
        double per = per_rep(o, reps);
        while (per * reps < target_ns / 8.0 && reps < (1u << 24)) {
            reps *= 2u;
            per = per_rep(o, reps);
        }
        double want = target_ns / (per > 1.0 ? per : 1.0);
        REPS[o] = want < 1.0 ? 1u : (want > 1e8 ? 100000000u : (uint32_t)want);
    }
    /* interleaved rounds */
    for (uint32_t k = 0; k < rounds; ++k) {
        for (size_t o = 0; o < N_OPS; ++o) {
            keep_trainable(saved, 0);
            NS[o][k] = per_rep(o, REPS[o]);
            keep_trainable(saved, 1);
        }
    }
    printf("batch %u\nparams %u\nsplit %d\nlogits_end %d\n", (unsigned)B, (unsigned)M->trainable_params,
           (int)M->split, (int)M->logits_end);
    for (size_t o = 0; o < N_OPS; ++o) {
        qsort(NS[o], rounds, sizeof(double), cmp_double);
        double med = (rounds % 2u) ? NS[o][rounds / 2u] : 0.5 * (NS[o][rounds / 2u - 1u] + NS[o][rounds / 2u]);
        printf("%s %.3f\n", OPS[o].name, med);
    }
    free(saved);
    return 0;
}
"""
)

HARNESS_MK = """# bench.mk - builds the step harness with the bundle's own flags and sources
# (used as `make -f Makefile -f bench.mk build/zo_bench_train`).
BENCH_SOURCES := $(SOURCES) $(filter-out zo_train_main.c,$(TRAIN_SOURCES)) zo_port_host.c zo_bench_train.c

build/zo_bench_train: $(BENCH_SOURCES) $(HEADERS) | build
\t$(CC) $(CFLAGS) -o $@ $(BENCH_SOURCES) $(LDFLAGS) -lm
"""


def _make(bundle_path: Path, *args: str) -> None:
    proc = subprocess.run(
        ["make", "-s", "-j", str(nproc()), "-C", str(bundle_path), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the harness failed:\n{proc.stdout}{proc.stderr}")


def _values(out: str) -> dict:
    """`name value...` lines: one number, or a tuple of them."""
    vals = {}
    for line in out.splitlines():
        name, *nums = line.split() or [""]
        if nums:
            vals[name] = float(nums[0]) if len(nums) == 1 else tuple(float(v) for v in nums)
    return vals


def run_harness(bundle_path: Path, rounds: int, target_s: float) -> dict:
    (bundle_path / "zo_bench_train.c").write_text(HARNESS_C)
    (bundle_path / "bench.mk").write_text(HARNESS_MK)
    _make(bundle_path, "-f", "Makefile", "-f", "bench.mk", "build/zo_bench_train")
    out = subprocess.run(
        [str(bundle_path / "build" / "zo_bench_train"), str(rounds), str(target_s)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return _values(out)


# ------------------------------------------------------- the Cortex-M55 harness (QEMU, -icount)

# Under `-icount shift=0` QEMU advances its virtual clock by 1 ns per executed instruction and the
# port's zo_port_time_us (SysTick) follows that clock: 1 us = 1000 instructions.  The counts are
# deterministic, so one measurement per op is enough: the repetitions only beat the 1 us
# resolution of the clock.
M55_TARGET_US = 5000  # virtual us (thousands of instructions) per op, at least
M55_TIMEOUT_S = 120

M55_C = (
    r"""/* zo_bench_m55.c - counts the instructions of the parts of one ZO training step on the
 * Cortex-M55 under QEMU -icount shift=0 (benchmarks/bench_training.py).  Linked with the bundle's
 * sources and port except zo_train_main.c; the results go out over the console as text lines
 * `name reps us`; exits through zo_port_exit. */
#include "zo_port.h"

#define BENCH_NOW zo_port_time_us

"""
    + HARNESS_OPS_C
    + r"""
#ifndef BENCH_TARGET_US
#define BENCH_TARGET_US 5000u
#endif

static void put(const char *s)
{
    zo_port_write((const uint8_t *)s, (uint32_t)strlen(s));
}

static void put_u64(uint64_t v)
{
    char text[21];
    int n = 0;
    do {
        text[sizeof text - 1 - n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    zo_port_write((const uint8_t *)text + sizeof text - n, (uint32_t)n);
}

static void put_line(const char *name, uint64_t a, uint64_t b)
{
    put(name);
    put(" ");
    put_u64(a);
    if (b != UINT64_MAX) {
        put(" ");
        put_u64(b);
    }
    put("\n");
}

/* n iterations of 2 instructions: checks that the clock advances 1 us per 1000 instructions */
static uint64_t calibration_us(uint32_t n)
{
    uint64_t t0 = zo_port_time_us();
    __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    return zo_port_time_us() - t0;
}

int main(void)
{
    zo_port_init();
    put("zo_bench_m55\n");
    put_line("calibration", 2000000u, calibration_us(1000000u));
    bench_setup();
    put_line("batch", B, UINT64_MAX);
    put_line("params", M->trainable_params, UINT64_MAX);
    /* the update changes the trainable bytes: the trainer's snapshot buffer (as large as all of
     * them) keeps them, restored after each measurement */
    uint8_t *saved = M->snapshot;
    for (size_t o = 0; o < N_OPS; ++o) {
        uint32_t reps = 1u;
        uint64_t us;
        for (;;) {
            keep_trainable(saved, 0);
            us = run_op(o, reps);
            keep_trainable(saved, 1);
            if (us >= BENCH_TARGET_US || reps >= (1u << 20)) {
                break;
            }
            reps *= 2u;
        }
        put_line(OPS[o].name, reps, us);
    }
    put("end\n");
    zo_port_exit(0);
}
"""
)

M55_MK = """# bench_m55.mk - builds the M55 step harness with the bundle's flags, linker script and port, in
# its own object directory (used as `make -f Makefile -f bench_m55.mk BENCH=<variant>
# EXTRA_CFLAGS=... build/bench-<variant>/zo_bench_m55.elf`).
BENCH_DIR := build/bench-$(BENCH)
BENCH_SOURCES := $(SOURCES) $(filter-out zo_train_main.c,$(TRAIN_SOURCES)) $(PORT_SOURCES) zo_bench_m55.c
BENCH_OBJECTS := $(BENCH_SOURCES:%.c=$(BENCH_DIR)/%.o)

$(BENCH_DIR):
\tmkdir -p $@

$(BENCH_DIR)/%.o: %.c $(HEADERS) | $(BENCH_DIR)
\t$(CC) $(CFLAGS) -c -o $@ $<

$(BENCH_DIR)/zo_bench_m55.elf: $(BENCH_OBJECTS) link.ld
\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(BENCH_OBJECTS) $(LIBS)
"""

# build variants: name, label, extra C flags
M55_VARIANTS = (("mve", "Helium", ""), ("portable", "portable (-DZO_NO_MVE)", "-DZO_NO_MVE"))


def m55_available() -> bool:
    return all(shutil.which(tool) for tool in ("arm-none-eabi-gcc", "qemu-system-arm"))


def run_m55_harness(bundle_path: Path, variant: str, extra_cflags: str) -> dict:
    """Build the harness for one variant, run it in QEMU; instructions per op (and `batch`, `params`)."""
    (bundle_path / "zo_bench_m55.c").write_text(M55_C)
    (bundle_path / "bench_m55.mk").write_text(M55_MK)
    elf = f"build/bench-{variant}/zo_bench_m55.elf"
    _make(
        bundle_path,
        "-f",
        "Makefile",
        "-f",
        "bench_m55.mk",
        f"BENCH={variant}",
        f"EXTRA_CFLAGS={extra_cflags} -DBENCH_TARGET_US={M55_TARGET_US}u",
        elf,
    )
    proc = subprocess.run(
        [
            "qemu-system-arm",
            "-M",
            "mps3-an547",
            "-nographic",
            "-semihosting",
            "-icount",
            "shift=0",
            "-kernel",
            str(bundle_path / elf),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=M55_TIMEOUT_S,
        check=False,
    )
    out = proc.stdout.decode(errors="replace")
    if proc.returncode != 0 or "\nend\n" not in out:
        raise RuntimeError(
            f"the M55 harness ({variant}) failed (exit {proc.returncode}):\n{out}{proc.stderr.decode(errors='replace')}"
        )
    vals = _values(out)
    instr, us = vals.pop("calibration")
    if abs(us * 1000 - instr) > 1000:  # the clock's resolution: 1 us
        raise RuntimeError(
            f"the QEMU clock does not count 1 ns per instruction: {instr:.0f} instructions "
            f"took {us:.0f} us of virtual time"
        )
    # `name reps us` -> instructions per op
    return {k: (v[1] * 1000 / v[0] if isinstance(v, tuple) else v) for k, v in vals.items()}


# ---------------------------------------------------------------------------- whole runs


def _records(data: bytes) -> list[dict]:
    from zoflash.monitor import telemetry

    dec = telemetry.Decoder()
    recs = dec.records(dec.feed(data) + dec.flush())
    if dec.crc_errors or dec.truncated or dec.malformed:
        raise RuntimeError(f"bad telemetry stream: {dec.stats()}")
    return recs


def _untimed(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time_s"} for r in recs]


def _options(**kw):
    from zoflash.training.options import TrainOptions, validate

    return validate(TrainOptions(**kw))


def calibrated_lr(task: Task, workdir: Path) -> float:
    """lr_1 from the trainer's own calibration (a short C run with lr auto), so that every
    benchmark run trains at a realistic rate at its fixed q without calibration steps."""
    from zoflash.targets.host_build import run_make
    from zoflash.training.options import TrainOptions
    from zoflash.workflows import training as pipeline

    opts = _options(scheduler="fixed", q=1, steps=TrainOptions().calib_steps + 1, eval_every=1000)
    prep = pipeline.compile_for_training(task.model, task.data, opts)
    bundle = pipeline.training_bundle(prep, "host", workdir / f"{task.name}-calib")
    run_make(bundle, f"build/{bundle.prefix}_train")
    out = subprocess.run(
        [str(bundle.path / "build" / f"{bundle.prefix}_train")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
    ).stdout
    for r in _records(out):
        if r["type"] == "event" and r["kind"] == "lr":
            return r["value"]
    raise RuntimeError(f"{task.name}: the calibration run set no learning rate")


def throughput(task: Task, q: int, lr: float, workdir: Path, rounds: int):
    """C program (median of `rounds` process runs) and the reference (one run) for the same options."""
    from zoflash.targets.host_build import run_make
    from zoflash.workflows import training as pipeline
    from zoflash.workflows.simulate import reference_frames

    steps = STEPS[q]
    opts = _options(scheduler="fixed", q=q, steps=steps, lr=lr, eval_every=steps)
    prep = pipeline.compile_for_training(task.model, task.data, opts)
    bundle = pipeline.training_bundle(prep, "host", workdir / f"{task.name}-q{q}")
    run_make(bundle, f"build/{bundle.prefix}_train")
    exe = bundle.path / "build" / f"{bundle.prefix}_train"
    times, out = [], b""
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = subprocess.run([str(exe)], stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
        times.append(time.perf_counter() - t0)
    c_recs = _records(out)
    t0 = time.perf_counter()
    ref_out = b"".join(reference_frames(prep))
    t_ref = time.perf_counter() - t0
    ref_recs = _records(ref_out)
    done = next(r for r in c_recs if r["type"] == "done")
    evals = [r for r in c_recs if r["type"] == "eval"]
    passes = done["prefix_passes"] + done["suffix_passes"]
    t_c = statistics.median(times)
    return dict(
        model=task.name,
        q=q,
        steps=done["steps"],
        passes=passes,
        eval_passes=evals[-1]["eval_passes"],
        c_s=t_c,
        c_steps=done["steps"] / t_c,
        c_passes=passes / t_c,
        ref_s=t_ref,
        ref_steps=done["steps"] / t_ref,
        ref_passes=passes / t_ref,
        ratio=t_ref / t_c,
        identical=_untimed(c_recs) == _untimed(ref_recs),
        acc0=evals[0]["accuracy"],
        acc1=evals[-1]["accuracy"],
    ), bundle


def _parts_row(task: Task, h: dict) -> dict:
    """The step's ratios from the harness's per-op times (or instruction counts)."""
    b = int(h["batch"])
    machinery = h["perturb"] + h["update"]
    forward = 2 * b * h["suffix"]
    row = dict(
        model=task.name,
        batch=b,
        params=int(h["params"]),
        **{
            k: h[k]
            for k in (
                "suffix",
                "prefix",
                "full",
                "perturb",
                "update",
                "rng",
                "batch_prefix",
                "batch_suffix",
                "batch_full",
            )
        },
    )
    row["fraction"] = machinery / forward
    row["update_share"] = h["update"] / machinery
    row["step_share"] = machinery / (b * h["prefix"] + forward + machinery)  # of the whole q = 1 step
    row["rng_share"] = 4 * h["rng"] / machinery  # 3 perturbation sweeps + 1 update sweep at q = 1
    row["reuse"] = {q: (2 * q * b * h["full"]) / (b * h["prefix"] + 2 * q * b * h["suffix"]) for q in QS}
    row["direct_ratio"] = h["batch_full"] / h["batch_suffix"]
    row["direct_reuse_q1"] = (2 * h["batch_full"]) / (h["batch_prefix"] + 2 * h["batch_suffix"])
    return row


def step_parts(task: Task, bundle_path: Path, rounds: int, target_s: float) -> dict:
    return _parts_row(task, run_harness(bundle_path, rounds, target_s))


def m55_step_parts(task: Task, lr: float, workdir: Path) -> list[dict]:
    """The step's parts in instructions on the Cortex-M55 (QEMU), for each build variant, with the
    mps3-an547 training bundle of the q = 1 run's options."""
    from zoflash.workflows import training as pipeline

    steps = STEPS[1]
    prep = pipeline.compile_for_training(
        task.model, task.data, _options(scheduler="fixed", q=1, steps=steps, lr=lr, eval_every=steps)
    )
    bundle = pipeline.training_bundle(prep, "mps3-an547", workdir / f"{task.name}-m55")
    rows = []
    for variant, label, cflags in M55_VARIANTS:
        rows.append(dict(_parts_row(task, run_m55_harness(bundle.path, variant, cflags)), build=label))
    return rows


def tool_version(tool: str) -> str:
    """`arm-none-eabi-gcc 12.2.1`, `QEMU 7.2.22`: the first line of --version, shortened."""
    try:
        line = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    except OSError:
        return tool
    words = line.split()
    version = next((w for w in reversed(words) if w[:1].isdigit() and "." in w), "")
    if tool.startswith("qemu"):
        return f"QEMU {words[3] if len(words) > 3 else version}"
    return f"{tool} {version}".strip()


# ---------------------------------------------------------------------------- report


def harness_rounds(rounds: int) -> int:
    """Short interleaved rounds, many of them: the median then ignores bursts of other work."""
    return min(2 * rounds + 1, 64)


def nproc() -> int:
    """Processors this process may run on (what `nproc` prints)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


def to_markdown(
    runs: list[dict], parts: list[dict], tasks: list[Task], rounds: int, load: str, m55: list[dict] | None = None
) -> str:
    lines = [
        "## Training: host simulation throughput and the cost of a ZO step",
        "",
        f"Command: `{COMMAND}` (also `make bench`). Machine: {cpu_name()}, nproc {nproc()}, "
        f" Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; 1-minute load average",
        f"{load} at the start (other work on the machine inflates the absolute times).",
        "",
        "Tasks:",
        "",
        *[f"- **{t.name}**: {t.note}." for t in tasks],
        "",
        "Options: batch 16, rounding split16, density 1, scheduler `fixed` at q, lr_1 fixed to the value",
        "the trainer's own calibration gives (so no calibration steps; lr at q = lr_1·sqrt(q)), evaluation",
        "only before the first and after the last step. These are throughput runs, not tuned ones: at",
        "q = 1 that lr is too noisy and the test accuracy falls.",
        "",
        "### Throughput of the whole training run",
        "",
        "The C training program (`build/<prefix>_train`, binary telemetry on stdout) is timed as a",
        f"process from start to exit (build excluded; median of {rounds} runs; nothing subtracted: the",
        "two evaluations, the telemetry and the process start-up are inside the time). The Python",
        "reference engine runs the same options once in the same invocation (generator fully",
        "consumed). It computes the frozen prefix once per training sample up front (included in its",
        "time) where the C recomputes it for every minibatch sample, so at q = 1 it does less work than",
        "the passes it counts. Forward passes = prefix + suffix sample-passes of training; evaluation",
        "passes are not counted, but their time is in the run.",
        "`same log`: the C and reference telemetry are identical apart from times.",
        "",
        "| model | q | steps | passes | eval passes | C run s | C steps/s | C passes/s | ref run s | "
        "ref steps/s | ref passes/s | C / ref | same log | test acc start → end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['model']} | {r['q']} | {r['steps']} | {r['passes']} | {r['eval_passes']} | "
            f"{r['c_s']:.3f} | {r['c_steps']:.0f} | {r['c_passes']:.0f} | {r['ref_s']:.2f} | "
            f"{r['ref_steps']:.1f} | {r['ref_passes']:.0f} | {r['ratio']:.0f}x | "
            f"{'yes' if r['identical'] else '**no**'} | {r['acc0']:.3f} → {r['acc1']:.3f} |"
        )
    lines += [
        "",
        "### Parts of one step (C harness)",
        "",
        "A harness generated next to the bundle (`zo_bench_train.c`, linked with the bundle's sources",
        "except `zo_train_main.c`, built with the bundle's flags `-O2 -std=c11 -ffp-contract=off`) times",
        "each part with `clock_gettime`, as the trainer runs it, through `zo_train_model`; the parts are",
        f"interleaved over {harness_rounds(rounds)} rounds of ~{HARNESS_ROUND_S * 1e3:.0f} ms, the median kept.",
        "",
        "- `suffix`: copy the cached boundary back, `run_steps(split, logits_end)`, cross-entropy (one",
        "  cached sample);",
        "- `prefix`: copy the input, `run_steps(0, split)`, save the boundary;",
        "- `full`: copy the input, `run_steps(0, logits_end)`, cross-entropy;",
        "- `perturb`: one direction's perturbation work, +1, -2, +1 over every trainable tensor;",
        "- `update`: one update at q = 1 (`zo_update_s8` / `zo_update_s32` with c[0] = 2^-6);",
        "- `RNG`: the direction's random words alone, one sweep over every trainable tensor (the",
        "  perturbation and the update pay 4 such sweeps per step at q = 1).",
        "",
        "ZO machinery per step at q = 1 = `perturb` + `update`; forward work of that step = 2·b suffix",
        "passes; fraction = machinery / (2·b·suffix) (target for the digits head: under 10%). For scale,",
        "`of the step` is the machinery's share of the whole q = 1 step (b prefix + 2·b suffix + machinery).",
        "",
        "| model | trainable params | prefix µs | suffix µs | full µs | perturb µs | update µs | RNG µs | "
        "machinery / forward (q = 1) | update share | RNG share | of the step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in parts:
        lines.append(
            f"| {p['model']} | {p['params']} | {p['prefix'] / 1e3:.3f} | {p['suffix'] / 1e3:.3f} | "
            f"{p['full'] / 1e3:.3f} | {p['perturb'] / 1e3:.3f} | {p['update'] / 1e3:.3f} | "
            f"{p['rng'] / 1e3:.3f} | **{100 * p['fraction']:.1f}%** | {100 * p['update_share']:.0f}% | "
            f"{100 * p['rng_share']:.0f}% | {100 * p['step_share']:.1f}% |"
        )
    lines += [
        "",
        "### Speed-up of feature reuse",
        "",
        "Forward work of one step with feature reuse (b prefix passes + 2·q·b suffix passes) against",
        "recomputing the whole network for every perturbed pass (2·q·b full passes), from the per-pass",
        "times above. `direct`: one real minibatch (b = 16 distinct samples) timed as a whole: b full",
        "passes against b suffix passes, and the q = 1 step (b prefix + 2b suffix vs 2b full).",
        "",
        "| model | " + " | ".join(f"q = {q}" for q in QS) + " | direct: b full / b suffix | direct: q = 1 step |",
        "|---|" + "---:|" * (len(QS) + 2),
    ]
    for p in parts:
        lines.append(
            f"| {p['model']} | "
            + " | ".join(f"{p['reuse'][q]:.2f}x" for q in QS)
            + f" | {p['direct_ratio']:.2f}x | {p['direct_reuse_q1']:.2f}x |"
        )
    lines += m55_markdown(m55, parts)
    lines.append("")
    return "\n".join(lines)


def m55_markdown(m55: list[dict] | None, parts: list[dict]) -> list[str]:
    lines = ["", "### Cortex-M55 under QEMU: instruction counts", ""]
    if not m55:
        return lines + ["Not measured in this run (`--no-m55`, or arm-none-eabi-gcc / qemu-system-arm not found)."]
    lines += [
        "The same parts on the target CPU. The `mps3-an547` training bundle of the q = 1 run (board flags",
        f"`-mcpu=cortex-m55 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16 -O2`, {tool_version('arm-none-eabi-gcc')}) is",
        "linked with a harness `zo_bench_m55.c` (the same ops as the host harness, results as text lines",
        "on UART0) in place of `zo_train_main.c`, and run in",
        f"`qemu-system-arm -M mps3-an547 -semihosting -icount shift=0` ({tool_version('qemu-system-arm')}). Under",
        "`-icount shift=0` QEMU's virtual clock advances 1 ns per executed instruction and the port's",
        "`zo_port_time_us` (SysTick) follows it, so the numbers below are **executed instruction counts",
        "under QEMU, not cycles**: every instruction counts as one, an MVE (Helium) instruction on 16",
        "lanes as much as a scalar add; the M55's beat-wise MVE execution, its pipeline and memory wait",
        "states are not modelled. Each op is repeated (doubling) until it has run at least",
        f"{M55_TARGET_US:,} µs of virtual time ({M55_TARGET_US / 1e3:g} million instructions); count = virtual",
        "µs × 1000 / repetitions (the clock's 1 µs resolution is under 0.02% of that). The harness",
        "first checks that a 2-instruction loop of 10^6 iterations reads 2,000 µs (± the 1 µs). The counts",
        "are deterministic: one run, no median.",
        "",
        f"Builds: `{M55_VARIANTS[0][1]}` is the bundle as generated (the Helium paths of `zo_train_math.c`:",
        f"perturbation, accumulation of u, rounding of full blocks); `{M55_VARIANTS[1][1]}` its portable",
        "loops (with the update's table path; gcc still vectorizes a few of them for the M55). The",
        "model's kernels are the same C in both builds, so the passes count the same.",
        "`perturbation sweep` = one of the 3 sweeps (+1, -2, +1) of a direction (a third of `perturb`",
        "above); machinery at q = 1 = 3 sweeps + 1 update; forward = 2·b suffix passes (b = 16);",
        "`of the step` adds the b prefix passes. Feature reuse as above, from the per-pass counts.",
        "",
        (
            "| model | build | prefix | suffix | full | perturbation sweep | update (q = 1) | RNG sweep | "
            "machinery / forward (q = 1) | update share | of the step | reuse q = 1 | q = 4 | q = 16 | "
            "direct: q = 1 step |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in m55:
        lines.append(
            f"| {p['model']} | {p['build']} | {p['prefix']:,.0f} | {p['suffix']:,.0f} | {p['full']:,.0f} | "
            f"{p['perturb'] / 3:,.0f} | {p['update']:,.0f} | {p['rng']:,.0f} | "
            f"**{100 * p['fraction']:.1f}%** | {100 * p['update_share']:.0f}% | "
            f"{100 * p['step_share']:.1f}% | "
            + " | ".join(f"{p['reuse'][q]:.2f}x" for q in QS)
            + f" | {p['direct_reuse_q1']:.2f}x |"
        )
    lines += ["", "ZO machinery / forward at q = 1 (target for the digits head: under 10%):", ""]
    host = {p["model"]: p["fraction"] for p in parts}
    for model in dict.fromkeys(p["model"] for p in m55):
        on_m55 = ", ".join(f"{100 * p['fraction']:.1f}% {p['build']}" for p in m55 if p["model"] == model)
        lines.append(
            f"- {model}: Cortex-M55 {on_m55}" + (f"; host harness {100 * host[model]:.1f}%." if model in host else ".")
        )
    return lines


def make_tasks(workdir: Path) -> list[Task]:
    import numpy as np

    digits = FIXTURES / "digits_shift.npz"
    flat = workdir / "digits_flat.npz"
    with np.load(digits) as d:
        np.savez(flat, **{k: (v.reshape(len(v), -1) if k.startswith("x") else v) for k, v in d.items()})
    return [
        Task(
            "digits head",
            FIXTURES / "digits_cnn.tflite",
            digits,
            "digits_cnn.tflite on digits_shift.npz, last FC 10x256 + bias (2570 parameters) trained",
        ),
        Task(
            "mlp",
            FIXTURES / "mlp.tflite",
            flat,
            "mlp.tflite on the same digits flattened to 64 features, last FC 10x16 + bias (170 parameters)",
        ),
    ]


def print_run(row: dict) -> None:
    print(
        f"  q={row['q']:<3} {row['steps']:5} steps  C {row['c_s']:6.3f} s {row['c_steps']:8.0f} steps/s "
        f"{row['c_passes']:9.0f} passes/s | ref {row['ref_s']:6.2f} s {row['ref_steps']:7.1f} steps/s "
        f"{row['ref_passes']:7.0f} passes/s | C/ref {row['ratio']:5.0f}x  "
        f"same log {'yes' if row['identical'] else 'NO'}  acc {row['acc0']:.3f} -> {row['acc1']:.3f}",
        flush=True,
    )


def print_parts(p: dict) -> None:
    print(
        f"  step parts (ns): prefix {p['prefix']:.0f}  suffix {p['suffix']:.0f}  full {p['full']:.0f}  "
        f"perturb {p['perturb']:.0f}  update {p['update']:.0f}  rng {p['rng']:.0f}",
        flush=True,
    )
    print(
        f"  ZO machinery / forward at q=1, b={p['batch']}: {100 * p['fraction']:.1f}% "
        f"(update {100 * p['update_share']:.0f}%, RNG {100 * p['rng_share']:.0f}% of the "
        f"machinery; {100 * p['step_share']:.1f}% of the whole step)",
        flush=True,
    )
    print(
        "  feature reuse speed-up: "
        + "  ".join(f"q={q} {p['reuse'][q]:.2f}x" for q in QS)
        + f"  | direct: b full / b suffix {p['direct_ratio']:.2f}x, q=1 step {p['direct_reuse_q1']:.2f}x",
        flush=True,
    )


def print_m55(p: dict) -> None:
    print(
        f"  M55 {p['build']}: instructions: prefix {p['prefix']:.0f}  suffix {p['suffix']:.0f}  "
        f"full {p['full']:.0f}  perturbation sweep {p['perturb'] / 3:.0f}  update {p['update']:.0f}  "
        f"rng sweep {p['rng']:.0f}",
        flush=True,
    )
    print(
        f"    ZO machinery / forward at q=1, b={p['batch']}: {100 * p['fraction']:.1f}% "
        f"(update {100 * p['update_share']:.0f}% of it; {100 * p['step_share']:.1f}% of the whole step); "
        "feature reuse " + "  ".join(f"q={q} {p['reuse'][q]:.2f}x" for q in QS),
        flush=True,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write (or replace) the training section of this markdown file")
    ap.add_argument("--rounds", type=int, default=7, help="C process runs per q (the harness runs 2 * rounds + 1)")
    ap.add_argument("--no-m55", action="store_true", help="skip the Cortex-M55 instruction counts (QEMU)")
    ap.add_argument(
        "--m55-only", action="store_true", help="only the Cortex-M55 instruction counts (print, no --write)"
    )
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 64:
        ap.error("--rounds must be in 1..64")
    if args.m55_only and (args.write or args.no_m55):
        ap.error("--m55-only prints only: not with --write or --no-m55")
    with_m55 = not args.no_m55 and m55_available()
    if args.m55_only and not with_m55:
        ap.error("the Cortex-M55 part needs arm-none-eabi-gcc and qemu-system-arm")
    runs, parts, m55 = [], [], []
    load = load_average()
    with tempfile.TemporaryDirectory(prefix="zoflash-bench-train-") as tmp:
        work = Path(tmp)
        tasks = make_tasks(work)
        for task in tasks:
            lr = calibrated_lr(task, work)
            print(f"{task.name}: calibrated lr_1 = {lr:g}", flush=True)
            if with_m55:
                t0 = time.perf_counter()
                m55 += m55_step_parts(task, lr, work)
                for p in m55[-len(M55_VARIANTS) :]:
                    print_m55(p)
                print(f"  (Cortex-M55 part: {time.perf_counter() - t0:.1f} s)", flush=True)
            if args.m55_only:
                continue
            for q in QS:
                row, bundle = throughput(task, q, lr, work, args.rounds)
                runs.append(row)
                print_run(row)
                if q == 1:  # the step parts, with the q = 1 bundle
                    parts.append(step_parts(task, bundle.path, harness_rounds(args.rounds), HARNESS_ROUND_S))
                    print_parts(parts[-1])
    bad = [f"{r['model']} q={r['q']}" for r in runs if not r["identical"]]
    if bad:
        print(f"warning: C and reference logs differ for {', '.join(bad)}", file=sys.stderr)
    if args.write:
        write_section(args.write, SECTION, to_markdown(runs, parts, tasks, args.rounds, load, m55))
        print(f"wrote the {SECTION} section of {args.write}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
