"""Monitor a board that trains: the serial link, the live view, the log, the weights it sends, the
checkpoints it keeps; and the serial settings a board's data gives."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from zoflash.monitor.live_view import LiveView
from zoflash.monitor.outputs import raw_weights_path_for
from zoflash.monitor.serial_monitor import DeviceError, KeyCommands, Monitor, PortError, board_console
from zoflash.monitor.serialport import DEFAULT_BAUD
from zoflash.targets.project import BUNDLE_ROOT

log = logging.getLogger("zoflash")
Say = Callable[[str], None]
CTRL_C_DUMP_TIMEOUT = 3.0  # seconds Ctrl-C waits for the device's weights before giving up
EXIT_INTERRUPTED = 130  # Ctrl-C: what had arrived is saved, but the run did not end by itself
EXIT_RESCUED = 4  # some output could not be written where asked: it is in a rescue folder (or nowhere)
EXIT_GAPS = 5  # the run ended, but telemetry frames were lost on the way (the log has gaps)


WARNING = "warning: "  # how a workflow's progress line starts when it is a warning


def log_line(text: str) -> None:
    """Progress lines of a workflow called from Python: to the zoflash logger; warnings at WARNING,
    which Python shows even when the caller configured no logging."""
    if text.startswith(WARNING):
        log.warning(text.removeprefix(WARNING))
    else:
        log.info(text)


def serial_settings(board: str | None, baud: int | None, say: Say = log_line) -> tuple[list | None, int]:
    """USB ids for --port auto and the baud rate: from the board's data when --board is given."""
    if not board:
        return None, baud or DEFAULT_BAUD
    con = board_console(board)
    if con.note:
        say(con.note)
    return con.usb_ids, baud or con.baud


def training_manifest(bundle_dir: str) -> dict:
    """The manifest of a training bundle (for the model its firmware trains); refused before the
    device is touched when it is not one."""
    from zoflash.errors import ZoflashError
    from zoflash.targets.project import load_bundle

    manifest = load_bundle(bundle_dir).manifest
    if not (manifest.get("training") or {}).get("tensors"):
        raise ZoflashError(f"--bundle {bundle_dir}: not a training bundle (its manifest lists no trained tensors)")
    return manifest


def monitor(
    port: str,
    baud: int,
    usb_ids,
    log_path: str,
    csv_path: str | None = None,
    plot_path: str | None = None,
    model_path: str | None = None,
    until_done: bool = True,
    timeout: float | None = None,
    connect_wait: float = 5.0,
    headroom: int | None = None,
    reconnect_timeout: float | None = None,
    ended=None,
    feeder=None,
    checkpoint_path: str | None = None,
    resume_path: str | None = None,
    options_sha256: str | None = None,
    view: LiveView | None = None,
    say: Say = log_line,
    keys_from=None,
    manifest: dict | None = None,
) -> int:
    """Watch a training run on a board: connect (resume from a checkpoint if asked), follow it until
    done (or the timeout, a lost port, a fault), keep the log, the weights and the plot. Progress lines
    go to `say`; key commands are read from `keys_from` (a terminal; None: none). `manifest`: the
    bundle's, which names the model when `model_path` is not given (without either, the weights are
    kept raw). Returns the exit status: 0 done, 1 stopped before done, 3 the device reported a
    fault, 4 an output went to a rescue folder, 5 done but frames were lost on the way, 130 Ctrl-C."""
    view = view if view is not None else LiveView(enabled=False)
    if model_path is None and manifest is None:
        say(
            f"weights no --model or --bundle: written for the bundle in {BUNDLE_ROOT}/ built from the device's "
            f"model, if there is one; else kept raw in {raw_weights_path_for(Path(log_path))} "
            "(zoflash export --weights FILE --model M.tflite reads them)"
        )
    mon = Monitor(
        port,
        baud=baud,
        usb_ids=usb_ids,
        log_path=log_path,
        csv_path=csv_path,
        plot_path=plot_path,
        model_path=model_path,
        view=view,
        headroom=headroom,
        reconnect_timeout=reconnect_timeout,
        ended=ended,
        feeder=feeder,
        checkpoint_path=checkpoint_path,
        manifest=manifest,
        bundle_root=BUNDLE_ROOT,
    )
    try:
        mon.connect(connect_wait)
        say(f"monitor {mon.device} at {baud} baud ({'until done' if until_done else 'until Ctrl-C'})")
        if resume_path is not None:
            ckpt = mon.restore(resume_path, options_sha256=options_sha256)
            say(f"resumed from {resume_path}: training continues after step {ckpt.step}")
        with KeyCommands(keys_from, view.message) as keys:
            if keys.active:
                say(KeyCommands.HELP)
            mon.run(until_done=until_done, timeout=timeout, on_tick=keys)
        if mon.interrupted and mon.done is None and mon.stopped is None:
            say(f"Ctrl-C: asking the device for its weights ({CTRL_C_DUMP_TIMEOUT:g} s; Ctrl-C again to skip)")
            try:
                mon.dump(timeout=CTRL_C_DUMP_TIMEOUT)
            except (DeviceError, PortError) as exc:
                say(f"no weights from the device: {exc}")
            except KeyboardInterrupt:
                say("no weights from the device: skipped")
    finally:
        res = mon.close()
    end = (
        f"done ({res.done['reason']}) after {res.done['steps']} steps"
        if res.done
        else f"stopped: {res.stopped}"
        if res.stopped
        else "stopped (Ctrl-C)"
        if res.interrupted
        else f"stopped after {timeout:g} s"
        if res.timed_out
        else "stopped"
    )
    say(f"{end}; {res.segments} run segment(s), {res.reconnects} reconnection(s)")
    bad = {
        k: v
        for k, v in res.stats.items()
        if k in ("crc_errors", "dropped_bytes", "truncated", "malformed", "seq_gaps") and v
    }
    if bad:
        say(f"telemetry problems (every damaged frame was dropped): {bad}")
    say(f"log     {res.log_path}" + (f", csv {res.csv_path}" if res.csv_path else ""))
    model_name = model_path or (manifest or {}).get("model", {}).get("file", "M.tflite")
    if res.found_bundle is not None:
        model_name = training_manifest(str(res.found_bundle))["model"]["file"]
        say(f"weights for {model_name}, the model of bundle {res.found_bundle} (the device trains it)")
    if res.weights_path is not None:
        say(
            f"weights {res.weights_path}  (zoflash export --model {model_name} --weights {res.weights_path} "
            "--out trained.tflite)"
        )
    elif res.weights_error:
        say(f"weights no weights file: {res.weights_error}")
    if res.raw_weights_path is not None:
        say(
            f"weights kept raw, as the device sent them, in {res.raw_weights_path}  (zoflash export "
            f"--model {model_name} --weights {res.raw_weights_path} --out trained.tflite)"
        )
    if res.plot_path is not None:
        say(f"plot    {res.plot_path}")
    if checkpoint_path is not None:
        say(
            f"checkpoint {mon.checkpoint_path} (step {mon.checkpoint.step}; resume with --resume {mon.checkpoint_path})"
            if mon.checkpoint is not None
            else "checkpoint none arrived (was the firmware built with --checkpoint-every?)"
        )
    if res.rescued:
        say(res.rescued)
    if res.faulted:
        return 3
    if res.interrupted:
        return EXIT_INTERRUPTED
    if res.rescued:
        return EXIT_RESCUED
    if res.stopped or (until_done and res.done is None and res.timed_out):
        return 1
    # Frames lost in transit (a dropped link: what the device sent meanwhile never arrived) leave
    # holes in the log: said and not reported as a clean success, even though the run completed.
    lost = res.stats.get("seq_gaps", 0)
    if lost:
        say(
            f"incomplete: {lost} telemetry frame(s) never arrived (the link dropped them); the log has "
            "gaps" + (", the weights arrived whole" if res.weights_path or res.raw_weights_path else "")
        )
        return EXIT_GAPS
    return 0
