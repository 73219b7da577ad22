"""The loader's memory, split as the kernel accounts it.

Proportional set size (PSS) shares each page among the processes that map it. The kernel splits
it (/proc/<pid>/smaps_rollup) into what a job pays and what it does not:

- `anon`: anonymous memory, the loader's own heap (decoded images, batches, a row group held by a
  columnar reader, a library's buffers): what the node must hold for every worker;
- `file`: file-backed pages mapped by the process, such as a memory-mapped Arrow shard: clean
  page cache that the kernel drops under pressure;
- `shmem`: shared memory, here the ring that carries batches to the main process.

`pss` is their sum. A kernel older than 5.7 gives `pss` alone (from psutil); the split is then
absent rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

KINDS = ("pss", "anon", "file", "shmem")
_FIELDS = {"Pss:": "pss", "Pss_Anon:": "anon", "Pss_File:": "file", "Pss_Shmem:": "shmem"}

Memory = dict[str, int]


def of(pid: int) -> Memory:
    """One process's PSS and its split, in bytes; {} when it has exited."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return {}
    except OSError:
        return _psutil_pss(pid)
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in _FIELDS:
            out[_FIELDS[name]] = int(rest.split()[0]) * 1024  # kB
    return out if "pss" in out else _psutil_pss(pid)


def _psutil_pss(pid: int) -> Memory:
    try:
        return {"pss": int(psutil.Process(pid).memory_full_info().pss)}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {}


@dataclass(frozen=True)
class Base:
    """What a round's memory is measured from: this process's own memory, and the processes it
    already had that are not the loader's (the program that embeds dsbench may run others)."""
    main: Memory
    others: frozenset[int]


def base(helpers: frozenset[int]) -> Base:
    """Measured before a round's workers and buffers exist. `helpers` are the loader's own
    processes that outlive a round (forks.helpers: the server its workers fork from and
    multiprocessing's resource tracker): counted in every round alike, not only in the round
    that started them."""
    me = psutil.Process()
    return Base(of(me.pid), frozenset(p.pid for p in me.children() if p.pid not in helpers))


def tree(round_base: Base) -> Memory:
    """The loader's memory: the processes this one started since `round_base`, with all they
    started (the workers), plus what this process grew by since then. Its own base (the
    interpreter, libraries, what measuring another export left in its allocators, such as a
    Parquet count pass's Arrow buffers) is not this export's cost, and would make the same
    export's figure depend on what it was measured with; nor is a process the caller had
    running already, with what it starts meanwhile."""
    me = psutil.Process()
    now = of(me.pid)
    keys = [k for k in KINDS if k in now]
    total = {k: max(0, now[k] - round_base.main.get(k, 0)) for k in keys}
    for child in me.children():
        if child.pid in round_base.others:
            continue
        try:
            family = [child, *child.children(recursive=True)]
        except psutil.Error:
            continue  # it has exited
        for p in family:
            measured = of(p.pid)
            for k in keys:
                total[k] += measured.get(k, 0)
    return total


def peak(a: Memory, b: Memory) -> Memory:
    """Each kind's own peak: the largest of each figure, which need not come at one moment."""
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in KINDS if k in a or k in b}


def result_fields(m: Memory) -> dict[str, int]:
    """A peak as a result's keys: peak_pss_bytes, and the split when the kernel gave it."""
    out = {"peak_pss_bytes": m.get("pss", 0)}
    if "anon" in m:
        out |= {f"peak_pss_{k}_bytes": m.get(k, 0) for k in ("anon", "file", "shmem")}
    return out
