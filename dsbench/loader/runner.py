"""The loader benchmark: W worker processes feed the main process batches; the OS counts the cost.

Modelled on torch's DataLoader. Worker i owns `units[i::W]` and cycles over it; it builds whole
batches of B into a shared-memory ring of `prefetch + 1` slots (`prefetch` ready batches plus
the one the main process is using) and sends only a small report per batch. The main process
takes batches round-robin over the workers, as DataLoader does, as fast as it can or waiting out
an emulated training step (`step_time_s`) per batch, and frees each slot when done with it.

A round: start workers, consume `warmup_batches` per worker (start-up and warm caches, recorded
but not counted), then a measured window of whole round-robin cycles lasting `seconds` (or
exactly `batches` batches). Figures over the window:

* samples/s = window samples / window wall time (the main process's clock);
* CPU s/sample = (main process getrusage(RUSAGE_SELF) delta + each worker's own getrusage delta
  between its last report before the window and its last one in it) / window samples; the
  workers' totals from getrusage(RUSAGE_CHILDREN) after they are reaped are the cross-check;
* host CPU s/sample = the whole machine's busy CPU time over the window (every process and the
  kernel: /proc/stat's user, nice, system, irq and softirq, via psutil) / window samples. It is
  what a dashboard's "host CPU" sees, so it includes CPU the loader's processes do not own (a
  FUSE daemon, kernel network work, a local storage server) and whatever neighbours ran;
* stages, bytes and files per sample from the same report deltas; peak PSS of the process tree.

The public entry point is `run_bench(path, BenchOptions(...)) -> result document`. Workers are
started with `spawn`, which imports the caller's `__main__` module in each worker: a script that
calls `run_bench` must do so under `if __name__ == "__main__":`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from dsbench import adapters, procs, stats
from dsbench.adapters.survey import new_survey, summarize
from dsbench.errors import DsbenchError, SampleError
from dsbench.loader import epochs, exact, forks, memory, native, tokenize, worker
from dsbench.loader.batch_order import order_figures
from dsbench.loader.counts import NOT_COUNTED, Counts, count_pass
from dsbench.loader.dataset_source import DatasetSource
from dsbench.loader.native.session import removed_after, session
from dsbench.loader.options import BenchOptions, check_given
from dsbench.loader.order import SHUFFLE
from dsbench.loader.sampling import check_random_access
from dsbench.loader.sources import ShmSource, check_memory
from dsbench.loader.summary import summarize_run, warnings_of, worker_warnings
from dsbench.loader.torch_source import TorchSource
from dsbench.loader.user import UserStep, nbytes
from dsbench.loader.worker import BatchReport
from dsbench.results import document as results
from dsbench.results import machine
from dsbench.results.stages import STAGES
from dsbench.results.types import BenchResult, Run
from dsbench.storage import accounting, remote
from dsbench.storage import files as store
from dsbench.storage.files import Loc, named

# PSS is read from /proc/<pid>/smaps_rollup, which costs about a millisecond per process: sample
# it at the window's edges and at most this often inside it (its CPU is not charged to the run).
PSS_INTERVAL_S = 2.0

Progress = Callable[[str], None]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def host_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores; idle, iowait and steal left out:
    steal is time the hypervisor gave to other guests, not work done here)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def _measure(source: ShmSource | TorchSource | DatasetSource, opts: BenchOptions, n_workers: int,
             main_base: memory.Base) -> dict[str, Any]:
    """Warm up, then the measured window; everything per window, nothing logged inside it."""
    t_start = time.perf_counter()
    before: list[BatchReport | None] = [None] * n_workers
    for _ in range(n_workers * opts.warmup_batches):
        report = source.next()
        source.release(report)
        before[report.worker] = report
    warmup_s = time.perf_counter() - t_start
    # Batches come round-robin over the workers that deliver: after n_workers * warmup_batches
    # of them, a worker that gave none has nothing to read (its share is empty).
    idle = [w for w, r in enumerate(before) if r is None]
    active = n_workers - len(idle)
    peak_mem = memory.tree(main_base)
    step = opts.step_time_s
    reports: list[BatchReport] = []
    excluded_cpu = 0.0
    next_pss = time.perf_counter() + PSS_INTERVAL_S
    # The main process's CPU is in the window too: settle its heap first, as each worker did.
    procs.settle_heap()
    cpu0, host0 = worker.cpu_now(), host_busy_s()
    t0 = time.perf_counter()
    while True:
        report = source.next()
        if step:
            # The stand-in for accelerator compute: the batch is in use until the step ends.
            time.sleep(step)
        source.release(report)
        reports.append(report)
        if len(reports) % active:
            continue
        now = time.perf_counter()
        if (len(reports) >= opts.batches) if opts.batches else (now - t0 >= opts.seconds):
            break
        if now >= next_pss:
            c = time.thread_time()
            peak_mem = memory.peak(peak_mem, memory.tree(main_base))
            excluded_cpu += time.thread_time() - c
            next_pss = time.perf_counter() + PSS_INTERVAL_S
    t1 = time.perf_counter()
    host_cpu = host_busy_s() - host0
    main_cpu = worker.cpu_now() - cpu0 - excluded_cpu
    peak_mem = memory.peak(peak_mem, memory.tree(main_base))

    after = list(before)
    for r in reports:
        after[r.worker] = r

    def delta(field: str) -> float:
        return float(sum(getattr(b, field) - getattr(a, field)
                         for a, b in zip(before, after, strict=True) if a and b))

    delivered = [0] * n_workers
    for r in reports:
        delivered[r.worker] += len(r.keys)

    samples = sum(len(r.keys) for r in reports)
    if not samples:  # --pack: every sequence cut from ids read before the window
        raise DsbenchError(f"the measured window's {len(reports)} batches read no sample "
                           "(--pack: ids read before it filled them): use a longer --seconds")
    wall = t1 - t0
    workers_cpu = delta("cpu_s")
    stage_s = np.sum([r.stages for r in reports], axis=0)
    errors = [e for r in reports for e in r.errors]
    return {
        "samples": samples, "batches": len(reports), "wall_s": wall,
        "cpu_s": main_cpu + workers_cpu, "main_cpu_s": main_cpu, "workers_cpu_s": workers_cpu,
        "samples_per_s": samples / wall, "cpu_s_per_sample": (main_cpu + workers_cpu) / samples,
        "host_cpu_s": host_cpu, "host_cpu_s_per_sample": host_cpu / samples,
        "accelerator_util": (len(reports) * step / wall) if step else None,
        "stages_s": dict(zip(STAGES, map(float, stage_s), strict=True)),
        # What the window happened to read: it ends inside a shard wherever the clock says, so
        # these depend on its length; the per-sample figures come from whole units (counts.py).
        "window_files": int(delta("opens")),
        "window_bytes": int(delta("read_chars") + delta("mapped_bytes")),
        "skipped_samples": int(delta("skipped")),
        "skipped": errors, "batch_cpu_s": [r.batch_cpu_s for r in reports],
        **memory.result_fields(peak_mem), "warmup_batches": n_workers * opts.warmup_batches,
        "warmup_s": warmup_s, "worker_samples": delivered, "idle_workers": idle,
        # Where each batch's samples came from, for the order figures (not in the document);
        # a packed batch may have read none.
        "where": [r.where for r in reports if r.keys],
    }


def run_round(path: Loc, opts: BenchOptions, n_workers: int) -> dict[str, Any]:
    """One round with fresh worker processes (start-up is outside the measured window)."""
    if opts.cold and isinstance(path, Path):
        store.evict(path)  # the export's files out of the page cache
    reaped0 = _children_cpu()
    main_base = memory.base(forks.helpers())  # before this round's workers exist
    if opts.epochs:
        return _epochs_round(path, opts, n_workers, main_base, reaped0)
    source: ShmSource | TorchSource | DatasetSource
    with contextlib.ExitStack() as stack:
        if opts.backend == "native":
            # The library's dataset is built here, in the main process, as a job builds it.
            export = worker.open_export(str(path), opts.export_opener())
            shuffle = (native.Shuffle(opts.seed, opts.shuffle_buffer)
                       if opts.order == SHUFFLE else None)
            lib = stack.enter_context(session(export, opts.batch_size,
                                              dict(opts.native_options), shuffle))
            source = TorchSource(path, opts.pipeline(), n_workers, opts, lib.opener,
                                 lib.context, one_epoch=True)
        elif opts.dataset is not None:
            source = DatasetSource(opts.dataset, n_workers, opts)
        elif opts.backend == "torch":
            source = TorchSource(path, opts.pipeline(), n_workers, opts)
        else:
            source = ShmSource(path, opts.pipeline(), n_workers, opts)
        try:
            out = _measure(source, opts, n_workers, main_base)
        finally:
            source.close()
    if opts.backend != "native" and opts.dataset is None:
        # Workers forked from the server (native, --dataset) are its children, not this
        # process's: what it reaps says nothing of them, and the cross-check is not made.
        out["workers_cpu_s_reaped"] = _children_cpu() - reaped0
    return out


def _epochs_round(path: Loc, opts: BenchOptions, n_workers: int, main_base: memory.Base,
                  reaped0: float) -> dict[str, Any]:
    """--epochs: whole epochs, each from fresh workers (epochs.py)."""
    export = worker.open_export(str(path), opts.export_opener())
    per_epoch = epochs.batches_per_worker(export, opts.reading_order(), opts.epochs or 1,
                                          n_workers, opts.batch_size)
    pipeline = opts.pipeline()

    def open_source(e: int) -> ShmSource | TorchSource:
        at = epochs.at_epoch(opts, e)
        return (TorchSource(path, pipeline, n_workers, at) if opts.backend == "torch"
                else ShmSource(path, pipeline, n_workers, at))

    return epochs.measure(open_source, per_epoch, n_workers, opts.step_time_s, main_base,
                          worker.cpu_now, _children_cpu, host_busy_s)


def prepare(path: Loc, opts: BenchOptions) -> tuple[dict[str, Any], Counts]:
    """The export's `inspect` summary and its exact counts."""
    if opts.dataset is not None:
        # A black box: nothing to survey or count; its bytes come from the windows.
        return (summarize(new_survey("dataset"), opts.dataset),
                Counts(0, 0, 0, 1, 0, 0, 0, method=NOT_COUNTED))
    export = worker.open_export(str(path), opts.export_opener())
    if opts.backend == "native":
        native.check(export.layout, shuffled=opts.order == SHUFFLE)
        native.check_options(export, dict(opts.native_options))
    order = opts.reading_order()
    check_random_access(export, order.name)
    # More workers than units (or blocks) is measured, not refused: the workers left without
    # any are reported (summary.worker_warnings), as a job's loader would leave them idle.
    summary = summarize(export.survey(), path, export.ignored, export)
    mixed = [p for p in summary["problems"] if p["error"].startswith("field ")]
    if mixed and opts.on_error == "raise":
        # Reading would not fail: the loader would collate the mixed values as a list.
        first = mixed[0]
        raise DsbenchError(f"{first['error']} (the export's fields differ between "
                           "samples; --on-error skip measures without them)",
                           path=first["file"], key=first["key"])
    skipped: list[Any] = []
    counts = count_pass(export, opts.samples_to_count(path),
                        skipped.append if opts.on_error == "skip" else None, order)
    return summary, counts


def probe_step(path: Loc, opts: BenchOptions) -> BenchOptions:
    """A --pipeline step run on the export's first sample, for the size of its output."""
    if opts.step is None or opts.step_bytes:
        return opts
    export = worker.open_export(str(path), opts.export_opener())
    units = export.units()
    first = next(iter(export.read_units(units[:1])), None) if units else None
    if first is None:
        return opts
    try:
        out = UserStep(opts.step).run(first)
    except SampleError:
        if opts.on_error == "skip":
            return opts  # the rounds will count it; the slots keep their default room
        raise
    return dataclasses.replace(opts, step_bytes=max(1, nbytes(out)))


def run_bench(path: str | Path | Loc, opts: BenchOptions, progress: Progress | None = None
              ) -> BenchResult:
    """Benchmark the export at `path` for every worker count in `opts.workers`."""
    return run_benches([path], opts, progress)[0]


def run_benches(paths: Sequence[str | Path | Loc], opts: BenchOptions,
                progress: Progress | None = None,
                each: Sequence[BenchOptions] | None = None) -> list[BenchResult]:
    """Benchmark several exports with their rounds interleaved (A1 B1 A2 B2 ...).

    Machine drift (a neighbour starting a job, thermal throttling) then lands on every export
    alike instead of on whichever happened to run last, so their ratios stay honest. `each`
    gives each path options of its own (one export read by dsbench's reader and by its
    library's, say); the worker counts and rounds are `opts`'s for all.
    """
    # A run's workers may fork from a server (forks.py); it ends with the run.
    with removed_after(), forks.stopped_after():
        return _run_benches(paths, opts, progress, each)


def _run_benches(paths: Sequence[str | Path | Loc], opts: BenchOptions,
                 progress: Progress | None, each: Sequence[BenchOptions] | None
                 ) -> list[BenchResult]:
    ps = [named(p) for p in paths]
    say = progress or (lambda _msg: None)
    side = list(each) if each is not None else [opts] * len(ps)
    for o in side:
        exact.why_not(o)  # --exact where it cannot be: one line before anything runs
    side = [probe_step(p, o) for p, o in zip(ps, side, strict=True)]
    for o in side:
        check_memory(o.pipeline(), o.batch_size, o.prefetch, max(opts.workers))
    prepared = [prepare(p, o) for p, o in zip(ps, side, strict=True)]
    # Each worker of each round opens the export as the layout found here. Detecting it anew
    # asks every format with a signature first: requests in a bucket, and for a WebDataset
    # shard imports of pyarrow that cost 0.13 s of CPU at every worker's start (measured).
    side = [dataclasses.replace(o, found_layout=s["layout"])
            if o.layout is None and o.opener is None and s["layout"] in adapters.FORMATS else o
            for o, (s, _) in zip(side, prepared, strict=True)]
    # What the samples carry picks the transform: token ids are cropped to --seq-len; text is
    # tokenized first, by the job's tokenizer or one trained on the export's first texts.
    check_given(opts.given, [s["sample"]["kind"] for s, _ in prepared], ps[0])
    side = tokenize.settled_all(ps, [o.found(s) for o, (s, _) in zip(side, prepared,
                                                                       strict=True)],
                                worker.open_export)
    measured = len(ps)
    exacts = exact.count(ps, side, say)
    if opts.ceiling:
        # Each export's ceiling is one more side of the interleaved run: the same loader,
        # its warm-up filling every slot, then handing those batches over again.
        ps, prepared = ps + ps, prepared + prepared
        side = side + [dataclasses.replace(o, ceiling=False, replay=True, warmup_batches=max(
            o.warmup_batches, o.prefetch + 1)) for o in side]
    info = machine.collect()
    run_id = uuid.uuid4().hex
    runs: list[list[Run]] = [[] for _ in ps]
    warnings: list[list[str]] = [[] for _ in ps]
    for index, n_workers in enumerate(opts.workers):
        rounds: list[list[dict[str, Any]]] = [[] for _ in ps]
        n_rounds = opts.rounds_for(index)
        for i in range(n_rounds):
            # Every other round in reverse order (A B, B A, ...): a machine that drifts during
            # the run then favours no export, and round i of each still forms a pair.
            order = list(enumerate(ps)) if i % 2 == 0 else list(enumerate(ps))[::-1]
            for k, p in order:
                r = run_round(p, side[k], n_workers)
                rounds[k].append(r)
                say(f"bench {p.name}{' (ceiling)' if side[k].replay else ''}: {n_workers} "
                    f"workers, round {i + 1}/{n_rounds}: "
                    f"{r['samples_per_s']:.4g} samples/s, "
                    f"{1e3 * r['cpu_s_per_sample']:.3g} ms CPU/sample")
        for k in range(measured):
            run = summarize_run(n_workers, side[k], rounds[k], prepared[k][1])
            where = [w for r in rounds[k] for w in r["where"]]
            known = bool(where) and all(w is not None for w in where)
            own = side[k].backend != "native" and side[k].dataset is None
            if own or known:
                export = worker.open_export(str(ps[k]), side[k].export_opener())
                if known:
                    run["order_figures"] = order_figures(export, where)
                if own:  # dsbench splits the export: each worker's share is known
                    run["worker_shares"] = epochs.epoch_shares(export, side[k].reading_order(),
                                                               n_workers)
            runs[k].append(run)
            warnings[k] += warnings_of(run, side[k]) + worker_warnings(run, side[k],
                                                                       prepared[k][0])
        for k in range(measured, len(ps)):
            # The measured throughput as a fraction of the ceiling, paired round by round.
            built = rounds[k - measured]
            interval = stats.ratio([r["samples_per_s"] for r in rounds[k]],
                                   [r["samples_per_s"] for r in built], paired=True)
            runs[k - measured][-1]["ceiling"] = {
                "samples_per_s": stats.summarize([r["samples_per_s"] for r in rounds[k]]).center,
                "fraction": interval.estimate if interval else
                float(np.mean([b["samples_per_s"] / c["samples_per_s"]
                               for b, c in zip(built, rounds[k], strict=True)])),
                "fraction_ci95": interval.as_list() if interval else None}
    docs = []
    for k, p in enumerate(ps[:measured]):
        base = next((r for r in runs[k] if r["workers"] == 1),
                    min(runs[k], key=lambda r: r["workers"]))
        for run in runs[k]:
            per_worker = base["samples_per_s"] / base["workers"]
            run["scaling_efficiency"] = run["samples_per_s"] / (run["workers"] * per_worker)
        summary, counts = prepared[k]
        if side[k].dataset is not None:
            warnings[k].append("files and requests per sample are not counted for a --dataset "
                               "(a black box); its bytes per sample are what its processes "
                               "read in the windows")
        ignored = summary["ignored_files"]["count"]
        if ignored:
            warnings[k].append(f"{ignored} file{'s' if ignored != 1 else ''} under the export "
                               f"are not {summary['layout']} data and were not read (e.g. "
                               f"{summary['ignored_files']['examples'][0]})")
        for w in warnings[k]:
            say(f"warning: {p.name}: {w}")
        config = side[k].config(p)
        if summary["layout"] == "files":
            config["shuffle_buffer"] = None  # a permutation of samples: no buffer to size
        doc = results.new_document(info, summary, config, runs[k], warnings[k],
                                   counts.to_json(), run_id)
        if counts.requests is not None:
            doc["requests"] = accounting.summary(counts.requests, counts.samples,
                                                 remote.client_info())
        if side[k].backend == "native":
            doc["reader"] = native.describe(summary["layout"], dict(side[k].native_options),
                                            shuffled=side[k].order == SHUFFLE)
        doc["exact"] = exacts[k]
        docs.append(doc)
    return docs
