"""Comparison tables for people: aligned text for terminals, GitHub markdown for CI summaries.

Marks follow asv compare's habit: `+` worse, `-` better, blank when the difference is within
noise, `?` when one round per side gives no interval, `x` when the two sides may not be compared
at all; every table is printed with the line that says so (LEGEND). The words of a change come
from dsbench.report.claims.
"""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.analysis.compare import format_value
from dsbench.loader.order import SEQUENTIAL
from dsbench.report import claims

MARKS = {"worse": "+", "better": "-", "not distinguishable": " ", "unknown": "?"}
LEGEND = ("marks: + worse, - better, blank: not distinguishable from noise (or a count that "
          "did not change), ? no interval (one round per side); ratio = candidate / base, its "
          "95% CI from the rounds; exact: counted over every unit of both exports (files, bytes) "
          "or under the same counter (instructions)")

# Words for a ratio above and below 1, per metric: a rate is faster or slower, a cost more or
# less, a count more or fewer.
WORDS = {"samples_per_s": ("faster", "slower"), "files_per_sample": ("more", "fewer"),
         "requests_per_sample": ("more", "fewer"), "instructions_per_sample": ("more", "fewer")}


def change_of(row: dict[str, Any]) -> claims.Change:
    """A compare metric row as a typed claim."""
    ci = row["ratio_ci95"]
    more, less = WORDS.get(row["metric"], ("more", "less"))
    return claims.Change(row["ratio"], (ci[0], ci[1]) if ci else None, more, less,
                         counted=row["counted"], notes=tuple(row.get("notes") or ()))


def _change_text(row: dict[str, Any]) -> str:
    """The table's change column: the change in words (its interval is the column before),
    with what a warning about either side's figure earned."""
    if row["ratio"] is None:
        return "new cost"
    c = change_of(row)
    if row["change"] == "unknown":
        return "; ".join(("unknown: needs 2+ rounds per side", *c.notes))
    if row["counted"]:
        return "no change" if row["change"] == "not distinguishable" else c.factor()
    head = "not distinguishable from noise" if row["change"] == "not distinguishable" \
        else c.parts()[0]
    return "; ".join((head, *c.notes))


def ratio_cells(row: dict[str, Any]) -> tuple[str, str]:
    """The ratio and its interval as table cells, with the digits that keep 1x readable, and
    a gate's limit: 1.103 against 'ratio <= 1.10' prints 1.103x."""
    r, ci = row["ratio"], row["ratio_ci95"]
    if r is None:
        return "new", "-"
    d = claims.ratio_digits([r, *(ci or ())])
    if row.get("limit_ratio") is not None:
        d = max(d, claims.side_digits([r, *(ci or ())], row["limit_ratio"]))
    if ci:
        d = claims.apart(ci[0], ci[1], d)
        return claims.times(r, d), f"{claims.times(ci[0], d)} to {claims.times(ci[1], d)}"
    return claims.times(r, d), ("exact" if row.get("exact") else
                                "counted" if row["counted"] else "-")


def metric_rows(run: dict[str, Any]) -> list[list[str]]:
    rows = []
    for m in run["metrics"]:
        ratio, ci_text = ratio_cells(m)
        rows.append([MARKS[m["change"]], m["label"], format_value(m["metric"], m["base"]),
                     format_value(m["metric"], m["cand"]), ratio, ci_text, _change_text(m)])
    return rows


HEADERS = ["", "metric", "base", "candidate", "ratio", "95% CI", "change"]


def cluster_rows(cluster: dict[str, dict[str, Any]]) -> list[list[str]]:
    stores = any(cluster[side].get("store") for side in ("base", "cand"))
    rows = []
    for side in ("base", "cand"):
        e = cluster[side]
        st = e["step_time_s"]
        row = [side, f"{e['ranks']} GPUs", fmt.seconds(st["mean"]), fmt.seconds(st["p50"]),
               fmt.seconds(st["p99"]), fmt.percent(e["gpu_util"]), e["verdict"]]
        if stores:
            row[-1:-1] = [store_cell(e.get("store"))]
            if (e.get("store") or {}).get("throttle_bound"):
                row[-1] += ", throttle-bound"
        rows.append(row)
    return rows


def store_cell(store: dict[str, Any] | None) -> str:
    """The job's requests per second per prefix, against the store's limit where stated."""
    if not store:
        return "-"
    text = f"{round(store['requests_per_s_per_prefix']):,}/s"
    limit = store["limit_per_prefix_s"]
    return text + (f" ({fmt.percent(store['requests_per_s_per_prefix'] / limit)} of limit)"
                   if limit else "")


CLUSTER_HEADERS = ["export", "job", "mean step", "p50 step", "p99 step", "GPU util", "verdict"]
STORE_HEADERS = [*CLUSTER_HEADERS[:-1], "GETs per prefix", "verdict"]


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


def disturbance_text(run: dict[str, Any]) -> str:
    """One line when a neighbour came and went within pairs of rounds: which pairs, by how much,
    and that the timings were taken over the others."""
    d = run.get("disturbance")
    if d and d.get("steady"):
        usual = d["usual_difference_cores"]
        side = "candidate" if usual > 0 else "base"
        return (f"warning: disturbed: other programs kept {fmt.sig(abs(usual))} cores more busy "
                f"during the {side}'s rounds than the other's, even in the quieter pairs: a "
                f"process serving the {side} (a local object store) or a neighbour in step with "
                "the rounds; the timings hold it, and the gate only warns on them. Rerun on a "
                "quiet machine to tell")
    if not d or not d["disturbed"]:
        return ""
    n = len(d["disturbed"])
    rounds = ", ".join(str(i + 1) for i in d["disturbed"])
    return (f"warning: disturbed: other programs ran during one side of {n} of "
            f"{d['pairs']} round pairs (pair {rounds}: {fmt.seconds(d['others_cpu_s'])} of CPU "
            f"more on one side than on the other, past {fmt.sig(d['threshold_cores'])} cores "
            "from the usual); "
            + (f"the timings' figures and intervals are of the {len(d['kept'])} undisturbed pairs"
               if not d.get("left_in") else "too few pairs are undisturbed to leave the "
               "others out: the timings hold the disturbance, and the gate only warns on them")
            + ". Rerun with more --rounds, or on a quieter machine")


def _figures(q: dict[str, Any]) -> str:
    bits = q["label_entropy_bits"]
    apart = q["source_distance"]
    units = q["units_per_batch"]
    return (("units per batch not known (the library does not say where its samples lie)"
             if units is None else f"{fmt.sig(units)} units/batch")
            + ("" if bits is None else
               f", label entropy {fmt.sig(bits)} bits/batch of "
               f"{fmt.sig(q['label_entropy_all_bits'])} bits over all labels read")
            + ("" if apart is None else
               f", consecutive samples {fmt.sig(apart)} samples apart in the source order"))


def pushback_text(sides: dict[str, dict[str, float]]) -> str:
    def one(q: dict[str, float]) -> str:
        return (f"{fmt.sig(q['retries_per_sample'])} retries/sample "
                f"({fmt.sig(q['throttled_per_sample'])} throttled), "
                f"{fmt.seconds(q['retry_s_per_sample'])}/sample spent in retries")
    return (f"the store pushed back: base {one(sides['base'])}; candidate {one(sides['cand'])} "
            "(counted in each side's count pass: the store's load as much as the export's)")


def order_text(figures: dict[str, Any]) -> str:
    """How random each side's batches were, beside what they cost."""
    sides = [(name, figures.get(key)) for name, key in (("base", "base"), ("candidate", "cand"))]
    said = [f"{name} {_figures(q)}" for name, q in sides if q]
    return ("how random the batches were: " + "; ".join(said)) if said else ""


def render(comparison: dict[str, Any], markdown: bool = False) -> str:
    """The whole comparison: header, per worker count a metric table and the attribution."""
    base, cand = comparison["base"], comparison["cand"]
    title = f"base: {base['path']} ({base['layout']})  vs  candidate: {cand['path']} " \
            f"({cand['layout']})"
    out = [f"### dsbench compare\n\n{title}\n" if markdown else title]
    out.append(f"intervals: 95%, {comparison['method']}")
    if exact := exact_text(comparison):
        out.append(exact)
    readers = comparison.get("readers") or {}
    if readers.get("base") != readers.get("cand"):
        out.append(f"read by: base {readers['base']}, candidate {readers['cand']}")
    orders = comparison.get("orders") or {}
    if orders.get("base") != orders.get("cand"):
        out.append(f"read in different orders: base {orders['base']}, candidate "
                   f"{orders['cand']}")
    elif orders.get("base", SEQUENTIAL) != SEQUENTIAL:
        out.append(f"order: {orders['base']}")
    warning = drift_warning(comparison)
    if warning:
        out.append(warning)
    if comparison.get("pushback"):
        out.append(pushback_text(comparison["pushback"]))
    if not comparison["comparable"]:
        out.append("x NOT COMPARABLE: " + "; ".join(comparison["not_comparable_reasons"]))
        return "\n".join(out)
    for run in comparison["runs"]:
        out.append(f"\n{'#### ' if markdown else ''}{fmt.plural(run['workers'], 'loader worker')}")
        out.append(fmt.table(HEADERS, metric_rows(run), markdown=markdown))
        if disturbed := disturbance_text(run):
            out.append(disturbed)
        out.append(("\nwhere the cost moved: " if markdown else "where the cost moved: ")
                   + run["moved"])
        randomness = order_text(run.get("order_figures") or {})
        if randomness:
            out.append(("\n" if markdown else "") + randomness)
    if comparison["runs"]:
        out.append(("\n" if markdown else "") + LEGEND)
    cluster = comparison.get("cluster")
    if cluster:
        e = cluster["base"]
        out.append(f"\n{'#### ' if markdown else ''}predicted cluster "
                   f"({e['cluster']['nodes']} nodes x {e['cluster']['gpus_per_node']} GPUs, "
                   "a model, not a measurement)")
        stores = any(cluster[side].get("store") for side in ("base", "cand"))
        out.append(fmt.table(STORE_HEADERS if stores else CLUSTER_HEADERS, cluster_rows(cluster),
                             markdown=markdown))
    return "\n".join(out)


def exact_cpu_line(gate: dict[str, Any]) -> str:
    """Whether the gate checked CPU exactly (instructions), and why not where it did not."""
    x = gate.get("exact_cpu") or {}
    if x.get("checked"):
        c = x.get("counter") or {}
        return (f"CPU checked exactly: instructions per sample counted by {c.get('name')} "
                f"{c.get('version')} on both sides")
    return (f"CPU not checked exactly: {x.get('why_not') or 'no exact figures'}; the timed "
            "CPU check stands alone")


def exact_text(comparison: dict[str, Any]) -> str:
    """Whether the comparison holds exact CPU figures, and why not."""
    x = comparison.get("exact")
    if not x:
        return ""
    if x["compared"]:
        c = x.get("counter") or {}
        return (f"CPU per sample, exact: instructions counted by {c.get('name')} "
                f"{c.get('version')} on both sides (within {fmt.percent(x['tolerance'])}: "
                "the same)")
    return f"CPU per sample, exact: not compared: {x['why_not']}"


GATE_LEGEND = ("kind: hard limits fail the gate, soft ones warn; a timing fails only when its "
               "whole 95% CI is past its limit, so noise alone never fails it; ratio = "
               "candidate / base")


def render_gate(gate: dict[str, Any], markdown: bool = False) -> str:
    icon = {"pass": "pass", "warn": "WARN", "fail": "FAIL"}
    rows = []
    for c in gate["checks"]:
        ratio, ci = ratio_cells(c)
        rows.append([icon[c["status"]], c["label"], format_value(c["metric"], c["base"]),
                     format_value(c["metric"], c["cand"]), ratio, ci, c["limit"],
                     "hard" if c["hard"] else "soft"])
    verdict = "PASSED" if gate["passed"] else "FAILED"
    head = f"dsbench gate {verdict} ({fmt.plural(gate['workers'], 'loader worker')})"
    table = fmt.table(["", "check", "base", "candidate", "ratio", "95% CI", "limit", "kind"],
                      rows, markdown=markdown)
    notes = [f"{icon[c['status']]} {c['label']}: {c['why']}" for c in gate["checks"] if c["why"]]
    body = "\n".join([table, *([""] if markdown else []), GATE_LEGEND, exact_cpu_line(gate),
                      *notes])
    return f"### {head}\n\n{body}" if markdown else f"{head}\n{body}"
