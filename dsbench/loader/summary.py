"""A worker count's rounds summarised: the run's figures, their intervals, and its warnings.

The timings are geometric means of the rounds with Student t intervals on their logarithms
(stats.py); files and bytes per sample are the export's counts over whole units (counts.py),
the same for every worker count, or, for a `--dataset` (not counted), its windows' bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dsbench import fmt, stats
from dsbench.loader.counts import NOT_COUNTED, Counts
from dsbench.loader.options import BenchOptions
from dsbench.results.stages import STAGES
from dsbench.results.types import Round, Run

SKIPPED_KEPT = 20
SPLIT = ("peak_pss_anon_bytes", "peak_pss_file_bytes", "peak_pss_shmem_bytes")


def _round_row(r: dict[str, Any]) -> Round:
    row: Round = {"samples": r["samples"], "batches": r["batches"], "wall_s": r["wall_s"],
                  "cpu_s": r["cpu_s"], "main_cpu_s": r["main_cpu_s"],
                  "workers_cpu_s": r["workers_cpu_s"],
                  "samples_per_s": r["samples_per_s"], "cpu_s_per_sample": r["cpu_s_per_sample"],
                  "accelerator_util": r["accelerator_util"], "warmup_batches": r["warmup_batches"],
                  "warmup_s": r["warmup_s"], "peak_pss_bytes": r["peak_pss_bytes"],
                  "window_files": r["window_files"], "window_bytes": r["window_bytes"],
                  "stages": {s: r["stages_s"][s] / r["samples"] for s in STAGES}}
    for key in SPLIT:  # kernels before 5.7 give PSS without its split
        if key in r:
            row[key] = r[key]  # type: ignore[literal-required]  # one of SPLIT's keys
    if "workers_cpu_s_reaped" in r:  # not for workers forked from a server (forks.py)
        row["workers_cpu_s_reaped"] = r["workers_cpu_s_reaped"]
    if "host_cpu_s" in r:  # rounds given by callers that did not measure the host
        row["host_cpu_s"] = r["host_cpu_s"]
        row["host_cpu_s_per_sample"] = r["host_cpu_s_per_sample"]
    if "epochs" in r:  # --epochs
        row["epochs"] = r["epochs"]
    if "worker_samples" in r:  # (not with --epochs: every worker reads its whole share)
        row["worker_samples"] = r["worker_samples"]
        row["idle_workers"] = r["idle_workers"]
    return row


def epoch_summary(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per epoch, over the rounds: the median time to the first batch, wait at the boundary and
    wall time (--epochs)."""
    out = []
    for e in range(len(rounds[0]["epochs"])):
        each = [r["epochs"][e] for r in rounds]
        out.append({"epoch": e, "samples": each[0]["samples"],
                    **{k: float(np.median([x[k] for x in each]))
                       for k in ("time_to_first_batch_s", "boundary_wait_s", "wall_s")}})
    return out


def summarize_run(n_workers: int, opts: BenchOptions, rounds: list[dict[str, Any]],
                  counts: Counts) -> Run:
    """One worker count's figures over its rounds."""
    sps = stats.summarize([r["samples_per_s"] for r in rounds])
    cpu = stats.summarize([r["cpu_s_per_sample"] for r in rounds])
    host = [r["host_cpu_s_per_sample"] for r in rounds if "host_cpu_s_per_sample" in r]
    samples = sum(r["samples"] for r in rounds)
    au = [r["accelerator_util"] for r in rounds if r["accelerator_util"] is not None]
    skipped = [e for r in rounds for e in r["skipped"]][:SKIPPED_KEPT]
    run: Run = {
        "workers": n_workers, "batch_size": opts.batch_size,
        "samples_per_s": sps.center, "samples_per_s_iqr": list(sps.iqr),
        "samples_per_s_ci95": list(sps.ci95), "samples_per_s_spread": sps.relative_spread,
        "cpu_s_per_sample": cpu.center, "cpu_s_per_sample_iqr": list(cpu.iqr),
        "cpu_s_per_sample_ci95": list(cpu.ci95), "cpu_s_per_sample_spread": cpu.relative_spread,
        "stages": {s: sum(r["stages_s"][s] for r in rounds) / samples for s in STAGES},
        # Counts of the export, not of this run's windows: the same for every worker count
        # (a --dataset's, not counted, are its windows' bytes).
        "bytes_per_sample": (counts.per_sample(counts.read_bytes + counts.mapped_bytes)
                             if counts.method != NOT_COUNTED
                             else sum(r["window_bytes"] for r in rounds) / samples),
        "mapped_bytes_per_sample": counts.per_sample(counts.mapped_bytes),
        "files_per_sample": counts.per_sample(counts.files),
        "peak_pss_bytes": max(r["peak_pss_bytes"] for r in rounds),
        "samples": samples, "skipped_samples": sum(r["skipped_samples"] for r in rounds),
        "skipped": skipped,
        "accelerator_util": stats.geometric_mean(au) if au and min(au) > 0 else None,
        "scaling_efficiency": None,
        "batch_cpu_s": [x for r in rounds for x in r["batch_cpu_s"]],
        "rounds": [_round_row(r) for r in rounds],
    }
    for key in SPLIT:
        if all(key in r for r in rounds):
            run[key] = max(r[key] for r in rounds)  # type: ignore[literal-required]  # SPLIT
    if host and len(host) == len(rounds):
        # A host busy for none of a window (a clock too coarse) has no mean on logs.
        run["host_cpu_s_per_sample"] = (stats.summarize(host).center if min(host) > 0
                                        else float(np.mean(host)))
    if counts.requests is not None:
        run["requests_per_sample"] = counts.per_sample(counts.requests.data_requests)
    if all("epochs" in r for r in rounds):
        run["epochs"] = epoch_summary(rounds)
    if all("worker_samples" in r for r in rounds):
        run["worker_samples"] = [int(sum(x)) for x in zip(*(r["worker_samples"] for r in rounds),
                                                           strict=True)]
        run["idle_workers"] = sorted({w for r in rounds for w in r["idle_workers"]})
    return run


# What the warnings below tell a person to do, in bench's options (advise says it in its own).
NOISY_ADVICE = "use a longer --seconds, more --rounds, or a quieter machine"
SHORT_ADVICE = "use a longer --seconds or a smaller --batch-size"


def warnings_of(run: Run, opts: BenchOptions) -> list[str]:
    """What a person should know before comparing the run's figures."""
    out = []
    w = run["workers"]
    for spread, label in ((run["samples_per_s_spread"], "samples/s"),
                          (run["cpu_s_per_sample_spread"], "CPU per sample")):
        if spread > stats.SPREAD_WARNING:
            out.append(f"{label} with {fmt.plural(w, 'worker')} varies by "
                       f"{100 * spread:.3g}% between rounds (IQR/median): {NOISY_ADVICE} "
                       "before comparing it")
    # Per worker that delivered (one with nothing to read holds none of them).
    short = min(r.get("batches", 0) for r in run["rounds"]) / max(
        1, w - len(run.get("idle_workers", [])))
    if short < stats.MIN_WINDOW_BATCHES and "epochs" not in run:
        out.append(f"the measured window with {fmt.plural(w, 'worker')} held only "
                   f"{fmt.plural(short, 'batch', 'batches')} per worker: {SHORT_ADVICE}")
    for r in run["rounds"]:
        # Window CPU is a part of what the reaped workers used in all; more is an accounting bug.
        if "workers_cpu_s_reaped" in r and \
                r["workers_cpu_s"] > r["workers_cpu_s_reaped"] * 1.01 + 0.05:
            out.append(f"worker CPU in the window ({r['workers_cpu_s']:.3g} s) exceeds the reaped "
                       f"total ({r['workers_cpu_s_reaped']:.3g} s): CPU figures are suspect")
    return out


# A split whose largest share is this much above the mean is reported: at each epoch's end the
# workers with more to read carry on alone, while the others' prefetch stands empty.
UNEVEN_SPLIT = 1.25


def uneven(shares: list[int] | None) -> bool:
    """An epoch's split whose largest share is more than UNEVEN_SPLIT times the mean (every
    worker given some: one given none is idle, said on its own)."""
    if not shares or len(shares) < 2 or min(shares) == 0:
        return False
    return max(shares) > UNEVEN_SPLIT * sum(shares) / len(shares)


def worker_warnings(run: Run, opts: BenchOptions, export: dict[str, Any]) -> list[str]:
    """Loader workers that delivered no samples, and an epoch split far from even, with the
    reason where the export's `inspect` summary shows it."""
    out = []
    w, idle = run["workers"], run.get("idle_workers", [])
    units, unit_name = export.get("units", 0), export.get("unit_name", "units")
    has_units = fmt.plural(units, unit_name[:-1], unit_name)  # "3 shards", "1 shard"
    if idle:
        who = (f"{fmt.plural(len(idle), 'loader worker')} of {w} delivered no samples "
               f"(worker{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))})")
        if opts.dataset is not None:
            why = ("your dataset gave them nothing to read (an iterable dataset with fewer "
                   "shards than workers?)")
        elif opts.order == "random":
            n = export.get("samples", 0)
            why = (f"the export has {fmt.plural(n, 'sample')} for {w} workers; use "
                   f"--workers {n} or fewer")
        elif opts.order == "block":
            why = (f"the export's samples make fewer blocks of {opts.block} samples than "
                   "workers; use a smaller --block or fewer --workers")
        elif units < w:
            why = (f"the export has {has_units} for {w} workers; use --workers {units} or an "
                   f"export of more {unit_name}")
        else:
            why = f"the format's own library split the export so (it has {has_units})"
        out.append(f"{who}: {why}; their processes cost memory and start-up for nothing")
    shares = run.get("worker_shares")
    if shares and uneven(shares):
        mean = sum(shares) / len(shares)
        out.append(f"an epoch splits unevenly over {w} workers: {min(shares)} to "
                   f"{max(shares)} samples each, the largest "
                   f"{100 * (max(shares) / mean - 1):.3g}% above the mean; near each epoch's "
                   "end the workers with more carry on alone (use a worker count that divides "
                   f"the export's {has_units} or an export of more, smaller ones)")
    return out
