"""Speed of `dsbench extrapolate` as a whole command, at the scales users plan: 1024 GPUs x
10,000 steps within 2 s, 8192 GPUs x 10,000 steps within 15 s (on 2 cores).

Run with `python -m pytest -n 0 benchmarks/test_extrapolate_speed.py --benchmark-enable`. Each
round starts the command in a fresh interpreter, as a user does: imports, the main job with
the scaling jobs beside it, the ceiling run and the what-if search all count. Under the
project's default `--benchmark-disable` the command runs once and is timed with perf_counter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from test_cluster_speed import COMPUTE_S, JITTER_S, STALL_PROB, STALL_S, expected_max_normal

STEPS = 10_000


def expected_mean_step(ranks: int) -> float:
    """A loader with headroom: every step waits for the slowest rank's compute, or a stall."""
    stalled = 1 - (1 - STALL_PROB) ** ranks
    plain = COMPUTE_S + JITTER_S * expected_max_normal(ranks)
    return stalled * (STALL_S + COMPUTE_S) + (1 - stalled) * plain


@pytest.mark.parametrize(("gpus", "budget_s"), [(1024, 2.0), (8192, 15.0)])
def test_extrapolate_at_scale_within_budget(benchmark: BenchmarkFixture, tmp_path: Path,
                                            gpus: int, budget_s: float) -> None:
    out = tmp_path / "model.json"
    cmd = [sys.executable, "-m", "dsbench", "extrapolate", "--cpu-per-sample", "0.03",
           "--cpu-cv", "0.5", "--nodes", str(gpus // 8), "--gpus-per-node", "8",
           "--steps", str(STEPS), "--compute", f"normal:{COMPUTE_S},{JITTER_S}",
           "--stall-prob", str(STALL_PROB), "--stall-time", str(STALL_S), "--json", str(out)]

    def run() -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    benchmark.extra_info.update({"gpus": gpus, "steps": STEPS, "budget_s": budget_s})
    start = time.perf_counter()
    benchmark.pedantic(run, rounds=3, warmup_rounds=1, iterations=1)
    elapsed = (time.perf_counter() - start) if benchmark.disabled else benchmark.stats.stats.median
    doc = json.loads(out.read_text())
    assert doc["ranks"] == gpus and doc["steps"] == STEPS
    assert doc["step_time_s"]["mean"] == pytest.approx(expected_mean_step(gpus), rel=0.02)
    assert elapsed <= budget_s, f"{elapsed:.2f} s for {gpus} GPUs x {STEPS} steps"
