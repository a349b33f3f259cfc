"""The Helium (MVE) kernels on the emulated Cortex-M55, bit for bit against the portable C and the
NumPy reference.

Random cases (odd channel counts, tails not a multiple of 16, strides, dilations, paddings, depth
multipliers, per-channel scales, extreme zero points and inputs) are written into one C file; a
bare-metal program (tests/m55_math's start-up and linker script) runs every case through the
public kernel (the Helium one, zo_kernels_<family>_mve.c) and through its _portable twin in the same
binary, checks the guard bytes after each output, and prints one FNV-1a hash per result under
QEMU mps3-an547. The test recomputes the hashes from the reference kernels (zoflash.reference.ops).

Whole models on the M55 against TFLM: tests/test_m55_models.py.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402
from test_kernels import (  # noqa: E402
    ACTS,
    conv_geometry,
    conv_scales,
    f32,
    folded,
    rand_i8,
    random_broadcast_shapes,
    random_conv_case,
)

from zoflash.compiler import quant  # noqa: E402
from zoflash.compiler.ops import (  # noqa: E402
    KERNELS,  # noqa: E402
    convolution_params,
    fully_connected_params,
    pooling_params,
    reduction_params,
)
from zoflash.reference.ops import binary as ref_binary  # noqa: E402
from zoflash.reference.ops import convolution as ref_convolution  # noqa: E402
from zoflash.reference.ops import fully_connected as ref_fully_connected  # noqa: E402
from zoflash.reference.ops import pooling as ref_pooling  # noqa: E402
from zoflash.reference.ops import reduction as ref_reduction  # noqa: E402

HERE = Path(__file__).resolve().parent
M55 = HERE / "m55_math"
GUARD = 16  # bytes after each output that must stay untouched

pytestmark = [pytest.mark.cross, pytest.mark.qemu]


def fnv(values) -> int:
    h = 2166136261
    for v in np.asarray(values, dtype=np.int64).ravel().tolist():
        h = ((h ^ (v & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    return h


def extreme_i8(rng, shape):
    """Random int8 with runs of -128 and 127 mixed in."""
    x = rand_i8(rng, shape)
    mask = rng.random(x.shape)
    x[mask < 0.15] = -128
    x[mask > 0.85] = 127
    return x


def zp(rng):
    return int(rng.choice([-128, 127, 0, int(rng.integers(-128, 128))]))


def conv_case(rng, i):
    c = random_conv_case(rng, pointwise=(i % 3 == 0))
    k = c["kh"] * c["kw"] * c["fc"]
    in_s, fs, out_s = conv_scales(rng, k, bool(i % 2), c["oc"])
    params = convolution_params.conv2d_params(
        **conv_geometry(c),
        input_scale=in_s,
        input_zp=zp(rng),
        filter_scales=fs,
        output_scale=out_s,
        output_zp=zp(rng),
        activation=ACTS[i % 4],
    )
    x = extreme_i8(rng, (c["h"], c["w"], c["c"]))
    w = extreme_i8(rng, (c["oc"], c["kh"], c["kw"], c["fc"]))
    b = rng.integers(-30000, 30000, c["oc"]).astype(np.int32) if i % 5 else None
    if i % 2:
        params["folded_bias"] = folded(w, b, params["input_zp"])
    return "conv2d", params, [x, w, b], ref_convolution.conv2d_s8(params, x, w, b)


def depthwise_geometry(rng, i, big_every: int = 0) -> dict:
    """A random depthwise layer's shape: channels, depth multiplier, filter, strides, dilations,
    padding; every 6th a 1-D filter along H (time series); with big_every, every big_every-th a
    23x23 filter (past the 16x8 kernel's tap bound)."""
    while True:
        h, w = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        c = int(rng.choice([1, 3, 8, 15, 16, 17, 24, 64, int(rng.integers(1, 80))]))
        dm = int(rng.choice([1, 1, 1, 2, 3]))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        dh, dw = (1, 1) if rng.random() < 0.6 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        if i % 6 == 5:  # 1-D along H (time series), which the Helium kernel runs as a row
            h, w, kw, kh = int(rng.integers(4, 40)), 1, 1, int(rng.integers(1, 11))
        if big_every and i % big_every == big_every - 1:
            h, w, kh, kw, c = 24, 24, 23, 23, 3
        padding = str(rng.choice(["SAME", "VALID"]))
        (oh, ow), _ = quant.compute_padding_hw((sh, sw), (dh, dw), (h, w), (kh, kw), padding)
        if oh >= 1 and ow >= 1 and h * w * c * dm <= 6000:
            return dict(h=h, w=w, c=c, dm=dm, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, padding=padding, oh=oh, ow=ow)


def _depthwise_shape_args(g: dict) -> dict:
    """The params builders' geometry arguments of depthwise_geometry's layer."""
    return dict(
        input_hwc=(g["h"], g["w"], g["c"]),
        output_hwc=(g["oh"], g["ow"], g["c"] * g["dm"]),
        filter_1hwo=(1, g["kh"], g["kw"], g["c"] * g["dm"]),
        stride_hw=(g["sh"], g["sw"]),
        dilation_hw=(g["dh"], g["dw"]),
        padding=g["padding"],
        depth_multiplier=g["dm"],
    )


def depthwise_case(rng, i):
    g = depthwise_geometry(rng, i)
    h, w, c, kh, kw, oc = g["h"], g["w"], g["c"], g["kh"], g["kw"], g["c"] * g["dm"]
    in_s, fs, out_s = conv_scales(rng, kh * kw, bool(i % 2), oc)
    params = convolution_params.depthwise_conv2d_params(
        **_depthwise_shape_args(g),
        input_scale=in_s,
        input_zp=zp(rng),
        filter_scales=fs,
        output_scale=out_s,
        output_zp=zp(rng),
        activation=ACTS[i % 4],
    )
    x = extreme_i8(rng, (h, w, c))
    wt = extreme_i8(rng, (1, kh, kw, oc))
    b = rng.integers(-20000, 20000, oc).astype(np.int32) if i % 3 else None
    return "depthwise_conv2d", params, [x, wt, b], ref_convolution.depthwise_conv2d_s8(params, x, wt, b)


def fc_case(rng, i):
    rows = int(rng.choice([1, 1, 2, 3]))
    depth = int(rng.choice([1, 7, 15, 16, 17, 64, 250, int(rng.integers(1, 300))]))
    units = int(rng.choice([1, 3, 4, 5, 10, 65, int(rng.integers(1, 80))]))
    per_channel = bool(i % 2) and units > 1
    in_s, fs, out_s = conv_scales(rng, depth, per_channel, units)
    params = fully_connected_params.fully_connected_params(
        input_elements=rows * depth,
        weights_shape=(units, depth),
        input_scale=in_s,
        input_zp=zp(rng),
        filter_scales=fs,
        output_scale=out_s,
        output_zp=zp(rng),
        activation=ACTS[i % 4],
    )
    x = extreme_i8(rng, rows * depth)
    w = extreme_i8(rng, (units, depth))
    b = rng.integers(-50000, 50000, units).astype(np.int32) if i % 3 else None
    if i % 2 == 0:
        params["folded_bias"] = folded(w, b, params["input_zp"])
    return "fully_connected", params, [x, w, b], ref_fully_connected.fully_connected_s8(params, x, w, b)


def binary_case(rng, i, kind):
    """Same-shape operands (the Helium path) most of the time, broadcasts (portable) sometimes."""
    if i % 4 == 3:
        s1, s2, so = random_broadcast_shapes(rng)
        if math.prod(so) == 0:
            s1 = s2 = so = (3,)
    else:
        so = tuple(int(v) for v in rng.choice([1, 3, 5, 8, 16, 17], int(rng.integers(1, 5))))
        s1 = s2 = so
    a_s, b_s = f32(rng.uniform(0.01, 0.2)), f32(rng.uniform(0.01, 0.2) * (10 if i % 4 == 0 else 1))
    if kind == "add" and i % 7 == 6:
        b_s = a_s  # equal scales: both input rescales at shift 0
    if kind == "add":
        # every fifth the smallest output scales TFLM takes: the output rescale at shift 0
        o_s = f32(max(a_s, b_s) * (3 / 2**20 if i % 5 == 0 else rng.uniform(0.5, 3.0)))
    else:
        o_s = f32(a_s * b_s * 128 * rng.uniform(0.05, 2.0) * (0.002 if i % 5 == 0 else 1.0))
    params = KERNELS.get(kind).build(
        input1_shape=s1,
        input2_shape=s2,
        output_shape=so,
        input1_scale=a_s,
        input1_zp=zp(rng),
        input2_scale=b_s,
        input2_zp=zp(rng),
        output_scale=o_s,
        output_zp=zp(rng),
        activation=ACTS[i % 4],
    )
    a, b = extreme_i8(rng, s1), extreme_i8(rng, s2)
    return kind, params, [a, b], (ref_binary.add_s8 if kind == "add" else ref_binary.mul_s8)(params, a, b)


def pool_case(rng, i, kind="max_pool", big=False):
    while True:
        h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
        c = int(rng.choice([1, 3, 8, 15, 16, 17, 70, int(rng.integers(1, 40))]))
        fh, fw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        if big:  # global pools; past 256 taps the Helium AVERAGE_POOL_2D hands over to the portable one
            h, w = int(rng.choice([5, 16, 17, 25])), int(rng.choice([5, 16, 17]))
            fh, fw, c = h, w, int(rng.choice([3, 16, 64]))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        padding = str(rng.choice(["SAME", "VALID"]))
        (oh, ow), _ = quant.compute_padding_hw((sh, sw), (1, 1), (h, w), (fh, fw), padding)
        if oh >= 1 and ow >= 1:
            break
    params = pooling_params.pool_params(
        input_hwc=(h, w, c),
        output_hwc=(oh, ow, c),
        filter_hw=(fh, fw),
        stride_hw=(sh, sw),
        padding=padding,
        output_scale=f32(rng.uniform(0.01, 0.1)),
        output_zp=zp(rng),
        activation=ACTS[i % 4],
    )
    x = extreme_i8(rng, (h, w, c))
    return kind, params, [x], (ref_pooling.max_pool_s8 if kind == "max_pool" else ref_pooling.avg_pool_s8)(params, x)


def _array(ctype, name, values):
    vals = ", ".join(str(int(v)) for v in np.asarray(values).ravel())
    return f"static const {ctype} {name}[] __attribute__((aligned(4))) = {{{vals}}};\n"


CTYPES = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t",
}


def render(cases) -> str:
    """C source: the case data and a table of calls, each into out[] followed by GUARD bytes."""
    fields = cbuild.parse_structs()
    src = ['#include "zo_kernels.h"', "#include <stddef.h>", ""]
    calls = []
    max_out = 1
    for n, (name, params, arrays, want) in enumerate(cases):
        info = KERNELS.get(name)
        args = []
        for a, arr in enumerate(arrays):
            if arr is None:
                args.append("NULL")
            else:
                src.append(_array(CTYPES[arr.dtype], f"a{n}_{a}", arr))
                args.append(f"a{n}_{a}")
        inits = []
        for f, kind in fields[info.struct]:
            if kind == "int32_t*" and params[f] is None:
                inits.append(f".{f} = NULL")
            elif kind == "int32_t*":
                src.append(_array("int32_t", f"p{n}_{f}", params[f]))
                inits.append(f".{f} = p{n}_{f}")
            else:
                inits.append(f".{f} = {int(params[f])}")
        src.append(f"static const {info.struct} p{n} = {{{', '.join(inits)}}};\n")
        for variant, fn in (("mve", info.function), ("portable", info.function + "_portable")):
            calls.append(
                f"    case {2 * n + (variant == 'portable')}: width = {want.itemsize}; "
                f"{fn}(&p{n}, {', '.join(args)}, (void *)out); return {want.size};"
            )
        max_out = max(max_out, want.nbytes)
    src.append(f"#define N_CALLS {2 * len(cases)}")
    src.append(f"static int8_t out[{max_out + GUARD}] __attribute__((aligned(8)));")
    src.append("static int32_t width; /* bytes per output value of the call */")
    src.append(f"#define GUARD {GUARD}")
    src.append("static int32_t run_call(int32_t i)\n{\n    switch (i) {")
    src += calls
    src.append("    default: return 0;\n    }\n}")
    return "\n".join(src) + "\n"


MAIN_C = r"""
void semihost_write0(const char *s);

static void put_hex(uint32_t v, char end)
{
    char line[10];
    for (int s = 0; s < 8; ++s) {
        line[s] = "0123456789abcdef"[(v >> (28 - 4 * s)) & 0xFu];
    }
    line[8] = end;
    line[9] = 0;
    semihost_write0(line);
}

int main(void)
{
    for (int32_t i = 0; i < N_CALLS; ++i) {
        for (int32_t j = 0; j < (int32_t)sizeof out; ++j) {
            out[j] = (int8_t)0x5a;
        }
        const int32_t n = run_call(i);
        uint32_t h = 2166136261u;
        for (int32_t j = 0; j < n; ++j) {
            const int32_t v = width == 2 ? (int32_t)((const int16_t *)(const void *)out)[j] : (int32_t)out[j];
            h = (h ^ (uint32_t)v) * 16777619u;
        }
        int32_t guard_ok = 1;
        for (int32_t j = n * width; j < n * width + GUARD; ++j) {
            guard_ok &= out[j] == (int8_t)0x5a;
        }
        put_hex((uint32_t)i, ' ');
        put_hex(h, ' ');
        put_hex((uint32_t)guard_ok, '\n');
    }
    return 0;
}
"""


def run_on_m55(tmp_path, cases, opt="-O2"):
    """{call index: (hash, guard intact)} from QEMU."""
    (tmp_path / "cases.c").write_text(render(cases) + MAIN_C)
    elf = tmp_path / "mve.elf"
    flags = [f if f != "-O2" else opt for f in cbuild.CROSS_FLAGS]
    cmd = [
        "arm-none-eabi-gcc",
        *flags,
        "-ffreestanding",
        "-nostdlib",
        "-nostartfiles",
        f"-I{cbuild.INFERENCE}",
        "-T",
        str(M55 / "link.ld"),
        str(M55 / "startup.c"),
        str(tmp_path / "cases.c"),
        *map(str, cbuild.KERNEL_SOURCES),
        "-lgcc",
        "-o",
        str(elf),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    run = subprocess.run(
        ["timeout", "60", "qemu-system-arm", "-M", "mps3-an547", "-nographic", "-semihosting", "-kernel", str(elf)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    got = {}
    for line in (run.stdout + run.stderr).splitlines():  # semihosting output goes to stderr
        parts = line.split()
        if len(parts) == 3:
            got[int(parts[0], 16)] = (int(parts[1], 16), int(parts[2], 16) == 1)
    assert len(got) == 2 * len(cases), f"{len(got)} results for {2 * len(cases)} calls:\n{run.stderr[-2000:]}"
    return got


def check(tmp_path, cases, opt="-O2"):
    got = run_on_m55(tmp_path, cases, opt)
    bad = []
    for n, (name, params, _, want) in enumerate(cases):
        h_mve, guard_mve = got[2 * n]
        h_port, guard_port = got[2 * n + 1]
        if not (guard_mve and guard_port):
            bad.append(f"case {n} ({name}): wrote past its output")
        if h_port != fnv(want):
            bad.append(f"case {n} ({name}): portable C on the M55 differs from the reference")
        if h_mve != fnv(want):
            shape = {k: v for k, v in params.items() if not isinstance(v, (list, np.ndarray))}
            bad.append(f"case {n} ({name}): Helium kernel differs from the reference: {shape}")
    assert not bad, "\n".join(bad)


def extreme_i16(rng, shape):
    """Random int16 with runs of -32768 and 32767 mixed in."""
    x = rng.integers(-32768, 32768, shape).astype(np.int16)
    mask = rng.random(x.shape)
    x[mask < 0.1] = -32768
    x[mask > 0.9] = 32767
    return x


def _params_16x8(rng, builder, k, oc, per_channel, **geometry):
    """16x8 params (zero points 0): an output scale that spreads the int64 sums over the int16
    range, drawn again while the builder refuses it (its shifts must stay below 8)."""
    for _ in range(50):
        in_s, fs, out_s = conv_scales(rng, k, per_channel, oc)
        try:
            return builder(
                **geometry,
                input_scale=in_s,
                input_zp=0,
                filter_scales=fs,
                output_scale=f32(out_s * 2.0),
                output_zp=0,
                activation=str(rng.choice(["NONE", "RELU", "RELU6"])),
            )
        except ValueError:
            continue
    raise AssertionError("no 16x8 scales")


def conv_s16_case(rng, i):
    c = random_conv_case(rng, pointwise=(i % 4 == 0))
    if i % 7 == 6:  # the first layer of a keyword spotter: one channel, a tall filter, strides
        c.update(c=1, fc=1, kh=10, kw=4, sh=2, sw=2, h=25, w=12, padding="SAME")
        (c["oh"], c["ow"]), _ = quant.compute_padding_hw((2, 2), (c["dh"], c["dw"]), (25, 12), (10, 4), "SAME")
    params = _params_16x8(
        rng,
        convolution_params.conv2d_s16_params,
        c["kh"] * c["kw"] * c["fc"],
        c["oc"],
        bool(i % 2),
        **conv_geometry(c),
    )
    x = extreme_i16(rng, (c["h"], c["w"], c["c"]))
    w = extreme_i8(rng, (c["oc"], c["kh"], c["kw"], c["fc"]))
    b = rng.integers(-(2**40), 2**40, c["oc"]).astype(np.int64) if i % 5 else None
    return "conv2d_s16", params, [x, w, b], ref_convolution.conv2d_s16(params, x, w, b)


def depthwise_s16_case(rng, i):
    g = depthwise_geometry(rng, i, big_every=9)
    h, w, c, oc = g["h"], g["w"], g["c"], g["c"] * g["dm"]
    kh, kw = g["kh"], g["kw"]
    params = _params_16x8(
        rng, convolution_params.depthwise_conv2d_s16_params, kh * kw, oc, bool(i % 2), **_depthwise_shape_args(g)
    )
    x = extreme_i16(rng, (h, w, c))
    wt = extreme_i8(rng, (1, kh, kw, oc))
    b = rng.integers(-(2**40), 2**40, oc).astype(np.int64) if i % 3 else None
    return "depthwise_conv2d_s16", params, [x, wt, b], ref_convolution.depthwise_conv2d_s16(params, x, wt, b)


def fc_s16_case(rng, i):
    rows = int(rng.choice([1, 1, 2, 3]))
    depth = int(rng.choice([1, 7, 8, 9, 16, 64, 250, int(rng.integers(1, 300))]))
    units = int(rng.choice([1, 3, 4, 5, 10, 65, int(rng.integers(1, 80))]))
    params = _params_16x8(
        rng,
        fully_connected_params.fully_connected_s16_params,
        depth,
        units,
        bool(i % 2) and units > 1,
        input_elements=rows * depth,
        weights_shape=(units, depth),
    )
    x = extreme_i16(rng, rows * depth)
    w = extreme_i8(rng, (units, depth))
    b = rng.integers(-(2**40), 2**40, units).astype(np.int64) if i % 3 else None
    return "fully_connected_s16", params, [x, w, b], ref_fully_connected.fully_connected_s16(params, x, w, b)


def test_16x8_kernels_mve(tmp_path):
    """16x8 CONV_2D (grouped, dilated, padded, the keyword spotter's first layer), DEPTHWISE_CONV_2D
    (depth multipliers, the portable hand-over past the tap bound) and FULLY_CONNECTED."""
    rng = np.random.default_rng(7900)
    cases = [conv_s16_case(rng, i) for i in range(30)] + [depthwise_s16_case(rng, i) for i in range(30)]
    check(tmp_path, cases + [fc_s16_case(rng, i) for i in range(20)])


@pytest.mark.parametrize("seed", range(2))
def test_conv2d_mve(tmp_path, seed):
    rng = np.random.default_rng(7100 + seed)
    check(tmp_path, [conv_case(rng, i) for i in range(40)])


@pytest.mark.parametrize("seed", range(2))
def test_depthwise_conv2d_mve(tmp_path, seed):
    rng = np.random.default_rng(7200 + seed)
    check(tmp_path, [depthwise_case(rng, i) for i in range(40)])


@pytest.mark.parametrize("seed", range(2))
def test_fully_connected_mve(tmp_path, seed):
    rng = np.random.default_rng(7300 + seed)
    check(tmp_path, [fc_case(rng, i) for i in range(30)])


@pytest.mark.parametrize("kind", ["add", "mul"])
def test_binary_mve(tmp_path, kind):
    rng = np.random.default_rng(7500 + (kind == "mul"))
    check(tmp_path, [binary_case(rng, i, kind) for i in range(40)])


def test_max_pool_mve(tmp_path):
    rng = np.random.default_rng(7600)
    check(tmp_path, [pool_case(rng, i) for i in range(40)])


def test_avg_pool_mve(tmp_path):
    rng = np.random.default_rng(7350)
    check(tmp_path, [pool_case(rng, i, "avg_pool", big=i % 5 == 4) for i in range(40)])


def mean_case(rng, i):
    """MEAN over a run of axes: global average pooling of [h, w, c] (reduce up to 600 rows: past
    the 256 an int16 lane sums), or over the channels; per-tensor scales both ways of 1."""
    h, w = int(rng.integers(1, 25)), int(rng.integers(1, 25))
    c = int(rng.choice([1, 3, 7, 8, 9, 16, 24, 33, 64]))
    axes = (0, 1) if i % 4 else (2,)
    in_zp, out_zp = ZPS[i % len(ZPS)], ZPS[(i + 2) % len(ZPS)]
    in_s = f32(rng.uniform(0.01, 0.1))
    out_s = f32(in_s * rng.choice([0.25, 0.9, 3.0]))
    params = reduction_params.mean_params(
        input_shape=(1, h, w, c),
        axes=tuple(a + 1 for a in axes),
        input_scale=in_s,
        input_zp=in_zp,
        output_scale=out_s,
        output_zp=out_zp,
    )
    x = extreme_i8(rng, (h, w, c)) if i % 2 else rand_i8(rng, (h, w, c))
    if i % 8 == 5:  # one value everywhere: the sums' extremes (an int16 lane's 256 rows at -128 * 256)
        h, w = 20, 20
        params = reduction_params.mean_params(
            input_shape=(1, h, w, c),
            axes=(1, 2),
            input_scale=in_s,
            input_zp=in_zp,
            output_scale=out_s,
            output_zp=out_zp,
        )
        x = np.full((h, w, c), -128 if i % 16 == 5 else 127, np.int8)
    return "mean", params, [x], ref_reduction.mean_s8(params, x, axes).reshape(-1)


def test_mean_mve(tmp_path):
    rng = np.random.default_rng(7430)
    check(tmp_path, [mean_case(rng, i) for i in range(24)])


def test_requant_extremes_mve(tmp_path):
    """Multipliers > 1 (left shifts), the largest right shifts, accumulators that saturate the
    doubling multiply, and ties: 1x1 convolutions and FCs whose outputs cover every rounding case."""
    rng = np.random.default_rng(7400)
    cases = []
    for i in range(12):
        name, params, (x, w, b), _ = (conv_case if i % 2 else fc_case)(rng, i)
        oc = len(params["multiplier"])
        params = dict(params)
        params["multiplier"] = [int(v) for v in rng.choice([2**30, 2**31 - 1, 1 << 16, 1518500250], oc)]
        params["shift"] = [int(v) for v in rng.choice([-31, -20, -1, 0, 1, 10], oc)]
        if b is not None:
            b = rng.choice(np.array([-(2**31), 2**31 - 1, -(1 << 20), 1 << 19], dtype=np.int64), oc).astype(np.int32)
        if params.get("folded_bias") is not None:
            params["folded_bias"] = folded(w, b, params["input_zp"])
        want = (ref_convolution.conv2d_s8 if name == "conv2d" else ref_fully_connected.fully_connected_s8)(
            params, x, w, b
        )
        cases.append((name, params, [x, w, b], want))
    check(tmp_path, cases, opt="-O3")


# ------------------------------------------------ the Helium kernels' grid (every case listed, not drawn)
# Each kernel over the listed channel counts, strides, paddings, dilations, depth multipliers, zero
# points (the extremes included) and per-channel requantisations whose shifts have both signs, and
# over the boundaries of the Helium paths (dot-product blocks of 16/32/48/64 bytes, pixel tiles, the
# 64-channel output blocks, the 32-pixel depthwise rows, the 2 KiB im2col patch).

CHANNELS = (1, 3, 8, 15, 16, 17, 64)
ZPS = (-128, 127, 0, -5, 3)


def both_sign_scales(rng, oc):
    """Per-channel scales whose requantisation multipliers span 2^-9 .. 2^2: right and left shifts."""
    in_s = f32(rng.uniform(0.01, 0.05))
    base = f32(rng.uniform(0.002, 0.02))
    fs = [f32(base * 2.0**u) for u in np.linspace(-9, 2, oc)[rng.permutation(oc)]]
    return in_s, fs, f32(in_s * base)


def small_i8(rng, shape, zp=0):
    """Values near the zero point, so left-shifted channels do not all saturate."""
    return np.clip(zp + rng.integers(-3, 4, shape), -128, 127).astype(np.int8)


def grid_conv(rng, n, h, w, c, oc, kh, kw, stride, padding, dilation=1, groups=1, spread=False):
    (oh, ow), _ = quant.compute_padding_hw((stride, stride), (dilation, dilation), (h, w), (kh, kw), padding)
    fc = c // groups
    in_zp, out_zp = ZPS[n % len(ZPS)], ZPS[(n + 2) % len(ZPS)]
    in_s, fs, out_s = both_sign_scales(rng, oc) if spread else conv_scales(rng, kh * kw * fc, bool(n % 3), oc)
    params = convolution_params.conv2d_params(
        input_hwc=(h, w, c),
        output_hwc=(oh, ow, oc),
        filter_ohwi=(oc, kh, kw, fc),
        stride_hw=(stride, stride),
        dilation_hw=(dilation, dilation),
        padding=padding,
        input_scale=in_s,
        input_zp=in_zp,
        filter_scales=fs,
        output_scale=out_s,
        output_zp=out_zp,
        activation=ACTS[n % 4],
    )
    x = small_i8(rng, (h, w, c), in_zp) if spread else extreme_i8(rng, (h, w, c))
    wt = small_i8(rng, (oc, kh, kw, fc)) if spread else extreme_i8(rng, (oc, kh, kw, fc))
    b = rng.integers(-30000, 30000, oc).astype(np.int32) if n % 4 else None
    return "conv2d", params, [x, wt, b], ref_convolution.conv2d_s8(params, x, wt, b)


def conv_grid(rng):
    cases = []
    for c in CHANNELS:  # 1x1 (the in-place GEMM when VALID), 3x3 (small-patch reads or im2col), 1x5
        for kh, kw in ((1, 1), (3, 3), (1, 5)):
            for stride in (1, 2):
                for padding in ("SAME", "VALID"):
                    n = len(cases)
                    cases.append(
                        grid_conv(
                            rng, n, 7, 6, c, CHANNELS[n % len(CHANNELS)], kh, kw, stride, padding, spread=n % 5 == 1
                        )
                    )
    for c, oc in ((65, 3), (100, 17), (128, 65), (33, 70), (48, 2), (49, 5)):  # 1x1 rows past 48 and 64 bytes
        cases.append(grid_conv(rng, len(cases), 3, 5, c, oc, 1, 1, 1, "VALID", spread=len(cases) % 2 == 0))
    for c, oc in ((80, 9), (144, 2)):  # three-pixel tiles with a short last tile (20 pixels)
        cases.append(grid_conv(rng, len(cases), 4, 5, c, oc, 1, 1, 1, "VALID", spread=len(cases) % 2 == 0))
    for c, dilation in ((3, 2), (8, 3), (17, 2)):  # dilated: im2col
        cases.append(grid_conv(rng, len(cases), 9, 8, c, 5, 3, 3, 1, "SAME", dilation=dilation))
    for c, groups in ((8, 2), (15, 3)):  # grouped convolutions
        cases.append(grid_conv(rng, len(cases), 6, 6, c, 2 * groups, 3, 3, 1, "SAME", groups=groups))
    cases.append(grid_conv(rng, len(cases), 4, 4, 240, 3, 3, 3, 1, "SAME"))  # patch of 2160 > 2048 bytes
    cases.append(grid_conv(rng, len(cases), 5, 5, 4, 6, 4, 4, 2, "SAME", spread=True))  # 4 rows of 16 bytes
    return cases


def grid_depthwise(rng, n, h, w, c, dm, kh, kw, stride, padding, dilation=1, spread=False):
    (oh, ow), _ = quant.compute_padding_hw((stride, stride), (dilation, dilation), (h, w), (kh, kw), padding)
    oc = c * dm
    in_zp, out_zp = ZPS[n % len(ZPS)], ZPS[(n + 3) % len(ZPS)]
    in_s, fs, out_s = both_sign_scales(rng, oc) if spread else conv_scales(rng, kh * kw, bool(n % 3), oc)
    params = convolution_params.depthwise_conv2d_params(
        input_hwc=(h, w, c),
        output_hwc=(oh, ow, oc),
        filter_1hwo=(1, kh, kw, oc),
        stride_hw=(stride, stride),
        dilation_hw=(dilation, dilation),
        padding=padding,
        depth_multiplier=dm,
        input_scale=in_s,
        input_zp=in_zp,
        filter_scales=fs,
        output_scale=out_s,
        output_zp=out_zp,
        activation=ACTS[n % 4],
    )
    x = small_i8(rng, (h, w, c), in_zp) if spread else extreme_i8(rng, (h, w, c))
    wt = small_i8(rng, (1, kh, kw, oc)) if spread else extreme_i8(rng, (1, kh, kw, oc))
    b = rng.integers(-20000, 20000, oc).astype(np.int32) if n % 3 else None
    return "depthwise_conv2d", params, [x, wt, b], ref_convolution.depthwise_conv2d_s8(params, x, wt, b)


def depthwise_grid(rng):
    cases = []
    for c in CHANNELS:
        for dm in (1, 2):
            for stride in (1, 2):
                for padding in ("SAME", "VALID"):
                    n = len(cases)
                    k, dilation = ((3, 3), 1 + (n % 7 == 4)) if n % 3 else ((5, 5), 1)
                    cases.append(
                        grid_depthwise(rng, n, 7, 8, c, dm, *k, stride, padding, dilation=dilation, spread=n % 5 == 2)
                    )
    for c, dm in ((1, 3), (3, 4), (5, 3), (17, 3)):  # larger depth multipliers
        cases.append(grid_depthwise(rng, len(cases), 5, 6, c, dm, 3, 3, 1, "SAME"))
    for c, w in ((8, 40), (16, 33), (17, 70), (3, 65)):  # output rows longer than the 32 pixels kept
        cases.append(grid_depthwise(rng, len(cases), 3, w, c, 1, 3, 3, 1, "SAME", spread=c == 17))
    cases.append(grid_depthwise(rng, len(cases), 10, 10, 16, 1, 3, 3, 2, "VALID", dilation=3))
    # tall narrow maps, walked transposed (their columns as rows): a keyword-spotting layer's 25x5,
    # stride 2 down a column of 4
    cases.append(grid_depthwise(rng, len(cases), 25, 5, 48, 1, 3, 3, 1, "SAME", spread=True))
    cases.append(grid_depthwise(rng, len(cases), 30, 4, 20, 1, 3, 3, 2, "SAME"))
    # a filter whose band does not fit the stack (8x8, stride 3: the portable kernel), and large
    # ones that do: 9x9, and a speech front end's 10x8 of stride 2, depth multiplier 8 on one channel
    cases.append(grid_depthwise(rng, len(cases), 12, 12, 9, 1, 8, 8, 3, "VALID"))
    cases.append(grid_depthwise(rng, len(cases), 11, 11, 5, 1, 9, 9, 1, "SAME"))
    cases.append(grid_depthwise(rng, len(cases), 21, 16, 1, 8, 10, 8, 2, "SAME"))
    # a 1-D filter along H onto one output pixel (walked along the filter's length)
    cases.append(grid_depthwise(rng, len(cases), 21, 1, 24, 1, 21, 1, 1, "VALID"))
    return cases


def fc_grid(rng):
    cases = []
    depths = (1, 3, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 129, 255)
    units = (1, 3, 15, 16, 17, 64, 65, 130)
    for n, depth in enumerate(depths):
        for u in (units[n % len(units)], units[(n + 3) % len(units)]):
            rows = (1, 3)[len(cases) % 2]
            spread = len(cases) % 4 == 1
            in_s, fs, out_s = both_sign_scales(rng, u) if spread else conv_scales(rng, depth, bool(n % 2), u)
            in_zp, out_zp = ZPS[len(cases) % len(ZPS)], ZPS[(len(cases) + 1) % len(ZPS)]
            params = fully_connected_params.fully_connected_params(
                input_elements=rows * depth,
                weights_shape=(u, depth),
                input_scale=in_s,
                input_zp=in_zp,
                filter_scales=fs,
                output_scale=out_s,
                output_zp=out_zp,
                activation=ACTS[len(cases) % 4],
            )
            x = small_i8(rng, rows * depth, in_zp) if spread else extreme_i8(rng, rows * depth)
            w = small_i8(rng, (u, depth)) if spread else extreme_i8(rng, (u, depth))
            b = rng.integers(-50000, 50000, u).astype(np.int32) if len(cases) % 3 else None
            cases.append(
                ("fully_connected", params, [x, w, b], ref_fully_connected.fully_connected_s8(params, x, w, b))
            )
    return cases


BROADCASTS = (
    ((1, 1, 1, 8), (1, 4, 3, 8)),
    ((4, 3, 1), (1, 1, 5)),
    ((17,), ()),
    ((), (3, 16)),
    ((2, 1, 15), (2, 3, 1)),
    ((1, 64), (5, 64)),
    ((3, 17), (3, 17)),
    ((1,), (1,)),
    ((2, 8), (2, 8)),
    ((5, 1, 1, 3), (1, 2, 4, 1)),
)


def binary_grid(rng, kind):
    cases = []
    for n, (s1, s2) in enumerate(BROADCASTS * 2):
        so = tuple(np.broadcast_shapes(s1, s2))
        a_s, b_s = f32(rng.uniform(0.01, 0.2)), f32(rng.uniform(0.01, 0.2) * (8 if n % 3 == 0 else 1))
        o_s = (
            f32(max(a_s, b_s) * rng.uniform(0.5, 3.0)) if kind == "add" else f32(a_s * b_s * 128 * rng.uniform(0.05, 2))
        )
        # Activation ranges: the four fused activations, each with output zero points at both ends.
        params = KERNELS.get(kind).build(
            input1_shape=s1,
            input2_shape=s2,
            output_shape=so,
            input1_scale=a_s,
            input1_zp=ZPS[n % len(ZPS)],
            input2_scale=b_s,
            input2_zp=ZPS[(n + 1) % len(ZPS)],
            output_scale=o_s,
            output_zp=ZPS[(n + 2) % len(ZPS)],
            activation=ACTS[n % 4],
        )
        a, b = extreme_i8(rng, s1), extreme_i8(rng, s2)
        cases.append((kind, params, [a, b], (ref_binary.add_s8 if kind == "add" else ref_binary.mul_s8)(params, a, b)))
    return cases


def max_pool_grid(rng):
    cases = []
    windows = ((1, 1, 1), (2, 2, 2), (3, 3, 2), (3, 3, 1), (2, 3, 1), (7, 6, 1), (9, 9, 3))  # fh, fw, stride
    for n, c in enumerate(CHANNELS + (70,)):
        for m, (fh, fw, s) in enumerate(windows):
            if (n + m) % 2:
                continue
            padding = ("SAME", "VALID")[(n + m) // 2 % 2]
            (oh, ow), _ = quant.compute_padding_hw((s, s), (1, 1), (7, 6), (fh, fw), padding)
            if oh < 1 or ow < 1:
                continue
            params = pooling_params.pool_params(
                input_hwc=(7, 6, c),
                output_hwc=(oh, ow, c),
                filter_hw=(fh, fw),
                stride_hw=(s, s),
                padding=padding,
                output_scale=f32(rng.uniform(0.01, 0.1)),
                output_zp=ZPS[len(cases) % len(ZPS)],
                activation=ACTS[len(cases) % 4],
            )
            x = extreme_i8(rng, (7, 6, c))
            cases.append(("max_pool", params, [x], ref_pooling.max_pool_s8(params, x)))
    return cases


def test_grid_shifts_have_both_signs():
    """The grid's spread requantisations do shift both ways (what they are there for)."""
    rng = np.random.default_rng(7700)
    shifts = [s for _, p, _, _ in conv_grid(rng) + depthwise_grid(rng) + fc_grid(rng) for s in p["shift"]]
    assert min(shifts) < -5 and max(shifts) > 0


def test_conv_and_depthwise_grid_mve(tmp_path):
    rng = np.random.default_rng(7700)
    check(tmp_path, conv_grid(rng) + depthwise_grid(rng))


def test_fc_binary_pool_grid_mve(tmp_path):
    rng = np.random.default_rng(7800)
    check(tmp_path, fc_grid(rng) + binary_grid(rng, "add") + binary_grid(rng, "mul") + max_pool_grid(rng))
