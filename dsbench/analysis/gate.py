"""The CI throughput gate: does a candidate export (or reader) hold against the base?

Hard limits apply to figures that repeat from run to run: bytes and files per sample (counted
over whole units, the same for the same export), CPU instructions per sample (counted under
valgrind where it is installed: exact, so it fails deterministically), and CPU per sample and
peak memory per loader worker, which fail only when their whole 95% interval is over the limit,
so machine noise alone cannot fail a build. The gate says whether CPU was checked exactly, and
why not where it was not. Memory is the loader's peak anonymous memory (Pss_Anon: its workers, plus
what the main process grew by) divided by its workers, or its whole PSS for results without the
kernel's split. A job pays it for every worker of every GPU of a node; the file-backed pages of
mapped shards are page cache the kernel drops, and do not count. Samples/s is wall-clock and
noisy on shared CI machines: a soft limit that warns, unless `strict_throughput`
makes it hard (and then it too fails only when its interval is past the limit).

Thresholds come from, in increasing precedence: the defaults here, a settings file's
`[tool.dsbench.gate]` (or a dsbench.toml's `[gate]`: commands/settings.py), and command-line
options.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dsbench import fmt
from dsbench.errors import DsbenchError

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Thresholds:
    max_bytes_ratio: float = 1.05
    max_files_ratio: float = 1.05
    # Instructions per sample are counted, as bytes and files are: the same export repeats its
    # count to the instruction, and within 0.01% at another path (analysis/instructions.py), so
    # the limit is only what is worth failing a build for, and a hundred times the count's
    # spread: 2% more CPU per sample is 2% more loader cores on every node of the job. Shards
    # gzipped add 3.4% to 6% (docs/exact-cpu.md), which the timed limit below, needing its
    # whole interval past 10%, never sees.
    max_instructions_ratio: float = 1.02
    max_cpu_ratio: float = 1.10
    max_memory_ratio: float = 1.50
    # Memory per worker past its ratio still passes when it grew by at most this much: the
    # demo's Arrow export takes 25 MB more per worker than its WebDataset (1.56x), not a
    # regression a job notices.
    memory_allowance_mb: float = 100.0
    min_throughput_ratio: float = 0.90
    strict_throughput: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "strict_throughput":
                if not isinstance(v, bool):
                    raise DsbenchError(f"gate threshold {f.name} must be true or false, not {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int | float) or not (
                    v >= 0 if f.name == "memory_allowance_mb" else v > 0):
                # An allowance of 0 is a ratio with no floor; a ratio of 0 means nothing.
                kind = "a number >= 0" if f.name == "memory_allowance_mb" else "a positive number"
                raise DsbenchError(f"gate threshold {f.name} must be {kind}, not {v!r}")


def load_thresholds(values: dict[str, Any], origins: dict[str, str] | None = None
                    ) -> Thresholds:
    """The defaults, with `values`' thresholds that are set (not None) over them. `origins`:
    where a value came from when not the command line (a settings file), for naming it when
    the value is bad; a value without one was an option."""
    known = [f.name for f in dataclasses.fields(Thresholds)]
    given = {k: values[k] for k in known if values.get(k) is not None}
    try:
        return Thresholds(**given)
    except DsbenchError as exc:
        name = str(exc).split()[2]
        where = (origins or {}).get(name)
        said = name.replace("_", "-")
        if where is not None:
            raise DsbenchError(str(exc).replace(f"gate threshold {name}", said, 1),
                               path=where) from None
        raise DsbenchError(str(exc).replace(f"gate threshold {name}", "--" + said, 1)) from None


def _check(metric: dict[str, Any], limit: float, hard: bool, lower_limit: bool = False,
           drifted: bool = False) -> dict[str, Any]:
    """Pass, warn or fail one figure against its limit.

    A count (whole units: the same export always gives the same count) fails a hard limit on
    its value. A timing fails a hard limit only when its whole 95% interval is past the limit:
    a ratio past the limit whose interval still crosses it is noise-compatible and
    only warns, so an export measured against itself never fails. Nor does a timing of results
    measured apart under different load (`drifted`): the machine changed as well as the export.
    """
    ratio, ci = metric["ratio"], metric["ratio_ci95"]

    def past(x: float | None) -> bool:
        if x is None:  # a cost where the base had none: past any upper limit
            return not lower_limit
        return x < limit if lower_limit else x > limit

    if metric["counted"]:
        over, cleared, why = past(ratio), past(ratio), "a count over whole units"
    elif ci is not None and drifted:
        over, cleared = past(ratio), False
        why = ("the machine changed between the sides (measured apart under different load, "
               "or other programs busier during one side's rounds): measure both in one run "
               "on a quiet machine to tell")
    elif ci is not None:
        over, cleared = past(ratio), past(ci[1] if lower_limit else ci[0])
        why = ("its 95% interval is past the limit" if cleared else
               "its 95% interval crosses the limit: more rounds can tell")
    else:
        over, cleared, why = past(ratio), False, "no interval (one round, or a schema 1 count)"
    status = PASS if not over else (FAIL if hard and cleared else WARN)
    sign = ">=" if lower_limit else "<="
    digits = 3  # as many as the limit was given with: 1.105 is not printed as 1.10
    while digits < 10 and float(fmt.sig(limit, digits)) != limit:
        digits += 1
    return {"metric": metric["metric"], "label": metric["label"], "status": status,
            "hard": hard, "ratio": ratio, "ratio_ci95": ci, "limit": f"ratio {sign} "
            f"{fmt.sig(limit, digits)}", "limit_ratio": limit, "base": metric["base"],
            "cand": metric["cand"],
            "counted": metric["counted"], "exact": bool(metric.get("exact")),
            "why": why if over else ""}


def evaluate(comparison: dict[str, Any], t: Thresholds, workers: int | None = None
             ) -> dict[str, Any]:
    """Checks of one worker count's metrics (the largest measured on both sides by default)."""
    if not comparison["comparable"]:
        raise DsbenchError("results are not comparable: "
                           + "; ".join(comparison["not_comparable_reasons"]))
    readers = comparison.get("readers") or {}
    if readers.get("base") != readers.get("cand"):
        # A gate judges a candidate export against the current one read the same way; a
        # change of reader is compare's question, not a regression of the export.
        raise DsbenchError(f"the two sides were read differently ({readers.get('base')} vs "
                           f"{readers.get('cand')}): gate exports read the same way; compare "
                           "puts two readers side by side")
    runs = {r["workers"]: r for r in comparison["runs"]}
    w = max(runs) if workers is None else workers
    if w not in runs:
        raise DsbenchError(f"--gate-workers {w} was not measured on both sides (measured: "
                           f"{', '.join(map(str, sorted(runs)))})")
    m = {x["metric"]: x for x in runs[w]["metrics"]}
    # Timings only warn where the machine changed between the sides: load drift between
    # results measured apart, or other programs busier on one side in every pair of rounds.
    disturbed = runs[w].get("disturbance") or {}
    drifted = bool((comparison.get("load_drift") or {}).get("differs")
                   or disturbed.get("steady") or disturbed.get("left_in"))
    # Anonymous memory where both sides split it: file-backed pages of mapped shards are page
    # cache the kernel drops, not memory the job must hold.
    anon = "peak_pss_anon_bytes" in m
    # Not `drifted`: the load on the machine changes how fast a loader runs, not what it holds.
    memory = _check(m["peak_pss_anon_bytes" if anon else "peak_pss_bytes"],
                    t.max_memory_ratio, hard=True)
    memory |= {"label": "peak anonymous memory per loader worker" if anon else
               "peak memory per loader worker (PSS)", "base": memory["base"] / w,
               "cand": memory["cand"] / w}
    grew = memory["cand"] - memory["base"]
    if memory["status"] != PASS and grew <= t.memory_allowance_mb * 1e6:
        memory |= {"status": PASS, "why": f"past its ratio, but {fmt.nbytes(max(grew, 0))} more "
                   f"per worker, within the {fmt.nbytes(t.memory_allowance_mb * 1e6)} allowance"}
    memory["limit"] += f" or +{fmt.nbytes(t.memory_allowance_mb * 1e6)}"
    exact = comparison.get("exact") or {}
    exact_checks = []
    if exact.get("compared") and "instructions_per_sample" in m:
        check = _check(m["instructions_per_sample"], t.max_instructions_ratio, hard=True)
        if check["why"]:
            check["why"] = ("an exact count of the instructions the pipeline's stages "
                            "execute: the same export always gives the same")
        exact_checks.append(check)
    checks = [
        _check(m["bytes_per_sample"], t.max_bytes_ratio, hard=True),
        _check(m["files_per_sample"], t.max_files_ratio, hard=True),
        *exact_checks,
        _check(m["cpu_s_per_sample"], t.max_cpu_ratio, hard=True, drifted=drifted),
        _check(m["samples_per_s"], t.min_throughput_ratio, hard=t.strict_throughput,
               lower_limit=True, drifted=drifted),
        memory,
    ]
    failed = [c for c in checks if c["status"] == FAIL]
    return {"kind": "dsbench-gate", "schema_version": 2, "workers": w,
            "thresholds": dataclasses.asdict(t), "checks": checks, "passed": not failed,
            "exit_code": 1 if failed else 0,
            "exact_cpu": {"checked": bool(exact_checks),
                          "why_not": None if exact_checks else
                          exact.get("why_not") or "the comparison has no exact CPU figures",
                          "counter": exact.get("counter") if exact_checks else None}}
