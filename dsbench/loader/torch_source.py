"""The same work through torch.utils.data.DataLoader: `--backend torch`, the cross-check.

Its workers iterate `TorchSamples`, an `IterableDataset` over the worker's share of the export in
the run's order (order.py), with worker info,
created on first use so that importing this module never imports torch, and `torch_collate`
stacks each batch the way torch does (into shared memory) and attaches the same report that
dsbench's own workers send.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dsbench import installed, procs
from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.batch_order import where_of
from dsbench.loader.order import IN_ORDER, EmptyShare, Order, WorkerSamples
from dsbench.loader.pipeline import BatchBuilder, Pipeline, collate_fields
from dsbench.loader.sources import NOTHING_TO_READ, STARTUP_STALL_S
from dsbench.loader.worker import (
    ERRORS_KEPT,
    BatchReport,
    Opener,
    cpu_now,
    error_record,
    open_export,
    read_chars,
)
from dsbench.results.stages import STAGES
from dsbench.storage.files import Loc

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
        outputs = [it[2] for it in items]
        # dsbench's transform gives pixels; a --pipeline step, whatever the user's job collates.
        images = (default_collate([torch.from_numpy(np.ascontiguousarray(o)) for o in outputs])
                  if all(isinstance(o, np.ndarray) for o in outputs)
                  else default_collate(outputs))
    # An item is one row of the batch: a sample, or with --pack a sequence and the documents
    # read to fill it (none, where it was cut from ids read before).
    fields = collate_fields([f for it in items for f in it[3]])
    where = where_of([w for it in items for w in it[8]], fields)
    for name, value in fields.items():
        if isinstance(value, np.ndarray):
            fields[name] = torch.from_numpy(value)
    c1, w1 = time.process_time(), time.perf_counter()
    stages = [sum(it[4][i] for it in items) for i in range(len(STAGES))]
    stages[STAGES.index("collate")] += c1 - c0
    last = items[-1]
    errors = [e for it in items for e in it[6]]
    opens, mapped = base.io_counters()
    report = BatchReport(last[0], -1, -1, [k for it in items for k in it[1]], stages,
                         c1 - _torch_last_cpu, w1 - items[0][7], w1, cpu_now(),
                         read_chars(),
                         opens - _torch_setup_opens, mapped, last[5],
                         errors, None, where)
    _torch_last_cpu = c1
    return {"images": images, "fields": fields, "report": report}


def _make_torch_samples() -> type:
    from torch.utils.data import IterableDataset, get_worker_info

    class TorchSamples(IterableDataset):
        """Yields a row of a batch: (worker, keys, pixels, fields of each key, stage CPU s,
        skipped so far, new errors, perf_counter when the row was begun, (unit index, offset)
        or None of each key). A row is one sample's, or with --pack one sequence's and the
        documents read to fill it (packing.py)."""

        def __init__(self, path: str, pipeline: Pipeline, seed: int,
                     opener: Opener | None = None, order: Order = IN_ORDER,
                     one_epoch: bool = False) -> None:
            self.path, self.pipeline, self.seed, self.opener = path, pipeline, seed, opener
            self.order, self.one_epoch = order, one_epoch
            self.epochs_begun = 0  # in a persistent worker (one_epoch), its epochs so far

        def __iter__(self) -> Iterator[tuple[Any, ...]]:
            global _torch_last_cpu, _torch_setup_opens
            info = get_worker_info()
            worker, n_workers = (info.id, info.num_workers) if info else (0, 1)
            first = self.epochs_begun == 0
            order = dataclasses.replace(self.order, epoch=self.order.epoch + self.epochs_begun)
            self.epochs_begun += 1
            export = open_export(self.path, self.opener)
            if first:
                _torch_setup_opens = base.io_counters()[0]  # set-up, as in worker.py
                procs.settle_heap()
            streams: list[WorkerSamples] = []  # the one the builder opens, for where()

            def read(skip: base.SkipHandler) -> WorkerSamples:
                streams.append(WorkerSamples(export, order, worker, n_workers, skip,
                                             once=self.one_epoch))
                return streams[-1]

            builder = BatchBuilder(self.pipeline, read, np.random.default_rng(
                [self.seed, worker] if first else [self.seed, worker, order.epoch]))
            reported = 0
            if first:
                # Later epochs' start (the library's own, in the next batch) is the job's too.
                _torch_last_cpu = time.process_time()
            while True:
                # A batch's wall time runs from its first sample's start: before it, the
                # worker may be waiting for the loader to ask for the batch.
                began = time.perf_counter()
                t = [0.0] * len(STAGES)
                try:
                    keys, pixels, fields = self._row(builder, t)
                except EmptyShare:
                    # torch's DataLoader goes on with the other workers. With one_epoch, the
                    # worker still began the library's epoch (which MosaicML Streaming meets
                    # every worker at), and begins the next ones with the others.
                    return
                except StopIteration:
                    if not self.one_epoch:
                        raise
                    return  # the epoch's end, where the DataLoader's pass ends
                new = builder.skipped[reported:ERRORS_KEPT]
                reported += len(new)
                yield (worker, keys, pixels, fields, t, len(builder.skipped),
                       [error_record(e) for e in new], began,
                       [streams[0].where(k) for k in keys])

        def _row(self, builder: BatchBuilder, t: list[float]
                 ) -> tuple[list[str], np.ndarray, list[dict[str, Any]]]:
            packer = builder.packer
            if packer is None:
                key, pixels, fields = builder.next_sample(t)
                return [key], pixels, [fields]
            row = np.empty(packer.seq_len, dtype=np.int64)
            keys, parsed = builder.next_row(packer, row, t)
            return keys, row, parsed

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


class TorchSource:
    """The same work through torch.utils.data.DataLoader (an IterableDataset, spawn workers).

    With `one_epoch` (a format's own library, --backend native), each pass of the DataLoader's
    iterator is one epoch and the next begins when every worker has ended it, with the same
    (persistent) workers, as a training loop's `for epoch ...: for batch in loader` does: a
    library may meet its workers at each epoch's start (MosaicML Streaming does, at a barrier
    shared by a node's workers), which workers that run on into their next epoch alone never
    reach together."""

    def __init__(self, path: Loc, pipeline: Pipeline, n_workers: int, opts: Any,
                 opener: Callable[[str], Any] | None = None, context: Any = "spawn",
                 one_epoch: bool = False) -> None:
        installed.require("torch", "--backend torch")
        from torch.utils.data import DataLoader

        dataset = __getattr__("TorchSamples")(str(path), pipeline, opts.seed,
                                               opener or opts.export_opener(),
                                               opts.reading_order(), one_epoch)
        # Same start method as ShmSource, for the same reason; in-order delivery is the default.
        with more_workers_than_cores():
            self.loader = DataLoader(dataset, batch_size=opts.batch_size,
                                     num_workers=n_workers, prefetch_factor=opts.prefetch,
                                     collate_fn=torch_collate, multiprocessing_context=context,
                                     timeout=opts.stall_s or STARTUP_STALL_S,
                                     persistent_workers=one_epoch and n_workers > 0)
        self.one_epoch = one_epoch
        self.delivered = 0  # batches in the iterator's current pass
        self.it: Any = None
        try:
            with procs.spawning(), more_workers_than_cores():
                self.it = iter(self.loader)  # workers start with SIGINT blocked
        except BaseException:
            # A Ctrl-C held during the spawn surfaces as the block ends, before the caller
            # holds this source: stop the workers and their queues here (otherwise their
            # semaphores outlive the run and Python's resource tracker warns after its line).
            self.close()
            raise

    def next(self) -> BatchReport:
        try:
            try:
                batch = next(self.it)
            except StopIteration:
                if not (self.one_epoch and self.delivered):
                    raise
                self.delivered = 0
                with more_workers_than_cores():
                    self.it = iter(self.loader)  # the next epoch, on the same workers
                batch = next(self.it)
        except StopIteration:
            raise DsbenchError(NOTHING_TO_READ) from None  # every worker's share was empty
        except DsbenchError as exc:
            raise worker_error(exc) from None
        except RuntimeError as exc:
            raise DsbenchError(f"torch DataLoader failed: {str(exc).splitlines()[0]}") from None
        self.delivered += 1
        report = batch["report"]
        del batch
        return report

    def release(self, report: BatchReport) -> None:
        pass  # the batch's tensors were freed when `next` dropped them

    def close(self) -> None:
        it, self.it = self.it, None
        shutdown(it)


@contextlib.contextmanager
def more_workers_than_cores() -> Iterator[None]:
    """Without torch's warning of more DataLoader workers than cores: a sweep asks for them on
    purpose, and the report's scaling column says what they gave."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield


def worker_error(exc: DsbenchError) -> DsbenchError:
    """A loader worker's DsbenchError as its own one line: torch re-raises it with the whole
    traceback as the message (made one line by DsbenchError), which the worker's message ends."""
    text = str(exc)
    last = text.rfind("dsbench.errors.")
    return DsbenchError(text[last:].split(": ", 1)[-1] if last >= 0 else text)


def shutdown(it: Any) -> None:
    """Stop a DataLoader iterator's workers, however they end, and its queues' feeders."""
    with procs.uninterrupted():  # a second Ctrl-C must not cut this short
        if it is None or not hasattr(it, "_shutdown_workers"):
            return
        # torch's SIGCHLD handler can report a worker that died while exiting (seen here: an
        # abort, "terminate called without an active exception", at interpreter exit in about
        # one torch worker shutdown in 25). The work was done by then; torch terminates the
        # workers it could not join but does not wait for them: every one is ended and reaped.
        with contextlib.suppress(RuntimeError):
            it._shutdown_workers()
        # torch's shutdown may have been cut short: at an epoch's end it runs inside next(),
        # where a signal's exception can land, and it marks itself done first, so the call
        # above then does nothing. What it left undone is done here (both are idempotent): its
        # queues closed, so that their feeder threads end (join_feeders), and its workers told
        # to stop. Seen under SIGTERM in resume --backend torch: an index queue left open kept
        # its feeder waiting, and the tracker warned of a leaked semaphore after the last line.
        for q in [*getattr(it, "_index_queues", []), getattr(it, "_worker_result_queue", None)]:
            if q is not None:
                q.cancel_join_thread()
                q.close()
        done = getattr(it, "_workers_done_event", None)
        if done is not None:
            done.set()
        for w in getattr(it, "_workers", []):
            if w.is_alive():
                w.terminate()
            w.join(2.0)
        join_feeders(it)


def join_feeders(it: Any, timeout_s: float = 2.0) -> None:
    """Wait for the feeder threads of a stopped DataLoader iterator's queues.

    torch cancels their join (a feeder can block on a dead worker's pipe), so they end on their
    own after the shutdown, and a feeder holds references to its queue's named semaphores: the
    last one dropped releases them, in two steps (unlink, then tell Python's resource tracker).
    Left to the feeder, a process that exits meanwhile kills it between the two, and the
    tracker warns of a leaked semaphore after the run's last line (seen under SIGTERM in resume
    --backend torch). Joined here, the iterator's owner drops the last references itself."""
    queues = [*getattr(it, "_index_queues", []), getattr(it, "_worker_result_queue", None)]
    deadline = time.monotonic() + timeout_s
    for q in queues:
        thread = getattr(q, "_thread", None)  # multiprocessing.Queue's feeder, once started
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
