"""The demo: the incident's before and after exports and a candidate, measured, carried to 128 GPUs.

`run_demo(options, progress)` regenerates the three exports from the packaged definitions into a
cache directory (kept, so a second run only measures), benchmarks them in one interleaved run,
compares after and the candidate against before, and extrapolates each to the same cluster with
the same seed, so that only the measured loader differs between them. It ends with `dsbench
advise` on after (ADVISE): the candidates it finds, measured and carried to the same cluster.
It returns one plain document; dsbench.verdict turns it into the sentences the command prints,
and dsbench.plots and dsbench.report draw it.

What is measured (on this machine) and what is modelled (the cluster) stay apart in the
document: `results` and `comparisons` are measurements, `cluster` and `tails` are the model's.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dsbench import fmt, installed
from dsbench.advise.run import AdviseOptions, advise
from dsbench.analysis.compare import compare
from dsbench.errors import DsbenchError
from dsbench.export.generate import GenerateReport, generate, is_complete
from dsbench.export.reexport import reexport
from dsbench.export.spec import FORMATS_DIR, ExportSpec, load_spec
from dsbench.export.synth import GENERATOR
from dsbench.job import share
from dsbench.job.launch import launch, quiet_torch_cpp
from dsbench.job.options import JobOptions
from dsbench.loader.runner import BenchOptions, run_benches
from dsbench.model.cluster import extrapolate, simulate
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.model.profiles import PROFILES, StorageProfile, from_probe, with_added_latency
from dsbench.report import demo_store
from dsbench.results.types import BenchResult
from dsbench.resume.measure import POLICIES, ResumeOptions, run_resume

EXPORTS = ("before", "after", "arrow")  # base, the re-export, the candidate
TAIL_RANKS = (64, 128)  # the incident's two job sizes
FINE_BUCKET_S, FINE_TIMELINE_S = 0.1, 30.0
JOB_BATCH = 8  # per rank in the measured job: compute-bound at 2 ranks on a 2-core machine
# Quantile levels for the step-time tail curves: the body coarsely, the last 10% finely.
_TAIL_LEVELS = np.concatenate([np.linspace(0.0, 0.9, 46), 1.0 - np.logspace(-1, -3.7, 55)])

Progress = Callable[[str], None]

# The cluster the demo carries its measurements to: the incident's 16 x 8 GPUs with dsbench's
# defaults, plus what the incident implies but does not state. Its storage is the local S3
# server as probed plus a stated network round trip (run_demo) when the object-store section
# runs; without it, a shared network filesystem (the EFS profile), where each open is a round
# trip. A batch of 256 per GPU
# in 0.15 s of compute (about 1,700 samples/s per GPU) is an ImageNet-class model on a current
# data-centre GPU. The rare rank stall (1 s in 1 of 10,000 rank-steps: a GC pause, a slow
# metadata call) is the same for every export; it shows how the tail grows with ranks.
DEMO_CLUSTER = ClusterSpec(batch_size=256, compute=Distribution("const", 0.15),
                           storage=PROFILES["efs"], stall_prob=1e-4, stall_s=1.0)


NETWORK_LATENCY_S = 1e-3

# 9 paired rounds at 1 worker detect a 10% change at 5% noise per round 94% of the time
# (tests/test_stats.py); 5 rounds at 2 workers describe the scaling.
# Two workers on two cores share them with the main process, so their rounds vary more: with 3
# rounds a demo here saw after's spread (IQR / median) at 12.9%, past the 10% that warns; the
# spread is an interquartile range, which 5 rounds estimate with less of that noise.
DEMO_BENCH = BenchOptions(workers=(1, 2), seconds=1.0, rounds=9, sweep_rounds=5)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dsbench" / "demo"


@dataclass(frozen=True)
class DemoOptions:
    cache: Path = field(default_factory=default_cache)
    samples: int = 2000
    bench: BenchOptions = DEMO_BENCH
    cluster: ClusterSpec = DEMO_CLUSTER
    steps: int = 5000
    seed: int = 0
    object_store: bool = True  # also measure before and after on a local S3 server
    # The round trip added to the probed loopback server's latency for the cluster model: a
    # store in the same region as the cluster. Stated, not measured: loopback has none.
    network_latency_s: float = NETWORK_LATENCY_S
    storage_stated: bool = False  # --storage given: the model uses it, not the probe
    job: bool = True  # check the model against a measured 2-rank job (dsbench job)
    job_steps: int = 40
    resume: bool = True  # also restart after's loader by each policy (dsbench resume)
    advise: bool = True  # end with dsbench advise's recommendation for after
    advice_budget_s: float = 25.0  # how long the advice's measuring may take (ADVISE's)


# The advice for after (dsbench advise), sized to the demo: its first 500 samples re-laid as
# uncompressed Arrow shards of 64 MB, beside the per-sample variants advise adds for a
# per-sample export (a binary embedding; its JSON re-laid), measured within 25 s, and carried
# to the demo's cluster.
# The job's export is stated at the ImageNet-1k training set's size (an ImageNet-class model,
# as the cluster states), so that a shard size means shards per loader worker.
ADVISE = AdviseOptions(samples=500, budget_s=25.0, layouts=("arrow",),
                       shard_sizes=(64_000_000,), compressions=("none",),
                       export_samples=1_281_167)


def definition(name: str) -> ExportSpec:
    return load_spec(FORMATS_DIR / f"{name}.toml")


def check_workers(workers: tuple[int, ...], samples: int) -> None:
    """Loader workers split an export's units (shards, or samples of a per-sample layout)."""
    for name in EXPORTS:
        spec = definition(name)
        units = samples if spec.layout == "files" else math.ceil(samples / spec.shard_samples)
        if max(workers) > units:
            raise DsbenchError(f"--workers {max(workers)}: at --samples {samples} the {name} "
                               f"export has {units} shard{'s' if units > 1 else ''} of "
                               f"{spec.shard_samples} samples to split; use --samples "
                               f"{max(workers) * spec.shard_samples} or fewer workers")


# The candidate is after's own samples re-laid in Arrow shards (`generate --from`): the way a
# team tries a layout on its data, every field carried, images byte for byte.
CANDIDATE_FROM = {"arrow": "after"}


def export_dir(cache: Path, name: str, samples: int) -> Path:
    """Where the demo keeps an export. The sample count and the image generator are in the
    name: another --samples, or a cache from before generator 2, gets its own export."""
    source = CANDIDATE_FROM.get(name)
    return cache / (f"{name}-{samples}-g{GENERATOR}" + (f"-from-{source}" if source else ""))


def prepare_exports(cache: Path, samples: int, progress: Progress) -> dict[str, Path]:
    """Each demo export, generated (or re-laid) unless the cache already holds it complete."""
    paths: dict[str, Path] = {}
    for name in EXPORTS:
        source = CANDIDATE_FROM.get(name)
        out = export_dir(cache, name, samples)
        verb = f"re-laying {source} as" if source else "generating"
        progress(f"demo: {'reusing' if is_complete(out) else verb} {name} "
                 f"({samples} samples) in {out}")
        # Always through generate: it refuses a directory holding another export and skips
        # the complete units of this one, so a reuse costs milliseconds.
        if source:
            report: GenerateReport = reexport(
                definition(name), out, str(paths[source]), samples=samples)
        else:
            report = generate(definition(name), out, samples=samples)
        if report.units_written:
            progress(f"demo: {name} written in {fmt.seconds(report.wall_s)}")
        paths[name] = out
    return paths


def run_demo(opts: DemoOptions, progress: Progress) -> dict[str, Any]:
    """Generate (or reuse), measure, compare and extrapolate; the whole story as plain data."""
    paths = prepare_exports(opts.cache, opts.samples, progress)
    progress(f"demo: measuring {', '.join(EXPORTS)} with {_workers_text(opts.bench.workers)} "
             f"loader workers, {opts.bench.rounds} interleaved rounds of "
             f"{fmt.seconds(opts.bench.seconds)} each")
    docs = dict(zip(EXPORTS, run_benches([paths[n] for n in EXPORTS], opts.bench, progress),
                    strict=True))
    in_store = demo_store.measure(paths, opts.bench, progress, opts.cluster) \
        if opts.object_store else None
    if in_store is not None and "probe" in in_store and not opts.storage_stated:
        opts = dataclasses.replace(opts, cluster=opts.cluster.replace(
            storage=probed_storage(in_store["probe"], opts.network_latency_s)))
    doc = model(docs, {n: str(p) for n, p in paths.items()}, opts, progress)
    if in_store is not None:
        doc["object_store"] = in_store
    if opts.job:
        doc["job_check"] = job_check(paths["after"], opts, progress)
    if opts.resume:
        doc["resume"] = resume_run(paths["after"], opts.samples, progress)
    if opts.advise and opts.samples >= 2:
        doc["advice"] = advice_run(paths["after"], opts, progress)
    return doc


def advice_run(path: Path, opts: DemoOptions, progress: Progress) -> dict[str, Any]:
    """dsbench advise on after, as the demo sizes it (ADVISE), to the demo's cluster."""
    samples = min(ADVISE.samples or opts.samples, opts.samples)
    progress(f"demo: advising on after: its first {samples} samples re-laid into candidates, "
             f"measured within {fmt.seconds(opts.advice_budget_s)} (dsbench advise)")
    # advise's own single worker, in the demo's batches (--batch-size: 64 unless asked otherwise)
    # Timed only: the verdict above has the exports' counted CPU, arrow's among them, and
    # counting the candidates too would take the demo past its three minutes.
    bench = BenchOptions(workers=(1,), batch_size=opts.bench.batch_size, exact=False)
    return advise(str(path), dataclasses.replace(ADVISE, samples=samples,
                                                 budget_s=opts.advice_budget_s), bench,
                  opts.cluster, progress)


def probed_storage(probed: dict[str, Any], network_s: float) -> StorageProfile:
    """The storage the cluster model reads from: the local S3 server's probed first-byte
    latency plus a stated network round trip per request. Not the probed bandwidth: a
    single-process server sharing this machine's cores with the loaders measures itself, not
    a store's link, so the per-node bandwidth is the s3 profile's published figure."""
    profile = with_added_latency(from_probe(probed, "probed local S3 server", "the demo's probe"),
                                 network_s, "the demo's network round trip, --network-latency")
    link = PROFILES["s3"]
    served = probed["bandwidth"]["best"]["bytes_per_s"]
    # A loopback server has no request limit or price of its own: S3's stand for them.
    return dataclasses.replace(
        profile, node_bytes_per_s=link.node_bytes_per_s,
        read_limit_per_prefix_s=link.read_limit_per_prefix_s,
        usd_per_1000_get=link.usd_per_1000_get, usd_per_gb_read=link.usd_per_gb_read,
        limit_source=f"the s3 profile's: {link.limit_source}",
        source=(f"latency: {profile.source}; bandwidth: the s3 profile's "
                f"{fmt.nbytes(link.node_bytes_per_s, 's')} per node ({link.source}), not the "
                f"{fmt.nbytes(served, 's')} the loopback server gave, which is its own limit"))


def job_check(path: Path, opts: DemoOptions, progress: Progress) -> dict[str, Any]:
    """The cluster model checked against a measured job on this machine: 2 ranks reading
    after, each with its own loader, the demo's compute per step, an all-reduce every step."""
    quiet_torch_cpp()  # before torch's first import, which the next line makes
    try:
        installed.require("torch", "the job check")
    except DsbenchError as exc:
        return {"skipped": str(exc)}
    jo = JobOptions(ranks=2, workers=1, batch_size=JOB_BATCH, steps=opts.job_steps,
                    compute=opts.cluster.compute, seed=opts.seed)
    try:
        found = share.check(str(path), jo.workers, jo.ranks, None)
    except DsbenchError as exc:
        return {"skipped": str(exc)}
    progress(f"demo: checking the model against a measured {jo.ranks}-rank job on after "
             f"({jo.steps} steps)")
    doc = launch(str(path), jo, found_layout=found.layout)
    assert doc is not None  # one node: rank 0 is this one's
    # The figures above come from each batch's CPU and the model's time-sharing: that route,
    # run on the job's configuration, is what this job checks.
    shared = doc["model"]["time_sharing"]
    pred = doc["model"]["from_cpu"]
    ratios = pred["ratios"]
    return {"export": "after", "ranks": jo.ranks, "workers_per_rank": jo.workers,
            "batch_size": jo.batch_size, "compute_s": jo.compute.mean, "steps": doc["steps"],
            "load_avg_1m": doc["machine"]["load_avg_1m"],
            "measured": {"mean_s": doc["step_time_s"]["mean"],
                         "p99_s": doc["step_time_s"]["p99"], "gpu_util": doc["gpu_util"]},
            "model": {"mean_s": pred["step_time_s"]["mean"],
                      "p99_s": pred["step_time_s"]["p99"], "gpu_util": pred["gpu_util"]},
            "ratios": {"mean": ratios["mean"], "p99": ratios["p99"],
                       "gpu_util": ratios["gpu_util"]},
            "time_sharing": {"measured": shared["measured"], "model": shared["model"]}}


# A few seconds: the first 64 files of after, the incident's export, restarted a quarter of
# the way into the epoch by each policy.
RESUME_FILES, RESUME_BATCH = 64, 8


def resume_run(path: Path, samples: int, progress: Progress) -> dict[str, Any]:
    n = min(RESUME_FILES, samples)
    opts = ResumeOptions(restart_at=max(1, n // (RESUME_BATCH * 4)), policies=POLICIES,
                         batch_size=RESUME_BATCH, window=4, units=n)
    progress(f"demo: restarting after's loader ({n} files) by each policy")
    return run_resume(str(path), opts, progress)


def model(docs: dict[str, BenchResult], exports: dict[str, str], opts: DemoOptions,
          progress: Progress) -> dict[str, Any]:
    """Compare the measured results and carry each to the cluster: the demo document."""
    base = docs["before"]
    comparisons = {name: compare(base, docs[name]) for name in EXPORTS[1:]}
    cluster = opts.cluster
    progress(f"demo: simulating {cluster.ranks} GPUs ({opts.steps} steps) for each export")
    extrapolations = {name: extrapolate(doc, cluster, np.random.default_rng(opts.seed),
                                        steps=opts.steps, scaling=TAIL_RANKS)
                      for name, doc in docs.items()}
    tails, fine = {}, {}
    for name in ("before", "after"):
        tails[name], fine[name] = _tails_and_timeline(docs[name], cluster, opts)
    return {"kind": "dsbench-demo", "schema_version": 2, "samples": opts.samples,
            "exports": exports, "results": docs, "comparisons": comparisons,
            "cluster": extrapolations, "tails": tails, "fine_timeline": fine,
            "cluster_spec": cluster.to_json()}


def _workers_text(workers: tuple[int, ...]) -> str:
    return " and ".join(str(w) for w in workers)


def _tails_and_timeline(doc: BenchResult, cluster: ClusterSpec, opts: DemoOptions
                        ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Step-time quantiles of the same job at 64 and 128 ranks (common random numbers), and
    the first FINE_TIMELINE_S of the GPU timeline in FINE_BUCKET_S buckets: finer than a
    dashboard's 1 s, so that bursts shorter than a second show as what they are."""
    res = simulate(LoaderCost.from_result(doc), cluster, np.random.default_rng(opts.seed),
                   steps=opts.steps, ranks=TAIL_RANKS, timeline_bucket_s=FINE_BUCKET_S)
    tails = {}
    for n in TAIL_RANKS:
        x = res.step_s[:, res.column(n)]
        tails[str(n)] = {"level": [round(float(q), 6) for q in _TAIL_LEVELS],
                         "step_s": [float(v) for v in np.quantile(x, _TAIL_LEVELS)],
                         "p99_s": res.stats(n)["p99"], "mean_s": res.stats(n)["mean"]}
    keep = int(FINE_TIMELINE_S / res.timeline_bucket_s)
    timeline = {"ranks": res.timeline_ranks, "bucket_s": res.timeline_bucket_s,
                "gpu_util": [round(float(u), 4) for u in res.timeline[:keep]]}
    return tails, timeline
