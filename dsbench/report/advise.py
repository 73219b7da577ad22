"""The advice for people: the ranked table, the recommendation, and an HTML page with the Pareto
front of CPU per sample against bytes per sample."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from dsbench import fmt

ADVISED = "advised.toml"  # the winner's definition, in the demo's --out DIR
HEADERS = ("candidate", "CPU/sample", "vs baseline (interval)", "instructions/sample (exact)",
           "samples/s", "bytes read/sample",
           "files/sample", "on disk/sample", "shards per loader worker", "predicted GPU util",
           "step mean / p99", "first batch", "")


# why_not's reasons (advise.advice) as the table's last column says them.
SHORT = {"CPU per sample higher": "CPU higher",
         "predicted GPU utilization lower": "utilization lower",
         "neither CPU per sample nor predicted GPU utilization distinguishably better":
             "not distinguishably better"}


def _ratio(iv: dict[str, Any] | None) -> str:
    if iv is None:
        return "-"
    lo, hi = iv["interval"]
    word = {"better": "better", "worse": "worse"}.get(iv["change"], "not distinguishable")
    return f"{iv['ratio']:.3f}x ({lo:.3f}x to {hi:.3f}x) {word}"


def _instructions(r: dict[str, Any], per: str = "sample") -> str:
    """Instructions per sample where the exact pass counted them, with the ratio to the
    baseline's (a count: no interval)."""
    n = r["measured"].get("instructions_per_sample")
    if n is None:
        return "-"
    x = (r["vs_baseline"] or {}).get("instructions_per_sample")
    return fmt.instructions(n, per) + (f" ({x['ratio']:.3f}x)" if x and x["ratio"] else "")


def unit(doc: dict[str, Any]) -> str:
    """What the figures are per: a packed job's sample is a sequence (advise.sequences)."""
    return "sequence" if doc["settings"].get("pack") else "sample"


def _row(r: dict[str, Any], per: str = "sample") -> list[str]:
    m, p = r["measured"], r["predicted"]
    t = r.get("at_target") or {}
    spw = t.get("shards_per_worker")
    why = (r.get("why_not") or "").replace(f"per {per}", "per sample")
    mark = "recommended" if r.get("recommended") else ("" if r["baseline"] else
                                                       SHORT.get(why, ""))
    util = fmt.percent(p["gpu_util"])
    iv = (r["vs_baseline"] or {}).get("gpu_util")
    if iv and iv["change"] != "not distinguishable":
        util += f" ({iv['ratio']:.2f}x, {iv['interval'][0]:.2f}x to {iv['interval'][1]:.2f}x)"
    return [r["name"] + (" *" if r.get("pareto") else ""),
            fmt.seconds(m["cpu_s_per_sample"], per),
            "-" if r["baseline"] else _ratio(r["vs_baseline"]["cpu_s_per_sample"]),
            _instructions(r, per),
            fmt.rate(m["samples_per_s"], f"{per}s/s"), fmt.nbytes(m["bytes_per_sample"]),
            fmt.sig(m["files_per_sample"]), fmt.nbytes(m["disk_bytes_per_sample"]),
            "-" if spw is None else fmt.sig(spw), util,
            f"{fmt.seconds(p['step_mean_s'])} / {fmt.seconds(p['step_p99_s'])}",
            "-" if m["first_batch_s"] is None else fmt.seconds(m["first_batch_s"]), mark]


def _store_load(doc: dict[str, Any]) -> bool:
    """Whether the cluster's storage has a request limit per prefix (an object store's)."""
    return any(r["predicted"].get("limit_per_prefix_s") is not None for r in doc["table"])


def headers(doc: dict[str, Any]) -> list[str]:
    """The table's columns: the store's load per prefix too where its storage has a limit."""
    out = [h.replace("/sample", f"/{unit(doc)}").replace("samples/s", f"{unit(doc)}s/s")
           for h in HEADERS]
    if _store_load(doc):
        limit = doc["table"][0]["predicted"].get("limit_per_prefix_s")
        out.insert(-1, "requests/s per prefix" + (
            f" (limit {limit:,.0f} requests/s)" if limit else ""))
    return out


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    winner = doc["recommendation"]["winner"]
    rows = []
    for r in doc["table"]:
        row = _row({**r, "recommended": r["name"] == winner}, unit(doc))
        if _store_load(doc):
            p = r["predicted"]
            rate = p.get("requests_per_s_per_prefix")
            row.insert(-1, "-" if rate is None else f"{rate:,.0f} requests/s" + (
                " (past the limit)" if p.get("throttle_bound") else ""))
        rows.append(row)
    return rows


def _cluster(doc: dict[str, Any]) -> str:
    c = doc["cluster"]
    return (f"{c['nodes']} nodes x {c['gpus_per_node']} GPUs, {c['workers_per_gpu']} loader "
            f"workers per GPU, batch {c['batch_size']} per GPU, storage {c['storage']}")


def header_lines(doc: dict[str, Any]) -> list[str]:
    s, st = doc["source"], doc["settings"]
    passes = "; ".join(f"{len(p['candidates'])} sides x {p['rounds']} rounds of "
                       f"{fmt.seconds(p['seconds'])} ({fmt.seconds(p['wall_s'])})"
                       for p in doc["passes"])
    job = "" if s["job_samples"] == s["samples"] else \
        f"; the job trains on {fmt.plural(s['job_samples'], 'sample')}"
    return [f"advise {s['path']} ({s['layout']}, {fmt.plural(s['samples'], 'sample')}{job}): "
            f"{doc['sample']['which']}, re-laid into "
            f"{fmt.plural(len(doc['candidates_tried']), 'candidate')}, in "
            f"{fmt.seconds(doc['wall_s'])}",
            f"passes: {passes}",
            f"measured with {fmt.plural(st['workers'], 'worker')}, batches of {st['batch_size']}"
            f"{' sequences packed from token documents' if st.get('pack') else ''}, "
            f"{st['order']} order{_tokenized(st.get('tokenizer'))}; intervals "
            f"{fmt.percent(st['level_each'])} each, {fmt.percent(st['family_level'])} for all "
            f"together ({st['correction']})",
            f"predicted for: {_cluster(doc)} (a model, not a measurement)"] + (
        [f"candidates measured from the export's store, under {doc['staged_in']} (deleted "
         "at the end of the run)"] if doc.get("staged_in") else [])


def render(doc: dict[str, Any], markdown: bool = False) -> str:
    lines = header_lines(doc)
    lines += ["", fmt.table(headers(doc), table_rows(doc), markdown=markdown), "",
              f"* on the Pareto front of CPU per {unit(doc)} against bytes read per "
              f"{unit(doc)}"]
    for s in doc["not_tried"]:
        lines.append(f"not tried: {s['layout']} ({s['why']})")
    dropped = [n for n in doc["passes"][0]["candidates"]
               if n not in doc["passes"][-1]["candidates"]]
    if dropped:
        lines.append("dropped after the first pass (dominated, or in the worse half): "
                     + ", ".join(dropped))
    lines += ["", doc["recommendation"]["text"]]
    if doc["recommendation"].get("warning"):
        lines.append("warning: " + doc["recommendation"]["warning"])
    return "\n".join(lines)


def demo_lines(doc: dict[str, Any] | None) -> list[str]:
    """The demo's paragraph: what advise tried on after, and its recommendation."""
    if doc is None:
        return []
    s, st = doc["source"], doc["settings"]
    tried = ", ".join(c["name"] for c in doc["candidates_tried"])
    last = doc["passes"][-1]
    lines = ["", f"Which export to roll out (dsbench advise on after's first "
                 f"{fmt.plural(doc['sample']['samples'], 'sample')}, measured on this machine; "
                 f"the job's export taken as {s['job_samples']:,} samples; carried "
                 "to the cluster above)",
             f"  {doc['recommendation']['text']}"]
    if doc["recommendation"].get("warning"):
        lines.append(f"  warning: {doc['recommendation']['warning']}")
    lines.append(f"  tried: {tried}; reported: {last['rounds']} interleaved rounds of "
                 f"{fmt.seconds(last['seconds'])} per side, intervals "
                 f"{fmt.percent(st['level_each'])} each ({st['correction']}); "
                 f"{fmt.seconds(doc['wall_s'])} in all")
    # The baseline here is after measured again, on its first samples and beside the
    # candidates: its modelled figures differ from the verdict's by what these rounds saw.
    lines.append("  its baseline is after measured again beside the candidates: its figures "
                 "differ from those above by what these shorter rounds saw (docs/glossary.md)")
    if doc.get("definition_path"):
        lines.append(f"  its definition: {doc['definition_path']} (dsbench generate "
                     f"{doc['definition_path']} OUT --from {s['path']} makes the full export)")
    return lines


def pareto_png(doc: dict[str, Any]) -> bytes | None:
    """The candidates' CPU per sample against bytes read per sample, the front joined."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # a missing or broken install: the page says so instead
        return None
    fig, ax = plt.subplots(figsize=(7.0, 4.5), dpi=110)
    try:
        winner = doc["recommendation"]["winner"]
        pts = [(r["measured"]["bytes_per_sample"] / 1e3, r["measured"]["cpu_s_per_sample"] * 1e3,
                r["name"], r.get("pareto", False), r["baseline"]) for r in doc["table"]]
        for x, y, name, front, is_base in pts:
            ax.scatter([x], [y], color="#d62728" if is_base else
                       ("#2ca02c" if front else "#7f7f7f"), zorder=3,
                       marker="*" if name == winner else "o", s=120 if name == winner else 30)
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
        front_pts = sorted((x, y) for x, y, _, f, _ in pts if f)
        if len(front_pts) > 1:
            ax.plot(*zip(*front_pts, strict=True), color="#2ca02c", lw=1, zorder=2)
        xs = [p[0] for p in pts]
        # Random access can read a whole row group per sample: orders of magnitude apart.
        if max(xs) > 10 * min(xs) > 0:
            ax.set_xscale("log")
        ax.set_xlabel(f"bytes read per {unit(doc)} (kB)")
        ax.set_ylabel(f"CPU per {unit(doc)} (ms)")
        ax.set_title("Measured on this machine: the export (red), the Pareto front (green), "
                     "the recommendation (star)", fontsize=10)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)


def render_html(doc: dict[str, Any]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers(doc))
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
                   for row in table_rows(doc))
    png = pareto_png(doc)
    figure = (f'<img alt="Pareto front" src="data:image/png;base64,'
              f'{base64.b64encode(png).decode()}">' if png else
              "<p>(the plot needs matplotlib: pip install 'dsbench[plot]')</p>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>dsbench advise</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 6px;font-size:90%}</style></head><body>",
        f"<h1>{e(doc['recommendation']['text'])}</h1>",
        *(f"<p>{e(line)}</p>" for line in header_lines(doc)),
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
        f"<h2>CPU per {unit(doc)} against bytes read per {unit(doc)}</h2>", figure,
        "</body></html>"]) + "\n"


def _tokenized(tokenizer: dict[str, Any] | None) -> str:
    """A text export's advice: the tokenizer every side encoded with."""
    return "" if not tokenizer else f", text tokenized by {tokenizer['source']}"
