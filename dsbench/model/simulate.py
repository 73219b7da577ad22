"""Monte-Carlo of a synchronous data-parallel job whose ranks are fed by DataLoader worker pools.

Per rank, as in PyTorch's multi-process DataLoader: W workers build whole batches; batch k goes to
worker k mod W; at most W x prefetch batches are outstanding, so batch k is handed to its worker
when the rank takes batch k - W x prefetch (the first W x prefetch are handed out at t = 0); the
rank takes batches strictly in order. Per step every rank takes its next batch (waiting if it is
not built yet), computes, may stall, and all ranks of the job meet at the all-reduce:

    finish[k] = max(finish[k - W], taken[k - W x prefetch]) + cost[k]      (per rank)
    taken[s]  = max(step_start[s] + departure[s], finish[s]) + handover[s]
    step_end[s] = max over ranks (taken[s] + compute[s] + stall[s]) + allreduce[s]

The loop runs over steps; each step is a handful of numpy operations over every rank of every
simulated job at once. Several jobs (rank counts) run side by side in one pass: rank j of every
job draws from column j of the same random arrays (common random numbers), so a bigger job is the
smaller one plus more ranks, and rank counts compare without independent noise. Times are kept
relative to the current step's start, so step durations come out exactly, not as differences of
large clock values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dsbench import stats

# Draws an array of the given (steps, ranks) shape, in seconds.
Sampler = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]

_CHUNK = 512  # steps of random numbers drawn at a time: bounded memory, same draws for any length
MAX_TIMELINE_BUCKETS = 20_000


@dataclass(frozen=True)
class SimResult:
    """Step durations of each simulated job and the GPU timeline of one of them.

    `step_s[:, g]` holds the measured steps (after `warmup`) of the job with `ranks[g]` ranks.
    """

    ranks: tuple[int, ...]
    warmup: int
    step_s: np.ndarray
    start_s: np.ndarray  # per job: when the first counted step starts (the warmup's length)
    gpu_util: np.ndarray  # per job: total compute / (ranks x total step time), measured steps
    data_wait_share: np.ndarray  # per job: step time lost to late batches / step time
    timeline_ranks: int
    timeline_bucket_s: float
    timeline: np.ndarray  # mean GPU busy fraction of the timeline job, per bucket, from t = 0

    def column(self, ranks: int) -> int:
        return self.ranks.index(ranks)

    def stats(self, ranks: int) -> dict[str, float]:
        return stats.distribution(self.step_s[:, self.column(ranks)])


def run(sample_cost: Sampler, sample_compute: Sampler, *, workers: int, prefetch: int,
        jobs: Sequence[int], steps: int, rng: np.random.Generator,
        allreduce_s: float | Sampler = 0.0, handover: Sampler | None = None,
        departure: Sampler | None = None,
        stall_prob: float = 0.0, stall_s: float = 0.0,
        timeline_job: int | None = None, timeline_bucket_s: float = 1.0) -> SimResult:
    """Simulate `steps` steps of each job in `jobs` (rank counts), all in one vectorised pass.

    `sample_cost` gives the wall seconds one worker takes to build a batch, `sample_compute` the GPU
    seconds of a step. `allreduce_s` is a fixed time after the slowest rank, or a Sampler drawn
    once per step (shape (steps, 1): every job's step s gets the same draw, as the rank draws
    are common to the jobs too). `handover` draws, per rank and step, the time a rank takes to
    have a batch that is built and asked for (none when not given); `departure`, per rank and
    step, how long after the first rank to leave the previous all-reduce this one left it (its
    step starts then; none when not given). The first
    `workers x prefetch` steps (the loader's start, when every outstanding batch was handed out
    at once) are simulated but not counted.
    """
    sizes = sorted(set(int(n) for n in jobs))
    tl_ranks = sizes[-1] if timeline_job is None else int(timeline_job)
    if tl_ranks not in sizes:
        sizes = sorted({*sizes, tl_ranks})
    window = workers * prefetch
    warmup = window
    n_jobs, max_ranks = len(sizes), sizes[-1]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
    total = int(sum(sizes))
    col = np.concatenate([np.arange(n) for n in sizes])  # rank j of every job -> column j
    job_of = np.repeat(np.arange(n_jobs), sizes)
    tl = sizes.index(tl_ranks)
    tl_cols = slice(int(starts[tl]), int(starts[tl]) + tl_ranks)

    # Per rank: finish time of each worker's latest batch, and when each outstanding batch was
    # handed out; both relative to the current step's start (zeros: everything starts at t = 0).
    finish = np.zeros((workers, total))
    handed = np.zeros((window, total))
    step_end = np.empty((steps, n_jobs))
    lost = np.empty((steps, n_jobs))
    compute_sum = np.empty((steps, n_jobs))
    tl_taken = np.empty((steps, tl_ranks))
    tl_compute = np.empty((steps, tl_ranks))
    taken_buf = np.empty((_CHUNK, total))

    for s0 in range(0, steps, _CHUNK):
        n = min(_CHUNK, steps - s0)
        cost = sample_cost(rng, (n, max_ranks))[:, col]
        compute = sample_compute(rng, (n, max_ranks))[:, col]
        reduce = allreduce_s(rng, (n, 1)) if callable(allreduce_s) \
            else np.full((n, 1), allreduce_s)
        # None when not given: the extrapolator's loop pays nothing for them.
        hand = None if handover is None else handover(rng, (n, max_ranks))[:, col]
        leave = None if departure is None else departure(rng, (n, max_ranks))[:, col]
        arrive = compute
        if stall_prob > 0:
            stalled = rng.random((n, max_ranks)) < stall_prob
            arrive = compute + np.where(stalled, stall_s, 0.0)[:, col]
        for i in range(n):
            s = s0 + i
            w, slot = s % workers, s % window
            done = np.maximum(finish[w], handed[slot])
            done += cost[i]
            finish[w] = done
            taken = np.maximum(done, 0.0 if leave is None else leave[i])
            if hand is not None:
                taken += hand[i]
            taken_buf[i] = taken
            end = np.maximum.reduceat(taken + arrive[i], starts)
            end += reduce[i]
            step_end[s] = end
            handed[slot] = taken  # batch s + window is handed out when batch s is taken
            rebase = end[job_of]
            finish -= rebase
            handed -= rebase
        # Time each step lost to data: its length minus the step a never-late loader (and a
        # free hand-over) gives.
        ideal = np.maximum.reduceat(arrive if leave is None else arrive + leave, starts,
                                    axis=1) + reduce
        lost[s0:s0 + n] = step_end[s0:s0 + n] - ideal
        compute_sum[s0:s0 + n] = np.add.reduceat(compute, starts, axis=1)
        tl_taken[s0:s0 + n] = taken_buf[:n, tl_cols]
        tl_compute[s0:s0 + n] = compute[:, tl_cols]

    counted = slice(warmup, steps)
    sizes_arr = np.asarray(sizes, dtype=float)
    step_total = step_end[counted].sum(axis=0)
    util = compute_sum[counted].sum(axis=0) / (sizes_arr * step_total)
    wait_share = np.maximum(lost[counted], 0.0).sum(axis=0) / step_total
    step_start = np.concatenate([[0.0], np.cumsum(step_end[:, tl])[:-1]])
    bucket_s, timeline = busy_timeline(step_start[:, None] + tl_taken, tl_compute,
                                       float(step_end[:, tl].sum()),
                                       bucket_s=timeline_bucket_s)
    return SimResult(ranks=tuple(sizes), warmup=warmup, step_s=step_end[counted].copy(),
                     start_s=step_end[:warmup].sum(axis=0),
                     gpu_util=util, data_wait_share=wait_share, timeline_ranks=tl_ranks,
                     timeline_bucket_s=bucket_s, timeline=timeline)


def busy_timeline(begin: np.ndarray, busy: np.ndarray, total_s: float,
                  max_buckets: int = MAX_TIMELINE_BUCKETS, bucket_s: float = 1.0
                  ) -> tuple[float, np.ndarray]:
    """Mean busy fraction over ranks per time bucket, from intervals [begin, begin + busy).

    `begin` and `busy` are (steps, ranks); each rank's intervals are in order and do not overlap.
    Buckets are `bucket_s`, or a whole multiple of it when those would exceed `max_buckets`.
    Exact: the busy time up to t is a prefix sum plus the part of the interval straddling t.
    """
    steps, ranks = begin.shape
    if total_s <= 0 or steps == 0:
        return bucket_s, np.zeros(0)
    bucket = bucket_s * max(1, int(np.ceil(total_s / max_buckets / bucket_s)))
    edges = np.arange(0.0, total_s, bucket)
    edges = np.append(edges, total_s)
    a = np.ascontiguousarray(begin.T)
    d = np.ascontiguousarray(busy.T)
    before = np.cumsum(d, axis=1) - d  # busy time of each rank before each of its intervals
    offset = total_s + float(d.max()) + 1.0  # separates the ranks on one sorted axis
    shift = offset * np.arange(ranks)[:, None]
    flat_a = (a + shift).ravel()
    queries = (edges[None, :] + shift).ravel()
    idx = np.searchsorted(flat_a, queries, side="right") - 1
    first = np.repeat(np.arange(ranks) * steps, edges.size)
    valid = idx >= first
    idx = np.where(valid, idx, 0)
    upto = before.ravel()[idx] + np.minimum(queries - flat_a[idx], d.ravel()[idx])
    upto = np.where(valid, upto, 0.0).reshape(ranks, edges.size)
    per_bucket = np.diff(upto, axis=1).mean(axis=0) / np.diff(edges)
    return bucket, np.clip(per_bucket, 0.0, 1.0)
