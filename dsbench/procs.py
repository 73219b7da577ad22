"""Process hygiene: nothing dsbench starts outlives it, and cleanup is not cut short.

* `die_with_parent()`, called first thing in a child process (a loader worker, a rank), asks
  Linux to kill it when its parent dies, even by SIGKILL, when no cleanup code runs.
* `uninterrupted()` holds SIGINT and SIGTERM off while workers are stopped and shared memory is
  removed: a second Ctrl-C must not leave half of them behind. A signal that arrives meanwhile
  is acted on when the block ends.
* `spawning()` holds them off while a worker is started and recorded, and the worker, which
  inherits SIGINT blocked, calls `ignore_ctrl_c()` first thing: a Ctrl-C at any moment of the
  start-up reaches the main process once the worker is recorded (so close() stops it), and
  never kills a worker mid-import.
* `settle_heap()`, called by a loader worker once it is set up, so that garbage collection of
  its start-up objects is not charged to whichever batch happens to trigger it.
* `reap(processes)` ends processes that were asked to stop: a grace period, then SIGTERM, then
  SIGKILL.
* `fork_safe()` says whether a child may be forked from this process as it is now.
* `environ(values)` sets environment variables for a block (inherited by what it starts) and
  restores them after.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess
from typing import Any

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
    """Hold SIGINT and SIGTERM for the duration (main thread only; elsewhere a no-op): what their
    handlers would have done (KeyboardInterrupt, dsbench's Terminated) is done when it ends.

    Held by swapping Python's handlers for one that notes the signal, not by blocking the
    signals: a thread that blocks a signal sent to its process only has the kernel hand it to
    another thread (numpy's BLAS and Arrow start some), whose C handler flags it, and Python
    then runs the handler in the main thread, inside the block, all the same.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # A handler set outside Python (None) could not be put back: that signal is not held.
    old: dict[int, _Handler] = {sig: signal.getsignal(sig) for sig in _HELD}
    held = [sig for sig, handler in old.items() if handler is not None]
    came: list[int] = []
    early: list[BaseException] = []

    def note(signum: int, frame: object) -> None:
        came.append(signum)

    try:
        for sig in held:
            _swap(sig, note, early)
        yield
    finally:
        for sig in held:
            _swap(sig, old[sig], early)
        if early:
            raise early[0]
        for signum in came:
            _act(signum, old[signum])


_Handler = Callable[[int, Any], Any] | int | None


def _swap(signum: int, handler: _Handler, early: list[BaseException]) -> None:
    """signal.signal(signum, handler). Before it swaps, Python runs the handlers of signals that
    came just before: what one of them raises (KeyboardInterrupt) is kept in `early`, to be
    raised when the block ends, and the swap is tried again. (A signal that comes between two
    swaps, microseconds, may still raise from outside this function: the caller's finally puts
    every handler back.)"""
    while True:
        try:
            signal.signal(signum, handler)
            return
        except (ValueError, TypeError):  # the call's own errors: a bad argument, a bug
            raise
        except BaseException as exc:
            early.append(exc)


def _act(signum: int, handler: _Handler) -> None:
    """What `handler` would have done with `signum` had it come now."""
    if callable(handler):
        handler(signum, None)
    elif handler != signal.SIG_IGN:  # SIG_DFL: what the signal itself would have done
        signal.raise_signal(signum)


@contextmanager
def spawning() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a child process is started and recorded by its parent.

    Ignoring SIGINT in the parent around `start()` (so that the child inherits SIG_IGN) would
    drop a Ctrl-C that arrives meanwhile: the run would go on to its end, and what the parent
    made before (shared memory) would stay if it were then killed. Held as `uninterrupted()`
    holds them, a signal is acted on when the block ends instead, after the child is on the
    parent's lists, so that one exception unwinds through a consistent state. SIGINT is also
    blocked in this thread, for the child: it inherits the mask across exec (a Ctrl-C while it
    imports stays pending instead of raising there), and it must call `ignore_ctrl_c()` before
    anything else. SIGTERM stays deliverable to the child, so that reap() can end one that is
    still starting.

    Python's resource tracker (which `spawn` and shared memory both use) is started first, out
    of the block: starting it unblocks SIGINT (bpo-33613's mask, undone with SIG_UNBLOCK, not
    restored), which would let a child start with it unblocked.
    """
    resource_tracker.ensure_running()
    with uninterrupted():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_ctrl_c() -> None:
    """First thing in a child started under `spawning()`: ignore SIGINT, then unblock it. A
    terminal's Ctrl-C reaches the whole process group; the main process handles it alone and
    stops its children. One that reached this child while it was starting is still pending, and
    SIG_IGN discards it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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


# Libraries whose runtime is not fork-safe once loaded: a forked child gets a copy of its state
# with its threads gone and their locks held (Lance says so on import; obstore, like Lance, runs
# a Tokio runtime). The threads numpy's BLAS and Arrow's allocator start are not among them:
# both libraries reset their state in a forked child.
NOT_FORK_SAFE = ("lance", "obstore")


def fork_safe() -> bool:
    """Whether a child may be forked from this process as it is now."""
    return not any(name in sys.modules for name in NOT_FORK_SAFE)


@contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in os.environ for the block; each variable as it was before, after it (unset
    where it was unset)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
