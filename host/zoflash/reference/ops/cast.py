"""The reference kernel of CAST (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np

_CAST_DTYPES = (np.int8, np.int16, np.int32, np.float32)  # by the params' element type codes


def cast(p, x) -> np.ndarray:
    """C's conversion of each element: NumPy's astype wraps a narrowing integer cast to its low
    bits and rounds an integer to the nearest float32, as C does on two's-complement targets."""
    src, dst = _CAST_DTYPES[p["input_type"]], _CAST_DTYPES[p["output_type"]]
    return np.asarray(x, dtype=src).reshape(-1).astype(dst)
