"""dsbench's own loader, the main process's side: `ShmSource`.

It starts the worker processes (worker.py), takes their batches in order, builds what a training
loop gets (views of the slot, the fields unpickled), frees the slot, notices a dead or silent
worker within a second and stops them all. Like `TorchSource` (torch_source.py) it hands the
runner one `BatchReport` per batch, round-robin over the workers, and stops every worker on
`close()`, however the run ends.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import time
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import psutil

from dsbench import fmt, procs
from dsbench.errors import DsbenchError
from dsbench.loader import orphans
from dsbench.loader.pipeline import Pipeline
from dsbench.loader.worker import (
    IDLE,
    STOP,
    BatchReport,
    WorkerSpec,
    pages,
    run,
    unpack_fields,
)
from dsbench.storage.files import Loc

# A worker silent for STALL_FACTOR times its median gap between batches is stuck (bounded by
# MIN_STALL_S and MAX_STALL_S); before its first batch it has STARTUP_STALL_S.
STALL_FACTOR, MIN_STALL_S, MAX_STALL_S, STARTUP_STALL_S = 20.0, 5.0, 300.0, 60.0
# Room in each slot for the collated fields; tmpfs allocates only the pages written, and fields
# that do not fit travel over the pipe instead.
EXTRAS_BYTES = 16 << 20
# How long a worker that closed its control pipe gets to exit before it is reported.
STOP_WAIT_S = 5.0
STOP_GRACE_S = 0.1  # how long close() waits for a worker to act on STOP before ending it
_rings = itertools.count()
NOTHING_TO_READ = "no loader worker had a sample to read (an empty export, or every share empty)"


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


def ring_layout(pipeline: Pipeline, batch_size: int, prefetch: int) -> tuple[int, int, int]:
    """(image bytes of a batch, bytes of a slot, slots) of one worker's shared-memory ring."""
    item = int(np.dtype(pipeline.transform.out_dtype).itemsize
               * np.prod(pipeline.transform.out_shape))
    image_bytes = pages(batch_size * item)
    return image_bytes, image_bytes + extras_bytes(pipeline, batch_size), prefetch + 1


def extras_bytes(pipeline: Pipeline, batch_size: int) -> int:
    """Room in a slot for what is collated beside the images: the fields, or all of a
    --pipeline step's output (a quarter more than its first sample's, for outputs that vary)."""
    user = pipeline.user.sample_bytes if pipeline.user is not None else 0
    return max(EXTRAS_BYTES, pages(batch_size * user * 5 // 4 + (1 << 20))) if user \
        else EXTRAS_BYTES


def check_memory(pipeline: Pipeline, batch_size: int, prefetch: int, workers: int) -> None:
    """Refuse, before any process starts, rings that cannot fit in shared memory."""
    image_bytes, slot_bytes, slots = ring_layout(pipeline, batch_size, prefetch)
    # tmpfs holds the pages written: the images, and a --pipeline step's whole output.
    need = workers * slots * (image_bytes if pipeline.user is None else slot_bytes)
    try:
        shm_free = shutil.disk_usage("/dev/shm").free
    except OSError:
        shm_free = psutil.virtual_memory().available
    free = min(shm_free, psutil.virtual_memory().available)
    if need > 0.8 * free:
        raise DsbenchError(
            f"--batch-size {batch_size}: {workers} worker{'s' if workers > 1 else ''}' rings "
            f"of {slots} batches need "
            f"{fmt.nbytes(need)} of shared memory, and {fmt.nbytes(free)} is free: use a smaller "
            "--batch-size, --prefetch or fewer --workers")


class ShmSource:
    """W worker processes and their shared-memory rings; batches come out round-robin.

    Start method: spawn. The main process has imported pyarrow, which starts threads (and
    jemalloc's), and forking a threaded process can deadlock the child on a lock some thread
    held; spawn starts each worker from a fresh interpreter. Its cost (imports) is start-up,
    outside the measured window.
    """

    def __init__(self, path: Loc, pipeline: Pipeline, n_workers: int, opts: Any) -> None:
        import multiprocessing as mp

        transform = pipeline.transform
        image_bytes, slot_bytes, slots = ring_layout(pipeline, opts.batch_size, opts.prefetch)
        ctx = mp.get_context("spawn")
        self.n_workers, self.stall_s = n_workers, opts.stall_s
        self.last: list[float | None] = [None] * n_workers  # when each worker's last batch came
        self.gaps: list[list[float]] = [[] for _ in range(n_workers)]
        self.shape = (opts.batch_size, *transform.out_shape)
        self.dtype, self.slot_bytes = transform.out_dtype, slot_bytes
        self.segments: list[SharedMemory] = []
        self.procs: list[Any] = []
        self.data: list[Connection] = []
        self.ctrl: list[Connection] = []
        self.turn = 0
        self.idle: set[int] = set()  # workers that said their share is empty
        # What a killed run left (its segments name its process), cleared before adding ours.
        orphans.clear_once(fmt.progress)
        tag = f"dsbench-{orphans.owner()}-{next(_rings)}"
        try:
            for w in range(n_workers):
                # Held from the segment's creation until its worker is on the lists close()
                # reads: a Ctrl-C in between would leave a segment or a worker it cannot stop.
                with procs.spawning():
                    self._start(ctx, WorkerSpec(str(path), w, n_workers, opts.batch_size,
                                                pipeline, opts.seed, f"{tag}-{w}", slots,
                                                slot_bytes, image_bytes, opts.export_opener(),
                                                opts.reading_order(), opts.replay))
        except BaseException:
            self.close()
            raise

    def _start(self, ctx: Any, spec: WorkerSpec) -> None:
        """Worker `spec.worker`'s segment and process, each recorded as soon as it exists."""
        w, size = spec.worker, spec.slots * spec.slot_bytes
        try:
            shm = _Segment(name=spec.shm_name, create=True, size=size)
        except OSError as exc:
            why = exc.strerror or str(exc)
            if _unlink_if_made(spec.shm_name):
                why = (f"the segment was made, but Python's resource tracker refused it "
                       f"({why}); it was removed")
            raise DsbenchError(f"cannot allocate {fmt.nbytes(size)} of shared memory for "
                               f"loader worker {w}: {why}") from None
        self.segments.append(shm)
        data_recv, data_send = ctx.Pipe(duplex=False)
        ctrl_recv, ctrl_send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=run, args=(spec, data_send, ctrl_recv), daemon=True,
                           name=f"dsbench-worker-{w}")
        proc.start()  # the worker inherits SIGINT blocked (see procs.spawning)
        data_send.close()
        ctrl_recv.close()
        self.procs.append(proc)
        self.data.append(data_recv)
        self.ctrl.append(ctrl_send)

    def next(self) -> BatchReport:
        """The next worker's next batch (blocks; a dead or silent worker fails the run).
        Workers whose share is empty (order.EmptyShare) are passed over, as torch's
        DataLoader passes over a worker whose iterator ended."""
        while True:
            w = self.turn
            self.turn = (w + 1) % self.n_workers
            if w in self.idle:
                continue
            msg = self._recv(w)
            if msg is not None:
                break
            self.idle.add(w)
            if len(self.idle) == self.n_workers:
                raise DsbenchError(NOTHING_TO_READ)
        # Build what the training loop would get: views of the slot, fields unpickled.
        buf = self.segments[w].buf
        assert buf is not None  # None only after close()
        images: np.ndarray = np.ndarray(self.shape, dtype=self.dtype, buffer=buf,
                            offset=msg.slot * self.slot_bytes)
        fields = unpack_fields(msg.extras, buf) if msg.extras else {}
        del images, fields
        return msg

    def release(self, report: BatchReport) -> None:
        w = report.worker
        try:
            self.ctrl[w].send_bytes(b"%d" % report.slot)
        except OSError:
            # The worker closed its end: it is exiting, after saying why if it failed on the
            # data. Its exit code can lag behind the closed pipe (seen under load: a traceback
            # of the BrokenPipeError instead of the sample's error), so wait for it first.
            self.procs[w].join(STOP_WAIT_S)
            self._check_alive()
            raise DsbenchError(f"loader worker {w} (pid {self.procs[w].pid}) stopped taking "
                               "its freed batches; the run is void") from None

    def _recv(self, w: int) -> BatchReport | None:
        """Worker `w`'s next batch, or None when it has nothing to read."""
        conn = self.data[w]
        sentinels = [p.sentinel for p in self.procs]
        waited_from = time.monotonic()
        while True:
            limit = self._silence_limit(w)
            if time.monotonic() - waited_from > limit:
                raise DsbenchError(f"loader worker {w} (pid {self.procs[w].pid}) produced no "
                                   f"batch for {limit:.3g} s (--stall-timeout): it is stuck; "
                                   "stopped the run")
            ready = wait([conn, *sentinels], timeout=1.0)
            if conn in ready:
                try:
                    msg = conn.recv()
                except EOFError:
                    self.procs[w].join(1.0)
                    raise DsbenchError(_worker_failure(w, self.procs[w])) from None
                if isinstance(msg, BatchReport):
                    now, last = time.monotonic(), self.last[w]
                    if last is not None:
                        self.gaps[w].append(now - last)
                    self.last[w] = now
                    return msg
                if msg == (IDLE,):
                    return None
                _raise_worker_error(msg)
            if ready:
                self._check_alive()
            self._check_running()

    def _silence_limit(self, w: int) -> float:
        """How long worker `w` may go without a batch: the option, or many times its usual
        gap between batches (start-up gets longer: imports, opening the export)."""
        if self.stall_s is not None:
            return self.stall_s
        gaps = self.gaps[w]
        if not gaps:
            return STARTUP_STALL_S
        return min(MAX_STALL_S, max(MIN_STALL_S, STALL_FACTOR * float(np.median(gaps))))

    def _check_running(self) -> None:
        """A stopped worker (SIGSTOP, a debugger) never sends again: say so at once."""
        for i, proc in enumerate(self.procs):
            with contextlib.suppress(psutil.Error):
                if psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED:
                    raise DsbenchError(f"loader worker {i} (pid {proc.pid}) is stopped "
                                       "(SIGSTOP or a debugger); stopped the run")

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
                if not isinstance(msg, BatchReport) and msg != (IDLE,):
                    _raise_worker_error(msg)
            raise DsbenchError(_worker_failure(i, proc))

    def close(self) -> None:
        """Stop every worker (STOP, then terminate, then kill) and remove the shared memory."""
        with procs.uninterrupted():  # a second Ctrl-C must not cut this short
            for c in self.ctrl:
                with contextlib.suppress(OSError):
                    c.send_bytes(b"%d" % STOP)
            # A worker waiting for a free slot, as after a window, exits at once; one halfway
            # through a batch (an object store's retries, seen taking a quarter of a second)
            # is building what nobody will read: terminated after a moment, not waited for.
            procs.reap(self.procs, grace_s=STOP_GRACE_S)
            for c in [*self.data, *self.ctrl]:
                c.close()
            for shm in self.segments:
                # A view still alive only delays the unmap; unlinking frees the memory anyway.
                with contextlib.suppress(BufferError):
                    shm.close()
                with contextlib.suppress(FileNotFoundError):
                    shm.unlink()
            self.procs, self.segments, self.data, self.ctrl = [], [], [], []


class _Segment(SharedMemory):
    """A shared-memory segment whose late unmap stays quiet.

    close() can meet a batch view still alive (an interrupt unwinding through the frame that
    holds it); the segment is unlinked anyway, and the map goes when the view does. Without
    this, the interpreter's own __del__ would print that BufferError as a traceback at exit.
    """

    def __del__(self) -> None:
        with contextlib.suppress(BufferError):
            super().__del__()


def _unlink_if_made(name: str) -> bool:
    """Remove a segment that was created before its creation failed (in registering it with
    the resource tracker), so that a failed start leaves nothing in /dev/shm; True if there was
    one. Unlinked by its file (POSIX shared memory is /dev/shm on Linux, as /proc is): attaching
    to it would ask the same tracker, and fail the same way."""
    try:
        os.unlink(f"/dev/shm/{name}")
    except OSError:
        return False
    return True


def _raise_worker_error(msg: tuple[Any, ...]) -> None:
    _tag, text, is_data_error = msg
    if is_data_error:
        raise DsbenchError(text)
    raise RuntimeError(text)
