"""The fleet-learning benchmark: simulated fleets of host twins (zoflash fleet simulate: a real
Mosquitto broker, the devices on local Dask workers) on non-IID splits of the digits, sensor and
vision tasks, against centralised ZO training on the union of the data at the same total passes,
and against FedAvg of int8 weight deltas of the same trainable set (its bytes computed: one int8
delta per trained value and a float32 scale per tensor, per device per round).

    .venv/bin/python benchmarks/fleet.py [--quick] [--tasks digits sensor vision] [--devices 16 64]
        [--rounds 30] [--steps-per-round 10] [--merge mean] [--server-lr 2] [--non-iid dirichlet:0.5]
        [--write docs/guides/fleet.md]

Per run: accuracy of the global weights before each round (the devices measure it on the shared
test set, bit-exactly), the bytes each device uploaded and received per round, whether every
replica reported the aggregator's CRC after every round, and the centralised run's accuracy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from experiments import TASKS  # noqa: E402

from zoflash.training.options import make_options  # noqa: E402
from zoflash.workflows.fleet import DEFAULT_MERGE, DEFAULT_ROUND_STEPS, DEFAULT_SERVER_LR, MERGE_RULES  # noqa: E402
from zoflash.workflows.fleet_simulate import fleet_simulate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- fleet benchmark: begin -->", "<!-- fleet benchmark: end -->"


def run(task: str, devices: int, args) -> tuple[str, str]:
    t = TASKS[task]
    extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        extra[key.replace("-", "_")] = _number(value)
    opts = make_options(None, train=t.train, seed=args.seed, **extra)
    t0 = time.monotonic()
    sim = fleet_simulate(
        t.model,
        t.data,
        opts,
        devices,
        args.rounds,
        args.steps_per_round,
        non_iid=args.non_iid,
        merge=args.merge,
        server_lr=args.server_lr,
        out_dir=ROOT / "build" / "fleet-bench" / f"{task}-{devices}",
        round_timeout=600,
        say=lambda _: None,
    )
    seconds = time.monotonic() - t0
    curve = " ".join("-" if a is None else f"{100 * a:.1f}" for a in sim.serve.accuracy)
    ratio = sim.fedavg_bytes / max(sim.uplink, 1.0)
    row = (
        f"| {task} | {devices} | {args.rounds} x {args.steps_per_round} | {sim.uplink:.0f} | {sim.downlink:.0f} | "
        f"{sim.fedavg_bytes} ({ratio:.0f}x) | {'yes' if sim.serve.identical else 'no'} | "
        f"{_pct(sim.start)} | {_pct(sim.accuracy)} | {_pct(sim.centralised)} | {sim.passes} | {seconds:.0f} |"
    )
    return row, f"{task}, {devices} devices, accuracy by round: {curve}\n{sim.summary()}"


def _number(value: str):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _pct(a: float | None) -> str:
    return "n/a" if a is None else f"{100 * a:.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["digits", "sensor", "vision"], choices=sorted(TASKS))
    ap.add_argument("--devices", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps-per-round", type=int, default=DEFAULT_ROUND_STEPS)
    ap.add_argument("--merge", default=DEFAULT_MERGE, choices=MERGE_RULES)
    ap.add_argument("--server-lr", type=float, default=DEFAULT_SERVER_LR)
    ap.add_argument("--non-iid", default="dirichlet:0.5")
    ap.add_argument("--seed", type=int, default=1, help="The run seed (the split, the directions, the minibatches).")
    ap.add_argument("--set", action="append", default=[], metavar="OPTION=VALUE", help="A training option (rho=8).")
    ap.add_argument("--quick", action="store_true", help="digits, 4 devices, 3 rounds of 20 steps")
    ap.add_argument("--write", type=Path, help="Put the results between the benchmark markers of this page.")
    args = ap.parse_args()
    if args.quick:
        args.tasks, args.devices, args.rounds, args.steps_per_round = ["digits"], [4], 3, 20
    head = [
        "| task | devices | rounds x steps | uplink B/device/round | downlink B/device/round | FedAvg int8 B/device/round "
        "(x uplink) | replicas identical | no adaptation | fleet | centralised ZO, same passes | passes | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows, curves = [], []
    for task in args.tasks:
        for n in args.devices:
            row, curve = run(task, n, args)
            print(row, flush=True)
            print(curve, flush=True)
            rows.append(row)
            curves.append(curve)
    if args.write:
        cmd = "python benchmarks/fleet.py " + " ".join(sys.argv[1:]).replace(f"--write {args.write}", "").strip()
        block = "\n".join(
            [BEGIN, "", f"`{cmd.strip()}` (merge {args.merge}, server lr {args.server_lr:g}, {args.non_iid}):", ""]
            + [*head, *rows, "", "```"]
            + curves
            + ["```", "", END]
        )
        text = args.write.read_text()
        if BEGIN in text:
            text = text.split(BEGIN)[0] + block + text.split(END, 1)[1]
        else:
            text += "\n" + block + "\n"
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
