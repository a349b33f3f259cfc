"""Offline streams for the continual benchmark (benchmarks/continual.py), built from a seed.
Two tasks: digits and sensor.

Digits: the 497 held-out samples of the digits task (examples/digits_test_x.npy: the fixture model
never trained on them), drawn with replacement, seen through a sequence of sensor conditions:
a long stretch as built (no shift: false triggers are counted there), then segments, each a new
condition (rotation, blur, noise, contrast, stroke width, or back to as built), drawn by the
seed.  A shift is the start of a segment.  The stream also carries `shift_starts`, the segment
conditions (`conditions`), and its oracle twin marks each shift with one extra sample (y = -2).

Sensor: the 400 held-out windows of the sensor task (tests/fixtures/motions_shift.npz's test
split, the smartwatch's accelerometer and gyroscope, 64 steps; recordings the fixture model never
trained on), seen as worn as recorded, then through placements: the watch worn rotated about z or
about x, its axes remounted (a signed permutation that is a rotation), a sensor with another gain,
an accelerometer offset (a miscalibrated or tilted mounting), noise, or back to as recorded.  A
placement holds for a segment, and a stream has two no-shift stretches: the first, long one, and
one as long as a segment in the middle (the placement repeats: no shift there).

    .venv/bin/python benchmarks/continual_streams.py --task sensor --seed 3 --out /tmp/s.npz [--quick]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import ndimage

ROOT = Path(__file__).resolve().parent.parent
DIGITS_X = ROOT / "examples" / "digits_test_x.npy"
DIGITS_Y = ROOT / "examples" / "digits_test_y.npy"

# The conditions a segment can take: (name, transform of one [8, 8] image in [0, 1], rng-dependent).
# Their strengths are drawn per segment from these ranges, so seeds differ in more than order.
CONDITIONS = ("rotate", "blur", "noise", "contrast", "stroke", "as-built")


def _grid(img: np.ndarray) -> np.ndarray:
    """Back to the dataset's native 1/16 grid (the 4-bit sensor), clipped to [0, 1]."""
    return (np.clip(np.round(img * 16.0), 0, 16) / 16.0).astype(np.float32)


def transform(kind: str, strength: float, imgs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if kind == "as-built":
        return imgs.copy()
    out = []
    for im in imgs:
        if kind == "rotate":
            r = ndimage.rotate(im, strength, reshape=False, order=1, mode="constant", cval=0.0)
        elif kind == "blur":
            r = ndimage.gaussian_filter(im, strength)
            r = r / max(float(r.max()), 1e-6) * float(im.max())
        elif kind == "noise":
            r = im + rng.normal(0.0, strength, im.shape)
        elif kind == "contrast":
            r = (im - 0.5) * strength + 0.5 if strength < 1 else im * strength
        elif kind == "stroke":
            r = ndimage.grey_dilation(im, size=(2, 2)) if strength > 0 else ndimage.grey_erosion(im, size=(2, 1))
        else:
            raise ValueError(kind)
        out.append(r)
    return _grid(np.stack(out))


def _strength(kind: str, rng: np.random.Generator) -> float:
    return {
        "rotate": float(rng.choice([-1, 1]) * rng.uniform(25, 40)),
        "blur": float(rng.uniform(0.8, 1.2)),
        "noise": float(rng.uniform(0.25, 0.35)),
        "contrast": float(rng.uniform(0.25, 0.35)),
        "stroke": 1.0,
        "as-built": 0.0,
    }[kind]


def digits_stream(seed: int, quick: bool = False) -> dict:
    """The stream of a seed: x [N, 8, 8, 1] float32, y [N] int64, shift_starts, conditions."""
    rng = np.random.default_rng(seed)
    x = np.load(DIGITS_X)[..., 0]
    y = np.load(DIGITS_Y).astype(np.int64)
    quiet, seg, shifts = (1500, 1600, 10) if quick else (6000, 3000, 12)
    kinds, last = [], "as-built"
    for _ in range(shifts):
        k = rng.choice([c for c in CONDITIONS if c != last])
        kinds.append(str(k))
        last = str(k)
    xs, ys, starts, conds = [], [], [], [("as-built", 0.0)]
    idx = rng.integers(0, len(x), quiet)
    xs.append(_grid(x[idx]))
    ys.append(y[idx])
    for k in kinds:
        s = _strength(k, rng)
        idx = rng.integers(0, len(x), seg)
        starts.append(sum(len(v) for v in ys))
        xs.append(transform(k, s, x[idx], rng))
        ys.append(y[idx])
        conds.append((k, s))
    return {
        "x": np.concatenate(xs)[..., None],
        "y": np.concatenate(ys),
        "shift_starts": np.array(starts, np.int64),
        "conditions": np.array([f"{k}:{s:.2f}" for k, s in conds]),
    }


SENSOR_DATA = ROOT / "tests" / "fixtures" / "motions_shift.npz"
SENSOR_PLACEMENTS = ("rotate-z", "rotate-x", "remount", "gain", "offset", "noise", "as-built")


def sensor_windows() -> tuple[np.ndarray, np.ndarray]:
    """The source-domain test windows [400, 1, 64, 6]: motions_shift.npz holds them worn rotated
    by 90 degrees about z ((x, y, z) -> (y, -x, z) for both sensors); undo it."""
    with np.load(SENSOR_DATA) as d:
        t, y = d["x_test"], d["y_test"].astype(np.int64)
    x = t.copy()
    for base in (0, 3):
        x[..., base], x[..., base + 1] = -t[..., base + 1], t[..., base]
    return x, y


def _rotation(axis: int, degrees: float) -> np.ndarray:
    c, s = np.cos(np.radians(degrees)), np.sin(np.radians(degrees))
    i, j = [k for k in range(3) if k != axis]
    r = np.eye(3)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def _remount(rng: np.random.Generator) -> np.ndarray:
    """A signed permutation of the axes with determinant +1, not the identity (a rigid remount)."""
    while True:
        r = np.eye(3)[rng.permutation(3)] * rng.choice([-1.0, 1.0], 3)[:, None]
        if np.linalg.det(r) > 0 and not np.allclose(r, np.eye(3)):
            return r


def placement(kind: str, rng: np.random.Generator) -> tuple[str, dict]:
    """A placement's parameters, drawn per segment (so seeds differ in more than order)."""
    sign = float(rng.choice([-1, 1]))
    if kind == "rotate-z":
        a = sign * rng.uniform(60, 120)
        return f"rotate-z:{a:.0f}", dict(rot=_rotation(2, a))
    if kind == "rotate-x":
        a = sign * rng.uniform(60, 120)
        return f"rotate-x:{a:.0f}", dict(rot=_rotation(0, a))
    if kind == "remount":
        r = _remount(rng)
        axes = ["+-"[int(row.sum() < 0)] + "xyz"[int(np.argmax(abs(row)))] for row in r]  # x, y, z now read these
        return "remount:" + "".join(axes), dict(rot=r)
    if kind == "gain":
        g = float(rng.uniform(0.3, 0.45) if sign < 0 else rng.uniform(3.5, 4.5))  # high: the input saturates
        return f"gain:{g:.2f}", dict(gain=g)
    if kind == "offset":
        v = rng.normal(size=3)
        v *= rng.uniform(0.8, 1.2) / np.linalg.norm(v)
        return "offset:" + ",".join(f"{c:.1f}" for c in v), dict(offset=v)
    if kind == "noise":
        sd = float(rng.uniform(0.6, 0.8))
        return f"noise:{sd:.2f}", dict(noise=sd)
    if kind == "as-built":
        return "as-built", {}
    raise ValueError(kind)


def place(params: dict, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Windows [N, 1, 64, 6] (accelerometer xyz, gyroscope xyz) as the placement records them."""
    out = x.astype(np.float64)
    if "rot" in params:
        for base in (0, 3):
            out[..., base : base + 3] = out[..., base : base + 3] @ params["rot"].T
    out = out * params.get("gain", 1.0)
    if "offset" in params:
        out[..., 0:3] += params["offset"]
    if "noise" in params:
        out = out + rng.normal(0.0, params["noise"], out.shape)
    return out.astype(np.float32)


def sensor_stream(seed: int, quick: bool = False) -> dict:
    """The sensor stream of a seed: x [N, 1, 64, 6] float32, y [N] int64, shift_starts, conditions."""
    rng = np.random.default_rng(seed)
    x, y = sensor_windows()
    quiet, seg, shifts = (1500, 1600, 10) if quick else (6000, 3000, 12)
    kinds, last = [], "as-built"
    for _ in range(shifts):
        k = str(rng.choice([c for c in SENSOR_PLACEMENTS if c != last]))
        kinds.append(k)
        last = k
    hold = shifts // 2  # the middle no-shift stretch: the segment before it lasts twice as long
    xs, ys, starts, conds = [], [], [], ["as-built"]
    idx = rng.integers(0, len(x), quiet)
    xs.append(x[idx])
    ys.append(y[idx])
    for n, k in enumerate(kinds):
        name, params = placement(k, rng)
        length = 2 * seg if n == hold else seg
        idx = rng.integers(0, len(x), length)
        starts.append(sum(len(v) for v in ys))
        xs.append(place(params, x[idx], rng))
        ys.append(y[idx])
        conds.append(name)
    return {
        "x": np.concatenate(xs),
        "y": np.concatenate(ys),
        "shift_starts": np.array(starts, np.int64),
        "conditions": np.array(conds),
    }


STREAMS = {"digits": digits_stream, "sensor": sensor_stream}


def with_marks(stream: dict) -> dict:
    """The oracle's twin: one extra sample (a copy of the shift's first, y = -2) before each shift."""
    x, y = stream["x"], stream["y"]
    parts_x, parts_y, prev = [], [], 0
    for s in stream["shift_starts"]:
        parts_x += [x[prev:s], x[s : s + 1]]
        parts_y += [y[prev:s], np.array([-2])]
        prev = s
    parts_x.append(x[prev:])
    parts_y.append(y[prev:])
    return {**stream, "x": np.concatenate(parts_x), "y": np.concatenate(parts_y)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(STREAMS), default="digits")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--oracle", action="store_true", help="the twin with shift marks (y = -2)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    s = STREAMS[a.task](a.seed, a.quick)
    np.savez(a.out, **(with_marks(s) if a.oracle else s))
    print(f"{a.out}: {len(s['y'])} samples, shifts at {list(s['shift_starts'])}: {list(s['conditions'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
