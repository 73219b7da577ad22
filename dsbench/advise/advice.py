"""From the last pass's measurements to the advice: figures against the baseline with their
intervals, each candidate carried to the user's cluster, the Pareto front, one recommendation.

The cluster model is run for each candidate as `extrapolate` runs it (model.cluster), with one
seed for all, so only the loader differs between them. Its predicted GPU utilization gets an
interval as the measurements do: the model is run once per round with that round's CPU per
sample (the measured batches scaled by the round's share), each round of a candidate paired
with the baseline's round beside it and the same draws, and the ratio of their utilizations
takes the same paired t and level as the timings. The model sees a sharded candidate's files
and requests per sample at its full-size shards (full_size): counted per shard on the sample,
spread over the samples a shard of the definition holds.

A candidate may be recommended when its CPU per sample is distinguishably lower than the
baseline's or its predicted utilization distinguishably higher, and neither is distinguishably
worse. Among those, one whose shards give each of the cluster's loader workers at least one
(for the full export) comes first, then the highest predicted utilization, then the lowest CPU
per sample; a winner that leaves workers without a shard is recommended with that warning.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dsbench import fmt, stats
from dsbench.advise.grid import Candidate
from dsbench.advise.search import kept_pairs, level_for, ratio
from dsbench.analysis import instructions
from dsbench.model.cluster import extrapolate, simulate
from dsbench.model.costs import LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.results.types import BenchResult

MODEL_STEPS = 2000
MODEL_SEED = 0


def predict(doc: BenchResult, cluster: ClusterSpec, steps: int = MODEL_STEPS) -> dict[str, Any]:
    """The cluster model's figures for one measured side."""
    e = extrapolate(doc, cluster, np.random.default_rng(MODEL_SEED), steps=steps,
                    scaling=(cluster.ranks,))
    store = e.get("store") or {}
    return {"gpu_util": e["gpu_util"], "step_mean_s": e["step_time_s"]["mean"],
            "step_p99_s": e["step_time_s"]["p99"], "verdict": e["verdict"],
            "data_wait_share": e["data_wait_share"],
            "requests_per_s_per_prefix": store.get("requests_per_s_per_prefix"),
            "limit_per_prefix_s": store.get("limit_per_prefix_s"),
            "throttle_bound": bool(store.get("throttle_bound", False))}


def round_utils(doc: BenchResult, cluster: ClusterSpec, steps: int = MODEL_STEPS
                ) -> list[float]:
    """Predicted GPU utilization from each round's CPU per sample alone (the module docstring
    says why): the measured batches scaled by the round's CPU over the run's."""
    cost = LoaderCost.from_result(doc)
    rounds = doc["runs"][0]["rounds"]
    mean = stats.geometric_mean([r["cpu_s_per_sample"] for r in rounds])
    out = []
    for i, r in enumerate(rounds):
        f = r["cpu_s_per_sample"] / mean
        scaled = dataclasses.replace(cost, cpu_s_per_sample=cost.cpu_s_per_sample * f,
                                     batch_cpu_s=tuple(b * f for b in cost.batch_cpu_s))
        result = simulate(scaled, cluster, np.random.default_rng([MODEL_SEED, i]),
                          steps=steps)
        out.append(float(result.gpu_util[0]))
    return out


def _interval(iv: stats.Interval | None, lower_is_better: bool) -> dict[str, Any] | None:
    if iv is None:
        return None
    change = "not distinguishable"
    if iv.excludes_null:
        change = "better" if (iv.estimate < 1) == lower_is_better else "worse"
    return {"ratio": iv.estimate, "interval": iv.as_list(), "level": iv.level,
            "change": change}


# A predicted utilization within this fraction of the baseline's is the same prediction: both
# sides at the model's ceiling differ only in the last digits of the draws, and a t interval
# over such differences would call them a change.
SAME_UTIL = 0.001


def _util_ratio(base: list[float], cand: list[float], keep: list[int] | None,
                level: float) -> dict[str, Any] | None:
    if keep is not None:
        base, cand = [base[i] for i in keep], [cand[i] for i in keep]
    if min(base + cand) <= 0:
        return None
    out = _interval(stats.paired_ratio(base, cand, level), lower_is_better=False)
    if out is not None and out["interval"][0] <= 1 + SAME_UTIL and \
            out["interval"][1] >= 1 / (1 + SAME_UTIL):
        out["change"] = "not distinguishable"
    return out


def measured(doc: BenchResult, disk_bytes: float) -> dict[str, Any]:
    r = doc["runs"][0]
    first = [x["warmup_s"] for x in r["rounds"] if "warmup_s" in x]
    return {"samples_per_s": r["samples_per_s"], "cpu_s_per_sample": r["cpu_s_per_sample"],
            "bytes_per_sample": r["bytes_per_sample"], "files_per_sample": r["files_per_sample"],
            "requests_per_sample": r.get("requests_per_sample"),
            "peak_memory_bytes": r.get("peak_pss_anon_bytes", r["peak_pss_bytes"]),
            "first_batch_s": stats.median(first) if first else None,
            "disk_bytes_per_sample": disk_bytes,
            # Counted by the exact pass (None where it did not run): beside the timed CPU.
            "instructions_per_sample": doc.get("exact", {}).get("instructions_per_sample")}


def exact_change(base: BenchResult, doc: BenchResult) -> dict[str, Any] | None:
    """The candidate's instructions per sample against the baseline's: a ratio of counts, with
    no interval (analysis.instructions), or None where they were not both counted alike."""
    if instructions.why_not(base, doc, paired=True) is not None:
        return None
    m = instructions.metric(base, doc)
    return {"ratio": m["ratio"], "change": m["change"], "exact": True}


def at_target(c: Candidate, export_samples: int, cluster: ClusterSpec) -> dict[str, Any]:
    """What the candidate's shard size means for the full export on the cluster."""
    workers = cluster.ranks * cluster.workers_per_gpu
    if c.shard_bytes is None:
        return {"shards": None, "loader_workers": workers, "shards_per_worker": None}
    shards = math.ceil(export_samples / c.spec.shard_samples)
    return {"shards": shards, "loader_workers": workers, "shards_per_worker": shards / workers}


def full_size(doc: BenchResult, c: Candidate) -> BenchResult:
    """`doc` as the model is to see it: files and requests per sample of the candidate's
    full-size shards. The sample holds fewer samples per shard than the definition (all of a
    1000-sample sample in one 64 MB shard of 656, say), so its counts per sample overstate
    what a shard costs at full size: each is scaled by samples per shard in the sample over
    the definition's (requests per shard as counted, over more samples)."""
    samples = c.spec.samples  # written: documents where a stream's samples are blocks
    if c.shard_bytes is None or samples < 1:
        return doc
    in_sample = samples / math.ceil(samples / c.spec.shard_samples)
    scale = in_sample / c.spec.shard_samples
    if scale >= 1.0:
        return doc
    out: Any = copy.deepcopy(doc)
    for where in (out["runs"][0], out["export"]):
        if isinstance(where.get("files_per_sample"), int | float):
            where["files_per_sample"] *= scale
    requests = out.get("requests")
    if isinstance(requests, dict) and isinstance(requests.get("requests_per_sample"),
                                                 int | float):
        requests["requests_per_sample"] *= scale
    return out


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which (CPU per sample, bytes per sample) points no other point beats on both."""
    return [not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points) for p in points]


def rows(cands: Sequence[Candidate], docs: Sequence[BenchResult], disk: Sequence[float],
         cluster: ClusterSpec, export_samples: int) -> list[dict[str, Any]]:
    """The baseline's row then each candidate's: measured, against the baseline, predicted."""
    base = docs[0]
    level = level_for(len(cands))
    base_utils = round_utils(base, cluster)
    out: list[dict[str, Any]] = [{
        "name": "baseline", "what": "the export as it is", "baseline": True,
        "layout": base["export"].get("layout"), "measured": measured(base, disk[0]),
        "predicted": predict(base, cluster), "vs_baseline": None, "at_target": None,
        "definition": None}]
    for c, doc, d in zip(cands, docs[1:], disk[1:], strict=True):
        keep = kept_pairs(base, doc)
        modelled = full_size(doc, c)
        cpu = ratio(base, doc, "cpu_s_per_sample", level, keep)
        rate = ratio(base, doc, "samples_per_s", level, keep)
        out.append({"name": c.name, "what": c.spec.description, "baseline": False,
                    "layout": c.spec.layout, "encoding": c.encoding,
                    "shard_bytes": c.shard_bytes,
                    "shard_samples": c.spec.shard_samples if c.shard_bytes else None,
                    "measured": measured(doc, d), "predicted": predict(modelled, cluster),
                    "vs_baseline": {
                        "cpu_s_per_sample": _interval(cpu, lower_is_better=True),
                        "samples_per_s": _interval(rate, lower_is_better=False),
                        "gpu_util": _util_ratio(base_utils, round_utils(modelled, cluster),
                                                keep, level),
                        "instructions_per_sample": exact_change(base, doc)},
                    "at_target": at_target(c, export_samples, cluster),
                    "definition": c.spec.to_dict()})
    front = pareto([(r["measured"]["cpu_s_per_sample"], r["measured"]["bytes_per_sample"])
                    for r in out])
    for r, on in zip(out, front, strict=True):
        r["pareto"] = on
    return out


def _change(row: dict[str, Any], key: str) -> str:
    iv = row["vs_baseline"][key]
    return "not distinguishable" if iv is None else str(iv["change"])


def why_not(row: dict[str, Any], unit: str = "sample") -> str | None:
    """Why a candidate is not recommended; None when it may be. `unit`: what the figures are
    per (a packed job's are per sequence, advise.sequences)."""
    cpu, util = _change(row, "cpu_s_per_sample"), _change(row, "gpu_util")
    if "worse" in (cpu, util):
        return f"CPU per {unit} higher" if cpu == "worse" else "predicted GPU utilization lower"
    if "better" not in (cpu, util):
        return f"neither CPU per {unit} nor predicted GPU utilization distinguishably better"
    return None


def few_shards(row: dict[str, Any]) -> str | None:
    """Why the full export in this candidate's shards leaves loader workers idle; None when
    each worker has at least one shard."""
    t = row["at_target"]
    if not t or t["shards_per_worker"] is None or t["shards_per_worker"] >= 1:
        return None
    return (f"the full export makes {fmt.plural(t['shards'], 'shard')} of this size for "
            f"{t['loader_workers']} loader workers: {t['loader_workers'] - t['shards']} would "
            "have none; try smaller shards (--shard-sizes) or state the size of the export "
            "the job trains on (--export-samples)")


def recommend(table: list[dict[str, Any]], unit: str = "sample") -> dict[str, Any]:
    """The recommendation, with its reason in words, or why there is none."""
    for r in table[1:]:
        r["why_not"] = why_not(r, unit)
    ok = [r for r in table[1:] if r["why_not"] is None]
    if not ok:
        return {"winner": None, "warning": None, "ties": [],
                "text": "no candidate is distinguishably better than the current export: "
                        "keep it"}
    # Enough shards for every loader worker first: the measured figures of a candidate that
    # leaves workers idle do not hold on the cluster.
    best = max(ok, key=lambda r: (few_shards(r) is None, round(r["predicted"]["gpu_util"], 3),
                                  -r["measured"]["cpu_s_per_sample"]))
    ties = [r["name"] for r in ok if r is not best and _overlap(r, best)]
    text = reason(table[0], best, unit)
    if ties:
        text += f"; as good within the intervals: {', '.join(ties)}"
    return {"winner": best["name"], "warning": few_shards(best), "ties": ties, "text": text}


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two candidates cannot be told apart: their CPU intervals against the baseline
    overlap, and so do their predicted utilizations' (a conservative test of their own
    difference), with shards enough for the cluster alike."""
    def meets(key: str) -> bool:
        x, y = a["vs_baseline"][key], b["vs_baseline"][key]
        if x is None or y is None:
            return x is y
        return x["interval"][0] <= y["interval"][1] and y["interval"][0] <= x["interval"][1]
    return meets("cpu_s_per_sample") and meets("gpu_util") and \
        (few_shards(a) is None) == (few_shards(b) is None)


def _pct(iv: dict[str, Any], unit: str) -> str:
    lo, hi = iv["interval"]
    return (f"{fmt.percent(1 - iv['ratio'])} less CPU per {unit} (interval "
            f"{fmt.percent(1 - hi)} to {fmt.percent(1 - lo)})")


def _files(per_sample: float, unit: str = "sample") -> str:
    """0.002 -> '1 file per 500 samples'; 2.0 -> '2 files per sample'."""
    if per_sample <= 0:
        return "no files"
    if per_sample < 1:
        n = 1 / per_sample
        return f"1 file per {round(n) if abs(n - round(n)) < 0.05 else fmt.sig(n)} {unit}s"
    return f"{fmt.plural(per_sample, 'file')} per {unit}"


def exact_text(x: dict[str, Any], unit: str = "sample") -> str:
    """A change of CPU instructions per sample, counted: no interval, 'the same' within the
    count's tolerance (analysis.instructions)."""
    r = x["ratio"]
    if x["change"] == "not distinguishable" or r is None:
        return f"the same CPU instructions per {unit} (exact)"
    more = "more" if r > 1 else "fewer"
    return f"{fmt.percent(abs(r - 1))} {more} CPU instructions per {unit} (exact)"


def reason(base: dict[str, Any], best: dict[str, Any], unit: str = "sample") -> str:
    mb, mc = base["measured"], best["measured"]
    cpu = best["vs_baseline"]["cpu_s_per_sample"]
    exact = best["vs_baseline"].get("instructions_per_sample")
    # The count first where there is one: it tells a change from noise; the time estimates it.
    parts = [exact_text(exact, unit)] if exact else []
    parts.append(_pct(cpu, unit) if cpu and cpu["change"] == "better" else
                 f"CPU per {unit} not distinguishable from the current export's")
    b0, b1 = mb["bytes_per_sample"], mc["bytes_per_sample"]
    parts.append("same bytes" if b1 == b0 else
                 f"{fmt.nbytes(b1, unit)} read against {fmt.nbytes(b0, unit)}")
    if mc["files_per_sample"] > 0:
        parts.append(f"{_files(mc['files_per_sample'], unit)} against "
                     f"{_files(mb['files_per_sample'], unit)}")
    pu, bu = best["predicted"]["gpu_util"], base["predicted"]["gpu_util"]
    util = f"predicted {fmt.percent(pu)} GPU utilization against {fmt.percent(bu)}"
    if few_shards(best):
        # The model gives every loader worker data to read; with too few shards some have none.
        util += " if every loader worker had a shard"
    iv = best["vs_baseline"]["gpu_util"]
    if iv and iv["change"] != "not distinguishable":
        util += f" ({iv['ratio']:.2f}x, interval {iv['interval'][0]:.2f}x to " \
                f"{iv['interval'][1]:.2f}x)"
    elif iv:
        util += " (not distinguishable)"
    parts.append(util)
    return f"roll out {best['name']}: " + ", ".join(parts)
