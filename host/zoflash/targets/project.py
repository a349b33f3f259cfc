"""The bundle: a directory with every source needed to build the model for one board, plus
`manifest.json`. It is the only hand-off from "compile" to "build", "run" and later verbs.

Output is deterministic: the same model, board and options give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from zoflash import __version__
from zoflash.compiler.codegen import check_prefix, default_prefix, render_model, template_env
from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.runtime import TRAINING_RUNTIME, runtime_part, runtime_sources
from zoflash.errors import PrefixError, ZoflashError
from zoflash.targets.boards import Board, load_port
from zoflash.targets.budget import enable_mask, flash_data_address, flash_sections, image_sections
from zoflash.targets.bundle_lock import INNER_LOCK_NAME
from zoflash.training.compiled import TrainingSources

MANIFEST_VERSION = 1


@dataclass
class Bundle:
    path: Path
    manifest: dict

    @property
    def prefix(self) -> str:
        return self.manifest["prefix"]

    @property
    def board(self) -> str:
        return self.manifest["board"]


def _port_files(board: Board, training: bool = False) -> tuple[dict[str, bytes], dict[str, str]]:
    """Static files of the board's port (copied) and its templates (rendered later). A port may
    build on a base (port.toml `base`): the base's static files come first, the port's own
    override them, and the port's templates may extend the base's. A port's zo_port_*.c/.h files
    implement the training port contract (zo_port.h) and the firmware around it: training
    bundles only."""
    port = load_port(board.port)
    root = resources.files("zoflash.firmware_templates") / "ports"
    static, templates = {}, {}
    for layer in ([port.base] if port.base else []) + [board.port]:
        for p in sorted((root / layer).iterdir(), key=lambda p: p.name):
            if p.name == "port.toml" or not p.is_file():
                continue
            if p.name.endswith(".j2"):
                if layer == board.port:
                    templates[p.name[:-3]] = f"ports/{layer}/{p.name}"
            elif training or not p.name.startswith("zo_port_"):
                static[p.name] = p.read_bytes()
    return static, templates


def _io_manifest(model: CompiledModel, indices) -> list[dict]:
    out = []
    for i in indices:
        t = model.graph.tensors[i]
        q = model.io_quantization(i)
        out.append(
            dict(
                name=t.name,
                dtype=t.dtype,
                shape=list(t.shape),
                bytes=t.nbytes,
                scale=q.scale if q is not None else None,
                zero_point=q.zero_point if q is not None else None,
                arena_offset=model.arena_offset[model.root[i]],
            )
        )
    return out


def make_manifest(
    model: CompiledModel,
    board: Board,
    prefix: str,
    source_name: str,
    source_sha256: str,
    files: dict[str, bytes],
    training: TrainingSources | None = None,
) -> dict:
    return {
        "manifest_version": MANIFEST_VERSION,
        "generator": f"zoflash {__version__}",
        "model": {"file": source_name, "sha256": source_sha256},
        "board": board.id,
        "port": board.port,
        "port_kind": board.port_kind,
        "toolchain": {
            "cc": board.toolchain.cc,
            "objcopy": board.toolchain.objcopy,
            "size": board.toolchain.size,
            "install": board.toolchain.install,
        },
        "placement": board.placement or None,  # firmware boards: where the memory plan put each part
        **({"boot": board.boot_mode} if board.is_firmware else {}),  # the boot mode the plan is for
        "prefix": prefix,
        "inputs": _io_manifest(model, model.graph.inputs),
        "outputs": _io_manifest(model, model.graph.outputs),
        "memory": {
            "arena_bytes": model.arena_size,
            "io_bytes_in_arena": model.io_bytes,
            "state_bytes": model.state_size,
            "weights_bytes": model.weights_bytes,
            "plan_strategy": model.plan.strategy,
        },
        "ops": [{"index": s.op.index, "type": s.op.type, "kernel": s.kernel} for s in model.program.steps],
        "aliases": [{"index": a.op.index, "type": a.op.type} for a in model.program.aliases],
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
        "training": training.manifest if training is not None else None,
    }


def generate_bundle(
    model: CompiledModel,
    board: Board,
    out_dir: Path,
    source_name: str,
    source_sha256: str,
    prefix: str | None = None,
    training: TrainingSources | None = None,
) -> Bundle:
    """`training` (rendered by training.render for the same prefix) adds the training loop, its
    wiring and the data."""
    prefix = check_prefix(prefix) if prefix is not None else default_prefix(source_name)
    files: dict[str, bytes] = {}
    trainable = training.trainable if training is not None else None
    model_files = render_model(model, prefix, source_name, source_sha256, trainable)
    files.update(model_files)
    train_files: list[str] = []
    if training is not None:
        for name, text in training.files.items():
            files[name] = text.encode()
            train_files.append(name)
        files.update(training.blobs)
    # the kernels' C files this model calls (its steps), every header, the ZO-step maths
    runtime_files = runtime_sources(training is not None, kernels=(s.kernel for s in model.program.steps))
    files.update(runtime_files)
    static, templates = _port_files(board, training is not None)
    _refuse_clashes(prefix, set(files) - set(runtime_files), set(runtime_files) | set(static) | set(templates))
    files.update(static)
    env = template_env()
    training_runtime = runtime_part(TRAINING_RUNTIME)
    unlinked = training.unlinked if training is not None else ()
    train_sources = sorted(
        n for n in files if n.endswith(".c") and (n in training_runtime or n in train_files) and n not in unlinked
    )
    sources = sorted(
        n for n in files if n.endswith(".c") and n not in static and n not in train_sources and n not in unlinked
    )
    headers = sorted(n for n in files if n.endswith(".h")) + ["zo_bundle.h"]
    ctx = dict(
        version=__version__,
        prefix=prefix,
        guard=prefix.upper(),
        board_id=board.id,
        cc=board.toolchain.cc,
        cflags=" ".join(board.toolchain.cflags),
        ldflags=" ".join(board.toolchain.ldflags),
        sources=" ".join(sources),
        headers=" ".join(headers),
        train_sources=" ".join(train_sources),
        app=training is not None and training.app,
        # --mode continual on a board with a NOR checkpoint store: the A/B slots go there; the host
        # port keeps them as a board's NOR would (zo_port_host.c: ZOFLASH_CL_SLOTS_FILE)
        cl_slots_in_store=bool(
            training is not None
            and "continual" in training.manifest
            and (board.checkpoint_store or board.port == "host")
        ),
        port_sources=" ".join(sorted(n for n in static if n.endswith(".c"))),
        data_blobs=" ".join(sorted(training.blobs)) if training is not None else "",
        model_blobs=" ".join(sorted(n for n in model_files if n.endswith(".bin"))),
        board=board,
        place=board.placement,
        # the plan's memory switches, and those of an NPU's pools (--npu neural-art)
        enable_memories=f"0x{enable_mask(board) | (training.make.get('npu_memories', 0) if training else 0):08X}"
        if board.is_firmware
        else "",
        image_sections=" ".join(f"-j {s}" for s in image_sections(board)) if board.is_firmware else "",
        npu_cflags=training.make.get("npu_cflags", "") if training is not None else "",
        npu_sources=training.make.get("npu_sources", "") if training is not None else "",
        npu_driver_cflags=training.make.get("npu_driver_cflags", "") if training is not None else "",
        npu_region=training.make.get("npu_region", "") if training is not None else "",
        npu_blob_deps=training.make.get("npu_blob_deps", "") if training is not None else "",
        npu_hex=training.make.get("npu_hex", []) if training is not None else [],
        **_flash_boot_context(board),
    )
    files["zo_bundle.h"] = env.get_template("zo_bundle.h.j2").render(**ctx).encode()
    for out_name, tpl in templates.items():
        files[out_name] = env.get_template(tpl).render(**ctx).encode()
    manifest = make_manifest(model, board, prefix, source_name, source_sha256, files, training)
    if ctx["cl_slots_in_store"] and board.checkpoint_store:  # the report and the fit check: not in RAM
        manifest["training"]["continual"]["slots_in"] = board.checkpoint_store
    # Copied verbatim from firmware_templates/: their objects can be shared between bundles.
    manifest["static_files"] = sorted(set(runtime_files) | set(static))
    _write(out_dir, files, manifest)
    return Bundle(path=out_dir, manifest=manifest)


def _refuse_clashes(prefix: str, generated: set[str], copied: set[str]) -> None:
    """PrefixError when a file generated for the model would take the name (in any case: some file
    systems ignore it) of a runtime or port file copied into the bundle, or of its own files."""
    ours = {name.lower(): name for name in copied | {"zo_bundle.h", "manifest.json"}}
    clashes = sorted(f"{name} (the bundle's {ours[name.lower()]})" for name in generated if name.lower() in ours)
    if clashes:
        raise PrefixError(
            f"prefix '{prefix}' would give generated files the names of files the bundle copies in: {', '.join(clashes)}; "
            "choose another prefix (--prefix)"
        )


def _flash_boot_context(board: Board) -> dict:
    """For the Makefile: the flash data image (objcopy's -j options and the image's address;
    empty when nothing is placed in a flash region), the ELF without it (-R, for a debugger's
    load in development mode) and the include
    folders of the vendor headers (--device-headers)."""
    sections = flash_sections(board) if board.is_firmware else []
    return dict(
        flash_sections=" ".join(f"-j {s}" for s in sections),
        ram_elf=bool(sections) and board.boot_mode == "dev",
        without_flash_sections=" ".join(f"-R {s}" for s in sections),
        flash_address=f"0x{flash_data_address(board):08X}" if sections else "",
        device_includes=" ".join(f'"-I{d}"' for d in board.device_includes),
    )


def _write(out_dir: Path, files: dict[str, bytes], manifest: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    old = out_dir / "manifest.json"
    if old.exists():  # remove files of an earlier generation that this one no longer has
        try:
            stale = set(json.loads(old.read_text()).get("files", {})) - set(files)
        except (ValueError, AttributeError):
            stale = set()
        for name in stale:
            (out_dir / name).unlink(missing_ok=True)
    elif any(p.name not in files and p.name != INNER_LOCK_NAME for p in out_dir.iterdir()):
        # (a dry run's profile files are ours; the build's lock may be in the folder)
        raise ZoflashError(
            f"output directory '{out_dir}' is not empty and is not a zoflash bundle; choose another --out"
        )
    for name, data in sorted(files.items()):
        target = out_dir / name
        if not target.exists() or target.read_bytes() != data:  # keep mtimes: make rebuilds only what changed
            target.write_bytes(data)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def load_bundle(path: str | Path) -> Bundle:
    path = Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        raise ZoflashError(
            f"'{path}' is not a zoflash bundle (no manifest.json); create one with `zoflash build`"
        ) from None
    except ValueError as exc:
        raise ZoflashError(f"'{path}/manifest.json' is not valid JSON ({exc})") from None
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise ZoflashError(
            f"'{path}' was made by another zoflash version "
            f"(manifest version {manifest.get('manifest_version')}, expected {MANIFEST_VERSION}); "
            "regenerate it with `zoflash build`"
        )
    return Bundle(path=path, manifest=manifest)


# Where `zoflash build` puts a bundle when no --out is given: generated/<model>-<board>.
BUNDLE_ROOT = Path("generated")


def training_bundles(model_sha256_prefix: str, root: Path = BUNDLE_ROOT) -> list[tuple[Path, dict]]:
    """The training bundles in `root`'s folders built from the model whose SHA-256 starts with the
    prefix (a device's hello names its model so), newest first: how a monitor given neither the
    model nor the bundle finds the model its device trains."""
    found = []
    for path in Path(root).glob("*/manifest.json"):
        try:
            manifest = json.loads(path.read_text())
            sha = str(manifest["model"]["sha256"])
            mtime = path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a bundle zoflash can read: not a candidate
        if manifest.get("manifest_version") != MANIFEST_VERSION or not (manifest.get("training") or {}).get("tensors"):
            continue
        if model_sha256_prefix and sha.startswith(model_sha256_prefix):
            found.append((mtime, path.parent, manifest))
    return [(folder, manifest) for _, folder, manifest in sorted(found, key=lambda f: -f[0])]
