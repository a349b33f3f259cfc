"""The model table of the docs: every fixture and public model, what zoflash does with it.

    python tools/model_table.py --write docs/models-table.md   # measure every column (slow: QEMU, TFLM)
    python tools/model_table.py --check docs/models-table.md   # exit 1 when the cheap columns are stale
    python tools/model_table.py --write docs/models-table.md --only int16_act.tflite   # re-measure some rows

Columns: compiles; bit-exact with TFLM on the host (the C, 16 random samples) and on the emulated
Cortex-M55 (QEMU); fits the STM32N6570-DK for inference and for training with 1000 random samples
(the memory plan); trains, with the C and the reference engine giving identical records on a short
run of random data. A "no" gives the one reason (the first problem zoflash names). The cheap
columns (the model set, compiles, whether it trains) are what tests/test_engines.py checks.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tests' model set and random data (conftest, test_engines)

from conftest import FIXTURES, PUBLIC  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.errors import UnsupportedModelError, ZoflashError  # noqa: E402
from zoflash.training.options import make_options  # noqa: E402
from zoflash.training.plan import plan_training  # noqa: E402

COLUMNS = (
    "model",
    "compiles",
    "bit-exact host",
    "bit-exact M55",
    "fits STM32N6 (inference)",
    "fits STM32N6 (training, 1000 samples)",
    "trains (C == reference)",
)
CHEAP = ("model", "compiles", "trains (C == reference)")
BOARD = "stm32n6570-dk"
SAMPLES = 16


def models() -> list[tuple[str, Path]]:
    """(name as the table shows it, path): the fixtures, then the public models."""
    out = [(p.name, p) for p in sorted(FIXTURES.glob("*.tflite"))]
    return out + [(f"public/{p.name}", p) for p in sorted(PUBLIC.glob("*.tflite"))]


def reason(exc: Exception) -> str:
    """The one reason: the first problem, without the op's tensor list; one table-safe line."""
    text = exc.problems[0] if isinstance(exc, UnsupportedModelError) and exc.problems else str(exc)
    text = re.sub(r" \((inputs|supported): [^)]*\)", "", text.splitlines()[0])
    return "no: " + text.replace("|", "/")


def compiles(path: Path) -> str:
    try:
        api.compile_model(api.load_model(path))
    except ZoflashError as exc:
        return reason(exc)
    return "yes"


def trains_decision(path: Path) -> str:
    """'yes' or the reason the training plan refuses (the decision every engine shares)."""
    try:
        plan_training(api.compile_model(api.load_model(path)), make_options())
    except ZoflashError as exc:
        return reason(exc)
    return "yes"


def _bit_exact_host(path: Path) -> str:
    model = api.load_model(path)
    report = api.validate(model, api.random_inputs(model, SAMPLES, seed=1))
    return "yes" if report.ok else f"no: {report}"


def _bit_exact_m55(path: Path) -> str:
    from zoflash.reference import tflm
    from zoflash.workflows.inference import model_samples

    model = api.load_model(path)
    x = api.random_inputs(model, SAMPLES, seed=1)
    ours = api.infer_on_board(path, x)
    golden = tflm.run_isolated(model.raw, model_samples(model, x), name=path.name)
    same = len(golden) == len(ours) and all(
        np.array_equal(np.asarray(g).reshape(np.shape(o)), o) for g, o in zip(golden, ours)
    )
    return "yes" if same else "no: differs from TFLM"


def _fits(path: Path, data: Path | None) -> str:
    try:
        plan = api.plan_memory(path, BOARD, data)
    except ZoflashError as exc:
        return reason(exc)
    return "yes: " + ", ".join(f"{u.region.name} {u.used // 1024} KiB" for u in plan.regions)


def _trains(path: Path, tmp: Path) -> str:
    import test_engines as engines

    decision = trains_decision(path)
    if decision != "yes":
        return decision
    try:
        engines.test_engines_decide_alike_and_accepted_models_train_identically(tmp, path)
    except AssertionError as exc:
        return f"no: {str(exc).splitlines()[0]}"
    return "yes"


def _guard(measure) -> str:
    try:
        return measure()
    except ZoflashError as exc:
        return reason(exc)


def row(name: str, path: Path) -> dict[str, str]:
    import test_engines as engines

    out = {"model": name, "compiles": compiles(path)}
    if out["compiles"] != "yes":
        return {**out, **{c: "-" for c in COLUMNS[2:-1]}, COLUMNS[-1]: out["compiles"]}
    with tempfile.TemporaryDirectory(prefix="zoflash-table-") as tmp:
        out["bit-exact host"] = _guard(lambda: _bit_exact_host(path))
        out["bit-exact M55"] = _guard(lambda: _bit_exact_m55(path))
        out["fits STM32N6 (inference)"] = _fits(path, None)
        trains = trains_decision(path)
        if trains == "yes":
            data = engines.random_data(Path(tmp) / "n6.npz", path, 1000, SAMPLES)
            out["fits STM32N6 (training, 1000 samples)"] = _fits(path, data)
        else:
            out["fits STM32N6 (training, 1000 samples)"] = "-"
        out["trains (C == reference)"] = _guard(lambda: _trains(path, Path(tmp)))
    return out


HEADER = """# Models: what zoflash does with each

<!-- generated by `python tools/model_table.py --write docs/models-table.md`: do not edit -->

Every fixture model (`tests/fixtures`) and public model (the public model folder,
`ZOFLASH_MODEL_ZOO`): compiled; run on the host and on the emulated Cortex-M55 (QEMU) against
TFLM on {samples} random samples; placed on the STM32N6570-DK for inference and for training with
1000 random samples (the memory plan of `zoflash.api.plan_memory`); trained for a few steps on random data by
the C and by the reference engine, whose records must be identical. A "no" gives the one reason.
`tests/test_engines.py` checks that the model set, the compiles column and the trains decision
are current.

"""


def render(rows: list[dict[str, str]]) -> str:
    lines = [HEADER.format(samples=SAMPLES)]
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    for r in rows:
        lines.append("| " + " | ".join(r[c] if c != "model" else f"`{r[c]}`" for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def parse(text: str) -> list[dict[str, str]]:
    """The rows of a table this module wrote."""
    out = []
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out.append(dict(zip(COLUMNS, [cells[0].strip("`"), *cells[1:]])))
    return out


def stale_cells(text: str) -> list[str]:
    """What differs in the cheap columns between the table and the models now."""
    rows = {r["model"]: r for r in parse(text)}
    now = models()
    problems = []
    if set(rows) != {name for name, _ in now}:
        problems.append(f"rows {sorted(rows)} are not the models {sorted(n for n, _ in now)}")
    for name, path in now:
        if name not in rows:
            continue
        built = compiles(path)
        if rows[name]["compiles"] != built:
            problems.append(f"{name}: compiles '{rows[name]['compiles']}', now '{built}'")
        decision = trains_decision(path) if built == "yes" else built
        said = rows[name]["trains (C == reference)"]
        if (said == "yes") != (decision == "yes") or (decision != "yes" and said != decision):
            problems.append(f"{name}: trains '{said}', now '{decision}'")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="measure every column and write the table here")
    group.add_argument("--check", type=Path, help="exit 1 when the table's cheap columns are stale")
    parser.add_argument(
        "--only", nargs="+", metavar="MODEL", help="with --write: measure only these rows, keep the others"
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = stale_cells(args.check.read_text())
        for p in problems:
            print(p)
        return 1 if problems else 0
    kept = {r["model"]: r for r in parse(args.write.read_text())} if args.only and args.write.exists() else {}
    rows = []
    for name, path in models():
        if kept and name not in args.only and name in kept:
            rows.append(kept[name])
            continue
        print(f"{name} ...", flush=True)
        rows.append(row(name, path))
    args.write.write_text(render(rows))
    print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
