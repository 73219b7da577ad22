"""Speed of the cluster model's Monte-Carlo: 128 ranks x 10,000 steps within 2 s.

Run with `python -m pytest -n 0 benchmarks/test_cluster_speed.py --benchmark-enable` (one
process: pytest-benchmark times nothing under the suite's two); under the
project's default `--benchmark-disable` the body runs once and is timed with perf_counter.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from dsbench.model.cluster import simulate
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.node import ClusterSpec

BUDGET_S = 2.0
RANKS, STEPS = 128, 10_000


COMPUTE_S, JITTER_S, STALL_PROB, STALL_S = 0.25, 0.01, 0.001, 0.5


def expected_max_normal(n: int, steps: int = 16_000) -> float:
    """E[max of n standard normals], by the midpoint rule over [-8, 8]."""
    h, total = 16.0 / steps, 0.0
    for i in range(steps):
        x = -8.0 + (i + 0.5) * h
        pdf = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * pdf * cdf ** (n - 1) * h
    return total


def expected_mean_step() -> float:
    """Every step waits for the slowest rank: a stalled step takes the stall and its compute,
    any other the largest of 128 ranks' compute times."""
    stalled = 1 - (1 - STALL_PROB) ** RANKS
    plain = COMPUTE_S + JITTER_S * expected_max_normal(RANKS)
    return stalled * (STALL_S + COMPUTE_S) + (1 - stalled) * plain


def _run() -> float:
    # Jitter and stalls over a loader with headroom, so every part of the step loop does work.
    cost = LoaderCost.stated(0.03, 0.5)
    cluster = ClusterSpec(nodes=RANKS // 8, gpus_per_node=8, workers_per_gpu=8,
                          compute=Distribution("normal", COMPUTE_S, JITTER_S),
                          stall_prob=STALL_PROB, stall_s=STALL_S)
    res = simulate(cost, cluster, np.random.default_rng(0), steps=STEPS)
    return res.stats(RANKS)["mean"]


def test_128_ranks_by_10000_steps_within_budget(benchmark: BenchmarkFixture) -> None:
    benchmark.extra_info.update({"ranks": RANKS, "steps": STEPS, "budget_s": BUDGET_S})
    start = time.perf_counter()
    mean = benchmark.pedantic(_run, rounds=3, warmup_rounds=1, iterations=1)
    # Disabled, pedantic runs the body once, untimed: time that one run here.
    elapsed = (time.perf_counter() - start) if benchmark.disabled else benchmark.stats.stats.median
    assert mean == pytest.approx(expected_mean_step(), rel=0.02)
    assert elapsed <= BUDGET_S, f"{elapsed:.2f} s for {RANKS} ranks x {STEPS} steps"
