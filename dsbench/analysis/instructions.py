"""Exact CPU in a comparison: the two sides' instructions per sample, as a ratio with no interval.

Instructions are counted (loader/exact.py), not timed: the same export gives the same count
whatever the machine's load, so two counts are compared as counts are, by their ratio, and a
change is real when they differ. By more than TOLERANCE, that is: a count moves with where
things lie in memory (the export's path, the size of the environment shift buffers, and code
that copies them takes other paths by their alignment), measured here by at most 0.01% between
copies of one export at other paths and runs from other directories. Within it, "the same".

Counts are compared only when they were made alike: the same counter (name, version, options),
the same number of samples, and, for results measured apart, the same Python and libraries,
whose code is what executes (the CPU model is one of the comparison's own must-match keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsbench import fmt
from dsbench.results.stages import STAGES
from dsbench.results.types import BenchResult

TOLERANCE = 1e-3  # relative; ten times the largest difference measured between alike counts
KEY = "instructions_per_sample"
LABEL = "CPU instructions per sample"


def why_not(base: BenchResult, cand: BenchResult, paired: bool) -> str | None:
    """Why the sides' instructions cannot be compared; None when they can."""
    a: Mapping[str, Any] = base.get("exact") or {}
    b: Mapping[str, Any] = cand.get("exact") or {}
    for name, x in (("the base", a), ("the candidate", b)):
        if not x:
            return f"{name} was measured by a dsbench without the exact pass"
        if not x.get("counted"):
            return f"{name}'s instructions were not counted: {x.get('why_not')}"
    if a.get("counter") != b.get("counter"):
        return "counted by different counters or options"
    if a.get("samples") != b.get("samples"):
        return f"counted over different numbers of samples ({a.get('samples')} vs " \
               f"{b.get('samples')}: --exact-samples)"
    if not paired:
        for key in ("python", "libraries"):
            if base["machine"].get(key) != cand["machine"].get(key):
                return f"measured apart with different {key} (the code that executes)"
    return None


def section(base: BenchResult, cand: BenchResult, paired: bool) -> dict[str, Any]:
    """The comparison's `exact` section: whether CPU was compared exactly, and why not."""
    reason = why_not(base, cand, paired)
    exact: Mapping[str, Any] = base.get("exact") or {}
    counter = exact.get("counter")
    return {"compared": reason is None, "why_not": reason,
            "counter": counter if reason is None else None, "tolerance": TOLERANCE}


def _figure(doc: BenchResult, key: str) -> float:
    exact: Mapping[str, Any] = doc.get("exact") or {}
    return float(exact.get(key) or 0.0)


def _differ(a: float, b: float, total: float) -> bool:
    return abs(b - a) > TOLERANCE * total


def metric(base: BenchResult, cand: BenchResult) -> dict[str, Any]:
    """The exact row of the metric table (compare.metric_row's shape)."""
    a, b = _figure(base, KEY), _figure(cand, KEY)
    ratio = b / a if a > 0 else None
    moved = _differ(a, b, max(a, b))
    change = "not distinguishable" if not moved else ("worse" if b > a else "better")
    return {"metric": KEY, "label": LABEL, "base": a, "cand": b, "higher_is_better": False,
            "counted": True, "exact": True, "ratio_ci95": None, "ratio": ratio,
            "significant": moved, "change": change, "notes": []}


def stage_rows(base: BenchResult, cand: BenchResult) -> list[dict[str, Any]]:
    """Where the instructions moved, stage by stage (compare.stage_rows' shape, counted)."""
    sa: Mapping[str, float] = base["exact"].get("stages") or {}
    sb: Mapping[str, float] = cand["exact"].get("stages") or {}
    total = max(_figure(base, KEY), _figure(cand, KEY))
    rows = []
    for stage in STAGES:
        a, b = float(sa.get(stage, 0.0)), float(sb.get(stage, 0.0))
        delta = b - a
        sign = "+" if delta >= 0 else "-"
        rows.append({"what": f"{stage} instructions", "unit": "instructions/sample",
                     "base": a, "cand": b, "delta": delta, "delta_ci": None, "level": None,
                     "counted": True, "distinguishable": _differ(a, b, total),
                     "text": f"{stage} {sign}{fmt.instructions(abs(delta))} (exact)"})
    return rows
