"""The demo's four figures as PNG files, drawn with matplotlib from the demo document.

Two are measurements on this machine (worker scaling, CPU by stage) and two come from the
cluster model (the step-time tail, the GPU utilization timeline); each title says which.
matplotlib is an optional dependency (`dsbench[plot]`): it is imported inside `write_plots`, so
the rest of dsbench works without it, and `available()` says whether the plots can be drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.report.demo import EXPORTS
from dsbench.report.measured import base_run
from dsbench.results.document import STAGES

COLORS = {"before": "#1f77b4", "after": "#d62728", "arrow": "#2ca02c"}
STAGE_COLORS = {"read": "#8c564b", "decode": "#1f77b4", "fields": "#d62728",
                "transform": "#ff7f0e", "collate": "#7f7f7f"}
FIGSIZE = (8.0, 4.5)
DPI = 120
TIMELINE_S = 120.0  # long enough to show the oscillation, short enough to see each swing
FINE_TIMELINE_S = 20.0  # a dozen burst cycles of the demo's after export
TAIL_FLOOR = 1e-4  # y-axis floor of the tail plot: rarer than 1 in 10,000 steps is noise here

FILES = ("worker_scaling.png", "step_time_64_vs_128.png", "gpu_util_timeline.png",
         "cpu_by_stage.png")


def available() -> bool:
    """Whether matplotlib imports (a broken install counts as missing)."""
    try:
        import matplotlib.pyplot  # noqa: F401
    except Exception:  # a missing or broken install (a bad backend, a missing shared library)
        return False
    return True


def write_plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw the four figures into `out_dir`; the paths in the order of FILES."""
    import matplotlib

    # Agg draws to files only: no display is needed, and none is touched on a headless CI box.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    drawers = (_worker_scaling, _step_tail, _timeline, _cpu_by_stage)
    written = []
    for name, draw in zip(FILES, drawers, strict=True):
        timeline = draw is _timeline
        # The timeline has two panels, a dashboard's 1 s view over a fine one: taller.
        fig, axes = plt.subplots(2 if timeline else 1, 1, dpi=DPI,
                                 figsize=(FIGSIZE[0], 7.0) if timeline else FIGSIZE)
        try:
            draw(doc, axes)
            fig.tight_layout()
            written.append(_save(fig, out_dir / name))
        finally:
            plt.close(fig)
    return written


def _save(fig: Any, path: Path) -> Path:
    # A plain write: report.write_all renames the whole output directory into place when done.
    fig.savefig(path, format="png", dpi=DPI)
    return path


def _worker_scaling(doc: dict[str, Any], ax: Any) -> None:
    workers: set[int] = set()
    for name in EXPORTS:
        runs = sorted(doc["results"][name]["runs"], key=lambda r: r["workers"])
        w = [r["workers"] for r in runs]
        y = [r["samples_per_s"] for r in runs]
        # The IQR need not bracket the median of a few rounds exactly; never a negative bar.
        err = [[max(0.0, r["samples_per_s"] - r["samples_per_s_iqr"][0]) for r in runs],
               [max(0.0, r["samples_per_s_iqr"][1] - r["samples_per_s"]) for r in runs]]
        layout = doc["results"][name]["export"]["layout"]
        ax.errorbar(w, y, yerr=err, color=COLORS[name], marker="o", capsize=4,
                    label=f"{name} ({layout})")
        one = y[0] / w[0]  # the lowest worker count, scaled to one worker
        ax.plot(w, [one * x for x in w], color=COLORS[name], linestyle="--", linewidth=1,
                alpha=0.6)
        workers.update(w)
    ax.plot([], [], color="gray", linestyle="--", linewidth=1, label="ideal linear scaling")
    ax.set_xticks(sorted(workers))
    ax.set_xlabel("loader workers (processes)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Loader throughput vs workers (measured on this machine; bars: IQR of rounds)")
    ax.grid(alpha=0.3)
    ax.legend()


def _step_tail(doc: dict[str, Any], ax: Any) -> None:
    tails = doc["tails"]
    styles = {"64": "-", "128": "-."}
    for name, width, alpha in (("before", 1.0, 0.45), ("after", 2.0, 1.0)):
        for ranks, ls in styles.items():
            t = tails[name][ranks]
            slower = [max(1.0 - lv, TAIL_FLOOR) for lv in t["level"]]
            # Steps, not slopes: the quantiles have atoms (the compute time, the stall).
            ax.step(t["step_s"], slower, where="post", color=COLORS[name], linestyle=ls,
                    linewidth=width, alpha=alpha, label=f"{name}, {ranks} GPUs")
    # Where a curve crosses this line is its p99: the line ties the curves to the p99 marks.
    ax.axhline(0.01, color="gray", linestyle=":", linewidth=1)
    ax.annotate("1% of steps (p99)", (0.99, 0.01), xycoords=ax.get_yaxis_transform(),
                xytext=(0, 3), textcoords="offset points", ha="right", fontsize=8, color="gray")
    for ranks, y, side in (("64", 0.3, 1), ("128", 0.08, -1)):
        p99 = tails["after"][ranks]["p99_s"]
        ax.axvline(p99, color=COLORS["after"], linestyle=":", linewidth=1.2)
        # The larger p99 is labelled on its left, so the label stays inside the axes.
        ax.annotate(f"after p99, {ranks} GPUs: {fmt.seconds(p99)}", (p99, y),
                    xytext=(4 * side, 0), textcoords="offset points", fontsize=8,
                    ha="left" if side > 0 else "right", color=COLORS["after"],
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_yscale("log")
    ax.set_ylim(TAIL_FLOOR, 1.05)
    ax.set_xlim(left=0)
    ax.set_xlabel("step time (s)")
    ax.set_ylabel("fraction of steps slower")
    ax.set_title("Step-time tail at 64 vs 128 GPUs (modelled, not measured)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper right")


def _timeline(doc: dict[str, Any], axes: Any) -> None:
    coarse, fine = axes
    means = []
    for name in ("before", "after"):
        cl = doc["cluster"][name]
        label = f"{name} ({cl['verdict']})"
        _util_steps(coarse, cl["timeline"], TIMELINE_S, COLORS[name], label)
        if name in doc.get("fine_timeline", {}):
            _util_steps(fine, doc["fine_timeline"][name], FINE_TIMELINE_S, COLORS[name], label)
        means.append(f"{name} mean {fmt.percent(cl['gpu_util'])}")
    ranks = doc["cluster"]["before"]["ranks"]
    coarse.set_title(f"GPU utilization over time, mean of {ranks} GPUs (modelled)\n"
                     + ", ".join(means), fontsize=11)
    bucket = fmt.seconds(doc["cluster"]["before"]["timeline"]["bucket_s"])
    coarse.set_xlabel(f"time (s); {bucket} buckets, as a dashboard samples it")
    fine_bucket = fmt.seconds(next(iter(doc.get("fine_timeline", {}).values()),
                                   {"bucket_s": 0.1})["bucket_s"])
    fine.set_xlabel(f"time (s); {fine_bucket} buckets: the GPUs compute a burst of batches, "
                    "then all wait for the next")
    for ax, span in ((coarse, TIMELINE_S), (fine, FINE_TIMELINE_S)):
        ax.set_ylim(0, 105)
        ax.set_xlim(0, span)
        ax.set_ylabel("GPU utilization (%)")
        ax.grid(alpha=0.3)
    # Below the axes: inside, any corner would hide a dip of one of the lines.
    fine.legend(ncol=2, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.22))


def _util_steps(ax: Any, tl: dict[str, Any], span_s: float, color: str, label: str) -> None:
    n = max(1, int(span_s / tl["bucket_s"]))
    util = [100.0 * u for u in tl["gpu_util"][:n]]
    if not util:
        return
    # One more edge than buckets, so the last bucket is drawn as wide as the others.
    util.append(util[-1])
    t = [i * tl["bucket_s"] for i in range(len(util))]
    ax.step(t, util, where="post", color=color, linewidth=1.1, label=label)


def _cpu_by_stage(doc: dict[str, Any], ax: Any) -> None:
    names = list(EXPORTS)
    runs = [base_run(doc["results"][n]) for n in names]
    us = [{s: 1e6 * r["stages"][s] for s in STAGES} for r in runs]
    totals = [sum(u.values()) for u in us]
    widest = max(totals) or 1.0
    left = [0.0] * len(names)
    for stage in STAGES:
        widths = [u[stage] for u in us]
        bars = ax.barh(names, widths, left=left, color=STAGE_COLORS[stage], label=stage)
        for bar, w in zip(bars, widths, strict=True):
            # A label only where it fits inside its segment.
            if w >= 0.06 * widest:
                ax.text(bar.get_x() + w / 2, bar.get_y() + bar.get_height() / 2, f"{w:.0f}",
                        ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for i, total in enumerate(totals):
        ax.text(total + 0.01 * widest, i, f"{total:.0f} µs/sample", va="center", fontsize=9)
    ax.set_xlim(0, widest * 1.22)
    ax.invert_yaxis()  # before on top, as in the tables
    ax.set_xlabel("CPU time per sample (µs/sample)")
    ax.set_ylabel("export")
    w = runs[0]["workers"]
    ax.set_title(f"CPU per sample by pipeline stage ({w} loader worker{'s' if w > 1 else ''}; "
                 "measured on this machine)", fontsize=11)
    ax.legend(ncol=len(STAGES), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14))
