"""The exact pass's own process: the pipeline's stages over a fixed set of samples, stage by stage,
with the costs read between stages (`python -m dsbench.loader.exact_pass PLAN OUT`).

What it runs is what a loader worker runs on each sample (pipeline.py: the adapter's read, the
decoder, the fields' parsing, the transform or the user's --pipeline step, the batch's collation
and packing for the hand-over), in one process, on the export's first samples:

1. a warm-up: up to WARMUP samples of the first unit through every stage, so that imports,
   plug-ins and caches made on first use are not counted; then the reader is closed;
2. two snapshots back to back: what a snapshot itself costs, taken off every stage;
3. read: whole units from the first, in order; the first `samples` are kept;
4. the kept samples in batches of `batch` (the run's batch size, at most `samples`): decode,
   fields, transform, collate, each over the whole batch, a snapshot after each;
5. read again: the rest of the whole units, until they hold at least `samples` samples (or
   READ_CAP, mid-unit: then not whole units, and the result says so).

Read is counted over whole units because a unit's own costs (opening it, a compressed shard or
a Parquet row group decoded at its first sample) belong to all its samples, as in counts.py.
The other stages are counted over the kept samples, whose number does not change what each
costs. Samples are kept while the reader is still open, as a shuffle buffer keeps them.

Under the counter (`mode` "instructions") a snapshot is a fork (counter.py); run directly
(`mode` "kernel") it reads what the kernel counts for this process: read and write system calls
(/proc/self/io syscr, syscw) and page faults (getrusage). Either way the result is a list of
(stage, snapshot) in order, written as JSON to OUT; the main process turns it into figures
(exact.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import resource
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Light (no third-party import), and imported here rather than in _ok: an import statement run
# for every sample in every stage would be counted as the pipeline's work.
from dsbench.errors import DsbenchError, SampleError

DEFAULT_SAMPLES = 64  # the samples whose decode, fields, transform and collate are counted
WARMUP = 4
READ_CAP = 5000  # samples: a first unit larger than this is read only this far
UNCOUNTED = "-"  # a snapshot that closes bookkeeping no stage is charged with


@dataclass(frozen=True)
class Plan:
    """Everything the pass needs, pickled by the main process (plain data and callables that
    pickle by reference, as a loader worker's spec)."""

    path: str
    opener: Any  # worker.Opener
    pipeline: Any  # pipeline.Pipeline
    samples: int
    batch: int
    seed: int
    mode: str  # "instructions" (under the counter) or "kernel"
    sys_path: tuple[str, ...]


_PR_SET_THP_DISABLE = 41  # prctl(2): no transparent huge pages for this process


class Kernel:
    """This process's read and write calls and page faults so far. Made before the pass reads
    anything, it turns transparent huge pages off for the process: NumPy asks the kernel for
    huge pages for its large arrays (madvise), and whether it gets them depends on how many the
    kernel has free at that moment, so a busy machine moved the faults per sample by 2%; with
    small pages alone they repeat."""

    def __init__(self) -> None:
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
        self.fd = os.open("/proc/self/io", os.O_RDONLY)

    def __call__(self) -> dict[str, int]:
        fields = dict(line.split(b":") for line in os.pread(self.fd, 4096, 0).splitlines())
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {"read_calls": int(fields[b"syscr"]), "write_calls": int(fields[b"syscw"]),
                "minor_faults": ru.ru_minflt}


def _limit_threads() -> None:
    """One thread in the libraries that start pools, as in a loader worker: a count across
    threads depends on how they were scheduled."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)


def run(plan: Plan) -> dict[str, Any]:
    # Imported here, in the pass's own process: the main process imports this module for its
    # Plan and defaults alone.
    import numpy as np

    from dsbench import procs
    from dsbench.loader import counter
    from dsbench.loader.pipeline import BatchBuilder, collate_fields, parse_fields, transformed
    from dsbench.loader.user import collate
    from dsbench.loader.worker import open_export, pack_fields

    kernel = Kernel() if plan.mode == "kernel" else None  # before any page is touched
    export = open_export(plan.path, plan.opener)
    units = export.units()
    _limit_threads()
    pipeline, user = plan.pipeline, plan.pipeline.user
    skipped: list[Any] = []
    skip = skipped.append if pipeline.on_error == "skip" else None
    builder = BatchBuilder(pipeline, lambda _skip: iter(()), np.random.default_rng(plan.seed))
    batch = max(1, min(plan.batch, plan.samples))
    images = np.empty((batch, *pipeline.transform.out_shape), pipeline.transform.out_dtype)
    packed = memoryview(bytearray(16 << 20))
    snaps: list[tuple[str, Any]] = []
    # --pack: the ids of the staged documents, and their size as stored (ids, or a text's
    # characters), by which the read documents' ids are known (_read_ids)
    ids, stored = [0], [0]

    def snap(stage: str) -> None:
        snaps.append((stage, kernel() if kernel is not None else counter.snapshot()))

    def stages(raws: list[Any]) -> None:
        """One batch through decode, fields, transform and collate, a snapshot after each. A
        bad sample under --on-error skip goes no further than the stage it failed in, as in a
        loader worker."""
        if user is None:
            pixels = [_ok(builder.decode, r, skip) for r in raws]
            snap("decode")
            fields = [None if p is None else _ok(lambda r: parse_fields(r, builder.kinds), r,
                                                  skip) for r, p in zip(raws, pixels, strict=True)]
            snap("fields")
            outs = [None if f is None else _ok(lambda r, p=p: transformed(
                builder.transform, p, builder.rng, r), r, skip)
                for r, p, f in zip(raws, pixels, fields, strict=True)]
            rows = [(o, f) for o, f in zip(outs, fields, strict=True)
                    if o is not None and f is not None]
            snap("transform")
            if builder.packer is None:
                for row, (out, _f) in enumerate(rows):
                    images[row] = out
            else:
                _cut(builder.packer, [o for o, _f in rows], images)
            pack_fields(collate_fields([f for _o, f in rows]), packed, 0, len(packed))
        else:
            snap("decode")
            snap("fields")
            outs = [_ok(user.run, r, skip) for r in raws]
            snap("transform")
            pack_fields({"batch": collate([o for o in outs if o is not None])}, packed, 0,
                        len(packed))
        snap("collate")
        if builder.packer is not None and user is None:
            # The ids packed, for a figure per sequence (exact.py); counted in no stage.
            ids[0] += sum(len(o) for o, _f in rows)
            stored[0] += sum(_size(r) for r, o, f in zip(raws, outs, fields, strict=True)
                             if o is not None and f is not None)
            snap(UNCOUNTED)

    # 1. Warm-up, then nothing of it open (its snapshots warm the snapshot's own path).
    first = export.read_units(units[:1], skip)
    try:
        warm = [raw for _, raw in zip(range(min(WARMUP, plan.samples)), first, strict=False)]
        _limit_threads()
        for at in range(0, len(warm), batch):  # in the run's batches: a batch's rows, no more
            stages(warm[at:at + batch])
    finally:
        getattr(first, "close", lambda: None)()
    getattr(export, "forget", lambda: None)()
    builder.kinds.clear()
    if builder.packer is not None:
        builder.packer.clear()  # the counted samples' sequences start at their first id
    skipped.clear()
    snaps.clear()
    ids[0] = stored[0] = 0
    # The batch's buffers are a worker's shared-memory slot, written over batch after batch:
    # their first touch (page faults) is set-up, not a cost of the samples written into them.
    images.fill(0)
    packed[:] = bytes(len(packed))
    # As a worker settles its heap once set up (procs.settle_heap): a collection of the
    # start-up's objects is then not counted in whichever stage happens to trigger it.
    procs.settle_heap()
    # 2. What a snapshot costs.
    snap("start")
    snap("snapshot")
    # 3.-5. Read, the kept samples' stages, the rest of the whole units.
    stream = _whole_units(export, units, skip)
    kept: list[Any] = []
    done = 0  # units read whole
    for item in stream:
        if item is _END:
            done += 1
            continue
        kept.append(item)
        if len(kept) == plan.samples:
            break
    snap("read")
    for at in range(0, len(kept), batch):
        stages(kept[at:at + batch])
    staged = read = len(kept)
    kept.clear()
    whole = True  # the samples read are whole units (all of them, when the loop runs out)
    for item in stream:
        if item is not _END:
            read += 1
            if read >= READ_CAP:
                whole = False
                break
            continue
        done += 1
        if read >= plan.samples:
            break
    snap("read")
    packing = builder.packer is not None and user is None
    return {"snapshots": snaps, "samples": staged, "read_samples": read, "units_read": done,
            "whole_units": whole, "packed_ids": ids[0] if packing else None,
            "read_ids": _read_ids(export, units, skip, read, ids[0], stored[0])
            if packing else None}


_END = object()  # where a unit ends, in the stream of samples


def _cut(packer: Any, docs: list[Any], rows: Any) -> None:
    """--pack's collate: the batch's documents added to the ids held and every whole sequence
    cut, as a worker does; sequences past the batch's rows are written over its first again
    (the copy is the cost, not where it lands)."""
    row = 0
    for ids in docs:
        packer.add(ids)
        while packer.full:
            packer.cut(rows[row % len(rows)])
            row += 1


def _size(raw: Any) -> int:
    """A document's size as stored: its ids, or its text's characters."""
    from dsbench.adapters.base import TEXT, text_of, token_ids

    return len(text_of(raw.image)) if raw.codec == TEXT else len(token_ids(raw.image))


def _read_ids(export: Any, units: list[str], skip: Any, read: int, packed: int,
              stored: int) -> float:
    """The ids of the `read` documents the read stage counted (whole units, more than the
    staged ones), after the last snapshot, so counted in no stage: read again, each its ids as
    stored, or a text its characters times the staged texts' ids per character (tokenizing
    thousands of texts again under the counter would take minutes)."""
    total = 0
    for item in _whole_units(export, units, skip):
        if item is _END:
            continue
        total += _size(item)
        read -= 1
        if read == 0:
            break
    return total * packed / stored if stored else 0.0


def _whole_units(export: Any, units: list[str], skip: Any) -> Iterator[Any]:
    """The export's samples, unit after unit in order, each unit followed by _END."""
    for unit in units:
        yield from export.read_units([unit], skip)
        yield _END


def _ok(step: Any, raw: Any, skip: Any) -> Any:
    """`step(raw)`, or None for a bad sample under --on-error skip (the error goes to `skip`)."""
    try:
        return step(raw)
    except SampleError as err:
        if skip is None:
            raise
        skip(err)
        return None


def main(argv: list[str]) -> int:
    from dsbench import procs

    # Started by the main process under procs.spawning(): the main process handles a Ctrl-C
    # and ends this one; and it ends with the main process, however that ends.
    procs.ignore_ctrl_c()
    procs.die_with_parent()
    plan_file, out_file = argv
    with open(plan_file, "rb") as f:
        plan: Plan = pickle.load(f)
    sys.path[:0] = [p for p in plan.sys_path if p not in sys.path]
    # A fork from a process with threads (pyarrow's, an object store client's) only ever
    # exits at once here; the warning about forking such a process does not apply.
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork")
    try:
        out = run(plan)
    except DsbenchError as exc:
        out = {"error": str(exc)}  # one line, naming the file and the sample
    with open(out_file, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
