"""Trained weights file and `zoflash export`: in-place buffer patches, read-back, TFLM vs C, errors."""

from __future__ import annotations

import importlib
import json
import zipfile

import flatbuffers
import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.cli import main
from zoflash.compiler.tflite_import import load_tflite, model_sha256
from zoflash.errors import DataError, ZoflashError
from zoflash.training.export import export_weights
from zoflash.training.weights_file import load_weights, save_weights

MODELS = ["mlp.tflite", "digits_cnn.tflite"]


def _last_fc(graph) -> tuple[int, int]:
    """(weight, bias) tensor indices of the last FULLY_CONNECTED."""
    op = [o for o in graph.ops if o.type == "FULLY_CONNECTED"][-1]
    return op.inputs[1], op.inputs[2]


def _trained(graph, seed: int = 0) -> list:
    """Modified values for the last FC's weight and bias, as save_weights takes them."""
    rng = np.random.default_rng(seed)
    w, b = (graph.tensors[i] for i in _last_fc(graph))
    new_w = rng.integers(-126, 127, size=w.shape, dtype=np.int8)
    new_b = (b.data + rng.integers(-2000, 2001, size=b.shape)).astype(np.int32)
    res = rng.integers(-128, 128, size=w.shape, dtype=np.int8)
    return [(w.index, w.name, new_w, res), (b.index, b.name, new_b, None)]


def _write(tmp_path, model: str, tensors=None, sha: str | None = None, seed: int = 0):
    """Save trained weights for a fixture; returns (model path, graph, raw, weights path, tensors)."""
    path = FIXTURES / model
    graph, raw = load_tflite(path)
    tensors = _trained(graph, seed) if tensors is None else tensors
    wpath = save_weights(tmp_path / "run.weights.npz", sha or model_sha256(raw), tensors)
    return path, graph, raw, wpath, tensors


def _only_dir_entries(tmp_path) -> set[str]:
    return {p.name for p in tmp_path.iterdir()}


# --------------------------------------------------------------------------- #
# weights file
# --------------------------------------------------------------------------- #
def test_weights_round_trip(tmp_path):
    _, _, raw, wpath, tensors = _write(tmp_path, "mlp.tflite")
    tw = load_weights(wpath)
    assert tw.model_sha256 == model_sha256(raw)
    assert list(tw.tensors) == [t[0] for t in tensors] and list(tw.residuals) == [tensors[0][0]]
    for index, name, values, residual in tensors:
        assert tw.names[index] == name
        assert tw.tensors[index].dtype == values.dtype and np.array_equal(tw.tensors[index], values)
        if residual is not None:
            assert np.array_equal(tw.residuals[index], residual)
    with np.load(wpath, allow_pickle=False) as z:
        assert set(z.files) == {"meta", f"t{tensors[0][0]}", f"r{tensors[0][0]}", f"t{tensors[1][0]}"}
        meta = json.loads(str(z["meta"][()]))
    assert meta["format"] == "zoflash-weights" and meta["version"] == 1
    assert meta["tensors"][0] == {
        "index": tensors[0][0],
        "name": tensors[0][1],
        "dtype": "int8",
        "shape": list(tensors[0][2].shape),
    }
    assert _only_dir_entries(tmp_path) == {"run.weights.npz"}  # no temporary file left behind


def test_save_weights_rejects_bad_input(tmp_path):
    sha = "0" * 64
    with pytest.raises(DataError, match="dtype float32"):
        save_weights(tmp_path / "w.npz", sha, [(1, "w", np.zeros(3, np.float32), None)])
    with pytest.raises(DataError, match="only int8 tensors have residuals"):
        save_weights(tmp_path / "w.npz", sha, [(1, "b", np.zeros(3, np.int32), np.zeros(3, np.int8))])
    with pytest.raises(DataError, match="listed twice"):
        save_weights(tmp_path / "w.npz", sha, [(1, "b", np.zeros(3, np.int32), None)] * 2)
    with pytest.raises(DataError, match="64 lowercase hex"):
        save_weights(tmp_path / "w.npz", "abc", [(1, "b", np.zeros(3, np.int32), None)])
    assert not (tmp_path / "w.npz").exists()


def _raw_npz(path, meta: dict | None, **arrays) -> None:
    if meta is not None:
        arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


_META = {
    "format": "zoflash-weights",
    "version": 1,
    "model_sha256": "a" * 64,
    "tensors": [{"index": 3, "name": "w", "dtype": "int8", "shape": [2, 2]}],
}
_W = np.zeros((2, 2), np.int8)


@pytest.mark.parametrize(
    "meta, arrays, message",
    [
        (None, {"t3": _W}, "no 'meta' entry"),
        ({**_META, "format": "other"}, {"t3": _W}, "not a zoflash weights file"),
        ({**_META, "version": 3}, {"t3": _W}, "version 3 is not supported.*newer zoflash"),
        ({**_META, "version": True}, {"t3": _W}, "version True is not supported"),
        ({**_META, "model_sha256": "xyz"}, {"t3": _W}, "64 lowercase hex"),
        ({**_META, "tensors": []}, {}, "lists no tensors"),
        (
            {**_META, "tensors": [{"index": "3", "name": "w", "dtype": "int8", "shape": [2, 2]}]},
            {"t3": _W},
            "entry 0 is malformed",
        ),
        (_META, {}, "no 't3' array"),
        (_META, {"t3": np.zeros((2, 2), np.int32)}, r"'t3' is int32\[2, 2\] but meta says int8\[2, 2\]"),
        (_META, {"t3": np.zeros((4,), np.int8)}, r"'t3' is int8\[4\] but meta says int8\[2, 2\]"),
        (_META, {"t3": _W, "r3": np.zeros((2,), np.int8)}, "residuals belong to int8 tensors"),
        (_META, {"t3": _W, "t4": _W}, r"unexpected entries \['t4'\]"),
        (_META, {"t3": np.array([{"x": 1}], dtype=object)}, "pickled Python objects"),
    ],
)
def test_load_weights_rejects_malformed(tmp_path, meta, arrays, message):
    path = tmp_path / "w.npz"
    _raw_npz(path, meta, **arrays)
    with pytest.raises(DataError, match=message):
        load_weights(path)


def test_load_weights_rejects_damaged_files(tmp_path):
    _, _, _, wpath, _ = _write(tmp_path, "mlp.tflite")
    good = wpath.read_bytes()
    cases = {
        "truncated.npz": good[: len(good) // 2],
        "garbage.npz": b"not an archive at all",
        "pickle.npz": b"\x80\x04\x95" + b"\0" * 20,
        "array.npy": None,
    }
    for name, data in cases.items():
        p = tmp_path / name
        if data is None:
            np.save(p, np.zeros(3, np.int8))
        else:
            p.write_bytes(data)
        with pytest.raises(DataError, match=name) as err:
            load_weights(p)
        assert "Traceback" not in str(err.value)
    # a flipped byte inside a member: the zip CRC catches it
    with zipfile.ZipFile(wpath) as z:
        info = z.getinfo("meta.npy")
    damaged = bytearray(good)
    damaged[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF
    (tmp_path / "crc.npz").write_bytes(bytes(damaged))
    with pytest.raises(DataError, match="'meta' is damaged|'meta' cannot be read"):
        load_weights(tmp_path / "crc.npz")
    with pytest.raises(DataError, match="does not exist"):
        load_weights(tmp_path / "missing.npz")


# --------------------------------------------------------------------------- #
# export: the patch itself
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("model", MODELS)
def test_export_patches_only_the_buffers(tmp_path, model):
    path, graph, raw, wpath, tensors = _write(tmp_path, model)
    out = tmp_path / "trained.tflite"
    report = export_weights(path, wpath, out)
    new = out.read_bytes()
    assert path.read_bytes() == raw  # input untouched
    assert len(new) == len(raw) and report.out_sha256 == model_sha256(new) != model_sha256(raw)
    assert [p.index for p in report.tensors] == [t[0] for t in tensors]
    # (a) the report's ranges hold the old data in the model and the new data in the copy,
    # and no byte outside them changed
    inside = np.zeros(len(raw), bool)
    for p, (index, _, values, _) in zip(report.tensors, tensors):
        assert not p.external and p.nbytes == values.nbytes
        assert raw[p.offset : p.offset + p.nbytes] == graph.tensors[index].data.astype(values.dtype).tobytes()
        assert new[p.offset : p.offset + p.nbytes] == values.astype(values.dtype.newbyteorder("<")).tobytes()
        assert p.changed == int(np.count_nonzero(graph.tensors[index].data != values)) > 0
        inside[p.offset : p.offset + p.nbytes] = True
    diff = np.frombuffer(raw, np.uint8) != np.frombuffer(new, np.uint8)
    assert diff.any() and not (diff & ~inside).any()
    # (b) the copy parses and holds the new values; every other tensor is as it was
    new_graph, _ = load_tflite(out)
    trained = {t[0]: t[2] for t in tensors}
    for old_t, new_t in zip(graph.tensors, new_graph.tensors):
        if old_t.index in trained:
            assert new_t.data.dtype == trained[old_t.index].dtype
            assert np.array_equal(new_t.data, trained[old_t.index])
        elif old_t.is_constant:
            assert np.array_equal(new_t.data, old_t.data)
        else:
            assert new_t.data is None
    assert report.values_changed == sum(p.changed for p in report.tensors)
    assert _only_dir_entries(tmp_path) == {"run.weights.npz", "trained.tflite"}


def test_export_unchanged_weights_is_identity(tmp_path):
    graph, raw = load_tflite(FIXTURES / "mlp.tflite")
    tensors = [(i, graph.tensors[i].name, graph.tensors[i].data, None) for i in _last_fc(graph)]
    path, _, _, wpath, _ = _write(tmp_path, "mlp.tflite", tensors)
    report = export_weights(path, wpath, tmp_path / "same.tflite")
    assert (tmp_path / "same.tflite").read_bytes() == raw and report.values_changed == 0


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("model", MODELS)
def test_exported_model_tflm_equals_generated_c(tmp_path, model):
    from zoflash import api
    from zoflash.reference.tflm import TflmInterpreter

    path, graph, raw, wpath, _ = _write(tmp_path, model, seed=7)
    out = tmp_path / "trained.tflite"
    export_weights(path, wpath, out)
    shape = graph.tensors[graph.inputs[0]].shape
    x = np.random.default_rng(1).integers(-128, 128, size=(100,) + shape[1:], dtype=np.int8)
    golden = TflmInterpreter(out.read_bytes()).run_batch(x)
    ours = api.infer(out, x)
    assert np.array_equal(ours.reshape(golden.shape), golden)
    before = TflmInterpreter(raw).run_batch(x)
    assert not np.array_equal(before, golden)  # the patch took effect


# --------------------------------------------------------------------------- #
# export: refusals (nothing written)
# --------------------------------------------------------------------------- #
def _refused(tmp_path, model_path, wpath, message, exc=DataError, **kw):
    out = tmp_path / "trained.tflite"
    before = model_path.read_bytes()
    with pytest.raises(exc, match=message):
        export_weights(model_path, wpath, out, **kw)
    assert not out.exists() and model_path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file


def test_export_refuses_other_model_unless_allowed(tmp_path):
    path, _, raw, wpath, _ = _write(tmp_path, "mlp.tflite", sha="b" * 64)
    _refused(tmp_path, path, wpath, r"SHA-256 bbbbbbbbbbbbbbbb.*--allow-other-model")
    report = export_weights(path, wpath, tmp_path / "trained.tflite", allow_other_model=True)
    assert report.other_model and report.weights_model_sha256 == "b" * 64
    assert report.model_sha256 == model_sha256(raw)


def _tensor_case(graph, case: str) -> list:
    w_index, b_index = _last_fc(graph)
    w, b = graph.tensors[w_index], graph.tensors[b_index]
    activation = graph.ops[-1].outputs[0]
    act = graph.tensors[activation]
    return {
        "unknown index": [(len(graph.tensors) + 5, "ghost", np.zeros(3, np.int8), None)],
        "shape": [(w.index, w.name, np.zeros(w.shape[::-1] + (1,), np.int8), None)],
        "dtype": [(b.index, b.name, b.data.astype(np.int8), None)],
        "non-constant": [(activation, act.name, np.zeros(act.shape, np.int8), None)],
        "name": [(w.index, "other_name", w.data, None)],
    }[case]


@pytest.mark.parametrize(
    "case, message",
    [
        ("unknown index", r"tensor \d+ 'ghost' does not exist: mlp.tflite has \d+ tensors"),
        ("shape", r"is int8\[10, 16\] in the model but int8\[16, 10, 1\] in the weights file"),
        ("dtype", r"is int32\[10\] in the model but int8\[10\] in the weights file"),
        ("non-constant", "is not a constant tensor"),
        ("name", "in the model but 'other_name' in the weights file"),
    ],
)
def test_export_refuses_mismatched_tensors(tmp_path, case, message):
    graph, _ = load_tflite(FIXTURES / "mlp.tflite")
    path, _, _, wpath, _ = _write(tmp_path, "mlp.tflite", _tensor_case(graph, case))
    _refused(tmp_path, path, wpath, message)


def test_export_lists_every_problem(tmp_path):
    graph, _ = load_tflite(FIXTURES / "mlp.tflite")
    tensors = _tensor_case(graph, "unknown index") + _tensor_case(graph, "dtype")
    path, _, _, wpath, _ = _write(tmp_path, "mlp.tflite", tensors)
    _refused(tmp_path, path, wpath, r"2 problem\(s\)")


def test_export_refuses_bad_weights_file_and_outputs(tmp_path):
    path, _, _, wpath, _ = _write(tmp_path, "mlp.tflite")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(wpath.read_bytes()[:100])
    _refused(tmp_path, path, bad, "bad.npz")
    with pytest.raises(ZoflashError, match="is the input file"):
        export_weights(path, wpath, path)
    with pytest.raises(ZoflashError, match="is a directory"):
        export_weights(path, wpath, tmp_path)


# --------------------------------------------------------------------------- #
# hand-built models: buffers after the flatbuffer (> 2 GB layout) and shared buffers
# --------------------------------------------------------------------------- #
def _fb(name: str):
    return importlib.import_module(f"tflite.{name}")


def _build_tiny(payloads: list[bytes], buffer_of: list[int], external_at: list[int] | None) -> bytes:
    """Tensors 0 in [1,4] int8, 1 w [4,4] int8, 2 b [4] int32, 3 h [1,4], 4 w2 [4,4] int8, 5 out [1,4];
    FC(0, 1, 2) -> 3, FC(3, 4, -) -> 5. Buffer k+1 holds payloads[k] inline, or (external_at given)
    at file offset external_at[k]."""
    b = flatbuffers.Builder(1024)
    Model, SubGraph, Tensor, Operator, OperatorCode, Buffer = (
        _fb(n) for n in ("Model", "SubGraph", "Tensor", "Operator", "OperatorCode", "Buffer")
    )

    def ints(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    data = [None] + [None if external_at else b.CreateByteVector(p) for p in payloads]
    buffers = []
    for k in range(len(payloads) + 1):
        Buffer.Start(b)
        if k and external_at:
            Buffer.AddOffset(b, external_at[k - 1])
            Buffer.AddSize(b, len(payloads[k - 1]))
        elif k:
            Buffer.AddData(b, data[k])
        buffers.append(Buffer.End(b))
    specs = [
        ("in", [1, 4], "INT8"),
        ("w", [4, 4], "INT8"),
        ("b", [4], "INT32"),
        ("h", [1, 4], "INT8"),
        ("w2", [4, 4], "INT8"),
        ("out", [1, 4], "INT8"),
    ]
    tensors = []
    for i, (name, shape, ttype) in enumerate(specs):
        n, s = b.CreateString(name), ints(Tensor.StartShapeVector, shape)
        Tensor.Start(b)
        Tensor.AddShape(b, s)
        Tensor.AddType(b, getattr(_fb("TensorType").TensorType, ttype))
        Tensor.AddBuffer(b, buffer_of[i])
        Tensor.AddName(b, n)
        tensors.append(Tensor.End(b))
    ops = []
    for ins, outs in (([0, 1, 2], [3]), ([3, 4, -1], [5])):
        vi, vo = ints(Operator.StartInputsVector, ins), ints(Operator.StartOutputsVector, outs)
        Operator.Start(b)
        Operator.AddOpcodeIndex(b, 0)
        Operator.AddInputs(b, vi)
        Operator.AddOutputs(b, vo)
        ops.append(Operator.End(b))

    def table_vector(start, items):
        start(b, len(items))
        for it in reversed(items):
            b.PrependUOffsetTRelative(it)
        return b.EndVector()

    vt, vops = table_vector(SubGraph.StartTensorsVector, tensors), table_vector(SubGraph.StartOperatorsVector, ops)
    vin, vout = ints(SubGraph.StartInputsVector, [0]), ints(SubGraph.StartOutputsVector, [5])
    SubGraph.Start(b)
    SubGraph.AddTensors(b, vt)
    SubGraph.AddOperators(b, vops)
    SubGraph.AddInputs(b, vin)
    SubGraph.AddOutputs(b, vout)
    sub = SubGraph.End(b)
    OperatorCode.Start(b)
    OperatorCode.AddDeprecatedBuiltinCode(b, 9)
    OperatorCode.AddBuiltinCode(b, 9)
    OperatorCode.AddVersion(b, 1)
    code = OperatorCode.End(b)
    vcodes = table_vector(Model.StartOperatorCodesVector, [code])
    vsubs = table_vector(Model.StartSubgraphsVector, [sub])
    vbufs = table_vector(Model.StartBuffersVector, buffers)
    Model.Start(b)
    Model.AddVersion(b, 3)
    Model.AddOperatorCodes(b, vcodes)
    Model.AddSubgraphs(b, vsubs)
    Model.AddBuffers(b, vbufs)
    b.Finish(Model.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _tiny_model(tmp_path, external: bool = False, share: bool = False):
    rng = np.random.default_rng(3)
    payloads = [
        rng.integers(-100, 100, 16, dtype=np.int8).tobytes(),
        rng.integers(-1000, 1000, 4, dtype=np.int32).astype("<i4").tobytes(),
        rng.integers(-100, 100, 16, dtype=np.int8).tobytes(),
    ]
    buffer_of = [0, 1, 2, 0, 1 if share else 3, 0]
    if not external:
        raw = _build_tiny(payloads, buffer_of, None)
    else:  # two passes: the flatbuffer's size does not depend on the offset values
        size = len(_build_tiny(payloads, buffer_of, [2, 2, 2]))
        starts, pos = [], (size + 15) // 16 * 16
        for p in payloads:
            starts.append(pos)
            pos = (pos + len(p) + 15) // 16 * 16
        raw = bytearray(_build_tiny(payloads, buffer_of, starts))
        assert len(raw) == size
        for start, p in zip(starts, payloads):
            raw += b"\0" * (start - len(raw)) + p
        raw = bytes(raw)
    path = tmp_path / ("tiny_ext.tflite" if external else "tiny.tflite")
    path.write_bytes(raw)
    return path, raw


def test_export_buffers_stored_after_the_flatbuffer(tmp_path):
    path, raw = _tiny_model(tmp_path, external=True)
    graph, _ = load_tflite(path)
    assert graph.tensors[1].data is not None and graph.tensors[2].data.dtype == np.int32
    new_w = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    new_b = graph.tensors[2].data + np.int32(5)
    wpath = save_weights(tmp_path / "w.npz", model_sha256(raw), [(1, "w", new_w, None), (2, "b", new_b, None)])
    out = tmp_path / "out.tflite"
    report = export_weights(path, wpath, out)
    assert all(p.external for p in report.tensors)
    new = out.read_bytes()
    w, bias = report.tensors
    assert w.offset >= len(raw) - 64 - 16 and new[w.offset : w.offset + 16] == new_w.tobytes()
    assert new[: w.offset] == raw[: w.offset] and new[bias.offset + 16 :] == raw[bias.offset + 16 :]
    new_graph, _ = load_tflite(out)
    assert np.array_equal(new_graph.tensors[1].data, new_w) and np.array_equal(new_graph.tensors[2].data, new_b)
    assert np.array_equal(new_graph.tensors[4].data, graph.tensors[4].data)


def test_export_shared_buffer(tmp_path):
    path, raw = _tiny_model(tmp_path, share=True)
    sha = model_sha256(raw)
    new_w = np.full((4, 4), 3, np.int8)
    only_one = save_weights(tmp_path / "one.npz", sha, [(1, "w", new_w, None)])
    _refused(tmp_path, path, only_one, r"shares its buffer with tensor 4 'w2', which is not in the weights file")
    differ = save_weights(tmp_path / "differ.npz", sha, [(1, "w", new_w, None), (4, "w2", new_w + 1, None)])
    _refused(tmp_path, path, differ, "trained to different values")
    same = save_weights(tmp_path / "same.npz", sha, [(1, "w", new_w, None), (4, "w2", new_w, None)])
    report = export_weights(path, same, tmp_path / "trained.tflite")
    assert [p.shared_with for p in report.tensors] == [(4,), (1,)]
    assert report.tensors[0].offset == report.tensors[1].offset
    new_graph, _ = load_tflite(tmp_path / "trained.tflite")
    assert np.array_equal(new_graph.tensors[1].data, new_w) and np.array_equal(new_graph.tensors[4].data, new_w)


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #
def test_cli_export(tmp_path, capsys):
    path, _, _, wpath, tensors = _write(tmp_path, "mlp.tflite")
    out = tmp_path / "trained.tflite"
    assert main(["export", "--model", str(path), "--weights", str(wpath), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}: 2 tensor(s)" in text and "value(s) changed" in text
    assert f"'{tensors[0][1]}' int8{list(tensors[0][2].shape)}" in text
    assert out.exists()


def test_cli_export_errors(tmp_path, capsys):
    path, _, _, wpath, _ = _write(tmp_path, "mlp.tflite", sha="c" * 64)
    out = tmp_path / "trained.tflite"
    args = ["export", "--model", str(path), "--weights", str(wpath), "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--allow-other-model" in err and "Traceback" not in err
    assert not out.exists()
    assert main(args + ["--allow-other-model"]) == 0
    assert "weights recorded for another model file" in capsys.readouterr().out
    assert main(["export", "--model", str(path), "--out", str(out)]) == 2  # --weights is required
    assert "--weights" in capsys.readouterr().err
