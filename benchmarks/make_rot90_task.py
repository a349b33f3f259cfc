"""The scheduler check task that no rule was tuned on: digits_cnn.tflite's target domain rotated
by 90 degrees instead of the fixture's 30 (same digits, same 1000 train / 497 test split as
tests/fixtures/digits_shift.npz, exact: a rotation by 90 degrees needs no interpolation).

    python benchmarks/make_rot90_task.py build/unseen/digits_rot90.npz
    python benchmarks/experiments.py --model tests/fixtures/digits_cnn.tflite --data build/unseen/digits_rot90.npz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import make_fixtures  # noqa: E402  (the fixture's digits and split)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path, default=ROOT / "build" / "unseen" / "digits_rot90.npz")
    out = ap.parse_args(argv).out
    x, y, train, test = make_fixtures.digits()
    rotated = np.rot90(x, 1, axes=(1, 2))[..., None].astype(np.float32)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out, x_train=rotated[train[:1000]], y_train=y[train[:1000]], x_test=rotated[test], y_test=y[test]
    )
    print(f"wrote {out}: {len(train[:1000])} train / {len(test)} test images rotated by 90 degrees")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
