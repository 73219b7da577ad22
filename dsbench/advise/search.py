"""Measuring the candidates within a budget: successive halving over interleaved runs.

Every pass measures the baseline (the user's export as it is) and the candidates still in the
running in one interleaved run (loader.runner.run_benches), so each round of a candidate has a
round of the baseline beside it on the same machine. The first pass is short and takes every
candidate; a candidate then leaves when another is distinguishably cheaper in CPU per sample
and reads no more bytes and no more files per sample (it is dominated), and of the rest only
the better half by predicted GPU utilization stays. The last pass runs longer rounds, as many
as the budget left allows, and only its rounds make the figures and intervals reported: the
first pass chose which candidates to look at, and reusing its rounds would bias the intervals
of the candidates it favoured.

The intervals of one figure hold for every candidate of the last pass at once: each is taken at
level 1 - 0.05 / K for K candidates (Bonferroni), so the chance that any of them claims a
difference in that figure that is not there stays at most 5% (tests/test_advise.py checks this
on simulated rounds). When the budget leaves fewer than MIN_ROUNDS rounds for a second pass, the
first pass is the one reported: it took every candidate, so its intervals hold as well, wide.
Where the budget is small, the first pass's rounds are shorter (first_seconds).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dsbench import fmt, stats
from dsbench.advise.sequences import in_sequences
from dsbench.analysis.disturbance import disturbance
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches
from dsbench.results.types import BenchResult

FAMILY_LEVEL = stats.LEVEL  # what the intervals of one pass hold together
FIRST_ROUNDS, FIRST_SECONDS = 3, 0.5
MIN_FIRST_SECONDS = 0.1
ROUND_START_S = 0.5  # about what a round costs beyond its window: its workers' start, warm-up
LAST_SECONDS = 1.0
MIN_ROUNDS, MAX_ROUNDS = 4, 12
KEEP_AT_LEAST = 2  # candidates kept after the first pass, dominated ones aside


def level_for(k: int) -> float:
    """Each interval's level so that K of them hold together at FAMILY_LEVEL (Bonferroni)."""
    return 1.0 - (1.0 - FAMILY_LEVEL) / max(1, k)


def first_seconds(budget_s: float, sides: int) -> float:
    """The first pass's window: FIRST_SECONDS, or shorter (down to MIN_FIRST_SECONDS) where the
    budget is small, so that the first pass takes about half of it at most. A round's start
    costs what it costs whatever its window: a budget below that is still overrun."""
    share = budget_s / 2 / (sides * FIRST_ROUNDS) - ROUND_START_S
    return min(FIRST_SECONDS, max(MIN_FIRST_SECONDS, share))


def rounds_of(doc: BenchResult, key: str) -> list[float]:
    return [float(r[key]) for r in doc["runs"][0]["rounds"]]  # type: ignore[literal-required]


def kept_pairs(base: BenchResult, cand: BenchResult) -> list[int] | None:
    """The pairs of rounds a neighbour did not disturb (analysis.disturbance), None: all."""
    d = disturbance(base["runs"][0]["rounds"], cand["runs"][0]["rounds"], True)
    if d and d["disturbed"] and not d["left_in"]:
        return list(d["kept"])
    return None


def ratio(base: BenchResult, cand: BenchResult, key: str, level: float,
          keep: list[int] | None = None) -> stats.Interval | None:
    """cand / base of a timed figure over the undisturbed pairs of one interleaved run
    (`keep`, when the caller has them already)."""
    a, b = rounds_of(base, key), rounds_of(cand, key)
    keep = keep if keep is not None else kept_pairs(base, cand)
    if keep is not None:
        a, b = [a[i] for i in keep], [b[i] for i in keep]
    return stats.paired_ratio(a, b, level)


def dominated(docs: Sequence[BenchResult], level: float) -> set[int]:
    """The candidates (indices into docs, the baseline first and never dropped) that another
    beats: distinguishably less CPU per sample, and no more bytes or files per sample."""
    out = set()
    for j in range(1, len(docs)):
        rj = docs[j]["runs"][0]
        for i in range(1, len(docs)):
            ri = docs[i]["runs"][0]
            if i == j or ri["bytes_per_sample"] > rj["bytes_per_sample"] or \
                    ri["files_per_sample"] > rj["files_per_sample"]:
                continue
            cpu = ratio(docs[j], docs[i], "cpu_s_per_sample", level)
            if cpu is not None and cpu.hi < 1.0:
                out.add(j)
                break
    return out


@dataclass
class Pass:
    """One interleaved run: which candidates (indices into the grid, -1 the baseline), its
    options, its results (the baseline's first) and its wall time."""

    sides: list[int]
    opts: BenchOptions
    docs: list[BenchResult]
    wall_s: float

    def to_json(self, names: Sequence[str]) -> dict[str, Any]:
        return {"candidates": [names[i] if i >= 0 else "baseline" for i in self.sides],
                "rounds": self.opts.rounds, "seconds": self.opts.seconds,
                "wall_s": self.wall_s}


def _run(paths: Sequence[str], sides: list[int], opts: BenchOptions, base_opts: BenchOptions,
         progress: Callable[[str], None]) -> Pass:
    t0 = time.perf_counter()
    each = [base_opts] + [opts] * (len(sides) - 1)
    docs = run_benches([paths[0]] + [paths[i + 1] for i in sides[1:]], opts, progress, each)
    # A packed job's sides compare per sequence: a document and a stream's block are not
    # alike samples (advise.sequences).
    return Pass(sides, opts, [in_sequences(d) for d in docs], time.perf_counter() - t0)


def search(paths: Sequence[str], opts: BenchOptions, base_opts: BenchOptions, budget_s: float,
           rank: Callable[[BenchResult], tuple[float, ...]], progress: Callable[[str], None]
           ) -> list[Pass]:
    """Measure the baseline (paths[0]) and the candidates (paths[1:]) within about
    `budget_s` seconds (the module docstring has how); `rank` scores a result (higher is
    better) to choose which half stays. The last pass is the one to report."""
    k = len(paths) - 1
    started = time.perf_counter()
    sides = [-1, *range(k)]
    passes = []
    if k > KEEP_AT_LEAST:
        seconds = first_seconds(budget_s, len(sides))
        first = dataclasses.replace(opts, rounds=FIRST_ROUNDS, seconds=seconds)
        p = _run(paths, sides, first, dataclasses.replace(base_opts, rounds=FIRST_ROUNDS,
                                                          seconds=seconds), progress)
        passes.append(p)
        out = dominated(p.docs, level_for(k))
        alive = [s for n, s in enumerate(p.sides[1:], 1) if n not in out]
        by_rank = sorted(alive, key=lambda s: rank(p.docs[p.sides.index(s)]), reverse=True)
        sides = [-1, *sorted(by_rank[:max(KEEP_AT_LEAST, math.ceil(len(alive) / 2))])]
        per_round = p.wall_s / (len(p.sides) * first.rounds) + LAST_SECONDS - first.seconds
        left = budget_s - (time.perf_counter() - started)
        rounds = int(left / (len(sides) * per_round))
        if rounds < MIN_ROUNDS:
            progress(f"the budget leaves time for {fmt.plural(max(0, rounds), 'round')} of a "
                     f"second pass, fewer than {MIN_ROUNDS}: reporting the first pass, whose "
                     f"{FIRST_ROUNDS} short rounds give wide intervals (a longer --budget "
                     "narrows them)")
            return passes
    else:
        # Nothing measured yet to size the rounds by: a round of 1 s costs about twice that
        # with its workers' start.
        left = budget_s - (time.perf_counter() - started)
        rounds = max(MIN_ROUNDS, int(left / (len(sides) * 2 * LAST_SECONDS)))
    last = dataclasses.replace(opts, rounds=min(rounds, MAX_ROUNDS), seconds=LAST_SECONDS)
    base_last = dataclasses.replace(base_opts, rounds=last.rounds, seconds=LAST_SECONDS)
    passes.append(_run(paths, sides, last, base_last, progress))
    return passes
