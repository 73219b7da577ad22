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
A restart's first batch is timed from the loader's creation (its state loaded) on every rank.

A case that hangs (no batch for --hang-after seconds, in the loader's workers or in the main
process) or that the library refuses (its exception) is that case's finding, not the run's end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing.util
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
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


class Hung(Exception):
    """No batch came within the case's wait."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Hung in the main thread after `seconds`: a wait in the main process (a library's own,
    which torch's DataLoader timeout does not cover) is cut short there."""
    def alarm(_signum: int, _frame: Any) -> None:
        raise Hung()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class _Phase:
    """Loaders of one shape, opened and read rank after rank."""

    open: Callable[[Shape, Any], NativeLoader]
    hang_s: float

    def read(self, shape: Shape, states: list[Any], steps: int | None
             ) -> tuple[Counter[str], list[Any], list[float]]:
        """Each rank's loader, with its state, for `steps` batches (None: to the epoch's end):
        the samples delivered, each rank's state after, and each rank's first batch time."""
        got: Counter[str] = Counter()
        after, first = [], []
        for rank in range(shape.ranks):
            t0 = time.perf_counter()
            with _deadline(self.hang_s):
                loader = self.open(dataclasses.replace(shape, rank=rank), states[rank])
                try:
                    n = 0
                    while steps is None or n < steps:
                        ids = loader.next()
                        if ids is None:
                            break
                        if n == 0:
                            first.append(time.perf_counter() - t0)
                        got.update(ids)
                        n += 1
                    after.append(loader.state())
                finally:
                    loader.close()
        return got, after, first


def _case(case: str, phase: _Phase, opts: NativeResumeOptions, shape: Shape,
          reference: Counter[str]) -> dict[str, Any]:
    after = shape
    if case == "other workers":
        after = dataclasses.replace(shape, workers=opts.workers_after or opts.workers + 1)
    if case == "other ranks":
        after = dataclasses.replace(shape, ranks=opts.ranks_after or opts.ranks + 1)
    got, states, _ = phase.read(shape, [None] * shape.ranks, opts.restart_at)
    if case == "second resume":
        more, states, _ = phase.read(shape, states, opts.restart_at)
        got += more
    restart_states = states if after.ranks == shape.ranks else [states[0]] * after.ranks
    rest, _, first = phase.read(after, restart_states, None)
    got += rest
    return {"case": case, "outcome": "no state" if states[0] is None else "measured",
            "ranks": [shape.ranks, after.ranks], "workers": [shape.workers, after.workers],
            "epoch_samples": sum(reference.values()), "delivered": sum(got.values()),
            "replayed": sum(max(0, n - reference[k]) for k, n in got.items()),
            "skipped": sum(max(0, n - got[k]) for k, n in reference.items()),
            "first_batch_s": max(first) if first else None, "detail": None}


def _failed(case: str, outcome: str, detail: str) -> dict[str, Any]:
    return {"case": case, "outcome": outcome, "ranks": None, "workers": None,
            "epoch_samples": None, "delivered": None, "replayed": None, "skipped": None,
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
                         "buffer": opts.buffer, "seed": opts.seed, "hang_after_s": opts.hang_s},
            "cases": cases}


def _cases(export: base.Export, opts: NativeResumeOptions, options: dict[str, Any], tmp: Path,
           context: Any, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    stall = opts.hang_s

    def open_loader(shape: Shape, state: Any) -> NativeLoader:
        return NativeLoader(export, shape, options, tmp, context, stall, state)

    phase = _Phase(open_loader, opts.hang_s)
    out = []
    references: dict[bool, Counter[str]] = {}
    for case in opts.cases:
        shuffled = case == "with shuffle"
        shape = Shape(0, opts.ranks, opts.workers, opts.batch_size,
                      Shuffle(opts.seed, opts.buffer) if shuffled else None)
        progress(f"resume {export.layout}: {case}")
        try:
            if shuffled not in references:
                references[shuffled] = phase.read(shape, [None] * opts.ranks, None)[0]
            if opts.restart_at * opts.batch_size >= min_rank_samples(references[shuffled],
                                                                     opts.ranks):
                raise DsbenchError(f"--restart-at {opts.restart_at} is not inside the epoch "
                                   f"({sum(references[shuffled].values())} samples over "
                                   f"{opts.ranks} ranks, batch {opts.batch_size})",
                                   path=export.path)
            out.append(_case(case, phase, opts, shape, references[shuffled]))
        except DsbenchError:
            raise
        except Hung:
            out.append(_failed(case, "hang", f"no batch within {opts.hang_s:g} s"))
        except Exception as exc:  # the library's own refusal or failure: the case's finding
            detail = failure(exc)
            out.append(_failed(case, "hang" if "timed out" in detail else "failed", detail))
    return out


def min_rank_samples(reference: Counter[str], ranks: int) -> int:
    """The samples one rank reads in the epoch, near enough (the epoch split evenly)."""
    return sum(reference.values()) // ranks
