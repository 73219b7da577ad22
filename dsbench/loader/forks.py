"""Loader workers forked from a server that imported the heavy modules once.

Spawned workers each import torch (2 s here) and a format's library (MosaicML Streaming: 7 s)
afresh, round after round: a sweep of 1, 2, 4 and 8 workers over six rounds would spend
minutes importing. multiprocessing's forkserver imports them once, in a server process started
with the first such round, and forks each worker from it, with nothing else of the main
process's state (its threads, its open exports): what made `spawn` the choice over `fork`. The
server exits with the process. Only the first round's list is preloaded (a server takes its
list when it starts); a later round that needs another module imports it in its workers.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
from multiprocessing import forkserver
from typing import Any


def context(preload: list[str]) -> Any:
    """The multiprocessing context whose workers fork from the server, started if need be."""
    # multiprocessing's own temporary directory (the server's socket) is made now, in the
    # process's usual temporary directory, not in whatever TMPDIR a caller sets later.
    multiprocessing.util.get_temp_dir()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    forkserver.ensure_running()
    return ctx
