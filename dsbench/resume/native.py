"""`dsbench resume --backend native`: each format's library resuming its own loader, audited
against an uninterrupted epoch read by the same library.

Five cases, each from fresh loaders (native_loaders.py):

- same shape: every rank stops after K steps, its loader's state taken; the same ranks and
  workers load it and read to the epoch's end;
- second resume: as above, then K more steps, the state taken again, and a second restart;
- other workers: the restart with --workers-after loader workers per rank;
- other ranks: the restart on --ranks-after ranks, each loading rank 0's state (as a job that
  checkpoints on rank 0 does);
- with shuffle: the same shape, with the library's own shuffle seeded by --seed.

The samples delivered (the job's K steps on every rank, and each restart's) are compared as
multisets of sample digests with those of the uninterrupted epoch on the job's ranks: replayed
are deliveries beyond the epoch's count of a sample, skipped the epoch's samples that never came.
A restart in another shape is also read uninterrupted in that shape, since a library may deliver
another epoch there (MosaicML Streaming pads the samples to a multiple of the ranks, litdata
drops a last partial batch with more than one rank): its difference from the job's epoch is
reported, and only what neither shape's epoch explains is counted (a delivery replayed beyond
both shapes' counts of its sample, a sample skipped that both deliver).
A restart's first batch is timed from the loader's creation (its state loaded) on every rank.

A case that hangs (no batch for --hang-after seconds, in the loader's workers or in the main
process) or that the library refuses (its exception) is that case's finding, not the run's end.
"""

from __future__ import annotations

import dataclasses
import multiprocessing.util
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import __version__, adapters
from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader import forks
from dsbench.loader import native as native_readers
from dsbench.loader.native import Shuffle
from dsbench.loader.native.session import (
    environment,
    private_dir,
    reader_context,
    removed_after,
)
from dsbench.resume.native_loaders import (
    RESUMES,
    NativeLoader,
    Shape,
    check,
    failure,
    process_group,
)

CASES = ("same shape", "second resume", "other workers", "other ranks", "with shuffle")
SCHEMA_VERSION = 1
RANKS_AS = "one process, ranks one after another, each rank its own node"


@dataclass(frozen=True)
class NativeResumeOptions:
    restart_at: int
    ranks: int = 1
    workers: int = 2
    ranks_after: int | None = None  # None: --ranks + 1
    workers_after: int | None = None  # None: --workers + 1
    batch_size: int = 16
    buffer: int = 64  # the shuffle buffer of webdataset and a streaming Hugging Face dataset
    seed: int = 0
    hang_s: float = 60.0
    cases: tuple[str, ...] = CASES
    options: tuple[tuple[str, Any], ...] = ()  # --native-option

    def check(self) -> None:
        bad = [c for c in self.cases if c not in CASES]
        if bad or not self.cases:
            raise DsbenchError(f"unknown case {(bad or [''])[0]!r} (known: {', '.join(CASES)})")
        for name in ("restart_at", "ranks", "workers", "batch_size", "ranks_after",
                     "workers_after"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DsbenchError(f"--{name.replace('_', '-')} must be at least 1, got "
                                   f"{value}")
        if self.hang_s <= 0:
            raise DsbenchError(f"--hang-after must be positive, got {self.hang_s:g} s")


class Hung(BaseException):
    """No batch came within the wait (a BaseException: a library's own `except Exception`
    retry must not swallow it)."""


class _Watch:
    """SIGALRM in the main thread `seconds` after each `arm()`: a wait in the main process (a
    library's own, which torch's DataLoader timeout does not cover) is cut short there."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> _Watch:
        def alarm(_signum: int, _frame: Any) -> None:
            raise Hung()

        self.old = signal.signal(signal.SIGALRM, alarm)
        return self

    def arm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def __exit__(self, *_: Any) -> None:
        self.disarm()
        signal.signal(signal.SIGALRM, self.old)


@dataclass
class _Phase:
    """Loaders of one shape, opened and read rank after rank; `doing` names the read under way
    (the uninterrupted epoch, the job, a restart) for a failure's message."""

    open: Callable[[Shape, Any], Any]
    hang_s: float
    doing: str = ""

    def read(self, doing: str, shape: Shape, states: list[Any], steps: int | None
             ) -> tuple[list[Counter[str]], list[Any], list[float]]:
        """Each rank's loader, with its state, for `steps` batches (None: to the epoch's end):
        each rank's samples delivered, its state after, and its first batch's time from the
        loader's creation (its dataset built, its state loaded). A hang is no batch within
        hang_s of asking (or of creating the loader)."""
        self.doing = doing
        got: list[Counter[str]] = []
        after, first = [], []
        with _Watch(self.hang_s) as watch:
            for rank in range(shape.ranks):
                t0 = time.perf_counter()
                loader = None
                try:
                    watch.arm()
                    loader = self.open(dataclasses.replace(shape, rank=rank), states[rank])
                    delivered: Counter[str] = Counter()
                    n = 0
                    while steps is None or n < steps:
                        watch.arm()
                        ids = loader.next()
                        watch.disarm()
                        if ids is None:
                            break
                        if n == 0:
                            first.append(time.perf_counter() - t0)
                        delivered.update(ids)
                        n += 1
                    watch.arm()
                    after.append(loader.state())
                    watch.disarm()
                    got.append(delivered)
                finally:
                    watch.disarm()
                    if loader is not None:
                        loader.close()
        return got, after, first


def _total(per_rank: list[Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for c in per_rank:
        total += c
    return total


def _after(case: str, opts: NativeResumeOptions, shape: Shape) -> Shape:
    """The restart's shape."""
    if case == "other workers":
        return dataclasses.replace(shape, workers=opts.workers_after or opts.workers + 1)
    if case == "other ranks":
        return dataclasses.replace(shape, ranks=opts.ranks_after or opts.ranks + 1)
    return shape


def _difference(a: Counter[str], b: Counter[str]) -> int:
    """Deliveries in one multiset and not the other."""
    return sum(((a - b) + (b - a)).values())


def _case(case: str, phase: _Phase, opts: NativeResumeOptions, shape: Shape,
          epoch: Callable[[Shape], Counter[str]]) -> dict[str, Any]:
    after = _after(case, opts, shape)
    reference = epoch(shape)
    shape_epoch = None
    most, least = reference, reference
    if after != shape:
        other = epoch(after)
        shape_epoch = {"samples": sum(other.values()),
                       "differs": _difference(reference, other)}
        most, least = reference | other, reference & other
    job, states, _ = phase.read("the job", shape, [None] * shape.ranks, opts.restart_at)
    got = _total(job)
    if case == "second resume":
        more, states, _ = phase.read("the first restart", shape, states, opts.restart_at)
        got += _total(more)
    restart_states = states if after.ranks == shape.ranks else [states[0]] * after.ranks
    rest, _, first = phase.read("the restart", after, restart_states, None)
    got += _total(rest)
    return {"case": case, "outcome": "no state" if states[0] is None else "measured",
            "ranks": [shape.ranks, after.ranks], "workers": [shape.workers, after.workers],
            "epoch_samples": sum(reference.values()), "shape_epoch": shape_epoch,
            "delivered": sum(got.values()),
            "replayed": sum((got - most).values()),
            "skipped": sum((least - got).values()),
            "first_batch_s": max(first) if first else None, "detail": None}


def audited(case: str, phase: _Phase, opts: NativeResumeOptions, shape: Shape,
            reference: Callable[[Shape], list[Counter[str]]]) -> dict[str, Any]:
    """The case's record: measured, or the hang or the library's failure as its finding."""
    try:
        per_rank = reference(shape)
        # Checked against the longest of the cases asked for, so that a K too large fails at
        # the first case rather than after the others were measured.
        longest = "second resume" if "second resume" in opts.cases else case
        steps = opts.restart_at * (2 if longest == "second resume" else 1)
        shortest = min(sum(c.values()) for c in per_rank)
        if steps * shape.batch_size >= shortest:
            raise DsbenchError(f"--restart-at {opts.restart_at} is not inside the epoch: "
                               f"{longest} reads {steps} steps of {shape.batch_size} before "
                               f"its restart, and a rank's epoch holds {shortest} samples")
        return _case(case, phase, opts, shape, lambda s: _total(reference(s)))
    except DsbenchError:
        raise
    except Hung:
        return _failed(case, "hang", f"{phase.doing}: no batch within {opts.hang_s:g} s")
    except Exception as exc:  # the library's own refusal or failure: the case's finding
        detail = failure(exc)
        timed_out = "DataLoader timed out after" in detail
        return _failed(case, "hang" if timed_out else "failed", f"{phase.doing}: {detail}")


def _failed(case: str, outcome: str, detail: str) -> dict[str, Any]:
    return {"case": case, "outcome": outcome, "ranks": None, "workers": None,
            "epoch_samples": None, "shape_epoch": None, "delivered": None, "replayed": None,
            "skipped": None,
            "first_batch_s": None, "detail": detail}


def run_native_resume(path: str, opts: NativeResumeOptions,
                      progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Each case of the library's own resume on the export at `path`: the document."""
    opts.check()
    export = adapters.open_export(path)
    check(export.layout)
    options = dict(opts.options)
    native_readers.check_options(export, options)
    # multiprocessing's own temporary directory (the fork server's socket) in the usual place,
    # before TMPDIR points into the run's private one (session.py).
    multiprocessing.util.get_temp_dir()
    with removed_after(), forks.stopped_after(), environment(private_dir()):
        context = reader_context(export.layout)
        tmp = Path(tempfile.mkdtemp(prefix="resume-", dir=private_dir()))
        try:
            with process_group(export.layout, tmp):
                cases = _cases(export, opts, options, tmp, context, progress)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"kind": "dsbench-resume-native", "schema_version": SCHEMA_VERSION,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "dsbench_version": __version__,
            "export": {"path": str(export.path), "layout": export.layout},
            "reader": {**native_readers.describe(export.layout, options),
                       "resume": RESUMES[export.layout]},
            "settings": {"restart_at": opts.restart_at, "ranks": opts.ranks,
                         "workers": opts.workers, "batch_size": opts.batch_size,
                         "buffer": opts.buffer, "seed": opts.seed, "hang_after_s": opts.hang_s,
                         "ranks_as": RANKS_AS},
            "cases": cases}


def _cases(export: base.Export, opts: NativeResumeOptions, options: dict[str, Any], tmp: Path,
           context: Any, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    def open_loader(shape: Shape, state: Any) -> NativeLoader:
        return NativeLoader(export, shape, options, tmp, context, opts.hang_s, state)

    phase = _Phase(open_loader, opts.hang_s)
    references: dict[Shape, list[Counter[str]]] = {}

    def reference(shape: Shape) -> list[Counter[str]]:
        if shape not in references:  # one uninterrupted epoch per shape serves every case
            where = "" if shape.ranks == opts.ranks and shape.workers == opts.workers else \
                f" on {shape.ranks} x {shape.workers}"
            references[shape] = phase.read(f"the uninterrupted epoch{where}", shape,
                                           [None] * shape.ranks, None)[0]
        return references[shape]

    out = []
    for case in opts.cases:
        shuffled = case == "with shuffle"
        shape = Shape(0, opts.ranks, opts.workers, opts.batch_size,
                      Shuffle(opts.seed, opts.buffer) if shuffled else None)
        progress(f"resume {export.layout}: {case}")

        out.append(audited(case, phase, opts, shape, reference))
    return out
