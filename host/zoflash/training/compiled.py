"""What the training compile hands to the later stages: the compiled model with its training plan,
options and data (CompiledTraining), and the rendered training sources a bundle adds (TrainingSources)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.compiler.compiled import CompiledModel
from zoflash.training.dataset import Dataset
from zoflash.training.options import TrainOptions
from zoflash.training.plan import TrainPlan


@dataclass
class Training:
    """Everything a training bundle needs besides the compiled model."""

    plan: TrainPlan
    options: TrainOptions
    data: Dataset
    headroom: dict | None = None  # headroom report (bits, re-quantized tensors, output change), if any
    # --mode continual without the drift detector: only the stream's shift marks start episodes (the
    # stream benchmark's oracle, benchmarks/continual.py)
    continual_oracle: bool = False

    @property
    def trainable(self) -> dict[int, np.ndarray]:
        return {t.index: t.values for t in self.plan.tensors}


@dataclass
class CompiledTraining:
    """A model compiled for training: the compiled graph and everything the trainer needs."""

    path: Path
    sha256: str
    model: CompiledModel
    training: Training
    before_headroom: CompiledModel | None = None  # the model as loaded, when --headroom re-quantized it
    # one line each: data and options that train, but probably not as meant (training/checks.py)
    warnings: list[str] = field(default_factory=list)


@dataclass
class TrainingSources:
    """What a training bundle adds to an inference bundle, rendered by training.render."""

    files: dict[str, str]  # file name -> C source (the training wiring, the data)
    manifest: dict  # manifest.json's "training" entry
    trainable: dict  # tensor index -> values of the tensors trained in RAM (not const)
    blobs: dict[str, bytes] = field(default_factory=dict)  # binary files the data source links (zo_incbin.h)
    unlinked: tuple[str, ...] = ()  # runtime sources copied but not built (the library form has no main)
    app: bool = False  # --data-source app: the trainer as a library (Makefile targets lib*_train.a, app)
    make: dict = field(default_factory=dict)  # --npu: npu_cflags, npu_sources for the Makefile
