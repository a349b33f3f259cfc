"""Write trained weights into a copy of the .tflite model.

Each trained tensor's bytes are overwritten in place in its buffer, so the copy has the same
size and every byte outside those buffers is identical to the model. Buffer data lives either
inside the flatbuffer (the `Buffer.data` vector) or, in the layout for models over 2 GB, after
it (`Buffer.offset` from the start of the file, `Buffer.size` bytes); both are supported.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tflite

from zoflash.compiler.ir import Graph
from zoflash.compiler.tflite_import import load_tflite, model_sha256, parse_tflite
from zoflash.errors import DataError, ModelFormatError, ZoflashError
from zoflash.training.weights_file import TrainedWeights, atomic_write, load_weights

log = logging.getLogger("zoflash")
SELECT_CHOICES = ("best", "last")  # export --select: the best values by validation, or the last ones


@dataclass
class PatchedTensor:
    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    buffer: int  # model buffer index
    offset: int  # byte offset of the tensor's data in the file
    nbytes: int
    count: int  # values in the tensor
    changed: int  # values that differ from the model's
    external: bool = False  # data stored after the flatbuffer (models > 2 GB layout)
    shared_with: tuple[int, ...] = ()  # other tensors using the same buffer (all trained identically)
    scale_offset: int | None = None  # file offset of the quantization scale vector, when re-quantized
    scales: tuple[float, ...] | None = None  # the new scales written there (--headroom)


@dataclass
class ExportReport:
    model_path: Path
    weights_path: Path
    out_path: Path
    model_sha256: str
    weights_model_sha256: str  # the model the weights were trained from
    out_sha256: str
    tensors: list[PatchedTensor]
    selected: str = "last"  # which values were written: best (by validation), last, or start (best_is_start: none)

    @property
    def requantized(self) -> list[int]:
        """Tensors whose quantization scales were rewritten (trained with --headroom)."""
        return [p.index for p in self.tensors if p.scales is not None]

    @property
    def values_changed(self) -> int:
        return sum(p.changed for p in self.tensors)

    @property
    def other_model(self) -> bool:
        """True when the weights were recorded for a different model file (allow_other_model)."""
        return self.model_sha256 != self.weights_model_sha256


def buffer_span(model, file_size: int, index: int) -> tuple[int, int, bool] | None:
    """(file offset, size, external) of buffer `index`'s data, or None when it has no data."""
    buf = model.Buffers(index)
    offset, size = buf.Offset(), buf.Size()
    if offset > 1:  # stored after the flatbuffer; offset counts from the start of the file
        start, n, external = offset, size, True
    else:
        field = buf._tab.Offset(4)  # vtable slot of `data`
        if field == 0:
            return None
        start, n, external = buf._tab.Vector(field), buf._tab.VectorLen(field), False
    if n == 0:
        return None
    if start + n > file_size:
        raise ModelFormatError(
            f"buffer {index} spans bytes [{start}, {start + n}) but the file has only "
            f"{file_size}; the model is truncated or damaged"
        )
    return start, n, external


def scale_span(model, sub, index: int) -> tuple[int, int] | None:
    """(file offset, number of float32 values) of tensor `index`'s quantization scale vector."""
    q = sub.Tensors(index).Quantization()
    if q is None:
        return None
    field = q._tab.Offset(8)  # vtable slot of `scale`
    if field == 0:
        return None
    return q._tab.Vector(field), q._tab.VectorLen(field)


def _scale_patches(graph: Graph, model, sub, weights: TrainedWeights, problems: list[str]) -> dict[int, tuple]:
    """Tensor index -> (file offset, float32 bytes) of its new scale vector; problems appended."""
    spans = {}
    for index, scales in weights.scales.items():
        if index >= len(graph.tensors):
            continue  # reported with the values
        t = graph.tensors[index]
        span = scale_span(model, sub, index)
        if span is None or t.quant is None or span[1] != len(scales):
            have = span[1] if span else 0
            problems.append(
                f"tensor {index} '{t.name}' has {have} quantization scale(s) in the model but the "
                f"weights file gives {len(scales)}"
            )
            continue
        spans[index] = (span[0], np.ascontiguousarray(scales, dtype="<f4").tobytes())
    if spans:  # a scale vector shared with another tensor (deduplicated by a converter) must not change it
        mine = {off: i for i, (off, _) in spans.items()}
        for i in range(sub.TensorsLength()):
            other = scale_span(model, sub, i)
            if other is not None and other[0] in mine and i != mine[other[0]] and i not in spans:
                j = mine[other[0]]
                problems.append(
                    f"tensor {j} '{graph.tensors[j].name}' shares its quantization scale vector with "
                    f"tensor {i} '{graph.tensors[i].name}'; rewriting it would change that tensor too"
                )
    return spans


def _buffer_users(model) -> dict[int, list[str | tuple[int, int]]]:
    """Buffer index -> its users: (subgraph, tensor) pairs, and 'metadata <name>' strings."""
    users: dict[int, list] = {}
    for s in range(model.SubgraphsLength()):
        sub = model.Subgraphs(s)
        for t in range(sub.TensorsLength()):
            users.setdefault(sub.Tensors(t).Buffer(), []).append((s, t))
    for m in range(model.MetadataLength()):
        md = model.Metadata(m)
        users.setdefault(md.Buffer(), []).append(f"metadata '{(md.Name() or b'').decode('utf-8', 'replace')}'")
    return users


def _sharing_problem(index: int, users: list, graph: Graph, weights: TrainedWeights) -> str | None:
    """Why tensor `index` cannot be patched because of the other users of its buffer, or None."""
    reasons = []
    values = weights.tensors[index]
    for u in users:
        if u == (0, index):
            continue
        if isinstance(u, str):
            reasons.append(f"{u}")
        elif u[0] != 0:
            reasons.append(f"tensor {u[1]} of subgraph {u[0]}, which zoflash does not train")
        elif u[1] not in weights.tensors:
            reasons.append(f"tensor {u[1]} '{graph.tensors[u[1]].name}', which is not in the weights file")
        elif not np.array_equal(weights.tensors[u[1]], values) or weights.tensors[u[1]].dtype != values.dtype:
            reasons.append(f"tensor {u[1]} '{graph.tensors[u[1]].name}', which was trained to different values")
    if not reasons:
        return None
    return (
        f"tensor {index} '{graph.tensors[index].name}' shares its buffer with "
        + "; ".join(reasons)
        + ": patching the buffer would change those too. Train all tensors of a shared buffer together, "
        "or re-convert the model without constant deduplication"
    )


def plan_patches(graph: Graph, raw: bytes, weights: TrainedWeights) -> list[tuple[PatchedTensor, bytes]]:
    """Check every trained tensor against the model; return where and what to write.

    Raises DataError listing every problem found (unknown index, not constant, dtype/shape,
    name, shared buffers).
    """
    try:
        model = tflite.Model.GetRootAs(raw, 0)
        sub = model.Subgraphs(0)
        users = _buffer_users(model)
        buffer_of = {i: sub.Tensors(i).Buffer() for i in range(sub.TensorsLength())}
    except Exception as exc:  # load_tflite has read these already; a failure here is a damaged file
        raise ModelFormatError(f"{graph.name}: the flatbuffer is damaged ({type(exc).__name__}: {exc})") from None
    problems: list[str] = []
    patches: list[tuple[PatchedTensor, bytes]] = []
    scale_spans = _scale_patches(graph, model, sub, weights, problems)
    for index, values in weights.tensors.items():
        name = weights.names.get(index, "")
        if index >= len(graph.tensors):
            problems.append(
                f"tensor {index} '{name}' does not exist: {graph.name} has {len(graph.tensors)} "
                f"tensors (0..{len(graph.tensors) - 1})"
            )
            continue
        t = graph.tensors[index]
        want = f"{t.dtype}{list(t.shape)}"
        got = f"{values.dtype}{list(values.shape)}"
        if t.name != name:
            problems.append(f"tensor {index} is '{t.name}' in the model but '{name}' in the weights file")
        elif not t.is_constant:
            problems.append(
                f"tensor {index} '{t.name}' is not a constant tensor (its values are computed at run "
                "time), so it has no stored weights to replace"
            )
        elif t.sparse:
            problems.append(f"tensor {index} '{t.name}' is stored sparse; zoflash only writes dense tensors")
        elif want != got:
            problems.append(f"tensor {index} '{t.name}' is {want} in the model but {got} in the weights file")
        else:
            buffer = buffer_of[index]
            span = buffer_span(model, len(raw), buffer)
            if span is None or span[1] != values.nbytes:
                problems.append(
                    f"tensor {index} '{t.name}': buffer {buffer} holds {span[1] if span else 0} bytes, "
                    f"not the {values.nbytes} of {want}"
                )
                continue
            shared = _sharing_problem(index, users.get(buffer, []), graph, weights)
            if shared:
                problems.append(shared)
                continue
            data = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()
            # strings (metadata users) cannot be here: _sharing_problem refuses them
            others = tuple(u[1] for u in users.get(buffer, []) if not isinstance(u, str) and u != (0, index))
            patches.append(
                (
                    PatchedTensor(
                        index=index,
                        name=t.name,
                        dtype=t.dtype,
                        shape=t.shape,
                        buffer=buffer,
                        offset=span[0],
                        nbytes=span[1],
                        count=int(values.size),
                        changed=int(np.count_nonzero(t.data != values)),
                        external=span[2],
                        shared_with=others,
                        scale_offset=scale_spans[index][0] if index in scale_spans else None,
                        scales=tuple(float(x) for x in weights.scales[index]) if index in scale_spans else None,
                    ),
                    data,
                )
            )
    if problems:
        raise DataError(
            f"cannot write the weights into {graph.name}: {len(problems)} problem(s):\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nCheck that the model is the one these weights were trained from."
        )
    spans = sorted({(p.offset, p.nbytes, p.buffer) for p, _ in patches})
    for (a, n, ba), (b, _, bb) in itertools.pairwise(spans):
        if a + n > b:
            raise ModelFormatError(f"{graph.name}: buffers {ba} and {bb} overlap in the file; the model is damaged")
    return patches


def _verify(graph: Graph, out: bytes, patches: list[tuple[PatchedTensor, bytes]], weights: TrainedWeights) -> None:
    """The patched bytes must parse, hold the new values, and leave every other constant as it was."""
    new = parse_tflite(out, name=graph.name)
    patched = {p.index for p, _ in patches}
    requant = {p.index: p.scales for p, _ in patches if p.scales is not None}
    for t, u in zip(graph.tensors, new.tensors):
        expect = weights.tensors[t.index] if t.index in patched else t.data
        same = (
            (u.data is None)
            if expect is None
            else (u.data is not None and u.data.dtype == expect.dtype and np.array_equal(u.data, expect))
        )
        scales = requant.get(t.index, t.quant.scales if t.quant is not None else None)
        same = same and (
            u.quant is None
            if scales is None
            else (
                u.quant is not None
                and np.array_equal(np.asarray(u.quant.scales, np.float32), np.asarray(scales, np.float32))
            )
        )
        if not same:
            raise ZoflashError(
                f"internal error: tensor {t.index} '{t.name}' does not read back as expected from "
                "the exported model; nothing was written. Please report this with the model."
            )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _headroom_scales(graph: Graph, weights: TrainedWeights, headroom: int | None, weights_path: Path) -> None:
    """A weights file without scales (a monitor dump) from a run with `headroom` bits: every tensor
    in it was re-quantized (scales x 2^h). A file that records its headroom must agree."""
    if headroom is None:
        return
    if weights.scales:
        if weights.headroom != headroom:
            raise DataError(f"{weights_path} was trained with headroom {weights.headroom}, not {headroom}")
        return
    if headroom == 0:
        return
    from zoflash.spec.training import HEADROOM_MAX
    from zoflash.training.headroom import scaled

    if not 0 < headroom <= HEADROOM_MAX:
        raise ZoflashError(f"--headroom {headroom}: must be 0..{HEADROOM_MAX} bits")
    for index in weights.tensors:
        if index < len(graph.tensors) and (quant := graph.tensors[index].quant) is not None:
            weights.scales[index] = np.asarray(scaled(quant, headroom).scales, dtype=np.float32)
    weights.headroom = headroom


def export_weights(
    model_path: str | Path,
    weights_path: str | Path,
    out_path: str | Path,
    allow_other_model: bool = False,
    headroom: int | None = None,
    select: str | None = None,
) -> ExportReport:
    """Write a copy of the model with the trained tensors' values replaced in place.

    `select`: "best" (the best values by validation, the device's last good snapshot), "last"
    (the values at the end of the run), or None: best when the file holds them (files written
    since protocol 2), else last.  The report's `selected` says which.

    Tensors the weights file records new quantization scales for (training with --headroom) get
    those scales written over their scale vectors, in place too. `headroom`: the bits a run
    used, for weights files that do not record them (dumps taken by the monitor without the
    bundle); every tensor in such a file then gets its model scales x 2^headroom.

    The weights must have been recorded for this model file (same SHA-256) unless
    `allow_other_model`. The input model is never modified; `out_path` is written atomically
    and only after the patched model parsed back with the new values.
    """
    model_path, weights_path, out_path = Path(model_path), Path(weights_path), Path(out_path)
    for other in (model_path, weights_path):
        if _same_file(other, out_path):
            raise ZoflashError(
                f"the output '{out_path}' is the input file '{other}'; export writes a new file, choose another --out"
            )
    if out_path.is_dir():
        raise ZoflashError(f"the output '{out_path}' is a directory; give a file name such as trained.tflite")
    weights = load_weights(weights_path)
    if select not in (None,) + SELECT_CHOICES:
        raise ZoflashError(f"--select {select}: use one of {', '.join(SELECT_CHOICES)}")
    if select == "best" and set(weights.best) != set(weights.tensors):
        raise DataError(
            f"{weights_path} holds no best weights (written by a zoflash or a firmware from before the "
            "validation split); export the last ones with --select last"
        )
    selected = (
        "best"
        if select == "best" or (select is None and weights.best and set(weights.best) == set(weights.tensors))
        else "last"
    )
    if selected == "best":
        weights.tensors = {index: weights.best[index] for index in weights.tensors}
    graph, raw = load_tflite(model_path)
    if selected == "best" and weights.best_is_start:
        # no step improved the validation loss: the start is the model itself (the best values are
        # it re-quantized with the headroom, which moves outputs by a few LSB): write it unchanged
        selected = "start"
    sha = model_sha256(raw)
    if weights.model_sha256 != sha:
        if not allow_other_model:
            raise DataError(
                f"{weights_path} was trained from the model with SHA-256 {weights.model_sha256[:16]}..., but "
                f"'{model_path}' has SHA-256 {sha[:16]}...: export into the model the weights were trained from, "
                "or, if this model is a re-conversion with the same tensors, pass --allow-other-model "
                "(allow_other_model=True)"
            )
        log.warning(
            "%s was trained from another model file (SHA-256 %s..., this one %s...); writing anyway",
            weights_path,
            weights.model_sha256[:16],
            sha[:16],
        )
    _headroom_scales(graph, weights, headroom, weights_path)
    patches = plan_patches(graph, raw, weights) if selected != "start" else []
    patched = bytearray(raw)
    for p, data in patches:
        patched[p.offset : p.offset + p.nbytes] = data
        if p.scales is not None:
            assert p.scale_offset is not None  # plan_patches sets both or neither
            new = np.asarray(p.scales, dtype="<f4").tobytes()
            patched[p.scale_offset : p.scale_offset + len(new)] = new
    out = bytes(patched)
    _verify(graph, out, patches, weights)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out_path, lambda f: f.write(out))
    except OSError as exc:
        raise ZoflashError(f"cannot write '{out_path}': {exc.strerror or exc}") from None
    report = ExportReport(
        model_path=model_path,
        weights_path=weights_path,
        out_path=out_path,
        model_sha256=sha,
        weights_model_sha256=weights.model_sha256,
        out_sha256=model_sha256(out),
        tensors=[p for p, _ in patches],
        selected=selected,
    )
    log.info("wrote %s: %d tensor(s), %d value(s) changed", out_path, len(report.tensors), report.values_changed)
    return report
