"""The step loop's shortcuts give what the plain computation gives: the GPU timeline is the exact
overlap of every busy interval with every bucket, and a loader that is never late (the ceiling
run, simulated without the loop) steps as the loop does with free batches."""

from __future__ import annotations

import numpy as np
import pytest

from dsbench.model import simulate as sim


def brute_timeline(begin: np.ndarray, busy: np.ndarray, total_s: float, bucket_s: float
                   ) -> np.ndarray:
    edges = np.append(np.arange(0.0, total_s, bucket_s), total_s)
    out = np.zeros(edges.size - 1)
    for a, d in zip(begin.ravel(), busy.ravel(), strict=True):
        lo, hi = np.maximum(edges[:-1], a), np.minimum(edges[1:], a + d)
        out += np.maximum(hi - lo, 0.0)
    return out / begin.shape[1] / np.diff(edges)


@pytest.mark.parametrize("seed", range(4))
def test_busy_timeline_is_the_exact_overlap_with_each_bucket(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps, ranks = 60, 5
    # Intervals from a tenth of a bucket to several buckets long, in order per rank.
    busy = rng.uniform(0.05, 3.5, (steps, ranks))
    gaps = rng.uniform(0.0, 1.2, (steps, ranks))
    begin = np.cumsum(gaps + busy, axis=0) - busy
    total = float((begin + busy).max()) + 0.3
    bucket, got = sim.busy_timeline(begin, busy, total, bucket_s=0.5)
    assert bucket == 0.5
    np.testing.assert_allclose(got, brute_timeline(begin, busy, total, 0.5), atol=1e-12)


def test_busy_timeline_merges_whole_buckets_past_its_maximum() -> None:
    rng = np.random.default_rng(7)
    busy = rng.uniform(0.1, 0.9, (200, 3))
    begin = np.cumsum(np.ones((200, 3)), axis=0) - 1.0
    bucket, got = sim.busy_timeline(begin, busy, 200.0, max_buckets=30, bucket_s=1.0)
    assert bucket == 7.0  # 200 s in at most 30 buckets: 7 whole seconds each
    np.testing.assert_allclose(got, brute_timeline(begin, busy, 200.0, 7.0), atol=1e-12)


def test_busy_bins_added_in_batches_equal_one_batch() -> None:
    rng = np.random.default_rng(3)
    busy = rng.uniform(0.1, 4.0, (300, 4))
    begin = np.cumsum(busy + 0.2, axis=0) - busy
    whole = sim._BusyBins(1.0)
    whole.add(begin, busy)
    parts = sim._BusyBins(1.0)
    for lo in range(0, 300, 37):
        parts.add(begin[lo:lo + 37], busy[lo:lo + 37])
    total = float((begin + busy).max())
    np.testing.assert_allclose(parts.fractions(total, 4)[1], whole.fractions(total, 4)[1],
                               atol=1e-12)


def _normal(mean: float, sd: float) -> sim.Sampler:
    return lambda g, shape: np.maximum(g.normal(mean, sd, shape), 0.0)


@pytest.mark.parametrize("extras", [False, True])
def test_a_loader_that_is_never_late_steps_as_the_loop_with_free_batches(extras: bool) -> None:
    kw = dict(workers=4, prefetch=2, jobs=(1, 8, 32), steps=1300, stall_prob=0.01, stall_s=0.4,
              allreduce_s=_normal(0.02, 0.005), timeline_bucket_s=0.5,
              handover=_normal(0.003, 0.002) if extras else None,
              departure=_normal(0.004, 0.003) if extras else None)
    fast = sim.run(None, _normal(0.25, 0.02), rng=np.random.default_rng(5), **kw)
    loop = sim.run(lambda g, shape: np.zeros(shape), _normal(0.25, 0.02),
                   rng=np.random.default_rng(5), **kw)
    np.testing.assert_allclose(fast.step_s, loop.step_s, rtol=1e-12)
    np.testing.assert_allclose(fast.gpu_util, loop.gpu_util, rtol=1e-12)
    np.testing.assert_allclose(fast.data_wait_share, loop.data_wait_share, atol=1e-12)
    np.testing.assert_allclose(fast.timeline, loop.timeline, atol=1e-9)
