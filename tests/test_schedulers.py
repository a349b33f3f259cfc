"""The q schedulers: zo_sched.c, configured by the product (zoflash.training.schedulers), against
the NumPy model zoflash.reference.schedulers (which reads the parameters itself), step by step
and bit for bit, on synthetic traces that walk every row of every transition table, on random
traces, and a few properties (q bounds, window sizes, validation)."""

from __future__ import annotations

import ctypes
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from ccompile import M55_FLAGS, STRICT_FLAGS, TRAINING, ZO_MATH, build_shared, compile_object

from zoflash.reference import schedulers as S
from zoflash.reference.schedulers import EV, Obs
from zoflash.spec import training as spec
from zoflash.training import schedulers as P  # the product's configuration of the C

pytestmark = pytest.mark.cc

F32 = np.float32
SOURCES = [TRAINING / "zo_sched.c", ZO_MATH / "zo_train_math.c", ZO_MATH / "zo_rng.c"]
BATCH = 4

INT_STATE = (
    "q",
    "state",
    "stop",
    "n_obs",
    "last_event",
    "w_passes",
    "w_steps",
    "has_best",
    "stale",
    "pending",
    "count",
    "raised",
    "gained",
    "w_kn",
    "since_passes",
)
FLOAT_STATE = (
    "w_sum",
    "w_sq",
    "w_mean",
    "w_se2",
    "best",
    "best_se2",
    "w_m2",
    "w_s",
    "w_s2",
    "w_k",
    "w_k2",
    "c_m2",
    "c_s",
    "c_kappa",
    "c_rse2",
    "q_star",
    "base_mean",
    "base_se2",
    "base_gap",
    "base_rate",
    "base_rate_se2",
)
# per step: before (wants_centre, q, state), the event (filled, 6 fields), after (should_stop)
REC = ("centre", "q", "state", "filled", "ev_step", "code", "state_from", "state_to", "q_from", "q_to", "stop")

SHIM = (
    r"""
#include <string.h>
#include "zo_sched.h"

static void dump(const zo_sched_t *s, int64_t *i, float *f) {
    const int64_t iv[] = { @INTS@ };
    const float fv[] = { @FLOATS@ };
    memcpy(i, iv, sizeof iv);
    memcpy(f, fv, sizeof fv);
}

/* Runs a whole trace: per step a record (see REC) and the internal state after it. */
void t_run(const zo_sched_config_t *cfg, const zo_sched_obs_t *obs, int32_t n, int64_t *rec,
           int64_t *ints, float *floats) {
    zo_sched_t s;
    zo_sched_init(&s, cfg);
    for (int32_t k = 0; k < n; ++k) {
        int64_t *r = rec + 11 * k;
        zo_sched_event_t ev;
        memset(&ev, 0, sizeof ev);
        r[0] = zo_sched_wants_centre(&s);
        r[1] = zo_sched_q(&s);
        r[2] = zo_sched_state(&s);
        r[3] = zo_sched_observe(&s, &obs[k], &ev);
        r[4] = ev.step; r[5] = ev.code; r[6] = ev.state_from; r[7] = ev.state_to;
        r[8] = ev.q_from; r[9] = ev.q_to;
        r[10] = zo_sched_should_stop(&s);
        dump(&s, ints + @NI@ * k, floats + @NF@ * k);
    }
}

int32_t t_sizeof_sched(void) { return (int32_t)sizeof(zo_sched_t); }
""".replace("@INTS@", ", ".join(f"(int64_t)s->{n}" for n in INT_STATE))
    .replace("@FLOATS@", ", ".join(f"s->{n}" for n in FLOAT_STATE))
    .replace("@NI@", str(len(INT_STATE)))
    .replace("@NF@", str(len(FLOAT_STATE)))
)

OBS_DTYPE = np.dtype(
    [
        ("step", "<u4"),
        ("q", "<u4"),
        ("passes", "<u4"),
        ("loss", "<f4"),
        ("m2", "<f4"),
        ("v", "<f4"),
        ("has_kappa", "<i4"),
        ("kappa", "<f4"),
        ("diverged", "<i4"),
        ("lr", "<f4"),
    ]
)


def _ctype(field: str):
    if field in spec.SCHED_FLOAT_PARAMS:
        return ctypes.c_float
    return ctypes.c_int32 if field in ("kind", "stop_when_capped") else ctypes.c_uint32


class Config(ctypes.Structure):
    _fields_ = [(f, _ctype(f)) for f in spec.SCHED_CONFIG_FIELDS]


class Rule(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_uint8),
        ("event", ctypes.c_uint8),
        ("next", ctypes.c_uint8),
        ("next_at_cap", ctypes.c_uint8),
        ("actions", ctypes.c_uint16),
    ]


def c_config(kind, **params) -> Config:
    cfg = P.resolve(kind, **params)
    return Config(**{f: (float(v) if f in spec.SCHED_FLOAT_PARAMS else v) for f, v in cfg.items()})


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    lib = build_shared(SOURCES, tmp_path_factory.mktemp("zo_sched_c"), "zo_sched", {"shim.c": SHIM})
    lib.zo_sched_check.restype = ctypes.c_char_p
    lib.zo_sched_check.argtypes = [ctypes.POINTER(Config)]
    lib.zo_sched_rules.restype = ctypes.POINTER(Rule)
    lib.zo_sched_rules.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_uint32)]
    for fn in ("zo_sched_kind_name", "zo_sched_state_name", "zo_sched_event_name"):
        getattr(lib, fn).restype = ctypes.c_char_p
        getattr(lib, fn).argtypes = [ctypes.c_int32]
    lib.t_run.argtypes = [
        ctypes.POINTER(Config),
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    return lib


# ---------------------------------------------------------------------------- driving both


class Run:
    """A trace driven through the Python model (which also generates the observations from
    its own q and centre request), then replayed through the C; everything recorded."""

    def __init__(self, kind, params: dict, gen, steps: int, seed: int = 0, until_stop: bool = False):
        self.kind, self.params = kind, params
        self.sched = s = S.make_scheduler(kind, **params)
        rng = np.random.default_rng(seed)
        self.obs, rec, ints, floats, self.windows = [], [], [], [], []
        ctx: dict = {"in_state": 0, "prev_state": s.state}
        for t in range(steps):
            centre, q, state = s.wants_centre(), s.q, s.state
            ctx["in_state"] = ctx["in_state"] + 1 if state == ctx["prev_state"] else 1
            ctx["prev_state"] = state
            o = gen(t, s, centre, rng, ctx)
            o.step, o.q = t, q
            if not o.passes:
                o.passes = (2 * q + int(centre)) * BATCH
            win_before = s.last_window
            q_next, ev = s.observe(o)
            assert q_next == s.q
            if s.last_window is not win_before:
                self.windows.append((s.last_window, o.passes))
            rec.append([int(centre), q, state, ev is not None, *(ev or (0,) * 6), int(s.should_stop())])
            st = s.internal_state()
            ints.append([st[n] for n in INT_STATE])
            floats.append([st[n] for n in FLOAT_STATE])
            self.obs.append(o)
            if until_stop and s.should_stop():
                break
        self.rec = np.array(rec, np.int64)
        self.ints = np.array(ints, np.int64)
        self.floats = np.array(floats, F32)

    @property
    def pairs(self) -> set[tuple[int, int]]:
        """(state before, event) of every step."""
        return set(zip(self.rec[:, 2].tolist(), self.ints[:, INT_STATE.index("last_event")].tolist()))

    @property
    def events(self) -> list[tuple]:
        return [tuple(r[4:10]) for r in self.rec if r[3]]

    def obs_array(self) -> np.ndarray:
        a = np.zeros(len(self.obs), OBS_DTYPE)
        for k, o in enumerate(self.obs):
            a[k] = (
                o.step,
                o.q,
                o.passes,
                F32(o.loss),
                F32(o.m2),
                F32(o.v),
                int(o.has_kappa),
                F32(o.kappa),
                int(o.diverged),
                F32(o.lr),
            )
        return a

    def compare_with_c(self, lib) -> None:
        n = len(self.obs)
        obs = self.obs_array()
        rec = np.zeros((n, len(REC)), np.int64)
        ints = np.zeros((n, len(INT_STATE)), np.int64)
        floats = np.zeros((n, len(FLOAT_STATE)), F32)
        cfg = c_config(self.kind, **self.params)
        lib.t_run(ctypes.byref(cfg), obs.ctypes.data, n, rec.ctypes.data, ints.ctypes.data, floats.ctypes.data)
        for k in range(n):
            where = f"{self.kind} step {k}: obs {self.obs[k]}"
            assert rec[k].tolist() == self.rec[k].tolist(), (
                f"{where}\nC  {dict(zip(REC, rec[k].tolist()))}\nPy {dict(zip(REC, self.rec[k].tolist()))}"
            )
            assert ints[k].tolist() == self.ints[k].tolist(), (
                f"{where}\nC  {dict(zip(INT_STATE, ints[k].tolist()))}\nPy {dict(zip(INT_STATE, self.ints[k].tolist()))}"
            )
            assert np.array_equal(floats[k].view(np.uint32), self.floats[k].view(np.uint32)), (
                f"{where}\nC  {dict(zip(FLOAT_STATE, floats[k]))}\nPy {dict(zip(FLOAT_STATE, self.floats[k]))}"
            )
        self.check_properties()

    def check_properties(self) -> None:
        cfg = self.sched.cfg
        qs = [int(r[1]) for r in self.rec] + [self.sched.q]
        for a, b in itertools.pairwise(qs):
            assert b & (b - 1) == 0 and cfg["q_min"] <= b <= cfg["q_max"], (self.kind, b)
            assert b in (a, 2 * a, a // 2), (self.kind, a, b)
        for r in self.rec:
            if r[3]:
                assert (r[6], r[8]) != (r[7], r[9]), "an event is a change"
                assert r[8] == r[1]
        for (passes, steps, mean, se2, rse2), last_passes in self.windows:
            assert passes >= cfg["window_passes"] and steps >= cfg["window_min_steps"]
            if self.sched.kind == S.CRITICAL_KIND:
                # critical windows close once q* is precise enough (z * rse <= 1 - 1/sqrt 2), or at the cap
                assert steps <= cfg["window_max_steps"]
                if steps < cfg["window_max_steps"]:
                    assert rse2 >= 0 and float(cfg["z"]) ** 2 * float(rse2) <= (1 - 1 / math.sqrt(2)) ** 2 * (1 + 1e-5)
                continue
            if self.sched.kind == S.PLATEAU_KIND:
                # plateau windows close once precise enough (z * se <= tau * mean), or at the cap
                assert steps <= cfg["window_max_steps"]
                if steps < cfg["window_max_steps"]:
                    assert float(cfg["z"]) * math.sqrt(se2) <= float(cfg["tau"]) * float(mean) * (1 + 1e-5)
                continue
            # it closed at the first step that met both
            assert passes - last_passes < cfg["window_passes"] or steps - 1 < cfg["window_min_steps"]


def obs(loss=1.0, m2=1.0, v=0.0, kappa=0.0, has_kappa=False, diverged=False, lr=1.0, passes=0) -> Obs:
    return Obs(
        loss=F32(loss),
        m2=F32(m2),
        v=F32(v),
        kappa=F32(kappa),
        has_kappa=bool(has_kappa),
        diverged=bool(diverged),
        lr=F32(lr),
        passes=passes,
    )


def diverge_in_each_state(after: int = 2, states=None):
    """A diverged flag once per state, after `after` steps in it."""
    done: set = set()

    def pick(s, ctx) -> bool:
        if s.state not in done and ctx["in_state"] > after and (states is None or s.state in states):
            done.add(s.state)
            return True
        return False

    return pick


def compare_and_cover(lib, kind_id: int, runs: dict[str, Run]) -> dict[str, Run]:
    """C == Python on every run, and together they visit every row of the kind's table."""
    for r in runs.values():
        r.compare_with_c(lib)
    check_coverage(kind_id, list(runs.values()))
    return runs


def check_coverage(kind_id: int, runs: list[Run]) -> None:
    seen = set().union(*(r.pairs for r in runs))
    table = set(S.TABLES[kind_id])
    missing = {(spec.STATES[a], spec.EVENTS[b]) for a, b in table - seen}
    assert not missing, f"table rows never visited: {sorted(missing)}"
    assert seen <= table, f"events outside the table: {seen - table}"


# ---------------------------------------------------------------------------- tables, names


def test_tables_and_names_match(lib):
    for kind, name in enumerate(spec.SCHEDULERS):
        assert lib.zo_sched_kind_name(kind).decode() == name
        n = ctypes.c_uint32()
        rows = lib.zo_sched_rules(kind, ctypes.byref(n))
        c_table = {
            (rows[i].state, rows[i].event): (rows[i].next, rows[i].next_at_cap, rows[i].actions) for i in range(n.value)
        }
        assert len(c_table) == n.value, "duplicate (state, event) rows"
        assert c_table == {k: (a, b, int(act)) for k, (a, b, act) in S.TABLES[kind].items()}
    for sid, name in enumerate(spec.STATES):
        assert lib.zo_sched_state_name(sid).decode() == name
    for eid, name in enumerate(spec.EVENTS):
        assert lib.zo_sched_event_name(eid).decode() == name
    for fn in (lib.zo_sched_kind_name, lib.zo_sched_state_name, lib.zo_sched_event_name):
        assert fn(-1) == b"?" and fn(99) == b"?"
    n = ctypes.c_uint32(5)
    assert not lib.zo_sched_rules(4, ctypes.byref(n)) and n.value == 0
    # the state ids are the documented ones
    doc = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text()
    assert ", ".join(f"{i} {n}" for i, n in enumerate(spec.STATES)) in " ".join(doc.split())


def test_c_initializer_compiles_to_same_config(lib, tmp_path):
    cases = [
        ("plateau", {}),
        ("critical", {"p": 0.25, "z": 1.5}),
        ("adazeta", {"steps_per_epoch": 7, "beta": -0.5}),
        ("fixed", {"q0": 4}),
    ]
    inits = "\n".join(
        f"const zo_sched_config_t cfg{k} = {P.c_initializer(kind, **p)};" for k, (kind, p) in enumerate(cases)
    )
    other = build_shared([], tmp_path, "zo_sched_init", {"inits.c": f'#include "zo_sched.h"\n{inits}\n'})
    for k, (kind, p) in enumerate(cases):
        got = Config.in_dll(other, f"cfg{k}")
        assert bytes(got) == bytes(c_config(kind, **p)), kind
        assert lib.zo_sched_check(ctypes.byref(got)) is None


# ---------------------------------------------------------------------------- fixed


def test_fixed(lib):
    def gen(t, s, centre, rng, ctx):
        return obs(loss=rng.uniform(0, 3), diverged=t % 7 == 3)

    runs = compare_and_cover(
        lib, S.FIXED_KIND, {q0: Run("fixed", {"q0": q0, "q_max": 16}, gen, 60, seed=q0) for q0 in (1, 16)}
    )
    for r in runs.values():
        assert set(r.rec[:, 1].tolist()) == {r.params["q0"]} and not r.events
        assert not r.rec[:, 0].any() and not r.rec[:, 10].any()


# ---------------------------------------------------------------------------- plateau

PLATEAU_SMALL = {
    "window_passes": 64,
    "window_min_steps": 4,
    "window_max_steps": 16,
    "tau": 0.01,
    "z": 1.0,
    "patience": 2,
}


def _loss_gen(fn, div=None):
    def gen(t, s, centre, rng, ctx):
        return obs(loss=fn(t, rng), diverged=bool(div and div(s, ctx)))

    return gen


def plateau_runs() -> dict[str, Run]:
    runs = {}
    runs["decreasing"] = Run("plateau", PLATEAU_SMALL, _loss_gen(lambda t, r: 2.0 * 0.99**t), 300)
    runs["flat_stop"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q_max": 8, "stop_when_capped": True},
        _loss_gen(lambda t, r: 1.0),
        500,
        until_stop=True,
    )
    runs["stairs"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q_max": 8, "stop_when_capped": True},
        lambda t, s, centre, rng, ctx: obs(loss=1.0 / s.q),
        500,
        until_stop=True,
    )
    # a sharp rise after a descent (MONITOR), then a slower one
    runs["rise"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q_max": 16},
        _loss_gen(lambda t, r: 2.0 * 0.99**t * (3.0 if 60 <= t < 100 else 1.0)),
        200,
    )
    # q0 == q_max: CAPPED after warmup; improve, stall, rise, stall until patience (no stop)
    runs["capped"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q0": 4, "q_max": 4},
        _loss_gen(lambda t, r: 2.0 * 0.98 ** min(t, 40) * (2.0 if 80 <= t < 90 else 1.0)),
        200,
    )
    noisy = lambda t, r: 1.0 - 0.001 * t + r.normal(0, 0.2)
    for z in (0.0, 1.0, 3.0):
        runs[f"noisy_z{z:g}"] = Run("plateau", {**PLATEAU_SMALL, "z": z, "q_max": 64}, _loss_gen(noisy), 600, seed=11)
    runs["diverge_everywhere"] = Run(
        "plateau",
        PLATEAU_SMALL,
        _loss_gen(lambda t, r: 1.0 + 0.001 * r.standard_normal(), diverge_in_each_state()),
        600,
        seed=3,
    )
    stairs_div = diverge_in_each_state(states={S.COOLDOWN, S.CAPPED})
    runs["diverge_stairs"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q_max": 8},
        lambda t, s, centre, rng, ctx: obs(loss=1.0 / s.q, diverged=stairs_div(s, ctx)),
        300,
    )
    runs["diverge_capped"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q0": 4, "q_max": 4},
        _loss_gen(lambda t, r: 1.0, diverge_in_each_state(4, states={S.CAPPED})),
        60,
    )
    runs["diverge_twice"] = Run(
        "plateau",
        {**PLATEAU_SMALL, "q0": 2},
        _loss_gen(lambda t, r: 1.5 - 0.002 * t, lambda s, c: s.state == S.DIVERGE and c["in_state"] == 2),
        300,
    )
    return runs


def test_plateau_traces(lib):
    runs = compare_and_cover(lib, S.PLATEAU_KIND, plateau_runs())

    dec = runs["decreasing"]
    codes = [e[1] for e in dec.events]
    assert codes[0] == EV.WINDOW_FIRST and dec.sched.q == 1 and dec.sched.state == S.MONITOR
    assert (S.MONITOR, EV.IMPROVED) in dec.pairs and (S.MONITOR, EV.PATIENCE) not in dec.pairs

    # a flat loss: one raise, which brings nothing, so q holds there (and stops when asked)
    flat = runs["flat_stop"]
    assert flat.sched.should_stop() and flat.sched.state == S.HOLD and flat.sched.q == 2
    assert (S.MONITOR, EV.NO_GAIN) in flat.pairs and flat.rec[-1, 10] == 1 and not flat.rec[:-1, 10].any()

    # a loss that drops at every raise: each raise paid off, so q keeps doubling up to q_max
    stairs = runs["stairs"]
    assert [e[5] for e in stairs.events if e[5] != e[4]] == [2, 4, 8], "one doubling per patience"
    assert stairs.sched.should_stop() and stairs.sched.state == S.CAPPED
    assert (S.CAPPED, EV.PATIENCE) in stairs.pairs and (S.MONITOR, EV.NO_GAIN) not in stairs.pairs

    # a rise never doubles q: it counts as a stale window
    rise = runs["rise"]
    assert (S.MONITOR, EV.RISE) in rise.pairs and (S.COOLDOWN, EV.COOLED) in rise.pairs
    for k, row in enumerate(rise.rec):
        if rise.ints[k][INT_STATE.index("last_event")] == EV.RISE:
            assert rise.ints[k][0] == row[1]

    capped = runs["capped"]
    assert {(S.CAPPED, EV.IMPROVED), (S.CAPPED, EV.STALE), (S.CAPPED, EV.PATIENCE), (S.CAPPED, EV.RISE)} <= capped.pairs
    assert not capped.sched.should_stop() and set(capped.rec[:, 1].tolist()) == {4}

    # the standard error matters: z = 0 accepts more improvements than z = 3
    improved = {
        z: sum(1 for k in runs[f"noisy_z{z:g}"].ints[:, INT_STATE.index("last_event")] if k == EV.IMPROVED)
        for z in (0.0, 1.0, 3.0)
    }
    assert improved[0.0] > improved[1.0] >= improved[3.0], improved

    # diverged: q doubles, the open window is dropped, DIVERGE until the next window closes
    for r in (runs["diverge_everywhere"], runs["diverge_twice"]):
        for k, row in enumerate(r.rec):
            if r.obs[k].diverged:
                assert row[2] == S.DIVERGE or row[3], "a rollback is always an event unless already DIVERGE at q_max"
                assert r.ints[k][INT_STATE.index("state")] == S.DIVERGE
                assert r.ints[k][INT_STATE.index("w_steps")] == 0 and r.ints[k][INT_STATE.index("stale")] == 0
                assert r.ints[k][0] == min(2 * row[1], r.sched.cfg["q_max"])


def test_plateau_diverge_sets_best_from_fresh_window(lib):
    """After DIVERGE, best is the next window's mean even if it is worse (a rollback moved the
    weights); after COOLDOWN, best only goes down."""

    def gen(t, s, centre, rng, ctx):
        return obs(loss=1.0 if t < 40 else 5.0, diverged=t == 40)

    r = Run("plateau", PLATEAU_SMALL, gen, 80)
    r.compare_with_c(lib)
    best = r.floats[:, FLOAT_STATE.index("best")]
    cooled = [(k, row[6]) for k, row in enumerate(r.rec) if row[3] and row[5] == EV.COOLED]
    assert {st for _, st in cooled} == {S.COOLDOWN, S.DIVERGE}
    assert [best[k] for k, st in cooled if st == S.DIVERGE] == [F32(5.0)]
    first = next(k for k, row in enumerate(r.rec) if row[3] and row[5] == EV.WINDOW_FIRST)
    rises = [k for k in range(first + 1, len(best)) if best[k] > best[k - 1]]
    assert rises == [k for k, st in cooled if st == S.DIVERGE], "best only grows after a rollback"


def test_plateau_comparisons_at_equality(lib):
    """Exact ties (one-step windows, so mean = loss and se = 0): improvement and rise are
    strict, and rise compares with best * (1 + rise) rounded as written."""
    one = {"window_passes": 1, "window_min_steps": 1, "window_max_steps": 1, "patience": 10, "q_max": 64}

    def seq(losses):
        return lambda t, s, centre, rng, ctx: obs(loss=losses[min(t, len(losses) - 1)])

    # gain == tau * best: not an improvement (1 -> 0.75 -> 0.5625, tau 0.25); beyond it, one is
    losses = [1.0, 0.75, 0.5625, np.nextafter(F32(0.421875), F32(0))]
    r = Run("plateau", {**one, "tau": 0.25, "z": 0.0, "rise": 1.0}, seq(losses), 4)
    r.compare_with_c(lib)
    assert r.ints[:, INT_STATE.index("last_event")].tolist() == [EV.WINDOW_FIRST, EV.STALE, EV.STALE, EV.IMPROVED]
    # mean == best * (1 + rise): no rise; one ulp above: rise.  r is chosen so that the other
    # rounding, best + best * rise, is smaller (a rise there).
    best = F32(3.0)
    rise = next(x for x in (F32(k * 0.001) for k in range(1, 1000)) if best * (F32(1) + x) > best + best * x)
    edge = best * (F32(1) + rise)
    r = Run(
        "plateau", {**one, "tau": 0.0, "z": 0.0, "rise": float(rise)}, seq([best, edge, np.nextafter(edge, F32(10))]), 3
    )
    r.compare_with_c(lib)
    assert r.ints[:, INT_STATE.index("last_event")].tolist() == [EV.WINDOW_FIRST, EV.STALE, EV.RISE]
    assert r.sched.q == 1, "a rise is not a reason to double q"
    # gain^2 exactly at one rounding of z^2 se^2: the spec's (z * z) * se2 decides
    two = {**one, "window_min_steps": 2, "window_max_steps": 2, "tau": 0.0, "rise": 1.0}
    for improved in (True, False):
        best, (a, b), z = _se_tie(improved)
        r = Run("plateau", {**two, "z": float(z)}, seq([best, best, a, b]), 4)
        r.compare_with_c(lib)
        assert r.sched.last_event == (EV.IMPROVED if improved else EV.STALE)


def _se_tie(improved: bool):
    """A best loss and a two-step window (a, b) whose gain^2 equals the larger of
    (z*z)*se2 and z*(z*se2); with the spec's rounding that is an improvement iff it is the
    other one that is smaller."""
    rng = np.random.default_rng(5)
    while True:
        a, b, z = F32(rng.uniform(0.5, 1)), F32(rng.uniform(0.5, 1)), F32(rng.uniform(0.5, 3))
        n = F32(2)
        mean = (F32(0) + a + b) / n
        var = max((F32(0) + a * a + b * b) / n - mean * mean, F32(0))
        se2 = var / n
        spec, other = (z * z) * se2, z * (z * se2)
        if spec == other or (spec < other) != improved:
            continue
        target = max(spec, other)
        best = F32(mean + np.sqrt(np.float64(target)))
        for _ in range(40):
            gain = best - mean
            if gain * gain == target:
                return best, (a, b), z
            best = np.nextafter(best, F32(10)) if gain * gain < target else np.nextafter(best, F32(0))


# ---------------------------------------------------------------------------- critical

CRIT_SMALL = {
    "centre_every": 2,
    "calib_steps": 4,
    "calib_q": 4,
    "confirm": 2,
    "window_passes": 32,
    "window_min_steps": 3,
    "window_max_steps": 12,
    "q_max": 32,
    "p": 0.25,
    "c": 2.0,
    "floor": 0.05,
}
CRIT_WINDOW_EVENTS = (
    EV.TARGET_HOLD,
    EV.TARGET_PENDING,
    EV.TARGET_UP,
    EV.TARGET_DOWN,
    EV.NO_GAIN,
    EV.COOLED,
    EV.CALIBRATED,
)


def _target_gen(want_of_window, m2=1.0, v=0.0, lr=0.5, div=None, kappa_known=True, flat=False, noise=0.0):
    """kappa chosen so that q* = want (with v = 0: q* = c*lr*kappa/p), times 1 + noise * N(0, 1).
    The loss falls by 1e-4 q^2 per step, so its decrease per pass grows with q and every raise
    pays; flat: a constant loss (no raise pays)."""

    def gen(t, s, centre, rng, ctx):
        if s.last_event in CRIT_WINDOW_EVENTS:
            ctx["windows"] = ctx.get("windows", 0) + 1
        want = want_of_window(ctx.get("windows", 0), t)
        c, p = s.cfg["c"], s.cfg["p"]
        kappa = F32(want) * p / (c * F32(lr)) * F32(1 + noise * rng.standard_normal())
        ctx["loss"] = ctx.get("loss", 2.0) - (0.0 if flat else 1e-4 * s.q * s.q)
        return obs(
            loss=ctx["loss"],
            m2=m2,
            v=v,
            kappa=kappa,
            has_kappa=centre and kappa_known,
            lr=lr,
            diverged=bool(div and div(s, ctx)),
        )

    return gen


def critical_runs() -> dict[str, Run]:
    runs = {}
    # up to 16, down to 2, then a target flapping between 32 and 1 every window (never confirmed)
    phases = lambda w, t: 16 if w < 8 else 2 if w < 20 else (32 if w % 2 else 1)
    runs["up_down_flap"] = Run("critical", CRIT_SMALL, _target_gen(phases), 400)
    runs["confirm1"] = Run("critical", {**CRIT_SMALL, "confirm": 1}, _target_gen(phases), 200)
    runs["kappa_unknown"] = Run("critical", CRIT_SMALL, _target_gen(lambda w, t: 32, kappa_known=False), 60)
    runs["m2_zero"] = Run("critical", CRIT_SMALL, _target_gen(lambda w, t: 32, m2=0.0), 60)
    runs["kappa_negative"] = Run("critical", CRIT_SMALL, _target_gen(lambda w, t: -8), 60)
    runs["noisy_v"] = Run("critical", CRIT_SMALL, _target_gen(lambda w, t: 6, v=0.97), 200)
    runs["diverge_everywhere"] = Run(
        "critical", {**CRIT_SMALL, "q_max": 64}, _target_gen(lambda w, t: 4, div=diverge_in_each_state(1)), 200
    )
    runs["diverge_twice"] = Run(
        "critical",
        CRIT_SMALL,
        _target_gen(lambda w, t: 8, div=lambda s, c: s.state == S.DIVERGE and c["in_state"] == 2),
        100,
    )
    runs["diverge_calibrate"] = Run(
        "critical",
        CRIT_SMALL,
        _target_gen(lambda w, t: 8, div=lambda s, c: s.state == S.CALIBRATE and c["in_state"] == 2),
        60,
    )
    # a flat loss: the first raise brings no gain, so the next confirmed raise holds q (HOLD),
    # where q can still come down; a rollback leaves HOLD
    hold = lambda w, t: 32 if w < 10 else 8 if w < 14 else 2 if w < 22 else 4
    runs["no_gain_hold"] = Run(
        "critical", CRIT_SMALL, _target_gen(hold, flat=True, div=diverge_in_each_state(70, states={S.HOLD})), 200
    )
    # a noisy kappa: windows grow until q* is precise enough (or to window_max_steps)
    runs["noisy_kappa"] = Run(
        "critical", {**CRIT_SMALL, "window_max_steps": 40}, _target_gen(lambda w, t: 16, noise=0.8), 300, seed=3
    )
    return runs


def test_critical_traces(lib):
    runs = compare_and_cover(lib, S.CRITICAL_KIND, critical_runs())
    cfg = runs["up_down_flap"].sched.cfg
    for r in runs.values():
        # centre passes every centre_every steps from the first one
        assert r.rec[:, 0].tolist() == [int(k % r.sched.cfg["centre_every"] == 0) for k in range(len(r.rec))]
    ud = runs["up_down_flap"]
    qs = [e[5] for e in ud.events if e[5] != e[4]]
    assert qs[:3] == [8, 16, 8] and 2 in qs, qs
    assert ud.events[0][1:4] == (EV.CALIBRATED, S.CALIBRATE, S.TRACK) and ud.events[0][0] == cfg["calib_steps"] - 1
    # flapping: the last 12 windows never moved q (each target seen once in a row)
    tail = [k for k in ud.ints[:, INT_STATE.index("last_event")][-150:] if k >= EV.TARGET_HOLD]
    assert tail and set(tail) == {EV.TARGET_PENDING}
    # confirm = 1 moves on every window
    c1 = runs["confirm1"]
    assert (S.TRACK, EV.TARGET_PENDING) not in c1.pairs
    for name in ("kappa_unknown", "m2_zero", "kappa_negative"):
        r = runs[name]
        assert r.sched.q == 4 and {e[1] for e in r.events} == {EV.CALIBRATED}, name
        assert (S.TRACK, EV.TARGET_HOLD) in r.pairs


def test_critical_rounding_ties(lib):
    """q* exactly at t * 1.41421354f rounds up; one ulp below rounds down.  In a run (CRIT_SMALL
    makes q* = want exactly: c*lr = 1, p = 1/4, m2 = 1, v = 0) q climbs to 4 and stays: a q* on
    the threshold 4*sqrt2 itself is not significantly beyond it."""
    tie = F32(4) * S.SQRT2
    s = S.make_scheduler("critical", **{**CRIT_SMALL, "calib_q": 1})
    st = {"kappa": tie * F32(0.25), "m2": F32(1), "sig": F32(1), "rse2": F32(0)}
    assert s.target(F32(0.5), st) == (8, tie)
    st["kappa"] = np.nextafter(tie, F32(0)) * F32(0.25)
    assert s.target(F32(0.5), st)[0] == 4
    for want in (tie, np.nextafter(tie, F32(0))):
        r = Run("critical", {**CRIT_SMALL, "calib_q": 1, "confirm": 1}, _target_gen(lambda w, t, want=want: want), 60)
        r.compare_with_c(lib)
        assert r.sched.q_star == want and r.sched.pending == 4 and r.sched.q == 4


def test_critical_target_formula():
    """q* = ((c*lr)*kappa)*m2 / (p*max(m2 - v, floor*m2)) of the window means, rounded
    geometrically; q unless q* is beyond the threshold toward the target by z relative errors."""
    s = S.make_scheduler("critical", q_max=64, p=0.5, c=1.0, floor=0.25, z=2.0)
    st = {"kappa": F32(3.0), "m2": F32(2.0), "sig": F32(2.0), "rse2": F32(0.0)}
    assert s.target(1.0, st) == (8, F32(6.0))  # 6 / (0.5 * 2) ... = 6 -> 8 (6 >= 4*sqrt2)
    st["sig"] = F32(0.1)  # floor binds: max(0.1, 0.5) -> 24 -> 32
    assert s.target(1.0, st) == (32, F32(24.0))
    st["sig"] = F32(2.0)
    assert s.target(1000.0, st)[0] == 64 and s.target(1e-9, st)[0] == 1
    assert s.target(np.float32(np.nan), st)[0] == s.q  # a NaN q* is never significant
    # q = 1, threshold sqrt2: q* = 6 is 4.586 above it; z * rse * q* must stay below that
    s.q = 1
    st["rse2"] = F32((4.58 / 6 / 2) ** 2)
    assert s.target(1.0, st)[0] == 8
    st["rse2"] = F32((4.59 / 6 / 2) ** 2)
    assert s.target(1.0, st) == (1, F32(6.0))
    st["rse2"] = F32(-1.0)  # unknown (kappa or m2 not > 0, < 2 centre steps)
    assert s.target(1.0, st) == (s.q, F32(0.0))


# ---------------------------------------------------------------------------- adazeta


def _plain(div_every=0):
    def gen(t, s, centre, rng, ctx):
        return obs(loss=rng.uniform(0.5, 2), diverged=bool(div_every) and t % div_every == 1)

    return gen


def adazeta_runs() -> dict[str, Run]:
    return {
        "grow": Run("adazeta", {"steps_per_epoch": 5, "q_max": 8}, _plain(3), 100),
        "shrink": Run("adazeta", {"steps_per_epoch": 3, "q0": 8, "q_max": 8, "alpha": 8.0, "beta": -1.0}, _plain(), 60),
        "slow": Run("adazeta", {"steps_per_epoch": 7, "q0": 2, "q_min": 2, "alpha": 0.5, "beta": 1.5}, _plain(), 400),
        "fast": Run("adazeta", {"steps_per_epoch": 1, "alpha": 3.0, "beta": 2.0, "q_max": 64}, _plain(4), 50),
        "sqrt": Run("adazeta", {"steps_per_epoch": 2, "alpha": 1.0, "beta": 0.5, "q_max": 32}, _plain(), 300),
    }


def test_adazeta_traces(lib):
    runs = compare_and_cover(lib, S.ADAZETA_KIND, adazeta_runs())
    for r in runs.values():
        assert all(e[1] in (EV.EPOCH_UP, EV.EPOCH_DOWN) for e in r.events)
        # decisions only at epoch starts (the step that completes an epoch)
        spe = r.sched.cfg["steps_per_epoch"]
        assert all((e[0] + 1) % spe == 0 for e in r.events)
    grow = runs["grow"]
    assert [e[5] for e in grow.events] == [2, 4, 8]  # epochs 2, 4 (target 4), 8 (target 8)
    assert [e[0] for e in grow.events] == [4, 14, 34] and grow.sched.state == S.CAPPED
    shrink = runs["shrink"]
    assert shrink.rec[0, 2] == S.CAPPED and shrink.sched.q == 1 and shrink.sched.state == S.RAMP
    # open loop: each epoch's target from the formula, q one doubling/halving toward it
    s = S.make_scheduler("adazeta", steps_per_epoch=1, alpha=3.0, beta=2.0)
    assert [s.epoch_target(e) for e in (1, 2, 3, 4, 5)] == [2, 8, 16, 32, 64]


# ---------------------------------------------------------------------------- random traces


def _random_params(kind: str, rng) -> dict:
    lo = int(2 ** rng.integers(0, 3))
    hi = int(2 ** rng.integers(int(math.log2(lo)) + 2, 7))  # room to move
    p = {"q_min": lo, "q_max": hi}
    if kind != "critical":
        p["q0"] = lo if rng.random() < 0.5 else int(2 ** rng.integers(int(math.log2(lo)), int(math.log2(hi)) + 1))
    if kind in ("plateau", "critical"):
        p["window_passes"] = int(rng.integers(1, 3000))
        p["window_min_steps"] = int(rng.integers(1, 10))
    if kind == "plateau":
        p.update(
            tau=float(rng.uniform(0, 0.05)),
            z=float(rng.uniform(0, 3)),
            patience=int(rng.integers(1, 4)),
            rise=float(rng.uniform(0, 0.3)),
            stop_when_capped=bool(rng.integers(0, 2)),
        )
    if kind == "critical":
        p.update(
            c=float(rng.uniform(0.1, 10)),
            z=float(rng.choice([0.0, 1.0, 2.0, 3.0])),
            window_max_steps=p["window_min_steps"] + int(rng.integers(0, 60)),
            floor=float(rng.uniform(0.01, 1)),
            p=float(2.0 ** -rng.integers(0, 5)),
            centre_every=int(rng.integers(1, 10)),
            calib_steps=int(rng.integers(1, 12)),
            calib_q=int(2 ** rng.integers(int(math.log2(lo)), int(math.log2(hi)) + 1)),
            confirm=int(rng.integers(1, 5)),
        )
    if kind == "adazeta":
        p.update(
            alpha=float(rng.uniform(0.1, 8)), beta=float(rng.uniform(-2, 3)), steps_per_epoch=int(rng.integers(1, 30))
        )
    return p


def _random_gen(t, s, centre, rng, ctx):
    if t == 0:  # per trace: how often rollbacks happen, how fast the loss falls
        ctx.update(p_div=float(rng.choice([0.0, 0.003, 0.03])), drift=float(rng.choice([0.0, -0.003, -0.02])))
    ctx["loss"] = ctx.get("loss", 2.0) * float(np.exp(rng.normal(ctx["drift"], 0.05)))
    loss = ctx["loss"] * (4.0 if rng.random() < 0.005 else 1.0)
    m2 = float(np.exp(rng.normal(-2, 2))) if rng.random() > 0.05 else 0.0
    return obs(
        loss=loss,
        m2=m2,
        v=m2 * rng.uniform(0, 1.5),
        kappa=rng.normal(0.5, 1.0) * 10.0 ** rng.integers(-3, 3),
        has_kappa=centre or rng.random() < 0.1,
        diverged=rng.random() < ctx["p_div"],
        lr=float(np.exp(rng.normal(0, 3))),
    )


@pytest.mark.parametrize("kind", ["fixed", "plateau", "critical", "adazeta"])
def test_random_traces(lib, kind):
    for seed in range(6):
        rng = np.random.default_rng(1000 * spec.SCHEDULER_IDS[kind] + seed)
        params = _random_params(kind, rng)
        assert P.validate_params(kind, params) == []
        r = Run(kind, params, _random_gen, 1500, seed=seed)
        r.compare_with_c(lib)


# ---------------------------------------------------------------------------- validation

BAD = [
    ("plateau", {"q_min": 3}),
    ("plateau", {"q_max": 128, "q0": 1}),
    ("plateau", {"q_min": 8, "q_max": 4, "q0": 4}),
    ("plateau", {"q_min": 0}),
    ("fixed", {"q0": 2, "q_min": 4}),
    ("fixed", {"q0": 6, "q_max": 8}),
    ("adazeta", {"q0": 128, "steps_per_epoch": 1}),
    ("plateau", {"window_passes": 0}),
    ("plateau", {"window_min_steps": 0}),
    ("plateau", {"tau": -0.1}),
    ("plateau", {"tau": float("nan")}),
    ("plateau", {"z": float("inf")}),
    ("plateau", {"rise": -1.0}),
    ("plateau", {"rise": 1e39}),
    ("plateau", {"patience": 0}),
    ("plateau", {"stop_when_capped": 2}),
    ("critical", {"c": 0.0}),
    ("critical", {"c": float("inf")}),
    ("critical", {"z": -1.0}),
    ("critical", {"z": float("nan")}),
    ("critical", {"window_max_steps": 4, "window_min_steps": 8}),
    ("critical", {"floor": 0.0}),
    ("critical", {"floor": 1.5}),
    ("critical", {"p": 0.0}),
    ("critical", {"p": 2.0}),
    ("critical", {"centre_every": 0}),
    ("critical", {"calib_steps": 0}),
    ("critical", {"confirm": 0}),
    ("critical", {"calib_q": 3}),
    ("critical", {"calib_q": 16, "q_max": 8}),
    ("critical", {"window_passes": 0}),
    ("adazeta", {"alpha": 0.0, "steps_per_epoch": 1}),
    ("adazeta", {"alpha": float("inf"), "steps_per_epoch": 1}),
    ("adazeta", {"beta": float("nan"), "steps_per_epoch": 1}),
    ("adazeta", {"steps_per_epoch": 0}),
]


def _raw_config(kind: str, bad: dict) -> Config:
    """A C config with the bad values written in directly (resolve() would refuse them)."""
    good = {"steps_per_epoch": 1} if kind == "adazeta" else {}
    cfg = c_config(kind, **good)
    for k, v in bad.items():
        setattr(cfg, k, v)
    return cfg


@pytest.mark.parametrize("kind,bad", BAD, ids=[f"{k}-{'-'.join(p)}" for k, p in BAD])
def test_invalid_configs_rejected(lib, kind, bad):
    problems = P.validate_params(kind, bad)
    assert problems and all(isinstance(p, str) and kind in p for p in problems), problems
    msg = lib.zo_sched_check(ctypes.byref(_raw_config(kind, bad)))
    assert msg, f"C accepted {kind} {bad}"
    with pytest.raises(ValueError):
        P.resolve(kind, **{**({"steps_per_epoch": 1} if kind == "adazeta" else {}), **bad})


def test_valid_configs_accepted(lib):
    rng = np.random.default_rng(7)
    for kind in spec.SCHEDULER_IDS:
        for _ in range(50):
            params = _random_params(kind, rng)
            assert P.validate_params(kind, params) == [], params
            assert lib.zo_sched_check(ctypes.byref(c_config(kind, **params))) is None, params
            # the reference reads the parameters on its own into the same configuration
            assert S.config(kind, **params) == P.resolve(kind, **params), params
    # fields a kind does not use are not checked
    assert P.validate_params("critical", {"q0": 64, "q_max": 8}) == []
    cfg = c_config("fixed", q0=4)
    cfg.floor = 5.0
    assert lib.zo_sched_check(ctypes.byref(cfg)) is None
    cfg.kind = 4
    assert lib.zo_sched_check(ctypes.byref(cfg))


def test_python_validation_messages():
    assert P.validate_params("nope", {}) and "unknown scheduler kind" in P.validate_params("nope", {})[0]
    assert P.validate_params(1, {}) == [] and P.validate_params("adazeta", {}) == []
    probs = P.validate_params("plateau", {"foo": 1, "q0": 3, "tau": "x"})
    assert any("no parameter 'foo'" in p for p in probs) and any("tau" in p for p in probs)
    assert P.validate_params("fixed", {"q0": 2.5})
    for resolve in (P.resolve, S.make_scheduler):
        with pytest.raises(ValueError, match="steps_per_epoch must be given"):
            resolve("adazeta")
    # defaults: rise = 5 * tau in float32
    assert S.make_scheduler("plateau", tau=0.02).cfg["rise"] == F32(5) * F32(0.02)
    assert P.resolve("plateau", tau=0.02)["rise"] == F32(5) * F32(0.02)
    assert set(spec.SCHED_DEFAULTS) == set(spec.SCHEDULER_IDS)


# ---------------------------------------------------------------------------- cross


@pytest.mark.cross
def test_cross_compiles_for_m55():
    res = compile_object("arm-none-eabi-gcc", TRAINING / "zo_sched.c", STRICT_FLAGS + M55_FLAGS)
    assert res.returncode == 0, res.stderr
