"""The readings of app_sensor.c's synthetic sensor as a zoflash .npz (the build needs the test
split, embedded for the evaluations; x_train is not used by --data-source app).

    python examples/app_sensor/make_data.py sensor.npz
"""

from __future__ import annotations

import sys

import numpy as np

INPUTS, CLASSES = 64, 10


def mix(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.uint32)
    v ^= v >> np.uint32(16)
    v *= np.uint32(0x7FEB352D)
    v ^= v >> np.uint32(15)
    v *= np.uint32(0x846CA68B)
    v ^= v >> np.uint32(16)
    return v


def readings(first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Readings first..first+count-1, as sensor_read() makes them."""
    n = np.arange(first, first + count, dtype=np.uint64).astype(np.uint32)
    c = mix(np.uint32(2) * n + np.uint32(1)) % np.uint32(CLASSES)
    i = np.arange(INPUTS, dtype=np.uint32)
    pattern = (mix(np.uint32(0x10000) + c[:, None] * np.uint32(INPUTS) + i) & np.uint32(0xFF)).astype(np.int32) - 128
    noise = (mix(np.uint32(0x9E3779B9) + n[:, None] * np.uint32(INPUTS) + i) & np.uint32(0x3F)).astype(np.int32) - 32
    x = (np.trunc(pattern / 2).astype(np.int32) + noise).astype(np.int8)  # C's / truncates towards zero
    return x, c.astype(np.int64)


def main(path: str) -> None:
    x_train, y_train = readings(0, 256)
    x_test, y_test = readings(1_000_000, 200)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sensor.npz")
