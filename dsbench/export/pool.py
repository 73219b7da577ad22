"""The processes that write an export's units, ended at once on any failure or signal.

multiprocessing.Pool is not used: its terminate() joins its task-handler thread, which may be
blocked putting on the result queue's lock held by a worker that terminate() just killed, and
then waits forever (seen here: a unit's full disk hung `generate`). These workers share no
lock: each has its own pipe, takes one task at a time and answers on it, and a failure kills
them all and reaps them, which cannot block.
"""

from __future__ import annotations

import multiprocessing
import shutil
import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, NoReturn

from dsbench import atomic, procs
from dsbench.errors import DsbenchError


def _serve(conn: Connection, setup: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    """A worker's life: set up, then answer each (function, task) with (True, result) or
    (False, exception) until told to stop (None) or the parent's end of the pipe closes."""
    procs.ignore_ctrl_c()  # Ctrl-C is the parent's to handle: it ends the workers
    # The parent's SIGTERM handler (the command line's, inherited when forked) is not the
    # workers' to run: a SIGTERM from outside must end one at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    procs.die_with_parent()
    failed: BaseException | None = None
    try:
        if setup is not None:
            setup(*args)
    except Exception as exc:  # said with the first task, where the parent is listening
        failed = exc
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        fn, task = job
        try:
            if failed is not None:
                raise failed
            answer: tuple[bool, Any] = (True, fn(task))
        except Exception as exc:
            answer = (False, exc)
        try:
            conn.send(answer)
        except Exception:  # a result or an error that does not pickle: said in a line
            what = answer[1]
            conn.send((False, DsbenchError(f"{type(what).__name__}: {what}")))


class WriterPool:
    """Processes started with `start` ("fork" or "spawn"), each with its own pipe."""

    def __init__(self) -> None:
        self.procs: list[BaseProcess] = []
        self.conns: list[Connection] = []

    def start(self, workers: int, start: str, setup: Callable[..., None] | None,
              args: tuple[Any, ...]) -> None:
        """Start the workers, each recorded before a signal can interrupt (kill() ends them)."""
        # typeshed types a context chosen by name as BaseContext, which has no Process
        context: Any = multiprocessing.get_context(start)
        for _ in range(workers):
            ours, theirs = context.Pipe()
            try:
                with procs.spawning():
                    proc = context.Process(target=_serve, args=(theirs, setup, args),
                                           daemon=True)
                    proc.start()
                    self.procs.append(proc)
                    self.conns.append(ours)
            finally:
                theirs.close()  # the worker's end, now in the worker

    def imap(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        """fn(task) for every task, in the tasks' order. With one worker the tasks also run in
        that order, one after another (a sequential format's units)."""
        todo = list(enumerate(tasks))[::-1]
        idle = list(range(len(self.procs)))
        busy: dict[int, int] = {}  # worker -> task
        done: dict[int, Any] = {}
        given = 0
        while todo or busy:
            while idle and todo:
                worker = idle.pop()
                busy[worker], task = todo.pop()
                try:
                    self.conns[worker].send((fn, task))
                except OSError:  # it died while idle (the kernel's OOM killer)
                    self._died(worker)
            ready = wait([self.conns[w] for w in busy] + [self.procs[w].sentinel for w in busy])
            for worker in list(busy):
                if self.conns[worker] not in ready and self.procs[worker].sentinel not in ready:
                    continue
                try:
                    ok, value = self.conns[worker].recv()
                except (EOFError, OSError):
                    self._died(worker)
                except Exception as exc:  # an error that pickled but does not unpickle
                    raise DsbenchError(f"a writing process failed: {type(exc).__name__}: "
                                       f"{exc}") from None
                if not ok:
                    raise value
                done[busy.pop(worker)] = value
                idle.append(worker)
            while given in done:
                yield done.pop(given)
                given += 1

    def _died(self, worker: int) -> NoReturn:
        # Its pipe closes as it dies, a moment before its exit can be waited for.
        self.procs[worker].join(5.0)
        code = self.procs[worker].exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"code {code}"
        raise DsbenchError(f"a writing process ended unexpectedly ({how})")

    def close(self) -> None:
        """Tell the workers to stop and wait for them."""
        for conn in self.conns:
            with suppress(OSError):  # that worker is gone already
                conn.send(None)
        procs.reap(self.procs)
        self._close_pipes()

    def kill(self) -> None:
        """End every worker now (their temporaries are the caller's to remove)."""
        for proc in self.procs:
            if proc.exitcode is None:
                proc.kill()
        for proc in self.procs:
            # SIGKILL ends a process at once, but one in uninterruptible I/O (a hung network
            # mount) only when that returns: not waited for forever (it dies with us).
            proc.join(10.0)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for conn in self.conns:
            conn.close()


class InlinePool:
    """One writer: this process itself, the pool's interface without a second process (nothing
    to fork or spawn, and no start-up to pay). A failure or a signal unwinds through the
    caller's worker_pool, which removes the unit's temporaries as for a killed writer."""

    def start(self, workers: int, start: str, setup: Callable[..., None] | None,
              args: tuple[Any, ...]) -> None:
        """WriterPool.start's signature: the one writer is this process, set up now."""
        if setup is not None:
            setup(*args)

    def imap(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        for task in tasks:
            yield fn(task)

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass


def remove_temporaries(out_dir: Path, only: set[Path] | None = None) -> None:
    """What a killed writer left: its temporaries, files or directories (a finished write
    leaves none); with `only`, those of these final paths alone."""
    for tmp in sorted(out_dir.rglob(".*"), key=lambda p: len(p.parts)):
        if not atomic.is_tmp(tmp) or (only is not None and atomic.final_of(tmp) not in only):
            continue
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists() or tmp.is_symlink():
            tmp.unlink(missing_ok=True)


@contextmanager
def worker_pool(out: Path, workers: int, start: str = "fork",
                setup: Callable[..., None] | None = None, args: tuple[Any, ...] = (),
                only: set[Path] | None = None) -> Iterator[WriterPool | InlinePool]:
    """A pool of `workers` processes writing into `out` (one: this process, InlinePool). On any
    failure or interruption the workers are ended and their temporaries removed (of the final
    paths `only`, when given): the units written so far stay whole (a re-run completes the
    export), the ones being written are gone. `setup(*args)` runs first in each worker."""
    # fork by default: workers inherit the imported modules, which makes start-up cheap on
    # Linux. Callers whose process has used an object store pass "spawn": its client is not
    # fork-safe (a forked child hangs on its first request). Nor is a process that loaded a
    # library that is not fork-safe (a Lance source opened for a re-export: its forked writers
    # crashed with signal 11 or hung): spawned then.
    if start == "fork" and not procs.fork_safe():
        start = "spawn"
    pool = InlinePool() if workers == 1 else WriterPool()
    try:
        pool.start(workers, start, setup, args)
        yield pool
    except BaseException as exc:
        with procs.uninterrupted():
            pool.kill()
            remove_temporaries(out, only)
        if isinstance(exc, OSError):
            # A full disk, a read-only mount.
            raise DsbenchError(f"cannot write the export: {exc.strerror or exc}",
                               path=exc.filename or out) from None
        raise
    pool.close()
