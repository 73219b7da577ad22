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
on a clock that restarts with each chunk of 512 steps, so step durations come out as
differences of small clock values, exact to about 1e-13 s.
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


def run(sample_cost: Sampler | None, sample_compute: Sampler, *, workers: int, prefetch: int,
        jobs: Sequence[int], steps: int, rng: np.random.Generator,
        allreduce_s: float | Sampler = 0.0, handover: Sampler | None = None,
        departure: Sampler | None = None,
        stall_prob: float = 0.0, stall_s: float = 0.0,
        timeline_job: int | None = None, timeline_bucket_s: float = 1.0) -> SimResult:
    """Simulate `steps` steps of each job in `jobs` (rank counts), all in one vectorised pass.

    `sample_cost` gives the wall seconds one worker takes to build a batch (None: a loader that
    is never late), `sample_compute` the GPU seconds of a step. `allreduce_s` is a fixed time
    after the slowest rank, or a Sampler drawn once per step (shape (steps, 1): every job's step
    s gets the same draw, as the rank draws are common to the jobs too). `handover` draws, per
    rank and step, the time a rank takes to have a batch that is built and asked for (none when
    not given); `departure`, per rank and step, how long after the first rank to leave the
    previous all-reduce this one left it (its step starts then; none when not given). The first
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
    job_of = np.repeat(np.arange(n_jobs), sizes)
    tl = sizes.index(tl_ranks)
    tl_cols = slice(int(starts[tl]), int(starts[tl]) + tl_ranks)

    # Per rank: finish time of each worker's latest batch, and when each outstanding batch was
    # handed out; both on the job's clock, which restarts at 0 with each chunk of steps (zeros:
    # everything starts at t = 0). Moving the rows to each step's start cost most of the loop's
    # time; once per chunk keeps the clock small, so step durations lose nothing to rounding.
    finish = np.zeros((workers, total))
    handed = np.zeros((window, total))
    step_end = np.empty((steps, n_jobs))
    lost = np.empty((steps, n_jobs))
    compute_sum = np.empty((steps, n_jobs))
    taken_buf = np.empty((_CHUNK, total))
    # The timeline job's busy seconds per bucket of timeline_bucket_s, filled chunk by chunk.
    busy = _BusyBins(timeline_bucket_s)
    clock = 0.0  # the timeline job's time at the start of the chunk

    last = np.asarray(sizes) - 1  # each job's last column of a (steps, max_ranks) draw

    def spread(x: np.ndarray) -> np.ndarray:
        """(n, max_ranks) draws -> (n, total): every job's columns are the first of x's."""
        out = np.empty((x.shape[0], total))
        for first, size in zip(starts, sizes, strict=True):
            out[:, first:first + size] = x[:, :size]
        return out

    for s0 in range(0, steps, _CHUNK):
        n = min(_CHUNK, steps - s0)
        cost = None if sample_cost is None else spread(sample_cost(rng, (n, max_ranks)))
        compute = sample_compute(rng, (n, max_ranks))
        reduce = allreduce_s(rng, (n, 1)) if callable(allreduce_s) \
            else np.full((n, 1), allreduce_s)
        # None when not given: the extrapolator's loop pays nothing for them.
        hand = None if handover is None else handover(rng, (n, max_ranks))
        leave = None if departure is None else departure(rng, (n, max_ranks))
        arrive = compute
        if stall_prob > 0:
            stalled = rng.random((n, max_ranks)) < stall_prob
            arrive = compute + np.where(stalled, stall_s, 0.0)
        wide_hand = None if hand is None else spread(hand)
        wide_leave = None if leave is None else spread(leave)
        if cost is None:
            start = _never_late(taken_buf[:n], step_end[s0:s0 + n], spread(arrive), wide_hand,
                                wide_leave, starts, job_of, reduce)
        else:
            start = _steps(taken_buf, step_end, s0, finish, handed, cost, spread(arrive),
                           wide_hand, wide_leave, starts, job_of, reduce)
        # Time each step lost to data: its length minus the step a never-late loader (and a
        # free hand-over) gives. Per job, over its ranks: the first columns of the draws.
        ideal = np.maximum.accumulate(arrive if leave is None else arrive + leave, axis=1)
        late = step_end[s0:s0 + n] - (ideal[:, last] + reduce)
        # Under a nanosecond is the chunk clock's rounding, not a wait.
        lost[s0:s0 + n] = np.where(late > 1e-9, late, 0.0)
        compute_sum[s0:s0 + n] = np.cumsum(compute, axis=1)[:, last]
        busy.add(clock + taken_buf[:n, tl_cols], compute[:, :tl_ranks])
        clock += float(start[tl])

    counted = slice(warmup, steps)
    sizes_arr = np.asarray(sizes, dtype=float)
    step_total = step_end[counted].sum(axis=0)
    util = compute_sum[counted].sum(axis=0) / (sizes_arr * step_total)
    wait_share = lost[counted].sum(axis=0) / step_total
    bucket_s, timeline = busy.fractions(float(step_end[:, tl].sum()), tl_ranks)
    return SimResult(ranks=tuple(sizes), warmup=warmup, step_s=step_end[counted].copy(),
                     start_s=step_end[:warmup].sum(axis=0),
                     gpu_util=util, data_wait_share=wait_share, timeline_ranks=tl_ranks,
                     timeline_bucket_s=bucket_s, timeline=timeline)


def _steps(taken_buf: np.ndarray, step_end: np.ndarray, s0: int, finish: np.ndarray,
           handed: np.ndarray, cost: np.ndarray, arrive: np.ndarray, hand: np.ndarray | None,
           leave: np.ndarray | None, starts: np.ndarray, job_of: np.ndarray,
           reduce: np.ndarray) -> np.ndarray:
    """One chunk of steps, from s0: fills taken_buf (when each rank took its batch, on the
    chunk's clock) and step_end; moves finish and handed to the next chunk's clock. Returns
    each job's time at the chunk's end."""
    workers, window = finish.shape[0], handed.shape[0]
    arrived = np.empty(finish.shape[1])
    start = np.zeros(starts.size)  # each job's current step start, on the chunk's clock
    start_col = np.zeros(finish.shape[1])
    for i in range(arrive.shape[0]):
        s = s0 + i
        row, taken = finish[s % workers], taken_buf[i]
        np.maximum(row, handed[s % window], out=row)
        row += cost[i]
        if leave is None:
            np.maximum(row, start_col, out=taken)
        else:
            np.maximum(row, start_col + leave[i], out=taken)
        if hand is not None:
            taken += hand[i]
        np.add(taken, arrive[i], out=arrived)
        end = np.maximum.reduceat(arrived, starts)
        end += reduce[i]
        np.subtract(end, start, out=step_end[s])
        start = end
        start_col = end[job_of]
        handed[s % window] = taken  # batch s + window is handed out when batch s is taken
    finish -= start_col
    handed -= start_col
    return start


def _never_late(taken: np.ndarray, step_end: np.ndarray, arrive: np.ndarray,
                hand: np.ndarray | None, leave: np.ndarray | None, starts: np.ndarray,
                job_of: np.ndarray, reduce: np.ndarray) -> np.ndarray:
    """_steps for a loader that is never late: every batch is built before it is asked for,
    so a rank takes it as its step starts (plus its departure and hand-over), and the steps
    need no loop."""
    late = np.zeros(arrive.shape) if leave is None else leave.copy()
    if hand is not None:
        late += hand
    step_end[:] = np.maximum.reduceat(late + arrive, starts, axis=1) + reduce
    begin = np.cumsum(step_end, axis=0) - step_end
    taken[:] = begin[:, job_of] + late
    return begin[-1] + step_end[-1]


class _BusyBins:
    """Busy seconds summed over ranks per time bucket of `width` from t = 0, from intervals
    [begin, begin + busy) added in any number of batches. Exact: an interval adds its overlap
    with each bucket it touches (its head, its tail, and the whole buckets between)."""

    def __init__(self, width: float) -> None:
        self.width = width
        self.sums = np.zeros(1024)

    def add(self, begin: np.ndarray, busy: np.ndarray) -> None:
        a = begin.ravel()
        d = busy.ravel()
        if a.size == 0:
            return
        first = np.floor(a * (1.0 / self.width)).astype(np.intp)
        lo = int(first.min())
        need = int(first.max()) + int(np.ceil(float(d.max()) / self.width)) + 2
        if need > self.sums.size:
            grown = np.zeros(max(need, 2 * self.sums.size))
            grown[:self.sums.size] = self.sums
            self.sums = grown
        # Binned over this batch's own buckets (lo .. need), not the whole run's: a batch
        # costs what it holds, however long the run has been.
        size = need - lo
        part = self.sums[lo:need]
        # Each interval to the bucket it starts in; then the few that run past that bucket's
        # end move their excess on.
        part += np.bincount(first - lo, weights=d, minlength=size)
        edge = (first + 1) * self.width
        over = a + d > edge
        if not over.any():
            return
        a, e, first, edge = a[over], (a + d)[over], first[over], edge[over]
        last = np.maximum(np.floor(e * (1.0 / self.width)).astype(np.intp), first + 1)
        part -= np.bincount(first - lo, weights=e - edge, minlength=size)
        part += np.bincount(last - lo, weights=e - last * self.width, minlength=size)
        # Whole buckets first + 1 .. last - 1: +1 where the run starts, -1 past its end.
        runs = np.bincount(first + 1 - lo, minlength=size) - np.bincount(last - lo,
                                                                         minlength=size)
        part += np.cumsum(runs)[:size] * self.width

    def fractions(self, total_s: float, ranks: int, max_buckets: int = MAX_TIMELINE_BUCKETS
                  ) -> tuple[float, np.ndarray]:
        """(bucket, mean busy fraction over `ranks` per bucket up to total_s). Buckets are
        `width`, or a whole multiple of it when those would exceed `max_buckets`."""
        if total_s <= 0:
            return self.width, np.zeros(0)
        merge = max(1, int(np.ceil(total_s / max_buckets / self.width)))
        bucket = self.width * merge
        edges = np.append(np.arange(0.0, total_s, bucket), total_s)
        count = edges.size - 1
        sums = np.zeros(count * merge)
        keep = min(sums.size, self.sums.size)
        sums[:keep] = self.sums[:keep]
        per_bucket = sums.reshape(count, merge).sum(axis=1) / ranks / np.diff(edges)
        return bucket, np.clip(per_bucket, 0.0, 1.0)


def busy_timeline(begin: np.ndarray, busy: np.ndarray, total_s: float,
                  max_buckets: int = MAX_TIMELINE_BUCKETS, bucket_s: float = 1.0
                  ) -> tuple[float, np.ndarray]:
    """Mean busy fraction over ranks per time bucket, from intervals [begin, begin + busy).

    `begin` and `busy` are (steps, ranks). Buckets are `bucket_s`, or a whole multiple of it
    when those would exceed `max_buckets`.
    """
    steps, ranks = begin.shape
    if total_s <= 0 or steps == 0:
        return bucket_s, np.zeros(0)
    bins = _BusyBins(bucket_s)
    bins.add(begin, busy)
    return bins.fractions(total_s, ranks, max_buckets)
