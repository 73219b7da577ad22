"""Statistics of repeated measurements whose "95%" is what it says.

A benchmark has few rounds (3 to 10) and their noise is multiplicative: a busier machine slows
a round by a fraction, not by a fixed amount. So throughput, CPU per sample and memory are
summarised on logarithms: the centre is the geometric mean of the rounds, and every interval is
Student's t on log values, exponentiated.

* One export: geometric mean and `exp(mean(log x) +/- t(n-1) sd/sqrt(n))`.
* Two exports measured in one run: their rounds are interleaved (A B, then B A, ...), so round
  i of each is a pair that saw the same machine; the ratio's interval is a paired t on the
  per-round log ratios. Pairing cancels what the pair shares (a neighbour, throttling, drift).
* Two exports measured apart (two saved results): Welch's t on the log values; with unequal
  round counts Welch's own degrees of freedom are too optimistic, so min(n_A, n_B) - 1.
* Additive parts (CPU per stage): a t interval on absolute differences, at the level a family
  of intervals needs (99% for each of five stages keeps the chance that any unchanged stage
  looks moved near 5%).

Calibrated by simulation (tests/test_stats.py, docs/statistics.md): 95% coverage and a 5%
false-positive rate at every round count from 3, under normal, heavy-tailed, correlated and
drifting noise (drift only with the alternating order). A percentile bootstrap of the median,
as used before, covers only ~75% at 3 rounds. The t quantiles come from a table (integer
degrees of freedom up to 30) and Hill's approximation beyond it (Comm. ACM 13(10), 1970,
algorithm 396), so numpy is all this needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

LEVEL = 0.95
Values = Sequence[float] | np.ndarray
# Upper quantiles of Student's t for 1..30 degrees of freedom, to 4 decimals.
_T_TABLE = {
    0.975: (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
            2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
            2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423),
    0.995: (63.6567, 9.9248, 5.8409, 4.6041, 4.0321, 3.7074, 3.4995, 3.3554, 3.2498, 3.1693,
            3.1058, 3.0545, 3.0123, 2.9768, 2.9467, 2.9208, 2.8982, 2.8784, 2.8609, 2.8453,
            2.8314, 2.8188, 2.8073, 2.7969, 2.7874, 2.7787, 2.7707, 2.7633, 2.7564, 2.7500),
}
_NORMAL = {0.975: 1.959963985, 0.995: 2.575829304}
# IQR / median above which a figure is flagged as too noisy to compare.
SPREAD_WARNING = 0.10
# Batches per worker in a round's window below which the window is mostly edge effects.
MIN_WINDOW_BATCHES = 3


def t_quantile(df: float, p: float = 0.975) -> float:
    """The upper `p` quantile (0.5 < p < 1) of Student's t with `df` degrees of freedom: from
    the table at 0.975 and 0.995, else exact at df < 3 and Hill's approximation beyond (the
    intervals of several comparisons at once take other levels)."""
    if not 0.5 < p < 1:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    if not df >= 1:
        raise ValueError(f"need at least one degree of freedom, got {df}")
    if p in _T_TABLE and df < 2:
        return _T_TABLE[p][0]  # rounding down keeps the interval on the wide side
    if p in _T_TABLE and df <= 30 and float(df).is_integer():
        return _T_TABLE[p][int(df) - 1]
    if df < 2:
        return math.tan(math.pi * (p - 0.5))  # df = 1 (rounded down: the wider interval)
    if df < 3:
        # df = 2 exactly (rounded down below 3: the wider interval)
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    # Hill (1970): accurate to 4e-4 relative at df >= 2, to 4e-7 beyond 10.
    n, two_tail = float(df), 2.0 * (1.0 - p)
    a = 1.0 / (n - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2) * n
    y = (d * two_tail) ** (2.0 / n)
    if y > 0.05 + a:
        x = _NORMAL.get(p) or NormalDist().inv_cdf(p)
        y = x * x
        if n < 5:
            c += 0.3 * (n - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = ((((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x)
        y = math.expm1(a * y * y)
    else:
        y = ((1.0 / (((n + 6.0) / (n * y) - 0.089 * d - 0.822) * (n + 2.0) * 3.0)
              + 0.5 / (n + 4.0)) * y - 1.0) * (n + 1.0) / (n + 2.0) + 1.0 / y
    return math.sqrt(n * y)


def _values(values: Values, positive: bool = False) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("need at least one value")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"values must be finite, got {list(arr)}")
    if positive and np.any(arr <= 0):
        raise ValueError(f"values must be positive, got {list(arr)}")
    return arr


@dataclass(frozen=True)
class Interval:
    """An estimate and its confidence interval; `null` is the value that means "no change"."""

    estimate: float
    lo: float
    hi: float
    null: float
    level: float
    method: str

    @property
    def excludes_null(self) -> bool:
        """A difference the rounds can tell from noise: the interval does not hold `null`."""
        return self.lo > self.null or self.hi < self.null

    def as_list(self) -> list[float]:
        return [self.lo, self.hi]


def _t_interval(x: np.ndarray, p: float) -> tuple[float, float, float]:
    m = float(x.mean())
    h = t_quantile(x.size - 1, p) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m, m - h, m + h


def _upper(level: float) -> float:
    return 1.0 - (1.0 - level) / 2.0


def geometric_mean(values: Values) -> float:
    return float(np.exp(np.log(_values(values, positive=True)).mean()))


def location(values: Values, level: float = LEVEL) -> Interval | None:
    """Geometric mean of the rounds and its t interval on logs; None under 2 rounds."""
    y = np.log(_values(values, positive=True))
    if y.size < 2:
        return None
    m, lo, hi = _t_interval(y, _upper(level))
    return Interval(math.exp(m), math.exp(lo), math.exp(hi), math.exp(m), level, "t-log")


def paired_ratio(base: Values, cand: Values, level: float = LEVEL
                 ) -> Interval | None:
    """cand / base from rounds paired by position (measured in one interleaved run)."""
    a, b = _values(base, positive=True), _values(cand, positive=True)
    if a.size != b.size:
        raise ValueError(f"paired rounds must be as many on both sides: {a.size} vs {b.size}")
    if a.size < 2:
        return None
    m, lo, hi = _t_interval(np.log(b) - np.log(a), _upper(level))
    return Interval(math.exp(m), math.exp(lo), math.exp(hi), 1.0, level, "paired-t-log")


def _welch(a: np.ndarray, b: np.ndarray, p: float) -> tuple[float, float]:
    """(difference of means b - a, half-width) by Welch's t."""
    ua, ub = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(ua + ub)
    if a.size != b.size or se == 0:
        df: float = min(a.size, b.size) - 1
    else:
        df = (ua + ub) ** 2 / (ua**2 / (a.size - 1) + ub**2 / (b.size - 1))
    return float(b.mean() - a.mean()), t_quantile(df, p) * se


def unpaired_ratio(base: Values, cand: Values, level: float = LEVEL
                   ) -> Interval | None:
    """cand / base from rounds measured apart: Welch's t on logs; None under 2 rounds a side."""
    a, b = np.log(_values(base, positive=True)), np.log(_values(cand, positive=True))
    if min(a.size, b.size) < 2:
        return None
    m, h = _welch(a, b, _upper(level))
    return Interval(math.exp(m), math.exp(m - h), math.exp(m + h), 1.0, level, "welch-t-log")


def ratio(base: Values, cand: Values, paired: bool, level: float = LEVEL
          ) -> Interval | None:
    if paired:
        return paired_ratio(base, cand, level)
    return unpaired_ratio(base, cand, level)


def difference(base: Values, cand: Values, paired: bool,
               level: float = LEVEL) -> Interval | None:
    """cand - base of an additive figure (e.g. one stage's CPU s/sample), paired or Welch."""
    a, b = _values(base), _values(cand)
    if min(a.size, b.size) < 2:
        return None
    p = _upper(level)
    if paired:
        if a.size != b.size:
            raise ValueError(f"paired rounds must be as many on both sides: {a.size} vs {b.size}")
        m, lo, hi = _t_interval(b - a, p)
        return Interval(m, lo, hi, 0.0, level, "paired-t")
    m, h = _welch(a, b, p)
    return Interval(m, m - h, m + h, 0.0, level, "welch-t")


# --- description ------------------------------------------------------------------------------

def median(values: Values) -> float:
    return float(np.median(_values(values)))


def percentile(values: Values, q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; 0 for no values."""
    if len(values) == 0:
        return 0.0
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def iqr(values: Values) -> tuple[float, float]:
    """(first quartile, third quartile), linearly interpolated between order statistics."""
    q1, q3 = np.percentile(_values(values), [25.0, 75.0])
    return float(q1), float(q3)


def relative_spread(values: Values) -> float:
    """IQR / median: 0.1 means the middle half of the rounds spans 10% of the median."""
    q1, q3 = iqr(values)
    m = median(values)
    if m == 0:
        return 0.0 if q3 == q1 else math.inf
    return (q3 - q1) / abs(m)


def distribution(values: Values) -> dict[str, float]:
    """mean, p50, p99 and max of `values` (all 0 when there are none)."""
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    arr = np.asarray(values, dtype=np.float64)
    p50, p99 = np.percentile(arr, [50, 99])
    return {"mean": float(arr.mean()), "p50": float(p50), "p99": float(p99),
            "max": float(arr.max())}


@dataclass(frozen=True)
class Summary:
    """One figure over the rounds of a run: its centre, interval, quartiles and spread."""

    center: float  # the geometric mean of the rounds
    ci95: tuple[float, float]  # zero-width at one round: nothing to estimate the noise from
    iqr: tuple[float, float]
    relative_spread: float


def summarize(values: Values) -> Summary:
    interval = location(values)
    center = geometric_mean(values)
    ci = (interval.lo, interval.hi) if interval else (center, center)
    return Summary(center, ci, iqr(values), relative_spread(values))
