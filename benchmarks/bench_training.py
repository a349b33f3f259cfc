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
    the per-pass times, at q = 1, 4, 16; and a real minibatch timed directly.

Usage: python benchmarks/bench_training.py [--write docs/benchmarks.md] [--rounds 7]
Machines are noisy: read the ratios, not the absolute times.
"""
from __future__ import annotations

import argparse
import os
import platform
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

HARNESS_C = r"""/* zo_bench_train.c - times the parts of one ZO training step (benchmarks/bench_training.py).
 * Linked with the bundle's sources except zo_train_main.c; uses zo_train_model's descriptor. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zo_bundle.h"
#include "zo_trainer.h"

extern const zo_train_model_t zo_train_model;
extern const zo_train_config_t zo_train_config;

static const zo_train_model_t *M;
static uint32_t B;
static volatile float sink;
static volatile uint32_t sink_u;
static float coef[1] = { 0.015625f }; /* c[0] of the q = 1 update: 2^-6 */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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
    uint32_t reps;
    double ns[64];
} op_t;

static op_t OPS[] = {
    { "suffix", op_suffix, 0, { 0 } },
    { "prefix", op_prefix, 0, { 0 } },
    { "full", op_full, 0, { 0 } },
    { "perturb", op_perturb, 0, { 0 } },
    { "update", op_update, 0, { 0 } },
    { "rng", op_rng, 0, { 0 } },
    { "batch_prefix", op_batch_prefix, 0, { 0 } },
    { "batch_suffix", op_batch_suffix, 0, { 0 } },
    { "batch_full", op_batch_full, 0, { 0 } },
};
#define N_OPS (sizeof OPS / sizeof OPS[0])

static uint32_t counter; /* keeps directions distinct across all repetitions */

static double run_op(op_t *op, uint32_t reps)
{
    uint64_t t0 = now_ns();
    for (uint32_t r = 0; r < reps; ++r) {
        op->fn(counter + r);
    }
    uint64_t dt = now_ns() - t0;
    counter += reps;
    return (double)dt / (double)reps;
}

/* copy the trainable bytes (values, residuals) to `saved`, or back from it */
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
    M = &zo_train_model;
    B = zo_train_config.batch;
    ZO_MODEL_INIT();
    for (uint32_t j = 0; j < B; ++j) {
        M->labels[j] = M->y_train[sample(j)];
        prefix_pass(j);
    }
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
        double per = run_op(&OPS[o], reps);
        while (per * reps < target_ns / 8.0 && reps < (1u << 24)) {
            reps *= 2u;
            per = run_op(&OPS[o], reps);
        }
        double want = target_ns / (per > 1.0 ? per : 1.0);
        OPS[o].reps = want < 1.0 ? 1u : (want > 1e8 ? 100000000u : (uint32_t)want);
    }
    /* interleaved rounds */
    for (uint32_t k = 0; k < rounds; ++k) {
        for (size_t o = 0; o < N_OPS; ++o) {
            keep_trainable(saved, 0);
            OPS[o].ns[k] = run_op(&OPS[o], OPS[o].reps);
            keep_trainable(saved, 1);
        }
    }
    printf("batch %u\nparams %u\nsplit %d\nlogits_end %d\n", (unsigned)B, (unsigned)M->trainable_params,
           (int)M->split, (int)M->logits_end);
    for (size_t o = 0; o < N_OPS; ++o) {
        qsort(OPS[o].ns, rounds, sizeof(double), cmp_double);
        double med = (rounds % 2u) ? OPS[o].ns[rounds / 2u]
                                   : 0.5 * (OPS[o].ns[rounds / 2u - 1u] + OPS[o].ns[rounds / 2u]);
        printf("%s %.3f\n", OPS[o].name, med);
    }
    free(saved);
    return 0;
}
"""

HARNESS_MK = """# bench.mk - builds the step harness with the bundle's own flags and sources
# (used as `make -f Makefile -f bench.mk build/zo_bench_train`).
BENCH_SOURCES := $(SOURCES) $(filter-out zo_train_main.c,$(TRAIN_SOURCES)) zo_port_host.c zo_bench_train.c

build/zo_bench_train: $(BENCH_SOURCES) $(HEADERS) | build
\t$(CC) $(CFLAGS) -o $@ $(BENCH_SOURCES) $(LDFLAGS) -lm
"""


def run_harness(bundle_path: Path, rounds: int, target_s: float) -> dict:
    (bundle_path / "zo_bench_train.c").write_text(HARNESS_C)
    (bundle_path / "bench.mk").write_text(HARNESS_MK)
    proc = subprocess.run(["make", "-s", "-C", str(bundle_path), "-f", "Makefile", "-f", "bench.mk",
                           "build/zo_bench_train"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building the harness failed:\n{proc.stdout}{proc.stderr}")
    out = subprocess.run([str(bundle_path / "build" / "zo_bench_train"), str(rounds), str(target_s)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True).stdout
    vals = {}
    for line in out.split("\n"):
        if line.strip():
            name, value = line.split()
            vals[name] = float(value)
    return vals


# ---------------------------------------------------------------------------- whole runs

def _records(data: bytes) -> list[dict]:
    from zoflash import telemetry

    dec = telemetry.Decoder()
    recs = dec.records(dec.feed(data) + dec.flush())
    if dec.crc_errors or dec.truncated or dec.malformed:
        raise RuntimeError(f"bad telemetry stream: {dec.stats()}")
    return recs


def _untimed(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time_s"} for r in recs]


def _options(**kw):
    from zoflash.train_options import TrainOptions, validate

    return validate(TrainOptions(**kw))


def calibrated_lr(task: Task, workdir: Path) -> float:
    """lr_1 from the trainer's own calibration (a short C run with lr auto), so that every
    benchmark run trains at a realistic rate at its fixed q without calibration steps."""
    from zoflash import simulate
    from zoflash.build import run_make
    from zoflash.train_options import TrainOptions

    opts = _options(scheduler="fixed", q=1, steps=TrainOptions().calib_steps + 1, eval_every=1000)
    prep = simulate.prepare(task.model, task.data, opts)
    bundle = simulate.training_bundle(prep, "host", workdir / f"{task.name}-calib")
    run_make(bundle, f"build/{bundle.prefix}_train")
    out = subprocess.run([str(bundle.path / "build" / f"{bundle.prefix}_train")], stdin=subprocess.DEVNULL,
                         capture_output=True, check=True).stdout
    for r in _records(out):
        if r["type"] == "event" and r["kind"] == "lr":
            return r["value"]
    raise RuntimeError(f"{task.name}: the calibration run set no learning rate")


def throughput(task: Task, q: int, lr: float, workdir: Path, rounds: int):
    """C program (median of `rounds` process runs) and the reference (one run) for the same options."""
    from zoflash import simulate
    from zoflash.build import run_make

    steps = STEPS[q]
    opts = _options(scheduler="fixed", q=q, steps=steps, lr=lr, eval_every=steps)
    prep = simulate.prepare(task.model, task.data, opts)
    bundle = simulate.training_bundle(prep, "host", workdir / f"{task.name}-q{q}")
    run_make(bundle, f"build/{bundle.prefix}_train")
    exe = bundle.path / "build" / f"{bundle.prefix}_train"
    times, out = [], b""
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = subprocess.run([str(exe)], stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
        times.append(time.perf_counter() - t0)
    c_recs = _records(out)
    t0 = time.perf_counter()
    ref_out = b"".join(simulate.reference_frames(prep))
    t_ref = time.perf_counter() - t0
    ref_recs = _records(ref_out)
    done = next(r for r in c_recs if r["type"] == "done")
    evals = [r for r in c_recs if r["type"] == "eval"]
    passes = done["prefix_passes"] + done["suffix_passes"]
    t_c = statistics.median(times)
    return dict(model=task.name, q=q, steps=done["steps"], passes=passes, eval_passes=evals[-1]["eval_passes"],
                c_s=t_c, c_steps=done["steps"] / t_c, c_passes=passes / t_c,
                ref_s=t_ref, ref_steps=done["steps"] / t_ref, ref_passes=passes / t_ref,
                ratio=t_ref / t_c, identical=_untimed(c_recs) == _untimed(ref_recs),
                acc0=evals[0]["accuracy"], acc1=evals[-1]["accuracy"]), bundle


def step_parts(task: Task, bundle_path: Path, rounds: int, target_s: float) -> dict:
    h = run_harness(bundle_path, rounds, target_s)
    b = int(h["batch"])
    machinery = h["perturb"] + h["update"]
    forward = 2 * b * h["suffix"]
    row = dict(model=task.name, batch=b, params=int(h["params"]), **{k: h[k] for k in (
        "suffix", "prefix", "full", "perturb", "update", "rng", "batch_prefix", "batch_suffix", "batch_full")})
    row["fraction"] = machinery / forward
    row["update_share"] = h["update"] / machinery
    row["step_share"] = machinery / (b * h["prefix"] + forward + machinery)  # of the whole q = 1 step
    row["rng_share"] = 4 * h["rng"] / machinery  # 3 perturbation sweeps + 1 update sweep at q = 1
    row["reuse"] = {q: (2 * q * b * h["full"]) / (b * h["prefix"] + 2 * q * b * h["suffix"]) for q in QS}
    row["direct_ratio"] = h["batch_full"] / h["batch_suffix"]
    row["direct_reuse_q1"] = (2 * h["batch_full"]) / (h["batch_prefix"] + 2 * h["batch_suffix"])
    return row


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


def to_markdown(runs: list[dict], parts: list[dict], tasks: list[Task], rounds: int, load: str) -> str:
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
        lines.append(f"| {r['model']} | {r['q']} | {r['steps']} | {r['passes']} | {r['eval_passes']} | "
                     f"{r['c_s']:.3f} | {r['c_steps']:.0f} | {r['c_passes']:.0f} | {r['ref_s']:.2f} | "
                     f"{r['ref_steps']:.1f} | {r['ref_passes']:.0f} | {r['ratio']:.0f}x | "
                     f"{'yes' if r['identical'] else '**no**'} | {r['acc0']:.3f} → {r['acc1']:.3f} |")
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
        lines.append(f"| {p['model']} | {p['params']} | {p['prefix'] / 1e3:.3f} | {p['suffix'] / 1e3:.3f} | "
                     f"{p['full'] / 1e3:.3f} | {p['perturb'] / 1e3:.3f} | {p['update'] / 1e3:.3f} | "
                     f"{p['rng'] / 1e3:.3f} | **{100 * p['fraction']:.1f}%** | {100 * p['update_share']:.0f}% | "
                     f"{100 * p['rng_share']:.0f}% | {100 * p['step_share']:.1f}% |")
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
        lines.append(f"| {p['model']} | " + " | ".join(f"{p['reuse'][q]:.2f}x" for q in QS) +
                     f" | {p['direct_ratio']:.2f}x | {p['direct_reuse_q1']:.2f}x |")
    lines.append("")
    return "\n".join(lines)


def make_tasks(workdir: Path) -> list[Task]:
    import numpy as np

    digits = FIXTURES / "digits_shift.npz"
    flat = workdir / "digits_flat.npz"
    with np.load(digits) as d:
        np.savez(flat, **{k: (v.reshape(len(v), -1) if k.startswith("x") else v) for k, v in d.items()})
    return [
        Task("digits head", FIXTURES / "digits_cnn.tflite", digits,
             "digits_cnn.tflite on digits_shift.npz, last FC 10x256 + bias (2570 parameters) trained"),
        Task("mlp", FIXTURES / "mlp.tflite", flat,
             "mlp.tflite on the same digits flattened to 64 features, last FC 10x16 + bias (170 parameters)"),
    ]


def print_run(row: dict) -> None:
    print(f"  q={row['q']:<3} {row['steps']:5} steps  C {row['c_s']:6.3f} s {row['c_steps']:8.0f} steps/s "
          f"{row['c_passes']:9.0f} passes/s | ref {row['ref_s']:6.2f} s {row['ref_steps']:7.1f} steps/s "
          f"{row['ref_passes']:7.0f} passes/s | C/ref {row['ratio']:5.0f}x  "
          f"same log {'yes' if row['identical'] else 'NO'}  acc {row['acc0']:.3f} -> {row['acc1']:.3f}", flush=True)


def print_parts(p: dict) -> None:
    print(f"  step parts (ns): prefix {p['prefix']:.0f}  suffix {p['suffix']:.0f}  full {p['full']:.0f}  "
          f"perturb {p['perturb']:.0f}  update {p['update']:.0f}  rng {p['rng']:.0f}", flush=True)
    print(f"  ZO machinery / forward at q=1, b={p['batch']}: {100 * p['fraction']:.1f}% "
          f"(update {100 * p['update_share']:.0f}%, RNG {100 * p['rng_share']:.0f}% of the "
          f"machinery; {100 * p['step_share']:.1f}% of the whole step)", flush=True)
    print("  feature reuse speed-up: " + "  ".join(f"q={q} {p['reuse'][q]:.2f}x" for q in QS) +
          f"  | direct: b full / b suffix {p['direct_ratio']:.2f}x, q=1 step {p['direct_reuse_q1']:.2f}x", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write (or replace) the training section of this markdown file")
    ap.add_argument("--rounds", type=int, default=7, help="C process runs per q (the harness runs 2 * rounds + 1)")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 64:
        ap.error("--rounds must be in 1..64")
    runs, parts = [], []
    load = load_average()
    with tempfile.TemporaryDirectory(prefix="zoflash-bench-train-") as tmp:
        work = Path(tmp)
        tasks = make_tasks(work)
        for task in tasks:
            lr = calibrated_lr(task, work)
            print(f"{task.name}: calibrated lr_1 = {lr:g}", flush=True)
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
        write_section(args.write, SECTION, to_markdown(runs, parts, tasks, args.rounds, load))
        print(f"wrote the {SECTION} section of {args.write}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
