"""dsbench's own loader for `dsbench resume`: worker processes, in-order delivery, saved state.

As in `dsbench bench`, each worker is a spawned process that builds whole batches from its own
units and the main process takes them round-robin (`turn`), `prefetch` batches ahead per worker.
A worker whose epoch is over answers "done" and drops out of the rotation.

The loader's state is what a checkpoint would hold: the epoch, whose turn it is, and for each
worker the stream state (order.SampleStream.state) that came with the *last batch handed to the
job* from that worker. Batches prefetched but not yet handed over are not part of it, so the
state is exact whatever the prefetch depth. Restoring starts each worker from its saved stream
and the rotation at the saved turn.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from dsbench import adapters, procs
from dsbench.errors import DsbenchError
from dsbench.loader.order import Plan
from dsbench.loader.pipeline import Pipeline
from dsbench.resume.reshard import worker_stream
from dsbench.resume.work import Item, SampleWork, collate
from dsbench.storage import accounting

STOP = -1
# A worker silent this long while the job waits for its batch is stuck; the run is void.
STALL_S = 120.0


def _worker(path: str, plan: Plan, rank: int, worker: int, epoch: int, pipeline: Pipeline,
            label: str | None, state: dict[str, Any] | None, conn: Connection) -> None:
    procs.ignore_ctrl_c()  # the main process handles Ctrl-C and stops its workers
    procs.die_with_parent()
    try:
        export = adapters.open_export(path, plan.layout,
                                      seq_len=getattr(pipeline.transform, "seq_len", None))
        # An elastic restart's share comes as {"pieces": ...} (reshard.py).
        stream = worker_stream(export, plan, rank, worker, epoch, state,
                               None if state is None else state.get("pieces"))
        # The augmentation's generator is part of the state too, so a resumed worker crops as
        # the uninterrupted one would have.
        rng = np.random.default_rng([plan.seed, epoch, rank, worker, 1])
        if state is not None and "aug_rng" in state:
            rng.bit_generator.state = state["aug_rng"]
        work = SampleWork(pipeline, label, rng)
        while True:
            if conn.recv() == STOP:
                return
            items: list[Item] = []
            pixels = []
            while len(items) < plan.batch_size:
                got = stream.next()
                if got is None:
                    break
                item, px = work(*got)
                items.append(item)
                pixels.append(px)
            st = {**stream.state(), "aug_rng": rng.bit_generator.state}
            if not items:
                conn.send(("done", accounting.totals().data_requests, st))
                continue
            collate(pixels)
            # With the storage requests this process has made so far (an object store's).
            conn.send(("batch", items, accounting.totals().data_requests, st))
    except (KeyboardInterrupt, BrokenPipeError, EOFError):
        return
    except DsbenchError as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", str(exc)))
    except Exception:  # a bug: its traceback goes to the main process, which re-raises it
        with contextlib.suppress(OSError):
            conn.send(("bug", traceback.format_exc()))


class DsbenchLoader:
    """One rank's loader for one epoch: `next()` is the next batch's items, None at the end."""

    def __init__(self, path: str, plan: Plan, rank: int, epoch: int, pipeline: Pipeline,
                 label: str | None, prefetch: int, state: dict[str, Any] | None = None) -> None:
        n = plan.workers
        saved = state["workers"] if state is not None else [None] * n
        if state is not None and (len(saved) != n or state["epoch"] != epoch):
            raise DsbenchError(f"the saved loader state is for {len(saved)} workers in epoch "
                               f"{state['epoch']}, not {n} in epoch {epoch}")
        self.epoch, self.turn = epoch, state["turn"] if state is not None else 0
        self.last: list[dict[str, Any] | None] = list(saved)
        self.active = [True] * n
        self.requested = [0] * n  # each worker's storage requests, as of its latest message
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        ctx = multiprocessing.get_context("spawn")
        try:
            for w in range(n):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, daemon=True, name=f"dsbench-resume-{w}",
                                   args=(path, plan, rank, w, epoch, pipeline, label, saved[w],
                                         child))
                # Held until the worker is on the lists close() reads (see procs.spawning).
                with procs.spawning():
                    proc.start()
                    child.close()
                    self.procs.append(proc)
                    self.conns.append(parent)
                for _ in range(prefetch):
                    parent.send(1)
        except BaseException:
            self.close()
            raise

    def _recv(self, w: int) -> tuple[Any, ...]:
        deadline = time.monotonic() + STALL_S
        while not self.conns[w].poll(0.5):
            if not self.procs[w].is_alive() and not self.conns[w].poll(0):
                raise DsbenchError(f"loader worker {w} exited with code "
                                   f"{self.procs[w].exitcode}; the run is void")
            if time.monotonic() > deadline:
                raise DsbenchError(f"loader worker {w} sent nothing for {STALL_S:g} s")
        try:
            msg: tuple[Any, ...] = self.conns[w].recv()
        except (EOFError, OSError):
            raise DsbenchError(f"loader worker {w} exited with code "
                               f"{self.procs[w].exitcode}; the run is void") from None
        if msg[0] == "error":
            raise DsbenchError(msg[1])
        if msg[0] == "bug":
            raise RuntimeError(f"loader worker {w} failed:\n{msg[1]}")
        return msg

    def next(self) -> list[Item] | None:
        while any(self.active):
            w = self.turn
            self.turn = (w + 1) % len(self.active)
            if not self.active[w]:
                continue
            msg = self._recv(w)
            self.last[w], self.requested[w] = msg[-1], msg[-2]
            if msg[0] == "done":
                self.active[w] = False
                continue
            self.conns[w].send(1)  # the batch was taken: the worker may build one more
            items: list[Item] = msg[1]
            return items
        return None

    def requests(self) -> int | None:
        """Storage requests the workers had made by their latest batches (0 on local disk)."""
        return sum(self.requested)

    def state(self) -> dict[str, Any]:
        """The checkpoint's loader state: plain data, JSON-able."""
        return {"epoch": self.epoch, "turn": self.turn, "workers": list(self.last)}

    def close(self) -> None:
        """Stop every worker (STOP, then terminate, then kill); nothing outlives the loader."""
        with procs.uninterrupted():  # a second Ctrl-C must not cut this short
            for c in self.conns:
                with contextlib.suppress(OSError):
                    c.send(STOP)
            procs.reap(self.procs)
            for c in self.conns:
                c.close()
            self.procs, self.conns = [], []
