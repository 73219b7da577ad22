"""Compare two bench results: ratios with intervals, and where the per-sample cost moved.

Two results are only compared when they were measured alike: on the same kind of machine and
with the same loader options. Otherwise the comparison says "not comparable" and why, instead of
printing a ratio that would mislead (pyperf's rule for must-match metadata).

Counts (files and bytes per sample) are counted over whole units of each export
(dsbench.loader.counts): the same export always gives the same count, so any difference is
real. Timings (samples/s, CPU per sample, peak memory) vary from round to round; their ratio
gets a 95% interval from the rounds (dsbench.stats): a paired t on per-round log ratios when
both sides were measured in one interleaved run (`run_id` alike), Welch's t otherwise. A ratio
whose interval holds 1 is "not distinguishable" from no change, whatever its point estimate.
Stage deltas get intervals that hold for all five stages at once (99% each).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsbench import fmt, stats
from dsbench.analysis import instructions
from dsbench.analysis.disturbance import TIMED, disturbance
from dsbench.loader.order import order_label
from dsbench.loader.packing import unlike_samples
from dsbench.results.stages import STAGES
from dsbench.results.types import BenchResult, Run

# Machine and config keys that must be equal for two results to be compared as ratios.
MACHINE_MUST_MATCH = ("cpu_model", "usable_cores")
# The reader (backend) may differ: one export read two ways ("our reader or theirs?") is a
# question the comparison names and the gate refuses (gate.py). The training sample must be
# alike: ids per sequence, a clip's seconds and rate (--sample-rate resamples both to one).
CONFIG_MUST_MATCH = ("batch_size", "decoder", "normalize", "step_time_s", "cold", "prefetch",
                     "epochs", "inflight", "seq_len", "pack", "clip_seconds", "sample_rate")
# What results from before an option existed ran with.
CONFIG_BEFORE: dict[str, object] = {"inflight": 1, "pack": False}
COUNT_TOLERANCE = 1e-9  # relative; counts differ by at least one file or byte per export
STAGE_LEVEL = 1 - (1 - stats.LEVEL) / len(STAGES)  # simultaneous over the stages: 0.99

SPLIT = ("peak_pss_anon_bytes", "peak_pss_file_bytes")
BETTER, WORSE, SAME, UNKNOWN = "better", "worse", "not distinguishable", "unknown"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    counted: bool  # counted over whole units, rather than timed in rounds


METRICS = (
    Metric("samples_per_s", "samples/s", True, False),
    Metric("cpu_s_per_sample", "CPU per sample", False, False),
    Metric("host_cpu_s_per_sample", "host CPU per sample", False, False),
    Metric("bytes_per_sample", "bytes read per sample", False, True),
    Metric("files_per_sample", "files opened per sample", False, True),
    Metric("requests_per_sample", "requests per sample", False, True),
    Metric("peak_pss_bytes", "peak memory (PSS)", False, False),
    # The kernel's split of PSS: what a job must hold apart from clean page cache it can drop.
    Metric("peak_pss_anon_bytes", "of it anonymous", False, False),
    Metric("peak_pss_file_bytes", "of it file-backed", False, False),
)


def format_value(key: str, value: float) -> str:
    if key == "samples_per_s":
        return fmt.rate(value)
    if key in ("cpu_s_per_sample", "host_cpu_s_per_sample"):
        return fmt.seconds(value, "sample")
    if key == "requests_per_sample":
        return f"{fmt.sig(value)} requests/sample"
    if key == "bytes_per_sample":
        return fmt.nbytes(value, "sample")
    if key == "files_per_sample":
        return f"{fmt.sig(value)} files/sample"
    if key == instructions.KEY:
        return fmt.instructions(value)
    if key.startswith("peak_pss"):
        return fmt.nbytes(value)
    return fmt.sig(value)


def order_of(doc: BenchResult) -> str:
    """The order a result was read in (`--order`), in words; results from before orders
    existed were read sequentially."""
    return order_label(doc["config"])


def not_comparable(base: BenchResult, cand: BenchResult, any_order: bool = False) -> list[str]:
    """Why two results must not be compared as ratios; empty when they may. Two orders are
    two access patterns with their own costs: compared only when asked (`any_order`)."""
    reasons = []
    if not any_order and order_of(base) != order_of(cand):
        reasons.append(f"read in different orders: {order_of(base)} vs {order_of(cand)} "
                       "(--any-order compares them)")
    for key in MACHINE_MUST_MATCH:
        a, b = base["machine"].get(key), cand["machine"].get(key)
        if a != b:
            reasons.append(f"machine {key} differs: {a!r} vs {b!r}")
    for key in CONFIG_MUST_MATCH:
        a = base["config"].get(key, CONFIG_BEFORE.get(key))
        b = cand["config"].get(key, CONFIG_BEFORE.get(key))
        if a != b:
            hint = " (--sample-rate HZ resamples both to one)" if key == "sample_rate" else ""
            reasons.append(f"bench option {key} differs: {a!r} vs {b!r}{hint}")
    if (unlike := unlike_samples(base, cand)) is not None:
        reasons.append(unlike)
    if not common_workers(base, cand):
        reasons.append("no worker count was measured on both sides")
    return reasons


def common_workers(base: BenchResult, cand: BenchResult) -> list[int]:
    a = {r["workers"] for r in base["runs"]}
    return sorted(a & {r["workers"] for r in cand["runs"]})


def run_for(doc: BenchResult, workers: int) -> Run:
    return next(r for r in doc["runs"] if r["workers"] == workers)


def is_paired(base: BenchResult, cand: BenchResult) -> bool:
    """Measured in one interleaved run, so that round i of each saw the same machine."""
    return base.get("run_id") is not None and base.get("run_id") == cand.get("run_id")


# Results measured apart whose machine load differs by this many runnable processes per core
# cannot have a timing change put down to the export: the machine changed too.
DRIFT_PER_CORE = 0.5


def load_drift(base: BenchResult, cand: BenchResult) -> dict[str, Any] | None:
    """For results measured apart: the 1-min load average each saw and whether they differ by
    DRIFT_PER_CORE or more per core (None when paired or a side did not record it)."""
    if is_paired(base, cand):
        return None
    a, b = base["machine"].get("load_avg_1m"), cand["machine"].get("load_avg_1m")
    cores = base["machine"].get("usable_cores") or 1
    if not isinstance(a, int | float) or not isinstance(b, int | float):
        return None
    return {"base": float(a), "cand": float(b), "cores": cores,
            "differs": abs(a - b) >= DRIFT_PER_CORE * cores}


def reader(doc: BenchResult) -> str:
    """Who read a side, for people: dsbench's reader (in torch's DataLoader), the format's
    library and its version, the user's step or Dataset."""
    cfg = doc["config"]
    if cfg.get("dataset"):
        return f"your dataset {cfg['dataset']}"
    lib = doc.get("reader")
    who = (f"{lib['library']} {lib['version']}" if lib else "dsbench's reader"
           + (" in torch's DataLoader" if cfg.get("backend") == "torch" else ""))
    return who + (f", your step {cfg['pipeline']}" if cfg.get("pipeline") else "")


def counts_note(doc: BenchResult) -> tuple[bool, bool]:
    """(counted over whole units, and over every unit) for a document's files and bytes."""
    counts = doc.get("counts") or {}
    return counts.get("method") == "whole units", bool(counts.get("exact"))


def _change(significant: bool | None, ratio: float | None, higher_is_better: bool) -> str:
    """None ratio: a cost where the base had none (a rise from zero)."""
    if significant is None:
        return UNKNOWN
    if not significant:
        return SAME
    rose = ratio is None or ratio > 1.0
    return BETTER if rose == higher_is_better else WORSE


def metric_row(m: Metric, base: BenchResult, cand: BenchResult, workers: int,
               paired: bool, keep: list[int] | None = None) -> dict[str, Any]:
    """One metric's change; `keep`: the pairs of rounds a timing's interval is taken over
    (None: all of them)."""
    # Figures looked up by name: as plain mappings (the keys are the metrics', not literals).
    rb: Mapping[str, Any] = run_for(base, workers)
    rc: Mapping[str, Any] = run_for(cand, workers)
    a, b = float(rb.get(m.key, 0.0)), float(rc.get(m.key, 0.0))
    row: dict[str, Any] = {"metric": m.key, "label": m.label, "base": a, "cand": b,
                           "higher_is_better": m.higher_is_better, "counted": False,
                           "exact": False, "ratio_ci95": None}
    counted_a, exact_a = counts_note(base)
    counted_b, exact_b = counts_note(cand)
    if m.counted and counted_a and counted_b:
        ratio: float | None = b / a if a > 0 else (1.0 if b == 0 else None)
        significant: bool | None = abs(b - a) > COUNT_TOLERANCE * max(abs(a), abs(b), 1e-300)
        row |= {"counted": True, "exact": exact_a and exact_b}
    else:
        # A count from a window (schema 1 results) is as noisy as a timing, with no rounds to
        # say how noisy: its change is unknown.
        xa = [r[m.key] for r in rb["rounds"] if m.key in r]
        xb = [r[m.key] for r in rc["rounds"] if m.key in r]
        dropped = keep is not None and m.key in TIMED and len(keep) < len(xa) == len(xb)
        if dropped and keep is not None:
            xa, xb = [xa[i] for i in keep], [xb[i] for i in keep]
        interval = None
        if len(xa) > 1 and xb and min(xa + xb) > 0:
            interval = stats.ratio(xa, xb, paired and len(xa) == len(xb))
        significant = interval.excludes_null if interval else None
        if dropped and xa and min(xa + xb) > 0:
            # The figures beside the ratio are of the same rounds: the undisturbed ones.
            a, b = stats.geometric_mean(xa), stats.geometric_mean(xb)
            row |= {"base": a, "cand": b,
                    "statistic": "geometric mean of the undisturbed rounds"}
        ratio = interval.estimate if interval else (b / a if a > 0 else None)
        if interval and m.key.startswith("peak_pss"):
            # A run's peak is its rounds' maximum; the ratio is of their geometric means. The
            # figures shown beside the ratio (and the gate's allowance) take the same statistic,
            # so that the figures' ratio is the ratio printed.
            row |= {"base": stats.geometric_mean(xa), "cand": stats.geometric_mean(xb),
                    "statistic": "geometric mean of the rounds' peaks"}
        row["ratio_ci95"] = interval.as_list() if interval else None
    row |= {"ratio": ratio, "significant": bool(significant),
            "change": _change(significant, ratio, m.higher_is_better),
            "notes": [] if row["counted"] else noise_notes(m.key, rb, rc)}
    return row


SPREADS = {"samples_per_s": "samples_per_s_spread", "cpu_s_per_sample": "cpu_s_per_sample_spread"}


def noise_notes(key: str, rb: Mapping[str, Any], rc: Mapping[str, Any]) -> list[str]:
    """What the runner warned about a timing on either side, in the words its verdict carries:
    rounds that vary past stats.SPREAD_WARNING, windows under stats.MIN_WINDOW_BATCHES,
    loader workers that had nothing to read."""
    notes = []
    spread = max((r.get(SPREADS[key], 0.0) for r in (rb, rc)), default=0.0) \
        if key in SPREADS else 0.0
    if spread > stats.SPREAD_WARNING:
        notes.append(f"noisy: rounds vary {fmt.percent(spread)}")
    # (older results did not record the batches; idle workers delivered none of them)
    per_worker = [x["batches"] / max(1, r["workers"] - len(r.get("idle_workers") or []))
                  for r in (rb, rc) for x in r["rounds"] if "batches" in x]
    short = min(per_worker, default=float("inf"))
    if short < stats.MIN_WINDOW_BATCHES:
        notes.append(f"short window: {fmt.plural(short, 'batch', 'batches')} per worker")
    for side, r in (("base", rb), ("candidate", rc)):
        # Workers with nothing to read: the timing is of fewer workers than the count says.
        idle = r.get("idle_workers") or []
        if idle:
            notes.append(f"{side}: {len(idle)} of {r['workers']} workers idle")
    return notes


def measured_metrics(base: BenchResult, cand: BenchResult, workers: int) -> list[Metric]:
    """The metrics both sides have: host CPU only where both measured it (older results lack
    it); requests where either export is in an object store (a local one makes none: zero)."""
    rb: Mapping[str, Any] = run_for(base, workers)
    rc: Mapping[str, Any] = run_for(cand, workers)
    out = []
    for m in METRICS:
        if m.key == "host_cpu_s_per_sample" and not (m.key in rb and m.key in rc):
            continue
        if m.key == "requests_per_sample" and not (m.key in rb or m.key in rc):
            continue
        if m.key in SPLIT and not (m.key in rb and m.key in rc):  # older results lack it
            continue
        out.append(m)
    return out


def _signed(x: float, show: str) -> str:
    return f"{'+' if x >= 0 else '-'}{show}"


def stage_rows(base: BenchResult, cand: BenchResult, workers: int, paired: bool,
               keep: list[int] | None = None) -> list[dict[str, Any]]:
    """Per stage: CPU s/sample on each side, the change, and its simultaneous interval (over
    the pairs of rounds in `keep`, None: all)."""
    rb, rc = run_for(base, workers), run_for(cand, workers)
    rows = []
    for stage in STAGES:
        a, b = rb["stages"].get(stage, 0.0), rc["stages"].get(stage, 0.0)
        xa = [r["stages"][stage] for r in rb["rounds"] if "stages" in r]
        xb = [r["stages"][stage] for r in rc["rounds"] if "stages" in r]
        whole = len(xa) == len(rb["rounds"]) and len(xb) == len(rc["rounds"])
        if keep is not None and whole and len(xa) == len(xb):
            xa, xb = [xa[i] for i in keep], [xb[i] for i in keep]
        interval = None
        if whole and len(xa) > 1:
            interval = stats.difference(xa, xb, paired and len(xa) == len(xb), STAGE_LEVEL)
        moved = interval.excludes_null if interval else None
        text = f"{stage} {_signed(b - a, fmt.seconds(abs(b - a)))}/sample"
        if interval:
            # The change's interval, signed, so that it does not read as the two sides' values.
            lo, hi = interval.lo, interval.hi
            text += (f" (interval {_signed(lo, fmt.seconds(abs(lo)))} to "
                     f"{_signed(hi, fmt.seconds(abs(hi)))})")
        rows.append({"what": stage, "unit": "s/sample", "base": a, "cand": b, "delta": b - a,
                     "delta_ci": interval.as_list() if interval else None,
                     "level": STAGE_LEVEL if interval else None, "counted": False,
                     "distinguishable": moved, "text": text})
    return rows


def count_rows(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for key, what, unit, show in (
            ("files_per_sample", "files opened", "files/sample", fmt.sig),
            ("bytes_per_sample", "bytes read", "B/sample", fmt.nbytes),
            ("requests_per_sample", "requests", "requests/sample", fmt.sig)):
        m = next((x for x in metrics if x["metric"] == key), None)
        if m is None:
            continue
        delta = m["cand"] - m["base"]
        exact = " (exact)" if m["exact"] else (" (counted)" if m["counted"] else "")
        rows.append({"what": what, "unit": unit, "base": m["base"], "cand": m["cand"],
                     "delta": delta, "delta_ci": None, "level": None, "counted": m["counted"],
                     "distinguishable": m["significant"] if m["counted"] else None,
                     "text": f"{what} {_signed(delta, show(abs(delta)))} per sample{exact}"})
    return rows


def attribution(metrics: list[dict[str, Any]], stages: list[dict[str, Any]],
                exact: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Where the per-sample cost moved, what really changed first: counts that changed (the
    `exact` instructions by stage among them), then the stages whose change the rounds can tell
    from noise (largest first), then the rest."""
    counts = count_rows(metrics) + sorted(exact or [], key=lambda r: -abs(r["delta"]))
    moved = [r for r in counts if r["distinguishable"]]
    moved += sorted((r for r in stages if r["distinguishable"]), key=lambda r: -abs(r["delta"]))
    return moved + [r for r in counts + stages if not r["distinguishable"]]


def moved_text(rows: list[dict[str, Any]]) -> str:
    """The line people read: what moved, then which stages the rounds cannot tell apart."""
    moved = [r["text"] for r in rows if r["distinguishable"]]
    unclear = [r["what"] for r in rows if r["unit"] == "s/sample" and not r["distinguishable"]]
    # A whole-sample change can be distinguishable while no stage's own (99%) interval is.
    parts = moved or ["nothing distinguishable from noise: no count, and no stage on its own "
                      "(stage intervals 99% each, 95% for the five together)"]
    if unclear and moved:
        # Beside stages' instructions, which are counted, say which figures these are.
        timed = "in CPU time " if any(r["unit"] == "instructions/sample" for r in rows) else ""
        parts.append(f"{timed}not distinguishable: {', '.join(unclear)}")
    return "; ".join(parts)


PUSHBACK = ("retries_per_sample", "throttled_per_sample", "retry_s_per_sample")


def pushback(base: BenchResult, cand: BenchResult) -> dict[str, Any] | None:
    """Each side's retries, throttle answers and the time they added, per sample, where either
    side's store pushed back in its count pass: a count of the store's load as much as of the
    export, so shown beside the table, not as an exact count in it."""
    def of(doc: BenchResult) -> dict[str, float]:
        requests: Mapping[str, Any] = doc.get("requests") or {}
        return {k: float(requests.get(k, 0.0)) for k in PUSHBACK}

    sides = {"base": of(base), "cand": of(cand)}
    return sides if any(v for side in sides.values() for v in side.values()) else None


def compare(base: BenchResult, cand: BenchResult, *,
            cluster: dict[str, dict[str, Any]] | None = None, any_order: bool = False
            ) -> dict[str, Any]:
    """The comparison as plain data. `cluster` holds extrapolations of each side, if made;
    `any_order` compares results read in different orders."""
    reasons = not_comparable(base, cand, any_order)
    paired = is_paired(base, cand)
    exact = instructions.section(base, cand, paired)
    out: dict[str, Any] = {
        "kind": "dsbench-comparison", "schema_version": 2,
        "base": {"path": base["config"]["path"], "layout": base["export"].get("layout")},
        "cand": {"path": cand["config"]["path"], "layout": cand["export"].get("layout")},
        "comparable": not reasons, "not_comparable_reasons": reasons, "paired": paired,
        "readers": {"base": reader(base), "cand": reader(cand)},
        "orders": {"base": order_of(base), "cand": order_of(cand)},
        "load_drift": load_drift(base, cand),
        "method": ("paired t on per-round log ratios (one interleaved run)" if paired else
                   "Welch t on log values (measured apart: assumes both saw the same machine)"),
        "runs": [], "cluster": cluster, "pushback": pushback(base, cand), "exact": exact,
    }
    if reasons:
        return out
    for w in common_workers(base, cand):
        disturbed = disturbance(run_for(base, w)["rounds"], run_for(cand, w)["rounds"], paired)
        keep = disturbed["kept"] if disturbed and disturbed["disturbed"] and \
            not disturbed["left_in"] else None
        metrics = [metric_row(m, base, cand, w, paired, keep)
                   for m in measured_metrics(base, cand, w)]
        exact_rows = None
        if exact["compared"]:
            # Beside the timed CPU: the count that tells a change from noise.
            at = next(i for i, m in enumerate(metrics) if m["metric"] == "cpu_s_per_sample")
            metrics.insert(at + 1, instructions.metric(base, cand))
            exact_rows = instructions.stage_rows(base, cand)
        rows = attribution(metrics, stage_rows(base, cand, w, paired, keep), exact_rows)
        out["runs"].append({"workers": w, "metrics": metrics, "attribution": rows,
                            "disturbance": disturbed,
                            "moved": moved_text(rows), "order_figures": {
                                "base": run_for(base, w).get("order_figures"),
                                "cand": run_for(cand, w).get("order_figures")}})
    return out
