"""The build settings beside the training options: the boot mode (--boot) and the vendor
headers (--device-headers), from the command line or a zoflash.toml `[build]` table:

    [build]
    boot = "flash"                                    # dev (default) or flash
    device_headers = ["../cmsis-device-n6", "../CMSIS_6"]  # relative to the project file

The command line wins over the project file.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser
    import tomli as tomllib


from zoflash.errors import ZoflashError
from zoflash.targets.boards import BOOT_MODES

BUILD_KEYS = ("boot", "device_headers")


class BuildOptionsError(ZoflashError):
    """A [build] table or a build flag is wrong."""


def _build_table(project_file: str | Path | None) -> tuple[dict, Path]:
    path = Path(project_file) if project_file is not None else Path("zoflash.toml")
    if project_file is None and not path.is_file():
        return {}, Path(".")
    try:  # the [train] loader (training/options.py) reports unreadable files and bad TOML first
        table = tomllib.loads(path.read_bytes().decode("utf-8")).get("build", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}, path.parent
    if not isinstance(table, dict):
        raise BuildOptionsError(f"'{path}': [build] must be a table")
    unknown = sorted(set(table) - set(BUILD_KEYS))
    if unknown:
        raise BuildOptionsError(
            f"'{path}' [build]: unknown key(s) {', '.join(unknown)}; known: {', '.join(BUILD_KEYS)}"
        )
    if "boot" in table and table["boot"] not in BOOT_MODES:
        raise BuildOptionsError(
            f"'{path}' [build]: 'boot' must be one of {', '.join(BOOT_MODES)}, got {table['boot']!r}"
        )
    heads = table.get("device_headers", [])
    if not isinstance(heads, list) or not all(isinstance(h, str) for h in heads):
        raise BuildOptionsError(f"'{path}' [build]: 'device_headers' must be a list of folder names")
    return table, path.parent


def build_settings(
    project_file: str | Path | None = None, boot: str | None = None, device_headers=()
) -> tuple[str, tuple[str, ...]]:
    """(boot mode, vendor header folders): flags < the project file's [build] < defaults."""
    table, base = _build_table(project_file)
    heads = tuple(device_headers) or tuple(str(base / h) for h in table.get("device_headers", ()))
    return boot or table.get("boot", "dev"), heads
