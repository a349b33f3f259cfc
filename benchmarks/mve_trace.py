"""How many of the instructions an ELF executes under QEMU are Helium (MVE) instructions.

QEMU counts every executed instruction as one (`-icount`), but the Cortex-M55 executes a 128-bit
MVE instruction in two beats, so a cycle estimate needs the MVE count. Debian's QEMU has no TCG
plugins, so this runs the ELF with `-singlestep -d exec,nochain` (one translation block per
instruction, one log line per executed instruction, with its address), keeps the addresses
executed between the harness's first two calls of `zo_infer_mark` (one inference), and classifies
each address from the ELF's disassembly (`arm-none-eabi-objdump -m armv8.1-m.main`): an MVE
instruction is one with a Q register operand, or VPT/VPST/VCTP (predication, which also takes
beats). Slow (a log line per instruction): used once per model, on a build that runs one inference.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

MARK = "zo_infer_mark"  # firmware_templates/runtime/harness/zo_infer_main.c
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{4} ?){1,2}\s+(\S+)\s*(.*)$")
_Q_REG = re.compile(r"\bq[0-7]\b")
_PREDICATION = ("vpst", "vpt", "vctp")


def classify(elf: Path) -> tuple[dict[int, str], int]:
    """{address: mnemonic} of the ELF's MVE instructions, and the address of MARK."""
    text = subprocess.run(
        ["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], capture_output=True, text=True, check=True
    ).stdout
    mve, mark = {}, None
    for line in text.splitlines():
        if line.endswith(f"<{MARK}>:"):
            mark = int(line.split()[0], 16)
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        op = m.group(2)
        if op.startswith("v") and (op.startswith(_PREDICATION) or _Q_REG.search(m.group(3))):
            mve[int(m.group(1), 16)] = op
    if mark is None:
        raise RuntimeError(f"{elf}: no {MARK} function (the harness must be built with -DZO_INFER_TRACE)")
    return mve, mark


def count(elf: Path, timeout_s: float = 1800) -> dict:
    """Executed instructions and MVE instructions between the first two calls of MARK."""
    mve, mark = classify(elf)
    cmd = [
        "qemu-system-arm",
        "-M",
        "mps3-an547",
        "-nographic",
        "-semihosting",
        "-singlestep",
        "-d",
        "exec,nochain",
        "-D",
        "/dev/stderr",
        "-kernel",
        str(elf),
    ]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    executed, inside = Counter(), 0
    total = marks = 0
    try:
        for line in proc.stderr:
            # "Trace 0: 0x7f.. [00000000/0000abcd/00000000/ff200000] symbol": the guest pc is the 2nd field
            if not line.startswith("Trace "):
                continue  # e.g. "Stopped execution of TB chain before ..." (the same TB follows)
            lb = line.find("[")
            pc = int(line[lb + 10 : lb + 18], 16)
            if pc == mark:
                marks += 1
                inside = marks == 1
                if marks == 2:
                    break
                continue
            if inside:
                total += 1
                op = mve.get(pc & ~1)
                if op is not None:
                    executed[op] += 1
    finally:
        proc.kill()
        proc.wait(timeout=timeout_s)
    if marks < 2:
        raise RuntimeError(f"{elf}: {MARK} ran {marks} times under QEMU (expected 2)")
    return {"instructions": total, "mve": sum(executed.values()), "by_mnemonic": dict(executed.most_common())}
