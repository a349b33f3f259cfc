"""The stm32n6 port's register facts (zo_port_stm32n6_regs.h) and ST's header stm32n657xx.h:
the ZO_ names, a C file asserting their values, and the pieces needed to compile against the
header (its checkout in the mirror, when present, and a stand-in for Arm's CMSIS core header).

Used by tests/test_n6_regs.py and by `.venv/bin/python tests/n6regs.py`, which rewrites
tests/fixtures/stm32n657xx_facts.toml from the header (the values a fresh machine checks the
port's own numbers against)."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser
    import tomli as tomllib


MIRROR = Path("/work/.mirror/STMicroelectronics+cmsis-device-n6")
COMMIT = "f818b00f775444e8d19ef6cad822534c345e054f"  # cmsis-device-n6 v1.1.0
FACTS = Path(__file__).resolve().parent / "fixtures" / "stm32n657xx_facts.toml"
HEADERS = ("stm32n657xx.h", "system_stm32n6xx.h")

# Arm's CMSIS core header is not in cmsis-device-n6 and not on this machine: this stand-in
# (written for the tests) defines only the access qualifiers stm32n657xx.h's types use.
CORE_STANDIN = """/* Test stand-in for Arm CMSIS core_cm55.h: only what stm32n657xx.h's register types use. */
#include <stdint.h>
#define __I volatile const
#define __O volatile
#define __IO volatile
#define __IM volatile const
#define __OM volatile
#define __IOM volatile
"""


def port_dir() -> Path:
    return Path(str(resources.files("zoflash.firmware_templates") / "ports" / "stm32n6"))


def regs_names() -> list[str]:
    """Every ZO_ constant of the port's own branch (the names the port uses)."""
    text = (port_dir() / "zo_port_stm32n6_regs.h").read_text()
    own = text[text.index("#else /* the port's own numbers") : text.index("#endif /* ZO_DEVICE_HEADERS */")]
    return re.findall(r"^#define (ZO_\w+)\s", own, flags=re.M)


def mirror_repo() -> Path | None:
    for d in (MIRROR / "repo", MIRROR):
        if (d / "HEAD").is_file():
            return d
    return None


def extract_headers(out: Path) -> Path | None:
    """ST's headers at COMMIT (or the mirror's HEAD if it lacks it) in out/Include and the core
    stand-in in out/core; None without the mirror."""
    repo = mirror_repo()
    if repo is None:
        return None
    inc = out / "Include"
    inc.mkdir(parents=True, exist_ok=True)
    has = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", COMMIT], capture_output=True).returncode == 0
    for h in HEADERS:
        text = subprocess.run(
            ["git", "-C", str(repo), "show", f"{COMMIT if has else 'HEAD'}:Include/{h}"],
            capture_output=True,
            check=True,
        ).stdout
        (inc / h).write_bytes(text)
    (out / "core").mkdir(exist_ok=True)
    (out / "core" / "core_cm55.h").write_text(CORE_STANDIN)
    return out


def assert_source(facts: dict[str, int]) -> str:
    """A C file that compiles only if every ZO_ constant equals its fact."""
    lines = ['#include "zo_port_stm32n6_regs.h"']
    lines += [f'_Static_assert((unsigned long long)({n}) == {v:#x}ull, "{n} is not {v:#x}");' for n, v in facts.items()]
    return "\n".join(lines) + "\n"


def read_facts() -> dict[str, int]:
    return dict(tomllib.loads(FACTS.read_text())["facts"])


def write_facts(tmp: Path) -> None:
    """Evaluate every ZO_ name with ZO_DEVICE_HEADERS (its value from ST's header) on the host."""
    if extract_headers(tmp) is None:
        sys.exit(f"no cmsis-device-n6 mirror at {MIRROR}")
    body = "\n".join(f'    printf("{n} = 0x%llX\\n", (unsigned long long)({n}));' for n in regs_names())
    (tmp / "print.c").write_text(
        f'#include <stdio.h>\n#include "zo_port_stm32n6_regs.h"\nint main(void)\n{{\n{body}\n    return 0;\n}}\n'
    )
    exe = tmp / "print"
    subprocess.run(
        [
            "gcc",
            "-std=c11",
            "-DZO_DEVICE_HEADERS",
            f"-I{port_dir()}",
            f"-I{tmp / 'Include'}",
            f"-I{tmp / 'core'}",
            "-o",
            str(exe),
            str(tmp / "print.c"),
        ],
        check=True,
    )
    values = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    FACTS.write_text(
        "# The STM32N657 register facts the stm32n6 port uses (firmware_templates/ports/stm32n6/\n"
        "# zo_port_stm32n6_regs.h), each evaluated from ST's device header stm32n657xx.h\n"
        f"# (STMicroelectronics/cmsis-device-n6 v1.1.0, commit {COMMIT}, Apache-2.0) by\n"
        "# compiling the port's header with ZO_DEVICE_HEADERS; `.venv/bin/python tests/n6regs.py`\n"
        "# rewrites it. Numbers only, no code from the header. tests/test_n6_regs.py checks the\n"
        "# port's own numbers against them.\n[facts]\n" + values
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write_facts(Path(d))
    print(f"wrote {FACTS}")
