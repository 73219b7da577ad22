"""The figures of a restart, from the batches actually delivered: what was replayed or skipped,
where the order first differs, and how diverse the batches were around the restart.

Everything here works on delivered batches (lists of items: key, label, unit) against those of
the uninterrupted run of the same seed; nothing is derived from K or the batch size.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from dsbench.resume.work import Item

Batches = Sequence[Sequence[Item]]


def order_figures(reference: Batches, delivered: Batches) -> dict[str, Any]:
    """replayed: deliveries beyond the reference's count of that key (seen again in the epoch);
    skipped: reference deliveries that never came; first_divergence: the first step whose
    batch differs from the reference's (null when the two sequences are identical)."""
    ref = Counter(it.key for b in reference for it in b)
    got = Counter(it.key for b in delivered for it in b)
    replayed = sum(max(0, n - ref[k]) for k, n in got.items())
    skipped = sum(max(0, n - got[k]) for k, n in ref.items())
    first = None
    for step in range(max(len(reference), len(delivered))):
        a = [it.key for it in reference[step]] if step < len(reference) else None
        b = [it.key for it in delivered[step]] if step < len(delivered) else None
        if a != b:
            first = step
            break
    return {"replayed": replayed, "skipped": skipped, "first_divergence": first}


def entropy_bits(batch: Sequence[Item]) -> float | None:
    """Shannon entropy of the batch's labels in bits; None when no sample has a label."""
    labels = Counter(it.label for it in batch if it.label is not None)
    n = sum(labels.values())
    if n == 0:
        return None
    return max(0.0, -sum(c / n * math.log2(c / n) for c in labels.values()))


def shards(batch: Sequence[Item]) -> int:
    """Distinct units (shards, or files) the batch's samples came from."""
    return len({it.unit for it in batch})


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _sd(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.stdev(vals) if len(vals) > 1 else None


def diversity(batches: Batches) -> dict[str, Any]:
    """Mean label entropy (bits) and distinct shards per batch over these batches."""
    return {"steps": len(batches), "entropy_bits": _mean([entropy_bits(b) for b in batches]),
            "shards_per_batch": _mean([float(shards(b)) for b in batches])}


def steady_range(steps: int, fill: int) -> tuple[int, int]:
    """Steps of an uninterrupted epoch in steady state: every buffer full, so after the first
    `fill` steps (filling) and before the last `fill` (draining). Empty when there are none."""
    lo, hi = fill, steps - fill
    return (lo, hi) if hi > lo else (0, 0)


def steady(reference: Batches, fill: int) -> dict[str, Any]:
    lo, hi = steady_range(len(reference), fill)
    part = reference[lo:hi]
    ent = [entropy_bits(b) for b in part]
    return {"first_step": lo, "steps": hi - lo, "entropy_bits": _mean(ent),
            "entropy_bits_sd": _sd(ent), "shards_per_batch": _mean([float(shards(b))
                                                                    for b in part])}


def throughput(sizes: Sequence[int], times: Sequence[float], lo: int, hi: int) -> float | None:
    """Samples per second delivered over steps lo+1..hi-1 (the time between batch lo's arrival
    and batch hi-1's); None for fewer than two steps or no time."""
    if hi - lo < 2 or times[hi - 1] <= times[lo]:
        return None
    return sum(sizes[lo + 1:hi]) / (times[hi - 1] - times[lo])


def series(batches: Batches) -> list[float | None]:
    return [None if (h := entropy_bits(b)) is None else round(h, 4) for b in batches]


def total(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """All ranks together: counts add up; times are the slowest rank's (a synchronous step
    waits for it); the first divergence is the earliest."""
    divs = [r["first_divergence"] for r in ranks if r["first_divergence"] is not None]
    ff = [r["fast_forward_s"] for r in ranks if r["fast_forward_s"] is not None]
    states = [r["state_bytes"] for r in ranks if r["state_bytes"] is not None]

    def mean_of(part: str, key: str) -> float | None:
        return _mean([r["diversity"][part][key] for r in ranks])

    return {
        "samples_per_epoch": sum(r["samples_per_epoch"] for r in ranks),
        "first_k_samples": sum(r["first_k_samples"] for r in ranks),
        "replayed": sum(r["replayed"] for r in ranks),
        "skipped": sum(r["skipped"] for r in ranks),
        "first_divergence": min(divs) if divs else None,
        "first_batch_s": max(r["first_batch_s"] for r in ranks),
        "fast_forward_s": max(ff) if ff else None,
        "state_bytes": sum(states) if states else None,
        "entropy_after_bits": mean_of("after", "entropy_bits"),
        "entropy_same_steps_bits": mean_of("same_steps", "entropy_bits"),
        "entropy_steady_bits": mean_of("steady", "entropy_bits"),
        "shards_after": mean_of("after", "shards_per_batch"),
        "shards_steady": mean_of("steady", "shards_per_batch"),
    }
