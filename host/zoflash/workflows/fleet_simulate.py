"""`zoflash fleet simulate`: a fleet of host twins (the training firmware built for the host, one
per device, each with its own slice of the data) learning together through a real Mosquitto
broker, their local training run as Dask tasks (local workers, or a cluster), compared with
centralised ZO training on the union of the data at the same total passes."""

from __future__ import annotations

import math
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from zoflash.errors import DataError, ZoflashError
from zoflash.monitor.fleet_view import plot_fleet
from zoflash.monitor.mqtt import Broker, Link, start_broker
from zoflash.monitor.serial_monitor import Monitor
from zoflash.spec import fleet as fw
from zoflash.training.options import TrainOptions
from zoflash.workflows.fleet import (
    DEFAULT_MERGE,
    DEFAULT_SERVER_LR,
    Aggregator,
    FleetDevice,
    FleetLog,
    ServeResult,
    build_twin,
    device_topics,
    fleet_summary,
    join,
    serve,
    twin_monitor,
)

Say = Callable[[str], None]
MIN_SAMPLES = 6  # per device: a validation split and minibatches need a few
DRILLS = ("drop", "duplicate", "corrupt", "late-upload", "late-join", "broker-restart")


class DropOut(Exception):
    """A drill: the device leaves the fleet now."""


# ---------------------------------------------------------------------------------- the data


def split(y: np.ndarray, devices: int, how: str, seed: int) -> list[np.ndarray]:
    """Sample indices per device.  `how`: iid; dirichlet:ALPHA (each class spread over the devices
    by Dirichlet(ALPHA) shares: small ALPHA, few classes per device); labels:K (each device sees K
    classes).  Every device gets at least MIN_SAMPLES."""
    rng = np.random.default_rng(seed)
    n = len(y)
    if devices * MIN_SAMPLES > n:
        raise DataError(f"{n} training samples cannot give {devices} devices {MIN_SAMPLES} each: use fewer --devices")
    classes = np.unique(y)
    parts: list[list[int]] = [[] for _ in range(devices)]
    m = re.fullmatch(r"(iid|dirichlet:([0-9.]+)|labels:([0-9]+))", how)
    if m is None:
        raise ZoflashError(f"--non-iid {how}: give iid, dirichlet:ALPHA (for example dirichlet:0.5) or labels:K")
    if how == "iid":
        for k, i in enumerate(rng.permutation(n)):
            parts[k % devices].append(int(i))
    elif m.group(2) is not None:
        alpha = float(m.group(2))
        if not alpha > 0:
            raise ZoflashError(f"--non-iid {how}: ALPHA must be above 0")
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            shares = rng.dirichlet([alpha] * devices)
            cuts = (np.cumsum(shares)[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(int(i) for i in chunk)
    else:
        k_classes = int(m.group(3))
        if not 1 <= k_classes <= len(classes):
            raise ZoflashError(f"--non-iid {how}: K must be in 1..{len(classes)} (the classes)")
        owners: dict[int, list[int]] = {int(c): [] for c in classes}
        for d in range(devices):
            for c in rng.choice(classes, k_classes, replace=False):
                owners[int(c)].append(d)
        for c, who in owners.items():
            idx = rng.permutation(np.flatnonzero(y == c))
            who = who or [int(rng.integers(devices))]
            for k, chunk in enumerate(np.array_split(idx, len(who))):
                parts[who[k]].extend(int(i) for i in chunk)
    # top up the small ones from the largest, so every device can train
    for d in range(devices):
        while len(parts[d]) < MIN_SAMPLES:
            big = max(range(devices), key=lambda j: len(parts[j]))
            parts[d].append(parts[big].pop(int(rng.integers(len(parts[big])))))
    return [np.array(sorted(p), dtype=np.int64) for p in parts]


# ---------------------------------------------------------------------------------- a device task


@dataclass
class TwinTask:
    """What a Dask worker needs to run one host twin in the fleet (all of it serialisable)."""

    name: str
    fleet: str
    broker: str
    model: bytes
    model_name: str
    data: dict[str, np.ndarray]
    opts: TrainOptions
    log_path: str | None
    timeout: float  # seconds without a message of the fleet before the device gives up
    round_timeout: float
    drills: dict[str, int] = field(default_factory=dict)  # drill -> round
    board: str = "host"  # host: the host twin; mps3-an547: the firmware on the emulated Cortex-M55 (QEMU)


_BUILDS = threading.Semaphore(2)  # builds at once per worker process (make is CPU-bound)


def run_twin(task: TwinTask) -> dict:
    """Build the device (the host twin, or the firmware under QEMU), join the fleet, and report (a
    Dask task)."""
    with tempfile.TemporaryDirectory(prefix=f"zoflash-twin-{task.name}-") as tmp:
        model = Path(tmp) / task.model_name
        model.write_bytes(task.model)
        data = Path(tmp) / "data.npz"
        np.savez(data, **task.data)  # type: ignore[arg-type]  # numpy types keyword arrays loosely
        with _BUILDS:
            if task.board == "host":
                exe = build_twin(model, data, task.opts, Path(tmp) / "bundle")
            else:
                emulated = _emulated_device(model, data, task, Path(tmp) / "fw")
        if "late-join" in task.drills:
            _wait_for_round(task, task.drills["late-join"])
        if task.board == "host":
            mon = twin_monitor(exe, task.log_path, model)
        else:
            mon = Monitor(emulated[1], log_path=task.log_path, model_path=model, reconnect_timeout=30.0)
        link = Link(task.broker, f"zoflash-{task.fleet}-{task.name}", device_topics(task.fleet)).start()
        try:
            mon.connect(30.0)
            res = join(link, FleetDevice(mon), task.fleet, task.name, say=lambda _: None, misbehave=_drills(task, link))
            return {**vars(res), "passes": _passes(mon), "left": None, "board": task.board}
        except DropOut as exc:
            return {"device": task.name, "left": str(exc), "passes": _passes(mon), "board": task.board}
        finally:
            link.close()
            mon.close()
            if task.board != "host":
                from zoflash.targets.runners.qemu import stop_qemu

                stop_qemu(emulated[0], say=lambda _: None)


def _emulated_device(model: Path, data: Path, task: TwinTask, out: Path) -> tuple[Path, str]:
    """The fleet firmware built for the board and started under QEMU: (bundle folder, serial URL)."""
    from zoflash.targets.runners import FlashOptions, flash_bundle
    from zoflash.workflows.generate import build

    built = build(model, task.board, out, data_path=data, options=replace(task.opts, mode="fleet"), say=lambda _: None)
    flashed = flash_bundle(
        built.bundle.path, None, FlashOptions(timeout=task.timeout * 4, tied=True), say=lambda _: None
    )
    if flashed.serial_url is None:
        raise ZoflashError(f"{task.board} is not an emulated board: a fleet simulation runs host twins and QEMU")
    return built.bundle.path, flashed.serial_url


def _passes(mon: Monitor) -> int:
    step = next((r for r in reversed(mon.session.result.records) if r["type"] == "step"), None)
    return int(step["prefix_passes"] + step["suffix_passes"]) if step else 0


def _wait_for_round(task: TwinTask, rnd: int) -> None:
    import json

    link = Link(task.broker, f"zoflash-{task.fleet}-{task.name}-watch", [fw.topic(task.fleet, "round")]).start()
    try:
        end = time.monotonic() + task.timeout
        while time.monotonic() < end:
            msg = link.get(0.5)
            if msg is not None and int(json.loads(msg[1])["round"]) >= rnd:
                return
    finally:
        link.close()


def _drills(task: TwinTask, link: Link):
    def misbehave(what: str, rnd: int, data: bytes) -> bytes | None:
        if task.drills.get("drop") == rnd:
            raise DropOut(f"dropped out in round {rnd} (drill)")
        if task.drills.get("corrupt") == rnd:
            damaged = bytearray(data)
            damaged[len(damaged) // 2] ^= 0x5A
            return bytes(damaged)
        if task.drills.get("duplicate") == rnd:
            link.publish(fw.topic(task.fleet, "up", task.name), data)
        if task.drills.get("late-upload") == rnd:
            time.sleep(task.round_timeout + 2.0)  # past the round's deadline
        return data

    return misbehave


# ---------------------------------------------------------------------------------- the driver


@dataclass
class FleetSimulation:
    devices: int
    rounds: int
    serve: ServeResult
    uplink: float  # bytes per device per round (uploads taken)
    downlink: float  # bytes per device per round (merged rounds)
    accuracy: float | None  # the global weights' test accuracy after the last round
    centralised: float | None  # ordinary ZO on the union of the data, the same total passes
    start: float | None  # no adaptation
    fedavg_bytes: int  # FedAvg of int8 deltas of the same trainable set: bytes per device per round
    passes: int  # the fleet's training passes, all devices
    twins: list[dict]
    out_dir: Path | None
    fleet: str = ""  # its name (the broker's topics)
    plot_path: Path | None = None

    def summary(self) -> str:
        return fleet_summary(self.devices, self.serve, self.centralised, self.start)[0]


def parse_drills(items: list[str] | tuple[str, ...]) -> tuple[dict[str, dict[str, int]], int | None]:
    """--drill WHAT:DEVICE@ROUND (broker-restart@ROUND): per device its drills; the broker's round."""
    per: dict[str, dict[str, int]] = {}
    broker = None
    for item in items:
        m = re.fullmatch(r"(broker-restart)@(\d+)|([a-z-]+):([\w.-]+)@(\d+)", item)
        if m is None or (m.group(3) is not None and m.group(3) not in DRILLS):
            raise ZoflashError(
                f"--drill {item}: give WHAT:DEVICE@ROUND (WHAT one of {', '.join(d for d in DRILLS if d != 'broker-restart')}"
                ") or broker-restart@ROUND"
            )
        if m.group(1):
            broker = int(m.group(2))
        else:
            per.setdefault(m.group(4), {})[m.group(3)] = int(m.group(5))
    return per, broker


def device_names(devices: int) -> list[str]:
    width = len(str(devices - 1))
    return [f"dev-{k:0{width}d}" for k in range(devices)]


def fleet_simulate(
    model_path: str | Path,
    data_path: str | Path,
    opts: TrainOptions,
    devices: int,
    rounds: int,
    steps: int,
    non_iid: str = "dirichlet:0.5",
    merge: str = DEFAULT_MERGE,
    server_lr: float = DEFAULT_SERVER_LR,
    cluster: str | None = None,
    broker: str = "auto",
    out_dir: str | Path | None = None,
    centralised: bool = True,
    drills: tuple[str, ...] = (),
    round_timeout: float = 300.0,
    emulated: int = 0,
    fleet: str | None = None,
    on_update=None,
    say: Say = print,
) -> FleetSimulation:
    """See the module's docstring; `steps`: local steps per device per round; `emulated`: the last
    devices of the fleet run the firmware on the emulated Cortex-M55 (QEMU mps3-an547)."""
    from zoflash.workflows.training import compile_for_training

    if devices < 1 or rounds < 1 or steps < 1:
        raise ZoflashError("--devices, --rounds and --steps-per-round must be at least 1")
    if not 0 <= emulated <= devices:
        raise ZoflashError(f"--emulated {emulated}: at most --devices ({devices}) of the devices can run under QEMU")
    per_device, broker_round = parse_drills(drills)
    names = device_names(devices)
    unknown = sorted(set(per_device) - set(names))
    if unknown:
        raise ZoflashError(f"--drill names {', '.join(unknown)}: the devices are {names[0]}..{names[-1]}")
    model_path, data_path = Path(model_path), Path(data_path)
    fleet = fleet or f"sim-{int(time.time())}"
    out = Path(out_dir) if out_dir else None
    prep = compile_for_training(model_path, data_path, opts, say=say)
    resolved = prep.training.options  # headroom and density as the data resolved them: every device alike
    with np.load(data_path) as npz:  # read as the compile above checked it
        data = {k: npz[k] for k in npz.files}
    labels = data["y_train"] if data["y_train"].ndim == 1 else np.zeros(len(data["x_train"]), np.int64)
    shards = split(labels, devices, non_iid, resolved.seed)
    raw = model_path.read_bytes()
    agg = Aggregator(prep.training.plan, resolved, bytes.fromhex(prep.sha256[:16]), merge, server_lr)
    say(
        f"fleet   {devices} devices ({non_iid}: {min(map(len, shards))}..{max(map(len, shards))} samples each), "
        f"{rounds} rounds of {steps} steps, merge {merge}"
    )
    own_broker: Broker | None = start_broker() if broker == "auto" else None
    url = own_broker.url if own_broker else broker
    client, cluster_obj = _dask(cluster, devices)
    log = FleetLog(out / "fleet.jsonl" if out else None)
    try:
        tasks = [
            TwinTask(
                name,
                fleet,
                url,
                raw,
                model_path.name,
                {k: (v[idx] if k in ("x_train", "y_train") else v) for k, v in data.items()},
                resolved,  # the build makes it --mode fleet
                str(out / "devices" / f"{name}.jsonl") if out else None,
                round_timeout * 4,
                round_timeout,
                per_device.get(name, {}),
                "mps3-an547" if k >= devices - emulated else "host",
            )
            for k, (name, idx) in enumerate(zip(names, shards))
        ]
        if out:
            (out / "devices").mkdir(parents=True, exist_ok=True)
        futures = client.map(run_twin, tasks, pure=False)
        link = Link(url, f"zoflash-{fleet}-aggregator", [fw.topic(fleet, "up", "+"), fw.topic(fleet, "status", "+")])
        link.start()
        late = sum(1 for d in per_device.values() if "late-join" in d)
        restarter = _broker_restarter(own_broker, link, fleet, broker_round, say) if broker_round is not None else None
        try:
            result = serve(
                link,
                agg,
                fleet,
                rounds,
                steps,
                resolved.seed,
                expect=devices - late,
                round_timeout=round_timeout,
                on_update=on_update,
                log=log,
                say=say,
            )
        finally:
            link.close()
            if restarter is not None:
                restarter.join(5)
        twins = []
        for f in futures:
            try:
                twins.append(f.result(timeout=round_timeout))
            except Exception as exc:  # noqa: BLE001 - a device's failure is reported, the fleet's result stands
                twins.append({"device": "?", "left": f"failed: {exc}", "passes": 0})
    finally:
        log.close()
        client.close()
        if cluster_obj is not None:
            cluster_obj.close()
        if own_broker is not None:
            own_broker.close()
    _, uplink, downlink = fleet_summary(devices, result)
    total_passes = sum(int(t.get("passes") or 0) for t in twins)
    central = None
    if centralised and total_passes:
        central = _centralised(model_path, data_path, resolved, total_passes, say)
    plan = prep.training.plan
    fedavg = sum(int(t.count) for t in plan.tensors) + 4 * len(plan.tensors)  # int8 deltas, a scale per tensor
    sim = FleetSimulation(
        devices,
        rounds,
        result,
        uplink,
        downlink,
        result.accuracy[-1] if result.accuracy else None,
        central,
        result.accuracy[0] if result.accuracy else None,
        fedavg,
        total_passes,
        twins,
        out,
        fleet,
    )
    if out is not None:
        per_round = [float(np.mean(list(r.values()))) if r else 0.0 for r in result.uplink]
        sim.plot_path = plot_fleet(
            result.accuracy, per_round, out / "fleet.png", f"{devices} devices, {non_iid}, merge {merge}", central
        )
    return sim


def _dask(cluster: str | None, devices: int):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ZoflashError(
            "zoflash fleet simulate runs its devices on Dask: pip install 'dask[distributed]' (make setup does)"
        ) from None
    if cluster:
        try:
            return Client(cluster, timeout=30), None
        except OSError as exc:
            raise ZoflashError(f"--cluster {cluster}: no Dask scheduler answers there ({exc})") from None
    import logging

    for name in ("distributed", "dask"):  # the cluster's own chatter: not the user's business
        logging.getLogger(name).setLevel(logging.ERROR)
    workers = min(2, devices)
    local = LocalCluster(
        n_workers=workers,
        threads_per_worker=math.ceil(devices / workers),
        processes=True,
        dashboard_address=None,
        silence_logs=50,
    )
    return Client(local), local


def _broker_restarter(broker: Broker | None, link: Link, fleet: str, rnd: int, say: Say) -> threading.Thread:
    """A drill: restart the broker once the fleet is in round `rnd` (its uploads on the way)."""
    if broker is None:
        raise ZoflashError("--drill broker-restart needs --broker auto (the broker this command starts)")

    def run() -> None:
        import json

        watch = Link(broker.url, f"zoflash-{fleet}-drill", [fw.topic(fleet, "round")]).start()
        try:
            while True:
                msg = watch.get(0.5)
                if msg is not None and int(json.loads(msg[1])["round"]) >= rnd:
                    break
        finally:
            watch.close()
        time.sleep(0.5)
        say(f"fleet   drill: the broker restarts in round {rnd}")
        broker.restart()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _centralised(model_path: Path, data_path: Path, opts: TrainOptions, passes: int, say: Say) -> float | None:
    """Ordinary ZO training on the union of the data, the fleet's total training passes."""
    from zoflash.workflows.simulate import simulate

    say(f"fleet   centralised ZO on all the data, {passes} passes")
    res = simulate(model_path, data_path, replace(opts, budget=passes, steps=None), plot=False, say=lambda _: None)
    evals = [r for r in res.records if r["type"] == "eval"]
    return float(evals[-1]["accuracy"]) if evals else None
