"""The demo: the incident's before and after exports and a candidate, measured, carried to 128 GPUs.

`run_demo(options, progress)` regenerates the three exports from the packaged definitions into a
cache directory (kept, so a second run only measures), benchmarks them in one interleaved run,
compares after and the candidate against before, and extrapolates each to the same cluster with
the same seed, so that only the measured loader differs between them. It returns one plain
document; `verdict_lines(doc)` turns it into the sentences the command prints, and
dsbench.plots / dsbench.report draw it.

What is measured (on this machine) and what is modelled (the cluster) stay apart in the
document: `results` and `comparisons` are measurements, `cluster` and `tails` are the model's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dsbench import fmt
from dsbench.cluster import ClusterSpec, extrapolate, simulate
from dsbench.compare import compare, format_value
from dsbench.generate import MANIFEST, generate
from dsbench.loadcost import Distribution, LoaderCost
from dsbench.runner import BenchOptions, run_benches
from dsbench.spec import ExportSpec, load_spec
from dsbench.storage import PROFILES

EXPORTS = ("before", "after", "arrow")  # base, the re-export, the candidate
FORMATS_DIR = Path(__file__).parent / "formats"
TAIL_RANKS = (64, 128)  # the incident's two job sizes
FINE_BUCKET_S, FINE_TIMELINE_S = 0.1, 30.0
# Quantile levels for the step-time tail curves: the body coarsely, the last 10% finely.
_TAIL_LEVELS = np.concatenate([np.linspace(0.0, 0.9, 46), 1.0 - np.logspace(-1, -3.7, 55)])

Progress = Callable[[str], None]

# The cluster the demo carries its measurements to: the incident's 16 x 8 GPUs with dsbench's
# defaults, plus what the incident implies but does not state. Per-sample files usually live on
# a shared network filesystem (EFS here), where each open is a round trip. A batch of 256 per GPU
# in 0.15 s of compute (about 1,700 samples/s per GPU) is an ImageNet-class model on a current
# data-centre GPU. The rare rank stall (1 s in 1 of 10,000 rank-steps: a GC pause, a slow
# metadata call) is the same for every export; it shows how the tail grows with ranks.
DEMO_CLUSTER = ClusterSpec(batch_size=256, compute=Distribution("const", 0.15),
                           storage=PROFILES["efs"], stall_prob=1e-4, stall_s=1.0)


DEMO_BENCH = BenchOptions(workers=(1, 2), seconds=2.0, rounds=3)


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


def definition(name: str) -> ExportSpec:
    return load_spec(FORMATS_DIR / f"{name}.toml")


def prepare_exports(cache: Path, samples: int, progress: Progress) -> dict[str, Path]:
    """Each demo export, generated unless the cache already holds it complete."""
    paths = {}
    for name in EXPORTS:
        # The sample count is in the directory name: another --samples gets its own export.
        out = cache / f"{name}-{samples}"
        if _complete(out):
            progress(f"demo: reusing {out}")
        else:
            progress(f"demo: generating {name} ({samples} samples) in {out}")
            report = generate(definition(name), out, samples=samples)
            progress(f"demo: {name} written in {fmt.seconds(report.wall_s)}")
        paths[name] = out
    return paths


def _complete(out: Path) -> bool:
    try:
        return bool(json.loads((out / MANIFEST).read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def run_demo(opts: DemoOptions, progress: Progress) -> dict[str, Any]:
    """Generate (or reuse), measure, compare and extrapolate; the whole story as plain data."""
    paths = prepare_exports(opts.cache, opts.samples, progress)
    progress(f"demo: measuring {', '.join(EXPORTS)} with {_workers_text(opts.bench.workers)} "
             f"loader workers, {opts.bench.rounds} interleaved rounds of "
             f"{fmt.seconds(opts.bench.seconds)} each")
    docs = dict(zip(EXPORTS, run_benches([paths[n] for n in EXPORTS], opts.bench, progress),
                    strict=True))
    return model(docs, {n: str(p) for n, p in paths.items()}, opts, progress)


def model(docs: dict[str, dict[str, Any]], exports: dict[str, str], opts: DemoOptions,
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
    return {"kind": "dsbench-demo", "schema_version": 1, "samples": opts.samples,
            "exports": exports, "results": docs, "comparisons": comparisons,
            "cluster": extrapolations, "tails": tails, "fine_timeline": fine,
            "cluster_spec": cluster.to_json()}


def _workers_text(workers: tuple[int, ...]) -> str:
    return " and ".join(str(w) for w in workers)


def _tails_and_timeline(doc: dict[str, Any], cluster: ClusterSpec, opts: DemoOptions
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


# --- the verdict in words ------------------------------------------------------------------

def top_run(doc: dict[str, Any]) -> dict[str, Any]:
    """The run with the most workers: the node-like figure on this machine."""
    return max(doc["runs"], key=lambda r: r["workers"])


def base_run(doc: dict[str, Any]) -> dict[str, Any]:
    return min(doc["runs"], key=lambda r: r["workers"])


def _metric(comparison: dict[str, Any], key: str) -> dict[str, Any]:
    # The fewest workers measured on both sides: on a small machine more workers compete with
    # the main process for its cores, and the model's per-sample cost comes from this run too.
    run = comparison["runs"][0]
    return next(m for m in run["metrics"] if m["metric"] == key)


def slower_text(comparison: dict[str, Any], base: str, cand: str) -> str:
    m = _metric(comparison, "samples_per_s")
    w = comparison["runs"][0]["workers"]
    figures = (f"{fmt.rate(m['cand'])} vs {fmt.rate(m['base'])} with {w} loader "
               f"worker{'s' if w > 1 else ''}")
    if m["change"] == "same":
        return f"{cand} is as fast as {base} within noise ({figures})"
    r = m["ratio"]
    word = "slower" if r < 1 else "faster"
    return f"{cand} is {fmt.ratio(1 / r if r < 1 else r)} {word} than {base} ({figures})"


def cost_text(comparison: dict[str, Any]) -> str:
    parts = []
    for key, name in (("cpu_s_per_sample", "CPU"), ("files_per_sample", "files opened"),
                      ("bytes_per_sample", "bytes read")):
        m = _metric(comparison, key)
        parts.append(f"{name} {format_value(key, m['base'])} -> {format_value(key, m['cand'])}"
                     f" ({fmt.ratio(m['ratio'])})")
    return "; ".join(parts)


def cpu_moves_text(comparison: dict[str, Any], stages: int = 3) -> str:
    rows = [r for r in comparison["runs"][0]["attribution"] if r["unit"] == "s/sample"]
    return ", ".join(r["text"] for r in rows[:stages])


def cluster_text(e: dict[str, Any]) -> str:
    st = e["step_time_s"]
    return (f"mean step {fmt.seconds(st['mean'])}, p99 {fmt.seconds(st['p99'])}, GPU "
            f"utilization {fmt.percent(e['gpu_util'])}, {e['verdict']} (supply "
            f"{fmt.ratio(e['supply_over_demand'])} of demand, limit: {e['node']['limit']})")


def tail_text(doc: dict[str, Any], name: str) -> str:
    t = doc["tails"][name]
    a, b = t["64"], t["128"]
    return (f"{name}'s p99 step is {fmt.seconds(a['p99_s'])} at 64 GPUs and "
            f"{fmt.seconds(b['p99_s'])} at 128 with the per-rank work unchanged: every step "
            "waits for the slowest rank, so twice the ranks make a rare per-rank delay twice as "
            "likely to hold up a step")


def advice(doc: dict[str, Any]) -> list[str]:
    """What to do, from the measurements: the candidate or the old layout, the field, no GPUs."""
    cl, res = doc["cluster"], doc["results"]
    after, arrow, before = cl["after"], cl["arrow"], cl["before"]
    out = []
    if after["gpu_util"] < before["gpu_util"] - 0.01:
        if arrow["gpu_util"] >= before["gpu_util"] - 0.01:
            r = top_run(res["arrow"])
            out.append(f"roll out the arrow candidate instead of after: it keeps the new fields "
                       f"in shards, measured {fmt.rate(r['samples_per_s'])} and "
                       f"{fmt.seconds(r['cpu_s_per_sample'], 'sample')} with "
                       f"{fmt.sig(r['files_per_sample'])} files/sample; predicted GPU "
                       f"utilization {fmt.percent(arrow['gpu_util'])} against after's "
                       f"{fmt.percent(after['gpu_util'])}")
        else:
            out.append(f"go back to before's layout ({res['before']['export']['layout']} "
                       "shards) and add the new fields to it: no candidate measured here keeps "
                       f"before's {fmt.percent(before['gpu_util'])} predicted GPU utilization")
    fields = next((r for r in doc["comparisons"]["after"]["runs"][0]["attribution"]
                   if r["what"] == "fields"), None)
    if fields and fields["delta"] > 0:
        out.append(f"the new fields cost {fmt.seconds(fields['delta'], 'sample')} of CPU in "
                   "after: store the embedding as binary float32, not as a JSON list of numbers")
    if after["verdict"] == "input-bound":
        cores = after["what_if"].get("cores_per_node")
        if cores:
            out.append(f"if after must stay: {cores['workers_per_gpu']} workers per GPU on "
                       f"{cores['cores_per_node']} cores per node would reach "
                       f"{fmt.percent(cores['simulated_util'])} GPU utilization (simulated)")
        out.append("do not add GPUs: the loaders, not the GPUs, set the step; more GPUs add "
                   "nodes with the same shortfall and more ranks for every step to wait for")
    return out


def verdict_lines(doc: dict[str, Any]) -> list[str]:
    res, comp, cl = doc["results"], doc["comparisons"], doc["cluster"]
    spec = doc["cluster_spec"]
    lines = ["Verdict (measured on this machine)",
             f"  {slower_text(comp['after'], 'before', 'after')}",
             f"  after vs before: {cost_text(comp['after'])}",
             f"  where the CPU went: {cpu_moves_text(comp['after'])}",
             f"  {slower_text(comp['arrow'], 'before', 'arrow')}",
             "",
             f"On {spec['nodes']} nodes x {spec['gpus_per_node']} GPUs (a model, not a "
             "measurement; assumptions below)"]
    lines += [f"  {name:<6}  {cluster_text(cl[name])}" for name in EXPORTS]
    after = cl["after"]
    if after["verdict"] == "input-bound":
        lines.append(f"  the oscillation: {after['timeline']['note']}")
    lines.append(f"  the tail: {tail_text(doc, 'after')}")
    lines += ["", "What to do"]
    lines += [f"  {i}. {text}" for i, text in enumerate(advice(doc), 1)]
    lines += ["", "Assumptions of the model (stated by the demo; change them with its options)",
              f"  {assumptions_text(spec, res['before'])}"]
    return lines


def assumptions_text(spec: dict[str, Any], base: dict[str, Any]) -> str:
    measured_batch = base["config"]["batch_size"]
    return (f"{spec['cores_per_node']} cores and {spec['workers_per_gpu']} loader workers per "
            f"GPU per node, batch {spec['batch_size']} per GPU (measured at {measured_batch}, "
            f"rescaled), {fmt.seconds(spec['compute']['mean_s'])} of GPU compute per step, storage "
            f"{spec['storage']}, a {fmt.seconds(spec['stall_s'])} stall in "
            f"{fmt.percent(spec['stall_prob'])} of rank-steps; CPU per sample as measured here, "
            "per core")
