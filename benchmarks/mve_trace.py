"""How many of the instructions an ELF executes under QEMU are Helium (MVE) instructions.

QEMU counts every executed instruction as one (`-icount`), but the Cortex-M55 executes a 128-bit
MVE instruction in two beats, so a cycle estimate needs the MVE count. The trace itself
(QEMU `-singlestep -d exec,nochain` between the harness's first two calls of `zo_infer_mark`, each
executed address classified from the ELF's disassembly) lives in zoflash.targets.exec_trace, which
`zoflash profile` uses too. Slow (a log line per instruction): used once per model, on a build that
runs one inference.
"""

from __future__ import annotations

from pathlib import Path

from zoflash.targets import exec_trace

MARK = exec_trace.MARK


def count(elf: Path, timeout_s: float = 1800) -> dict:
    """Executed instructions and MVE instructions between the first two calls of MARK."""
    return exec_trace.count_between_marks(
        elf,
        exec_trace.binutil("arm-none-eabi-gcc", "nm"),
        exec_trace.binutil("arm-none-eabi-gcc", "objdump"),
        lambda e, mark: exec_trace.traced_pcs(e, mark, timeout_s=timeout_s),
    )
