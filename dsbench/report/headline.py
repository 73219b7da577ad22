"""The demo verdict's first three lines: what changed, what it costs the job, what to do.

A reader at 3 a.m. gets the answer before the figures that back it; each line is a short form
of a line the verdict gives in full below it, with its interval or its model's assumptions.
"""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.analysis.compare import SAME, UNKNOWN
from dsbench.report.comparison import change_of
from dsbench.report.measured import first_run, metric


def headline(doc: dict[str, Any], steps: list[str]) -> list[str]:
    """Three lines before the details: what changed, what it costs the job, what to do (the
    first of `steps`, the verdict's advice)."""
    comp, cl, spec = doc["comparisons"]["after"], doc["cluster"], doc["cluster_spec"]
    run = first_run(comp)
    if run is None:
        changed = "after and before were not measured alike: no ratio (below)"
    else:
        files, cpu = metric(run, "files_per_sample"), metric(run, "cpu_s_per_sample")
        if files["base"] <= 0:  # no ratio: whether after opens any
            opens = "as many files" if files["cand"] <= 0 else "files where before opened none"
        else:
            opens = ("as many files" if files["change"] == SAME
                     else f"{change_of(files).factor()} files")
        x = next((m for m in run["metrics"] if m["metric"] == "instructions_per_sample"), None)
        if x is not None and (comp.get("exact") or {}).get("compared"):
            spent = ("runs as many instructions" if x["change"] == SAME
                     else f"runs {change_of(x).factor()} instructions")
            changed = f"after opens {opens} and {spent} per sample (exact)"
        elif cpu["change"] in (SAME, UNKNOWN) or cpu["ratio_ci95"] is None:
            changed = f"after opens {opens} per sample; its CPU time is not distinguishable"
        else:
            changed = f"after opens {opens} and takes {change_of(cpu).factor()} CPU time per sample"
    ranks = spec["nodes"] * spec["gpus_per_node"]
    costs = (f"{ranks} GPUs would run at {fmt.percent(cl['after']['gpu_util'])} GPU utilization "
             f"against before's {fmt.percent(cl['before']['gpu_util'])} (a model)")
    todo = steps[0].split(": ", 1)[0] if steps else "nothing: after holds up against before"
    return ["In short", f"  what changed: {changed}", f"  what it costs: {costs}",
            f"  what to do: {todo} (details below)", ""]
