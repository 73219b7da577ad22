"""One loader worker: read its slice of the export, build whole batches, hand them over.

A worker does one thing and returns plain data. It reads its share of the export in the run's
order (order.py: its disjoint slice of units, in order or shuffled) epoch after epoch, so a
time-bounded round never runs dry.
Each batch is written into a free slot of the worker's shared-memory ring (images, then the
collated fields as a pickle whose array buffers lie out of band next to it); only a small
`BatchReport` goes over the pipe. The main process sends a slot index back when it is done with
a batch, or ``STOP``.

Every report carries the worker's cumulative counters as they stand after that batch: CPU from
getrusage(RUSAGE_SELF), bytes from /proc/self/io read_chars (less the bytes of the control pipe
and of reading /proc/self/io, which are the harness's, not the reader's), files opened and bytes
memory-mapped from `base.io_counters()`. The main process subtracts two reports to get the cost
of exactly the batches between them.

The main process's handles on its workers are in loaders.py.
"""

from __future__ import annotations

import os
import pickle
import resource
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any, NamedTuple

import numpy as np

from dsbench import adapters, procs
from dsbench.adapters import base
from dsbench.adapters.base import Export
from dsbench.errors import DsbenchError, SampleError
from dsbench.loader.batch_order import Where, batch_where
from dsbench.loader.order import IN_ORDER, EmptyShare, Order, WorkerSamples
from dsbench.loader.pipeline import BatchBuilder, Pipeline, StageTimes
from dsbench.results.stages import STAGES

STOP = -1
IDLE = "idle"  # a worker's message when its share of the export is empty (order.EmptyShare)
ALIGN = 64
# The first this many skipped samples of a worker are reported with file, key and error.
ERRORS_KEPT = 20

Opener = Callable[[str], Export]


class BatchReport(NamedTuple):
    """What a worker says about one batch it built (cumulative counters are since its start)."""

    worker: int
    seq: int
    slot: int
    keys: list[str]
    stages: list[float]  # CPU s of this batch per stage, in pipeline.STAGES order
    batch_cpu_s: float  # CPU s to build this batch, on the worker's process clock
    batch_wall_s: float  # wall s to build it: its CPU plus any wait for a core or for I/O
    ready_s: float  # perf_counter (CLOCK_MONOTONIC, host-wide) when it was built
    cpu_s: float  # cumulative getrusage(RUSAGE_SELF) user + system
    read_chars: int  # cumulative, control-pipe bytes excluded
    opens: int  # cumulative files opened to read samples (base.io_counters, set-up excluded)
    mapped_bytes: int  # cumulative memory-mapped bytes (base.io_counters)
    skipped: int  # cumulative skipped samples
    errors: list[dict[str, Any]]  # skipped samples new since the previous report (capped)
    extras: tuple[Any, ...] | None  # where the collated fields are (see pack_fields)
    where: Where | None = None  # the samples' units, offsets and labels (order.batch_where)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs; plain data, pickled once at start-up."""

    path: str
    worker: int
    n_workers: int
    batch_size: int
    pipeline: Pipeline
    seed: int
    shm_name: str
    slots: int
    slot_bytes: int
    image_bytes: int
    opener: Opener | None = None
    order: Order = IN_ORDER
    # --ceiling: once every slot holds a built batch, hand the same batches over again without
    # reading, decoding or transforming anything: what the loader alone can deliver.
    replay: bool = False


def open_export(path: str, opener: Opener | None) -> Export:
    return opener(path) if opener is not None else adapters.open_export(path)


class ReadChars:
    """This process's read_chars (/proc/self/io `rchar`) less the bytes of reading it.

    Reading the counter is itself a read that the next value would include; each read's length
    is kept and subtracted, so that only the reader's bytes remain. 0 where /proc is missing.
    """

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/self/io", os.O_RDONLY)
        except OSError:
            self.fd = None
        self.own = 0

    def __call__(self) -> int:
        if self.fd is None:
            return 0
        data = os.pread(self.fd, 4096, 0)
        value = int(data.split(b"rchar:", 1)[1].split(None, 1)[0]) - self.own
        self.own += len(data)
        return value


_read_chars: ReadChars | None = None


def read_chars() -> int:
    global _read_chars
    if _read_chars is None:
        _read_chars = ReadChars()
    return _read_chars()


def cpu_now() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def pages(n: int) -> int:
    return -(-n // 4096) * 4096


def pack_fields(fields: dict[str, Any], buf: memoryview, offset: int,
                capacity: int) -> tuple[Any, ...]:
    """Put collated fields into `buf[offset:offset+capacity]`: a pickle plus its array buffers.

    Returns where they are, ("shm", [(offset, length), ...]); when they do not fit, the pickle
    and buffers themselves, ("inline", data, buffers), to go over the pipe with the report.
    """
    raw: list[pickle.PickleBuffer] = []
    data = pickle.dumps(fields, protocol=5, buffer_callback=raw.append)
    chunks = [memoryview(data), *(b.raw() for b in raw)]
    if sum(_aligned(c.nbytes) for c in chunks) > capacity:
        return ("inline", data, [bytes(c) for c in chunks[1:]])
    layout = []
    pos = offset
    for c in chunks:
        buf[pos:pos + c.nbytes] = c
        layout.append((pos, c.nbytes))
        pos += _aligned(c.nbytes)
    return ("shm", layout)


def unpack_fields(extras: tuple[Any, ...], buf: memoryview) -> dict[str, Any]:
    """The fields `pack_fields` stored; arrays are views of `buf`, valid until the slot is freed."""
    if extras[0] == "inline":
        return pickle.loads(extras[1], buffers=extras[2])
    (start, n), *rest = extras[1]
    return pickle.loads(buf[start:start + n], buffers=[buf[p:p + k] for p, k in rest])


def error_record(err: SampleError) -> dict[str, Any]:
    return {"file": None if err.path is None else str(err.path), "key": err.key,
            "error": str(err)}


def run(spec: WorkerSpec, data: Connection, ctrl: Connection) -> None:
    """The worker process's body: batches until STOP, or one error message and exit code 1."""
    # Ctrl-C is the main process's to handle: it stops every worker and cleans up. A main
    # process killed outright (SIGKILL) runs no cleanup: the kernel then stops the worker.
    procs.ignore_ctrl_c()
    procs.die_with_parent()
    try:
        try:
            _loop(spec, data, ctrl)
        except EmptyShare:
            # Nothing to read: said once; the main process goes on with the other workers.
            data.send((IDLE,))
            while int(ctrl.recv_bytes()) != STOP:
                pass
    except (EOFError, BrokenPipeError):
        pass  # the main process went away; nothing left to report to
    except DsbenchError as exc:
        data.send(("error", str(exc), True))
        raise SystemExit(1) from None
    except Exception:
        data.send(("error", f"worker {spec.worker} failed:\n{traceback.format_exc()}", False))
        raise SystemExit(1) from None


def _loop(spec: WorkerSpec, data: Connection, ctrl: Connection) -> None:
    export = open_export(spec.path, spec.opener)
    # Files opened while opening the export (headers, footers) are set-up, once per worker;
    # reports count only the files opened to read samples.
    setup_opens = base.io_counters()[0]
    procs.settle_heap()
    rng = np.random.default_rng([spec.seed, spec.worker])
    streams: list[WorkerSamples] = []  # the one the builder opens, kept for batch_where

    def read(skip: base.SkipHandler) -> WorkerSamples:
        streams.append(WorkerSamples(export, spec.order, spec.worker, spec.n_workers, skip))
        return streams[-1]

    builder = BatchBuilder(spec.pipeline, read, rng)
    transform = spec.pipeline.transform
    shape = (spec.batch_size, *transform.out_shape)
    shm = SharedMemory(spec.shm_name)
    buf = shm.buf
    assert buf is not None  # None only after close()
    free = list(range(spec.slots))
    built: dict[int, tuple[list[str], tuple[Any, ...], Where | None]] = {}  # --ceiling's slots
    ctrl_bytes = 0
    reported_errors = 0
    seq = 0
    try:
        while True:
            # Freed slots and STOP; block only when every slot holds an unconsumed batch.
            while not free or ctrl.poll():
                msg = ctrl.recv_bytes()
                ctrl_bytes += 4 + len(msg)  # multiprocessing's 4-byte length header
                slot = int(msg)
                if slot == STOP:
                    return
                free.append(slot)
            slot = free.pop(0)
            if spec.replay and slot in built:
                keys, extras, where = built[slot]
                t = time.perf_counter()
                opens, mapped = base.io_counters()
                data.send(BatchReport(
                    spec.worker, seq, slot, keys, [0.0] * len(STAGES), 0.0, 0.0, t, cpu_now(),
                    read_chars() - ctrl_bytes, opens - setup_opens, mapped,
                    len(builder.skipped), [], extras, where))
                seq += 1
                continue
            base_off = slot * spec.slot_bytes
            images: np.ndarray = np.ndarray(shape, dtype=transform.out_dtype, buffer=buf,
                                offset=base_off)
            times = StageTimes()
            w0, c0 = time.perf_counter(), time.process_time()
            keys, fields = builder.build(images, times)
            c1 = time.process_time()
            extras = pack_fields(fields, buf, base_off + spec.image_bytes,
                                 spec.slot_bytes - spec.image_bytes)
            c2, w2 = time.process_time(), time.perf_counter()
            times.seconds[STAGES.index("collate")] += c2 - c1
            del images
            new = builder.skipped[reported_errors:ERRORS_KEPT]
            reported_errors += len(new)
            opens, mapped = base.io_counters()
            where = batch_where(streams[0], keys, fields)
            if spec.replay:
                built[slot] = (keys, extras, where)
            data.send(BatchReport(
                spec.worker, seq, slot, keys, times.seconds, c2 - c0, w2 - w0, w2, cpu_now(),
                read_chars() - ctrl_bytes, opens - setup_opens, mapped,
                len(builder.skipped), [error_record(e) for e in new], extras, where))
            seq += 1
    finally:
        shm.close()
