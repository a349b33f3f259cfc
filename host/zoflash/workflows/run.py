"""Train on a board from one call: build the training firmware, flash it (or start it in QEMU),
monitor the run to its end, stop the emulator."""

from __future__ import annotations

from pathlib import Path

from zoflash.errors import ZoflashError
from zoflash.monitor.checkpoint import load_checkpoint
from zoflash.monitor.feed import Feeder, load_feeder
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.serialport import DEFAULT_BAUD
from zoflash.targets.boards import resolve_board
from zoflash.targets.runners import FlashOptions, flash_bundle
from zoflash.targets.runners.base import DEFAULT_QEMU_TIMEOUT
from zoflash.targets.runners.qemu import emulator_ended, stop_qemu
from zoflash.training.options import FLEET_NEEDS_A_FLEET, TrainOptions
from zoflash.workflows.continual import stream_feeder
from zoflash.workflows.generate import build
from zoflash.workflows.monitor import Say, log_line, monitor, serial_settings
from zoflash.workflows.report import bundle_lines

# --data-source app builds the trainer as a library for the user's firmware: nothing zoflash runs itself.
APP_IS_A_LIBRARY = (
    "--data-source app builds the trainer as a library for your own firmware: use `zoflash build "
    "--data-source app` and link your main() (examples/app_sensor)"
)


def refuse_to_run(board: str, opts: TrainOptions) -> str | None:
    """Why this board and these options cannot run as they are (None: they can)."""
    if opts.data_source == "app":
        return APP_IS_A_LIBRARY
    if not resolve_board(board)[0].is_firmware:
        return f"board '{board}' runs no firmware; use `zoflash simulate` for the host"
    return None


def refuse_stream(opts: TrainOptions, stream_path: str | None) -> str | None:
    """--stream goes with --mode continual and the reverse (None: fine)."""
    if stream_path is not None and opts.mode != "continual":
        return "--stream is served by --mode continual (add --mode continual --data-source stream)"
    if stream_path is None and opts.mode == "continual":
        return "--mode continual needs --stream S.npz: the samples to serve, in arrival order"
    return None


def run(
    board: str,
    model_path: str,
    data_path: str,
    opts: TrainOptions,
    settings=("dev", ()),
    out_dir: str | None = None,
    method: str | None = None,
    port: str | None = None,
    baud: int | None = None,
    log_path: str = "run.jsonl",
    csv_path: str | None = None,
    timeout: float | None = None,
    check_boundary: bool = False,
    reconnect_timeout: float | None = None,
    checkpoint_path: str | None = None,
    resume_path: str | None = None,
    view: LiveView | None = None,
    say: Say = log_line,
    keys_from=None,
    stream_path: str | None = None,
) -> int:
    """Build, flash and monitor: train on a board (or on the emulated Cortex-M55). `settings`: (boot
    mode, vendor header folders). `stream_path`: --mode continual, the samples the board serves (the
    stop command after the last). Returns the monitor's exit status (3: the device reported a fault)."""
    if opts.mode == "fleet":
        raise ZoflashError(FLEET_NEEDS_A_FLEET)
    if resume_path is not None:  # a damaged file is refused before building
        load_checkpoint(resume_path)
    board_obj, note = resolve_board(board)
    if note:
        say(f"board   {note}")
    boot, device_headers = settings
    result = build(
        model_path,
        board_obj.id,
        out_dir,
        data_path=data_path,
        options=opts,
        boot=boot,
        device_headers=device_headers,
        check_boundary=check_boundary,
        say=say,
    )
    bundle = result.bundle
    for line in bundle_lines(bundle, result, board_obj):
        say(line)
    qemu_limit = (timeout or DEFAULT_QEMU_TIMEOUT) + 60.0
    flashed = flash_bundle(bundle.path, method, FlashOptions(timeout=qemu_limit, tied=True), say=say)
    try:
        serial = flashed.serial_url or port or "auto"
        if serial == "auto":
            usb_ids, baud = serial_settings(board_obj.id, baud, say)
        else:
            usb_ids, baud = None, baud or int((board_obj.console or {}).get("baud", DEFAULT_BAUD))
        ended = emulator_ended(bundle.path) if flashed.pid is not None else None
        # --data-source stream: the host feeds the training split
        feeder: Feeder | None
        if stream_path is not None:  # --mode continual: the stream to serve
            feeder = stream_feeder(model_path, data_path, stream_path, opts)
        else:
            feeder = load_feeder(model_path, data_path, opts) if opts.data_source == "stream" else None
        return monitor(
            serial,
            baud,
            usb_ids,
            log_path,
            csv_path,
            str(Path(log_path).with_suffix(".png")),
            model_path,
            True,
            timeout,
            10.0,
            headroom=bundle.manifest["training"]["options"]["headroom"],
            reconnect_timeout=reconnect_timeout,
            ended=ended,
            feeder=feeder,
            checkpoint_path=checkpoint_path,
            resume_path=resume_path,
            options_sha256=bundle.manifest["training"]["options_sha256"],
            view=view,
            say=say,
            keys_from=keys_from,
            manifest=bundle.manifest,
        )
    finally:
        if flashed.serial_url is not None and flashed.pid is not None:
            notes: list[str] = []
            if not stop_qemu(bundle.path, say=notes.append):  # normally the firmware has exited QEMU already
                say(
                    "qemu    the firmware ended; " + notes[-1].split(": ", 1)[-1].replace("[zoflash] ", "")
                    if notes
                    else "qemu    ended"
                )
            else:
                say(notes[-1])
