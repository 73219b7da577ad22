"""Comparison tables for people: aligned text for terminals, GitHub markdown for CI summaries.

Marks follow asv compare's habit: `+` worse, `-` better, blank when the difference is within
noise, `x` when the two sides may not be compared at all.
"""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.analysis.compare import format_value

MARKS = {"worse": "+", "better": "-", "same": " "}


def _change_text(row: dict[str, Any]) -> str:
    r = row["ratio"]
    if row["change"] == "same":
        return "no significant change" if row["exact"] or row["ratio_ci95"] else (
            "n/a: needs 2+ rounds per side")
    if row["metric"] == "samples_per_s":
        word = "faster" if r > 1 else "slower"
        return f"{fmt.ratio(r if r > 1 else 1 / r)} {word}"
    if row["base"] == 0:
        return "new cost"
    word = "more" if r > 1 else "less"
    return f"{fmt.ratio(r if r > 1 else 1 / r)} {word}"


def metric_rows(run: dict[str, Any]) -> list[list[str]]:
    rows = []
    for m in run["metrics"]:
        ratio = fmt.ratio(m["ratio"]) if m["ratio"] != float("inf") else "inf"
        ci = m["ratio_ci95"]
        ci_text = f"[{fmt.ratio(ci[0])}, {fmt.ratio(ci[1])}]" if ci else ("exact" if m["exact"]
                                                                       else "-")
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


def render(comparison: dict[str, Any], markdown: bool = False) -> str:
    """The whole comparison: header, per worker count a metric table and the attribution."""
    base, cand = comparison["base"], comparison["cand"]
    title = f"base: {base['path']} ({base['layout']})  vs  candidate: {cand['path']} " \
            f"({cand['layout']})"
    out = [f"### dsbench compare\n\n{title}\n" if markdown else title]
    if not comparison["comparable"]:
        out.append("x NOT COMPARABLE: " + "; ".join(comparison["not_comparable_reasons"]))
        return "\n".join(out)
    for run in comparison["runs"]:
        out.append(f"\n{'#### ' if markdown else ''}{run['workers']} loader workers")
        out.append(fmt.table(HEADERS, metric_rows(run), markdown=markdown))
        moved = [a["text"] for a in run["attribution"] if a["delta"] != 0]
        out.append(("\nwhere the cost moved: " if markdown else "where the cost moved: ")
                   + ", ".join(moved[:6]))
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
    rows = [[icon[c["status"]], c["label"], format_value(c["metric"], c["base"]),
             format_value(c["metric"], c["cand"]), fmt.ratio(c["ratio"])
             if c["ratio"] != float("inf") else "inf", c["limit"],
             "hard" if c["hard"] else "soft"] for c in gate["checks"]]
    verdict = "PASSED" if gate["passed"] else "FAILED"
    head = f"dsbench gate {verdict} ({gate['workers']} loader workers)"
    table = fmt.table(["", "check", "base", "candidate", "ratio", "limit", "kind"], rows,
                      markdown=markdown)
    return (f"### {head}\n\n{table}" if markdown else f"{head}\n{table}")
