"""The loaders the runner drives: dsbench's own shared-memory one, and torch's DataLoader.

Both hand the runner one `BatchReport` per batch, round-robin over the workers, and both stop
every worker on `close()`, however the run ends.

* `ShmSource` starts the worker processes (worker.py), takes their batches in order, builds what
  a training loop gets (views of the slot, the fields unpickled), frees the slot, notices a dead
  or silent worker within a second and stops them all.
* `TorchSource` runs the same pipeline through `torch.utils.data.DataLoader`: its workers iterate
  `TorchSamples`, an `IterableDataset` over `Export.read` with worker info, created on first use
  so that importing this module never imports torch, and `torch_collate` stacks each batch the
  way torch does (into shared memory) and attaches the same report.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
import warnings
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.pipeline import STAGES, BatchBuilder, Pipeline, collate_fields
from dsbench.worker import (
    ERRORS_KEPT,
    STOP,
    BatchReport,
    Opener,
    WorkerSpec,
    cpu_now,
    endless,
    error_record,
    open_export,
    pages,
    read_chars,
    run,
    unpack_fields,
)

# Room in each slot for the collated fields; tmpfs allocates only the pages written, and fields
# that do not fit travel over the pipe instead.
EXTRAS_BYTES = 16 << 20
_rings = itertools.count()


# --- torch backend: the same work inside torch.utils.data.DataLoader's workers -------------

_torch_last_cpu = 0.0
_torch_setup_opens = 0


def torch_collate(items: list[tuple[Any, ...]]) -> dict[str, Any]:
    """DataLoader collate_fn: images stacked by torch (into shared memory, as torch does it)."""
    import torch
    from torch.utils.data import default_collate

    global _torch_last_cpu
    c0 = time.process_time()
    with warnings.catch_warnings():
        # Pillow's pixels are read-only arrays; torch warns about wrapping them, but they are
        # only read here (stacked into a new shared-memory tensor), never written.
        warnings.simplefilter("ignore", UserWarning)
        images = default_collate([torch.from_numpy(np.ascontiguousarray(it[2]))
                                  for it in items])
    fields = collate_fields([it[3] for it in items])
    for name, value in fields.items():
        if isinstance(value, np.ndarray):
            fields[name] = torch.from_numpy(value)
    c1 = time.process_time()
    stages = [sum(it[4][i] for it in items) for i in range(len(STAGES))]
    stages[STAGES.index("collate")] += c1 - c0
    last = items[-1]
    errors = [e for it in items for e in it[6]]
    opens, mapped = base.io_counters()
    report = BatchReport(last[0], -1, -1, [it[1] for it in items], stages,
                         c1 - _torch_last_cpu, cpu_now(), read_chars(),
                         opens - _torch_setup_opens, mapped, last[5],
                         errors, None)
    _torch_last_cpu = c1
    return {"images": images, "fields": fields, "report": report}


def _make_torch_samples() -> type:
    from torch.utils.data import IterableDataset, get_worker_info

    class TorchSamples(IterableDataset):  # type: ignore[type-arg]
        """Yields (worker, key, pixels, fields, stage CPU s, skipped so far, new errors)."""

        def __init__(self, path: str, pipeline: Pipeline, seed: int,
                     opener: Opener | None = None) -> None:
            self.path, self.pipeline, self.seed, self.opener = path, pipeline, seed, opener

        def __iter__(self) -> Iterator[tuple[Any, ...]]:
            global _torch_last_cpu, _torch_setup_opens
            info = get_worker_info()
            worker, n_workers = (info.id, info.num_workers) if info else (0, 1)
            export = open_export(self.path, self.opener)
            _torch_setup_opens = base.io_counters()[0]  # set-up, as in worker.py: not counted
            builder = BatchBuilder(self.pipeline, lambda skip: endless(export, worker,
                                                                      n_workers, skip),
                                   np.random.default_rng([self.seed, worker]))
            reported = 0
            _torch_last_cpu = time.process_time()
            while True:
                t = [0.0] * len(STAGES)
                key, pixels, fields = builder.next_sample(t)
                new = builder.skipped[reported:ERRORS_KEPT]
                reported += len(new)
                yield (worker, key, pixels, fields, t, len(builder.skipped),
                       [error_record(e) for e in new])

    TorchSamples.__module__ = __name__
    TorchSamples.__qualname__ = "TorchSamples"
    return TorchSamples


def __getattr__(name: str) -> Any:
    # Created on first use (and found here again by pickle in torch's worker processes).
    if name == "TorchSamples":
        cls = _make_torch_samples()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- the main process's side: start workers, take batches in order, free slots, stop ---------

def _worker_failure(index: int, proc: Any) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited unexpectedly with code {code}"
    hint = " (out of memory? see dmesg)" if code == -signal.SIGKILL else ""
    return f"loader worker {index} (pid {proc.pid}) {how}; the run is void{hint}"


class ShmSource:
    """W worker processes and their shared-memory rings; batches come out round-robin.

    Start method: spawn. The main process has imported pyarrow, which starts threads (and
    jemalloc's), and forking a threaded process can deadlock the child on a lock some thread
    held; spawn starts each worker from a fresh interpreter. Its cost (imports) is start-up,
    outside the measured window.
    """

    def __init__(self, path: Path, pipeline: Pipeline, n_workers: int, opts: Any) -> None:
        import multiprocessing as mp

        transform = pipeline.transform
        item = int(np.dtype(transform.out_dtype).itemsize * np.prod(transform.out_shape))
        image_bytes = pages(opts.batch_size * item)
        slot_bytes = image_bytes + EXTRAS_BYTES
        slots = opts.prefetch + 1
        ctx = mp.get_context("spawn")
        self.n_workers, self.stall_s = n_workers, opts.stall_s
        self.shape = (opts.batch_size, *transform.out_shape)
        self.dtype, self.slot_bytes = transform.out_dtype, slot_bytes
        self.segments: list[SharedMemory] = []
        self.procs: list[Any] = []
        self.data: list[Connection] = []
        self.ctrl: list[Connection] = []
        self.turn = 0
        tag = f"dsbench-{os.getpid()}-{next(_rings)}"
        try:
            for w in range(n_workers):
                shm = SharedMemory(name=f"{tag}-{w}", create=True, size=slots * slot_bytes)
                self.segments.append(shm)
                data_recv, data_send = ctx.Pipe(duplex=False)
                ctrl_recv, ctrl_send = ctx.Pipe(duplex=False)
                spec = WorkerSpec(str(path), w, n_workers, opts.batch_size, pipeline, opts.seed,
                                  shm.name, slots, slot_bytes, image_bytes, opts.opener)
                proc = ctx.Process(target=run, args=(spec, data_send, ctrl_recv), daemon=True,
                                   name=f"dsbench-worker-{w}")
                proc.start()
                data_send.close()
                ctrl_recv.close()
                self.procs.append(proc)
                self.data.append(data_recv)
                self.ctrl.append(ctrl_send)
        except BaseException:
            self.close()
            raise

    def next(self) -> BatchReport:
        """The next worker's next batch (blocks; a dead or silent worker fails the run)."""
        w = self.turn
        self.turn = (w + 1) % self.n_workers
        msg = self._recv(w)
        # Build what the training loop would get: views of the slot, fields unpickled.
        buf = self.segments[w].buf
        images = np.ndarray(self.shape, dtype=self.dtype, buffer=buf,
                            offset=msg.slot * self.slot_bytes)
        fields = unpack_fields(msg.extras, buf) if msg.extras else {}
        del images, fields
        return msg

    def release(self, report: BatchReport) -> None:
        try:
            self.ctrl[report.worker].send_bytes(b"%d" % report.slot)
        except OSError:
            self._check_alive()
            raise

    def _recv(self, w: int) -> BatchReport:
        conn = self.data[w]
        sentinels = [p.sentinel for p in self.procs]
        deadline = time.monotonic() + self.stall_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DsbenchError(f"loader worker {w} produced no batch for "
                                   f"{self.stall_s:.3g} s; stopped the run")
            ready = wait([conn, *sentinels], timeout=min(left, 1.0))
            if conn in ready:
                try:
                    msg = conn.recv()
                except EOFError:
                    self.procs[w].join(1.0)
                    raise DsbenchError(_worker_failure(w, self.procs[w])) from None
                if isinstance(msg, BatchReport):
                    return msg
                _raise_worker_error(msg)
            if ready:
                self._check_alive()

    def _check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.exitcode is None:
                continue
            # A worker that failed on bad data said why before exiting; find that message.
            while self.data[i].poll():
                try:
                    msg = self.data[i].recv()
                except EOFError:
                    break
                if not isinstance(msg, BatchReport):
                    _raise_worker_error(msg)
            raise DsbenchError(_worker_failure(i, proc))

    def close(self) -> None:
        """Stop every worker (STOP, then terminate, then kill) and remove the shared memory."""
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this
        try:
            for c in self.ctrl:
                with contextlib.suppress(OSError):
                    c.send_bytes(b"%d" % STOP)
            deadline = time.monotonic() + 5.0
            for proc in self.procs:
                proc.join(max(0.0, deadline - time.monotonic()))
            for proc in self.procs:
                if proc.exitcode is None:
                    proc.terminate()
                    proc.join(2.0)
                if proc.exitcode is None:
                    proc.kill()
                    proc.join()
            for c in [*self.data, *self.ctrl]:
                c.close()
            for shm in self.segments:
                # A view still alive only delays the unmap; unlinking frees the memory anyway.
                with contextlib.suppress(BufferError):
                    shm.close()
                with contextlib.suppress(FileNotFoundError):
                    shm.unlink()
            self.procs, self.segments, self.data, self.ctrl = [], [], [], []
        finally:
            signal.signal(signal.SIGINT, old)


def _raise_worker_error(msg: tuple[Any, ...]) -> None:
    _tag, text, is_data_error = msg
    if is_data_error:
        raise DsbenchError(text)
    raise RuntimeError(text)


class TorchSource:
    """The same work through torch.utils.data.DataLoader (an IterableDataset, spawn workers)."""

    def __init__(self, path: Path, pipeline: Pipeline, n_workers: int, opts: Any) -> None:
        try:
            from torch.utils.data import DataLoader
        except ImportError:
            raise DsbenchError("--backend torch needs torch: pip install 'dsbench[torch]'"
                               ) from None
        dataset = __getattr__("TorchSamples")(str(path), pipeline, opts.seed, opts.opener)
        # Same start method as ShmSource, for the same reason; in-order delivery is the default.
        self.loader = DataLoader(dataset, batch_size=opts.batch_size, num_workers=n_workers,
                                 prefetch_factor=opts.prefetch, collate_fn=torch_collate,
                                 multiprocessing_context="spawn", timeout=opts.stall_s)
        self.it: Any = iter(self.loader)

    def next(self) -> BatchReport:
        try:
            batch = next(self.it)
        except DsbenchError as exc:
            # torch re-raises a worker's exception with its whole traceback as the message.
            raise DsbenchError(str(exc).strip().splitlines()[-1].split(": ", 1)[-1]) from None
        except RuntimeError as exc:
            raise DsbenchError(f"torch DataLoader failed: {str(exc).splitlines()[0]}") from None
        report = batch["report"]
        del batch
        return report

    def release(self, report: BatchReport) -> None:
        pass  # the batch's tensors were freed when `next` dropped them

    def close(self) -> None:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            it, self.it = self.it, None
            if it is None:
                return
            try:
                it._shutdown_workers()
            except RuntimeError:
                # torch's SIGCHLD handler reports a worker that died while exiting (seen here:
                # an abort, "terminate called without an active exception", at interpreter exit
                # in about one torch worker shutdown in 25). The window was measured by then;
                # make sure every worker is gone and carry on.
                for w in getattr(it, "_workers", []):
                    if w.is_alive():
                        w.terminate()
                    w.join(2.0)
        finally:
            signal.signal(signal.SIGINT, old)
