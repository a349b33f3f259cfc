"""Compile for training, then render the training bundle: load the model once, compile and plan
once (training.pipeline), measure what the headroom did (on the C), render for the board."""

from __future__ import annotations

from pathlib import Path

from zoflash.compiler.codegen import check_prefix, default_prefix
from zoflash.compiler.ir import Graph
from zoflash.compiler.tflite_import import load_tflite
from zoflash.targets import boards as boards_mod
from zoflash.targets.npu import backend_for
from zoflash.targets.project import Bundle, generate_bundle
from zoflash.training.compiled import CompiledTraining
from zoflash.training.options import TrainOptions
from zoflash.training.pipeline import compile_training
from zoflash.training.render import render_training
from zoflash.workflows import headroom
from zoflash.workflows.monitor import WARNING, Say, log_line


def compile_for_training(
    model_path: str | Path,
    data_path: str | Path,
    opts: TrainOptions,
    loaded: tuple[Graph, bytes] | None = None,
    say: Say = log_line,
) -> CompiledTraining:
    """The model (read from `model_path` unless `loaded` gives its graph and bytes) compiled and
    planned for training on the data; a --headroom report gets the outputs' measured change. The
    warnings about data and options (prep.warnings) go to `say` now, before anything trains."""
    graph, raw = loaded if loaded is not None else load_tflite(model_path)
    prep = compile_training(model_path, graph, raw, data_path, opts)
    for text in prep.warnings:
        say(WARNING + text)
    headroom.measure(prep)
    return prep


def training_bundle(
    prep: CompiledTraining,
    board: str | boards_mod.Board,
    out_dir: str | Path,
    prefix: str | None = None,
    npu=None,
    boundary_expected: int | None = None,
) -> Bundle:
    """The training bundle for a board (an id, or a Board with its memory plan: budget.fit): the
    model, the training wiring and the data. `npu` (an NpuRequest of targets/npu.py's backends): the
    frozen prefix runs on the board's NPU. `boundary_expected`: the host simulation's boundary
    checksum, built in (workflows/boundary_check.py)."""
    if isinstance(board, str):
        board = boards_mod.load_board(board)
    prefix = check_prefix(prefix) if prefix is not None else default_prefix(prep.path.name)
    if npu is None:
        sources = render_training(
            prep.model, prep.training, prefix, prep.path.name, prep.sha256, boundary_expected=boundary_expected
        )
    else:
        extra = backend_for(npu.accelerator).load().npu_sources(prep, board, npu, prefix)
        sources = render_training(
            prep.model, prep.training, prefix, prep.path.name, prep.sha256, extra.run_steps, boundary_expected
        )
        sources.files.update(extra.files)
        sources.blobs.update(extra.blobs)
        sources.make.update(extra.make)
        sources.manifest["npu"] = extra.manifest
    return generate_bundle(
        prep.model, board, Path(out_dir), prep.path.name, prep.sha256, prefix=prefix, training=sources
    )
