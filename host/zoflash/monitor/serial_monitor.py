"""`zoflash monitor`: a training run watched over a serial port (or any pyserial URL), and the
command channel to the device (docs/training.md, "Commands").

The bytes go into a Session (JSONL log in the schema of `zoflash simulate`, live view, device
text passed through), plus an optional CSV of step and evaluation records.  The monitor survives
the device resetting (each hello starts a new run segment) and the port disappearing and coming
back (reconnects with backoff for up to `reconnect_timeout` seconds; bytes read before a fault
are never dropped).  It stops when the device reports done (after its weights frames), on Ctrl-C,
and at once when the device reports a fault, the process behind the port has ended (`ended`:
the emulator) or the port stays away; then the log is closed, the weights file written (with
the model given) and the plot drawn.

    mon = Monitor("socket://127.0.0.1:4321", log_path="run.jsonl", model_path="m.tflite")
    mon.connect(); mon.run()           # until done
    result = mon.close()               # records, decoder counters, reconnects, segments, files

    mon.request("pause"); mon.request("status"); mon.save_dump("m.tflite", "now.weights.npz")

Besides the device's records the log holds the monitor's own: {"type": "monitor", "event":
"disconnected" | "reconnected" | "restart" | "command", ...}; session.comparable() skips them.
"""

from __future__ import annotations

import copy
import csv
import io
import signal
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import serial

from zoflash.errors import DataError, ZoflashError
from zoflash.monitor import telemetry
from zoflash.monitor.checkpoint import (
    Checkpoint,
    CheckpointAssembler,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.outputs import LineLog, Rescue, load_raw_weights, raw_weights_path_for, save_raw_weights
from zoflash.monitor.plots import plot_run
from zoflash.monitor.serialport import (
    DEFAULT_BAUD,
    DEFAULT_USB_IDS,
    PortError,
    check_port_name,
    find_port,
    open_port,
    parse_usb_id,
)
from zoflash.monitor.session import Session, SessionResult, assembled_arrays, assembled_best, weights_path_for
from zoflash.spec import wire as protocol


class Port(Protocol):
    """What the monitor uses of a port: pyserial's Serial, serialport.SocketPort or ProgramPort."""

    def read(self, size: int = ...) -> bytes: ...
    def write(self, data: bytes, /) -> int | None: ...
    def close(self) -> None: ...


CSV_COLUMNS = (
    "type",
    "step",
    "q",
    "state",
    "calibrating",
    "centre",
    "diverged",
    "trial",
    "lr",
    "loss",
    "m2",
    "v",
    "zero_frac",
    "sat_frac",
    "accuracy",
    "correct",
    "count",
    "prefix_passes",
    "suffix_passes",
    "eval_passes",
    "time_s",
)
MAX_BACKOFF = 2.0  # seconds between reconnection attempts, at most
RECONNECT_TIMEOUT = 60.0  # seconds a lost port is retried before the monitor gives up
FAULT_PREFIX = "zoflash: fault"  # the fault line of the Cortex-M ports (zo_port_cortex_m.c): the firmware stopped


class PortGone(ZoflashError):
    """The port cannot come back (a program that ended): no reconnection is tried."""


class DeviceError(ZoflashError):
    """The device did not answer a command as it should."""


class CsvSink:
    """Step and evaluation records as CSV rows (columns CSV_COLUMNS; empty where a record has
    no such field), flushed as they come (moved to a rescue folder when its place fails)."""

    def __init__(self, path: str | Path, rescue: Rescue | None = None):
        self.path: Path | None = Path(path)
        self._row = io.StringIO()
        self._writer = csv.DictWriter(self._row, CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
        self._file = LineLog(self.path, rescue if rescue is not None else Rescue(), "csv")
        self._writer.writeheader()
        self._flush_row()

    def _flush_row(self) -> None:
        self._file.write(self._row.getvalue())
        self._row.seek(0)
        self._row.truncate()

    def __call__(self, rec: dict) -> None:
        if rec["type"] in ("step", "eval"):
            self._writer.writerow(rec)
            self._flush_row()

    def close(self) -> None:
        self.path = self._file.close()


@dataclass
class MonitorResult(SessionResult):
    reconnects: int = 0
    segments: int = 0  # hellos seen: 1 per device (re)start
    interrupted: bool = False  # Ctrl-C
    timed_out: bool = False
    log_path: Path | None = None
    csv_path: Path | None = None
    weights_error: str | None = None  # why the weights file could not be written
    found_bundle: Path | None = None  # the bundle whose model the weights file is for, when found, not given
    raw_weights_path: Path | None = None  # the weights as the device sent them, when no weights file could be made
    rescued: str | None = None  # what could not be written where asked, and where it went (one message)
    stopped: str | None = None  # why the monitor stopped before the run was done (fault, emulator ended, port lost)
    faulted: bool = False  # the device reported a fault

    @property
    def last_segment(self) -> list[dict]:
        """The records from the last hello on (the whole log if no hello was seen)."""
        starts = [k for k, r in enumerate(self.records) if r["type"] == "hello"]
        return self.records[starts[-1] :] if starts else self.records


def best_is_start(segment: list[dict]) -> bool:
    """A finished run whose snapshot never moved: its update log marks no snapshot, and it did not
    resume from a checkpoint (whose snapshot the log does not show). Its best values are then the
    ones it started from (`zoflash export` writes the model unchanged)."""
    updates = [r for r in segment if r["type"] == "updates"]
    if not updates or not any(r["type"] == "done" for r in segment) or any(r["steps"] == 0 for r in updates):
        return False
    try:
        return not any(
            e.flags & protocol.UPDATE_SNAPSHOT
            for r in updates
            for e in protocol.parse_updates(int(r["step"]), int(r["steps"]), bytes.fromhex(r["entries"]))
        )
    except (KeyError, ValueError):
        return False  # a damaged record: claim nothing


class _MonitorSession(Session):
    """A Session that lets the monitor see each record first and log notes of its own just
    before it (a device restart before the new hello)."""

    def __init__(self, log_path, view, on_record, before_record: Callable[[dict], list[dict]], rescue, on_nowhere):
        super().__init__(log_path, view, on_record, rescue, on_nowhere)
        self._before = before_record

    def _handle(self, records: Iterable[dict]) -> None:
        for rec in records:
            super()._handle(self._before(rec) + [rec])

    def note(self, rec: dict) -> None:
        super()._handle([rec])


@dataclass
class BoardConsole:
    usb_ids: list[tuple[int, int | None]]
    baud: int
    note: str | None = None  # "stm32n6 -> stm32n6570-dk ..." when a family name was given


def board_console(name: str) -> BoardConsole:
    """The serial side of a board (an id, or a family name for its reference board): the USB
    VID:PID pairs of its console's adapter and its baud rate.  PortError when it has no USB id."""
    from zoflash.targets import boards as boards_mod

    resolve = getattr(boards_mod, "resolve_board", None)
    board, note = resolve(name) if resolve else (boards_mod.load_board(name), None)
    ids = list(getattr(board, "usb_ids", None) or ())
    if not ids:
        raise PortError(f"board '{board.id}' has no USB id for its serial port: give the port with --port")
    baud = int((getattr(board, "console", None) or {}).get("baud", DEFAULT_BAUD))
    return BoardConsole([parse_usb_id(i) for i in ids], baud, note)


class Monitor:
    """Telemetry from a port into a Session, with reconnection and the command channel.

    `port`: a device, a pyserial URL, or "auto" (the one port whose USB VID:PID is in `usb_ids`,
    looked up again at every reconnection since the device name may change).  `opener`, instead
    of `port`: a function returning an open port (raises serial.SerialException, OSError or
    PortError to be retried, PortGone when the port can never come back).  `ended`: called while
    a lost port is retried; a message when what feeds the port has ended for good (the emulator
    exited), which stops the monitor at once.  A lost port is retried for `reconnect_timeout`
    seconds (None: for ever)."""

    def __init__(
        self,
        port: str | None = None,
        *,
        baud: int = DEFAULT_BAUD,
        usb_ids: Iterable | None = None,
        opener: Callable[[], Port] | None = None,
        log_path: str | Path | None = None,
        csv_path: str | Path | None = None,
        plot_path: str | Path | None = None,
        model_path: str | Path | None = None,
        weights_path: str | Path | None = None,
        view: LiveView | None = None,
        max_backoff: float = MAX_BACKOFF,
        headroom: int | None = None,
        reconnect_timeout: float | None = RECONNECT_TIMEOUT,
        ended: Callable[[], str | None] | None = None,
        feeder=None,
        checkpoint_path: str | Path | None = None,
        manifest: dict | None = None,
        rescue: Rescue | None = None,
        bundle_root: str | Path | None = None,
    ):
        """`checkpoint_path`: keep the latest complete, valid checkpoint the device sends there.
        `manifest`: the bundle's (its model and trained tensors): without `model_path` the weights
        file is written from it.  Weights that fit no model are kept raw (<log>.raw-weights.npz).
        `rescue`: where files go when their place cannot take them (monitor/outputs.py).
        `bundle_root`: with neither model nor manifest, the bundles there built from the model the
        device names (its hello) give the weights file their model."""
        self.manifest = manifest
        self.bundle_root = bundle_root
        self.feeder = feeder  # --data-source stream: a monitor.feed.Feeder answering the device's need frames
        # the firmware's --headroom bits (None: as its hello says): weights files record the re-quantized scales
        self.headroom = headroom
        if opener is None:
            if port is None:
                raise ValueError("give a port or an opener")
            if port != "auto":
                check_port_name(port)
            ids = list(usb_ids or DEFAULT_USB_IDS)

            def opener():
                self.device = find_port(ids) if port == "auto" else port
                return open_port(self.device, baud)

        self.port_name = port or "the device"
        self.device = port  # the device name "auto" resolved to, once opened
        self._opener = opener
        self._port: Port | None = None
        self._connected_once = False
        self.max_backoff = max_backoff
        self.reconnect_timeout = reconnect_timeout
        self._ended = ended
        self._lost_at: float | None = None
        self.stopped: str | None = None
        self.faulted = False
        self.reconnects = self.segments = 0
        self.interrupted = self.timed_out = False
        self.done: dict | None = None  # the current run's done record
        self.hello: dict | None = None  # the current run's hello record
        self.last_status: dict | None = None
        self.model_prefix: str | None = None  # 16 hex digits, from hello or status
        self._seq = 0
        self._acks: dict[int, dict] = {}
        self._dump: telemetry.WeightsAssembler | None = None
        self._t0 = time.monotonic()
        self.log_path = Path(log_path) if log_path else None
        self.plot_path = Path(plot_path) if plot_path else None
        self.model_path = Path(model_path) if model_path else None
        self.weights_path = (
            Path(weights_path) if weights_path else (weights_path_for(self.log_path) if self.log_path else None)
        )
        self.rescue = rescue if rescue is not None else Rescue()
        self.view = view
        self.paused_for_space = False
        self._complete_weights: telemetry.WeightsAssembler | None = None  # the latest whole set (done, dump)
        self.csv = CsvSink(csv_path, self.rescue) if csv_path else None
        self.session = _MonitorSession(
            self.log_path, view, self.csv, self._before_record, self.rescue, self._pause_for_space
        )
        self.result: MonitorResult | None = None
        # --- checkpoint and resume
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
        self.checkpoint: Checkpoint | None = None  # the latest complete, valid one
        self._checkpoints = CheckpointAssembler()
        self.last_log: str | None = None  # the device's last log frame (why a restore was refused)
        self.last_crc: dict | None = None  # the device's last crc record (zoflash push)

    # ---------------------------------------------------------------------------- connection

    def connect(self, timeout: float = 5.0) -> None:
        """Open the port now, retrying for up to `timeout` seconds; PortError if it never opens."""
        if self._port is None:
            self._open(time.monotonic() + timeout)

    def _open(self, deadline: float | None) -> None:
        delay = 0.05
        while True:
            try:
                self._port = self._opener()
                break
            except PortGone:
                raise
            except (serial.SerialException, OSError, PortError) as exc:
                why = self._ended() if self._ended is not None and self._connected_once else None
                if why:
                    raise PortGone(why) from None
                if deadline is not None and time.monotonic() + delay > deadline:
                    away = self._reconnect_deadline(None)  # the end of the reconnection time, if a port was lost
                    if away is not None and time.monotonic() + delay > away:
                        raise PortError(
                            f"{self.port_name} did not come back within {self.reconnect_timeout:g} s "
                            f"(--reconnect-timeout): {exc}"
                        ) from None
                    if isinstance(exc, PortError):
                        raise
                    raise PortError(f"cannot open {self.port_name}: {exc}") from None
                time.sleep(delay)
                delay = min(2 * delay, self.max_backoff)
        self._lost_at = None
        if self._connected_once:
            self.reconnects += 1
            self.session.note(self._note("reconnected", reconnects=self.reconnects))
        self._connected_once = True

    def _lost(self, exc: Exception) -> None:
        try:
            if self._port is not None:
                self._port.close()
        except Exception:  # noqa: BLE001 - the port is already broken; closing is best effort
            pass
        self._port = None
        self._lost_at = time.monotonic()
        self.session.note(self._note("disconnected", reason=str(exc)))

    def _reconnect_deadline(self, deadline: float | None) -> float | None:
        """The earlier of `deadline` and the end of the reconnection time of a lost port."""
        if self._lost_at is None or self.reconnect_timeout is None:
            return deadline
        end = self._lost_at + self.reconnect_timeout
        return end if deadline is None else min(deadline, end)

    def _note(self, event: str, **fields) -> dict:
        return {"type": "monitor", "event": event, **fields, "time_s": round(time.monotonic() - self._t0, 6)}

    def pump(self, deadline: float | None = None) -> int:
        """Read what has arrived (waiting up to the port's read timeout) into the session.  A
        lost connection is reopened, retrying until `deadline` (None: for ever; then PortError).
        Returns the number of bytes read."""
        if self._port is None:
            self._open(self._reconnect_deadline(deadline))
        port = self._port
        assert port is not None  # _open opens it or raises
        try:
            size = 65536 if getattr(port, "returns_early", False) else max(getattr(port, "in_waiting", 0), 1)
            data = port.read(size)
        except (serial.SerialException, OSError) as exc:
            self._lost(exc)
            return 0
        if data:
            self.session.feed(data)
        return len(data)

    def run(
        self, until_done: bool = True, timeout: float | None = None, on_tick: Callable[[Monitor], None] | None = None
    ) -> Monitor:
        """Pump until the device reports done (`until_done`), `timeout` seconds pass, Ctrl-C
        (flagged `interrupted`, not raised), or the run cannot go on: a fault reported by the
        device, the emulator ended, the port lost for longer than `reconnect_timeout` (`stopped`
        says which).  `on_tick(monitor)` runs between reads (it may send commands: KeyCommands)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not (until_done and self.done is not None) and self.stopped is None:
                if deadline is not None and time.monotonic() >= deadline:
                    self.timed_out = True
                    break
                if on_tick is not None:
                    on_tick(self)
                try:
                    self.pump(deadline)
                except (PortError, PortGone) as exc:
                    if deadline is not None and time.monotonic() >= deadline:
                        self.timed_out = True
                        break
                    self.stopped = str(exc)
        except KeyboardInterrupt:
            self.interrupted = True
        return self

    # ---------------------------------------------------------------------------- records

    def _before_record(self, rec: dict) -> list[dict]:
        """Bookkeeping on every record before it is logged; returns notes to log before it."""
        kind, notes = rec["type"], []
        if kind == "hello":
            self.hello = rec
            self.segments += 1
            self.done = None
            self.model_prefix = rec["model_sha256_prefix"]
            if self.segments > 1:
                notes.append(self._note("restart", segment=self.segments))
        elif kind == "status":
            self.last_status = rec
            self.model_prefix = rec["model_sha256_prefix"]
        elif kind == "ack":
            self._acks[rec["command_seq"]] = rec
        elif kind == "weights" and self._dump is not None:
            self._dump.add(rec)
        elif kind == "done":
            self.done = rec
            self._complete_weights = copy.deepcopy(self.session.weights)  # its weights frames came just before
        elif kind == "need" and self.feeder is not None:
            self._feed(rec)
        elif kind == "log":
            self.last_log = rec["text"]
        elif kind == "crc":  # --- push: the device's trained-tensors checksum
            self.last_crc = rec
        elif kind == "checkpoint":
            notes += self._checkpoint_chunk(rec)
        elif kind == "text" and rec["text"].lstrip().startswith(FAULT_PREFIX):
            self.faulted = True
            self.stopped = f"the device reported a fault: {rec['text'].strip()}"
        return notes

    # ---------------------------------------------------------------------------- data sources

    def _feed(self, need: dict) -> None:
        """Answer a need frame with the sample chunk it asks for (monitor/feed.py)."""
        try:
            frame = self.feeder.answer(need)
        except DataError as exc:
            self.stopped = str(exc)
            return
        port = self._port
        if port is None:
            return  # the port went away: the device asks again after the reconnection
        try:
            port.write(frame)
        except (serial.SerialException, OSError, AttributeError):
            pass  # the port went away: the device asks again after the reconnection

    # ---------------------------------------------------------------------------- commands

    def send(self, command: str, payload: bytes = b"") -> int:
        """Send one command frame (telemetry.COMMANDS); returns its seq, which its ack carries."""
        frame = protocol.encode_command(command, self._seq, payload)
        seq, self._seq = self._seq, (self._seq + 1) & 0xFFFF
        if self._port is None:
            self._open(time.monotonic() + 5.0)
        port = self._port
        assert port is not None  # _open opens it or raises
        try:
            port.write(frame)
        except (serial.SerialException, OSError) as exc:
            self._lost(exc)
            raise PortError(f"cannot send '{command}' to {self.port_name}: {exc}") from None
        self.session.note(self._note("command", command=command, seq=seq))
        return seq

    def request(self, command: str, timeout: float = 5.0, attempts: int = 3, payload: bytes = b"") -> dict:
        """Send a command and wait for its ack, sending it again if no ack comes within
        timeout / attempts (or the device restarted meanwhile).  Returns the ack record.
        DeviceError if the run ends first (except for stop) or nothing answers."""
        if self.done is not None:
            raise DeviceError(
                f"the run on {self.port_name} is already done ({self.done['reason']}): the device "
                "takes no more commands; its final weights came with the done record"
            )
        seqs = []  # an ack of any attempt answers the request
        for _ in range(attempts):
            if command == "dump":
                self._dump = telemetry.WeightsAssembler()
            segment = self.segments
            seqs.append(self.send(command, payload))
            end = time.monotonic() + timeout / attempts
            while time.monotonic() < end:
                for seq in seqs:
                    if seq in self._acks:
                        return self._acks.pop(seq)
                if self.done is not None:
                    raise DeviceError(f"the run ended ({self.done['reason']}) before the device answered '{command}'")
                if segment and self.segments != segment:
                    break  # the device restarted: the command may have been lost, send it again
                self.pump(end)
        raise DeviceError(
            f"no answer to '{command}' from {self.port_name} within {timeout:g} s: is the training "
            "firmware running there (a finished run takes no commands)?"
        )

    def pause(self) -> dict:
        return self.request("pause")

    def resume(self) -> dict:
        return self.request("resume")

    def status(self) -> dict:
        """The device's status record (step, q, state, paused, lr, passes, model)."""
        self.last_status = None
        self.request("status")
        if self.last_status is None:
            raise DeviceError("the device acknowledged 'status' without sending its status")
        return self.last_status

    def stop(self, wait: bool = True, timeout: float = 30.0) -> dict | None:
        """Ask the device to finish the run now; with `wait`, run until its done record."""
        self.request("stop")
        if wait:
            self.run(until_done=True, timeout=timeout)
        return self.done

    def dump(self, timeout: float = 10.0) -> telemetry.WeightsAssembler:
        """The trainable tensors as they are now on the device (weights frames, then the ack)."""
        self.request("dump", timeout=timeout)
        dump, self._dump = self._dump, None
        assert dump is not None  # request("dump") made it
        if not dump.keys():
            raise DeviceError("the device acknowledged 'dump' without sending weights")
        if not dump.missing():
            self._complete_weights = copy.deepcopy(dump)
        return dump

    def headroom_bits(self) -> int:
        """The bits the firmware's trained layers were re-quantized with: the headroom given, else
        as the device's hello or status says (protocol version 3)."""
        if self.headroom is not None:
            return self.headroom
        for rec in (self.hello, self.last_status):
            if rec is not None and "headroom" in rec:
                return int(rec["headroom"])
        return 0

    def save_dump(
        self, model_path: str | Path, out_path: str | Path, allow_other_model: bool = False, timeout: float = 10.0
    ) -> Path:
        """Dump the weights now and write them as a weights file for `model_path` (checked
        against the model the device reports)."""
        if self.model_prefix is None:
            self.status()
        return save_dumped(
            self.dump(timeout),
            model_path,
            out_path,
            self.model_prefix,
            allow_other_model,
            headroom=self.headroom_bits(),
        )

    # ---------------------------------------------------------------------------- checkpoint and resume

    def _checkpoint_chunk(self, rec: dict) -> list[dict]:
        """Assemble; a complete valid checkpoint replaces the kept one (atomically)."""
        try:
            ckpt = self._checkpoints.add(rec)
        except CheckpointError as exc:
            return [self._note("checkpoint-dropped", step=rec["step"], reason=str(exc))]
        if ckpt is None:
            return []
        self.checkpoint = ckpt
        if self.checkpoint_path is not None:
            self.checkpoint_path = self._rescued_path(
                "checkpoint", self.checkpoint_path, lambda p: save_checkpoint(p, ckpt)
            )
        return [self._note("checkpoint", step=ckpt.step, bytes=len(ckpt.image))]

    def restore(self, path: str | Path, options_sha256: str | None = None, timeout: float = 10.0) -> Checkpoint:
        """Send the checkpoint in `path` down (restore commands); training continues from its step.
        Refused here when it is of another model (or, given the bundle's options_sha256, another
        build), and by the device for any mismatch (CheckpointError with the device's reason)."""
        ckpt = load_checkpoint(path)
        ckpt.check_for(None, options_sha256)
        if self.model_prefix is None:
            self.status()
        ckpt.check_for(self.model_prefix)
        for payload in ckpt.restore_payloads():
            ack = self.request("restore", timeout=timeout, payload=payload)
            if ack["result"] == "refused":
                raise CheckpointError(f"the device refused the checkpoint: {self.last_log or 'no reason given'}")
        self.session.note(self._note("resumed", step=ckpt.step, path=str(path)))
        return ckpt

    # ---------------------------------------------------------------------------- the end

    def _pause_for_space(self) -> None:
        """No place takes the log: ask the device to pause (its records stay in memory meanwhile)."""
        if self._port is None or self.paused_for_space:
            return
        try:
            self.send("pause")
        except (ZoflashError, serial.SerialException, OSError):
            return
        self.paused_for_space = True
        if self.view is not None:
            self.view.message("disk full: the log is kept in memory and the device is paused; free space, then press r")

    def _rescued_path(self, what: str, path: Path, write: Callable[[Path], Path | None]) -> Path:
        where = self.rescue.save(what, path, write)
        return where if where is not None else path

    def _weights_to_save(self) -> telemetry.WeightsAssembler:
        """The newest whole set of weights: a dump that arrived whole (even unacknowledged), else
        the latest whole set (the done record's, an earlier dump), else whatever arrived."""
        if self._dump is not None and self._dump.keys() and not self._dump.missing():
            expected = (self.hello or {}).get("n_tensors")
            if expected is None or len({i for i, part in self._dump.keys() if part == 0}) >= expected:
                return self._dump
        if self._complete_weights is not None:
            return self._complete_weights
        return self.session.weights

    def _bundle_of(self, sent: set[int], out: MonitorResult) -> dict | None:
        """The manifest of a bundle in `bundle_root` built from the device's model and training
        exactly the tensors that arrived (the newest such one), or None."""
        if self.bundle_root is None or not self.model_prefix:
            return None
        from zoflash.targets.project import training_bundles

        for folder, manifest in training_bundles(self.model_prefix, Path(self.bundle_root)):
            if {t["index"] for t in manifest["training"]["tensors"]} == sent:
                out.found_bundle = folder
                return manifest
        return None

    def _save_weights(self, out: MonitorResult, damaged: int) -> None:
        """The weights file (for --model, else the bundle's model); weights that fit neither are
        kept raw, so nothing the device sent is lost."""
        weights = self._weights_to_save()
        if not weights.keys() and self.done is None:
            return  # nothing arrived and nothing was due
        try:
            sent = {index for index, part in weights.keys() if part == 0}
            expected = (self.hello or {}).get("n_tensors")
            if expected is not None and len(sent) < expected:
                raise DataError(f"the device trains {expected} tensor(s) but the weights of only {len(sent)} arrived")
            # the done record's weights of a run whose snapshot never moved: export writes the model unchanged
            unchanged = weights is self._complete_weights and best_is_start(out.last_segment)
            if self.model_path is not None:
                model_path = self.model_path

                def write(p: Path) -> Path:
                    return save_dumped(
                        weights,
                        model_path,
                        p,
                        self.model_prefix,
                        headroom=self.headroom_bits(),
                        start_is_best=unchanged,
                    )
            elif (manifest_or_none := self.manifest or self._bundle_of(sent, out)) is not None:
                manifest = manifest_or_none

                def write(p: Path) -> Path:
                    return save_for_manifest(weights, manifest, p, self.model_prefix, start_is_best=unchanged)
            else:
                raise DataError("the model is not known (give --model M.tflite or --bundle DIR)")
            if self.weights_path is not None:
                out.weights_path = self.rescue.save("weights", self.weights_path, write)
                return
        except DataError as exc:  # the log and the plot are still worth having
            out.weights_error = str(exc) + (
                f" ({damaged} damaged telemetry frame(s) were dropped: the missing weights were among them)"
                if damaged
                else ""
            )
        if weights.keys() and self.log_path is not None:
            raw = raw_weights_path_for(self.log_path)
            out.raw_weights_path = self.rescue.save(
                "raw weights",
                raw,
                lambda p: save_raw_weights(p, weights, self.model_prefix, self.headroom_bits()),
            )

    def close(self) -> MonitorResult:
        """Close the port and the log; write the weights file (for the model, else raw: whatever
        the device sent is kept) and the plot (of the last run segment).  A file whose place
        fails goes to a rescue folder (`rescued` says where).  Ctrl-C cannot cut it short.
        Idempotent."""
        if self.result is not None:
            return self.result
        with _no_interrupts():
            return self._close()

    def _close(self) -> MonitorResult:
        if self._port is not None:
            try:
                self._port.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            self._port = None
        res = self.session.close()
        if self.csv is not None:
            self.csv.close()
        out = MonitorResult(
            **vars(res),
            reconnects=self.reconnects,
            segments=self.segments,
            interrupted=self.interrupted,
            timed_out=self.timed_out,
            log_path=self.session.log_path,
            csv_path=self.csv.path if self.csv else None,
            stopped=self.stopped,
            faulted=self.faulted,
        )
        self.result = out
        damaged = sum(res.stats.get(k, 0) for k in ("crc_errors", "truncated", "malformed"))
        self._save_weights(out, damaged)
        if self.plot_path is not None and any(r["type"] == "step" for r in out.last_segment):
            title = f"zoflash monitor {self.port_name}"
            out.plot_path = self.rescue.save("plot", self.plot_path, lambda p: plot_run(out.last_segment, p, title))
        out.rescued = self.rescue.summary()
        return out

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


STOP_CONFIRM_SECONDS = 3.0  # x stops the device only when pressed again within this time


class KeyCommands:
    """Single keys typed in the terminal while monitoring send commands: p pause, r resume,
    s status, d dump (saved next to the log: a weights file with a model, else raw weights),
    x stop (x twice within STOP_CONFIRM_SECONDS: a stray key must not end a run).  A context manager that
    puts the terminal in cbreak mode (keys arrive unbuffered, Ctrl-C still works) and restores
    it; does nothing when `stream` is not a terminal (or on a system without termios)."""

    KEYS = {"p": "pause", "r": "resume", "s": "status", "d": "dump", "x": "stop"}
    HELP = "keys: p pause, r resume, s status, d dump weights, x x stop (x twice), Ctrl-C quit"

    def __init__(self, stream, say: Callable[[str], None]):
        self.stream, self.say = stream, say
        self._stop_armed_until = 0.0  # x pressed once: a second x before this time stops the device
        self._fd: int | None = None
        self._saved: list[Any] | None = None  # the terminal's attributes (termios.tcgetattr) while active

    def __enter__(self) -> KeyCommands:
        try:
            import termios
            import tty

            if self.stream.isatty():
                fd = self.stream.fileno()
                self._saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
                self._fd = fd
        except (ImportError, OSError, ValueError, AttributeError):
            self._fd = None
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            import termios

            assert self._saved is not None  # saved before _fd was set
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._fd = None

    @property
    def active(self) -> bool:
        return self._fd is not None

    def __call__(self, mon: Monitor) -> None:
        if self._fd is None:
            return
        import os
        import select

        while select.select([self._fd], [], [], 0)[0]:
            command = self.KEYS.get(os.read(self._fd, 1).decode(errors="ignore").lower())
            if command is None:
                continue
            if command == "stop" and time.monotonic() > self._stop_armed_until:
                self._stop_armed_until = time.monotonic() + STOP_CONFIRM_SECONDS
                self.say(f"x: press x again within {STOP_CONFIRM_SECONDS:g} s to stop the device (its run ends)")
                continue
            if command == "stop":
                self._stop_armed_until = 0.0
            try:
                if command == "dump":
                    self._dump(mon)
                else:
                    mon.request(command)
            except ZoflashError as exc:
                self.say(f"{command}: {exc}")

    def _dump(self, mon: Monitor) -> None:
        stem = mon.log_path.stem if mon.log_path else "device"
        where = mon.log_path.parent if mon.log_path else Path(".")
        if mon.model_path is None:  # the model is not known here: the weights are kept as sent
            if mon.model_prefix is None:
                mon.status()
            dump = mon.dump()
            path = mon.rescue.save(
                "dump",
                where / f"{stem}.dump.raw-weights.npz",
                lambda p: save_raw_weights(p, dump, mon.model_prefix, mon.headroom_bits()),
            )
            self.say(f"dump: raw weights saved in {path} (zoflash export --weights {path} --model M.tflite)")
            return
        step = (mon.last_status or {}).get("step")
        path = mon.save_dump(mon.model_path, where / f"{stem}.dump.weights.npz")
        self.say(f"dump: weights saved in {path}" + (f" (status before: step {step})" if step is not None else ""))


@contextmanager
def _no_interrupts():
    """Ctrl-C is ignored meanwhile (in the main thread): the files of a run are being written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def save_for_manifest(
    weights: telemetry.WeightsAssembler,
    manifest: dict,
    out_path: str | Path,
    model_prefix: str | None,
    start_is_best: bool = False,
) -> Path:
    """Write weights as a weights file for the model a bundle was built from: its manifest holds
    the model's SHA-256, the trained tensors and the re-quantization (headroom) report.
    `start_is_best`: the run's snapshot never moved (best_is_start)."""
    from zoflash.training.weights_file import save_weights

    sha = manifest["model"]["sha256"]
    training = manifest.get("training") or {}
    if model_prefix is not None and not sha.startswith(model_prefix):
        raise DataError(
            f"the device trains the model whose SHA-256 starts {model_prefix}, but the bundle was built "
            f"from '{manifest['model']['file']}' (SHA-256 {sha[:16]}...): give the bundle the firmware came from"
        )
    tensors = [
        dict(index=t["index"], name=t["name"], dtype=t["dtype"], shape=t["shape"]) for t in training.get("tensors", [])
    ]
    if not tensors:
        raise DataError("the bundle's manifest lists no trained tensors: it is not a training bundle")
    report = training.get("headroom")
    arrays = assembled_arrays(weights, tensors)  # DataError when chunks are missing
    best = assembled_best(weights, tensors)
    return save_weights(
        out_path,
        sha,
        arrays,
        scales={t["index"]: t["scales"] for t in report["tensors"]} if report else None,
        headroom=report["bits"] if report else 0,
        best=best,
        best_is_start=start_is_best,
    )


def weights_from_raw(
    raw_path: str | Path, model_path: str | Path, out_path: str | Path, allow_other_model: bool = False
) -> Path:
    """A raw weights file (<log>.raw-weights.npz: the weights a device sent for a model the
    monitor did not know) as a weights file for `model_path`."""
    weights, prefix, headroom = load_raw_weights(raw_path)
    return save_dumped(weights, model_path, out_path, prefix, allow_other_model, headroom=headroom)


def save_dumped(
    dump: telemetry.WeightsAssembler,
    model_path: str | Path,
    out_path: str | Path,
    model_prefix: str | None,
    allow_other_model: bool = False,
    headroom: int = 0,
    start_is_best: bool = False,
) -> Path:
    """Write dumped weights chunks as a weights file: names, dtypes and shapes come from the
    model, which must be the one the device reported (first 8 bytes of its SHA-256).
    `start_is_best`: the run's snapshot never moved (best_is_start).

    `headroom`: the bits the firmware was built with (`--headroom`, the bundle manifest's
    training.headroom); the device does not say, so without it the file records no scales and
    `zoflash export` needs `--headroom H` to write the re-quantized scales."""
    from zoflash.compiler.tflite_import import load_tflite, model_sha256
    from zoflash.training.weights_file import save_weights

    graph, raw = load_tflite(model_path)
    sha = model_sha256(raw)
    if model_prefix is None:
        raise DataError(
            "the device did not say which model it trains (no hello or status record seen), so its "
            f"weights cannot be checked against {model_path}"
        )
    if not sha.startswith(model_prefix) and not allow_other_model:
        raise DataError(
            f"the device trains the model whose SHA-256 starts {model_prefix}, but '{model_path}' has "
            f"SHA-256 {sha[:16]}...: give the model the firmware was built from"
        )
    tensors: list[dict[str, Any]] = []
    problems: list[str] = []
    for index, part in dump.keys():
        if part != 0:
            continue
        if index >= len(graph.tensors):
            problems.append(f"tensor {index} does not exist in {graph.name}")
            continue
        t = graph.tensors[index]
        sent = dump.total(index, 0)
        if t.dtype not in ("int8", "int32", "int64") or sent != t.nbytes:
            problems.append(
                f"tensor {index} '{t.name}' is {t.dtype}{list(t.shape)} ({t.nbytes} bytes) in the model "
                f"but the device sent {sent} bytes"
            )
            continue
        tensors.append(dict(index=index, name=t.name, dtype=t.dtype, shape=list(t.shape)))
    missing = dump.missing()
    if missing:
        problems.append(f"chunks missing (tensor, part: byte ranges): {missing}")
    if problems:
        raise DataError("the dumped weights do not fit the model: " + "; ".join(problems))
    scales: dict[int, Iterable[float]] | None = None
    if headroom:
        from zoflash.training.headroom import scaled

        scales = {
            t["index"]: scaled(quant, headroom).scales
            for t in tensors
            if (quant := graph.tensors[t["index"]].quant) is not None
        }
    return save_weights(
        out_path,
        sha,
        assembled_arrays(dump, tensors),
        scales=scales,
        headroom=headroom,
        best=assembled_best(dump, tensors),
        best_is_start=start_is_best,
    )


def dump_from_port(
    port: str,
    model_path: str | Path,
    out_path: str | Path,
    *,
    baud: int = DEFAULT_BAUD,
    usb_ids: Iterable | None = None,
    allow_other_model: bool = False,
    timeout: float = 10.0,
) -> tuple[Path, dict]:
    """Ask the training firmware on `port` for its status and its weights as they are now, and
    write them as a weights file for `model_path`.  Returns (the file, the status record)."""
    with Monitor(port, baud=baud, usb_ids=usb_ids) as mon:
        mon.connect(timeout)
        status = mon.status()
        path = mon.save_dump(model_path, out_path, allow_other_model, timeout)
    return path, status
