"""`dsbench resume --ranks-after M --workers-after V`: the job restarts on another number of ranks
or workers, as after a lost node, and the audit is over the whole epoch, across all ranks.

The ranks run together, as a job's do: every rank's loader (its worker processes) starts at once
and each step takes one batch from every rank, so the restart's burst (every new rank's workers
opening units at the same moment) is in each rank's time to its first batch.

1. the reference: the epoch on the job's R ranks x W workers, uninterrupted;
2. the job: K steps on them, then each rank's loader state (stateful policy) and the stop;
3. the restart on M ranks x V workers: `none` starts the epoch of the new shape from the
   beginning; `fast-forward` starts it and discards each new rank's first K batches; `stateful`
   deals what the R saved states say is left (reshard.py) to the new ranks and workers, through
   dsbench's loader or, with --backend torch, torchdata's StatefulDataLoader (its workers'
   dataset states are what is resharded: torchdata keeps no state for another worker count).

Replayed and skipped are counted on the union of every rank's deliveries against the union of
the reference's (a set comparison, not per rank), and attributed to the original rank whose
reference epoch held the sample, so that the ranks' figures add up to the job's. A rank's
other figures are the job's rank r with, after the restart, the new rank of the same index
where there is one (its delivered steps, its entropy series); the restart's own figures per new
rank are in `restarted`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dsbench.errors import DsbenchError
from dsbench.loader.order import Plan
from dsbench.resume import figures, reshard
from dsbench.resume.work import Item

Batches = list[list[Item]]


def lockstep(loaders: Sequence[Any], t0: float, steps: int | None = None
             ) -> tuple[list[Batches], list[list[float]]]:
    """Steps of a synchronous job: each takes the next batch of every rank whose epoch is not
    over (until `steps`, or every epoch ends); per rank its batches and their arrival times
    since t0."""
    batches: list[Batches] = [[] for _ in loaders]
    times: list[list[float]] = [[] for _ in loaders]
    active = [True] * len(loaders)
    step = 0
    while any(active) and (steps is None or step < steps):
        for r, loader in enumerate(loaders):
            if not active[r]:
                continue
            batch = loader.next()
            if batch is None:
                active[r] = False
                continue
            times[r].append(time.perf_counter() - t0)
            batches[r].append(batch)
        step += 1
    return batches, times


@contextmanager
def started(make: Callable[[int], Any], ranks: int) -> Iterator[list[Any]]:
    """Every rank's loader, started together and stopped whatever happens in between."""
    loaders: list[Any] = []
    try:
        for r in range(ranks):
            loaders.append(make(r))
        yield loaders
    finally:
        for loader in loaders:
            loader.close()


class Elastic:
    """One elastic measurement: make(plan, rank, policy, state) returns a rank's loader."""

    def __init__(self, plan: Plan, after: Plan, epoch: int, restart_at: int, window: int,
                 policies: Sequence[str], backend: str,
                 make: Callable[[Plan, int, str, dict[str, Any] | None], Any],
                 state_bytes: Callable[[dict[str, Any]], int]) -> None:
        self.plan, self.after, self.epoch, self.k = plan, after, epoch, restart_at
        self.window, self.policies, self.backend = window, policies, backend
        self.make, self.state_bytes = make, state_bytes

    def _loaders(self, plan: Plan, policy: str, states: Sequence[dict[str, Any] | None]
                 ) -> AbstractContextManager[list[Any]]:
        """The loaders of `plan`'s ranks, each from its state in `states`."""
        return started(lambda r: self.make(plan, r, policy, states[r]), plan.ranks)

    def _pieces_state(self, states: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each new rank's loader state: its share of what the saved states leave."""
        from dsbench.resume.torch_loader import worker_states

        per_worker = [worker_states(s) if self.backend == "torch" else s["workers"]
                      for s in states]
        pieces = reshard.remainder(self.plan, self.epoch, per_worker)
        dealt = reshard.deal(pieces, self.plan.seed, self.epoch, self.after.ranks,
                             self.after.workers)
        return [{"epoch": self.epoch, "turn": 0,
                 "workers": [{"pieces": [list(p) for p in mine]} for mine in row]}
                for row in dealt]

    def measure(self, progress: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[str]]:
        plan, k = self.plan, self.k
        none: list[dict[str, Any] | None] = [None] * max(plan.ranks, self.after.ranks)
        progress(f"{plan.ranks} ranks together: the uninterrupted epoch")
        t0 = time.perf_counter()
        with self._loaders(plan, "none", none) as loaders:
            reference, ref_times = lockstep(loaders, t0)
        stateful = "stateful" in self.policies
        progress(f"{plan.ranks} ranks together: {k} steps, then the stop")
        job_states: list[dict[str, Any]] = []
        t0 = time.perf_counter()
        with self._loaders(plan, "stateful" if stateful else "none", none) as loaders:
            job, _ = lockstep(loaders, t0, k)
            if stateful:
                job_states = [loader.state() for loader in loaders]
        owner = {it.key: r for r, batches in enumerate(reference) for b in batches for it in b}
        fill = plan.fill_steps()
        out = []
        for policy in self.policies:
            progress(f"restart on {self.after.ranks} ranks x {self.after.workers} workers: "
                     f"{policy}")
            states: Sequence[dict[str, Any] | None] = none
            if policy == "stateful":
                states = self._pieces_state(job_states)
            t0 = time.perf_counter()
            with self._loaders(self.after, policy, states) as loaders:
                fast_forward_s = None
                if policy == "fast-forward":
                    lockstep(loaders, t0, k)  # fetched and decoded, then thrown away
                    fast_forward_s = time.perf_counter() - t0
                # The burst: every new rank's first steps, and the requests made meanwhile.
                after, after_times = lockstep(loaders, t0, self.window)
                burst = _burst(loaders, after_times)
                rest, rest_times = lockstep(loaders, t0)
            after = [a + b for a, b in zip(after, rest, strict=True)]
            after_times = [a + b for a, b in zip(after_times, rest_times, strict=True)]
            out.append({**self._figures(policy, reference, ref_times, job, after, after_times,
                                        fast_forward_s, job_states, owner, fill),
                        "burst": burst})
        notes = [f"elastic restart: {plan.ranks} rank(s) x {plan.workers} worker(s) before, "
                 f"{self.after.ranks} x {self.after.workers} after; replayed and skipped are "
                 "counted over the whole epoch across all ranks, each sample under the rank "
                 "whose uninterrupted epoch held it"]
        return out, notes

    def _figures(self, policy: str, reference: list[Batches], ref_times: list[list[float]],
                 job: list[Batches], after: list[Batches], after_times: list[list[float]],
                 fast_forward_s: float | None, job_states: list[dict[str, Any]],
                 owner: dict[str, int], fill: int) -> dict[str, Any]:
        k, m = self.k, self.window
        ref = Counter(it.key for batches in reference for b in batches for it in b)
        got = Counter(it.key for batches in (*job, *after) for b in batches for it in b)
        replayed, skipped = Counter[int](), Counter[int]()
        for key, n in got.items():
            if n > ref[key]:
                replayed[owner.get(key, 0)] += n - ref[key]
        for key, n in ref.items():
            if n > got[key]:
                skipped[owner[key]] += n - got[key]
        firsts = [t[0] for t in after_times if t]
        if not firsts:  # --restart-at is checked to be inside the epoch: something remains
            raise DsbenchError(f"the restart ({policy}) delivered no batch")
        first_batch_s = max(firsts)
        # The job's first steps after the restart: every new rank's first m batches.
        early = [b for batches in after for b in batches[:m]]
        m_times = [t[min(m, len(t)) - 1] for t in after_times if t]
        first_rate = (sum(len(b) for b in early) / max(m_times)
                      if m_times and max(m_times) > 0 else None)
        ranks = []
        for r, batches in enumerate(reference):
            sizes = [len(b) for b in batches]
            lo, hi = figures.steady_range(len(batches), fill)
            resumed = job[r] + (after[r] if r < len(after) else [])
            ranks.append({
                "rank": r, "steps_per_epoch": len(batches), "samples_per_epoch": sum(sizes),
                "first_k_samples": sum(sizes[:k]), "replayed": replayed[r],
                "skipped": skipped[r], "first_divergence": None,
                "delivered_steps": len(resumed),
                "first_batch_s": first_batch_s,
                "fast_forward_s": fast_forward_s,
                "state_bytes": (self.state_bytes(job_states[r])
                                if policy == "stateful" and job_states else None),
                "first_steps_samples_per_s": first_rate,
                "steady_samples_per_s": figures.throughput(
                    sizes, ref_times[r], max(lo, 1), hi if hi > lo else len(sizes)),
                "diversity": {"after": figures.diversity(early),
                              "same_steps": figures.diversity(batches[k:k + m]),
                              "steady": figures.steady(batches, fill)},
                "series": {"reference_entropy_bits": figures.series(batches),
                           "resumed_entropy_bits": figures.series(resumed)},
            })
        restarted = [{"rank": r, "delivered_steps": len(batches),
                      "delivered_samples": sum(len(b) for b in batches),
                      "first_batch_s": after_times[r][0] if after_times[r] else None}
                     for r, batches in enumerate(after)]
        return {"policy": policy, "ranks": ranks, "total": figures.total(ranks),
                "restarted": restarted}


def _burst(loaders: Sequence[Any], times: list[list[float]]) -> dict[str, Any]:
    """The restart's first steps across the new ranks: how long they took from the restart and
    how many storage requests the ranks' workers had made by their last batch of them (null
    where the loader does not count them, as torch's)."""
    counts = [loader.requests() for loader in loaders]
    seconds = max((t[-1] for t in times if t), default=0.0)
    requests = None if any(c is None for c in counts) else sum(counts)
    return {"steps": max((len(t) for t in times), default=0), "seconds": seconds,
            "requests": requests,
            "requests_per_s": requests / seconds if requests is not None and seconds > 0
            else None}


def check_shape(plan: Plan, after: Plan) -> None:
    """The new shape must give every worker a unit of the fresh epoch that the `none` and
    `fast-forward` policies start (a `stateful` worker left without a piece just ends)."""
    if after.ranks * after.workers > len(plan.units):
        raise DsbenchError(f"{len(plan.units)} units cannot give {after.ranks} ranks x "
                           f"{after.workers} workers one each after the restart: use fewer "
                           "--ranks-after or --workers-after")

