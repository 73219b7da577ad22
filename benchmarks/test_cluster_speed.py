"""Speed of the cluster model's Monte-Carlo: 128 ranks x 10,000 steps within 2 s.

Run with `python -m pytest benchmarks/test_cluster_speed.py --benchmark-enable`; under the
project's default `--benchmark-disable` the body runs once and is timed with perf_counter.
"""

from __future__ import annotations

import time

import numpy as np
from pytest_benchmark.fixture import BenchmarkFixture

from dsbench.model.cluster import simulate
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.node import ClusterSpec

BUDGET_S = 2.0
RANKS, STEPS = 128, 10_000


def _run() -> float:
    # Input-bound with jitter and stalls, so every part of the step loop does real work.
    cost = LoaderCost.stated(0.03, 0.5)
    cluster = ClusterSpec(nodes=RANKS // 8, gpus_per_node=8, workers_per_gpu=8,
                          compute=Distribution.parse("normal:0.25,0.01"), stall_prob=0.001,
                          stall_s=0.5)
    res = simulate(cost, cluster, np.random.default_rng(0), steps=STEPS)
    return res.stats(RANKS)["mean"]


def test_128_ranks_by_10000_steps_within_budget(benchmark: BenchmarkFixture) -> None:
    benchmark.extra_info.update({"ranks": RANKS, "steps": STEPS, "budget_s": BUDGET_S})
    start = time.perf_counter()
    mean = benchmark.pedantic(_run, rounds=3, warmup_rounds=1, iterations=1)
    # Disabled, pedantic runs the body once, untimed: time that one run here.
    elapsed = (time.perf_counter() - start) if benchmark.disabled else benchmark.stats.stats.median
    assert mean > 0.25
    assert elapsed <= BUDGET_S, f"{elapsed:.2f} s for {RANKS} ranks x {STEPS} steps"
