"""One export written by N processes that share only its directory: `generate --part I/N`.

Slurm array tasks or torchrun ranks, on one machine or many, each write the write units u with
u mod N == I (round-robin, so that a short last unit does not leave one part with less work).
Samples depend only on (seed, index), so every unit is the same bytes whichever part writes it.
A part removes only its own units' temporaries: the others' may be in flight. The part that
finds every unit whole once its own are written finishes the export (a format's merged index,
the complete manifest) under an exclusive lock file, so that two parts ending together do not
both finish it; the result is byte for byte a single run's. If that part is killed while
finishing, or the shared file system shows a part's units late, a plain run (without --part)
completes the export: it has no unit left to write.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dsbench.errors import DsbenchError

LOCK = ".finishing"  # a temporary's mark is not in the name: a plain run must not sweep it


@dataclass(frozen=True)
class Part:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, unit: int) -> bool:
        return unit % self.count == self.index


def parse_part(text: str, env: Mapping[str, str] | None = None) -> Part:
    """`I/N` (0 <= I < N), or `auto`: a Slurm array task's (SLURM_ARRAY_TASK_ID less
    SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT) or a torchrun rank's (RANK of
    WORLD_SIZE)."""
    env = os.environ if env is None else env
    if text == "auto":
        if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
            # An array of a range, with or without a step (--array=0-15, 1-31:2); a list
            # (--array=1,5,9) has no step, and its ids cannot be told apart from a range's.
            first = _int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
            step = _int(env.get("SLURM_ARRAY_TASK_STEP", "1"))
            offset = _int(env["SLURM_ARRAY_TASK_ID"]) - first
            count = _int(env["SLURM_ARRAY_TASK_COUNT"])
            if step < 1 or offset % step or not 0 <= offset // step < count:
                raise DsbenchError(f"--part auto: Slurm array task {env['SLURM_ARRAY_TASK_ID']}"
                                   f" is not the I-th of {count} tasks of a range (ids from "
                                   f"{first} by {step}); give --part I/N")
            text = f"{offset // step}/{count}"
        elif "RANK" in env and "WORLD_SIZE" in env:
            text = f"{env['RANK']}/{env['WORLD_SIZE']}"
        else:
            raise DsbenchError("--part auto: neither a Slurm array task (SLURM_ARRAY_TASK_ID, "
                               "SLURM_ARRAY_TASK_COUNT) nor a torchrun rank (RANK, WORLD_SIZE) "
                               "is set; give --part I/N")
    head, sep, tail = text.partition("/")
    try:
        index, count = int(head), int(tail)
    except ValueError:
        index, count = -1, 0
    if not sep or count < 1 or not 0 <= index < count:
        raise DsbenchError(f"--part {text!r}: expected I/N with 0 <= I < N, e.g. 0/4, or auto")
    return Part(index, count)


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DsbenchError(f"--part auto: {value!r} is not a task id") from None


@contextmanager
def finishing(out: Path) -> Iterator[bool]:
    """Yield whether this process holds the right to finish the export in `out` (another part
    may hold it already); the lock goes when the block ends, whatever happens in it."""
    path = out / LOCK
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        yield False
        return
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        yield True
    finally:
        path.unlink(missing_ok=True)


def is_finishing(out: Path) -> bool:
    return (out / LOCK).exists()


def clear_lock(out: Path) -> None:
    """A plain run finishes the export itself: a lock a killed part left is void."""
    (out / LOCK).unlink(missing_ok=True)
