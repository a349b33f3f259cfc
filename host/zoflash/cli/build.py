"""`zoflash build`: generate a board's bundle (with training when given data) and compile it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from zoflash import api
from zoflash.cli.common import check_outputs, options_from, say, training_options
from zoflash.targets.boards import for_boot, resolve_board
from zoflash.targets.build_options import build_settings
from zoflash.targets.npu import backend_for
from zoflash.workflows.report import bundle_lines


@click.command()
@click.option("--board", default="host", show_default=True, help="Board id or family name (see `zoflash boards`).")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option(
    "--data",
    "data_path",
    type=click.Path(dir_okay=False),
    help="Training data .npz (x_train, y_train, x_test, y_test): adds on-device training.",
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Bundle directory [generated/<model>-<board>]."
)
@click.option(
    "--prefix",
    help="C name prefix for the model's files and functions: ASCII letters, digits and '_', starting with "
    "a letter, at most 48 characters, not 'zo' or 'zo_...' (the runtime's) [from the model file name].",
)
@click.option("--no-compile", is_flag=True, help="Only generate the bundle; do not run the compiler.")
@click.option(
    "--boot",
    type=click.Choice(("dev", "flash")),
    help="Memory plan for a boot mode: dev (the debugger loads everything into RAM) or flash (a signed "
    "FSBL image, large weights and data read in place from the external flash) [dev; zoflash.toml "
    "[build] boot].",
)
@click.option(
    "--device-headers",
    "device_headers",
    multiple=True,
    type=click.Path(),
    help="Compile the port against the vendor's headers from this checkout (repeatable: e.g. "
    "cmsis-device-n6 and Arm's CMSIS core, or STM32CubeN6) [zoflash.toml [build] device_headers].",
)
@click.option(
    "--npu",
    "npu_config",
    metavar="CONFIG",
    help="Run the frozen prefix on the board's NPU: an Ethos-U configuration (ethos-u55-128, ...; "
    "needs Vela and Arm's Ethos-U driver) or neural-art (STM32N6; needs ST Edge AI Core and "
    "ST's runtime); `zoflash boards show ID` lists the board's. Needs --data.",
)
@click.option(
    "--ethosu-driver",
    "ethosu_driver",
    type=click.Path(file_okay=False),
    help="Checkout of Arm's Ethos-U core driver [$ZOFLASH_ETHOSU_DRIVER].",
)
@click.option(
    "--stedgeai",
    "stedgeai",
    type=click.Path(),
    help="ST Edge AI Core: the stedgeai program or its install folder [$ZOFLASH_STEDGEAI, $STEDGEAI_CORE_DIR].",
)
@click.option(
    "--st-runtime",
    "st_runtime",
    type=click.Path(file_okay=False),
    help="ST install holding the Neural-ART runtime ll_aton (ST Edge AI Core, STM32CubeN6, X-CUBE-AI) "
    "[$ZOFLASH_ST_RUNTIME, else the stedgeai install].",
)
@click.option("--dry-run", is_flag=True, help="With --npu: print the commands the build runs, run nothing.")
@click.option(
    "--check-boundary",
    is_flag=True,
    help="Build in the host simulation's boundary checksum (always with --npu): the device reports "
    "whether its prefix gives the same activations (`zoflash monitor`).",
)
@training_options
def build(
    board: str,
    model_path: str,
    data_path: str | None,
    out_dir: str | None,
    prefix: str | None,
    no_compile: bool,
    boot: str | None,
    device_headers: tuple,
    npu_config: str | None,
    ethosu_driver: str | None,
    stedgeai: str | None,
    st_runtime: str | None,
    dry_run: bool,
    check_boundary: bool,
    **kwargs,
) -> None:
    """Generate the C bundle for a board (with the training loop if --data) and compile it."""
    tools = dict(ethosu_driver=ethosu_driver, stedgeai=stedgeai, st_runtime=st_runtime)
    if npu_config is None and (dry_run or any(tools.values())):
        raise click.UsageError("--ethosu-driver, --stedgeai, --st-runtime and --dry-run go with --npu")
    npu = None
    if npu_config is not None:
        board_obj = for_boot(resolve_board(board)[0], boot or "dev")
        backend = backend_for(npu_config).load()
        backend.check(board_obj, npu_config)
        npu = backend.request(npu_config, tools)
        if dry_run:
            bundle_dir = out_dir or str(api.default_bundle_dir(Path(model_path), board_obj.id))
            for line in backend.dry_run(board_obj, npu, bundle_dir):
                say(line)
            return

    check_outputs(out=out_dir and str(Path(out_dir) / "manifest.json"))
    settings = build_settings(kwargs.get("project_file"), boot, device_headers)
    opts = options_from(kwargs) if data_path else None
    if opts is None and any(v not in (None, (), False) for v in kwargs.values()):
        raise click.UsageError("training options need --data")
    if check_boundary and data_path is None:
        raise click.UsageError("--check-boundary needs --data (a training build)")
    boot, device_headers = settings
    board_obj, note = resolve_board(board)
    if note:
        say(f"board   {note}")
    args: dict[str, Any] = dict(
        data_path=data_path,
        options=opts,
        boot=boot,
        device_headers=device_headers,
        npu=npu,
        check_boundary=check_boundary,
        say=say,
    )
    if no_compile:
        bundle, result = api.generate(model_path, board_obj.id, out_dir, prefix, **args), None
    else:
        result = api.build(model_path, board_obj.id, out_dir, prefix, **args)
        bundle = result.bundle
    for line in bundle_lines(bundle, result, board_obj):
        say(line)
