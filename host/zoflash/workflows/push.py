"""`zoflash push`: what a run learned, sent to a second device.  The run's update log (the binary16
coefficients and the rollback / snapshot markers of every step, docs/training.md "Update log") goes
down the command channel in `push` commands; the device applies each step with its own update maths
(the directions regenerated from its seed, the step and the stream) and at the end reports the
CRC-32 of its trainable tensors, which must equal the replay's of the same log (workflows/replay.py).

Flow control is stop-and-wait: a chunk is sent when the last one is acknowledged, and re-sent when
its ack does not come (the device ignores a repeat of the chunk it took last), so a slow or lossy
link drops nothing.  Every chunk fits the device's receive ring (wire.PUSH_WINDOW)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zoflash.errors import DataError, ZoflashError
from zoflash.monitor.serial_monitor import DeviceError, Monitor
from zoflash.spec import training as spec
from zoflash.spec import wire
from zoflash.training.options import TrainOptions
from zoflash.workflows.replay import LogPaths, Rebuilt, rebuild

Say = Callable[[str], None]
FRAME_BYTES = wire.HEAD + 4  # a command frame's header and CRC around its payload
PUSH_TAIL = wire.PUSH_WINDOW - FRAME_BYTES - wire.COMMAND_STRUCTS["push"].size  # entry bytes per chunk
CHUNK_TIMEOUT = 30.0  # seconds for a chunk's ack (over its attempts): a chunk of many updates takes a while


class PushMismatch(ZoflashError):
    """The device's weights after a push differ from the replay's."""

    exit_code = 1


@dataclass
class PushResult:
    steps: int
    updates: int
    chunks: int
    bytes: int  # wire bytes of the push command frames
    seconds: float
    crc: int

    def summary(self, log: str) -> str:
        return (
            f"device weights identical to the replay of {log} (crc {self.crc:#010x}): {self.steps} steps, "
            f"{self.updates} updates pushed in {self.chunks} chunks, {self.bytes} bytes, {self.seconds:.1f} s"
        )


def pack_entries(entries: list[wire.UpdateEntry], limit: int = PUSH_TAIL) -> list[tuple[int, int, bytes]]:
    """The entries in chunks of consecutive steps, each tail at most `limit` bytes in the updates
    frame's format (every chunk states its first q): (first step, steps, tail)."""
    chunks: list[tuple[int, int, bytes]] = []
    tail = wire.Tail()
    for e in entries:
        c16 = e.coefficients if e.flags & wire.UPDATE_APPLIED else ()
        entry = tail.entry(e.flags, c16)
        if tail.steps and tail.size_with(entry) > limit:
            chunks.append((tail.first, tail.steps, tail.data()))
            tail = wire.Tail()
            entry = tail.entry(e.flags, c16)  # every chunk states its first q
        if tail.size_with(entry) > limit:  # alone in a chunk, and still too long
            raise DataError(f"step {e.step} has {len(c16)} coefficients: more than a push chunk of {limit} bytes holds")
        tail.add(e.step, entry)
    if tail.steps:
        chunks.append((tail.first, tail.steps, tail.data()))
    return chunks


def push_payload(run: Rebuilt, first: int, steps: int, data: bytes, last: bool) -> bytes:
    """One push command's payload: its header (wire.COMMAND_LAYOUTS["push"]) and the entries."""
    head = wire.COMMAND_STRUCTS["push"].pack(
        first,
        steps,
        run.opts.eps,
        spec.ROUNDINGS.index(run.hello["rounding"]),
        run.hello["density_log2"],
        1 if last else 0,
        run.hello["seed"],
        run.hello["trainable_params"],
    )
    return head + data


def _check_device(mon: Monitor, run: Rebuilt, port: str, log: str) -> None:
    """Refuse a device of another model, or built with other options, before anything is sent."""
    prefix = mon.model_prefix
    if prefix is not None and prefix != run.hello["model_sha256_prefix"]:
        raise ZoflashError(
            f"the device on {port} trains the model {prefix}..., but '{log}' is a run of "
            f"{run.hello['model_sha256_prefix']}...: push to a device running the same base model"
        )
    hello = mon.hello
    if hello is None:
        return  # connected after its hello: the device checks the options of every chunk itself
    differ = [
        k for k in ("seed", "rounding", "density_log2", "n_tensors", "trainable_params") if hello[k] != run.hello[k]
    ]
    if differ:
        raise ZoflashError(
            f"the firmware on {port} was built with other training options than the run of '{log}' "
            f"({', '.join(f'{k} {hello[k]} there, {run.hello[k]} in the log' for k in differ)}): build it with "
            "the run's options (the same zoflash.toml) and push again"
        )


def _request(mon: Monitor, payload: bytes, timeout: float) -> dict:
    ack = mon.request("push", timeout=timeout, attempts=3, payload=payload)
    if ack["result"] == "refused":
        raise DeviceError(f"the device refused the push: {mon.last_log or 'no reason given'}")
    if ack["result"] == "unknown":
        raise DeviceError("the device does not know the push command: flash it with a firmware of this zoflash")
    return ack


def replayed(log_path: LogPaths, model_path: str | Path, opts: TrainOptions | None, say: Say) -> Rebuilt:
    """The log replayed on the host (before the device is touched: a device that waits for its
    host, like QEMU, starts training when the port opens)."""
    run = rebuild(model_path, log_path, opts)
    if run.device_crc is not None:
        say(f"log     {run.log}: {len(run.entries)} steps, replayed weights identical to the device's own")
    return run


def push(
    mon: Monitor,
    port: str,
    run: Rebuilt,
    say: Say = print,
    chunk_tail: int = PUSH_TAIL,
    chunk_timeout: float = CHUNK_TIMEOUT,
) -> PushResult:
    """Send the updates of `run` (a log replayed: `replayed`) to the device behind `mon` (connected)
    and compare the CRCs.  PushMismatch when they differ; ZoflashError for every refusal.
    `chunk_tail`: entry bytes per chunk, at most; `chunk_timeout`: seconds for a chunk's ack."""
    log_path = run.log
    mon.request("pause", timeout=10.0)
    if mon.model_prefix is None:
        mon.status()
    _check_device(mon, run, port, log_path)
    # The device's weights must be the base model's: the pushed steps start from them.
    mon.last_crc = None
    ack = _request(mon, push_payload(run, 0, 0, b"", last=True), chunk_timeout)
    if mon.last_crc is None:
        raise DeviceError("the device acknowledged the push without reporting its weights' CRC")
    if mon.last_crc["crc32"] != run.base_crc:
        mon.request("resume")
        raise ZoflashError(
            f"the device on {port} has trained (step {ack['step']} of its own run): its weights are no longer the "
            "base model's, which the pushed steps start from. Reset it and push before it trains (zoflash push "
            "pauses it at its first step); it was resumed"
        )
    chunks = pack_entries(run.entries, chunk_tail)
    if not chunks:
        raise DataError(f"'{log_path}' holds no step to push")
    if not run.complete:
        say(f"note    '{log_path}' has no done record: pushing its {len(run.entries)} steps")
    sent, t0, shown = 0, time.monotonic(), 0.0
    for k, (first, steps, data) in enumerate(chunks):
        last = k == len(chunks) - 1
        payload = push_payload(run, first, steps, data, last)
        if last:
            mon.last_crc = None
        _request(mon, payload, chunk_timeout)
        sent += len(payload) + FRAME_BYTES
        now = time.monotonic()
        if last or now - shown >= 1.0:
            shown = now
            say(f"push    {first + steps}/{len(run.entries)} steps, {sent} bytes, {now - t0:.1f} s")
    seconds = time.monotonic() - t0
    got = mon.last_crc
    if got is None:
        raise DeviceError("the device took the last chunk without reporting its weights' CRC")
    if got["crc32"] != run.crc:
        raise PushMismatch(
            f"the device's weights after the push differ from the replay of '{log_path}' (crc {got['crc32']:#010x} "
            f"on the device, {run.crc:#010x} replayed): its firmware does not apply updates as this zoflash does; "
            "rebuild and flash it with this zoflash, then push again"
        )
    return PushResult(len(run.entries), run.updates, len(chunks), sent, seconds, run.crc)


def model_of_bundle(bundle_dir: str | Path) -> tuple[Path, dict]:
    """The model a training bundle was built from (its manifest names it; found in the bundle,
    beside it or here, with the manifest's SHA-256), and the bundle's training options."""
    from zoflash.compiler.tflite_import import model_sha256
    from zoflash.workflows.monitor import training_manifest

    manifest = training_manifest(str(bundle_dir))
    name, sha = manifest["model"]["file"], manifest["model"]["sha256"]
    for where in (Path(bundle_dir), Path(bundle_dir).parent, Path.cwd()):
        path = where / name
        if path.is_file() and model_sha256(path.read_bytes()) == sha:
            return path, manifest["training"]["options"]
    raise ZoflashError(
        f"--bundle {bundle_dir}: its model {name} is neither in it, beside it nor here (with its SHA-256 "
        f"{sha[:16]}...): give it with --model {name}"
    )


def push_to_port(
    port: str,
    log_path: LogPaths,
    model_path: str | Path,
    opts: TrainOptions | None = None,
    baud: int | None = None,
    connect_wait: float = 5.0,
    say: Say = print,
) -> PushResult:
    """Open the port, push (see push), close it."""
    from zoflash.monitor.serialport import DEFAULT_BAUD

    run = replayed(log_path, model_path, opts, say)
    mon = Monitor(port, baud=baud or DEFAULT_BAUD)
    try:
        mon.connect(connect_wait)
        return push(mon, port, run, say)
    finally:
        mon.close()
