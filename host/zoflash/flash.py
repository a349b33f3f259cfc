"""Putting a bundle's firmware on a board: one runner class per flash method, in a registry.

A board file lists its ways of loading firmware as [[flash]] entries (name, method, the boot
mode the board must be in while loading, and method settings); `zoflash flash --bundle DIR
[--method NAME]` picks one (by entry name, or by method when only one entry uses it; the first
entry by default), prints the boot switch positions it needs, then runs the method's programs.

Every runner turns (firmware, options) into the exact command lines first (`commands`: pure, no
tool needed, what `--dry-run` prints and the tests check), and `run` executes them with a
progress line per program and a one-line reason on failure; a missing program is a one-line
ToolMissingError saying how to get it.

Methods:
  qemu                 qemu-system-arm in the background (see QemuRunner: serial over TCP, state
                       file, time limit, --stop).
  stm32cubeprogrammer  mode "ram": ST-LINK_gdbserver + gdb `load`, then detach (the core runs);
                       mode "flash": STM32_SigningTool_CLI signs the BIN as an FSBL image, then
                       STM32_Programmer_CLI writes it to the external flash with the external loader.
  pyocd                the part's CMSIS pack from cmsis-pack-manager's cache, or --pack FILE.pack.
  openocd              interface and target configs from the board file.

RAM images (the board places its code in a region of kind "ram", as on the STM32N6 boards) are
loaded without a system reset afterwards: on the STM32N6 a system reset erases AXISRAM1/2, so
the runners set the PC to the ELF's entry point (the reset handler sets the stack and VTOR
itself) and let the core run.
"""
from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .boards import Board, load_board
from .errors import ToolMissingError, ZoflashError

Say = Callable[[str], None]

STATE_FILE = ".zoflash-qemu.json"   # in the bundle directory, while QEMU runs
QEMU_LOG = ".zoflash-qemu.log"      # QEMU's own output (errors, semihosting text) and its end
FLASH_LOG = ".zoflash-flash.log"    # the output of the last hardware flash's programs
DEFAULT_QEMU_TIMEOUT = 3600.0

HINTS = {
    "qemu-system-arm": "install QEMU (Debian/Ubuntu: apt-get install qemu-system-arm)",
    "STM32_Programmer_CLI": "install STM32CubeProgrammer (ST's download page 'STM32CubeProg'), then put its bin "
                            "folder on PATH or set STM32_PRG_PATH to it",
    "STM32_SigningTool_CLI": "it comes with STM32CubeProgrammer (ST's download page 'STM32CubeProg'): put its bin "
                             "folder on PATH or set STM32_PRG_PATH to it",
    "ST-LINK_gdbserver": "it comes with STM32CubeCLT or STM32CubeIDE (ST's download pages 'STM32CubeCLT', "
                         "'STM32CubeIDE'): put the folder that holds it on PATH",
    "arm-none-eabi-gdb": "install a GDB for Arm (Debian/Ubuntu: apt-get install gdb-multiarch; or the Arm GNU "
                         "Toolchain's arm-none-eabi-gdb on PATH)",
    "pyocd": "install it with pip install pyocd (or pip install 'zoflash[flash]')",
    "cmsis-pack-manager": "install it with pip install cmsis-pack-manager (pyOCD brings it), or give the part's "
                          "pack file with --pack FILE.pack",
    "openocd": "install it (Debian/Ubuntu: apt-get install openocd; the STM32N6 needs an OpenOCD with "
               "target/stm32n6x.cfg, newer than Debian's 0.12)",
}


class FlashError(ZoflashError):
    """Loading the firmware failed, or cannot start."""


def _missing(tool: str) -> ToolMissingError:
    return ToolMissingError(tool, HINTS.get(tool, "install it and make sure it is on PATH"))


# ------------------------------------------------------------------------------- firmware


@dataclass(frozen=True)
class Firmware:
    """A bundle's firmware files and the board entry that loads them."""

    dir: Path
    board: Board
    entry: dict
    prefix: str

    def output(self, suffix: str) -> Path:
        """A file of the cross build (firmware.py): build/<prefix><suffix>."""
        return self.dir / "build" / f"{self.prefix}{suffix}"

    elf = property(lambda self: self.output(".elf"))
    bin = property(lambda self: self.output(".bin"))
    hex = property(lambda self: self.output(".hex"))
    signed_bin = property(lambda self: self.output("-trusted.bin"))  # the FSBL image the signing tool writes

    @property
    def runs_from_ram(self) -> bool:
        """The image executes in RAM (loaded by a debugger or copied there by a boot ROM)."""
        return self.board.region_of("code").kind == "ram"

    @property
    def boot_modes(self) -> tuple[str | None, str | None]:
        """(boot mode while loading, boot mode to run afterwards if it differs)."""
        return self.entry.get("boot"), self.entry.get("run_boot")


def elf_entry(path: Path) -> int:
    """The entry point address of an ELF32 file (the reset handler, Thumb bit included)."""
    try:
        head = Path(path).read_bytes()[:52]
    except OSError as exc:
        raise FlashError(f"cannot read {path}: {exc.strerror}") from None
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] != 1 or head[5] not in (1, 2):
        raise FlashError(f"{path} is not a 32-bit ELF file")
    return struct.unpack_from("<I" if head[5] == 1 else ">I", head, 24)[0]


def select_entry(board: Board, method: str | None) -> dict:
    """The [[flash]] entry named `method`, or the only one using that method; the first by default."""
    if not board.flash:
        raise FlashError(f"board '{board.id}' has no flash methods (it is not a firmware target)")
    if method is None:
        return board.flash[0]
    for e in board.flash:
        if e["name"] == method:
            return e
    users = [e for e in board.flash if e["method"] == method]
    if len(users) == 1:
        return users[0]
    names = ", ".join(e["name"] for e in board.flash)
    if users:
        raise FlashError(f"board '{board.id}' has several '{method}' entries ({', '.join(e['name'] for e in users)}): "
                         f"choose one with --method (methods: {names})")
    raise FlashError(f"board '{board.id}' has no flash method '{method}' (methods: {names})")


def load_firmware(bundle_dir: str | Path, method: str | None = None) -> Firmware:
    from .bundle import load_bundle

    bundle = load_bundle(bundle_dir)
    board = load_board(bundle.board)
    entry = select_entry(board, method)
    return Firmware(dir=Path(bundle_dir).resolve(), board=board, entry=entry, prefix=bundle.prefix)


def check_files(fw: Firmware, paths: list[Path]) -> None:
    missing = [p for p in paths if not p.is_file()]
    if not missing:
        return
    if (fw.dir / "build" / f"lib{fw.prefix}.a").is_file():
        raise FlashError(f"{fw.dir} holds the model as a library (built without --data): there is no firmware to "
                         "flash; build the training firmware with `zoflash build --board ... --data ...`")
    raise FlashError(f"no firmware {', '.join(str(p) for p in missing)}: build the bundle first "
                     f"(`zoflash build ...` or `make -C {fw.dir}`)")


def boot_lines(fw: Firmware) -> list[str]:
    """What the user must set before loading (and after, when the image runs in another boot mode)."""
    load, run = fw.boot_modes
    lines = []
    if load:
        lines.append(f"boot    before loading, {load} mode: {fw.board.boot[load]}")
    if run and run != load:
        lines.append(f"boot    after loading, to run it, {run} mode: {fw.board.boot[run]}")
    return lines


# --------------------------------------------------------------------------------- options


@dataclass
class FlashOptions:
    pack: Path | None = None             # pyocd: the part's CMSIS pack (.pack) instead of the cache's
    programmer_bin: Path | None = None   # stm32cubeprogrammer: STM32CubeProgrammer's bin folder
    tools: dict = field(default_factory=dict)  # program name -> argv prefix found (else the bare name)
    port: int | None = None              # qemu: TCP port of the console UART [a free one]
    timeout: float = DEFAULT_QEMU_TIMEOUT  # qemu: seconds before the background QEMU is stopped
    auto_port: bool = False              # qemu: the port was chosen here (another is tried if it is taken)
    notes: list = field(default_factory=list)  # what resolving found out (printed before the commands)

    def tool(self, name: str) -> list[str]:
        return list(self.tools.get(name, [name]))


@dataclass
class Step:
    argv: list[str]
    what: str
    timeout: float = 300.0
    background: bool = False


@dataclass
class FlashResult:
    method: str
    entry: str
    commands: list[list[str]]
    serial_url: str | None = None
    pid: int | None = None
    port: int | None = None
    state_path: Path | None = None
    message: str = ""


# ---------------------------------------------------------------------------------- registry

RUNNERS: dict[str, type[Runner]] = {}


def register(cls):
    RUNNERS[cls.method] = cls
    return cls


def runner_for(entry: dict) -> Runner:
    try:
        return RUNNERS[entry["method"]]()
    except KeyError:
        raise FlashError(f"flash method '{entry['method']}' has no runner in this zoflash "
                         f"(runners: {', '.join(sorted(RUNNERS))})") from None


def _which(name: str, extra_dirs=()) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in extra_dirs:
        for cand in (Path(d) / name, Path(d) / f"{name}.exe"):
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


def _require(opts: FlashOptions, name: str, dry_run: bool, extra_dirs=(), alternatives=()) -> None:
    """Find a program (or one of its alternatives) and record its path; missing: raise, or in a dry
    run note it and keep the bare name."""
    for cand in (name, *alternatives):
        path = _which(cand, extra_dirs)
        if path:
            opts.tools[name] = [path]
            return
    err = _missing(name)
    if not dry_run:
        raise err
    opts.notes.append(f"note    {err}")


def _show(argv: list[str]) -> str:
    return shlex.join(argv)


def _end(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Terminate a child process, kill it if it is still there after `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _program(argv: list[str]) -> str:
    """The program's name for messages (`python -m pyocd` is pyocd)."""
    if len(argv) > 2 and argv[1] == "-m":
        return argv[2]
    return Path(argv[0]).name


def _reason(output: str) -> str:
    """The line of a program's output most likely to say what went wrong."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "error" in ln.lower() or "fail" in ln.lower():
            return ln
    return lines[-1] if lines else "no output"


class Runner:
    """One flash method. `prepare` finds the tools (and packs, ports); `steps`/`commands` are pure."""

    method: ClassVar[str] = ""

    def prepare(self, fw: Firmware, opts: FlashOptions, dry_run: bool = False) -> FlashOptions:
        return opts

    def steps(self, fw: Firmware, opts: FlashOptions) -> list[Step]:
        raise NotImplementedError

    def commands(self, fw: Firmware, opts: FlashOptions) -> list[list[str]]:
        return [s.argv for s in self.steps(fw, opts)]

    def inputs(self, fw: Firmware) -> list[Path]:
        return [fw.elf]

    def done_message(self, fw: Firmware) -> str:
        return f"loaded {fw.elf.name}; the firmware runs"

    def run(self, fw: Firmware, opts: FlashOptions, say: Say) -> FlashResult:
        check_files(fw, self.inputs(fw))
        steps = self.steps(fw, opts)
        log = fw.dir / FLASH_LOG
        with open(log, "w") as out:
            for i, step in enumerate(steps, 1):
                say(f"flash   [{i}/{len(steps)}] {step.what}: {_show(step.argv)}")
                self._run_step(step, out, log)
        msg = self.done_message(fw)
        say(f"flash   done: {msg}")
        return FlashResult(self.method, fw.entry["name"], [s.argv for s in steps], message=msg)

    @staticmethod
    def _run_step(step: Step, out, log: Path) -> str:
        out.write(f"$ {_show(step.argv)}\n")
        out.flush()
        try:
            proc = subprocess.run(step.argv, check=False, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace", timeout=step.timeout)
        except FileNotFoundError:
            raise _missing(_program(step.argv)) from None
        except subprocess.TimeoutExpired as exc:
            out.write(exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace"))
            raise FlashError(f"{step.what}: {_program(step.argv)} did not finish within {step.timeout:g} s "
                             f"(output in {log})") from None
        out.write(proc.stdout)
        out.flush()
        if proc.returncode != 0:
            raise FlashError(f"{step.what}: {_program(step.argv)} failed (exit {proc.returncode}): "
                             f"{_reason(proc.stdout)} (output in {log})")
        return proc.stdout


# ---------------------------------------------------------------------- STM32CubeProgrammer

PRG_ENV = "STM32_PRG_PATH"
PRG_CLI = "STM32_Programmer_CLI"


def _default_programmer_dirs() -> list[Path]:
    """Where ST's installers put STM32CubeProgrammer's bin folder (and STM32CubeCLT's copy of it)."""
    dirs = [Path.home() / "STMicroelectronics/STM32Cube/STM32CubeProgrammer/bin",
            Path("/Applications/STMicroelectronics/STM32Cube/STM32CubeProgrammer/STM32CubeProgrammer.app/"
                 "Contents/MacOs/bin"),
            Path("C:/Program Files/STMicroelectronics/STM32Cube/STM32CubeProgrammer/bin")]
    dirs += [Path(p) for p in sorted(glob.glob("/opt/st/stm32cubeclt*/STM32CubeProgrammer/bin"), reverse=True)]
    return dirs


def find_programmer_bin(env=None) -> tuple[Path | None, str]:
    """STM32CubeProgrammer's bin folder (which holds the CLIs and ExternalLoader/) and how it was
    found: $STM32_PRG_PATH (the bin folder or the install folder), else the folder of
    STM32_Programmer_CLI on PATH (links resolved), else ST's default install folders."""
    env = os.environ if env is None else env
    cands: list[tuple[Path, str]] = []
    if env.get(PRG_ENV):
        p = Path(env[PRG_ENV]).expanduser()
        cands += [(p, f"${PRG_ENV}"), (p / "bin", f"${PRG_ENV}")]
    on_path = shutil.which(PRG_CLI)
    if on_path:
        cands.append((Path(on_path).resolve().parent, f"{PRG_CLI} on PATH"))
    cands += [(d, "default install folder") for d in _default_programmer_dirs()]
    for d, how in cands:
        if any((d / n).is_file() for n in (PRG_CLI, f"{PRG_CLI}.exe")):
            return d, how
    return None, ""


def _cubeclt_dirs(sub: str) -> list[str]:
    return sorted(glob.glob(f"/opt/st/stm32cubeclt*/{sub}"), reverse=True)


@register
class StM32CubeProgrammerRunner(Runner):
    """STM32CubeProgrammer. Mode "ram" (development boot): ST-LINK_gdbserver in the background,
    then gdb `target remote :PORT`, `load` (writes the ELF's sections and sets the PC to its
    entry point) and `detach` (the core runs on; batch gdb then exits and so does the
    non-persistent gdbserver). Mode "flash": sign the BIN as an FSBL image, write it to the
    external flash at `address` with the board's external loader, from STM32CubeProgrammer's
    bin/ExternalLoader folder."""

    method = "stm32cubeprogrammer"
    server_exit_wait = 10.0  # seconds for ST-LINK_gdbserver to exit after gdb detached, before it is ended

    def prepare(self, fw, opts, dry_run=False):
        if opts.programmer_bin is None:
            found, how = find_programmer_bin()
            if found is not None:
                opts.programmer_bin = found
                opts.notes.append(f"tools   STM32CubeProgrammer {found} (from {how})")
            elif not dry_run:
                raise _missing(PRG_CLI)
            else:
                opts.notes.append(f"note    {_missing(PRG_CLI)}")
        if fw.entry["mode"] == "ram":
            _require(opts, "ST-LINK_gdbserver", dry_run, _cubeclt_dirs("STLink-gdb-server/bin"))
            _require(opts, "arm-none-eabi-gdb", dry_run, _cubeclt_dirs("GNU-tools-for-STM32/bin"),
                     alternatives=("gdb-multiarch",))
        return opts

    def _prg(self, opts: FlashOptions, name: str) -> str:
        if opts.programmer_bin is None:
            return name
        return str(opts.programmer_bin / name)

    def inputs(self, fw):
        return [fw.elf] if fw.entry["mode"] == "ram" else [fw.bin]

    def steps(self, fw, opts):
        e = fw.entry
        if e["mode"] == "ram":
            port = str(e["gdbserver_port"])
            cp = str(opts.programmer_bin) if opts.programmer_bin else "<STM32CubeProgrammer bin>"
            server = [*opts.tool("ST-LINK_gdbserver"), "-p", port, *e["gdbserver_args"], "-cp", cp]
            gdb = [*opts.tool("arm-none-eabi-gdb"), "-nx", "-batch", "-ex", f"target remote :{port}", "-ex", "load",
                   "-ex", "detach", str(fw.elf)]
            return [Step(server, "gdb server (ST-LINK)", background=True), Step(gdb, "load into RAM (gdb)", 300)]
        loader_dir = opts.programmer_bin if opts.programmer_bin else Path("<STM32CubeProgrammer bin>")
        sign = [self._prg(opts, "STM32_SigningTool_CLI"), "-bin", str(fw.bin), *e["sign"], "-o", str(fw.signed_bin)]
        prog = [self._prg(opts, PRG_CLI), "--connect", *e["connect"], "-el",
                str(loader_dir / "ExternalLoader" / e["external_loader"]), "--download", str(fw.signed_bin),
                f"0x{e['address']:08X}", "--start"]
        return [Step(sign, "sign the FSBL image", 120), Step(prog, "write the external flash", 900)]

    def done_message(self, fw):
        if fw.entry["mode"] == "ram":
            return f"{fw.elf.name} loaded into RAM and running (lost at power-off; reset the core only)"
        return (f"{fw.signed_bin.name} written to the external flash at 0x{fw.entry['address']:08X}; set the boot "
                "switches for flash boot and press RESET")

    def run(self, fw, opts, say):
        if fw.entry["mode"] == "flash":
            check_files(fw, self.inputs(fw))
            for tool in ("STM32_SigningTool_CLI", PRG_CLI):
                if _which(tool, [opts.programmer_bin] if opts.programmer_bin else []) is None:
                    raise _missing(tool)
            fw.signed_bin.unlink(missing_ok=True)  # the signing tool asks before overwriting
            return super().run(fw, opts, say)
        return self._run_ram(fw, opts, say)

    def _run_ram(self, fw, opts, say):
        check_files(fw, self.inputs(fw))
        server, gdb = self.steps(fw, opts)
        log = fw.dir / FLASH_LOG
        with open(log, "w") as out:
            say(f"flash   [1/2] {server.what}: {_show(server.argv)}")
            out.write(f"$ {_show(server.argv)} &\n")
            out.flush()
            try:
                proc = subprocess.Popen(server.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            except FileNotFoundError:
                raise _missing("ST-LINK_gdbserver") from None
            try:
                say(f"flash   [2/2] {gdb.what}: {_show(gdb.argv)}")
                deadline = time.monotonic() + 20.0
                while True:  # the server needs a moment to open its port; a refused connection is retried
                    try:
                        self._run_step(gdb, out, log)
                        break
                    except FlashError as err:
                        if proc.poll() is not None:
                            raise FlashError(f"ST-LINK_gdbserver stopped (exit {proc.returncode}): "
                                             f"{_reason(log.read_text(errors='replace'))} (output in {log})") from None
                        if "Connection refused" not in str(err) and "connection refused" not in str(err).lower():
                            raise
                        if time.monotonic() > deadline:
                            raise FlashError(f"ST-LINK_gdbserver did not accept gdb on port "
                                             f"{fw.entry['gdbserver_port']} within 20 s (output in {log})") from None
                        time.sleep(0.5)
                try:  # a non-persistent gdbserver exits once gdb has detached
                    proc.wait(timeout=self.server_exit_wait)
                except subprocess.TimeoutExpired:
                    pass
            finally:
                if proc.poll() is None:
                    _end(proc)
        msg = self.done_message(fw)
        say(f"flash   done: {msg}")
        return FlashResult(self.method, fw.entry["name"], [server.argv, gdb.argv], message=msg)


# ------------------------------------------------------------------------------------ pyOCD


def _pack_ref(device: dict) -> str:
    p = device.get("from_pack", {})
    return f"{p.get('vendor', '?')}.{p.get('pack', '?')}.{p.get('version', '?')}"


def entry_address(fw: Firmware) -> str:
    """The ELF's entry point with the Thumb bit cleared (the value for the PC), in hex; a
    placeholder when the ELF is not built yet (dry runs)."""
    if not fw.elf.is_file():
        return f"<entry point of {fw.elf.name}>"
    return f"0x{elf_entry(fw.elf) & ~1:08X}"


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
            return None, (f"offline: cmsis-pack-manager could not download the CMSIS pack index (it stays empty, "
                          f"cache {where}); {_offline_hint(target, pack)}")
        return None, (f"cmsis-pack-manager's pack index is empty (cache {where}; a real run tries to download it); "
                      f"{_offline_hint(target, pack)}")
    device = next((d for name, d in index.items() if name.lower() == target.lower()), None)
    if device is None:
        return None, (f"device '{target}' is not in cmsis-pack-manager's pack index ({len(index)} devices): "
                      f"{_offline_hint(target, pack)}")
    p = device.get("from_pack", {})
    path = Path(cache.data_path) / p.get("vendor", "") / p.get("pack", "") / f"{p.get('version', '')}.pack"
    if not path.is_file():
        return None, (f"pack {_pack_ref(device)} for '{target}' is in the index but not downloaded: run "
                      f"`pyocd pack install {target}` (needs internet), or give the pack with --pack FILE.pack")
    return path, ""


def _offline_hint(target: str, pack: str) -> str:
    return (f"get the {pack} pack (a .pack file) on a machine with internet (e.g. `pyocd pack install {target}`, "
            "or from the vendor's pack page) and give it with --pack FILE.pack")


@register
class PyOcdRunner(Runner):
    """pyOCD with the part's CMSIS pack. A RAM image: `pyocd commander` halts the core, loads the
    ELF, sets the PC to its entry point and resumes (no reset: it would erase the RAM image on
    the STM32N6). A flash image: `pyocd load` (programs, verifies and resets)."""

    method = "pyocd"

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
            argv = [*pyocd, "commander", *common, "--halt", "-c", f"load {fw.elf}",
                    "-c", f"wreg pc {entry_address(fw)}", "-c", "go"]
            return [Step(argv, "load into RAM and run (pyOCD)", 600)]
        return [Step([*pyocd, "load", *common, str(fw.elf)], "program the flash (pyOCD)", 600)]


# ---------------------------------------------------------------------------------- OpenOCD


def _tcl(path: Path) -> str:
    s = Path(path).as_posix()
    return "{" + s + "}" if any(c in s for c in ' \t"[]{}$;\\') else s


@register
class OpenOcdRunner(Runner):
    """OpenOCD with the board's interface and target configs. A flash image: `program ELF verify
    reset exit`. A RAM image: halt (no reset), load_image, verify_image, resume at the entry
    point, shutdown. A board entry's `commands` replace these -c commands; {elf}, {bin}, {hex}
    and {entry} (hex address, Thumb bit cleared) are filled in."""

    method = "openocd"

    def prepare(self, fw, opts, dry_run=False):
        _require(opts, "openocd", dry_run)
        return opts

    def steps(self, fw, opts):
        e = fw.entry
        argv = opts.tool("openocd")
        for cfg in e["config"]:
            argv += ["-f", cfg]
        if "commands" in e:
            values = {"elf": _tcl(fw.elf), "bin": _tcl(fw.bin), "hex": _tcl(fw.hex),
                      "entry": entry_address(fw)}
            cmds = [c.format(**values) for c in e["commands"]]
        elif fw.runs_from_ram:
            elf = _tcl(fw.elf)
            cmds = ["init", "halt", f"load_image {elf}", f"verify_image {elf}",
                    f"resume {entry_address(fw)}", "shutdown"]
        else:
            cmds = [f"program {_tcl(fw.elf)} verify reset exit"]
        for c in cmds:
            argv += ["-c", c]
        return [Step(argv, "load (OpenOCD)" if fw.runs_from_ram else "program (OpenOCD)", 600)]


# ------------------------------------------------------------------------------------- QEMU


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _is_qemu(pid: int, argv: list[str] | None = None) -> bool:
    """The process exists and, where /proc tells, is a QEMU (running exactly `argv` when given):
    a PID reused by another process is never signalled."""
    if not _alive(pid):
        return False
    if not Path("/proc/self/cmdline").exists():
        return True
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if not text:  # a zombie waiting for its parent: it has exited
        return False
    if argv is not None:
        return text.rstrip(b"\0").split(b"\0") == [os.fsencode(a) for a in argv]
    return b"qemu" in text


def read_state(bundle_dir: Path) -> dict | None:
    path = Path(bundle_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _log_tail(log: Path, n: int = 1, match: str = "") -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if match:
        lines = [ln for ln in lines if match in ln]
    return " / ".join(lines[-n:])


def stop_qemu(bundle_dir: str | Path, say: Say = print, grace: float = 5.0) -> bool:
    """End the QEMU started for this bundle (and remove the state file). True if one was running;
    a stale state file (QEMU already gone, or unreadable) is removed with a note."""
    bundle_dir = Path(bundle_dir)
    path = bundle_dir / STATE_FILE
    state = read_state(bundle_dir)
    if state is None:
        say(f"qemu    not running for {bundle_dir} (no {STATE_FILE})")
        return False
    pid, argv = state.get("pid"), state.get("command")
    log = Path(state.get("log", bundle_dir / QEMU_LOG))
    if not isinstance(pid, int) or not isinstance(argv, list) or not _is_qemu(pid, argv):
        path.unlink(missing_ok=True)
        end = _log_tail(log, match="[zoflash]")
        say(f"qemu    was not running any more (stale {STATE_FILE} removed)" + (f": {end}" if end else ""))
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while _is_qemu(pid, argv) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _is_qemu(pid, argv):
        try:
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        except ProcessLookupError:
            pass
    path.unlink(missing_ok=True)
    say(f"qemu    stopped (pid {pid}, {state.get('url', 'serial port')})")
    return True


def supervise(argv: list[str]) -> int:
    """The background process that owns QEMU: `python -c ... LOG TIMEOUT QEMU-ARGV...`. Starts QEMU
    with its output appended to LOG, prints its PID (one line) for the parent, waits at most
    TIMEOUT seconds, then stops it; the outcome is the last `[zoflash]` line of LOG."""
    log_path, limit, cmd = argv[0], float(argv[1]), argv[2:]
    with open(log_path, "ab", buffering=0) as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        sys.stdout.write(f"{proc.pid}\n")
        sys.stdout.flush()
        sys.stdout.close()
        try:
            code = proc.wait(timeout=limit)
            how = f"exited with status {code}" if code >= 0 else f"ended by signal {-code}"
        except subprocess.TimeoutExpired:
            _end(proc)
            how = f"stopped: time limit of {limit:g} s reached"
        log.write(f"[zoflash] qemu {how}\n".encode())
    return 0


_BACKGROUND: list = []  # keeps the supervisors' Popen objects alive in this process


@register
class QemuRunner(Runner):
    """qemu-system-arm in the background, the console UART on a local TCP port.

    Serial design: `-serial tcp:127.0.0.1:PORT,server=on,wait=on`. With wait=on QEMU listens and
    holds the guest until the first client (`zoflash monitor --port socket://127.0.0.1:PORT`)
    connects, so no byte of the output is lost and a run starts when someone watches it (with
    wait=off the guest would start at once and its output before the connection would be
    dropped). A client may disconnect and reconnect: QEMU accepts the next one; what the firmware
    writes in between is dropped. QEMU runs under a small supervisor process that stops it after
    --timeout seconds (waiting for a client included), so it never lingers; its PID, port and
    time limit are in DIR/.zoflash-qemu.json, its output in DIR/.zoflash-qemu.log. `--stop` ends
    it; flashing again replaces a running instance."""

    method = "qemu"

    def prepare(self, fw, opts, dry_run=False):
        if os.name != "posix" and not dry_run:
            raise FlashError("running QEMU in the background is supported on Linux and macOS only; run the "
                             "command of `zoflash flash --dry-run` by hand")
        _require(opts, fw.entry["program"], dry_run)
        if opts.port is None:
            opts.port, opts.auto_port = free_port(), True
        if opts.timeout is None or opts.timeout <= 0:
            raise FlashError("the QEMU time limit (--timeout) must be a positive number of seconds")
        return opts

    def serial_arg(self, port: int) -> str:
        return f"tcp:127.0.0.1:{port},server=on,wait=on"

    def steps(self, fw, opts):
        e = fw.entry
        argv = [*opts.tool(e["program"]), "-M", e["machine"], *e.get("args", ()), "-monitor", "none",
                "-serial", self.serial_arg(opts.port), "-kernel", str(fw.elf)]
        return [Step(argv, "emulator (background)", opts.timeout, background=True)]

    def done_message(self, fw):
        return "QEMU runs in the background"

    def run(self, fw, opts, say):
        check_files(fw, self.inputs(fw))
        state = read_state(fw.dir)
        if state is not None:
            say("qemu    replacing the QEMU already started for this bundle")
            stop_qemu(fw.dir, say)
        for attempt in range(3):
            step = self.steps(fw, opts)[0]
            say(f"flash   [1/1] {step.what}: {_show(step.argv)}")
            started = self._start(fw, opts, step)
            if started is not None:
                break
            if attempt == 2 or not opts.auto_port:
                raise FlashError(f"QEMU could not listen on 127.0.0.1:{opts.port}: "
                                 f"{_log_tail(fw.dir / QEMU_LOG, match='Address already in use')}")
            say(f"qemu    port {opts.port} is taken; trying another")
            opts.port = free_port()
        pid, url = started
        say(f"qemu    running (pid {pid}); it stops after {opts.timeout:g} s, or with "
            f"`zoflash flash --bundle {fw.dir} --stop`")
        say(f"serial  {url}  (the firmware starts when a client connects: zoflash monitor --port {url})")
        return FlashResult(self.method, fw.entry["name"], [step.argv], serial_url=url, pid=pid, port=opts.port,
                           state_path=fw.dir / STATE_FILE, message=self.done_message(fw))

    def _start(self, fw, opts, step: Step):
        log = fw.dir / QEMU_LOG
        log.write_text("")
        pkg_parent = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        code = "import sys; from zoflash.flash import supervise; sys.exit(supervise(sys.argv[1:]))"
        sup = subprocess.Popen([sys.executable, "-c", code, str(log), f"{opts.timeout:g}", *step.argv],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env=env, text=True, start_new_session=True)
        _BACKGROUND.append(sup)
        line = sup.stdout.readline().strip()
        sup.stdout.close()
        if not line.isdigit():
            sup.wait(timeout=10)
            raise FlashError(f"could not start the QEMU supervisor (exit {sup.returncode})")
        pid = int(line)
        url = f"socket://127.0.0.1:{opts.port}"
        deadline = time.monotonic() + 10.0
        while True:
            text = log.read_text(errors="replace")
            if "waiting for connection" in text:
                break
            if sup.poll() is not None:  # QEMU has ended already
                if "Address already in use" in text:
                    return None
                raise FlashError(f"QEMU stopped at once: {_log_tail(log, 2) or 'no output'} (output in {log})")
            if time.monotonic() > deadline:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                raise FlashError(f"QEMU did not open {url} within 10 s (output in {log})")
            time.sleep(0.02)
        state = {"pid": pid, "supervisor_pid": sup.pid, "port": opts.port, "url": url, "elf": str(fw.elf),
                 "board": fw.board.id, "command": step.argv, "log": str(log), "started": time.time(),
                 "timeout_s": opts.timeout, "deadline": time.time() + opts.timeout}
        tmp = fw.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(fw.dir / STATE_FILE)
        return pid, url


# ------------------------------------------------------------------------------------- API


def flash_bundle(bundle_dir: str | Path, method: str | None = None, options: FlashOptions | None = None,
                 dry_run: bool = False, say: Say = print) -> FlashResult:
    """Load a bundle's firmware with one of its board's flash methods (see the module doc)."""
    fw = load_firmware(bundle_dir, method)
    opts = options or FlashOptions()
    runner = runner_for(fw.entry)
    e = fw.entry
    mode = f", {e['mode']} mode" if "mode" in e else ""
    say(f"flash   {fw.board.id}: method '{e['name']}' ({e['method']}{mode})"
        + (f": {e['description']}" if e.get("description") else ""))
    for line in boot_lines(fw):
        say(line)
    if not dry_run:
        check_files(fw, runner.inputs(fw))
    runner.prepare(fw, opts, dry_run=dry_run)
    for note in opts.notes:
        say(note)
    if dry_run:
        if any(not p.is_file() for p in runner.inputs(fw)):
            say(f"note    not built yet: {', '.join(str(p) for p in runner.inputs(fw) if not p.is_file())}")
        cmds = runner.commands(fw, opts)
        for argv in cmds:
            say(_show(argv))
        return FlashResult(runner.method, e["name"], cmds, message="dry run")
    return runner.run(fw, opts, say)
