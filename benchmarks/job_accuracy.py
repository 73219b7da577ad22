"""The cluster model against measured jobs on this machine: docs/job.md's tables.

    python benchmarks/job_accuracy.py EXPORT OUT_DIR

Runs `dsbench job` for an input-bound and a compute-bound configuration at 1, 2 and 4 ranks,
and a rank sweep with stalls (q = 0.02, 0.2 s) at 1, 2, 4 and 8 ranks, keeps every result
document in OUT_DIR and prints markdown tables of measured against modelled figures, each with
the machine's load average when it ran. EXPORT needs at least 8 units (shards).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CONFIGS = {
    "input-bound": ["--workers", "1", "--batch-size", "32", "--compute", "normal:0.01,0.002"],
    "compute-bound": ["--workers", "1", "--batch-size", "8", "--compute", "normal:0.04,0.004"],
}
STALLS = ["--workers", "1", "--batch-size", "4", "--compute", "0.04", "--stall-prob", "0.02",
          "--stall-time", "0.2"]


def job(export: str, out: Path, args: list[str]) -> dict[str, Any]:
    load = os.getloadavg()[0]
    subprocess.run([sys.executable, "-m", "dsbench", "job", export, *args, "--json", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["load_before"] = load
    return doc


def ms(x: float) -> str:
    return f"{1e3 * x:.1f} ms"


def main(export: str, out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print("| configuration | ranks | mean step measured / model (ratio) | utilization measured "
          "/ model (ratio) | p99 step measured / model (ratio) | time-sharing measured / "
          "model | from CPU: mean, p99 (ratios) | load 1 min |")
    print("|---|---|---|---|---|---|---|---|")
    for name, args in CONFIGS.items():
        for ranks in (1, 2, 4):
            d = job(export, out / f"{name}-{ranks}.json",
                    [*args, "--ranks", str(ranks), "--steps", "300"])
            m, r = d["model"]["prediction"], d["model"]["ratios"]
            ts = d["model"]["time_sharing"]
            via = d["model"]["from_cpu"]
            st = d["step_time_s"]
            print(f"| {name} | {ranks} | {ms(st['mean'])} / {ms(m['step_time_s']['mean'])} "
                  f"({r['mean']:.3f}) | {100 * d['gpu_util']:.1f}% / "
                  f"{100 * m['gpu_util']:.1f}% ({r['gpu_util']:.3f}) | {ms(st['p99'])} / "
                  f"{ms(m['step_time_s']['p99'])} ({r['p99']:.3f}) | "
                  f"{ts['measured']:.2f}x / {ts['model']:.2f}x | "
                  f"{ms(via['step_time_s']['mean'])}, {ms(via['step_time_s']['p99'])} "
                  f"({via['ratios']['mean']:.3f}, {via['ratios']['p99']:.3f}) | "
                  f"{d['load_before']:.2f} → {d['machine']['load_avg_1m']:.2f} |", flush=True)
    d = job(export, out / "stalls.json", [*STALLS, "--ranks-sweep", "1,2,4,8", "--steps", "500"])
    print()
    print("| ranks | steps | slow steps measured | 1 - (1 - q)^N | difference | model "
          "(simulated) | p99 measured / model |")
    print("|---|---|---|---|---|---|---|")
    for row in d["sweep"]:
        diff = row["slow_step_fraction"] - row["independent_fraction"]
        print(f"| {row['ranks']} | {row['steps']} | {100 * row['slow_step_fraction']:.1f}% | "
              f"{100 * row['independent_fraction']:.1f}% | {100 * diff:+.1f} points | "
              f"{100 * row['model_slow_step_fraction']:.1f}% | {ms(row['p99_s'])} / "
              f"{ms(row['model_p99_s'])} |")
    print(f"\nload average (1 min) before the sweep {d['load_before']:.2f}, at its end "
          f"{d['machine']['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
