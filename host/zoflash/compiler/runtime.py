"""The static C runtime (firmware_templates/runtime/<part>/): its parts, what each needs, and its
files, for the bundles (copied flat) and for a user's own build (include folders and sources in
place; firmware_templates/runtime/CMakeLists.txt defines the same libraries for CMake).

Parts:
  inference  the int8 kernels and the model types (every bundle)
  zo_math    the ZO-step maths: counter-based RNG, perturbation, update, losses (every bundle)
  port       the port contract: what the training runtime needs from its board (zo_port.h) and the
             checkpoint header a port's store reads (zo_port_checkpoint.h)
  training   the training loop: trainer, checkpoints, lr, scheduler, telemetry, commands, stream;
             zo_train_main.c is the firmware's main (it needs a bundle's zo_bundle.h)
  app        the trainer as a library (--data-source app): zo_app.c needs a bundle's zo_bundle.h
  continual  --mode continual: drift detector, paired test, A/B slots, the controller and its main
  harness    the inference program of emulated boards (needs a bundle's generated headers)
  npu        the NPU glue (needs the vendor's driver headers)
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from zoflash.compiler.ops import KERNELS

# Copied flat into bundles: the int8 kernels and the ZO-step maths into every bundle, the training
# loop and the port contract it is written against into training bundles only.
INFERENCE_RUNTIME = "inference"
SHARED_RUNTIME = (INFERENCE_RUNTIME, "zo_math")
TRAINING_RUNTIME = "training"
PORT_RUNTIME = "port"

# part -> the parts whose headers its sources include
REQUIRES: dict[str, tuple[str, ...]] = {
    "inference": (),
    "zo_math": (),
    "port": (),
    "training": ("zo_math", "port"),
    "app": ("training", "zo_math", "port"),
    "continual": ("training", "zo_math", "port"),
    "harness": ("inference", "port"),
    "npu": ("training", "port"),
}
PARTS = tuple(REQUIRES)

# The programs' mains and the library glue that include a bundle's generated headers: not part
# of a library built from the runtime alone.
BUNDLE_ONLY = frozenset({"zo_train_main.c", "zo_app.c", "zo_infer_main.c", "zo_continual_main.c"})


def runtime_root() -> Path:
    """firmware_templates/runtime of the installed package."""
    return Path(str(resources.files("zoflash.firmware_templates") / "runtime"))


def _check(parts: Iterable[str]) -> list[str]:
    parts = [parts] if isinstance(parts, str) else list(parts)
    unknown = [p for p in parts if p not in REQUIRES]
    if unknown:
        raise ValueError(f"unknown runtime part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    return parts


def with_requirements(parts: Iterable[str]) -> list[str]:
    """The parts and every part their headers need, each once, in PARTS order."""
    todo, seen = _check(parts), set()
    while todo:
        part = todo.pop()
        if part not in seen:
            seen.add(part)
            todo.extend(REQUIRES[part])
    return [p for p in PARTS if p in seen]


def include_dirs(parts: Iterable[str]) -> list[Path]:
    """The include folders that compiling the parts' sources needs (theirs and their requirements')."""
    root = runtime_root()
    return [root / p for p in with_requirements(parts)]


def sources(parts: Iterable[str], bundle_only: bool = False) -> list[Path]:
    """The C sources of the parts themselves (not of their requirements), sorted; without the
    files that need a bundle's generated headers (BUNDLE_ONLY) unless bundle_only."""
    root = runtime_root()
    return [
        root / p / name
        for p in _check(parts)
        for name in sorted(runtime_part(p))
        if name.endswith(".c") and (bundle_only or name not in BUNDLE_ONLY)
    ]


def runtime_part(part: str) -> dict[str, bytes]:
    """File name -> bytes of the static C files in firmware_templates/runtime/<part>/."""
    root = resources.files("zoflash.firmware_templates") / "runtime" / part
    return {p.name: p.read_bytes() for p in root.iterdir() if p.name.endswith((".c", ".h"))}


def kernel_sources(kernels: Iterable[str]) -> set[str]:
    """The inference part's C files that the named kernels (Step.kernel) need: their declared
    `Kernel.sources`."""
    return {source for name in kernels for source in KERNELS.get(name).sources}


def runtime_sources(training: bool = False, kernels: Iterable[str] | None = None) -> dict[str, bytes]:
    """The static C runtime (kernels and ZO-step maths, plus the training loop and its port
    contract if asked), copied verbatim into bundles. With `kernels` (the Step.kernel names a
    model calls), only the C files of those kernels from the inference part; every header."""
    parts = SHARED_RUNTIME + ((TRAINING_RUNTIME, PORT_RUNTIME) if training else ())
    needed = None if kernels is None else kernel_sources(kernels)
    return dict(
        sorted(
            (name, data)
            for part in parts
            for name, data in runtime_part(part).items()
            if part != INFERENCE_RUNTIME or needed is None or not name.endswith(".c") or name in needed
        )
    )
