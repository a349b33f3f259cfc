"""Render the training wiring (<prefix>_train.c) and the embedded data (<prefix>_data.c).

Like codegen.py: Python makes C tokens, the templates make structure; the training maths
itself is static C (zo_trainer.c, zo_sched.c, zo_telemetry.c).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

import numpy as np

from zoflash import __version__
from zoflash.compiler.codegen import Blob, CArray, CField, c_comment, c_float, c_int, template_env
from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.runtime import TRAINING_RUNTIME, runtime_part
from zoflash.spec import options as options_table
from zoflash.spec import training as spec
from zoflash.training.compiled import Training, TrainingSources
from zoflash.training.continual import CONTINUAL_RUNTIME, CONTINUAL_TEMPLATE
from zoflash.training.continual import episode_steps as continual_episode_steps
from zoflash.training.continual import memory as continual_memory
from zoflash.training.continual import template_context as continual_context
from zoflash.training.options import TrainOptions

TRAIN_TEMPLATES = {"model_train.c.j2": "{prefix}_train.c", "model_data.c.j2": "{prefix}_data.c"}


def _value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return c_float(v)
    return c_int(v) + ("u" if v >= 0 else "")


@functools.lru_cache(maxsize=1)
def train_config_fields() -> tuple[str, ...]:
    """zo_train_config_t's fields in the header's order, but the scheduler's (sched)."""
    header = runtime_part(TRAINING_RUNTIME)["zo_trainer.h"].decode()
    match = re.search(r"typedef struct \{([^}]*)\} zo_train_config_t;", header)
    assert match is not None, "zo_trainer.h declares no zo_train_config_t"
    body = match.group(1)
    names = re.findall(r"^\s*\w+\s+(\w+)\s*;", re.sub(r"/\*.*?\*/", "", body, flags=re.S), flags=re.M)
    return tuple(n for n in names if n != "sched")


def train_config(opts: TrainOptions) -> dict:
    """zo_train_config_t's fields but the scheduler's, as Python values (enums as their C names): each
    field is TrainOptions' attribute of its name, for the option whose table row names it
    (spec/options.py `c`), None as 0."""
    source: dict[str, options_table.Option] = {}
    for o in options_table.OPTIONS:
        for name in o.c:
            source.setdefault(name, o)
    out = {}
    for name in train_config_fields():
        o = source[name]  # a field no option sets: tests/test_options_table.py names it
        v = getattr(opts, name)
        if o.c_enum:
            v = spec.c_name(o.c_enum, v)
        elif name == o.name and "float" in o.type:
            v = float(v or 0.0)
        elif v is None:
            v = 0
        out[name] = v
    return out


CONTINUAL_ONLY = ("mode", "duty", "holdout")  # options that change nothing in a one-shot build


def recorded_options(opts: TrainOptions) -> dict:
    """The options a bundle records (manifest, options hash): a one-shot build leaves out those of
    --mode continual, and a build reading output 0 leaves out --output, so its bundle and
    checkpoints are those of a build before the mode and the option existed."""
    skip: tuple[str, ...] = CONTINUAL_ONLY if opts.mode == "oneshot" else ()
    # --output left at output 0: recorded as before the option existed (same bundles, checkpoints)
    skip += ("output",) if opts.output is None else ()
    return {k: v for k, v in sorted(vars(opts).items()) if k not in skip}


def options_sha256(opts: TrainOptions, data_blobs: list[Blob]) -> str:
    """What a checkpoint must have been taken with (besides the model): the options and the
    embedded data, hashed."""
    h = hashlib.sha256(json.dumps(recorded_options(opts), sort_keys=True).encode())
    for b in data_blobs:
        h.update(b.name.encode() + b"\0" + hashlib.sha256(b.data).digest())
    return h.hexdigest()


def training_manifest(training: Training) -> dict:
    plan, opts = training.plan, training.options
    assert training.data.y_val is not None  # the pipeline carves the validation split first
    return {
        "options": recorded_options(opts),
        "tensors": [
            {
                "index": t.index,
                "name": t.name,
                "op": t.op_index,
                "kind": "bias" if t.is_bias else "weights",
                "dtype": str(t.values.dtype),
                "shape": list(t.values.shape),
                "stream": t.stream,
            }
            for t in plan.tensors
        ],
        "trainable_params": plan.params,
        "layers": plan.layers,
        "dropped_layers": plan.dropped_layers,
        "split_step": plan.split,
        "logits_end_step": plan.logits_end,
        "classes": plan.classes,
        "loss": plan.loss,
        "boundary_bytes": plan.boundary_bytes,
        "clamped_weights": plan.clamped,
        "headroom": training.headroom,
        "memory": plan.memory(),
        "memory_beyond_inference_bytes": plan.training_ram_bytes(),
        "data": {
            "source": training.data.source,
            "n_train": int(len(training.data.y_train)),
            "n_val": int(len(training.data.y_val)),
            "n_test": int(len(training.data.y_test)),
            "bytes": training.data.nbytes,
        },
        **(
            {
                "data_source": {
                    "kind": opts.data_source,
                    "buffer": opts.buffer,
                    "refresh": opts.refresh,
                    "record_bytes": stream_record_bytes(plan, training.data),
                    "embedded": "validation and test splits",
                }
            }
            if opts.data_source in RING_SOURCES
            else {}
        ),
    }


def render_training(
    model: CompiledModel,
    training: Training,
    prefix: str,
    source_name: str,
    source_sha256: str,
    npu_run_steps: str | None = None,
    boundary_expected: int | None = None,
) -> TrainingSources:
    """`npu_run_steps`: the function the trainer runs kernel calls with when an NPU runs the prefix
    (--npu, targets/npu.py), instead of the model's own. `boundary_expected`: the host simulation's
    CRC-32 of the first test sample's boundary (workflows/boundary_check.py), which the device reports
    beside its own."""
    plan, opts, data = training.plan, training.options, training.data
    assert data.y_val is not None  # the pipeline carves the validation split first
    g = model.graph
    tensors = []
    for t in plan.tensors:
        name = f"{prefix}_t{t.index}"
        assert not t.is_bias or t.eps_b is not None  # plan_training gives every bias its eps
        tensors.append(
            dict(
                name=name,
                ctype=f"{t.values.dtype}_t",
                value_bytes=t.values.itemsize,
                count=t.count,
                index=t.index,
                stream=t.stream,
                residual=None if t.is_bias else f"{prefix}_r{t.index}",
                eps=CArray("int32_t", f"{prefix}_eps{t.index}", t.eps_b) if t.eps_b is not None and t.is_bias else None,
                max_step=t.max_step if t.is_bias else 0,
                comment=c_comment(f"'{t.name}' of op {t.op_index}, {'bias' if t.is_bias else 'weights'}"),
            )
        )
    # The samples as bytes (a uint8 or float32 input too): the trainer copies input_bytes per sample.
    # Labels (not for mse), or mse targets (float32 rows; none with --target input).
    # --data-source stream: the training split is not embedded; the host feeds it into a RAM ring.
    stream = _stream_context(prefix, plan, opts, data) if opts.data_source in RING_SOURCES else None
    data_blobs, data_names = [], dict(stream["names"]) if stream else {}
    for split in tuple(s for s in data.SPLITS if s != "train") if stream else data.SPLITS:
        x, y, t = getattr(data, f"x_{split}"), getattr(data, f"y_{split}"), getattr(data, f"t_{split}")
        data_blobs.append(
            Blob("int8_t", f"{prefix}_x_{split}", _le_bytes(x), c_comment(f"x_{split} {x.dtype}{list(x.shape)}"))
        )
        if data.labels:
            data_blobs.append(
                Blob(
                    "uint16_t",
                    f"{prefix}_y_{split}",
                    _le_bytes(np.asarray(y).astype("<u2")),
                    c_comment(f"y_{split} uint16[{len(y)}]"),
                )
            )
        if t is not None:
            data_blobs.append(
                Blob(
                    "float",
                    f"{prefix}_t_{split}",
                    _le_bytes(np.asarray(t, dtype=np.float32)),
                    c_comment(f"mse targets float32{list(t.shape)}"),
                )
            )
        data_names[f"x_{split}"] = f"{prefix}_x_{split}"
        data_names[f"y_{split}"] = f"{prefix}_y_{split}" if data.labels else "NULL"
        data_names[f"t_{split}"] = f"{prefix}_t_{split}" if t is not None else "NULL"
    opts_sha = options_sha256(opts, data_blobs)
    in_quant = g.tensors[model.root[g.inputs[0]]].quant
    from_input = plan.loss == "mse" and data.t_train is None
    mem = plan.memory()
    in_root = model.root[g.inputs[0]]
    config_fields = [CField(k, v if isinstance(v, str) else _value(v)) for k, v in train_config(opts).items()]
    sched_fields = [
        CField(k, c_float(float(v)) if isinstance(v, np.floating) else _value(int(v)))
        for k, v in opts.sched_config(len(data.y_train)).items()
    ]
    ctx = dict(
        version=__version__,
        source=c_comment(source_name),
        source_sha256=source_sha256,
        prefix=prefix,
        data_source=c_comment(data.source),
        data_bytes=sum(len(b.data) for b in data_blobs),
        data_blobs=data_blobs,
        stream=stream,
        options_comment=c_comment(opts.describe()),
        arena_name=f"{prefix}_arena",
        arena_size=model.arena_array_size,
        tensors=tensors,
        trainable_params=plan.params,
        boundary=[
            dict(offset=b.offset, nbytes=b.nbytes, comment=c_comment(f"'{g.tensors[b.index].name}'"))
            for b in plan.boundary
        ],
        boundary_bytes=plan.boundary_bytes,
        feature_cache_bytes=max(1, mem["feature_cache_bytes"]),
        snapshot_bytes=mem["snapshot_bytes"],
        batch=opts.batch,
        q_buffer=plan.q_buffer,
        input_offset=model.arena_offset[in_root],
        input_bytes=g.tensors[in_root].nbytes,
        split=plan.split,
        logits_end=plan.logits_end,
        logits_offset=model.arena_offset[plan.logits],
        logits_bytes=np.dtype(model.storage(plan.logits).dtype).itemsize,
        model_state_name=f"{prefix}_state",
        model_state_bytes=model.state_size,
        classes=plan.classes,
        logits_scale=c_float(plan.logits_scale),
        logits_zp=plan.logits_zp,
        loss=spec.c_name("LOSSES", plan.loss),
        headroom_bits=int(opts.headroom),
        mse=plan.loss == "mse",
        data_names=data_names,
        target_scale=c_float(in_quant.scale if from_input else 0.0),
        target_zp=in_quant.zero_point if from_input else 0,
        sha_bytes=", ".join(f"0x{source_sha256[2 * i : 2 * i + 2]}" for i in range(8)),
        options_sha_bytes=", ".join(f"0x{opts_sha[2 * i : 2 * i + 2]}" for i in range(8)),
        n_train=stream["slots"] if stream else len(data.y_train),
        n_val=len(data.y_val),
        n_test=len(data.y_test),
        config_fields=config_fields,
        sched_fields=sched_fields,
        run_steps=npu_run_steps or f"{prefix}_run_steps",
        npu_run_steps=[npu_run_steps] if npu_run_steps else [],
        boundary_expected=boundary_expected or 0,
        boundary_flags=(spec.BOUNDARY_FLAGS["expected"] if boundary_expected is not None else 0)
        | (spec.BOUNDARY_FLAGS["npu"] if npu_run_steps else 0),
        prefix_state=plan.prefix_state,
    )
    env = template_env()
    files = {out.format(prefix=prefix): env.get_template(tpl).render(**ctx) for tpl, out in TRAIN_TEMPLATES.items()}
    app = opts.data_source == "app"
    continual = opts.mode == "continual"
    if app and not continual:  # the library form: zo_app.c instead of the firmware's main
        files.update({name: text.decode() for name, text in runtime_part(APP_RUNTIME).items()})
    if continual:  # the continual controller and its main instead of the training run's
        cl_ctx = continual_context(plan, opts, ctx["input_bytes"], detector=not training.continual_oracle)
        files[f"{prefix}_continual.c"] = env.get_template(CONTINUAL_TEMPLATE).render(**{**ctx, **cl_ctx})
        files.update({name: text.decode() for name, text in runtime_part(CONTINUAL_RUNTIME).items()})
    manifest = {**training_manifest(training), "options_sha256": opts_sha}
    if continual:
        manifest["continual"] = {
            "duty": opts.duty,
            "episode_steps": continual_episode_steps(opts),
            "holdout": opts.holdout,
            "memory": continual_memory(plan, opts, ctx["input_bytes"]),
        }
    if boundary_expected is not None:  # --- boundary checksum
        manifest["boundary_check"] = {
            "sample": "x_test[0]",
            "bytes": plan.boundary_bytes,
            "crc32": boundary_expected,
            "computed_by": "host simulation (zoflash's C)",
        }
    return TrainingSources(
        files=files,
        manifest=manifest,
        trainable=training.trainable,
        blobs={b.file: b.data for b in data_blobs},
        # the library forms have no main: your firmware calls zo_app.h, or zo_continual.h (zo_cl_start)
        unlinked=("zo_train_main.c",) + (("zo_continual_main.c",) if app and continual else ())
        if app or continual
        else (),
        app=app,
    )


# ---- data sources ----
RING_SOURCES = ("stream", "app")  # the data sources whose training split is a RAM ring (zo_stream.h)
APP_RUNTIME = "app"  # firmware_templates/runtime/app/: zo_app.c/.h, only in --data-source app bundles


def stream_record_bytes(plan, data) -> dict:
    """Bytes per sample of the stream ring: the input, a label (not for mse), mse targets."""
    return {
        "input": int(data.x_train[0].nbytes),
        "label": 2 if data.labels else 0,
        "targets": 4 * plan.classes if data.t_train is not None else 0,
    }


def _stream_context(prefix: str, plan, opts: TrainOptions, data) -> dict:
    """The ring of zo_stream.h and the names the model struct points at."""
    rec = stream_record_bytes(plan, data)
    names = {
        "x_train": f"{prefix}_x_ring",
        "y_train": f"{prefix}_y_ring" if data.labels else "NULL",
        "t_train": f"{prefix}_t_ring" if rec["targets"] else "NULL",
    }
    app = opts.data_source == "app"  # the ring is zo_app.c's (extern), filled by pushes, not by the host
    return dict(
        slots=1 if opts.mode == "continual" else opts.buffer,  # continual: one arriving sample at a time
        refresh=opts.refresh,
        input_bytes=rec["input"],
        target_bytes=rec["targets"],
        x=names["x_train"],
        y=names["y_train"],
        t=names["t_train"],
        classes=plan.classes,
        name="zo_train_ring" if app else f"{prefix}_stream",
        storage="" if app else "static ",
        linked=not app,
        names=names,
    )


# ---- end data sources ----


def _le_bytes(a: np.ndarray) -> bytes:
    """The array's bytes as a little-endian target reads them (every zoflash target is)."""
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()
