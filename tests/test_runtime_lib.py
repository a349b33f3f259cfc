"""The static C runtime as a library of the user's own build: its parts (zoflash.compiler.runtime),
its public headers from C++, its CMake targets, and the port contract as the only thing a port
includes of it."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib

import pytest
from conftest import ROOT

from zoflash.compiler import runtime

RUNTIME = ROOT / "firmware_templates" / "runtime"
PORTS = ROOT / "firmware_templates" / "ports"
HOST_PORT = PORTS / "host" / "zo_port_host.c"

# What a program may include (zo_neuralart.h too, with ST's ll_aton headers).  zo_telemetry.h comes
# before zo_port.h, which declares two of its functions again: a missing extern "C" in it shows.
PUBLIC_HEADERS = (
    "zo_runtime.h",
    "zo_kernels.h",
    *sorted(h.name for h in (RUNTIME / "inference").glob("zo_kernels_*.h") if h.name != "zo_kernels_mve.h"),
    "zo_fixedpoint.h",
    "zo_rng.h",
    "zo_train_math.h",
    "zo_telemetry.h",
    "zo_port.h",
    "zo_port_checkpoint.h",
    "zo_command.h",
    "zo_stream.h",
    "zo_sched.h",
    "zo_trainer.h",
    "zo_app.h",
    "zo_ethosu.h",
    "zo_port_cortex_m.h",
)
# Macros and includes only: zo_kernels.h includes the family headers, which declare the kernels.
MACROS_ONLY = ("zo_port_checkpoint.h", "zo_kernels.h", "zo_kernels_base.h")

# Exercises each library once; the expected lines are computed in Python below.
PROGRAM = r"""
#include <stdio.h>
#include <string.h>

%(includes)s

int main(void)
{
    const unsigned char text[] = "123456789";
    const int8_t pool_in[4] = { -7, 42, 3, -128 };
    int8_t pool_out[1] = { 0 };
    const float lr = zo_lr_at_q(0.25f, 8u, ZO_LR_SQRT);
    uint32_t lr_bits;
    memcpy(&lr_bits, &lr, sizeof lr_bits);
    const zo_pool_params_t p = { 2, 2, 1, 1, 1, 2, 2, 2, 2, 0, 0, -128, 127 };
    zo_max_pool_s8(&p, pool_in, pool_out);
    printf("crc %%08x\n", (unsigned)zo_tm_crc32(0u, text, (uint32_t)strlen((const char *)text)));
    printf("lr %%08x\n", (unsigned)lr_bits);
    printf("hash %%08x\n", (unsigned)zo_hash(1u, 2u, 3u, 4u, 5u));
    printf("pool %%d\n", (int)pool_out[0]);
    printf("ckpt %%u\n", (unsigned)ZO_CKPT_HEADER_BYTES);
    return 0;
}
"""


def _expected() -> list[str]:
    import numpy as np

    from zoflash.reference import zo_math

    lr = np.float32(0.25) * (np.float32(2.0) * np.float32(1.41421354))  # q = 8: 2^(3/2) as the C computes it
    lr_bits = struct.unpack("<I", struct.pack("<f", lr))[0]
    return [
        f"crc {zlib.crc32(b'123456789'):08x}",
        f"lr {lr_bits:08x}",
        f"hash {int(zo_math.zo_hash(1, 2, 3, 4, 5)):08x}",
        "pool 42",
        f"ckpt {struct.calcsize('<4sHH8s8sIII')}",
    ]


def _includes(names) -> str:
    return "\n".join(f'#include "{n}"' for n in names)


def test_the_parts_are_the_runtime_folders():
    assert {p.name for p in RUNTIME.iterdir() if p.is_dir()} == set(runtime.PARTS)
    assert runtime.with_requirements(["training"]) == ["zo_math", "port", "training"]
    assert runtime.include_dirs("app") == [RUNTIME / p for p in ("zo_math", "port", "training", "app")]
    training = runtime.sources(["training"])
    assert RUNTIME / "training" / "zo_trainer.c" in training and RUNTIME / "training" / "zo_lr.c" in training
    assert all(s.parent == RUNTIME / "training" for s in training)  # a part's own sources only
    assert "zo_train_main.c" not in {s.name for s in training}  # it needs a bundle's zo_bundle.h
    assert "zo_train_main.c" in {s.name for s in runtime.sources(["training"], bundle_only=True)}
    with pytest.raises(ValueError, match="unknown runtime part"):
        runtime.include_dirs(["kernels"])


def test_a_bundle_copies_only_the_c_files_of_its_kernels():
    files = runtime.runtime_sources(kernels=["fully_connected", "softmax", "fully_connected"])
    kernel_c = {n for n in files if n.startswith("zo_kernels_") and n.endswith(".c")}
    assert kernel_c == {"zo_kernels_conv.c", "zo_kernels_conv_mve.c", "zo_kernels_misc.c"}
    # every header (zo_kernels.h includes each family's) and the ZO-step maths
    assert {"zo_kernels.h", "zo_kernels_pool.h", "zo_kernels_int16.h", "zo_rng.c"} <= set(files)
    everything = runtime.runtime_sources()
    assert {"zo_kernels_pool.c", "zo_kernels_int16.c"} <= set(everything)
    assert set(runtime.runtime_sources(kernels=[])) == {
        n for n in everything if not n.startswith("zo_kernels_") or n.endswith(".h")
    }


def test_a_part_includes_only_the_headers_of_its_requirements():
    own = {p: {h.name for h in (RUNTIME / p).glob("*.h")} for p in runtime.PARTS}
    for part in ("inference", "zo_math", "port", "training"):
        reachable = set().union(*(own[p] for p in runtime.with_requirements([part])))
        for src in sorted((RUNTIME / part).glob("*.[ch]")):
            if src.name in runtime.BUNDLE_ONLY:
                continue
            included = set(re.findall(r'^#include "([^"]+)"', src.read_text(), flags=re.M))
            assert included <= reachable, (src.name, included - reachable)


def test_ports_include_only_the_port_contract():
    """A port depends on the port contract (runtime/port/), never on the trainer's headers."""
    runtime_headers = {h.name for h in RUNTIME.rglob("*.h")}
    contract = {h.name for h in (RUNTIME / "port").glob("*.h")}
    for src in sorted(PORTS.glob("*/zo_port_*.[ch]")):
        included = set(re.findall(r'^#include "([^"]+)"', src.read_text(), flags=re.M))
        assert included & runtime_headers <= contract, (src.name, included & runtime_headers - contract)


def _objects(tmp_path, cc: str) -> list[str]:
    """The inference, ZO-maths and training libraries and the host port, compiled as C."""
    incs = [f"-I{d}" for d in runtime.include_dirs(["inference", "training"])]
    objs = []
    for src in runtime.sources(["inference", "zo_math", "training"]) + [HOST_PORT]:
        obj = tmp_path / f"{src.stem}.o"
        res = subprocess.run(
            [
                cc,
                "-std=c11",
                "-O2",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-ffp-contract=off",
                *incs,
                "-c",
                str(src),
                "-o",
                str(obj),
            ],
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stderr
        objs.append(str(obj))
    return objs


def test_public_headers_declare_c_linkage_for_cpp():
    paths = {p.name: p for p in [*RUNTIME.rglob("*.h"), *PORTS.rglob("*.h")]}
    for name in ("zo_neuralart.h", *PUBLIC_HEADERS):
        text = paths[name].read_text()
        assert (name in MACROS_ONLY) != ('extern "C" {' in text), name


@pytest.mark.cc
def test_public_headers_compile_and_link_as_cpp(tmp_path):
    cxx, cc = shutil.which("g++"), shutil.which("gcc") or shutil.which("cc")
    if cxx is None or cc is None:
        pytest.skip("needs g++ and a C compiler")
    main = tmp_path / "main.cpp"
    main.write_text(PROGRAM % {"includes": _includes(PUBLIC_HEADERS)})
    incs = [f"-I{d}" for d in runtime.include_dirs(runtime.PARTS)] + [f"-I{PORTS / 'cortex-m'}"]
    exe = tmp_path / "user"
    res = subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DZO_CPU_CLOCK_HZ=100000000u",
            *incs,
            str(main),
            *_objects(tmp_path, cc),
            "-lm",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == _expected()


USER_CMAKE = """cmake_minimum_required(VERSION 3.15)
project(zoflash_user LANGUAGES C)
add_subdirectory({runtime} zoflash_runtime)
add_executable(user main.c {port})
target_link_libraries(user PRIVATE zoflash_training zoflash_inference)
"""


@pytest.mark.cc
def test_a_cmake_project_builds_against_the_runtime(tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "main.c").write_text(PROGRAM % {"includes": _includes(("zo_kernels.h", "zo_trainer.h", "zo_telemetry.h"))})
    (src / "CMakeLists.txt").write_text(
        USER_CMAKE.format(runtime=runtime.runtime_root().as_posix(), port=HOST_PORT.as_posix())
    )
    for cmd in (
        [
            cmake,
            "-S",
            str(src),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror",
        ],
        [cmake, "--build", str(build), "-j", "2"],
    ):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = subprocess.run([str(build / "user")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == _expected()
