"""OpenOCD with the board's interface and target configs."""

from __future__ import annotations

from pathlib import Path

from zoflash.targets.boards import LIST
from zoflash.targets.runners.base import Runner, ToolCommand, _require, entry_address, register

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
    settings = {"config": (LIST, True), "commands": (LIST, False)}
    tools = {
        "openocd": "install it (Debian/Ubuntu: apt-get install openocd; the STM32N6 needs an OpenOCD with "
        "target/stm32n6x.cfg, newer than Debian's 0.12)",
    }

    def prepare(self, fw, opts, dry_run=False):
        _require(opts, "openocd", dry_run)
        return opts

    def steps(self, fw, opts):
        e = fw.entry
        argv = opts.tool("openocd")
        for cfg in e["config"]:
            argv += ["-f", cfg]
        if "commands" in e:
            values = {"elf": _tcl(fw.elf), "bin": _tcl(fw.bin), "hex": _tcl(fw.hex), "entry": entry_address(fw)}
            cmds = [c.format(**values) for c in e["commands"]]
        elif fw.runs_from_ram:
            elf = _tcl(fw.elf)
            cmds = [
                "init",
                "halt",
                f"load_image {elf}",
                f"verify_image {elf}",
                f"resume {entry_address(fw)}",
                "shutdown",
            ]
        else:
            cmds = [f"program {_tcl(fw.elf)} verify reset exit"]
        for c in cmds:
            argv += ["-c", c]
        return [ToolCommand(argv, "load (OpenOCD)" if fw.runs_from_ram else "program (OpenOCD)", 600)]
