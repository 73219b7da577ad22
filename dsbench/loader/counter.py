"""The instruction counter behind the exact pass: valgrind's cachegrind.

Cachegrind runs a program on a CPU simulated in software and counts the instructions it
executes. The count is the program's alone: the same binary on the same input executes the same
instructions whatever else the machine is doing, so, unlike a CPU time, it does not move with a
busy neighbour, and it works where the processor's own counters are not exposed (virtual
machines, hosted CI runners). It is not a time: it does not see the kernel, cache misses, I/O
waits or how many instructions a core retires per cycle.

Cachegrind (valgrind 3.19) counts from a process's start to its exit and cannot be asked for a
count in between. A process under it that forks gives the child a copy of its counts so far,
and the child, exiting at once, has its total written to its own log: a fork is a snapshot of
the parent's count at that point (`snapshot()`, called in the counted process). The child's own
few instructions, and the fork's in the parent, are the same at every snapshot; two snapshots
back to back measure them, and the exact pass takes them off every stage (exact_pass.py).

The counts depend on the counter and its options, which every result records (`describe()`),
and on the CPU features valgrind reports (libraries choose their code by them): results are
compared exactly only when both were counted alike on the same kind of CPU.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TypedDict

TOOL = "valgrind"
# Only instructions: cache and branch simulation would slow the run and add nothing exact.
OPTIONS = ("--tool=cachegrind", "--cache-sim=no", "--branch-sim=no")
KIND = "simulated"  # a CPU simulated in software (the processor's own counters: "hardware")
EVENT = "instructions"
INSTALL = ("valgrind is not installed, so CPU per sample is timed only (install it: "
           "sudo apt-get install valgrind on Debian and Ubuntu, sudo dnf install valgrind on "
           "Fedora)")
_TOTAL = re.compile(rb"^==\d+== I\s+refs:\s+([\d,]+)\s*$", re.MULTILINE)


class Description(TypedDict):
    name: str
    version: str
    kind: str
    event: str
    options: str


@functools.lru_cache(maxsize=1)
def version() -> str | None:
    """valgrind's version ('3.19.0'), or None where it is not installed or does not run."""
    exe = shutil.which(TOOL)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip()
    return text.removeprefix("valgrind-") if done.returncode == 0 and text else None


def describe() -> Description | None:
    """What counts, as results record it; None without valgrind."""
    v = version()
    if v is None:
        return None
    return {"name": "valgrind cachegrind", "version": v, "kind": KIND, "event": EVENT,
            "options": " ".join(OPTIONS)}


def command(argv: list[str], logs: Path) -> list[str]:
    """`argv` run under the counter, every process's log (with its total) in `logs`."""
    return [TOOL, *OPTIONS, "--cachegrind-out-file=/dev/null", f"--log-file={logs}/%p.log",
            *argv]


def totals(logs: Path) -> dict[int, int]:
    """Instructions counted in each process that logged to `logs`, by process id (a process
    that ended before cachegrind wrote its total is not in it)."""
    out = {}
    for log in logs.glob("*.log"):
        found = _TOTAL.search(log.read_bytes())
        if found and log.stem.isdigit():
            out[int(log.stem)] = int(found[1].replace(b",", b""))
    return out


def snapshot() -> int:
    """In the counted process: a child that exits at once, so that cachegrind writes the count
    so far to the child's log; returns the child's process id. Nothing in the child runs
    Python (os._exit), so no lock another thread holds can stop it."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid
