"""pyOCD with the part's CMSIS pack (cmsis-pack-manager's cache or --pack)."""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

from zoflash.targets.runners.base import FlashError, Runner, ToolCommand, _missing, entry_address, register

# ------------------------------------------------------------------------------------ pyOCD


def _pack_ref(device: dict) -> str:
    p = device.get("from_pack", {})
    return f"{p.get('vendor', '?')}.{p.get('pack', '?')}.{p.get('version', '?')}"


def check_pack_file(path: Path, target: str) -> list[str]:
    """A local CMSIS pack: a zip with a .pdsc. Returns notes (e.g. the target not mentioned)."""
    path = Path(path)
    if not path.is_file():
        raise FlashError(f"pack file {path} does not exist")
    if not zipfile.is_zipfile(path):
        raise FlashError(f"{path} is not a CMSIS pack (a .pack file is a zip archive)")
    with zipfile.ZipFile(path) as z:
        pdsc = [n for n in z.namelist() if n.lower().endswith(".pdsc")]
        if not pdsc:
            raise FlashError(f"{path} is not a CMSIS pack: it holds no .pdsc description")
        text = z.read(pdsc[0]).decode("utf-8", errors="replace").lower()
    if target.lower() not in text:
        return [f"note    {path.name} does not mention device '{target}': pyOCD may not find the target in it"]
    return []


def find_cached_pack(target: str, pack: str, refresh: bool = True, cache=None) -> tuple[Path | None, str]:
    """The cached .pack file that describes `target`, through cmsis-pack-manager's cache (the one
    pyOCD's `pack install` fills). (path, "") when found, else (None, why and what to do). With an
    empty index and `refresh`, the index is downloaded first; offline that leaves it empty (the
    library only prints a warning), which is checked here."""
    if cache is None:
        try:
            import cmsis_pack_manager
        except ImportError:
            return None, str(_missing("cmsis-pack-manager"))
        cache = cmsis_pack_manager.Cache(True, True)
    index = cache.index
    if not index and refresh:
        try:
            cache.cache_descriptors()
        except Exception as exc:  # noqa: BLE001 - the library raises its own types from Rust
            return None, f"cmsis-pack-manager could not update its pack index ({exc}); {_offline_hint(target, pack)}"
        index = cache.index
    if not index:
        where = Path(cache.index_path).parent
        if refresh:
            return None, (
                f"offline: cmsis-pack-manager could not download the CMSIS pack index (it stays empty, "
                f"cache {where}); {_offline_hint(target, pack)}"
            )
        return None, (
            f"cmsis-pack-manager's pack index is empty (cache {where}; a real run tries to download it); "
            f"{_offline_hint(target, pack)}"
        )
    device = next((d for name, d in index.items() if name.lower() == target.lower()), None)
    if device is None:
        return None, (
            f"device '{target}' is not in cmsis-pack-manager's pack index ({len(index)} devices): "
            f"{_offline_hint(target, pack)}"
        )
    p = device.get("from_pack", {})
    path = Path(cache.data_path) / p.get("vendor", "") / p.get("pack", "") / f"{p.get('version', '')}.pack"
    if not path.is_file():
        return None, (
            f"pack {_pack_ref(device)} for '{target}' is in the index but not downloaded: run "
            f"`pyocd pack install {target}` (needs internet), or give the pack with --pack FILE.pack"
        )
    return path, ""


def _offline_hint(target: str, pack: str) -> str:
    return (
        f"get the {pack} pack (a .pack file) on a machine with internet (e.g. `pyocd pack install {target}`, "
        "or from the vendor's pack page) and give it with --pack FILE.pack"
    )


@register
class PyOcdRunner(Runner):
    """pyOCD with the part's CMSIS pack. A RAM image: `pyocd commander` halts the core, loads the
    ELF, sets the PC to its entry point and resumes (no reset: it would erase the RAM image on
    the STM32N6). A flash image: `pyocd load` (programs, verifies and resets)."""

    method = "pyocd"
    settings = {"target": (str, True), "pack": (str, True), "frequency": (int, False)}
    tools = {
        "pyocd": "install it with pip install pyocd (or pip install 'zoflash[flash]')",
        "cmsis-pack-manager": "install it with pip install cmsis-pack-manager (pyOCD brings it), or give the "
        "part's pack file with --pack FILE.pack",
    }

    def prepare(self, fw, opts, dry_run=False):
        e = fw.entry
        if opts.pack is not None:
            opts.notes += check_pack_file(opts.pack, e["target"])
            opts.notes.append(f"pack    {opts.pack} (given with --pack)")
        else:
            path, why = find_cached_pack(e["target"], e["pack"], refresh=not dry_run)
            if path is None:
                if not dry_run:
                    raise FlashError(f"no CMSIS pack for '{e['target']}': {why}")
                opts.notes.append(f"note    {why}")
            else:
                opts.pack = path
                opts.notes.append(f"pack    {path} (cmsis-pack-manager cache)")
        if not shutil.which("pyocd"):
            import importlib.util

            if importlib.util.find_spec("pyocd") is not None:
                opts.tools["pyocd"] = [sys.executable, "-m", "pyocd"]
            elif not dry_run:
                raise _missing("pyocd")
            else:
                opts.notes.append(f"note    {_missing('pyocd')}")
        return opts

    def steps(self, fw, opts):
        e = fw.entry
        pyocd = opts.tool("pyocd")
        pack = str(opts.pack) if opts.pack else f"<{e['pack']} .pack>"
        common = ["--target", e["target"], "--pack", pack]
        if "frequency" in e:
            common += ["--frequency", str(e["frequency"])]
        if fw.runs_from_ram:
            argv = [
                *pyocd,
                "commander",
                *common,
                "--halt",
                "-c",
                f"load {fw.elf}",
                "-c",
                f"wreg pc {entry_address(fw)}",
                "-c",
                "go",
            ]
            return [ToolCommand(argv, "load into RAM and run (pyOCD)", 600)]
        return [ToolCommand([*pyocd, "load", *common, str(fw.elf)], "program the flash (pyOCD)", 600)]
