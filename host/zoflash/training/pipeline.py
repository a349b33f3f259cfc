"""The training compile: load the model, compile it, plan the training, load the data (and
re-quantize with headroom). `compile_training` is to training what `compiler.pipeline.compile_graph`
is to inference: every problem with model, options or data surfaces here, before anything is
generated, and so do the warnings about data and options that train but probably not as meant
(training/checks.py). Measuring what the headroom did to the outputs needs the C built and run: a later stage
(workflows.headroom) does that with the model kept in `CompiledTraining.before_headroom`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.ir import Graph
from zoflash.compiler.pipeline import compile_graph, fold_biases_at_run_time
from zoflash.compiler.tflite_import import model_sha256
from zoflash.errors import ZoflashError
from zoflash.spec.options import auto_density
from zoflash.training.checks import training_warnings
from zoflash.training.compiled import CompiledTraining, Training
from zoflash.training.continual import memory as continual_memory
from zoflash.training.dataset import carve_validation, load_dataset
from zoflash.training.headroom import apply_headroom, auto_bits
from zoflash.training.options import TrainOptions
from zoflash.training.plan import TrainPlan, plan_training
from zoflash.training.render import stream_record_bytes


def _float_input_quant(model, index: int) -> tuple[float, int] | None:
    """(scale, zero point) of the int8 tensor a float32 model input is quantized to, else None."""
    g = model.graph
    readers = g.consumers().get(index, [])
    if g.tensors[index].dtype != "float32" or len(readers) != 1 or readers[0].type != "QUANTIZE":
        return None
    q, dtype = g.tensors[readers[0].outputs[0]].quant, g.tensors[readers[0].outputs[0]].dtype
    return (q.scale, q.zero_point) if q is not None and dtype == "int8" and not q.per_channel else None


def compile_training(
    model_path: str | Path, graph: Graph, raw: bytes, data_path: str | Path, opts: TrainOptions
) -> CompiledTraining:
    """Compile and plan the loaded model (`graph` parsed from the file's bytes `raw`), load the data:
    every problem with model, options or data surfaces here."""
    model = compile_graph(graph)
    plan = plan_training(model, opts)
    t_in = graph.tensors[graph.inputs[0]]
    q = t_in.quant
    data = load_dataset(
        data_path,
        t_in.shape,
        q.scale if q else None,
        q.zero_point if q else None,
        plan.classes,
        dtype=t_in.dtype,
        loss=plan.loss,
        target=opts.target,
        output_shape=model.storage(plan.logits).shape,
        input_quant=_float_input_quant(model, graph.inputs[0]),
    )
    data = carve_validation(data, opts.val_fraction, opts.seed)  # guards and snapshots never see the test set
    warnings = training_warnings(data, opts, plan, (q.scale if q else None, q.zero_point if q else None, t_in.dtype))
    if opts.density is None:  # --density auto, resolved here like the headroom below
        opts = replace(opts, density=auto_density(plan.params))
    if opts.headroom == "auto":  # resolved here, so that the bundle, the manifest and the monitor see the bits
        opts = replace(opts, headroom=auto_bits(model.graph, _weight_tensors(plan), root=model.root))
    report, before = None, None
    if opts.headroom:
        before = model
        model, plan, report = _with_headroom(model, plan, opts)
    if opts.data_source in ("stream", "app"):  # a RAM ring of fed or pushed samples (on the final plan)
        record = sum(stream_record_bytes(plan, data).values())
        plan.stream_buffer_bytes = (1 if opts.mode == "continual" else opts.buffer) * record
    if opts.mode == "continual":  # the controller's rings, candidate and A/B slots
        plan.continual_bytes = continual_memory(plan, opts, int(data.x_train[0].nbytes))
    fold_biases_at_run_time(model, {t.index for t in plan.tensors})
    return CompiledTraining(
        Path(model_path),
        model_sha256(raw),
        model,
        Training(plan, opts, data, headroom=report),
        before_headroom=before,
        warnings=warnings,
    )


def trainable_start(graph: Graph, opts: TrainOptions) -> tuple[TrainPlan, dict | None]:
    """The trainable tensors as training starts (re-quantized when opts.headroom is a number of bits
    above 0), without the data: what `zoflash replay` applies a log's updates to.  Returns the plan
    and the headroom report (None without headroom)."""
    model = compile_graph(graph)
    plan = plan_training(model, opts)
    if opts.headroom in ("auto", 0):
        return plan, None
    _, plan, report = _with_headroom(model, plan, opts)
    return plan, report


def _weight_tensors(plan: TrainPlan) -> list[int]:
    return [t.index for t in plan.tensors if not t.is_bias]


def _with_headroom(model: CompiledModel, plan, opts: TrainOptions):
    """Re-quantize the tensors the first plan made trainable, recompile, re-plan; report the change (the
    outputs' change is measured later, on the C)."""
    graph, changed = apply_headroom(model.graph, _weight_tensors(plan), opts.headroom, opts.eps, root=model.root)
    new_model = compile_graph(graph)
    new_plan = plan_training(new_model, opts)
    trained = {t.index for t in new_plan.tensors}
    untrained = [i for i in changed if i not in trained]
    if untrained:
        names = ", ".join(f"{i} '{graph.tensors[i].name}'" for i in untrained)
        raise ZoflashError(
            f"--headroom {opts.headroom} would re-quantize tensor(s) {names}, which are not trained "
            "(a weight tensor shared with a layer that is not selected); select that layer too "
            "or drop --headroom"
        )
    g = graph.tensors
    report = {
        "bits": opts.headroom,
        "tensors": [
            {
                "index": i,
                "name": g[i].name,
                "kind": "bias" if g[i].dtype == "int32" else "weights",
                "scales": [float(s) for s in quant.scales] if (quant := g[i].quant) else None,
                "values_changed": int(np.count_nonzero(g[i].data != model.graph.tensors[i].data)),
            }
            for i in changed
        ],
    }
    return new_model, new_plan, report
