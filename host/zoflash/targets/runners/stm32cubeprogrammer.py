"""STM32CubeProgrammer: RAM load through ST-LINK_gdbserver and gdb, or FSBL signing and the external loader."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

from zoflash.errors import BoardError
from zoflash.targets.boards import LIST, Enum
from zoflash.targets.budget import flash_data_address, loaded_elsewhere
from zoflash.targets.runners.base import (
    FLASH_LOG,
    FlashError,
    FlashOptions,
    FlashResult,
    Runner,
    ToolCommand,
    _end,
    _missing,
    _reason,
    _require,
    _show,
    _which,
    check_files,
    register,
)

# ---------------------------------------------------------------------- STM32CubeProgrammer

PRG_ENV = "STM32_PRG_PATH"
PRG_CLI = "STM32_Programmer_CLI"


def _default_programmer_dirs() -> list[Path]:
    """Where ST's installers put STM32CubeProgrammer's bin folder (and STM32CubeCLT's copy of it)."""
    dirs = [
        Path.home() / "STMicroelectronics/STM32Cube/STM32CubeProgrammer/bin",
        Path(
            "/Applications/STMicroelectronics/STM32Cube/STM32CubeProgrammer/STM32CubeProgrammer.app/Contents/MacOs/bin"
        ),
        Path("C:/Program Files/STMicroelectronics/STM32Cube/STM32CubeProgrammer/bin"),
    ]
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


def sign_command(fw, tool: str = "STM32_SigningTool_CLI") -> list[str]:
    """ST's signing tool turning the raw image (the IMAGE region's sections) into the FSBL image
    the boot ROM accepts; the options come from the board's flash entry (`sign`)."""
    return [tool, "-bin", str(fw.bin), *fw.entry["sign"], "-o", str(fw.signed_bin)]


@register
class StM32CubeProgrammerRunner(Runner):
    """STM32CubeProgrammer. Mode "ram" (development boot): ST-LINK_gdbserver in the background,
    then gdb `target remote :PORT`, `load` (writes the ELF's sections and sets the PC to its
    entry point) and `detach` (the core runs on; batch gdb then exits and so does the
    non-persistent gdbserver). Mode "flash": sign the BIN as an FSBL image, write it to the
    external flash at `address` with the board's external loader, from STM32CubeProgrammer's
    bin/ExternalLoader folder."""

    method = "stm32cubeprogrammer"
    settings = {
        "mode": (Enum(("ram", "flash")), True),
        "gdbserver_port": (int, False),  # ram: ST-LINK_gdbserver, then gdb `load` and `continue`
        "gdbserver_args": (LIST, False),
        "connect": (LIST, False),  # flash: STM32_Programmer_CLI --connect ...
        "external_loader": (str, False),
        "address": (int, False),
        "sign": (LIST, False),
    }
    tools = {
        PRG_CLI: "install STM32CubeProgrammer (ST's download page 'STM32CubeProg'), then put its bin folder on "
        "PATH or set STM32_PRG_PATH to it",
        "STM32_SigningTool_CLI": "it comes with STM32CubeProgrammer (ST's download page 'STM32CubeProg'): put its "
        "bin folder on PATH or set STM32_PRG_PATH to it",
        "ST-LINK_gdbserver": "it comes with STM32CubeCLT or STM32CubeIDE (ST's download pages 'STM32CubeCLT', "
        "'STM32CubeIDE'): put the folder that holds it on PATH",
        "arm-none-eabi-gdb": "install a GDB for Arm (Debian/Ubuntu: apt-get install gdb-multiarch; or the Arm GNU "
        "Toolchain's arm-none-eabi-gdb on PATH)",
    }
    server_exit_wait = 10.0  # seconds for ST-LINK_gdbserver to exit after gdb detached, before it is ended

    @classmethod
    def check_entry(cls, entry: dict, where: str) -> None:
        mode = entry["mode"]
        needs = (
            ("connect", "external_loader", "address", "sign")
            if mode == "flash"
            else ("gdbserver_port", "gdbserver_args")
        )
        for key in needs:
            if key not in entry:
                raise BoardError(f"{where}: missing required key '{key}' ({mode} mode)")

    def prepare(self, fw, opts, dry_run=False):
        elsewhere = loaded_elsewhere(fw.board) if fw.entry["mode"] == "flash" else []
        if elsewhere:  # the boot ROM copies the image only: the rest would be missing at run time
            where = ", ".join(f"{s} in {r}" for s, r in elsewhere)
            raise FlashError(
                f"flash boot copies only the {fw.board.placement['code']} image, but the memory plan put "
                f"{where}: load this build in development mode (method 'ram'), or rebuild it with "
                "--boot flash (weights and data that do not fit the image then stay in the external "
                "flash)"
            )
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
            _require(
                opts,
                "arm-none-eabi-gdb",
                dry_run,
                _cubeclt_dirs("GNU-tools-for-STM32/bin"),
                alternatives=("gdb-multiarch",),
            )
        return opts

    def _prg(self, opts: FlashOptions, name: str) -> str:
        if opts.programmer_bin is None:
            return name
        return str(opts.programmer_bin / name)

    def inputs(self, fw):
        nor = [fw.nor_bin] if flash_data_address(fw.board) is not None else []
        if fw.entry["mode"] == "ram":
            return [fw.ram_elf] + nor if nor else [fw.elf]
        return [fw.bin] + nor

    def _write_nor(self, fw, opts) -> list[ToolCommand]:
        """The weights and data read in place, written to the external flash before the program that reads them."""
        nor = flash_data_address(fw.board)
        if nor is None:
            return []
        e = fw.entry
        loader_dir = opts.programmer_bin if opts.programmer_bin else Path("<STM32CubeProgrammer bin>")
        write = [
            self._prg(opts, PRG_CLI),
            "--connect",
            *e["connect"],
            "-el",
            str(loader_dir / "ExternalLoader" / e["external_loader"]),
        ]
        return [
            ToolCommand(
                [*write, "--download", str(fw.nor_bin), f"0x{nor:08X}"],
                "write the data read in place to the external flash",
                1800,
            )
        ]

    def steps(self, fw, opts):
        e = fw.entry
        if e["mode"] == "ram":
            port = str(e["gdbserver_port"])
            cp = str(opts.programmer_bin) if opts.programmer_bin else "<STM32CubeProgrammer bin>"
            server = [*opts.tool("ST-LINK_gdbserver"), "-p", port, *e["gdbserver_args"], "-cp", cp]
            # with data in the external flash, gdb loads the ELF without those sections (_ram.elf)
            elf = fw.ram_elf if flash_data_address(fw.board) is not None else fw.elf
            gdb = [
                *opts.tool("arm-none-eabi-gdb"),
                "-nx",
                "-batch",
                "-ex",
                f"target remote :{port}",
                "-ex",
                "load",
                "-ex",
                "detach",
                str(elf),
            ]
            return [
                *self._write_nor(fw, opts),
                ToolCommand(server, "gdb server (ST-LINK)", background=True),
                ToolCommand(gdb, "load into RAM (gdb)", 300),
            ]
        loader_dir = opts.programmer_bin if opts.programmer_bin else Path("<STM32CubeProgrammer bin>")
        sign = sign_command(fw, self._prg(opts, "STM32_SigningTool_CLI"))
        write = [
            self._prg(opts, PRG_CLI),
            "--connect",
            *e["connect"],
            "-el",
            str(loader_dir / "ExternalLoader" / e["external_loader"]),
        ]
        return [
            ToolCommand(sign, "sign the FSBL image", 120),
            *self._write_nor(fw, opts),
            ToolCommand(
                [*write, "--download", str(fw.signed_bin), f"0x{e['address']:08X}", "--start"],
                "write the external flash",
                900,
            ),
        ]

    def done_message(self, fw):
        nor = flash_data_address(fw.board)
        if fw.entry["mode"] == "ram":
            where = f"{fw.nor_bin.name} written to the external flash at 0x{nor:08X}; " if nor is not None else ""
            return f"{where}{fw.elf.name} loaded into RAM and running (lost at power-off; reset the core only)"
        if nor is not None:
            return (
                f"{fw.nor_bin.name} written to the external flash at 0x{nor:08X} and {fw.signed_bin.name} at "
                f"0x{fw.entry['address']:08X}; set the boot switches for flash boot and press RESET"
            )
        return (
            f"{fw.signed_bin.name} written to the external flash at 0x{fw.entry['address']:08X}; set the boot "
            "switches for flash boot and press RESET"
        )

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
        *before, server, gdb = self.steps(fw, opts)
        n = len(before) + 2
        log = fw.dir / FLASH_LOG
        with open(log, "w") as out:
            for i, step in enumerate(before, 1):  # the external flash's part first
                if _which(PRG_CLI, [opts.programmer_bin] if opts.programmer_bin else []) is None:
                    raise _missing(PRG_CLI)
                say(f"flash   [{i}/{n}] {step.what}: {_show(step.argv)}")
                self._run_step(step, out, log)
            say(f"flash   [{n - 1}/{n}] {server.what}: {_show(server.argv)}")
            out.write(f"$ {_show(server.argv)} &\n")
            out.flush()
            try:
                proc = subprocess.Popen(server.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            except FileNotFoundError:
                raise _missing("ST-LINK_gdbserver") from None
            try:
                say(f"flash   [{n}/{n}] {gdb.what}: {_show(gdb.argv)}")
                deadline = time.monotonic() + 20.0
                while True:  # the server needs a moment to open its port; a refused connection is retried
                    try:
                        self._run_step(gdb, out, log)
                        break
                    except FlashError as err:
                        if proc.poll() is not None:
                            raise FlashError(
                                f"ST-LINK_gdbserver stopped (exit {proc.returncode}): "
                                f"{_reason(log.read_text(errors='replace'))} (output in {log})"
                            ) from None
                        if "Connection refused" not in str(err) and "connection refused" not in str(err).lower():
                            raise
                        if time.monotonic() > deadline:
                            raise FlashError(
                                f"ST-LINK_gdbserver did not accept gdb on port "
                                f"{fw.entry['gdbserver_port']} within 20 s (output in {log})"
                            ) from None
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
        return FlashResult(self.method, fw.entry["name"], [s.argv for s in (*before, server, gdb)], message=msg)
