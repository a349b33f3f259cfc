"""Regenerate the demo data: the source-domain digits test split (the one the fixture model
was not trained on), as float32 images in the model's input units, and its labels.
Needs scikit-learn. Run from the repository root: python examples/make_example.py"""

import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from make_fixtures import digits  # noqa: E402  (the fixtures' own split)


def main() -> None:
    x, y, _, test = digits()
    np.save(ROOT / "examples" / "digits_test_x.npy", x[test].reshape(-1, 8, 8, 1).astype(np.float32))
    np.save(ROOT / "examples" / "digits_test_y.npy", y[test].astype(np.int64))
    shutil.copyfile(ROOT / "tests" / "fixtures" / "digits_cnn.tflite", ROOT / "examples" / "digits_cnn.tflite")


if __name__ == "__main__":
    main()
