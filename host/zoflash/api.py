"""The library API: everything the command line does, usable from Python.

Inference: load_model, compile_model, generate, build, infer, infer_on_board, validate, inspect,
plan_memory, split_model, profile (instructions per kernel call on an emulated board). Training:
simulate (on the host), simulate_continual (--mode continual on the host, fed a stream), run (build,
flash and monitor a board), monitor (watch a board that trains), export (trained weights into a copy
of the model), replay (the trained tensors rebuilt from the base model and a run's log), push (a
run's updates sent to a second device); their options:
TrainOptions (checked as it is made, as the command line checks its flags) or make_options (with
a zoflash.toml). The C
runtime for your own build: runtime_include_dirs, runtime_c_sources, runtime_root.
Each is a workflow (zoflash.workflows) over the pipeline's stages; the CLI is a thin layer over these.
"""

from __future__ import annotations

from zoflash.compiler.runtime import PARTS as RUNTIME_PARTS
from zoflash.compiler.runtime import REQUIRES, runtime_root
from zoflash.compiler.runtime import include_dirs as runtime_include_dirs
from zoflash.compiler.runtime import sources as runtime_c_sources
from zoflash.training.export import export_weights as export
from zoflash.training.options import OptionsError, TrainOptions, make_options
from zoflash.workflows.continual import simulate_continual
from zoflash.workflows.generate import (
    Compiled,
    LoadedModel,
    MemoryPlan,
    SplitResult,
    build,
    compile_for,
    compile_model,
    default_bundle_dir,
    generate,
    load_model,
    plan_memory,
    split_model,
    training_cut,
)
from zoflash.workflows.inference import (
    OutputComparison,
    ValidationReport,
    host_model,
    infer,
    infer_on_board,
    input_quantization,
    random_inputs,
    validate,
)
from zoflash.workflows.inspect import Inspection, inspect
from zoflash.workflows.monitor import monitor
from zoflash.workflows.profile import Profile, profile
from zoflash.workflows.push import PushResult, model_of_bundle
from zoflash.workflows.push import push_to_port as push
from zoflash.workflows.replay import ReplayResult, replay
from zoflash.workflows.run import run
from zoflash.workflows.simulate import SimulationResult, simulate


def runtime_requirements(part: str) -> tuple[str, ...]:
    """The runtime parts whose headers a part's sources include."""
    return REQUIRES[part]


__all__ = [
    "load_model",
    "compile_model",
    "compile_for",
    "generate",
    "build",
    "infer",
    "infer_on_board",
    "validate",
    "inspect",
    "profile",
    "Profile",
    "random_inputs",
    "input_quantization",
    "host_model",
    "plan_memory",
    "training_cut",
    "split_model",
    "default_bundle_dir",
    "simulate",
    "simulate_continual",
    "run",
    "monitor",
    "export",
    "replay",
    "ReplayResult",
    "push",
    "PushResult",
    "model_of_bundle",
    "runtime_include_dirs",
    "runtime_c_sources",
    "runtime_root",
    "runtime_requirements",
    "RUNTIME_PARTS",
    "LoadedModel",
    "Compiled",
    "MemoryPlan",
    "SplitResult",
    "OutputComparison",
    "ValidationReport",
    "Inspection",
    "SimulationResult",
    "TrainOptions",
    "make_options",
    "OptionsError",
]
