"""Compare two bench results: ratios, significance, where the CPU went, and what a cluster pays.

Two results are only compared when they were measured alike: on the same kind of machine and
with the same loader options. Otherwise the comparison says "not comparable" and why, instead of
printing a ratio that would mislead (pyperf's rule for must-match metadata).

Significance of the noisy figures (samples/s, CPU per sample, PSS) comes from the rounds: a
percentile bootstrap of the ratio of medians, resampling each side's rounds independently; the
difference is significant when that 95% interval excludes 1. Bytes and files per sample are
counts, repeatable to the byte, so any difference beyond rounding is real.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench import fmt
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import Progress, run_benches
from dsbench.model.cluster import extrapolate
from dsbench.model.node import ClusterSpec
from dsbench.results.document import STAGES, read_result, write_result

# Machine and config keys that must be equal for two results to be compared as ratios.
MACHINE_MUST_MATCH = ("cpu_model", "usable_cores")
CONFIG_MUST_MATCH = ("batch_size", "decoder", "normalize", "backend", "step_time_s", "cold",
                     "prefetch")
BOOTSTRAP_RESAMPLES = 4000
EXACT_TOLERANCE = 1e-9  # relative; counts differ by at least one file or byte per export


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    exact: bool  # a repeatable count rather than a noisy timing
    round_key: str | None  # where each round's value lives, for the bootstrap


METRICS = (
    Metric("samples_per_s", "samples/s", True, False, "samples_per_s"),
    Metric("cpu_s_per_sample", "CPU per sample", False, False, "cpu_s_per_sample"),
    Metric("bytes_per_sample", "bytes read per sample", False, True, None),
    Metric("files_per_sample", "files opened per sample", False, True, None),
    Metric("peak_pss_bytes", "peak memory (PSS)", False, False, "peak_pss_bytes"),
)


def format_value(key: str, value: float) -> str:
    if key == "samples_per_s":
        return fmt.rate(value)
    if key == "cpu_s_per_sample":
        return fmt.seconds(value, "sample")
    if key == "bytes_per_sample":
        return fmt.nbytes(value, "sample")
    if key == "files_per_sample":
        return f"{fmt.sig(value)} files/sample"
    if key == "peak_pss_bytes":
        return fmt.nbytes(value)
    return fmt.sig(value)


def not_comparable(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """Why two results must not be compared as ratios; empty when they may."""
    reasons = []
    for key in MACHINE_MUST_MATCH:
        a, b = base["machine"].get(key), cand["machine"].get(key)
        if a != b:
            reasons.append(f"machine {key} differs: {a!r} vs {b!r}")
    for key in CONFIG_MUST_MATCH:
        a, b = base["config"].get(key), cand["config"].get(key)
        if a != b:
            reasons.append(f"bench option {key} differs: {a!r} vs {b!r}")
    if not common_workers(base, cand):
        reasons.append("no worker count was measured on both sides")
    return reasons


def common_workers(base: dict[str, Any], cand: dict[str, Any]) -> list[int]:
    a = {r["workers"] for r in base["runs"]}
    return sorted(a & {r["workers"] for r in cand["runs"]})


def run_for(doc: dict[str, Any], workers: int) -> dict[str, Any]:
    return next(r for r in doc["runs"] if r["workers"] == workers)


def ratio_ci(base: Sequence[float], cand: Sequence[float], rng: np.random.Generator,
             resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of median(cand) / median(base); None under 2 rounds."""
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.size < 2 or c.size < 2 or np.any(b <= 0):
        return None
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    mc = np.median(c[rng.integers(0, c.size, (resamples, c.size))], axis=1)
    lo, hi = np.percentile(mc / mb, [2.5, 97.5])
    return float(lo), float(hi)


def metric_row(m: Metric, rb: dict[str, Any], rc: dict[str, Any], rng: np.random.Generator
               ) -> dict[str, Any]:
    a, b = float(rb[m.key]), float(rc[m.key])
    ratio = b / a if a > 0 else (1.0 if b == 0 else float("inf"))
    ci = None
    if m.exact:
        significant = abs(b - a) > EXACT_TOLERANCE * max(abs(a), abs(b), 1e-300)
    else:
        ci = ratio_ci([r[m.round_key] for r in rb["rounds"] if m.round_key in r],
                      [r[m.round_key] for r in rc["rounds"] if m.round_key in r], rng)
        significant = ci is not None and (ci[0] > 1.0 or ci[1] < 1.0)
    if not significant:
        change = "same"
    elif (ratio > 1.0) == m.higher_is_better:
        change = "better"
    else:
        change = "worse"
    return {"metric": m.key, "label": m.label, "base": a, "cand": b, "ratio": ratio,
            "ratio_ci95": list(ci) if ci else None, "significant": significant,
            "change": change, "higher_is_better": m.higher_is_better, "exact": m.exact}


def attribution(rb: dict[str, Any], rc: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the per-sample cost moved: CPU by stage, then files and bytes, largest first."""
    rows = []
    for stage in STAGES:
        a, b = rb["stages"].get(stage, 0.0), rc["stages"].get(stage, 0.0)
        rows.append({"what": stage, "unit": "s/sample", "base": a, "cand": b, "delta": b - a,
                     "text": f"{stage} {'+' if b >= a else '-'}{fmt.seconds(abs(b - a))}/sample"})
    rows.sort(key=lambda r: -abs(r["delta"]))
    fa, fc = rb["files_per_sample"], rc["files_per_sample"]
    rows.append({"what": "files opened", "unit": "files/sample", "base": fa, "cand": fc,
                 "delta": fc - fa,
                 "text": f"files opened {'+' if fc >= fa else '-'}{fmt.sig(abs(fc - fa))} "
                         f"per sample"})
    ba, bc = rb["bytes_per_sample"], rc["bytes_per_sample"]
    rows.append({"what": "bytes read", "unit": "B/sample", "base": ba, "cand": bc,
                 "delta": bc - ba,
                 "text": f"bytes read {'+' if bc >= ba else '-'}{fmt.nbytes(abs(bc - ba))} "
                         f"per sample"})
    return rows


def compare(base: dict[str, Any], cand: dict[str, Any], *, seed: int = 0,
            cluster: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The comparison as plain data. `cluster` holds extrapolations of each side, if made."""
    reasons = not_comparable(base, cand)
    out: dict[str, Any] = {
        "kind": "dsbench-comparison", "schema_version": 1,
        "base": {"path": base["config"]["path"], "layout": base["export"].get("layout")},
        "cand": {"path": cand["config"]["path"], "layout": cand["export"].get("layout")},
        "comparable": not reasons, "not_comparable_reasons": reasons, "runs": [],
        "cluster": cluster,
    }
    if reasons:
        return out
    rng = np.random.default_rng(seed)
    for w in common_workers(base, cand):
        rb, rc = run_for(base, w), run_for(cand, w)
        out["runs"].append({"workers": w,
                            "metrics": [metric_row(m, rb, rc, rng) for m in METRICS],
                            "attribution": attribution(rb, rc)})
    return out


def is_result_file(path: str) -> bool:
    """A side given as a `.json` file is a saved result; anything else is an export to measure."""
    return path.endswith(".json")


def load_or_measure(paths: Sequence[str], opts: BenchOptions, progress: Progress | None = None
                    ) -> list[dict[str, Any]]:
    """Each side's result: read from its file, or measured, all exports in one interleaved run."""
    docs: dict[int, dict[str, Any]] = {i: read_result(p) for i, p in enumerate(paths)
                                       if is_result_file(p)}
    to_measure = [i for i in range(len(paths)) if i not in docs]
    if to_measure:
        measured = run_benches([paths[i] for i in to_measure], opts, progress)
        docs.update(zip(to_measure, measured, strict=True))
    return [docs[i] for i in range(len(paths))]


def cluster_predictions(base: dict[str, Any], cand: dict[str, Any], cluster: ClusterSpec,
                        seed: int = 0, steps: int = 5000) -> dict[str, dict[str, Any]]:
    """Extrapolate both sides to the same ClusterSpec with the same seed: only the loader differs.

    The scaling table is cut to 64 and 128 ranks, the two job sizes of the incident.
    """
    return {side: extrapolate(doc, cluster, np.random.default_rng(seed), steps=steps,
                              scaling=(64, 128))
            for side, doc in (("base", base), ("cand", cand))}


def compare_sides(paths: Sequence[str], opts: BenchOptions, *,
                  save: Sequence[str] | None = None, progress: Progress | None = None,
                  cluster: Callable[[int], ClusterSpec] | None = None) -> dict[str, Any]:
    """Load or measure both sides (saving their results when asked) and compare them; when
    `cluster` is given and they are comparable, predict both on the cluster it builds from
    the measured batch size."""
    base, cand = load_or_measure(paths, opts, progress)
    for path, doc in zip(save or (), (base, cand), strict=False):
        write_result(path, doc)
        if progress:
            progress(f"wrote {path}")
    comparison = compare(base, cand)
    if cluster is not None and comparison["comparable"]:
        spec = cluster(base["runs"][0]["batch_size"])
        comparison["cluster"] = cluster_predictions(base, cand, spec)
    return comparison
