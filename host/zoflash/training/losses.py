"""The training losses' Python behaviour, one registered record per loss of the spec (spec.LOSSES:
ids and C names stay there, the C headers are checked against them): which tensor it reads, what
the dataset's y must hold, which models it can train. Adding a loss: its row in the spec, its C,
and its `LOSSES.add` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zoflash.registry import Registry

# Walked back through from output 0 to find the tensor a loss reads: the type conversions keep
# the real values.
CONVERSION_KERNELS = ("dequantize", "requantize_s8_u8")


@dataclass(frozen=True)
class Loss:
    head_kernels: tuple[str, ...]  # kernels walked back through from output 0 to the tensor it reads
    labels: bool  # y holds class labels; else float targets (t, or the input with --target input)
    binary: bool = False  # the labels are 0/1
    # the reason it cannot train a model with this many output values, or None
    refuse: Callable[[int], str | None] = lambda outputs: None


LOSSES: Registry[Loss] = Registry("loss", "see docs/options.md (--loss)")

LOSSES.add(
    "softmax-ce",  # reads the logits before a SOFTMAX or LOG_SOFTMAX: -log softmax(logits)[label]
    Loss(
        # an int16 SOFTMAX's output may be converted on (to int32: TFLM's keyword_svdf example)
        ("softmax", "softmax_s16", "log_softmax", "softmax_s8_s16", "requantize_s16_s32", "dequantize_s16")
        + CONVERSION_KERNELS,
        labels=True,
        refuse=lambda outputs: (
            "--loss softmax-ce on a model with one output is always 0 (nothing to learn): use "
            "--loss sigmoid-bce for labels 0/1 or --loss mse for a regression target"
            if outputs == 1
            else None
        ),
    ),
)
LOSSES.add(
    "sigmoid-bce",  # reads the logit before a LOGISTIC
    Loss(
        ("logistic",) + CONVERSION_KERNELS,
        labels=True,
        binary=True,
        refuse=lambda outputs: (
            f"--loss sigmoid-bce needs a model with one output (this one has {outputs}): use "
            "--loss softmax-ce for class labels or --loss mse for regression targets"
            if outputs != 1
            else None
        ),
    ),
)
LOSSES.add("mse", Loss(CONVERSION_KERNELS, labels=False))  # compares the output itself
