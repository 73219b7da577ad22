"""A/A comparisons beside a neighbour that comes and goes: none may be called a significant
difference without a disturbance warning.

    python benchmarks/disturbed_aa.py OUT_DIR [RUNS]

Writes a before-like export (formats/before.toml, 400 samples) under OUT_DIR, then RUNS times
(default 20) compares it with itself in one interleaved run (1 loader worker, batches of 32, 6
rounds of 0.5 s per side) while a neighbour, a busy loop in its own process, switches on and off
at random (on and off for exponentially distributed times, mean 0.7 s each, seeded per run).
Prints a line per run (CPU per sample and samples/s: ratio, interval, change; the pairs found
disturbed) and exits 1 if a run called a timing significant without a disturbance warning.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from dsbench.analysis.compare import compare
from dsbench.export.generate import generate
from dsbench.export.spec import FORMATS_DIR, load_spec
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches

OPTS = BenchOptions(workers=(1,), batch_size=32, seconds=0.5, rounds=6)
TIMED = ("cpu_s_per_sample", "samples_per_s")
NEIGHBOUR = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.expovariate(1 / 0.7)
    while time.monotonic() < end:
        pass
    time.sleep(rng.expovariate(1 / 0.7))
"""


def one(path: Path, seed: int) -> tuple[bool, str]:
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(seed)])
    try:
        base, cand = run_benches([path, path], OPTS)
    finally:
        neighbour.kill()
        neighbour.wait()
    run: dict[str, Any] = compare(base, cand)["runs"][0]
    d = run["disturbance"] or {}
    warned = bool(d.get("disturbed")) or bool(d.get("steady"))
    said = []
    found = False
    for m in run["metrics"]:
        if m["metric"] not in TIMED:
            continue
        ci = m["ratio_ci95"]
        found |= bool(m["significant"])
        ratio = "-" if m["ratio"] is None else f"{m['ratio']:.3f}x"
        said.append(f"{m['label']} {ratio}" + (
            f" ({ci[0]:.3f}x to {ci[1]:.3f}x)" if ci else " (no interval)") + f" {m['change']}")
    how = ("steady: other programs busier on one side" if d.get("steady") else
           f"disturbed pairs {[i + 1 for i in d.get('disturbed', [])]}")
    return (not found or warned), f"{'; '.join(said)}; {how}"


def main(out_dir: str, runs: int) -> int:
    path = Path(out_dir) / "before"
    generate(load_spec(FORMATS_DIR / "before.toml"), path, samples=400)
    bad = 0
    for seed in range(runs):
        ok, line = one(path, seed)
        bad += not ok
        print(f"run {seed + 1}: {'ok' if ok else 'FINDING WITHOUT A WARNING'}: {line}",
              flush=True)
    print(f"{runs - bad} of {runs} runs: no significant difference without a disturbance "
          "warning")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20))
