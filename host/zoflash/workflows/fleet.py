"""`zoflash fleet`: boards learn together through an MQTT broker, sending a few hundred bytes per
round (docs/guides/fleet.md).

A round: the aggregator announces it (round number, local steps, the global weights' CRC); every
device trains its local steps from the global weights, with directions of its own seed, and
uploads its effective update log (spec/fleet.py Upload); the aggregator merges the uploads that
came by the deadline (sequential replay: each device's updates in turn, coefficients scaled by the
merge rate), applies the merged log to its own replica of the trainable tensors with the
reference's update maths, and publishes it (MergedRound, retained).  Every device applies the same
log with its own update maths and reports the CRC of its tensors: the replicas stay bit-identical.
A device that joins late, or comes back, replays the merged rounds it missed (kept retained by the
broker) before it trains."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.errors import ZoflashError
from zoflash.monitor.fleet_view import DeviceRow
from zoflash.monitor.mqtt import Link
from zoflash.monitor.serial_monitor import DeviceError, Monitor
from zoflash.spec import fleet as fw
from zoflash.spec import wire
from zoflash.training.options import TrainOptions
from zoflash.workflows.push import FRAME_BYTES, pack_entries
from zoflash.workflows.replay import apply_update, scaled_entry, tensors_crc

Say = Callable[[str], None]
MERGE_RULES = ("mean", "sum")  # the merge rate: 1 / the devices that reported, or 1 (times the server lr)
# The defaults measured closest to centralised ZO (research/2026-12-05-fleet-merge-rule.md)
DEFAULT_MERGE, DEFAULT_SERVER_LR, DEFAULT_ROUND_STEPS = "mean", 1.0, 10
MERGE_TAIL = wire.PUSH_WINDOW - FRAME_BYTES - wire.COMMAND_STRUCTS["merge"].size  # entry bytes per merge chunk
ROUND_COMMAND_TIMEOUT = 120.0  # seconds for a round's ack: the device evaluates the global weights first
STEP_TIMEOUT = 30.0  # seconds without a new update-log frame before a training device counts as gone


ENDED = ("done", "failed", "diverged")  # device states after which it says no more


class FleetError(ZoflashError):
    """The fleet cannot go on (a replica diverged, a device of another model, no devices)."""


def device_seed(fleet_seed: int, device: str, rnd: int) -> int:
    """The directions' seed of `device`'s round `rnd`: distinct per device and round, so no two
    devices' updates share a direction."""
    return zlib.crc32(f"{device}/{rnd}".encode(), fleet_seed & 0xFFFFFFFF)


def effective_entries(entries: list[wire.UpdateEntry]) -> tuple[int, list[wire.UpdateEntry]]:
    """(first step, entries) of a round's log that are in the device's weights at its end: those
    after its last rollback (a fleet device's snapshot is the round's global weights), without
    the non-applied steps at either end (calibration), marks cleared."""
    last = max((k for k, e in enumerate(entries) if e.flags & wire.UPDATE_RESTORE), default=-1)
    kept = [e._replace(flags=e.flags & wire.UPDATE_APPLIED) for e in entries[last + 1 :]]
    applied = [k for k, e in enumerate(kept) if e.flags]
    if not applied:
        return (entries[-1].step + 1 if entries else 0), []
    kept = kept[applied[0] : applied[-1] + 1]
    return kept[0].step, kept


# ---------------------------------------------------------------------------------- aggregator


@dataclass
class Taken:
    """What the aggregator made of an upload."""

    accepted: bool
    device: str
    note: str  # "" when accepted plainly


@dataclass
class Aggregator:
    """The global weights (the reference's replica) and the round being collected."""

    plan: object  # training.plan.TrainPlan: the trainable tensors and their start values
    opts: TrainOptions
    model_prefix: bytes
    merge: str = DEFAULT_MERGE
    server_lr: float = (
        DEFAULT_SERVER_LR  # the merge rate's factor: the merged round moves this many times the rule's step
    )
    round: int = 0
    history: list[fw.MergedRound] = field(default_factory=list)
    pending: dict[str, fw.Upload] = field(default_factory=dict)

    def __post_init__(self):
        if self.merge not in MERGE_RULES:
            raise ZoflashError(f"--merge {self.merge}: choose one of {', '.join(MERGE_RULES)}")
        if not 0.0 < self.server_lr <= 1024.0:
            raise ZoflashError(f"--server-lr {self.server_lr:g}: must be in (0, 1024]")
        self.values = [t.values.copy() for t in self.plan.tensors]
        self.residual = [None if t.is_bias else np.zeros(t.count, np.int8) for t in self.plan.tensors]
        self.crc = tensors_crc(self.plan, self.values)
        self.base_crc = self.crc

    def take(self, data: bytes) -> Taken:
        """Check an upload and keep it for the round; nothing wrong is ever kept."""
        try:
            up = fw.Upload.decode(data)
        except fw.FleetMessageError as exc:
            return Taken(False, "?", f"a corrupted upload rejected: {exc}")
        if up.model_prefix != self.model_prefix:
            return Taken(False, up.device, f"an upload of another model ({up.model_prefix.hex()}...) rejected")
        if up.round != self.round:
            when = "late" if up.round < self.round else "early"
            return Taken(False, up.device, f"a {when} upload for round {up.round} ignored (round {self.round} open)")
        if up.base_crc != self.crc:
            return Taken(
                False,
                up.device,
                f"an upload trained from other weights (crc {up.base_crc:#010x}, global {self.crc:#010x}) rejected",
            )
        if up.device in self.pending:
            same = self.pending[up.device] == up
            return Taken(
                False, up.device, "a duplicate upload ignored" if same else "a second, different upload ignored"
            )
        self.pending[up.device] = up
        return Taken(True, up.device, "")

    def close_round(self) -> fw.MergedRound:
        """Merge the uploads taken (in device order), apply them to the global weights, and start
        the next round."""
        uploads = [self.pending[d] for d in sorted(self.pending)]
        rate = self.server_lr * (1.0 if self.merge == "sum" or not uploads else 1.0 / len(uploads))
        sections = []
        for up in uploads:
            entries = tuple(scaled_entry(e, rate) for e in up.entries)
            sections.append(fw.Section(up.device, up.seed, up.first, entries))
            for e in entries:
                if e.flags & wire.UPDATE_APPLIED:
                    apply_update(self.plan, self.opts, self.values, self.residual, up.seed, e)
        crc = tensors_crc(self.plan, self.values)
        merged = fw.MergedRound(self.round, self.model_prefix, self.crc, crc, rate, tuple(sections))
        self.history.append(merged)
        self.round += 1
        self.crc = crc
        self.pending = {}
        return merged


# ---------------------------------------------------------------------------------- a device


@dataclass
class RoundLog:
    first: int
    entries: list[wire.UpdateEntry]
    base_crc: int  # the weights the round trained from, as the device reported them
    accuracy: float | None  # the global weights' test accuracy on the device, at the round's start


class FleetDevice:
    """A device of the fleet behind a Monitor: a board's serial port, QEMU, or the host twin (the
    training program built for the host).  Its firmware is built with --mode fleet."""

    def __init__(self, mon: Monitor):
        self.mon = mon
        self._seen = 0  # records of the session looked at

    @property
    def records(self) -> list[dict]:
        return self.mon.session.result.records

    def ready(self, timeout: float = 30.0) -> str:
        """The model the device runs (16 hex digits of its SHA-256): from its hello, or from a status
        request when it said hello before the host listened (a board that booted earlier)."""
        end = time.monotonic() + timeout
        asked = time.monotonic() + 3.0
        while self.mon.model_prefix is None:
            if time.monotonic() > end or self.mon.stopped:
                raise DeviceError(
                    f"no answer from {self.mon.port_name} within {timeout:g} s"
                    + (f" ({self.mon.stopped})" if self.mon.stopped else "")
                    + ": is a training firmware built with --mode fleet running there?"
                )
            if time.monotonic() > asked:
                asked = end
                self.mon.status()
            self.mon.pump(end)
        return self.mon.model_prefix

    def last(self, kind: str) -> dict | None:
        return next((r for r in reversed(self.records) if r["type"] == kind), None)

    def _request(self, command: str, payload: bytes, timeout: float) -> dict:
        ack = self.mon.request(command, timeout=timeout, attempts=3, payload=payload)
        if ack["result"] == "refused":
            raise DeviceError(f"the device refused '{command}': {self.mon.last_log or 'no reason given'}")
        if ack["result"] == "unknown":
            raise DeviceError(
                f"the device does not know the '{command}' command: flash it with a firmware of this zoflash "
                "built with --mode fleet"
            )
        return ack

    def train_round(self, rnd: int, seed: int, steps: int, step_timeout: float = STEP_TIMEOUT) -> RoundLog:
        """Train `steps` local steps from the global weights; their update-log entries."""
        start = len(self.records)
        payload = wire.COMMAND_STRUCTS["round"].pack(rnd, seed, steps)
        self.mon.last_crc = None
        first = int(self._request("round", payload, ROUND_COMMAND_TIMEOUT)["step"])
        base = self.mon.last_crc
        if base is None or not base["pushed"] & wire.ROUND_CRC:
            raise DeviceError("the device started the round without reporting its weights' CRC")
        ev = next((r for r in self.records[start:] if r["type"] == "eval"), None)
        entries: dict[int, wire.UpdateEntry] = {}
        k, last_progress, end = start, time.monotonic(), first + steps
        while len(entries) < end - first:
            if self.mon.done is not None:
                raise DeviceError(f"the device ended its run ({self.mon.done['reason']}) in round {rnd}")
            if self.mon.stopped:
                raise DeviceError(f"the device stopped in round {rnd}: {self.mon.stopped}")
            if time.monotonic() - last_progress > step_timeout:
                raise DeviceError(f"no update log from the device for {step_timeout:g} s in round {rnd}")
            self.mon.pump(time.monotonic() + step_timeout)
            for rec in self.records[k:]:
                if rec["type"] == "updates" and rec["steps"]:
                    for e in wire.parse_updates(int(rec["step"]), int(rec["steps"]), bytes.fromhex(rec["entries"])):
                        if first <= e.step < end:
                            entries[e.step] = e
                    last_progress = time.monotonic()
                elif rec["type"] == "event" and rec["kind"] == "round":
                    end = first + int(rec["aux"])  # cut short: guard_max_rollbacks rollbacks
            k = len(self.records)
        return RoundLog(
            first, [entries[s] for s in range(first, end)], int(base["crc32"]), float(ev["accuracy"]) if ev else None
        )

    def merge(self, merged: fw.MergedRound, timeout: float = 30.0) -> int:
        """Apply a merged round; the device's CRC after it."""
        chunks = [
            (s.seed, first, steps, data)
            for s in merged.sections
            for first, steps, data in pack_entries(list(s.entries), MERGE_TAIL)
        ] or [(0, 0, 0, b"")]
        for k, (seed, first, steps, data) in enumerate(chunks):
            last = k == len(chunks) - 1
            head = wire.COMMAND_STRUCTS["merge"].pack(merged.round, seed, first, steps, k, 1 if last else 0)
            if last:
                self.mon.last_crc = None
            self._request("merge", head + data, timeout)
        got = self.mon.last_crc
        if got is None or not got["pushed"] & wire.MERGED_CRC:
            raise DeviceError("the device took the merge without reporting its weights' CRC")
        return int(got["crc32"])

    def stop(self) -> float | None:
        """End the run: the device evaluates the global weights and sends them with its done
        record; their test accuracy."""
        start = len(self.records)
        if self.mon.done is None and not self.mon.stopped:
            self.mon.stop(wait=True, timeout=120.0)
        ev = next((r for r in self.records[start:] if r["type"] == "eval"), None)
        return float(ev["accuracy"]) if ev else None


# ---------------------------------------------------------------------------------- the gateway


@dataclass
class JoinResult:
    device: str
    rounds_trained: int = 0
    rounds_merged: int = 0
    up_bytes: int = 0  # uploads, over all rounds
    down_bytes: int = 0  # merged rounds received
    crc: int | None = None  # after the last merge
    accuracy: float | None = None  # the final global weights' test accuracy, as the device measured it
    notes: list[str] = field(default_factory=list)


def join(
    link: Link,
    device: FleetDevice,
    fleet: str,
    name: str,
    say: Say = print,
    timeout: float = 600.0,
    misbehave: Callable[[str, int, bytes], bytes | None] | None = None,
) -> JoinResult:
    """Be `name` in the fleet until it ends: catch up on merged rounds, train every announced
    round, upload, apply every merged round and report its CRC.  `timeout`: seconds without any
    message of the fleet before giving up.  `misbehave(what, round, upload)` (fault drills):
    returns the bytes to send instead of an upload (None: send nothing)."""
    return Gateway(link, device, fleet, name, say, timeout, misbehave).run()


class Gateway:
    """A device's side of the fleet (see join)."""

    def __init__(self, link: Link, device: FleetDevice, fleet: str, name: str, say: Say, timeout: float, misbehave):
        self.link, self.device, self.fleet, self.name = link, device, fleet, name
        self.say, self.timeout, self.misbehave = say, timeout, misbehave
        self.out = JoinResult(name)
        self.prefix = b""
        self.history: dict[int, fw.MergedRound] = {}
        self.announced: dict | None = None
        self.ended: dict | None = None
        self.merged = 0  # rounds applied
        self.trained = -1  # the last round trained

    def status(self, state: str, **extra) -> None:
        step = self.device.last("step")
        row = {
            "device": self.name,
            "round": self.merged,
            "step": int(step["step"]) + 1 if step else 0,
            "q": int(step["q"]) if step else 0,
            "loss": float(step["loss"]) if step else None,
            "up": self.out.up_bytes,
            "down": self.out.down_bytes,
            "state": state,
            **extra,
        }
        self.link.publish(fw.topic(self.fleet, "status", self.name), json.dumps(row))

    def run(self) -> JoinResult:
        self.prefix = bytes.fromhex(self.device.ready())[:8]
        self.segments = self.device.mon.segments
        self.status("joined")
        try:
            return self._take_part()
        except (DeviceError, FleetError) as exc:
            self.status("failed", reason=str(exc))
            raise

    def _receive(self, msg: tuple[str, bytes, bool]) -> None:
        topic, payload, _ = msg
        kind = topic.split("/")[3]
        try:
            if kind == "round":
                self.announced = json.loads(payload)
            elif kind == "end":
                self.ended = json.loads(payload)
            elif kind == "merged":
                m = fw.MergedRound.decode(payload)
                self._check_model(m.model_prefix.hex())
                if m.round not in self.history:  # a broker restart sends the retained rounds again
                    self.out.down_bytes += len(payload)
                self.history[m.round] = m
        except (ValueError, fw.FleetMessageError) as exc:
            self.out.notes.append(f"a damaged fleet message on {topic} ignored ({exc})")
            self.say(f"{self.name}: {self.out.notes[-1]}")

    def _check_model(self, prefix: str | None) -> None:
        if prefix != self.prefix.hex():
            raise FleetError(
                f"the fleet '{self.fleet}' trains the model {prefix}..., this device {self.prefix.hex()}...: "
                "join a fleet of the model it runs"
            )

    def _catch_up(self) -> None:
        """Apply the merged rounds this device has not (late, back, or the round just merged)."""
        while self.merged in self.history:
            m = self.history[self.merged]
            self.status("merging")
            crc = self.device.merge(m)
            if crc != m.crc:
                self.status("diverged", crc=crc, merged=m.round)
                raise FleetError(
                    f"{self.name}: after round {m.round} the device's weights have crc {crc:#010x}, the fleet's "
                    f"{m.crc:#010x}: its firmware applies updates otherwise; rebuild it with this zoflash"
                )
            self.merged += 1
            self.out.rounds_merged = self.merged
            self.out.crc = crc
            self.status("merged", crc=crc, merged=m.round)

    def _train(self, announced: dict) -> None:
        self._check_model(announced.get("model"))
        rnd, steps = self.merged, int(announced["steps"])
        seed = device_seed(int(announced["seed"]), self.name, rnd)
        self.status("training")
        log = self.device.train_round(rnd, seed, steps)
        first, eff = effective_entries(log.entries)
        data: bytes | None = fw.Upload(self.name, rnd, self.prefix, log.base_crc, seed, first, tuple(eff)).encode()
        if self.misbehave is not None:
            data = self.misbehave("upload", rnd, data)
        if data is not None:
            self.out.up_bytes += self.link.publish(fw.topic(self.fleet, "up", self.name), data)
        self.trained = rnd
        self.out.rounds_trained += 1
        self.status("uploaded", last_up=len(data or b""), accuracy=log.accuracy, of_round=rnd)

    def _take_part(self) -> JoinResult:
        last_heard = time.monotonic()
        while True:
            msg = self.link.get(0.2)
            if msg is not None:
                last_heard = time.monotonic()
                self._receive(msg)
            elif time.monotonic() - last_heard > self.timeout:
                raise FleetError(
                    f"nothing from the fleet '{self.fleet}' for {self.timeout:g} s: is its aggregator running?"
                )
            if self.device.mon.segments != self.segments:  # the device restarted: back to its built-in weights
                self.segments = self.device.mon.segments
                self.say(f"{self.name}: the device restarted; replaying the fleet's {self.merged} merged rounds")
                self.merged, self.trained, self.out.crc = 0, -1, None
            self._catch_up()
            if self.ended is not None and self.merged >= int(self.ended["rounds"]):
                self.out.accuracy = self.device.stop()
                self.status("done", crc=self.out.crc, accuracy=self.out.accuracy, of_round=self.merged)
                return self.out
            a = self.announced
            if a is not None and int(a["round"]) == self.merged and self.trained < self.merged:
                self._train(a)


# ---------------------------------------------------------------------------------- the aggregator loop


@dataclass
class ServeResult:
    rounds: int
    devices: dict[str, DeviceRow]
    uplink: list[dict[str, int]]  # per round: device -> upload bytes taken
    downlink: list[int]  # per round: bytes of the merged round
    identical: bool  # every CRC the devices reported equals the global weights'
    checks: int  # CRC reports compared
    crc: int
    # the global weights' test accuracy before round r (r = rounds: after the last), as the devices measured it
    accuracy: list[float | None]
    events: list[dict]
    log_path: Path | None


class FleetLog:
    """The aggregator's JSONL log: rounds, events, the devices' status rows."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._f = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("a")

    def write(self, rec: dict) -> None:
        if self._f is not None:
            self._f.write(json.dumps({"time": round(time.time(), 3), **rec}, sort_keys=True) + "\n")
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def serve(
    link: Link,
    agg: Aggregator,
    fleet: str,
    rounds: int,
    steps: int,
    seed: int,
    expect: int = 1,
    round_timeout: float = 300.0,
    join_timeout: float = 300.0,
    on_update: Callable[[dict[str, DeviceRow], dict], None] | None = None,
    log: FleetLog | None = None,
    say: Say = print,
) -> ServeResult:
    """Run the fleet's `rounds` rounds of `steps` local steps.  A round closes when every live
    device uploaded, or at `round_timeout`; it merges the uploads that came.  Waits for `expect`
    devices (up to `join_timeout` seconds) before round 0.  `on_update(rows, info)`: the farm view."""
    log = log or FleetLog(None)
    rows: dict[str, DeviceRow] = {}
    uplink: list[dict[str, int]] = []
    downlink: list[int] = []
    events: list[dict] = []
    checks, mismatches = 0, []
    acc_by_round: dict[int, list[float]] = {}  # the global weights of round r (before its training)
    info = {"fleet": fleet, "round": 0, "rounds": rounds, "crc": agg.crc}

    def event(what: str, **fields) -> None:
        rec = {"type": "event", "what": what, "round": agg.round, **fields}
        events.append(rec)
        log.write(rec)
        say(f"fleet   round {agg.round}: {what}" + (f" ({fields['device']})" if "device" in fields else ""))

    def handle(msg: tuple[str, bytes, bool]) -> None:
        nonlocal checks
        topic, payload, _ = msg
        parts = topic.split("/")
        if len(parts) < 5:
            return
        kind, dev = parts[3], "/".join(parts[4:])
        if kind == "status":
            try:
                row = json.loads(payload)
            except ValueError:
                event("a damaged status message ignored", device=dev)
                return
            r = rows.setdefault(dev, DeviceRow(dev))
            for k in ("round", "step", "q", "loss", "accuracy", "up", "down", "state"):
                if k in row:
                    setattr(r, k, row[k])
            r.seen = time.monotonic()
            r.missed = 0  # it speaks: waited for again
            log.write({"type": "status", **row})
            if row.get("state") == "failed":
                event(f"the device's gateway stopped: {row.get('reason', 'no reason given')}", device=dev)
            if "merged" in row and "crc" in row:
                m = int(row["merged"])
                if m < len(agg.history):
                    checks += 1
                    if int(row["crc"]) != agg.history[m].crc:
                        mismatches.append((dev, m))
                        event(f"replica diverged after round {m}", device=dev, crc=int(row["crc"]))
            if row.get("accuracy") is not None and "of_round" in row:
                acc_by_round.setdefault(int(row["of_round"]), []).append(float(row["accuracy"]))
        elif kind == "up":
            taken = agg.take(payload)
            if taken.accepted:
                uplink_now[taken.device] = len(payload)
                rows.setdefault(taken.device, DeviceRow(taken.device)).seen = time.monotonic()
                log.write({"type": "upload", "round": agg.round, "device": taken.device, "bytes": len(payload)})
            else:
                event(taken.note, device=taken.device if taken.device != "?" else dev)
        if on_update is not None:
            on_update(rows, info)

    uplink_now: dict[str, int] = {}
    end = time.monotonic() + join_timeout
    while len(rows) < expect and time.monotonic() < end:
        msg = link.get(0.2)
        if msg is not None:
            handle(msg)
    if not rows:
        raise FleetError(f"no device joined the fleet '{fleet}' within {join_timeout:g} s")
    if len(rows) < expect:
        event(f"{len(rows)} of {expect} devices joined; starting with them")
    for rnd in range(rounds):
        info.update(round=rnd, crc=agg.crc)
        uplink_now = {}
        announcement = {"round": rnd, "steps": steps, "crc": agg.crc, "model": agg.model_prefix.hex(), "seed": seed}
        link.publish(fw.topic(fleet, "round"), json.dumps(announcement), retain=True)
        log.write({"type": "announce", **announcement})
        deadline = time.monotonic() + round_timeout
        while time.monotonic() < deadline:
            live = [d for d, r in rows.items() if r.missed == 0 and r.state not in ENDED]
            if live and all(d in agg.pending for d in live):
                break
            msg = link.get(0.2)
            if msg is not None:
                handle(msg)
        for d, r in rows.items():
            if d not in agg.pending and r.state not in ENDED:
                r.missed += 1
                event("no upload by the deadline: the round goes on without it", device=d)
        merged = agg.close_round()
        size = link.publish(fw.topic(fleet, "merged", str(rnd)), merged.encode(), retain=True)
        uplink.append(uplink_now)
        downlink.append(size)
        log.write(
            {
                "type": "round",
                "round": rnd,
                "devices": sorted(uplink_now),
                "uplink": uplink_now,
                "downlink": size,
                "crc": merged.crc,
                "rate": merged.rate,
                "updates": sum(1 for s in merged.sections for e in s.entries if e.flags),
            }
        )
        if on_update is not None:
            on_update(rows, info)
    info.update(round=rounds, crc=agg.crc)
    link.publish(fw.topic(fleet, "end"), json.dumps({"rounds": rounds, "crc": agg.crc}), retain=True)
    # the devices apply the last round and stop: their final reports (CRC, accuracy)
    end = time.monotonic() + round_timeout
    while time.monotonic() < end:
        waiting = [d for d, r in rows.items() if r.state not in ENDED]  # a late device too: its last word
        if not waiting:
            break
        msg = link.get(0.2)
        if msg is not None:
            handle(msg)
    accuracy = [float(np.median(acc_by_round[r])) if r in acc_by_round else None for r in range(rounds + 1)]
    log.write({"type": "end", "rounds": rounds, "crc": agg.crc, "checks": checks, "mismatches": len(mismatches)})
    return ServeResult(
        rounds,
        rows,
        uplink,
        downlink,
        not mismatches and checks > 0,
        checks,
        agg.crc,
        accuracy,
        events,
        log.path,
    )


# ---------------------------------------------------------------------------------- commands


def fleet_summary(
    devices: int, res: ServeResult, centralised: float | None = None, start: float | None = None
) -> tuple[str, float, float]:
    """The closing line of `fleet serve` and `fleet simulate`; with the mean uplink and downlink."""
    taken = [b for r in res.uplink for b in r.values()]
    up = float(np.mean(taken)) if taken else 0.0
    down = float(np.mean(res.downlink)) if res.downlink else 0.0
    acc = res.accuracy[-1] if res.accuracy else None

    def pct(a: float | None) -> str:
        return "n/a" if a is None else f"{100 * a:.1f}%"

    text = (
        f"fleet: devices {devices}, rounds {res.rounds}, uplink {up:.0f} bytes/device/round, downlink {down:.0f} "
        f"bytes/device/round, replicas identical {'yes' if res.identical else 'no'}, accuracy {pct(acc)}"
    )
    if centralised is not None or start is not None:
        text += f" (centralised {pct(centralised)}, no adaptation {pct(start)})"
    return text, up, down


def aggregator_for(
    model_path: str | Path, opts: TrainOptions, merge: str = DEFAULT_MERGE, server_lr: float = DEFAULT_SERVER_LR
) -> Aggregator:
    """The aggregator of a fleet of `model_path` built with `opts` (their --headroom a number of bits:
    the replicas must start from the same re-quantized weights)."""
    from dataclasses import replace

    from zoflash.compiler.tflite_import import load_tflite, model_sha256
    from zoflash.spec.options import auto_density
    from zoflash.training.pipeline import trainable_start

    if opts.headroom == "auto":
        raise ZoflashError(
            "the aggregator needs the devices' --headroom in bits (auto is measured on their data): give the "
            "fleet firmware's bundle with --bundle, or --headroom N as its build reports"
        )
    graph, raw = load_tflite(model_path)
    plan, _ = trainable_start(graph, opts)
    if opts.density is None:
        opts = replace(opts, density=auto_density(plan.params))
    return Aggregator(plan, opts, bytes.fromhex(model_sha256(raw)[:16]), merge, server_lr)


def device_topics(fleet: str) -> list[str]:
    """What a device subscribes to."""
    return [fw.topic(fleet, "round"), fw.topic(fleet, "merged", "+"), fw.topic(fleet, "end")]


def aggregator_topics(fleet: str) -> list[str]:
    return [fw.topic(fleet, "up", "+"), fw.topic(fleet, "status", "+")]


def build_twin(model_path: str | Path, data_path: str | Path, opts: TrainOptions, bundle_dir: str | Path) -> Path:
    """The host twin of a fleet device: the training firmware (--mode fleet) built for this host;
    its program."""
    from dataclasses import replace

    from zoflash.targets.host_build import run_make
    from zoflash.workflows.training import compile_for_training, training_bundle

    prep = compile_for_training(model_path, data_path, replace(opts, mode="fleet"), say=lambda _: None)
    bundle = training_bundle(prep, "host", bundle_dir)
    run_make(bundle, f"build/{bundle.prefix}_train")
    return bundle.path / "build" / f"{bundle.prefix}_train"


def twin_monitor(exe: Path, log_path: str | Path | None, model_path: str | Path) -> Monitor:
    """The monitor of a host twin: its program as the port (it ends for good with the program)."""
    from zoflash.monitor.serialport import ProgramPort

    return Monitor(
        opener=lambda: ProgramPort([str(exe)]), log_path=log_path, model_path=model_path, reconnect_timeout=0.0
    )


def serve_fleet(
    model_path: str | Path,
    opts: TrainOptions,
    devices: int,
    rounds: int,
    steps: int,
    broker: str = "auto",
    fleet: str = "default",
    merge: str = DEFAULT_MERGE,
    server_lr: float = DEFAULT_SERVER_LR,
    round_timeout: float = 300.0,
    out_dir: str | Path | None = None,
    view=None,
    say: Say = print,
) -> str:
    """`zoflash fleet serve`: the aggregator until the fleet's rounds are done; its closing line."""
    from zoflash.monitor.fleet_view import plot_fleet
    from zoflash.monitor.mqtt import start_broker

    agg = aggregator_for(model_path, opts, merge, server_lr)
    own = start_broker() if broker == "auto" else None
    url = own.url if own else broker
    say(
        f"fleet   '{fleet}' on {url}: waiting for {devices} device(s) (zoflash fleet join --broker {url} --fleet {fleet})"
    )
    out = Path(out_dir) if out_dir else None
    log = FleetLog(out / "fleet.jsonl" if out else None)
    link = Link(url, f"zoflash-{fleet}-aggregator", aggregator_topics(fleet))
    try:
        link.start()
        res = serve(
            link,
            agg,
            fleet,
            rounds,
            steps,
            opts.seed,
            expect=devices,
            round_timeout=round_timeout,
            join_timeout=round_timeout,
            on_update=view.update if view is not None else None,
            log=log,
            say=view.message if view is not None else say,
        )
    finally:
        link.close()
        log.close()
        if own is not None:
            own.close()
    line, _, _ = fleet_summary(len(res.devices), res)
    if out is not None:
        per_round = [float(np.mean(list(r.values()))) if r else 0.0 for r in res.uplink]
        plot_fleet(res.accuracy, per_round, out / "fleet.png", f"fleet {fleet}")
    return line


def join_fleet(
    broker: str,
    fleet: str,
    name: str,
    port: str | None = None,
    baud: int = 115200,
    twin: tuple[str | Path, str | Path, TrainOptions] | None = None,
    log_path: str | Path | None = None,
    say: Say = print,
) -> JoinResult:
    """`zoflash fleet join`: a board on `port`, or the host twin of (model, data, options)."""
    import tempfile

    if twin is not None and twin[2].headroom == "auto":
        raise ZoflashError(
            "--twin: give the fleet's --headroom in bits (auto is measured on each device's own data, and the "
            "replicas must start from the same weights); `zoflash build` of the fleet firmware reports it"
        )
    with tempfile.TemporaryDirectory(prefix="zoflash-twin-") as tmp:
        if twin is not None:
            exe = build_twin(twin[0], twin[1], twin[2], Path(tmp) / "bundle")
            mon = twin_monitor(exe, log_path, twin[0])
        else:
            mon = Monitor(port, baud=baud, log_path=log_path)
        link = Link(broker, f"zoflash-{fleet}-{name}", device_topics(fleet))
        try:
            mon.connect(10.0)
            link.start()
            return join(link, FleetDevice(mon), fleet, name, say=say)
        finally:
            link.close()
            mon.close()
