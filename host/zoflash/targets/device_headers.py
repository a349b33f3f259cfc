"""--device-headers: compile a port against the vendor's official device headers.

A port lists the headers it needs (port.toml `device_headers`, e.g. stm32n657xx.h and the Arm
CMSIS core header it includes). The user names checkouts (cmsis-device-n6, STM32CubeN6, a
CMSIS core); each needed header is looked for in the usual folders of those layouts, and the
folders found become include paths. The Makefile then defines ZO_DEVICE_HEADERS, which makes the
port take its register definitions from the header instead of its own (checked equal by tests).
"""

from __future__ import annotations

from pathlib import Path

from zoflash.errors import ZoflashError
from zoflash.targets.boards import Board, load_port

# Where the headers sit in the checkouts a user may have: cmsis-device-n6 (Include/), STM32CubeN6
# (Drivers/CMSIS/...), Arm CMSIS 5/6 (CMSIS/Core/Include, Core/Include), or the folder itself.
SEARCH = (
    ".",
    "Include",
    "Drivers/CMSIS/Device/ST/STM32N6xx/Include",
    "Drivers/CMSIS/Include",
    "Drivers/CMSIS/Core/Include",
    "CMSIS/Core/Include",
    "Core/Include",
)


class DeviceHeadersError(ZoflashError):
    """--device-headers names no folder holding a header the port needs."""


def include_dirs(board: Board, paths) -> list[Path]:
    """The include folders (absolute, in the order of the needed headers) for the port of `board`
    from the checkouts in `paths`; DeviceHeadersError names every header not found and where it
    was looked for."""
    paths = [Path(p).expanduser() for p in paths]
    if not paths:
        return []
    port = load_port(board.port)
    if not port.device_headers:
        raise DeviceHeadersError(
            f"--device-headers: the '{board.port}' port of board '{board.id}' does not "
            "compile against vendor headers (only boards with device_headers in their "
            "port.toml do)"
        )
    for p in paths:
        if not p.is_dir():
            raise DeviceHeadersError(
                f"--device-headers '{p}': not a folder (give a checkout of ST's "
                "cmsis-device-n6 or STM32CubeN6, and of Arm's CMSIS core)"
            )
    dirs: list[Path] = []
    missing = []
    for header in port.device_headers:
        found = next((p / s for p in paths for s in SEARCH if (p / s / header).is_file()), None)
        if found is None:
            missing.append(header)
        elif found.resolve() not in dirs:
            dirs.append(found.resolve())
    if missing:
        looked = ", ".join(str(p) for p in paths)
        raise DeviceHeadersError(
            f"--device-headers: {', '.join(missing)} not found under {looked} (looked in "
            f"{', '.join(SEARCH)} of each); stm32n657xx.h is in ST's cmsis-device-n6 (Include/) or "
            "STM32CubeN6 (Drivers/CMSIS/Device/ST/STM32N6xx/Include/), core_cm55.h in Arm's CMSIS core "
            "(CMSIS/Core/Include/, or STM32CubeN6's Drivers/CMSIS/Include/): give each checkout with "
            "its own --device-headers"
        )
    return dirs
