"""Comparison tables for people: aligned text for terminals, GitHub markdown for CI summaries.

Marks follow asv compare's habit: `+` worse, `-` better, blank when the difference is within
noise, `x` when the two sides may not be compared at all.
"""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.analysis.compare import format_value

MARKS = {"worse": "+", "better": "-", "not distinguishable": " ", "unknown": "?"}


def factor(r: float, more: str, less: str) -> str:
    """'1.07x slower'; a change too small for three digits of a ratio as a percentage."""
    up = r >= 1
    x = r if up else 1 / r
    size = fmt.ratio(x) if fmt.ratio(x) != "1.00x" else fmt.percent(x - 1)
    return f"{size} {more if up else less}"


def _change_text(row: dict[str, Any]) -> str:
    r = row["ratio"]
    if r is None:
        return "new cost"
    if row["change"] == "unknown":
        return "unknown: needs 2+ rounds per side"
    if row["change"] == "not distinguishable":
        return "no change" if row["counted"] else "not distinguishable from noise"
    if row["metric"] == "samples_per_s":
        return factor(r, "faster", "slower")
    return factor(r, "more", "less")


def metric_rows(run: dict[str, Any]) -> list[list[str]]:
    rows = []
    for m in run["metrics"]:
        ratio = fmt.ratio(m["ratio"]) if m["ratio"] is not None else "new"
        ci = m["ratio_ci95"]
        if ci:
            ci_text = f"{fmt.ratio(ci[0])} to {fmt.ratio(ci[1])}"
        else:
            ci_text = "exact" if m["exact"] else ("counted" if m["counted"] else "-")
        rows.append([MARKS[m["change"]], m["label"], format_value(m["metric"], m["base"]),
                     format_value(m["metric"], m["cand"]), ratio, ci_text, _change_text(m)])
    return rows


HEADERS = ["", "metric", "base", "candidate", "ratio", "95% CI", "change"]


def cluster_rows(cluster: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for side in ("base", "cand"):
        e = cluster[side]
        st = e["step_time_s"]
        rows.append([side, f"{e['ranks']} GPUs", fmt.seconds(st["mean"]), fmt.seconds(st["p50"]),
                     fmt.seconds(st["p99"]), fmt.percent(e["gpu_util"]), e["verdict"]])
    return rows


CLUSTER_HEADERS = ["export", "job", "mean step", "p50 step", "p99 step", "GPU util", "verdict"]


def drift_warning(comparison: dict[str, Any]) -> str:
    """One line when results measured apart saw the machine under different load."""
    d = comparison.get("load_drift")
    if not d or not d["differs"]:
        return ""
    return (f"warning: measured apart under different load (1-min load average "
            f"{fmt.sig(d['base'])} for the base, {fmt.sig(d['cand'])} for the candidate, on "
            f"{fmt.plural(d['cores'], 'core')}): the timing ratios hold the machine's change "
            "too, and the gate only warns on them; counts are exact regardless. Measure both "
            "in one run (dsbench compare PATH PATH)")


def render(comparison: dict[str, Any], markdown: bool = False) -> str:
    """The whole comparison: header, per worker count a metric table and the attribution."""
    base, cand = comparison["base"], comparison["cand"]
    title = f"base: {base['path']} ({base['layout']})  vs  candidate: {cand['path']} " \
            f"({cand['layout']})"
    out = [f"### dsbench compare\n\n{title}\n" if markdown else title]
    out.append(f"intervals: 95%, {comparison['method']}")
    readers = comparison.get("readers") or {}
    if readers.get("base") != readers.get("cand"):
        out.append(f"read by: base {readers['base']}, candidate {readers['cand']}")
    warning = drift_warning(comparison)
    if warning:
        out.append(warning)
    if not comparison["comparable"]:
        out.append("x NOT COMPARABLE: " + "; ".join(comparison["not_comparable_reasons"]))
        return "\n".join(out)
    for run in comparison["runs"]:
        out.append(f"\n{'#### ' if markdown else ''}{fmt.plural(run['workers'], 'loader worker')}")
        out.append(fmt.table(HEADERS, metric_rows(run), markdown=markdown))
        out.append(("\nwhere the cost moved: " if markdown else "where the cost moved: ")
                   + run["moved"])
    cluster = comparison.get("cluster")
    if cluster:
        e = cluster["base"]
        out.append(f"\n{'#### ' if markdown else ''}predicted cluster "
                   f"({e['cluster']['nodes']} nodes x {e['cluster']['gpus_per_node']} GPUs, "
                   "a model, not a measurement)")
        out.append(fmt.table(CLUSTER_HEADERS, cluster_rows(cluster), markdown=markdown))
    return "\n".join(out)


def render_gate(gate: dict[str, Any], markdown: bool = False) -> str:
    icon = {"pass": "pass", "warn": "WARN", "fail": "FAIL"}
    rows = []
    for c in gate["checks"]:
        ci = c["ratio_ci95"]
        rows.append([icon[c["status"]], c["label"], format_value(c["metric"], c["base"]),
                     format_value(c["metric"], c["cand"]),
                     fmt.ratio(c["ratio"]) if c["ratio"] is not None else "new",
                     f"{fmt.ratio(ci[0])} to {fmt.ratio(ci[1])}" if ci else
                     ("exact" if c.get("exact") else "counted" if c["counted"] else "-"),
                     c["limit"], "hard" if c["hard"] else "soft"])
    verdict = "PASSED" if gate["passed"] else "FAILED"
    head = f"dsbench gate {verdict} ({fmt.plural(gate['workers'], 'loader worker')})"
    table = fmt.table(["", "check", "base", "candidate", "ratio", "95% CI", "limit", "kind"],
                      rows, markdown=markdown)
    notes = [f"{icon[c['status']]} {c['label']}: {c['why']}" for c in gate["checks"] if c["why"]]
    body = "\n".join([table, *([""] if notes and markdown else []), *notes])
    return f"### {head}\n\n{body}" if markdown else f"{head}\n{body}"
