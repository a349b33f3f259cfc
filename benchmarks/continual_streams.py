"""Offline streams for the continual benchmark (benchmarks/continual.py), built from a seed.

Digits: the 497 held-out samples of the digits task (examples/digits_test_x.npy: the fixture model
never trained on them), drawn with replacement, seen through a sequence of sensor conditions:
a long stretch as built (no shift: false triggers are counted there), then segments, each a new
condition (rotation, blur, noise, contrast, stroke width, or back to as built), drawn by the
seed.  A shift is the start of a segment.  The stream also carries `shift_starts`, the segment
conditions (`conditions`), and its oracle twin marks each shift with one extra sample (y = -2).

    .venv/bin/python benchmarks/continual_streams.py --seed 3 --out /tmp/s.npz [--quick]
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
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--oracle", action="store_true", help="the twin with shift marks (y = -2)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    s = digits_stream(a.seed, a.quick)
    np.savez(a.out, **(with_marks(s) if a.oracle else s))
    print(f"{a.out}: {len(s['y'])} samples, shifts at {list(s['shift_starts'])}: {list(s['conditions'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
