"""Process hygiene: nothing dsbench starts outlives it, and cleanup is not cut short.

* `die_with_parent()`, called first thing in a child process (a loader worker, a rank), asks
  Linux to kill it when its parent dies, even by SIGKILL, when no cleanup code runs.
* `uninterrupted()` holds SIGINT and SIGTERM off while workers are stopped and shared memory is
  removed: a second Ctrl-C must not leave half of them behind. A signal that arrives meanwhile
  is delivered when the block ends.
* `settle_heap()`, called by a loader worker once it is set up, so that garbage collection of
  its start-up objects is not charged to whichever batch happens to trigger it.
* `reap(processes)` ends processes that were asked to stop: a grace period, then SIGTERM, then
  SIGKILL.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.process import BaseProcess

_PR_SET_PDEATHSIG = 1
_HELD = (signal.SIGINT, signal.SIGTERM)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when its parent exits (Linux; else no-op)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Block SIGINT and SIGTERM for the duration (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def settle_heap() -> None:
    """One full garbage collection when a worker's set-up is done. Start-up leaves a heap of
    long-lived objects (every module imported, torch's among them), and the collector's first
    full passes over it, about 0.1 s of CPU each with torch imported, would otherwise land in
    the first measured batches, wherever the allocation threshold falls. After one here, the
    next full pass waits for the heap to grow by a quarter (CPython's rule), as in a
    long-running job; nothing is frozen, so a job's later collections are still paid."""
    gc.collect()


def reap(processes: Sequence[BaseProcess], grace_s: float = 5.0) -> None:
    """Wait up to `grace_s` in all for processes asked to stop, then terminate, then kill what
    is left: none of them outlives the call."""
    deadline = time.monotonic() + grace_s
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in processes:
        if proc.exitcode is None:
            proc.terminate()
            proc.join(2.0)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
