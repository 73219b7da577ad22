"""The demo's output directory: the result files, the whole demo document, the plots, one HTML page.

`write_all(doc, out, progress)` writes everything `dsbench demo --out DIR` keeps; `render_html`
builds the page alone. The page is self-contained (inline CSS, the plots as data: URIs, nothing
fetched), so it can be mailed, attached to a CI run or opened offline, and every value taken from
the document is HTML-escaped, since paths and CPU names are whatever the machine reported.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.advise.run import write_definition
from dsbench.errors import DsbenchError
from dsbench.report import advise as advise_report
from dsbench.report import comparison as tables
from dsbench.report import measured, plots, verdict
from dsbench.report import resume as restart
from dsbench.results import document as results

NO_MATPLOTLIB = "matplotlib is not installed (pip install 'dsbench[plot]')"

# What each figure shows, and whether it is a measurement or the model's; keyed by file name.
CAPTIONS = {
    "resume_entropy.png": "Measured on this machine: label entropy per batch (bits) of after's "
                          "loader, uninterrupted and restarted by each policy at the dashed "
                          "line; a policy that restores the order lies on the uninterrupted "
                          "line.",
    "worker_scaling.png": "Measured on this machine: loader throughput (samples/s) against the "
                          "number of loader workers, per export; bars are the interquartile "
                          "range of the rounds, dashed lines ideal linear scaling from the "
                          "lowest worker count.",
    "step_time_64_vs_128.png": "Modelled, not measured: the fraction of training steps slower "
                               "than a given step time (s), for the same job on 64 and 128 "
                               "GPUs; dotted lines mark after's p99.",
    "gpu_util_timeline.png": "Modelled, not measured: mean GPU utilization (%) of the "
                             "simulated job, before and after; above, the first 120 s in 1 s "
                             "buckets as a dashboard samples it; below, the first 20 s of a "
                             "second run of the same job in 100 ms buckets, where the bursts "
                             "and waits show at their own length.",
    "cpu_by_stage.png": "Measured on this machine: CPU time per sample (µs/sample) in each "
                        "pipeline stage, from the run with the fewest loader workers.",
}

# One column that fits a laptop's window beside nothing else (1300 px in the test) without the
# page scrolling sideways: text wraps, a table too wide for its cells scrolls in its own box.
CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 1.5em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; font-size: 1.25em; }
h3 { font-size: 1.05em; }
.headline { background: #f4f7fb; border-left: 4px solid #3b6ea5; padding: 0.6em 1em; }
.headline p { margin: 0.3em 0; }
.headline h2 { margin: 0.2em 0 0.4em; border: none; font-size: 1.1em; }
.verdict { padding-left: 1.4em; } .verdict li { margin: 0.35em 0; }
.wide { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; overflow-wrap: anywhere; }
th { background: #f3f3f3; text-align: left; } td { text-align: right; }
td:first-child { text-align: left; }
figure { margin: 1.2em 0; } img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #444; }
.note { color: #555; font-size: 0.92em; } .skipped { background: #fff4e0; padding: 0.6em; }
"""


def write_all(doc: dict[str, Any], out: Path, progress: Callable[[str], None]) -> list[Path]:
    """Write the demo's files as the directory `out`; every path written, in the order written.

    Everything goes to a hidden sibling first, which then takes `out`'s place (a previous demo
    output there is replaced whole): an interrupted run leaves the old directory or the new
    one, never a mix, and no plots from an earlier run sit next to a report that has none.
    """
    check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    old = out.with_name(f".{out.name}.old{os.getpid()}")
    advice = doc.get("advice")
    if advice and advice["recommendation"]["winner"]:
        advice["definition_path"] = str(out / advise_report.ADVISED)
    try:
        names = _write_into(doc, tmp, progress)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    except OSError as exc:
        raise DsbenchError(f"cannot write the report: {exc}", path=out) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return [out / n for n in names]


def check_out_dir(out: Path) -> None:
    """Refuse, before any work, a DIR that is a file or holds something other than a report."""
    if out.exists() and not out.is_dir():
        raise DsbenchError("--out must be a directory", path=out)
    if out.is_dir() and any(out.iterdir()) and not (out / "demo.json").exists():
        raise DsbenchError("--out holds other files; choose a new or empty directory", path=out)
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise DsbenchError("--out cannot be created here", path=out)


def _write_into(doc: dict[str, Any], out: Path, progress: Callable[[str], None]) -> list[Path]:
    """The files, relative to `out`."""
    (out / "results").mkdir(parents=True)
    written = [results.write_result(out / "results" / f"{name}.json", res)
               for name, res in doc["results"].items()]
    written.append(_write_text(out / "demo.json", json.dumps(doc, indent=1) + "\n"))
    advice = doc.get("advice")
    if advice:
        written.append(_write_text(out / "results" / "advice.json",
                                   json.dumps(advice, indent=1) + "\n"))
        final = advice.get("definition_path")
        toml = write_definition(advice, out / advise_report.ADVISED, Path(final)) \
            if final else None
        if toml is not None:
            written.append(toml)
    images: dict[str, bytes] = {}
    if plots.available():
        pngs = plots.write_plots(doc, out / "plots")
        if doc.get("resume"):
            pngs.append(restart.write_plot(doc["resume"], out / "plots" / "resume_entropy.png"))
        written += pngs
        images = {p.name: p.read_bytes() for p in pngs}
    else:
        progress(f"demo: {NO_MATPLOTLIB}: no plots")
    written.append(_write_text(out / "report.html", render_html(doc, images)))
    return [p.relative_to(out) for p in written]


def _write_text(path: Path, text: str) -> Path:
    # A plain write: the whole directory is renamed into place only when complete.
    path.write_text(text, encoding="utf-8")
    return path


# The figure that shows the incident's symptom, the GPUs waiting: first, under the headline.
FIRST_FIGURE = "gpu_util_timeline.png"


def render_html(doc: dict[str, Any], images: dict[str, bytes],
                skipped_reason: str = NO_MATPLOTLIB) -> str:
    """The whole report as one HTML page; `images` maps PNG file names to their bytes.

    The first screen answers: the three-line headline, then the figure of the GPUs' time.
    The verdict follows as sections of short items, then the tables and the other figures
    that back it."""
    machine = doc["results"]["before"]["machine"]
    spec = doc["cluster_spec"]
    sections = verdict_sections(verdict.verdict_lines(doc))
    short = sections.pop(0) if sections and sections[0][0] == "In short" else None
    first = {k: v for k, v in images.items() if k == FIRST_FIGURE}
    rest = {k: v for k, v in images.items() if k != FIRST_FIGURE}
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>dsbench demo report</title>", f"<style>{CSS}</style></head><body>",
        "<h1>dsbench demo: before, after and a candidate export</h1>",
        f'<p class="note">Measured on {_e(machine["cpu_model"])} with '
        f'{_e(machine["usable_cores"])} usable cores; carried by a model to {_e(spec["nodes"])} '
        f'nodes x {_e(spec["gpus_per_node"])} GPUs.</p>',
        *(_headline(short) if short else []),
        *_figures(doc, first, skipped_reason),
        *(_section(title, items) for title, items in sections),
        "<h2>The figures behind it</h2>",
        "<h3>Measured on this machine</h3>",
        _table(measured.COUNT_HEADERS, measured.count_rows(doc)),
        _table(measured.MEASURED_HEADERS, measured.measured_rows(doc)),
        *([f'<p class="note">{_e(note)}</p>'] if (note := measured.noisy_note(doc)) else []),
        *_comparisons(doc),
        f"<h3>Predicted cluster (a model, not a measurement; {_e(spec['nodes'])} nodes x "
        f"{_e(spec['gpus_per_node'])} GPUs)</h3>", _cluster_table(doc),
        *_restart(doc.get("resume")),
        *_advice(doc.get("advice")),
        *(_figures(doc, rest, skipped_reason) if rest else []),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def verdict_sections(lines: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The text verdict's sections: (title, items), a title being a line at the margin and an
    item an indented line under it."""
    sections: list[tuple[str, list[str]]] = []
    for line in lines:
        if not line.strip():
            continue
        if line.startswith(" ") and sections:
            sections[-1][1].append(line.strip())
        else:
            sections.append((line.strip(), []))
    return sections


def _item(text: str) -> str:
    """An item with its leading label ("what sets it: ...", or a name the text version aligns
    in a column, "after   mean step ...") in bold, where it has one."""
    column = re.match(r"(\S+) {2,}(.*)", text)
    if column:
        return f"<b>{_e(column.group(1))}</b> {_e(column.group(2))}"
    label, sep, rest = text.partition(": ")
    if sep and len(label) <= 40 and "," not in label and "(" not in label:
        return f"<b>{_e(label)}:</b> {_e(rest)}"
    return _e(text)


def _headline(section: tuple[str, list[str]]) -> list[str]:
    return [f'<div class="headline"><h2>{_e(section[0])}</h2>',
            *(f"<p>{_item(t)}</p>" for t in section[1]), "</div>"]


def _section(title: str, items: list[str]) -> str:
    """A section of the verdict; items numbered in the text ("1. ...") are an ordered list."""
    numbered = bool(items) and all(re.match(r"\d+\. ", t) for t in items)
    if numbered:
        items = [t.split(". ", 1)[1] for t in items]
    tag = "ol" if numbered else "ul"
    body = "".join(f"<li>{_item(t)}</li>" for t in items)
    return f"<h2>{_e(title)}</h2>" + (f'<{tag} class="verdict">{body}</{tag}>' if body else "")


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def _comparisons(doc: dict[str, Any]) -> list[str]:
    out = []
    for name, comp in doc["comparisons"].items():
        out.append(f"<h3>{_e(name)} vs before (measured on this machine)</h3>")
        out.append(f'<p class="note">base: {_e(comp["base"]["path"])} '
                   f'({_e(comp["base"]["layout"])}); candidate: {_e(comp["cand"]["path"])} '
                   f'({_e(comp["cand"]["layout"])})</p>')
        if not comp["comparable"]:
            out.append(f"<p>Not comparable: {_e('; '.join(comp['not_comparable_reasons']))}</p>")
            continue
        for run in comp["runs"]:
            out.append(f"<h4>{_e(measured.workers_text(run['workers']))}</h4>")
            out.append(f'<p class="note">95% intervals: {_e(comp["method"])}</p>')
            out.append(_table(tables.HEADERS, tables.metric_rows(run)))
            out.append(f'<p class="note">{_e(tables.LEGEND)}</p>')
            out.append(f"<p>Where the cost moved: {_e(run['moved'])}</p>")
    return out


def _restart(res: dict[str, Any] | None) -> list[str]:
    if not res:
        return []
    lines = restart.demo_lines(res)
    rows = [[p["policy"], f"{p['total']['replayed']} samples", f"{p['total']['skipped']} samples",
             "none" if p["total"]["first_divergence"] is None
             else f"step {p['total']['first_divergence']}",
             fmt.seconds(p["total"]["first_batch_s"])] for p in res["policies"]]
    return [f"<h3>{_e(lines[1])}</h3>",
            _table(["restart policy", "replayed", "skipped", "order diverges at",
                    "restart to first batch"], rows)]


def _advice(doc: dict[str, Any] | None) -> list[str]:
    """advise's paragraph, table and Pareto plot."""
    if not doc:
        return []
    png = advise_report.pareto_png(doc)
    figure = ([f'<img alt="Pareto front of the candidates" src="data:image/png;base64,'
               f'{base64.b64encode(png).decode()}">'] if png else [])
    lines = advise_report.demo_lines(doc)
    return [f"<h3>{_e(lines[1])}</h3>", *(f"<p>{_e(t.strip())}</p>" for t in lines[2:]),
            _table(advise_report.headers(doc), advise_report.table_rows(doc)), *figure]


def _cluster_table(doc: dict[str, Any]) -> str:
    rows = []
    for name, e in doc["cluster"].items():
        st = e["step_time_s"]
        rows.append([name, f"{e['ranks']} GPUs", fmt.seconds(st["mean"]), fmt.seconds(st["p50"]),
                     fmt.seconds(st["p99"]), fmt.seconds(st["max"]), fmt.percent(e["gpu_util"]),
                     fmt.ratio(e["supply_over_demand"]), e["verdict"]])
    return _table(["export", "job", "mean step", "p50 step", "p99 step", "max step", "GPU util",
                   "loader supply / GPU demand", "verdict"], rows)


def _figures(doc: dict[str, Any], images: dict[str, bytes], skipped_reason: str) -> list[str]:
    if not images:
        return [f'<p class="skipped">Plots were skipped: {_e(skipped_reason)}. The tables below '
                "hold the same figures.</p>"]
    out = []
    for name, data in images.items():
        caption = CAPTIONS.get(name, name)
        if name == "gpu_util_timeline.png" and doc["cluster"]["after"].get("timeline"):
            # The model's own reading of the oscillation, next to the picture of it.
            caption += " " + doc["cluster"]["after"]["timeline"]["note"]
        encoded = base64.b64encode(data).decode("ascii")
        out.append(f'<figure><img src="data:image/png;base64,{encoded}" alt="{_e(name)}">'
                   f"<figcaption>{_e(caption)}</figcaption></figure>")
    return out
