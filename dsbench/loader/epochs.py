"""`bench --epochs E`: each round reads E whole epochs, each from fresh workers, as torch's
DataLoader does without `persistent_workers`: every epoch starts with its workers' start-up
(spawn, imports, opening the export) and an empty prefetch queue, and a shuffle buffer that must
fill again. That start is what the timed windows leave out, and what an export whose workers
take long to start, or a large buffer, costs a job at every epoch boundary.

An epoch here is each worker's share of that epoch in the run's order (`Order.epoch`), in full
batches: the batches are taken round-robin, so each worker gives as many as the smallest share
holds (the last partial batch dropped, as `drop_last=True` does). Per epoch it records the time
to the first batch from the epoch's start, the wait at the boundary (from the previous epoch's
last batch to this one's first: the old workers' stop, the new ones' start, the first batch), the
epoch's wall time, and with `--step-time` the data wait before each step (the per-step wait
timeline). The round's figures cover all its epochs, boundaries included: throughput is samples
over the whole time, and CPU is everything the loader's processes spent, start-ups included
(the workers' whole lives, from getrusage after they are reaped).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from dsbench.adapters import base
from dsbench.adapters.base import Export
from dsbench.errors import DsbenchError
from dsbench.loader import memory
from dsbench.loader.batch_order import counted_cheaply
from dsbench.loader.order import SHUFFLE, Order, Plan, shuffle_of
from dsbench.loader.sampling import RANDOM_ACCESS, SampleIndex, random_blocks
from dsbench.loader.worker import BatchReport
from dsbench.results.stages import STAGES


class Source(Protocol):
    def next(self) -> BatchReport: ...
    def release(self, report: BatchReport) -> None: ...
    def close(self) -> None: ...


def worker_share(export: Export, order: Order, epoch: int, worker: int, n_workers: int,
                 index: SampleIndex | None = None) -> int:
    """Samples worker `worker` reads in `epoch` of `order`, from indexes, headers and footers
    (`index`: the export's samples numbered, for a random-access order; made here if None)."""
    if order.name in RANDOM_ACCESS:
        index = index or SampleIndex(export)
        return sum(len(b) for b in random_blocks(index, order.block_size, order.seed, epoch,
                                                 worker, n_workers))
    units = export.units()
    if order.name == SHUFFLE:
        plan = Plan(tuple(units), order.seed, 1, n_workers, 1, 0, shuffle_of(export.layout))
        mine: Sequence[str] = plan.slot(epoch, 0, worker)
    else:
        mine = base.worker_share(units, worker, n_workers)
    return sum(export.unit_samples(u) for u in mine)


def epoch_shares(export: Export, order: Order, n_workers: int) -> list[int] | None:
    """Samples each worker reads in the first epoch of `order`; None where that means reading
    the units again (an object store's shards are streamed whole to be counted) or a unit
    cannot be counted: the run it describes stands without it."""
    if not counted_cheaply(export, len(export.units())):
        return None
    try:
        index = SampleIndex(export) if order.name in RANDOM_ACCESS else None
        return [worker_share(export, order, order.epoch, w, n_workers, index)
                for w in range(n_workers)]
    except DsbenchError:
        return None


def batches_per_worker(export: Export, order: Order, epochs: int, n_workers: int,
                       batch_size: int) -> list[int]:
    """Full batches each worker gives in each epoch: the smallest share's."""
    index = SampleIndex(export) if order.name in RANDOM_ACCESS else None
    out = []
    for e in range(epochs):
        shares = [worker_share(export, order, e, w, n_workers, index)
                  for w in range(n_workers)]
        if min(shares) < batch_size:
            raise DsbenchError(f"epoch {e} gives a worker {min(shares)} samples, fewer than a "
                               f"batch of {batch_size}: use a smaller --batch-size or fewer "
                               "--workers with --epochs", path=export.path)
        out.append(min(shares) // batch_size)
    return out


def measure(open_source: Callable[[int], Source], per_epoch: list[int], n_workers: int,
            step_s: float, main_base: memory.Base, cpu: Callable[[], float],
            children_cpu: Callable[[], float], host_busy: Callable[[], float]) -> dict[str, Any]:
    """A round of `len(per_epoch)` epochs; `open_source(e)` starts epoch e's workers."""
    reaped0, cpu0, host0 = children_cpu(), cpu(), host_busy()
    excluded = 0.0
    peak: memory.Memory = {}
    reports: list[BatchReport] = []
    epochs: list[dict[str, Any]] = []
    files = nbytes = skipped = 0
    t_start = last_end = time.perf_counter()
    for e, n in enumerate(per_epoch):
        t0 = time.perf_counter()
        source = open_source(e)
        try:
            got: list[BatchReport] = []
            waits: list[float] = []
            first = 0.0
            for _ in range(n * n_workers):
                t = time.perf_counter()
                report = source.next()
                arrived = time.perf_counter()
                first = first or arrived
                waits.append(arrived - t)
                if step_s:
                    time.sleep(step_s)  # the stand-in for accelerator compute (stated)
                source.release(report)
                got.append(report)
            t1 = time.perf_counter()
            c = time.thread_time()
            peak = memory.peak(peak, memory.tree(main_base))
            excluded += time.thread_time() - c
        finally:
            source.close()
        # Each worker's counters run from its start (its imports' reads included): what it read
        # is counted from its first batch to its last.
        first_of = {r.worker: r for r in reversed(got)}
        last = {r.worker: r for r in got}
        files += sum(last[w].opens - first_of[w].opens for w in last)
        nbytes += sum(last[w].read_chars + last[w].mapped_bytes - first_of[w].read_chars
                      - first_of[w].mapped_bytes for w in last)
        skipped += sum(r.skipped for r in last.values())
        epochs.append({"epoch": e, "samples": sum(len(r.keys) for r in got), "batches": len(got),
                       "time_to_first_batch_s": first - t0,
                       "boundary_wait_s": first - last_end, "wall_s": t1 - t0,
                       **({"step_waits_s": waits} if step_s else {})})
        reports += got
        last_end = t1
    wall = time.perf_counter() - t_start
    host = host_busy() - host0
    main_cpu = cpu() - cpu0 - excluded
    workers_cpu = children_cpu() - reaped0
    samples = sum(len(r.keys) for r in reports)
    stage_s = np.sum([r.stages for r in reports], axis=0)
    return {
        "samples": samples, "batches": len(reports), "wall_s": wall,
        "cpu_s": main_cpu + workers_cpu, "main_cpu_s": main_cpu, "workers_cpu_s": workers_cpu,
        "workers_cpu_s_reaped": workers_cpu,
        "samples_per_s": samples / wall, "cpu_s_per_sample": (main_cpu + workers_cpu) / samples,
        "host_cpu_s": host, "host_cpu_s_per_sample": host / samples,
        "accelerator_util": (len(reports) * step_s / wall) if step_s else None,
        "stages_s": dict(zip(STAGES, map(float, stage_s), strict=True)),
        "window_files": files, "window_bytes": nbytes, "skipped_samples": skipped,
        "skipped": [e for r in reports for e in r.errors],
        "batch_cpu_s": [r.batch_cpu_s for r in reports],
        **memory.result_fields(peak), "warmup_batches": 0, "warmup_s": 0.0,
        "epochs": epochs, "where": [r.where for r in reports],
    }


def at_epoch(opts: Any, epoch: int) -> Any:
    """The options of one epoch's workers: the run's, starting at `epoch`."""
    return dataclasses.replace(opts, start_epoch=epoch)
