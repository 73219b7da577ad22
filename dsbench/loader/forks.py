"""Loader workers forked from a server that imported the heavy modules once.

Spawned workers each import torch (2 s here) and a format's library (MosaicML Streaming: 7 s)
afresh, round after round: a sweep of 1, 2, 4 and 8 workers over six rounds would spend
minutes importing. multiprocessing's forkserver imports them once, in a server process started
with the first such round of a run, and forks each worker from it, with nothing else of the
main process's state (its threads, its open exports): what made `spawn` the choice over
`fork`. The server takes the modules of the round that starts it (a later round that needs
others imports them in its workers), and is stopped when the run ends (`stopped_after`), so no
process of a run outlives it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.util
import os
import signal
from collections.abc import Iterator
from multiprocessing import forkserver, resource_tracker
from pathlib import Path
from typing import Any

from dsbench import procs


def context(preload: list[str]) -> Any:
    """The multiprocessing context whose workers fork from the server, started if need be."""
    # multiprocessing's own temporary directory (the server's socket) is made now, in the
    # process's usual temporary directory, not in whatever TMPDIR a caller sets later.
    multiprocessing.util.get_temp_dir()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    # Started with SIGINT blocked (procs.spawning), which the server and every worker forked
    # from it inherit: a terminal's Ctrl-C reaches the whole group, and a worker interrupted
    # mid-start would print a traceback; the main process handles it and stops them.
    with procs.spawning():
        forkserver.ensure_running()
    return ctx


def server() -> int | None:
    """The server's process id while it runs."""
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def helpers() -> frozenset[int]:
    """The processes a run's loaders share across rounds: the server, and multiprocessing's
    resource tracker (which starting the server, or a spawned worker, starts)."""
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    return frozenset(p for p in (server(), tracker) if p is not None)


@contextlib.contextmanager
def stopped_after() -> Iterator[None]:
    """Stop the server at the end of the block if it was started inside it."""
    before = server() is not None
    try:
        yield
    finally:
        pid = server()
        if not before and pid is not None:
            # A worker still alive keeps the server from stopping (and this wait from ending):
            # none should be, each loader stops its own; any left is ended first.
            _end_children(pid)
            # multiprocessing stops it only at exit; its own tests stop it this way.
            forkserver._forkserver._stop()  # type: ignore[attr-defined]


def _end_children(pid: int) -> None:
    """SIGKILL the processes forked from the server (Linux's /proc lists them)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return
    for child in children:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(child), signal.SIGKILL)
