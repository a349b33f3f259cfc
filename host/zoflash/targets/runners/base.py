"""Flash runners: the firmware files, options, the runner base class and the registry."""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, cast

from zoflash.errors import ToolMissingError, ZoflashError
from zoflash.targets.boards import FLASH_METHODS, Board
from zoflash.targets.budget import placed_board

Say = Callable[[str], None]

STATE_FILE = ".zoflash-qemu.json"  # in the bundle directory, while QEMU runs
QEMU_LOG = ".zoflash-qemu.log"  # QEMU's own output (errors, semihosting text) and its end
FLASH_LOG = ".zoflash-flash.log"  # the output of the last hardware flash's programs
DEFAULT_QEMU_TIMEOUT = 3600.0


class FlashError(ZoflashError):
    """Loading the firmware failed, or cannot start."""


def tool_hints() -> dict[str, str]:
    """How to get each program a registered flash method runs (its runner's `tools`)."""
    runners = (cast("type[Runner]", r) for r in RUNNERS.values())  # only `register` adds, and only runners
    return {tool: hint for runner in runners for tool, hint in runner.tools.items()}


def _missing(tool: str) -> ToolMissingError:
    return ToolMissingError(tool, tool_hints().get(tool, "install it and make sure it is on PATH"))


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
    nor_bin = property(
        lambda self: self.output("_nor.bin")
    )  # the data read in place from the external flash (budget.py)
    ram_elf = property(lambda self: self.output("_ram.elf"))  # the ELF without those sections, for a debugger's load

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
        raise FlashError(
            f"board '{board.id}' has several '{method}' entries ({', '.join(e['name'] for e in users)}): "
            f"choose one with --method (methods: {names})"
        )
    raise FlashError(f"board '{board.id}' has no flash method '{method}' (methods: {names})")


def load_firmware(bundle_dir: str | Path, method: str | None = None) -> Firmware:
    from zoflash.targets.project import load_bundle

    bundle = load_bundle(bundle_dir)
    board = placed_board(bundle)
    entry = select_entry(board, method)
    return Firmware(dir=Path(bundle_dir).resolve(), board=board, entry=entry, prefix=bundle.prefix)


def check_files(fw: Firmware, paths: list[Path]) -> None:
    missing = [p for p in paths if not p.is_file()]
    if not missing:
        return
    if (fw.dir / "build" / f"lib{fw.prefix}.a").is_file():
        raise FlashError(
            f"{fw.dir} holds the model as a library (built without --data): there is no firmware to "
            "flash; build the training firmware with `zoflash build --board ... --data ...`"
        )
    raise FlashError(
        f"no firmware {', '.join(str(p) for p in missing)}: build the bundle first "
        f"(`zoflash build ...` or `make -C {fw.dir}`)"
    )


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
    pack: Path | None = None  # pyocd: the part's CMSIS pack (.pack) instead of the cache's
    programmer_bin: Path | None = None  # stm32cubeprogrammer: STM32CubeProgrammer's bin folder
    tools: dict = field(default_factory=dict)  # program name -> argv prefix found (else the bare name)
    port: int | None = None  # qemu: TCP port of the console UART [a free one]
    timeout: float = DEFAULT_QEMU_TIMEOUT  # qemu: seconds before the background QEMU is stopped
    auto_port: bool = False  # qemu: the port was chosen here (another is tried if it is taken)
    # qemu: QEMU ends with this process (`zoflash run`, which watches it), not only at its time limit
    tied: bool = False
    notes: list = field(default_factory=list)  # what resolving found out (printed before the commands)

    def tool(self, name: str) -> list[str]:
        return list(self.tools.get(name, [name]))


@dataclass
class ToolCommand:
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

# The flash methods: the registry boards.py checks [[flash]] entries against (FLASH_METHODS), holding
# the Runner classes; a runner module declares its method once with @register.
RUNNERS = FLASH_METHODS


def register(cls: type[Runner]) -> type[Runner]:
    FLASH_METHODS.add(cls.method, cls)
    return cls


def runner_for(entry: dict) -> Runner:
    return cast("type[Runner]", RUNNERS.get(entry["method"]))()  # only `register` adds, and only runners


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

    method: ClassVar[str] = ""  # its name, the `method` of a board file's [[flash]] entries
    settings: ClassVar[dict] = {}  # its own [[flash]] keys: key -> (kind, required), boards.py's schema kinds
    needs_boot: ClassVar[bool] = True  # an entry must name the boot mode while loading ('boot')
    tools: ClassVar[dict[str, str]] = {}  # the programs it runs -> how to get one that is missing

    @classmethod
    def check_entry(cls, entry: dict, where: str) -> None:
        """Rules of a [[flash]] entry beyond its settings' schema (BoardError); none by default."""

    def prepare(self, fw: Firmware, opts: FlashOptions, dry_run: bool = False) -> FlashOptions:
        return opts

    def steps(self, fw: Firmware, opts: FlashOptions) -> list[ToolCommand]:
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
    def _run_step(step: ToolCommand, out, log: Path) -> str:
        out.write(f"$ {_show(step.argv)}\n")
        out.flush()
        try:
            proc = subprocess.run(
                step.argv,
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=step.timeout,
            )
        except FileNotFoundError:
            raise _missing(_program(step.argv)) from None
        except subprocess.TimeoutExpired as exc:
            out.write(exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace"))
            raise FlashError(
                f"{step.what}: {_program(step.argv)} did not finish within {step.timeout:g} s (output in {log})"
            ) from None
        out.write(proc.stdout)
        out.flush()
        if proc.returncode != 0:
            raise FlashError(
                f"{step.what}: {_program(step.argv)} failed (exit {proc.returncode}): "
                f"{_reason(proc.stdout)} (output in {log})"
            )
        return proc.stdout


def entry_address(fw: Firmware) -> str:
    """The ELF's entry point with the Thumb bit cleared (the value for the PC), in hex; a
    placeholder when the ELF is not built yet (dry runs)."""
    if not fw.elf.is_file():
        return f"<entry point of {fw.elf.name}>"
    return f"0x{elf_entry(fw.elf) & ~1:08X}"
