"""The measured half of the demo's verdict, in the order of how much each figure can be trusted.

Counts come first: files and bytes per sample, counted over whole exports, and CPU instructions
per sample, counted under valgrind where it is installed, are the same on every run and need no
interval. Then CPU per sample and throughput, each with its 95% interval from the interleaved
rounds; a ratio whose interval holds 1 is said to be not distinguishable ("can't tell yet: run
longer"), never printed as a finding.
"""

from __future__ import annotations

from typing import Any

from dsbench import fmt, stats
from dsbench.analysis.compare import SAME, UNKNOWN, format_value
from dsbench.report.comparison import change_of
from dsbench.report.demo import EXPORTS

RUN_LONGER = "run longer (--rounds, --seconds) or on a quieter machine"


def first_run(comparison: dict[str, Any]) -> dict[str, Any] | None:
    """The fewest workers measured on both sides (None when the two were not comparable).

    On a small machine more workers compete with the main process for its cores, and the
    model's per-sample cost comes from this run too.
    """
    return comparison["runs"][0] if comparison["comparable"] and comparison["runs"] else None


def metric(run: dict[str, Any], key: str) -> dict[str, Any]:
    return next(m for m in run["metrics"] if m["metric"] == key)


def base_run(doc: dict[str, Any]) -> dict[str, Any]:
    return min(doc["runs"], key=lambda r: r["workers"])


def workers_text(n: int) -> str:
    return f"{n} loader worker{'s' if n != 1 else ''}"


# Two tables that fit a 100-character line: the timings per export and worker count, then the
# counts, which are the export's whatever the worker count.
MEASURED_HEADERS = ["export", "loader workers", "throughput", "95% CI", "CPU per sample"]
COUNT_HEADERS = ["export", "files opened", "bytes read", "counted over"]
NOISY = "*"


def measured_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The timings, per export and worker count, for the terminal and the report; an interval
    of noisy rounds is marked (noisy_note says how noisy)."""
    rows = []
    for name in EXPORTS:
        res = doc["results"][name]
        for r in sorted(res["runs"], key=lambda r: r["workers"]):
            lo, hi = r["samples_per_s_ci95"]
            mark = NOISY if r["samples_per_s_spread"] > stats.SPREAD_WARNING else ""
            rows.append([f"{name} ({res['export']['layout']})", workers_text(r["workers"]),
                         fmt.rate(r["samples_per_s"]), f"{fmt.sig(lo)} to {fmt.rate(hi)}{mark}",
                         fmt.seconds(r["cpu_s_per_sample"], "sample")])
    return rows


def noisy_note(doc: dict[str, Any]) -> str | None:
    """What the table's mark means, and each marked run's spread."""
    noisy = [f"{name} with {workers_text(r['workers'])} {fmt.percent(r['samples_per_s_spread'])}"
             for name in EXPORTS for r in sorted(doc["results"][name]["runs"],
                                                 key=lambda r: r["workers"])
             if r["samples_per_s_spread"] > stats.SPREAD_WARNING]
    if not noisy:
        return None
    return (f"{NOISY} noisy: the rounds vary by more than {fmt.percent(stats.SPREAD_WARNING)} "
            f"(IQR/median): {', '.join(noisy)}")


def count_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Files and bytes per sample, per export: the same at every worker count."""
    rows = []
    for name in EXPORTS:
        res = doc["results"][name]
        r, c = base_run(res), res.get("counts") or {}
        units, read = c.get("units"), c.get("units_read")
        over = ("every unit" if units is not None and read == units
                else f"{read} of {units} units" if units is not None else "the rounds' reads")
        rows.append([f"{name} ({res['export']['layout']})",
                     f"{fmt.sig(r['files_per_sample'])} files/sample",
                     fmt.nbytes(r["bytes_per_sample"], "sample"), over])
    return rows


def counts_text(comparison: dict[str, Any], base: str, cand: str) -> str:
    """Files and bytes per sample, the figures that need no interval."""
    run = first_run(comparison)
    if run is None:
        return "not comparable"
    parts = []
    shown = {m["metric"] for m in run["metrics"]}
    for key, verb in (("files_per_sample", "opens"), ("bytes_per_sample", "reads"),
                      ("requests_per_sample", "makes")):
        if key not in shown:  # requests: only an export in an object store makes any
            continue
        m = metric(run, key)
        if m["base"] <= 0:  # no ratio to give: say whether the candidate has any
            change = "the same" if m["cand"] <= 0 else f"{base} had none"
        else:
            change = "the same" if m["change"] == SAME else change_of(m).factor()
        parts.append(f"{verb} {format_value(key, m['cand'])} ({base}: "
                     f"{format_value(key, m['base'])}, {change})")
    m = metric(run, "files_per_sample")
    how = ("exact: counted over every unit of both exports" if m["exact"] else
           "counted over whole units" if m["counted"] else
           "window estimates of schema 1 results, with no interval")
    listed = ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{cand} {listed} [{how}]"


def exact_text(comparison: dict[str, Any], base: str, cand: str) -> str | None:
    """CPU instructions per sample, counted (analysis.instructions): the exact figure, and the
    stages whose count moved; why not where they were not counted; None for a comparison
    from before the exact pass."""
    x = comparison.get("exact")
    run = first_run(comparison)
    if x is None or run is None:
        return None
    if not x["compared"]:
        return f"not counted exactly: {x['why_not']}"
    m = metric(run, "instructions_per_sample")
    change = "the same" if m["change"] == SAME else change_of(m).factor()
    c = x["counter"]
    moved = [r["text"].removesuffix(" (exact)") for r in run["attribution"]
             if r["unit"] == "instructions/sample" and r["distinguishable"]]
    return (f"{cand} {format_value(m['metric'], m['cand'])} vs {base} "
            f"{format_value(m['metric'], m['base'])}: {change} [exact: counted by {c['name']} "
            f"{c['version']}, the same on every run]"
            + (f"; by stage: {', '.join(moved)}" if moved else ""))


def cpu_text(comparison: dict[str, Any], base: str, cand: str,
             key: str = "cpu_s_per_sample") -> str:
    """A per-sample cost of `cand` against `base` (the loader's CPU, or the host's), with its
    interval, or "not distinguishable" when the interval holds 1."""
    run = first_run(comparison)
    if run is None:
        return "not comparable"
    m = metric(run, key)
    figures = (f"{cand} {format_value(m['metric'], m['cand'])} vs {base} "
               f"{format_value(m['metric'], m['base'])} with {workers_text(run['workers'])}")
    return f"{figures}: {change_of(m).words()}"


def speed_text(comparison: dict[str, Any], base: str, cand: str) -> str:
    run = first_run(comparison)
    if run is None:
        return (f"{cand} and {base} were not measured alike, so no ratio: "
                + "; ".join(comparison["not_comparable_reasons"]))
    m, w = metric(run, "samples_per_s"), run["workers"]
    figures = f"{fmt.rate(m['cand'])} vs {fmt.rate(m['base'])} with {workers_text(w)}"
    head, detail = change_of(m).parts()
    if m["change"] == UNKNOWN:
        return (f"can't tell whether {cand} is slower or faster than {base} ({figures}; "
                f"{detail}): {RUN_LONGER}")
    if m["change"] == SAME:
        return (f"can't tell whether {cand} is slower or faster than {base} ({figures}; "
                f"{head}: {detail}): {RUN_LONGER}")
    return f"{cand} is {head} than {base} ({figures}; {detail})"


def cpu_moves_text(comparison: dict[str, Any]) -> str:
    run = first_run(comparison)
    if run is None:
        return "not comparable"
    stages = [r for r in run["attribution"] if r["unit"] == "s/sample"]
    moved = [r["text"] for r in stages if r["distinguishable"]]
    unclear = [r["what"] for r in stages if not r["distinguishable"]]
    if not moved:
        return "no stage changed beyond noise (intervals: 99% each, 95% for the five together)"
    return ", ".join(moved) + (f"; not distinguishable: {', '.join(unclear)}" if unclear else "")
