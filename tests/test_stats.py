"""Round statistics: median, IQR, a seeded bootstrap CI that covers, relative spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dsbench import stats


def test_median_and_iqr_of_known_values() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    # Linear interpolation between order statistics, as numpy's default percentile.
    assert stats.iqr([1.0, 2.0, 3.0, 4.0]) == (1.75, 3.25)
    assert stats.iqr([5.0]) == (5.0, 5.0)


def test_relative_spread_is_iqr_over_median() -> None:
    assert stats.relative_spread([90.0, 100.0, 110.0]) == pytest.approx(0.1)
    assert stats.relative_spread([7.0, 7.0, 7.0]) == 0.0


def test_bootstrap_ci_is_seeded_and_brackets_the_median() -> None:
    values = [10.0, 12.0, 11.0, 13.0, 9.0, 30.0, 11.5]
    a = stats.bootstrap_ci(values, np.random.default_rng(1))
    b = stats.bootstrap_ci(values, np.random.default_rng(1))
    assert a == b
    lo, hi = a
    assert min(values) <= lo <= stats.median(values) <= hi <= max(values)
    assert stats.bootstrap_ci([4.0], np.random.default_rng(0)) == (4.0, 4.0)


def test_bootstrap_ci_covers_the_true_median_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(123)
    trials, hits = 300, 0
    for _ in range(trials):
        sample = rng.lognormal(0.0, 0.5, size=25)  # skewed, true median exp(0) = 1
        lo, hi = stats.bootstrap_ci(list(sample), rng, resamples=1000)
        hits += lo <= 1.0 <= hi
    # The percentile bootstrap of a median is close to nominal for n = 25.
    assert 0.88 <= hits / trials <= 0.99


def test_bootstrap_ci_narrows_with_more_data() -> None:
    rng = np.random.default_rng(7)
    small = rng.normal(100, 10, 8)
    large = rng.normal(100, 10, 400)
    def width(values: np.ndarray) -> float:
        lo, hi = stats.bootstrap_ci(list(values), np.random.default_rng(0))
        return hi - lo
    assert width(large) < width(small) / 3


def test_summarize_bundles_all_figures() -> None:
    s = stats.summarize([100.0, 104.0, 98.0], seed=0)
    assert s.median == 100.0
    assert s.iqr == (99.0, 102.0)
    assert s.ci95[0] <= s.median <= s.ci95[1]
    assert s.relative_spread == pytest.approx(0.03)


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [math.inf]])
def test_bad_values_are_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        stats.median(bad)
    with pytest.raises(ValueError):
        stats.bootstrap_ci(bad, np.random.default_rng(0))
