"""Survey a directory of public .tflite models: which are INT8, which the tflite-micro interpreter runs,
which zoflash compiles, and which are bit-exact with TFLM on random inputs.

For each model: its ops; whether it is INT8 (integer activations: int8/uint8/int16; float models are
listed and skipped); whether TFLM runs it (constructs and invokes once); `zoflash inspect`'s verdict
(its refusal's problems); and, for a compiled model TFLM runs, `api.validate` on N random inputs,
every output compared (seed 1, the first two at the input type's minimum and maximum, as in
tests/test_public_models.py). Each model runs in its
own subprocess with a time limit, so a crash or a hang is a row of the table, not the end of the
survey.

Usage: python benchmarks/zoo_survey.py DIR [--samples 100] [--timeout 900] [--out table.md]
       [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

# Run in the child: one model, one JSON line on stdout.
_CHILD = r"""
import json, sys
import numpy as np
from zoflash import api
from zoflash.errors import UnsupportedModelError, ZoflashError

path, samples = sys.argv[1], int(sys.argv[2])
r = {"ops": [], "int8": None, "tflm": None, "verdict": None, "reason": ""}
try:
    model = api.load_model(path)
except ZoflashError as err:
    r.update(verdict="unreadable", reason=str(err).splitlines()[0]); print(json.dumps(r)); sys.exit()
g = model.graph
r["ops"] = sorted({op.type for op in g.ops})
acts = {g.tensors[i].dtype for op in g.ops for i in op.outputs}
r["int8"] = bool(acts & {"int8", "uint8", "int16"})
r["io"] = [g.tensors[i].dtype for i in g.inputs] + ["->"] + [g.tensors[i].dtype for i in g.outputs]
if not r["int8"]:
    r.update(verdict="skipped", reason="float model"); print(json.dumps(r)); sys.exit()
x = api.random_inputs(model, samples, seed=1)
if x.dtype.kind in "iu":
    x[0], x[1] = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max
try:
    from zoflash.reference.tflm import TflmInterpreter
    TflmInterpreter(model.raw).run_batch(x[:1])
    r["tflm"] = True
except Exception as err:  # the interpreter's own refusal: its message is the row's reason
    r["tflm"], r["tflm_error"] = False, str(err).splitlines()[0][:200]
try:
    api.compile_model(model)
except UnsupportedModelError as err:
    r.update(verdict="refused", reason=[str(p) for p in err.problems])
    print(json.dumps(r)); sys.exit()
if not r["tflm"]:
    r.update(verdict="compiles (TFLM cannot run it)"); print(json.dumps(r)); sys.exit()
report = api.validate(path, x)
bad = sum(o.mismatches for o in report.outputs)
r.update(verdict="bit-exact" if report.ok else "MISMATCH",
         reason="" if report.ok else f"{bad} of {sum(o.elements for o in report.outputs)} output values differ")
print(json.dumps(r))
"""


def survey_one(path: Path, samples: int, timeout: float) -> dict:
    t0 = time.time()
    try:
        p = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), str(samples)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"verdict": "timeout", "reason": f"over {timeout:.0f} s", "seconds": timeout}
    lines = p.stdout.strip().splitlines()
    try:
        r = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        r = {"verdict": "crash", "reason": tail[:200]}
    r["seconds"] = round(time.time() - t0, 1)
    return r


def short_reason(reason) -> str:
    """A refusal's distinct problems, each once: 'OP: message', without the tensor names and the
    list of supported ops; the first three."""
    if isinstance(reason, str):
        return reason
    seen = []
    for problem in reason:
        problem = re.sub(r"^op \d+ (\S+) \(inputs: .*?; outputs: .*?\): ", r"\1: ", problem)
        problem = re.sub(r" \(supported: [A-Z0-9_, ]+\)", "", problem)
        if problem not in seen:
            seen.append(problem)
    return "; ".join(seen[:3]) + (f"; and {len(seen) - 3} more" if len(seen) > 3 else "")


def short_tflm_error(message: str) -> str:
    """The interpreter's reason, without the allocation wrapper around it."""
    return re.sub(r"^TFLM failed to allocate tensors \(arena_size=\d+\): ", "", message)


def table(results: dict) -> str:
    rows = ["| model | ops | TFLM runs? | zoflash verdict | reason |", "|---|---|---|---|---|"]
    for name, r in sorted(results.items()):
        tflm = {True: "yes", False: "no: " + short_tflm_error(r.get("tflm_error", "")), None: "-"}[r.get("tflm")]
        reason = short_reason(r.get("reason", "")).replace("|", "\\|")
        rows.append(f"| {name} | {', '.join(r.get('ops', []))} | {tflm} | {r['verdict']} | {reason} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, help="write the markdown table here (else stdout)")
    ap.add_argument("--json", type=Path, help="write (and reuse: models already in it are skipped) the results")
    args = ap.parse_args()
    results = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    for path in sorted(args.dir.glob("*.tflite"), key=lambda p: p.stat().st_size):  # small ones first
        if path.name in results:
            continue
        results[path.name] = survey_one(path, args.samples, args.timeout)
        print(f"{path.name}: {results[path.name]['verdict']} ({results[path.name]['seconds']} s)", file=sys.stderr)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    text = table(results)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
