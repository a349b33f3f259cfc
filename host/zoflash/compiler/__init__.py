"""The compiler: a .tflite file -> IR -> legality and lowering -> memory plan -> rendered C -> a bundle.

Stages, in order: tflite_import (flatbuffers -> ir.Graph), lowering (the op table: every op becomes
a kernel call or a problem), pipeline (lifetimes, planner, CompiledModel), codegen (C tokens and
Jinja2 templates), bundle (the directory every later verb takes).
"""
