"""Summary statistics of repeated measurements: median, IQR, bootstrap CI, relative spread.

Rounds of a benchmark are few (3 to 10) and their distribution is unknown and often skewed by a
noisy neighbour, so everything here is rank-based: the median as the location, the interquartile
range as the spread, and a percentile bootstrap of the median for its 95% confidence interval.
The bootstrap takes a seeded numpy Generator, so the same rounds always give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# More resamples than this change the interval's bounds by well under 1% for a handful of rounds.
BOOTSTRAP_RESAMPLES = 2000
# IQR / median above which a figure is flagged as too noisy to compare.
SPREAD_WARNING = 0.10


def _values(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("need at least one value")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"values must be finite, got {list(arr)}")
    return arr


def median(values: Sequence[float]) -> float:
    return float(np.median(_values(values)))


def iqr(values: Sequence[float]) -> tuple[float, float]:
    """(first quartile, third quartile), linearly interpolated between order statistics."""
    q1, q3 = np.percentile(_values(values), [25.0, 75.0])
    return float(q1), float(q3)


def bootstrap_ci(values: Sequence[float], rng: np.random.Generator, level: float = 0.95,
                 resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median.

    One value gives a zero-width interval: there is nothing to resample, which the IQR and the
    round count in the result make visible.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    arr = _values(values)
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    medians = np.median(arr[idx], axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(medians, [tail, 100.0 - tail])
    return float(lo), float(hi)


def relative_spread(values: Sequence[float]) -> float:
    """IQR / median: 0.1 means the middle half of the rounds spans 10% of the median."""
    q1, q3 = iqr(values)
    m = median(values)
    if m == 0:
        return 0.0 if q3 == q1 else math.inf
    return (q3 - q1) / abs(m)


@dataclass(frozen=True)
class Summary:
    median: float
    iqr: tuple[float, float]
    ci95: tuple[float, float]
    relative_spread: float


def summarize(values: Sequence[float], seed: int = 0) -> Summary:
    """Median, IQR, 95% bootstrap CI and relative spread, with a Generator seeded by `seed`."""
    return Summary(median(values), iqr(values),
                   bootstrap_ci(values, np.random.default_rng(seed)), relative_spread(values))
