"""`zoflash fleet`: many boards learn together through an MQTT broker (serve, join, simulate)."""

from __future__ import annotations

import click

from zoflash.cli.common import options_from, say, training_options
from zoflash.monitor.fleet_view import FleetView
from zoflash.monitor.serialport import DEFAULT_BAUD
from zoflash.workflows.fleet import DEFAULT_MERGE, DEFAULT_ROUND_STEPS, DEFAULT_SERVER_LR, MERGE_RULES

BROKER_HELP = "auto: start Mosquitto on loopback for this fleet; or mqtt://HOST:PORT of a running broker."


def fresh_out(out_dir: str | None, default: str) -> str:
    """The output folder: `out_dir`, or `default` (then default-2, -3... when an earlier fleet's log
    is there: nothing of an earlier run is overwritten)."""
    from pathlib import Path

    base = out_dir or default
    out, k = Path(base), 1
    while (out / "fleet.jsonl").exists():
        k += 1
        out = Path(f"{base}-{k}")
    if str(out) != base:
        say(f"outputs {base}/ holds an earlier fleet's log: writing {out}/ instead")
    return str(out)


def _fleet_options(f):
    for o in reversed(
        [
            click.option("--rounds", type=click.IntRange(1), required=True, help="Rounds to run."),
            click.option(
                "--steps-per-round",
                "steps",
                type=click.IntRange(1),
                default=DEFAULT_ROUND_STEPS,
                show_default=True,
                help="Local training steps per device per round.",
            ),
            click.option(
                "--merge",
                type=click.Choice(MERGE_RULES),
                default=DEFAULT_MERGE,
                show_default=True,
                help="mean: the devices' updates replayed one after another, each scaled by 1 / the devices that "
                "reported (times --server-lr); sum: at full rate (docs/guides/fleet.md compares them).",
            ),
            click.option(
                "--server-lr",
                type=click.FloatRange(min=0.0, min_open=True, max=1024.0),
                default=DEFAULT_SERVER_LR,
                show_default=True,
                help="The merged round moves this many times the merge rule's step (mean: 1 is FedAvg).",
            ),
            click.option(
                "--round-timeout",
                type=click.FloatRange(min=1.0),
                default=300.0,
                show_default=True,
                help="Seconds a round waits for uploads; it then merges those that came.",
            ),
            click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Logs and plot here."),
        ]
    ):
        f = o(f)
    return f


@click.group()
def fleet() -> None:
    """Fleet learning: many boards train together, a few hundred bytes per device per round.

    Each round every device trains from the global weights on its own data and uploads its update
    log (seeds and binary16 coefficients, not weights); the aggregator merges the uploads and every
    device applies the same merged log, ending bit-identical to the global weights (checked by CRC).
    See docs/guides/fleet.md."""


@fleet.command()
@click.option("--model", "model_path", type=click.Path(dir_okay=False, exists=True), help="The devices' .tflite.")
@click.option(
    "--bundle",
    "bundle_dir",
    type=click.Path(file_okay=False, exists=True),
    help="Instead of --model: the fleet firmware's training bundle (its manifest names the model and options).",
)
@click.option("--devices", type=click.IntRange(1), default=1, show_default=True, help="Devices to wait for.")
@click.option("--broker", default="auto", show_default=True, help=BROKER_HELP)
@click.option("--fleet", "fleet_name", default="default", show_default=True, help="The fleet's name (topics).")
@_fleet_options
@training_options
def serve(
    model_path, bundle_dir, devices, broker, fleet_name, rounds, steps, merge, server_lr, round_timeout, out_dir, **kw
):
    """Run the aggregator: announce rounds, merge the uploads, publish the merged logs.

    The devices join with `zoflash fleet join`.  Ends with the fleet's line: devices, rounds,
    bytes per device per round up and down, whether every replica stayed identical, accuracy."""
    from dataclasses import fields

    from zoflash import api
    from zoflash.workflows.fleet import serve_fleet

    if (model_path is None) == (bundle_dir is None):
        raise click.UsageError("give the devices' model once: --model M.tflite or --bundle DIR")
    opts = options_from(kw)
    if bundle_dir is not None:
        found, built = api.model_of_bundle(bundle_dir)
        model_path = str(found)
        names = {f.name for f in fields(opts)}
        opts = api.make_options(None, **{k: v for k, v in built.items() if k in names and k != "sched"})
    view = FleetView()
    out_dir = fresh_out(out_dir, "fleet") if out_dir else None
    line = serve_fleet(
        model_path,
        opts,
        devices,
        rounds,
        steps,
        broker,
        fleet_name,
        merge,
        server_lr,
        round_timeout,
        out_dir,
        view,
        say,
    )
    say(line)


@fleet.command()
@click.option(
    "--port", help="The device's serial port: /dev/ttyACM0, COM3, socket://HOST:PORT (QEMU), rfc2217://HOST:PORT."
)
@click.option("--baud", type=int, help=f"Baud rate [{DEFAULT_BAUD}].")
@click.option("--twin", is_flag=True, help="Instead of --port: the host twin (the firmware built for this host).")
@click.option("--model", "model_path", type=click.Path(dir_okay=False, exists=True), help="--twin: the .tflite.")
@click.option("--data", "data_path", type=click.Path(dir_okay=False, exists=True), help="--twin: its data .npz.")
@click.option("--broker", required=True, help="mqtt://HOST:PORT of the fleet's broker.")
@click.option("--fleet", "fleet_name", default="default", show_default=True, help="The fleet's name (topics).")
@click.option("--name", help="This device's id in the fleet [the port's name, or twin].")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), help="The device's JSONL log.")
@training_options
def join(port, baud, twin, model_path, data_path, broker, fleet_name, name, log_path, **kw):
    """Be a device of a fleet: train each round, upload, apply the merged round.

    The firmware must be built with --mode fleet (it waits for its rounds).  A device that joins
    late first replays the merged rounds it missed."""
    from zoflash.workflows.fleet import join_fleet

    if twin == (port is not None):
        raise click.UsageError("give the device once: --port P, or --twin with --model and --data")
    if twin and (model_path is None or data_path is None):
        raise click.UsageError("--twin needs --model and --data")
    opts = options_from(kw)
    res = join_fleet(
        broker,
        fleet_name,
        name or ("twin" if twin else port.rsplit("/", 1)[-1]),
        port=port,
        baud=baud or DEFAULT_BAUD,
        twin=(model_path, data_path, opts) if twin else None,
        log_path=log_path,
        say=say,
    )
    say(
        f"fleet   {res.device}: {res.rounds_trained} rounds trained, {res.rounds_merged} merged, "
        f"{res.up_bytes} bytes up, {res.down_bytes} down, weights crc {res.crc or 0:#010x}"
    )


@fleet.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False), help="Training data .npz.")
@click.option("--devices", type=click.IntRange(1), required=True, help="Host twins in the fleet.")
@click.option(
    "--non-iid",
    default="dirichlet:0.5",
    show_default=True,
    help="How the training data is split: iid, dirichlet:ALPHA (class shares per device), labels:K (K classes each).",
)
@click.option(
    "--emulated",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Of the devices, this many (the last) run the fleet firmware on the emulated Cortex-M55 (QEMU mps3-an547).",
)
@click.option("--cluster", help="tcp://HOST:8786: run the devices on this Dask cluster [local workers].")
@click.option("--broker", default="auto", show_default=True, help=BROKER_HELP)
@click.option("--no-centralised", is_flag=True, help="Skip the centralised ZO run the accuracy is compared with.")
@click.option(
    "--drill",
    multiple=True,
    help="A fault to rehearse: drop|duplicate|corrupt|late-upload|late-join:DEVICE@ROUND, or broker-restart@ROUND.",
)
@_fleet_options
@training_options
def simulate(
    model_path,
    data_path,
    devices,
    non_iid,
    emulated,
    cluster,
    broker,
    no_centralised,
    drill,
    rounds,
    steps,
    merge,
    server_lr,
    round_timeout,
    out_dir,
    **kw,
):
    """A simulated fleet: N host twins, each with a non-IID slice of the data, on Dask, through the broker.

    Ends with: fleet: devices N, rounds R, uplink U bytes/device/round, downlink W bytes/device/round,
    replicas identical yes|no, accuracy A% (centralised C%, no adaptation Z%)."""
    from zoflash.workflows.fleet_simulate import fleet_simulate

    opts = options_from(kw)
    view = FleetView()
    sim = fleet_simulate(
        model_path,
        data_path,
        opts,
        devices,
        rounds,
        steps,
        non_iid=non_iid,
        merge=merge,
        server_lr=server_lr,
        cluster=cluster,
        broker=broker,
        out_dir=fresh_out(out_dir, "fleet"),
        centralised=not no_centralised,
        drills=tuple(drill),
        round_timeout=round_timeout,
        emulated=emulated,
        on_update=view.update,
        say=view.message,
    )
    view.update(
        sim.serve.devices, {"fleet": sim.fleet, "round": rounds, "rounds": rounds, "crc": sim.serve.crc}, force=True
    )
    say(f"log     {sim.out_dir / 'fleet.jsonl'} (devices: {sim.out_dir / 'devices'})")
    if sim.plot_path:
        say(f"plot    {sim.plot_path}")
    say(
        f"bytes   FedAvg of int8 deltas of the same tensors: {sim.fedavg_bytes} bytes/device/round, "
        f"{sim.fedavg_bytes / max(sim.uplink, 1.0):.0f}x this fleet's uplink"
    )
    say(sim.summary())
