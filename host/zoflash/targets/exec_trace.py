"""Which instructions an ELF executes under QEMU, address by address.

QEMU's `-icount` counts executed instructions but says nothing of where they run. Debian's QEMU
has no TCG plugins, so this runs the ELF with `-singlestep -d exec,nochain` (one translation
block per instruction, one log line per executed instruction, with its address) and keeps the
addresses executed between the program's first two calls of a marker function (the harness's
`zo_infer_mark`: one inference). Addresses are then named with the ELF's symbol table
(`nm`) and classified from its disassembly (`objdump`): an MVE (Helium) instruction is one with
a Q-register operand, or VPT/VPST/VCTP (predication, which also takes beats). Slow (a log line per
instruction, about a million a second): for one inference, not for timing loops.

Used by `zoflash profile` (workflows/profile.py) and benchmarks/mve_trace.py.
"""

from __future__ import annotations

import bisect
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from zoflash.errors import BuildError
from zoflash.targets.host_build import require

MARK = "zo_infer_mark"  # firmware_templates/runtime/harness/zo_infer_main.c (built with -DZO_INFER_TRACE)
_OBJDUMP_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{4} ?){1,2}\s+(\S+)\s*(.*)$")
_Q_REG = re.compile(r"\bq[0-7]\b")
_PREDICATION = ("vpst", "vpt", "vctp")
_TOOL_HINT = "install the Arm GNU toolchain (Debian/Ubuntu: apt-get install gcc-arm-none-eabi binutils-arm-none-eabi)"


def binutil(cc: str, tool: str) -> str:
    """The binutils program beside the compiler `cc` (arm-none-eabi-gcc -> arm-none-eabi-nm)."""
    name = cc[: -len("gcc")] + tool if cc.endswith("gcc") else tool
    return require(name, _TOOL_HINT)


@dataclass
class Symbols:
    """The ELF's functions, sorted by address: where each starts, its size, its name."""

    starts: list[int]
    sizes: list[int]
    names: list[str]

    @classmethod
    def read(cls, elf: Path, nm: str) -> Symbols:
        text = subprocess.run(
            [nm, "-n", "-S", "--defined-only", str(elf)], capture_output=True, text=True, check=True
        ).stdout
        rows = []
        for line in text.splitlines():
            parts = line.split()
            # "address size type name"; code symbols are t/T (local/global) or w/W (weak)
            if len(parts) == 4 and parts[2] in "tTwW":
                rows.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
        rows.sort()
        return cls([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    def address(self, name: str) -> int | None:
        return next((a for a, n in zip(self.starts, self.names) if n == name), None)

    def span(self, name: str) -> tuple[int, int]:
        """[start, end) of a function; BuildError when the ELF has no such function."""
        for a, s, n in zip(self.starts, self.sizes, self.names):
            if n == name:
                return a, a + s
        raise BuildError(f"the traced program has no function '{name}' (is it inlined or renamed?)")

    def function_at(self, pc: int) -> str:
        """The function holding address pc ("?" outside every function)."""
        k = bisect.bisect_right(self.starts, pc) - 1
        if k >= 0 and pc < self.starts[k] + max(self.sizes[k], 1):
            return self.names[k]
        return "?"


def mve_addresses(elf: Path, objdump: str) -> dict[int, str]:
    """{address: mnemonic} of the ELF's MVE instructions."""
    text = subprocess.run(
        [objdump, "-d", "-m", "armv8.1-m.main", str(elf)], capture_output=True, text=True, check=True
    ).stdout
    mve = {}
    for line in text.splitlines():
        m = _OBJDUMP_LINE.match(line)
        if m is None:
            continue
        op = m.group(2)
        if op.startswith("v") and (op.startswith(_PREDICATION) or _Q_REG.search(m.group(3))):
            mve[int(m.group(1), 16)] = op
    return mve


# The mps3-an547 board file's QEMU arguments: under -icount the SysTick interrupt lands at the same
# instruction in every run, so a trace is deterministic.
QEMU_ARGS = ("-nographic", "-semihosting", "-icount", "shift=0")


def traced_pcs(
    elf: Path,
    mark: int,
    program: str = "qemu-system-arm",
    machine: str = "mps3-an547",
    args: tuple[str, ...] | list[str] = QEMU_ARGS,
    timeout_s: float = 1800,
) -> Iterator[int]:
    """The address of every instruction the ELF executes under QEMU between the first two calls of
    the function at `mark` (Thumb bit cleared). BuildError when the program does not reach both."""
    cmd = [program, "-M", machine, *args, "-singlestep", "-d", "exec,nochain", "-D", "/dev/stderr"]
    cmd += ["-monitor", "none", "-kernel", str(elf)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marks = lines = 0
    deadline = time.monotonic() + timeout_s
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            lines += 1
            if lines & 0xFFFFF == 0 and time.monotonic() > deadline:
                raise BuildError(f"{elf.name}: the traced run did not reach its end marker within {timeout_s:g} s")
            # "Trace 0: 0x7f.. [00000000/0000abcd/00000000/ff200000] symbol": the guest pc is the 2nd field
            if not line.startswith("Trace "):
                continue  # e.g. "Stopped execution of TB chain before ..." (the same TB follows)
            lb = line.find("[")
            pc = int(line[lb + 10 : lb + 18], 16) & ~1
            if pc == mark:
                marks += 1
                if marks == 2:
                    break
                continue
            if marks == 1:
                yield pc
    finally:
        proc.kill()
        proc.wait(timeout=timeout_s)
    if marks < 2:
        raise BuildError(
            f"{elf.name}: the marker ran {marks} times under QEMU (expected 2): the traced run stopped early"
        )


@dataclass
class CallTrace:
    """Executed instructions of one traced region, split by the calls a dispatcher makes.

    calls[k] counts, address by address, what the k-th expected call executed (the callee and
    everything it calls); overhead counts the rest (the dispatcher's own instructions, and any
    call it makes that is not one of the expected ones)."""

    calls: list[Counter]
    overhead: Counter
    total: int


def split_by_calls(pcs: Iterator[int], home: list[tuple[int, int]], entries: list[int]) -> CallTrace:
    """Attribute executed addresses to the calls the dispatcher makes, in order. `home` holds the
    [start, end) of the dispatcher and of its caller (where a tail call returns to); the k-th time
    execution leaves home for the entry address entries[k], call k starts, and everything executed
    until execution is back home belongs to it."""
    calls: list[Counter] = [Counter() for _ in entries]
    overhead: Counter = Counter()
    current: Counter = overhead
    inside, following, total = True, 0, 0
    for pc in pcs:
        total += 1
        if any(lo <= pc < hi for lo, hi in home):
            inside = True
            overhead[pc] += 1
            continue
        if inside:  # execution just left home: a call (or a tail call)
            inside = False
            if following < len(entries) and pc == entries[following]:
                current = calls[following]
                following += 1
            else:
                current = overhead
        current[pc] += 1
    if following != len(entries):
        raise BuildError(
            f"the traced inference made {following} of the {len(entries)} kernel calls expected: "
            "the dispatch order of the generated code and the trace disagree"
        )
    return CallTrace(calls, overhead, total)


def summarize(counts: Counter, symbols: Symbols, mve: dict[int, str]) -> dict:
    """Instructions, MVE instructions and instructions per function of one attribution."""
    by_function: Counter = Counter()
    for pc, n in counts.items():
        by_function[symbols.function_at(pc)] += n
    return {
        "instructions": sum(counts.values()),
        "mve": sum(n for pc, n in counts.items() if pc in mve),
        "functions": dict(by_function.most_common()),
    }


def count_between_marks(elf: Path, nm: str, objdump: str, run: Callable[..., Iterator[int]] = traced_pcs) -> dict:
    """Executed instructions and MVE instructions between the first two calls of MARK, with the
    MVE instructions by mnemonic (benchmarks/mve_trace.py)."""
    symbols = Symbols.read(elf, nm)
    mark = symbols.address(MARK)
    if mark is None:
        raise BuildError(f"{elf}: no {MARK} function (the harness must be built with -DZO_INFER_TRACE)")
    mve = mve_addresses(elf, objdump)
    counts = Counter(run(elf, mark))
    executed: Counter = Counter()
    for pc, n in counts.items():
        if pc in mve:
            executed[mve[pc]] += n
    return {
        "instructions": sum(counts.values()),
        "mve": sum(executed.values()),
        "by_mnemonic": dict(executed.most_common()),
    }


@dataclass
class PhaseTrace:
    """Executed instructions of one traced region by phase (address by address), and how many
    calls entered each phase from another."""

    phases: dict[str, Counter]
    calls: Counter
    total: int


def split_by_phase(pcs: Iterator[int], symbols: Symbols, classify: Callable[[str], str | None]) -> PhaseTrace:
    """Attribute executed addresses to phases along the call stack, rebuilt from the addresses alone:
    execution at a function's first instruction from elsewhere is a call (tail calls included),
    execution back in a function already on the stack is a return to it (any frames above it end).
    classify(name) gives the phase a call of that function opens (e.g. "update" for zo_update_s8),
    or None: its instructions belong to the phase of the frame that called it ("other" at the
    bottom). It may answer by call order, as it is asked once per call, in order."""
    stack: list[tuple[int, str]] = [(-1, "other")]
    where: dict[int, tuple[int, bool]] = {}
    phases: dict[str, Counter] = {}
    calls: Counter = Counter()
    total = 0
    for pc in pcs:
        total += 1
        info = where.get(pc)
        if info is None:
            k = bisect.bisect_right(symbols.starts, pc) - 1
            info = where[pc] = (k, k >= 0 and symbols.starts[k] == pc)
        k, entry = info
        if k != stack[-1][0]:
            if entry:
                name = symbols.names[k] if k >= 0 else "?"
                phase = classify(name)
                if phase is not None and phase != stack[-1][1]:
                    calls[phase] += 1
                stack.append((k, phase or stack[-1][1]))
            else:
                depth = next((d for d in range(len(stack) - 1, -1, -1) if stack[d][0] == k), None)
                if depth is not None:
                    del stack[depth + 1 :]
                else:  # a jump into the middle of another function: it takes the frame's place
                    stack[-1] = (k, stack[-1][1])
        counts = phases.get(stack[-1][1])
        if counts is None:
            counts = phases[stack[-1][1]] = Counter()
        counts[pc] += 1
    return PhaseTrace(phases, calls, total)
