"""The build report: what a bundle uses (RAM, flash, training memory, NPU, firmware regions), as the
lines `zoflash build` and `zoflash run` print."""

from __future__ import annotations

from zoflash.targets.firmware_build import flash_boot_lines
from zoflash.targets.npu import backend_of_manifest
from zoflash.training.headroom import describe as describe_headroom


def opts_of(training: dict) -> dict:
    """The training options as the manifest holds them."""
    return training["options"]


def bundle_lines(bundle, result=None, board=None) -> list[str]:
    """The report of a bundle (and of its build `result` for `board`, when compiled)."""
    out: list[str] = []
    say = out.append
    mem = bundle.manifest["memory"]
    say(f"bundle  {bundle.path}  (board {bundle.board}, prefix {bundle.prefix})")
    say(f"RAM     arena {mem['arena_bytes']} bytes (activations, inputs and outputs; plan {mem['plan_strategy']})")
    if mem.get("state_bytes"):
        say(f"RAM     model state {mem['state_bytes']} bytes (variable tensors, beside the arena, kept across invokes)")
    flash = f"flash   constant weights {mem['weights_bytes']} bytes"
    if result is not None and not board.is_firmware:
        flash += f", code {result.code_bytes} bytes (host compiler, -O2)"
    say(flash)
    training = bundle.manifest.get("training")
    if training:
        out += training_memory_lines(training)
        check = training.get("boundary_check")
        if check:
            say(
                f"check   boundary CRC-32 0x{check['crc32']:08X} of {check['sample']} ({check['bytes']} bytes, "
                "by the host simulation): the device reports its own beside it"
            )
        if training.get("npu"):
            npu_manifest = training["npu"]
            out += list(backend_of_manifest(npu_manifest).load().describe(npu_manifest))
    if result is not None and board.is_firmware:
        out += firmware_lines(result, board)
    return out


def training_memory_lines(training: dict) -> list[str]:
    out: list[str] = []
    say = out.append
    mem = training["memory"]
    say(
        f"train   {training['trainable_params']} parameters in {len(training['tensors'])} tensor(s) "
        f"(layers {', '.join(map(str, training['layers']))}), suffix from kernel call {training['split_step']}; "
        f"{training['clamped_weights']} weight(s) clamped to +-(127 - eps)"
    )
    if training.get("headroom"):
        say(f"requant {describe_headroom(training['headroom'])}")
    say(
        f"RAM     training beyond inference {training['memory_beyond_inference_bytes']} bytes: trainable tensors "
        f"(their RAM copy) {mem['trainable_bytes_in_ram']}, residuals {mem['residual_bytes']}, feature cache "
        f"{mem['feature_cache_bytes']}, statistics {mem['statistics_bytes']}, snapshot {mem['snapshot_bytes']}"
    )
    if mem.get("ab_slots_bytes"):  # --mode continual: its memory beside the training loop's
        say(
            f"RAM     continual (training ring {opts_of(training)['buffer']} samples "
            f"{mem['training_ring_bytes']}, held-back ring {opts_of(training)['holdout']} samples "
            f"{mem['holdout_ring_bytes']}, candidate {mem['candidate_bytes']}, factory {mem['factory_bytes']}, "
            f"A/B slots {mem['ab_slots_bytes']}"
            + (
                f" in the NOR ({training['continual']['slots_in']}, not RAM)"
                if training.get("continual", {}).get("slots_in")
                else ""
            )
            + "); samples arrive one at a time"
        )
    elif mem.get("stream_buffer_bytes"):
        ds = training["data_source"]
        who = "your application pushes" if ds["kind"] == "app" else "the host feeds"
        say(
            f"RAM     stream ring {mem['stream_buffer_bytes']} bytes ({ds['buffer']} samples of "
            f"{sum(ds['record_bytes'].values())} bytes; {who} {ds['refresh']} per step; test split embedded)"
        )
    data = training["data"]
    if training.get("data_source"):
        say(
            f"flash   validation and test data {data['n_val']} + {data['n_test']} samples embedded (the training "
            "split is not built in), "
            f"bias eps tables {mem['eps_bytes']} bytes"
        )
        return out
    say(
        f"flash   data {data['bytes']} bytes ({data['n_train']} training, {data['n_val']} validation, "
        f"{data['n_test']} test samples), "
        f"bias eps tables {mem['eps_bytes']} bytes"
    )
    return out


def firmware_lines(result, board) -> list[str]:
    out: list[str] = []
    say = out.append
    outs = [str(p.relative_to(result.bundle.path)) for p in result.outputs]
    training = result.bundle.manifest.get("training") or {}
    app = training.get("data_source", {}).get("kind") == "app"
    kind = "firmware" if training and not app else "library"
    if app:  # the trainer as a library: your firmware brings main()
        say(
            f"library {', '.join(str(p.relative_to(result.bundle.path)) for p in result.outputs)} and "
            f"{'zo_continual.h' if 'continual' in training else 'zo_app.h'} "
            f"({board.toolchain.cc}); link your firmware with `make -C {result.bundle.path} app APP=main.c` "
            "(see examples/app_sensor)"
        )
        return out
    say(f"{kind:<7} {', '.join(outs)}  ({board.toolchain.cc}, code {result.code_bytes} bytes)")
    for use in result.regions:
        say(f"region  {use.describe()}")
    if result.bundle.manifest.get("boot") == "flash":
        out += flash_boot_lines(result)
    return out
