"""`zoflash` command line: a thin layer over zoflash.api. Errors print one paragraph, no traceback."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click
import numpy as np

from zoflash import __version__
from zoflash.errors import ZoflashError
from zoflash.monitor.serial_monitor import RECONNECT_TIMEOUT
from zoflash.monitor.serialport import DEFAULT_BAUD
from zoflash.targets.runners.base import DEFAULT_QEMU_TIMEOUT
from zoflash.targets.simulate import ENGINES
from zoflash.training import spec

log = logging.getLogger("zoflash")


class _Group(click.Group):
    """Turns ZoflashError into a clean message and its exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ZoflashError as err:
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)
        except OSError as err:  # a file the user named cannot be read or written: say which and why
            where = f"'{err.filename}': " if err.filename else ""
            click.echo(f"error: {where}{err.strerror or err}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="zoflash")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for debug output).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def cli(verbose: int, quiet: bool) -> None:
    """zoflash: INT8 TFLite models to bit-exact C, trained on-device with zeroth-order optimization."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s")


def _check_outputs(**paths) -> None:
    """Fail before any work when an output cannot be written: the nearest existing folder of each
    path must be a writable directory (`name=path`, None skipped; the name is the option's)."""
    for name, value in paths.items():
        if value is None:
            continue
        folder = Path(value).expanduser().absolute().parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise ZoflashError(f"--{name.replace('_', '-')} {value}: cannot write there ({folder} is not a writable "
                               "folder)")


def _say(text: str) -> None:
    """Normal output, silenced by -q."""
    if logging.getLogger().level < logging.ERROR:
        click.echo(text)


@cli.group(invoke_without_command=True)
@click.pass_context
def boards(ctx) -> None:
    """List the boards zoflash can build for (`boards show ID` for one in full)."""
    if ctx.invoked_subcommand is not None:
        return
    from zoflash.targets.boards import list_boards

    click.echo(f"{'id':<18} {'family':<14} name")
    for b in list_boards():
        marks = [m for m, on in (("family reference", b.reference and b.family != b.id), ("emulated", b.emulated))
                 if on]
        click.echo(f"{b.id:<18} {b.family:<14} {b.name}" + (f"  [{', '.join(marks)}]" if marks else ""))
    click.echo("(--board also takes a family name: its reference board)")


@boards.command("show")
@click.argument("board_id")
def boards_show(board_id: str) -> None:
    """Everything a board file says: CPU, flags, memory and placement, console, boot, flash."""
    from zoflash.targets.boards import describe, resolve_board

    board, note = resolve_board(board_id)
    if note:
        click.echo(f"({note})")
    click.echo(describe(board))


def training_options(f):
    """The training flags (docs/training.md); the same keys work in zoflash.toml [train]."""
    d = spec.TRAIN_DEFAULTS
    opts = [
        click.option("--config", "project_file", type=click.Path(dir_okay=False),
                     help="Project file with a [train] table [./zoflash.toml if present]."),
        click.option("--train", help=f"Trainable layers: last, last:N, all, layers:NAME[,NAME] [{d['train']}]."),
        click.option("--biases-only", is_flag=True, default=None, help="Train only the biases of those layers."),
        click.option("--max-params", type=int, help="Cap on trainable parameters (drops the earliest layers)."),
        click.option("--batch", type=int, help=f"Minibatch size b [{d['batch']}]."),
        click.option("--eps", type=int, help=f"Perturbation size in LSB (biases: eps * their eps_b) [{d['eps']}]."),
        click.option("--density", type=float, help="Sparse directions: nonzero fraction 1, 1/2, ..., "
                                                   f"1/{1 << spec.DENSITY_LOG2_MAX} [{d['density']:g}]."),
        click.option("--rounding", type=click.Choice(spec.ROUNDINGS), help=f"int8 update rounding [{d['rounding']}]."),
        click.option("--lr", help="Learning rate lr_1, or 'auto' (calibrated on the device) [auto]."),
        click.option("--rho", type=float, help=f"auto lr: RMS update per step at q = 1, in LSB [{d['rho']:g}]."),
        click.option("--lr-scaling", type=click.Choice(spec.LR_SCALINGS),
                     help=f"lr at q vs q = 1 [{d['lr_scaling']}]."),
        click.option("--lr-decay", type=click.Choice(spec.LR_DECAYS),
                     help=f"lr factor over the run (budget or steps): linear 1 - f, step 1/0.1/0.01, tail 1 then linear "
                          f"to 0 over the last 1/{spec.LR_DECAY_TAIL_DIV} [{d['lr_decay']}]."),
        click.option("--lr-trial", type=int, help="lr trial: steps per candidate lr_1 * 2^j before training, 0 off "
                     f"[{spec.LR_TRIAL_STEPS} for the adaptive schedulers with embedded data, else 0]."),
        click.option("--calib-steps", type=int, help=f"auto lr: calibration steps [{d['calib_steps']}]."),
        click.option("--calib-q", type=int, help=f"auto lr: q during calibration [{d['calib_q']}]."),
        click.option("--seed", type=int, help=f"Run seed [{d['seed']}]."),
        click.option("--steps", type=int, help=f"Training steps [{spec.DEFAULT_STEPS} unless --budget]."),
        click.option("--budget", type=int, help="Forward-pass budget (prefix + suffix sample-passes)."),
        click.option("--eval-every", type=int,
                     help=f"Evaluate on the validation and test sets every N steps [{d['eval_every']}]."),
        click.option("--scheduler", type=click.Choice(spec.SCHEDULERS), help=f"q scheduler [{d['scheduler']}]."),
        click.option("--q", type=int, help=f"q of the fixed scheduler, starting q of plateau/adazeta [{d['q']}]."),
        click.option("--q-min", type=int, help=f"Smallest q [{d['q_min']}]."),
        click.option("--q-max", type=int, help=f"Largest q [{d['q_max']}]."),
        click.option("--sched-param", "sched_param", multiple=True, metavar="NAME=VALUE",
                     help="Scheduler parameter (repeatable), e.g. tau=0.02, patience=3, alpha=2."),
        click.option("--bias-bound", type=int,
                     help=f"Bound of a step's bias change, in units of eps_b [{d['bias_bound']}]."),
        click.option("--guard-sat", type=float, help=f"Guard: saturated-logit fraction [{d['guard_sat']:g}]."),
        click.option("--guard-zero", type=float, help=f"Guard: zero-loss-difference fraction [{d['guard_zero']:g}]."),
        click.option("--guard-steps", type=int,
                     help=f"Guard: consecutive steps before a rollback [{d['guard_steps']}]."),
        click.option("--guard-loss", type=float,
                     help=f"Guard: roll back when a validation loss exceeds best x this [{d['guard_loss']:g}; 0 off] ..."),
        click.option("--guard-loss-z", type=float,
                     help=f"... plus this many standard errors of the validation mean [{d['guard_loss_z']:g}]."),
        click.option("--guard-max-rollbacks", type=int,
                     help=f"Guard: stop after this many rollbacks [{d['guard_max_rollbacks']}; 0 never]."),
        click.option("--headroom", help="Re-quantize the trainable layers with H bits of headroom (scales x 2^H, "
                                        "weights / 2^H), 0..4, or auto: the most bits that keep the trainable "
                                        f"weights' RMS at least {spec.HEADROOM_AUTO_LSB:g} LSB [{d['headroom']}]."),
        click.option("--loss", type=click.Choice(spec.LOSS_CHOICES),
                     help="Loss: auto = mse with --target input, sigmoid-bce for one output (labels 0/1), "
                          f"else softmax-ce; mse for float targets [{d['loss']}]."),
        click.option("--target", type=click.Choice(spec.TARGETS),
                     help=f"What the output should match: the data's y, or the sample's own input "
                          f"(autoencoders; no y needed) [{d['target']}]."),
        # ---- data sources ----
        click.option("--data-source", type=click.Choice(spec.DATA_SOURCES),
                     help="Where training samples come from: built in, fed by the host over the serial link, or "
                          f"pushed by your own firmware (a library) [{d['data_source']}]."),
        click.option("--buffer", type=int, help=f"stream/app: samples the device keeps for minibatches [{d['buffer']}]."),
        click.option("--refresh", type=int, help=f"stream/app: new samples before each step [{d['refresh']}]."),
        # ---- end data sources ----
        click.option("--val-fraction", type=float,
                     help="Share of the training data carved off for validation (guards, snapshots, best weights; "
                          f"the test set is only reported) [{d['val_fraction']:g}]."),
        click.option("--checkpoint-every", type=int,
                     help=f"Send a checkpoint every N steps (monitor/run --checkpoint keeps it) "
                          f"[{d['checkpoint_every']}: never]."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


_TRAIN_KEYS = tuple(spec.TRAIN_DEFAULTS)  # every option has a flag (sched: --sched-param)


def _options_from(kwargs: dict):
    """Pop the training flags from a command's kwargs into TrainOptions."""
    from zoflash.training.options import make_options, parse_sched_params

    project = kwargs.pop("project_file", None)
    sched = parse_sched_params(kwargs.pop("sched_param", ()) or ())
    overrides = {k: kwargs.pop(k, None) for k in _TRAIN_KEYS}
    return make_options(project, sched=sched, **overrides)


def _refuse_app(opts) -> None:
    """--data-source app builds a library for your firmware: nothing to simulate or run as it is."""
    if opts.data_source == "app":
        raise click.UsageError("--data-source app builds the trainer as a library for your own firmware: use "
                               "`zoflash build --data-source app` and link your main() (examples/app_sensor)")


def _say_training_memory(training: dict) -> None:
    mem = training["memory"]
    _say(f"train   {training['trainable_params']} parameters in {len(training['tensors'])} tensor(s) "
         f"(layers {', '.join(map(str, training['layers']))}), suffix from kernel call {training['split_step']}; "
         f"{training['clamped_weights']} weight(s) clamped to +-(127 - eps)")
    if training.get("headroom"):
        from zoflash.training.headroom import describe

        _say(f"requant {describe(training['headroom'])}")
    _say(f"RAM     training beyond inference {training['memory_beyond_inference_bytes']} bytes: trainable tensors "
         f"(their RAM copy) {mem['trainable_bytes_in_ram']}, residuals {mem['residual_bytes']}, feature cache "
         f"{mem['feature_cache_bytes']}, statistics {mem['statistics_bytes']}, snapshot {mem['snapshot_bytes']}")
    if mem.get("stream_buffer_bytes"):
        ds = training["data_source"]
        who = "your application pushes" if ds["kind"] == "app" else "the host feeds"
        _say(f"RAM     stream ring {mem['stream_buffer_bytes']} bytes ({ds['buffer']} samples of "
             f"{sum(ds['record_bytes'].values())} bytes; {who} {ds['refresh']} per step; test split embedded)")
    data = training["data"]
    if training.get("data_source"):
        _say(f"flash   validation and test data {data['n_val']} + {data['n_test']} samples embedded (the training "
             "split is not built in), "
             f"bias eps tables {mem['eps_bytes']} bytes")
        return
    _say(f"flash   data {data['bytes']} bytes ({data['n_train']} training, {data['n_val']} validation, "
         f"{data['n_test']} test samples), "
         f"bias eps tables {mem['eps_bytes']} bytes")


@cli.command()
@click.option("--board", default="host", show_default=True,
              help="Board id or family name (see `zoflash boards`).")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option("--data", "data_path", type=click.Path(dir_okay=False),
              help="Training data .npz (x_train, y_train, x_test, y_test): adds on-device training.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Bundle directory [generated/<model>-<board>].")
@click.option("--prefix", help="C name prefix for the model's functions [from the model file name].")
@click.option("--no-compile", is_flag=True, help="Only generate the bundle; do not run the compiler.")
# --- flash boot and device headers ---
@click.option("--boot", type=click.Choice(("dev", "flash")),
              help="Memory plan for a boot mode: dev (the debugger loads everything into RAM) or flash (a signed "
                   "FSBL image, large weights and data read in place from the external flash) [dev; zoflash.toml "
                   "[build] boot].")
@click.option("--device-headers", "device_headers", multiple=True, type=click.Path(),
              help="Compile the port against the vendor's headers from this checkout (repeatable: e.g. "
                   "cmsis-device-n6 and Arm's CMSIS core, or STM32CubeN6) [zoflash.toml [build] device_headers].")
# --- end flash boot and device headers ---
# --- NPU ---
@click.option("--npu", "npu_config", metavar="CONFIG",
              help="Run the frozen prefix on the board's NPU: an Ethos-U configuration (ethos-u55-128, ...; "
                   "needs Vela and Arm's Ethos-U driver) or neural-art (STM32N6; needs ST Edge AI Core and "
                   "ST's runtime); `zoflash boards show ID` lists the board's. Needs --data.")
@click.option("--ethosu-driver", "ethosu_driver", type=click.Path(file_okay=False),
              help="Checkout of Arm's Ethos-U core driver [$ZOFLASH_ETHOSU_DRIVER].")
@click.option("--stedgeai", "stedgeai", type=click.Path(),
              help="ST Edge AI Core: the stedgeai program or its install folder [$ZOFLASH_STEDGEAI, "
                   "$STEDGEAI_CORE_DIR].")
@click.option("--st-runtime", "st_runtime", type=click.Path(file_okay=False),
              help="ST install holding the Neural-ART runtime ll_aton (ST Edge AI Core, STM32CubeN6, X-CUBE-AI) "
                   "[$ZOFLASH_ST_RUNTIME, else the stedgeai install].")
@click.option("--dry-run", is_flag=True, help="With --npu: print the commands the build runs, run nothing.")
@click.option("--check-boundary", is_flag=True,
              help="Build in the host simulation's boundary checksum (always with --npu): the device reports "
                   "whether its prefix gives the same activations (`zoflash monitor`).")
# --- end NPU ---
@training_options
def build(board: str, model_path: str, data_path: str | None, out_dir: str | None, prefix: str | None,
          no_compile: bool, boot: str | None, device_headers: tuple, npu_config: str | None, ethosu_driver: str | None,
          stedgeai: str | None, st_runtime: str | None, dry_run: bool, check_boundary: bool, **kwargs) -> None:
    """Generate the C bundle for a board (with the training loop if --data) and compile it."""
    from zoflash.build_options import build_settings

    tools = dict(ethosu_driver=ethosu_driver, stedgeai=stedgeai, st_runtime=st_runtime)
    if npu_config is None and (dry_run or any(tools.values())):
        raise click.UsageError("--ethosu-driver, --stedgeai, --st-runtime and --dry-run go with --npu")
    npu = None
    if npu_config is not None:  # --- NPU ---
        from zoflash.api import default_bundle_dir
        from zoflash.targets.boards import for_boot, resolve_board
        from zoflash.targets.npu import backend_for

        board_obj = for_boot(resolve_board(board)[0], boot or "dev")
        backend = backend_for(npu_config).load()
        backend.check(board_obj, npu_config)
        npu = backend.request(npu_config, tools)
        if dry_run:
            bundle_dir = out_dir or str(default_bundle_dir(Path(model_path), board_obj.id))
            for line in backend.dry_run(board_obj, npu, bundle_dir):
                _say(line)
            return

    _check_outputs(out=out_dir and str(Path(out_dir) / "manifest.json"))
    settings = build_settings(kwargs.get("project_file"), boot, device_headers)
    opts = _options_from(kwargs) if data_path else None
    if opts is None and any(v not in (None, (), False) for v in kwargs.values()):
        raise click.UsageError("training options need --data")
    if check_boundary and data_path is None:
        raise click.UsageError("--check-boundary needs --data (a training build)")
    _build_and_report(board, model_path, data_path, out_dir, prefix, no_compile, opts, settings, npu, check_boundary)


def _build_and_report(board: str, model_path: str, data_path: str | None, out_dir: str | None, prefix: str | None,
                      no_compile: bool, opts, settings=("dev", ()), npu=None, check_boundary: bool = False):
    """Generate (and compile) a bundle and print what it uses; returns (bundle, board).
    settings: (boot mode, vendor header folders), build_options.build_settings."""
    boot, device_headers = settings
    from zoflash import api
    from zoflash.targets.boards import resolve_board

    board_obj, note = resolve_board(board)
    if note:
        _say(f"board   {note}")
    result = None
    if no_compile:
        bundle = api.generate(model_path, board_obj.id, out_dir, prefix, data_path=data_path, options=opts,
                              boot=boot, device_headers=device_headers, npu=npu, check_boundary=check_boundary)
    else:
        result = api.build(model_path, board_obj.id, out_dir, prefix, data_path=data_path, options=opts,
                           boot=boot, device_headers=device_headers, npu=npu, check_boundary=check_boundary)
        bundle = result.bundle
    mem = bundle.manifest["memory"]
    _say(f"bundle  {bundle.path}  (board {bundle.board}, prefix {bundle.prefix})")
    _say(f"RAM     arena {mem['arena_bytes']} bytes (activations, inputs and outputs; plan {mem['plan_strategy']})")
    flash = f"flash   constant weights {mem['weights_bytes']} bytes"
    if result is not None and not board_obj.is_firmware:
        flash += f", code {result.code_bytes} bytes (host compiler, -O2)"
    _say(flash)
    if bundle.manifest.get("training"):
        _say_training_memory(bundle.manifest["training"])
        check = bundle.manifest["training"].get("boundary_check")
        if check:  # --- boundary checksum ---
            _say(f"check   boundary CRC-32 0x{check['crc32']:08X} of {check['sample']} ({check['bytes']} bytes, "
                 "by the host simulation): the device reports its own beside it")
        if bundle.manifest["training"].get("npu"):  # --- NPU ---
            from zoflash.targets.npu import backend_of_manifest

            npu_manifest = bundle.manifest["training"]["npu"]
            for line in backend_of_manifest(npu_manifest).load().describe(npu_manifest):
                _say(line)
    if result is not None and board_obj.is_firmware:
        _say_firmware(result, board_obj)
    return bundle, board_obj


def _say_firmware(result, board) -> None:
    outs = [str(p.relative_to(result.bundle.path)) for p in result.outputs]
    training = result.bundle.manifest.get("training") or {}
    app = training.get("data_source", {}).get("kind") == "app"
    kind = "firmware" if training and not app else "library"
    if app:  # ---- data sources: the trainer as a library; your firmware brings main() ----
        _say(f"library {', '.join(str(p.relative_to(result.bundle.path)) for p in result.outputs)} and zo_app.h "
             f"({board.toolchain.cc}); link your firmware with `make -C {result.bundle.path} app APP=main.c` "
             "(see examples/app_sensor)")
        return
    _say(f"{kind:<7} {', '.join(outs)}  ({board.toolchain.cc}, code {result.code_bytes} bytes)")
    for use in result.regions:
        _say(f"region  {use.describe()}")
    if result.bundle.manifest.get("boot") == "flash":  # --- flash boot ---
        from zoflash.targets.firmware_build import flash_boot_lines

        for line in flash_boot_lines(result):
            _say(line)


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False),
              help="Training data .npz (x_train, y_train, x_test, y_test).")
@click.option("--log", "log_path", default="run.jsonl", show_default=True, type=click.Path(dir_okay=False),
              help="JSONL log; the weights (<log>.weights.npz) and the plot (<log>.png) go next to it.")
@click.option("--engine", type=click.Choice(ENGINES), default=ENGINES[0], show_default=True,
              help="c: the generated firmware C on the host; reference: the independent Python reference.")
@click.option("--bundle", "bundle_dir", type=click.Path(file_okay=False), help="Keep the generated C here.")
@click.option("--no-plot", is_flag=True, help="Do not write the PNG.")
@training_options
def simulate(model_path: str, data_path: str, log_path: str, engine: str, bundle_dir: str | None,
             no_plot: bool, **kwargs) -> None:
    """Train on the host: the generated training C (or the Python reference), live."""
    _check_outputs(log=log_path, out=bundle_dir and str(Path(bundle_dir) / "manifest.json"))
    from zoflash.monitor.live_view import LiveView
    from zoflash.targets.simulate import simulate as run_simulation

    opts = _options_from(kwargs)
    _refuse_app(opts)
    quiet = logging.getLogger().level >= logging.ERROR
    _say(f"simulate {model_path} on {data_path} ({engine}): {opts.describe()}")
    result = run_simulation(model_path, data_path, opts, log_path, engine=engine, bundle_dir=bundle_dir,
                            view=LiveView(enabled=not quiet), plot=not no_plot)
    if result.headroom:
        from zoflash.training.headroom import describe

        _say(f"requant {describe(result.headroom)}")
    if not result.evals:  # the program stopped before its first evaluation (its log frames say why)
        why = [r["text"] for r in result.records if r.get("type") == "log"]
        raise ZoflashError("the training program ended without an evaluation"
                           + (f": {why[-1]}" if why else "") + f" (log {result.log_path})")
    first, last = result.evals[0], result.evals[-1]
    from zoflash.monitor.telemetry import has_accuracy

    accuracy = (f"accuracy {first['accuracy'] * 100:.1f}% -> {last['accuracy'] * 100:.1f}% "
                f"({(last['accuracy'] - first['accuracy']) * 100:+.1f} points), ") if has_accuracy(result.records) else ""
    _say(f"{accuracy}test loss {first['loss']:.4f} -> {last['loss']:.4f}"
         + (f", validation loss {first['val_loss']:.4f} -> {last['val_loss']:.4f}" if "val_loss" in last else ""))
    _say(f"log     {result.log_path}")
    _say(f"weights {result.weights_path}  (zoflash export --model {model_path} --weights {result.weights_path} "
         "--out trained.tflite)")
    if result.plot_path is not None:
        _say(f"plot    {result.plot_path}")
    elif not no_plot:
        _say("plot    skipped: matplotlib is not installed (pip install 'zoflash[plot]')")
    bad = {k: v for k, v in result.stats.items() if k in ("crc_errors", "dropped_bytes", "truncated", "malformed") and v}
    if bad:
        _say(f"warning: telemetry problems {bad}")


def _load_array(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ZoflashError(f"cannot read '{path}' as a .npy array: {exc}") from None


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", required=True, type=click.Path(dir_okay=False),
              help=".npy, [N, *input shape] of the model's input type (int8, uint8 or float32); float data for "
                   "an integer input is quantized with the input's parameters.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Output .npy.")
@click.option("--board", "board_id", default="host", show_default=True,
              help="host, or an emulated board (mps3-an547: the firmware build on QEMU, samples in order).")
def infer(model_path: str, inputs_path: str, out_path: str, board_id: str) -> None:
    """Run the generated C on every sample and write the outputs (output 0)."""
    _check_outputs(out=out_path)
    from zoflash import api

    if board_id == "host":
        y = api.infer(model_path, _load_array(inputs_path))
    else:  # --- emulated board (targets/emulated.py)
        y = api.infer_on_board(model_path, _load_array(inputs_path), board_id)[0]
    np.save(out_path, y)
    _say(f"wrote {out_path}: {y.dtype} {list(y.shape)}")


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False), help="Inputs .npy (as for infer).")
@click.option("--random", "n_random", type=int, help="Use N random inputs of the model's input type instead.")
@click.option("--seed", default=0, show_default=True, help="Seed for --random.")
def validate(model_path: str, inputs_path: str | None, n_random: int | None, seed: int) -> None:
    """Compare the generated C with the tflite-micro interpreter, bit for bit."""
    from zoflash import api

    if (inputs_path is None) == (n_random is None):
        raise click.UsageError("give exactly one of --inputs or --random N")
    if n_random is not None and n_random < 1:
        raise click.UsageError(f"--random {n_random}: give at least 1 input")
    x = _load_array(inputs_path) if inputs_path else api.random_inputs(api.load_model(model_path), n_random, seed)
    report = api.validate(model_path, x)
    for o in report.outputs:
        status = "OK" if o.mismatches == 0 else "MISMATCH"
        click.echo(f"{status}  output '{o.name}': {report.samples} samples, max abs diff {o.max_abs_diff:g}, "
                   f"{o.mismatches} of {o.elements} elements differ")
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.argument("model_path", type=click.Path(dir_okay=False))
def inspect(model_path: str) -> None:
    """Ops, tensors, quantization, memory plan and legality of a model (exit 2 if it is not supported)."""
    from zoflash import api

    report = api.inspect(model_path)
    click.echo(report.text)
    if not report.supported:
        sys.exit(2)


@cli.command()
@click.option("--keras", "keras_path", type=click.Path(dir_okay=False), help="A Keras model file (.keras, .h5).")
@click.option("--saved-model", "saved_model_dir", type=click.Path(file_okay=False), help="A SavedModel directory.")
@click.option("--tflite", "tflite_path", type=click.Path(dir_okay=False), help="A float .tflite model.")
@click.option("--calibration", "calibration_path", required=True, type=click.Path(dir_okay=False),
              help="Float samples in the model's input units: .npy [N, ...], or .npz with x (or x_train).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="The INT8 .tflite to write.")
@click.option("--io", "io_type", type=click.Choice(["int8", "uint8", "float"]), default="int8", show_default=True,
              help="The converted model's input and output type.")
def convert(keras_path, saved_model_dir, tflite_path, calibration_path, out_path, io_type) -> None:
    """Quantize a float model to full INT8 (batch size 1) with TensorFlow, and report on it."""
    _check_outputs(out=out_path)
    from zoflash.convert import convert as run_convert

    given = [(k, v) for k, v in (("keras", keras_path), ("saved-model", saved_model_dir), ("tflite", tflite_path))
             if v is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --keras, --saved-model or --tflite")
    (kind, source), = given
    report = run_convert(kind, source, calibration_path, out_path, io_type)
    click.echo(report.describe())


@cli.command()
@click.option("--markdown", is_flag=True, help="Markdown, as in docs/ops.md.")
def ops(markdown: bool) -> None:
    """The supported operators: their inputs, options, C kernels and constraints."""
    from zoflash.compiler.ops import docs

    click.echo(docs.markdown() if markdown else docs.text_table(), nl=False)


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False),
              help="The .tflite the weights were trained from.")
@click.option("--weights", "weights_path", type=click.Path(dir_okay=False),
              help="Trained weights file (<log>.weights.npz).")
@click.option("--port", help="Instead of --weights: take the weights from the board training on this serial port, "
                             "as they are now (ports as for `zoflash monitor`).")
@click.option("--baud", type=int, help=f"With --port: baud rate [the board's, or {DEFAULT_BAUD}].")
@click.option("--board", help="With --port: the board (its USB VID:PID for --port auto, its baud rate).")
@click.option("--save-weights", "save_weights_path", type=click.Path(dir_okay=False),
              help="With --port: also keep the weights taken from the board in this weights file.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Trained .tflite to write.")
@click.option("--allow-other-model", is_flag=True,
              help="Accept weights recorded for a model file with another SHA-256 (tensors must still match).")
@click.option("--headroom", type=int, help="The headroom bits the run trained with (the bundle manifest's "
                                           "training.options.headroom), for weights files that do not record them "
                                           "(written before protocol version 3): their tensors get scales x 2^H.")
@click.option("--select", type=click.Choice(("best", "last")),
              help="Which weights: best = the lowest validation loss (the device's last good snapshot), last = "
                   "the end of the run [best when the file holds them, else last].")
def export(model_path: str, weights_path: str | None, port: str | None, baud: int | None, board: str | None,
           save_weights_path: str | None, out_path: str, allow_other_model: bool, headroom: int | None,
           select: str | None) -> None:
    """Write trained weights (from a weights file or a running board) into a copy of the model."""
    _check_outputs(out=out_path, save_weights=save_weights_path)
    import tempfile

    from zoflash.training.export import export_weights

    if (weights_path is None) == (port is None):
        raise click.UsageError("give exactly one source of weights: --weights FILE or --port PORT")
    if save_weights_path and not port:
        raise click.UsageError("--save-weights goes with --port")
    with tempfile.TemporaryDirectory(prefix="zoflash-export-") as tmp:
        if port is not None:
            from zoflash.monitor.serial_monitor import dump_from_port

            usb_ids, baud = _serial_settings(board, baud)
            weights_path, st = dump_from_port(port, model_path, save_weights_path or f"{tmp}/device.weights.npz",
                                              baud=baud, usb_ids=usb_ids, allow_other_model=allow_other_model)
            _say(f"weights from {port} after {st['step']} steps ({'paused' if st['paused'] else 'training'}, "
                 f"q {st['q']}, {st['state']})" + (f": saved in {save_weights_path}" if save_weights_path else ""))
        report = export_weights(model_path, weights_path, out_path, allow_other_model=allow_other_model,
                                headroom=headroom, select=select)
    for p in report.tensors:
        _say(f"tensor {p.index:3d} '{p.name}' {p.dtype}{list(p.shape)}: {p.changed} of {p.count} values changed"
             + (", quantization scales rewritten" if p.scales is not None else ""))
    note = " (weights recorded for another model file)" if report.other_model else ""
    _say(f"wrote {report.out_path}: {len(report.tensors)} tensor(s), {report.values_changed} value(s) changed{note}, "
         f"{report.selected} weights" + (" (by validation loss)" if report.selected == "best" else ""))


CTRL_C_DUMP_TIMEOUT = 3.0  # seconds Ctrl-C waits for the device's weights before giving up
RECONNECT_OPTION = click.option(
    "--reconnect-timeout", type=float, default=RECONNECT_TIMEOUT, show_default=True,
    help="Seconds to keep retrying a serial port that disappeared before stopping (exit status 1).")


# --- checkpoint and resume
def checkpoint_options(f):
    f = click.option("--resume", "resume_path", type=click.Path(dir_okay=False),
                     help="Send this checkpoint to the device first: training continues from its step.")(f)
    return click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False),
                        help="Keep the latest valid checkpoint the device sends (build with --checkpoint-every N) "
                             "in this file.")(f)


def _serial_settings(board: str | None, baud: int | None) -> tuple[list | None, int]:
    """USB ids for --port auto and the baud rate: from the board's data when --board is given."""
    if not board:
        return None, baud or DEFAULT_BAUD
    from zoflash.monitor.serial_monitor import board_console

    con = board_console(board)
    if con.note:
        _say(con.note)
    return con.usb_ids, baud or con.baud


@cli.command()
@click.option("--port", required=True,
              help="The board's serial port: /dev/ttyACM0, COM3, socket://HOST:PORT, rfc2217://HOST:PORT, loop://, "
                   "or auto (found by USB VID:PID).")
@click.option("--baud", type=int, help=f"Baud rate [the board's, or {DEFAULT_BAUD}].")
@click.option("--board", help="The board (id or family): its USB VID:PID for --port auto, its baud rate "
                              "[--port auto: any ST-LINK, vendor 0483].")
@click.option("--log", "log_path", default="run.jsonl", show_default=True, type=click.Path(dir_okay=False),
              help="JSONL log, as `zoflash simulate` writes it (plus the monitor's own notes).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write step and evaluation records as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="At the end, plot loss, accuracy and q of the last run into this PNG.")
@click.option("--model", "model_path", type=click.Path(dir_okay=False),
              help="The model the firmware trains: the weights it sends at the end go to <log>.weights.npz.")
@click.option("--until-done/--forever", default=True, show_default=True,
              help="Stop when the device reports done, or keep watching (across device restarts) until Ctrl-C.")
@click.option("--timeout", type=float, help="Stop after this many seconds.")
@click.option("--wait", "connect_wait", type=float, default=5.0, show_default=True,
              help="Seconds to keep trying to open the port at the start.")
@click.option("--feed", "feed_path", type=click.Path(dir_okay=False),
              help="--data-source stream firmware: feed it the training split of this .npz (needs --model; the loss "
                   "and target from zoflash.toml).")
@RECONNECT_OPTION
@checkpoint_options
def monitor(port: str, baud: int | None, board: str | None, log_path: str, csv_path: str | None, plot_path: str | None,
            model_path: str | None, until_done: bool, timeout: float | None, connect_wait: float,
            feed_path: str | None, reconnect_timeout: float, checkpoint_path: str | None,
            resume_path: str | None) -> int:
    """Watch a training run on a board: live view, log, and the trained weights at the end.

    Exit status: 0 done (or --timeout/Ctrl-C with --forever), 1 stopped before done (timeout, port
    lost), 3 the device reported a fault."""
    _check_outputs(log=log_path, csv=csv_path, plot=plot_path, checkpoint=checkpoint_path)
    usb_ids, baud = _serial_settings(board, baud)
    feeder = None
    if feed_path is not None:  # ---- data sources ----
        if model_path is None:
            raise click.UsageError("--feed quantizes the samples for the model: give --model M.tflite too")
        from zoflash.monitor.feed import load_feeder

        feeder = load_feeder(model_path, feed_path)
        _say(f"feed    {feed_path}: {len(feeder.records)} training samples of {len(feeder.records[0])} bytes, "
             "in file order, on the device's request")
    return _monitor_and_report(port, baud, usb_ids, log_path, csv_path, plot_path, model_path, until_done, timeout,
                               connect_wait, reconnect_timeout=reconnect_timeout, feeder=feeder,
                               checkpoint_path=checkpoint_path, resume_path=resume_path)


def _monitor_and_report(port: str, baud: int, usb_ids, log_path: str, csv_path: str | None, plot_path: str | None,
                        model_path: str | None, until_done: bool, timeout: float | None, connect_wait: float,
                        headroom: int | None = None, reconnect_timeout: float | None = None, ended=None, feeder=None,
                        checkpoint_path: str | None = None, resume_path: str | None = None,
                        options_sha256: str | None = None) -> int:
    from zoflash.monitor.live_view import LiveView
    from zoflash.monitor.serial_monitor import DeviceError, KeyCommands, Monitor, PortError

    quiet = logging.getLogger().level >= logging.ERROR
    view = LiveView(enabled=not quiet)
    mon = Monitor(port, baud=baud, usb_ids=usb_ids, log_path=log_path, csv_path=csv_path,
                  plot_path=plot_path, model_path=model_path, view=view, headroom=headroom,
                  reconnect_timeout=reconnect_timeout, ended=ended, feeder=feeder, checkpoint_path=checkpoint_path)
    try:
        mon.connect(connect_wait)
        _say(f"monitor {mon.device} at {baud} baud ({'until done' if until_done else 'until Ctrl-C'})")
        if resume_path is not None:
            ckpt = mon.restore(resume_path, options_sha256=options_sha256)
            _say(f"resumed from {resume_path}: training continues after step {ckpt.step}")
        with KeyCommands(sys.stdin, view.message) as keys:
            if keys.active:
                _say(KeyCommands.HELP)
            mon.run(until_done=until_done, timeout=timeout, on_tick=keys)
        if mon.interrupted and mon.done is None and mon.stopped is None and model_path is not None:
            _say(f"Ctrl-C: asking the device for its weights ({CTRL_C_DUMP_TIMEOUT:g} s; Ctrl-C again to skip)")
            try:
                mon.dump(timeout=CTRL_C_DUMP_TIMEOUT)
            except (DeviceError, PortError) as exc:
                _say(f"no weights from the device: {exc}")
            except KeyboardInterrupt:
                _say("no weights from the device: skipped")
    finally:
        res = mon.close()
    end = (f"done ({res.done['reason']}) after {res.done['steps']} steps" if res.done else
           f"stopped: {res.stopped}" if res.stopped else
           "stopped (Ctrl-C)" if res.interrupted else f"stopped after {timeout:g} s" if res.timed_out else "stopped")
    _say(f"{end}; {res.segments} run segment(s), {res.reconnects} reconnection(s)")
    bad = {k: v for k, v in res.stats.items()
           if k in ("crc_errors", "dropped_bytes", "truncated", "malformed", "seq_gaps") and v}
    if bad:
        _say(f"telemetry problems (every damaged frame was dropped): {bad}")
    _say(f"log     {res.log_path}" + (f", csv {res.csv_path}" if res.csv_path else ""))
    if res.weights_path is not None:
        _say(f"weights {res.weights_path}  (zoflash export --model {model_path} --weights {res.weights_path} "
             "--out trained.tflite)")
    elif res.weights_error:
        _say(f"weights not saved: {res.weights_error}")
    elif model_path is None and res.done is not None:
        _say("weights not saved: give --model M.tflite to keep the weights the device sent")
    if res.plot_path is not None:
        _say(f"plot    {res.plot_path}")
    if checkpoint_path is not None:
        _say(f"checkpoint {checkpoint_path} (step {mon.checkpoint.step}; resume with --resume {checkpoint_path})"
             if mon.checkpoint is not None else "checkpoint none arrived (was the firmware built with --checkpoint-every?)")
    if res.faulted:
        return 3
    return 1 if res.stopped or (until_done and res.done is None and res.timed_out) else 0


@cli.command()
@click.option("--bundle", "bundle_dir", required=True, type=click.Path(file_okay=False),
              help="Bundle directory (from `zoflash build --board BOARD --data ...`): its build/ holds the firmware.")
@click.option("--method", help="A [[flash]] entry of the board, or a method (qemu, stm32cubeprogrammer, pyocd, "
                               "openocd) used by one entry [the board's first; see `zoflash boards show BOARD`].")
@click.option("--stop", is_flag=True, help="qemu: stop the emulator started for this bundle.")
@click.option("--dry-run", is_flag=True, help="Print the boot switch positions and the exact commands; run nothing.")
@click.option("--pack", "pack_path", type=click.Path(dir_okay=False),
              help="pyocd: the part's CMSIS pack file (.pack), e.g. when offline [from cmsis-pack-manager's cache].")
@click.option("--port", "tcp_port", type=int, help="qemu: local TCP port for the console UART [a free one].")
@click.option("--timeout", type=float, default=DEFAULT_QEMU_TIMEOUT, show_default=True,
              help="qemu: stop the emulator after this many seconds.")
def flash(bundle_dir: str, method: str | None, stop: bool, dry_run: bool, pack_path: str | None,
          tcp_port: int | None, timeout: float) -> None:
    """Put a bundle's firmware on its board (or start it in QEMU); prints the boot switch positions first.

    STM32CubeProgrammer is found through $STM32_PRG_PATH (its bin folder), else STM32_Programmer_CLI
    on PATH, else ST's default install folders."""

    from zoflash.targets.runners import FlashOptions, flash_bundle
    from zoflash.targets.runners.qemu import stop_qemu

    if stop:
        if dry_run or pack_path or method:
            raise click.UsageError("--stop takes only --bundle")
        stop_qemu(bundle_dir, say=_say)
        return
    opts = FlashOptions(pack=Path(pack_path) if pack_path else None, port=tcp_port, timeout=timeout)
    flash_bundle(bundle_dir, method, opts, dry_run=dry_run, say=_say)


@cli.command()
@click.option("--board", required=True, help="Board id or family (see `zoflash boards`).")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False),
              help="Training data .npz (x_train, y_train, x_test, y_test).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Bundle directory [generated/<model>-<board>].")
@click.option("--method", help="Flash method or [[flash]] entry of the board [the board's first].")
@click.option("--port", help="Serial port of a real board [auto: by the board's USB VID:PID]; QEMU gives its own.")
@click.option("--baud", type=int, help="Baud rate [the board's].")
@click.option("--log", "log_path", default="run.jsonl", show_default=True, type=click.Path(dir_okay=False),
              help="JSONL log; the weights (<log>.weights.npz) and the plot (<log>.png) go next to it.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write step and evaluation records as CSV.")
@click.option("--timeout", type=float, help="Stop monitoring after this many seconds.")
@click.option("--check-boundary", is_flag=True,  # --- boundary checksum
              help="Build in the host simulation's boundary checksum: the run says whether the device's prefix "
                   "agrees with it.")
@RECONNECT_OPTION
@checkpoint_options
@training_options
def run(board: str, model_path: str, data_path: str, out_dir: str | None, method: str | None, port: str | None,
        baud: int | None, log_path: str, csv_path: str | None, timeout: float | None, check_boundary: bool,
        reconnect_timeout: float, checkpoint_path: str | None, resume_path: str | None, **kwargs) -> int:
    """Build, flash and monitor: train on a board (or on the emulated Cortex-M55) from one command.

    Stops at once when the emulator ends or the device reports a fault (exit status 3)."""
    _check_outputs(log=log_path, csv=csv_path, out=out_dir and str(Path(out_dir) / "manifest.json"),
                   checkpoint=checkpoint_path)
    if resume_path is not None:  # a damaged file is refused before building
        from zoflash.monitor.checkpoint import load_checkpoint

        load_checkpoint(resume_path)

    from zoflash.build_options import build_settings
    from zoflash.targets.boards import resolve_board
    from zoflash.targets.runners import FlashOptions, flash_bundle
    from zoflash.targets.runners.qemu import emulator_ended, stop_qemu

    settings = build_settings(kwargs.get("project_file"))  # zoflash.toml [build]: boot, device_headers
    opts = _options_from(kwargs)
    _refuse_app(opts)
    if not resolve_board(board)[0].is_firmware:
        raise click.UsageError(f"board '{board}' runs no firmware; use `zoflash simulate` for the host")
    bundle, board_obj = _build_and_report(board, model_path, data_path, out_dir, None, False, opts, settings,
                                          check_boundary=check_boundary)
    qemu_limit = (timeout or DEFAULT_QEMU_TIMEOUT) + 60.0
    flashed = flash_bundle(bundle.path, method, FlashOptions(timeout=qemu_limit), say=_say)
    try:
        serial = flashed.serial_url or port or "auto"
        if serial == "auto":
            usb_ids, baud = _serial_settings(board_obj.id, baud)
        else:
            usb_ids, baud = None, baud or int((board_obj.console or {}).get("baud", DEFAULT_BAUD))
        ended = emulator_ended(bundle.path) if flashed.pid is not None else None
        feeder = None
        if opts.data_source == "stream":  # ---- data sources: the host feeds the training split ----
            from zoflash.monitor.feed import load_feeder

            feeder = load_feeder(model_path, data_path, opts)
        return _monitor_and_report(serial, baud, usb_ids, log_path, csv_path, str(Path(log_path).with_suffix(".png")),
                                   model_path, True, timeout, 10.0,
                                   headroom=bundle.manifest["training"]["options"]["headroom"],
                                   reconnect_timeout=reconnect_timeout, ended=ended, feeder=feeder,
                                   checkpoint_path=checkpoint_path, resume_path=resume_path,
                                   options_sha256=bundle.manifest["training"]["options_sha256"])
    finally:
        if flashed.serial_url is not None and flashed.pid is not None:
            notes: list[str] = []
            if not stop_qemu(bundle.path, say=notes.append):  # normally the firmware has exited QEMU already
                _say("qemu    the firmware ended; " + notes[-1].split(": ", 1)[-1].replace("[zoflash] ", "")
                     if notes else "qemu    ended")
            else:
                _say(notes[-1])


@cli.command()
@click.option("--clear", is_flag=True, help="Remove every cached object.")
def cache(clear: bool) -> None:
    """The shared cache of compiled runtime objects (where it is, how big; --clear empties it)."""
    from zoflash.targets.build_cache import CACHE_ENV, ObjectCache, cache_root

    root = cache_root()
    if root is None:
        click.echo(f"the object cache is off ({CACHE_ENV}={os.environ.get(CACHE_ENV)})")
        return
    store = ObjectCache(root)
    if clear:
        click.echo(f"removed {store.clear()} cached objects from {root}")
        return
    n, size = store.usage()
    click.echo(f"{root}: {n} cached objects, {size} bytes (set {CACHE_ENV} to move it, {CACHE_ENV}=off to disable)")


@cli.command()
@click.argument("log_a", type=click.Path(dir_okay=False, exists=True))
@click.argument("log_b", type=click.Path(dir_okay=False, exists=True))
def compare(log_a: str, log_b: str) -> int:
    """Compare two training logs (e.g. a board's and the host simulation's), time fields aside."""
    from zoflash.monitor.session import comparable, read_log

    a, b = comparable(read_log(log_a)), comparable(read_log(log_b))
    for k, (ra, rb) in enumerate(zip(a, b)):
        if ra != rb:
            keys = sorted(key for key in set(ra) | set(rb) if ra.get(key) != rb.get(key))
            click.echo(f"DIFFERENT at record {k} ({ra.get('type')}): " +
                       ", ".join(f"{key}: {ra.get(key)!r} vs {rb.get(key)!r}" for key in keys))
            return 1
    if len(a) != len(b):
        click.echo(f"DIFFERENT: {len(a)} vs {len(b)} records (identical up to the shorter)")
        return 1
    steps = sum(r["type"] == "step" for r in a)
    click.echo(f"IDENTICAL: {len(a)} records ({steps} steps), every field but the times")
    return 0


# --- zoflash split ---
@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option("--at", "tensor", help="Cut at this tensor (its name, as `zoflash inspect` shows it) [where the "
                                     "training plan cuts].")
@click.option("--config", "project_file", type=click.Path(dir_okay=False),
              help="Project file with a [train] table [./zoflash.toml if present].")
@click.option("--train", help=f"Trainable layers, as `zoflash build` takes them [{spec.TRAIN_DEFAULTS['train']}].")
@click.option("--max-params", type=int, help="Cap on trainable parameters (drops the earliest layers).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for prefix.tflite and suffix.tflite.")
def split(model_path: str, tensor: str | None, project_file: str | None, train: str | None, max_params: int | None,
          out_dir: str) -> None:
    """Cut a model in two .tflite files: the frozen prefix and the trainable suffix."""
    from zoflash import api
    from zoflash.training.options import make_options

    if tensor is not None and (train is not None or max_params is not None):
        raise click.UsageError("give either --at or the training options (--train, --max-params), not both")
    _check_outputs(out=str(Path(out_dir) / "prefix.tflite"))
    opts = None if tensor is not None else make_options(project_file, train=train, max_params=max_params)
    result = api.split_model(model_path, out_dir, tensor, opts)
    _say(f"cut     at '{result.tensor}'")
    _say(f"prefix  {result.prefix_path}  ({len(result.prefix_ops)} ops)")
    _say(f"suffix  {result.suffix_path}  ({len(result.suffix_ops)} ops)")
# --- end zoflash split ---


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (testable without a subprocess)."""
    try:
        rv = cli.main(args=argv, prog_name="zoflash", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except SystemExit as e:
        return int(e.code or 0)
    return rv if isinstance(rv, int) else 0  # click returns ctx.exit() codes in this mode


if __name__ == "__main__":
    sys.exit(main())
