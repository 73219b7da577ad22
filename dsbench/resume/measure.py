"""`dsbench resume`: one epoch, uninterrupted and then interrupted after K steps and restarted
by a policy, per rank; the delivered keys compared, the restart timed, the batches' diversity.

Per rank, three loaders run one after another, each with fresh worker processes:

1. the reference: the whole epoch, uninterrupted;
2. the job: K steps, then the loader state the policy keeps is taken and the loader stopped,
   as a job stops when its node goes;
3. the restart, as the policy says: `none` starts the epoch again with the same seed;
   `fast-forward` starts it again and discards the first K batches (it kept epoch and step);
   `stateful` restores the saved loader state. It runs to the end of the epoch.

The job's K batches plus the restart's are compared with the reference's (figures.py). The
restart's clock starts when the new loader is created and stops at the first batch the job
trains on; the wall times of batches are taken with perf_counter and nothing else happens
between them (no sleeping, no printing).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from dsbench import __version__, adapters, installed
from dsbench.adapters.base import AUDIO, SEQ_LEN
from dsbench.adapters.survey import audio_rate
from dsbench.errors import DsbenchError
from dsbench.loader.options import BenchOptions, check_clip, check_kind, check_rate
from dsbench.loader.order import Plan, batches_per_rank, shuffle_of
from dsbench.loader.pipeline import Pipeline
from dsbench.resume import figures
from dsbench.resume.elastic import Elastic, check_shape, lockstep
from dsbench.resume.work import Item

POLICIES = ("none", "fast-forward", "stateful")
BACKENDS = ("dsbench", "torch")
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ResumeOptions:
    restart_at: int
    policies: tuple[str, ...] = ("none",)
    backend: str = "dsbench"
    ranks: int = 1
    workers: int = 2
    batch_size: int = 16
    buffer: int = 64  # shuffle-buffer samples per worker, for shard layouts
    seed: int = 0
    epoch: int = 0
    prefetch: int = 2
    window: int = 8  # steps after the restart whose diversity is reported
    label: str | None = None  # the label field; None: label, cls, class or target
    units: int | None = None  # only the export's first N units (shards or files): a quick run
    ranks_after: int | None = None  # an elastic restart's ranks (None: the same)
    workers_after: int | None = None  # and its workers per rank (None: the same)
    seq_len: int = SEQ_LEN  # token samples: cropped to it (a TokensLoader stream cut into it)
    clip_s: float = 4.0  # audio samples: clips of so many seconds, at the export's rate
    sample_rate: int | None = None  # --sample-rate: clips resampled to it (None: not)
    tokenizer: str | None = None  # --tokenizer FILE: text samples' tokenizer (None: trained)
    given: tuple[str, ...] = ()  # options for one kind of sample given (loader.options.FOR_KIND)

    @property
    def elastic(self) -> bool:
        return (self.ranks_after not in (None, self.ranks)
                or self.workers_after not in (None, self.workers))

    def check(self) -> None:
        bad = [p for p in self.policies if p not in POLICIES]
        if bad or not self.policies:
            raise DsbenchError(f"unknown policy {(bad or [''])[0]!r} (known: "
                               f"{', '.join(POLICIES)})")
        if self.backend not in BACKENDS:
            raise DsbenchError(f"unknown backend {self.backend!r} (known: "
                               f"{', '.join(BACKENDS)})")
        for name in ("ranks", "workers", "batch_size", "prefetch", "window", "ranks_after",
                     "workers_after", "seq_len"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DsbenchError(f"--{name.replace('_', '-')} must be at least 1, got "
                                   f"{value}")
        if self.units is not None and self.units < 1:
            raise DsbenchError(f"--units must be at least 1, got {self.units}")
        if self.buffer < 0 or self.epoch < 0:
            raise DsbenchError("--buffer and --epoch must not be negative")
        check_clip(self.clip_s)
        check_rate(self.sample_rate)
        if self.restart_at < 1:
            raise DsbenchError(f"--restart-at must be at least 1 step, got {self.restart_at}")
        if self.backend == "torch":
            installed.require("torch", "--backend torch")
            if "stateful" in self.policies:
                installed.require("torchdata", "--policy stateful (StatefulDataLoader)")


class Loader(Protocol):
    def next(self) -> list[Item] | None: ...

    def state(self) -> dict[str, Any]: ...

    def requests(self) -> int | None: ...

    def close(self) -> None: ...


def _state_bytes(opts: ResumeOptions, state: dict[str, Any]) -> int:
    if opts.backend == "torch":
        from dsbench.resume.torch_loader import TorchLoader

        return TorchLoader.state_bytes(state)
    return len(json.dumps(state, separators=(",", ":")).encode())


class _Run:
    """Makes one rank's loaders."""

    def __init__(self, path: str, plan: Plan, rank: int, opts: ResumeOptions,
                 pipeline: Pipeline) -> None:
        self.path, self.plan, self.rank, self.opts = path, plan, rank, opts
        self.pipeline = pipeline

    def loader(self, policy: str, state: dict[str, Any] | None = None) -> Loader:
        return open_loader(self.path, self.plan, self.rank, self.opts, self.pipeline, policy,
                           state)


def open_loader(path: str, plan: Plan, rank: int, opts: ResumeOptions, pipeline: Pipeline,
                policy: str, state: dict[str, Any] | None = None) -> Loader:
    """A rank's loader of the backend asked for; `state` is a saved loader state, or an elastic
    restart's share ({"workers": [{"pieces": ...}, ...]}, reshard.py)."""
    if opts.backend == "torch":
        from dsbench.resume.torch_loader import TorchLoader

        pieces = ([w["pieces"] for w in state["workers"]]
                  if state is not None and "workers" in state else None)
        return TorchLoader(path, plan, rank, opts.epoch, pipeline, opts.label, opts.prefetch,
                           stateful=policy == "stateful",
                           state=None if pieces is not None else state, pieces=pieces)
    from dsbench.resume.workers import DsbenchLoader

    return DsbenchLoader(path, plan, rank, opts.epoch, pipeline, opts.label, opts.prefetch,
                         state)


def _take(loader: Loader, t0: float, steps: int | None = None
          ) -> tuple[list[list[Item]], list[float]]:
    """Batches until the epoch ends (or `steps` of them), with their arrival times since t0."""
    batches, times = lockstep([loader], t0, steps)
    return batches[0], times[0]


def _restart(run: _Run, policy: str, saved: dict[str, Any] | None
             ) -> tuple[list[list[Item]], list[float], float | None]:
    """The restart: a new loader as the policy makes it, run to the end of the epoch."""
    fast_forward_s = None
    t0 = time.perf_counter()
    loader = run.loader(policy, saved if policy == "stateful" else None)
    try:
        if policy == "fast-forward":
            _take(loader, t0, run.opts.restart_at)  # fetched and decoded, then thrown away
            fast_forward_s = time.perf_counter() - t0
        after, times = _take(loader, t0)
    finally:
        loader.close()
    return after, times, fast_forward_s


def _rank(run: _Run, fill: int) -> list[dict[str, Any]]:
    """One rank: the reference epoch, the job's K steps, then each policy's restart."""
    o, k = run.opts, run.opts.restart_at
    loader = run.loader("none")
    try:
        reference, ref_times = _take(loader, time.perf_counter())
    finally:
        loader.close()

    # One job serves every policy: it is the same K steps whatever the checkpoint keeps, and
    # the state is taken from a stateful loader when a policy restores it.
    loader = run.loader("stateful" if "stateful" in o.policies else "none")
    try:
        job, _ = _take(loader, time.perf_counter(), k)
        saved = loader.state() if "stateful" in o.policies else None
    finally:
        loader.close()

    sizes = [len(b) for b in reference]
    lo, hi = figures.steady_range(len(reference), fill)
    common = {"rank": run.rank, "steps_per_epoch": len(reference),
              "samples_per_epoch": sum(sizes), "first_k_samples": sum(sizes[:k]),
              "steady_samples_per_s": figures.throughput(sizes, ref_times, max(lo, 1),
                                                         hi if hi > lo else len(sizes))}
    out = []
    for policy in o.policies:
        after, after_times, fast_forward_s = _restart(run, policy, saved)
        delivered = job + after
        m = min(o.window, len(after))
        out.append({
            **common,
            **figures.order_figures(reference, delivered),
            "delivered_steps": len(delivered),
            "first_batch_s": after_times[0] if after_times else None,
            "fast_forward_s": fast_forward_s,
            "state_bytes": (_state_bytes(o, saved) if saved is not None and policy == "stateful"
                            else None),
            "first_steps_samples_per_s": (sum(len(b) for b in after[:m]) / after_times[m - 1]
                                          if m else None),
            "diversity": {"after": figures.diversity(after[:m]),
                          "same_steps": figures.diversity(reference[k:k + m]),
                          "steady": figures.steady(reference, fill)},
            "series": {"reference_entropy_bits": figures.series(reference),
                       "resumed_entropy_bits": figures.series(delivered)},
        })
    return out


def _elastic(path: str, plan: Plan, opts: ResumeOptions, pipeline: Pipeline,
             progress: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[str]]:
    """The restart on another number of ranks or workers (resume/elastic.py)."""
    after = dataclasses.replace(plan, ranks=opts.ranks_after or opts.ranks,
                                workers=opts.workers_after or opts.workers)
    check_shape(plan, after)

    def make(p: Plan, rank: int, policy: str, state: dict[str, Any] | None) -> Loader:
        return open_loader(path, p, rank, opts, pipeline, policy, state)

    return Elastic(plan, after, opts.epoch, opts.restart_at, opts.window, opts.policies,
                   opts.backend, make, lambda st: _state_bytes(opts, st)).measure(progress)


def workers_pipeline(kind: str, export: Any, path: str, opts: ResumeOptions) -> Pipeline:
    """The workers' pipeline for what the samples carry, as bench makes it (BenchOptions):
    images, token ids cropped to seq_len, text tokenized by --tokenizer's file or a byte-level
    BPE trained on the export's first texts (as bench trains one) and cropped, clips of clip_s
    at the export's rate (the survey's)."""
    from dsbench.loader import tokenize, worker

    check_kind(kind, path, sample_rate=opts.sample_rate, given=opts.given)
    bench = BenchOptions(seq_len=opts.seq_len, clip_s=opts.clip_s, found_kind=kind,
                         sample_rate=opts.sample_rate, tokenizer=opts.tokenizer,
                         found_rate=audio_rate(export, path) if kind == AUDIO else None)
    return tokenize.settled(path, bench, worker.open_export).pipeline()


def run_resume(path: str, opts: ResumeOptions,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Measure a restart of every rank's loader on the export at `path`: the resume document."""
    opts.check()
    export = adapters.open_export(path, seq_len=opts.seq_len)
    kind = adapters.base.kind_of(export)
    pipeline = workers_pipeline(kind, export, path, opts)
    shuffle = shuffle_of(export.layout)
    units = tuple(export.units()[:opts.units])
    plan = Plan(units, opts.seed, opts.ranks, opts.workers, opts.batch_size,
                opts.buffer if shuffle != "sample" else 0, shuffle, export.layout)
    steps = batches_per_rank(plan, export, opts.epoch)
    if opts.restart_at >= min(steps):
        raise DsbenchError(f"--restart-at {opts.restart_at} is not inside the epoch: it has "
                           f"{min(steps)} steps per rank (batch {opts.batch_size}, "
                           f"{opts.ranks} ranks)", path=path)
    if opts.elastic:
        policies, notes = _elastic(str(export.path), plan, opts, pipeline, progress)
    else:
        per_rank = []
        for rank in range(opts.ranks):
            progress(f"rank {rank + 1}/{opts.ranks}: uninterrupted epoch, then a restart at "
                     f"step {opts.restart_at} ({', '.join(opts.policies)})")
            per_rank.append(_rank(_Run(str(export.path), plan, rank, opts, pipeline),
                                  plan.fill_steps()))
        policies, notes = [], []
        for i, policy in enumerate(opts.policies):
            ranks = [r[i] for r in per_rank]
            policies.append({"policy": policy, "ranks": ranks, "total": figures.total(ranks)})
    if any(r["diversity"]["steady"]["steps"] == 0 for r in policies[0]["ranks"]):
        notes.append("no steady state: the epoch is too short for the shuffle buffer (every "
                     "step is filling or draining it); steady figures are null")
    if len(set(steps)) > 1:
        notes.append(f"ranks deliver unequal epochs ({', '.join(map(str, steps))} steps): the "
                     "units do not divide evenly between them")
    # `given` is how the command line said them, not a setting of the run.
    settings = {**{k: v for k, v in asdict(opts).items() if k != "given"}, "kind": kind,
                "policies": list(opts.policies), "shuffle": shuffle, "buffer": plan.buffer,
                "fill_steps": plan.fill_steps()}
    return {"kind": "dsbench-resume", "schema_version": SCHEMA_VERSION,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "dsbench_version": __version__,
            "export": {"path": str(export.path), "layout": export.layout, "units": len(units)},
            "settings": settings, "policies": policies, "notes": notes}
