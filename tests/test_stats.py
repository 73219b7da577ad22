"""dsbench.stats: the intervals, and their calibration on simulated rounds with a known answer.

The calibration tests simulate the default round counts of bench, compare/gate and the demo
with 5% multiplicative noise per round, and check what a "95%" interval promises: it covers
the truth at least 93% of the time, identical exports come out different at most 5% of the
time, and a 10% change is detected at least 90% of the time where the defaults are meant to.
Rates are Monte-Carlo estimates from N seeded simulations; a bound on a rate allows
Z standard errors of that estimate, so the test asks whether the true rate meets the bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dsbench import stats
from dsbench.analysis.compare import STAGE_LEVEL
from dsbench.commands.options import COMPARE_WINDOW
from dsbench.loader.options import BenchOptions
from dsbench.report.demo import DEMO_BENCH

N = 4000
Z = 2.58  # one-sided 99.5%: the bound holds unless the method is really off
NOISE = 0.05
EFFECT = 1.10


def rate(hits: int, n: int = N) -> tuple[float, float]:
    p = hits / n
    return p, Z * math.sqrt(max(p * (1 - p), 1 / n) / n)


def at_most(hits: int, bound: float) -> bool:
    p, se = rate(hits)
    return p - se <= bound


def at_least(hits: int, bound: float) -> bool:
    p, se = rate(hits)
    return p + se >= bound


def rounds(rng: np.random.Generator, n: int, value: float = 1.0, noise: float = NOISE
           ) -> np.ndarray:
    return value * np.exp(rng.normal(0.0, noise, n))


def test_t_quantiles_match_tables_and_are_monotone() -> None:
    assert stats.t_quantile(1) == pytest.approx(12.7062)
    assert stats.t_quantile(9) == pytest.approx(2.2622)
    assert stats.t_quantile(4, 0.995) == pytest.approx(4.6041)
    # Beyond the table: published values of Student's t.
    assert stats.t_quantile(40) == pytest.approx(2.0211, abs=2e-4)
    assert stats.t_quantile(120) == pytest.approx(1.9799, abs=2e-4)
    assert stats.t_quantile(60, 0.995) == pytest.approx(2.6603, abs=2e-4)
    values = [stats.t_quantile(df) for df in (2, 2.5, 3, 7.3, 30, 31.5, 200)]
    assert values == sorted(values, reverse=True)
    with pytest.raises(ValueError):
        stats.t_quantile(0.5)


def test_location_is_the_geometric_mean_with_a_t_interval_on_logs() -> None:
    x = [100.0, 110.0, 121.0]
    loc = stats.location(x)
    assert loc is not None
    assert loc.estimate == pytest.approx(110.0)
    half = stats.t_quantile(2) * np.std(np.log(x), ddof=1) / math.sqrt(3)
    assert (loc.lo, loc.hi) == pytest.approx((110 * math.exp(-half), 110 * math.exp(half)))
    assert stats.location([5.0]) is None  # one round: nothing to estimate the noise from


def test_paired_ratio_uses_the_pairs() -> None:
    # Both sides swing together round to round; the ratio does not move at all.
    base = [100.0, 150.0, 90.0, 130.0]
    cand = [1.2 * b for b in base]
    paired = stats.paired_ratio(base, cand)
    unpaired = stats.unpaired_ratio(base, cand)
    assert paired is not None and unpaired is not None
    assert paired.estimate == pytest.approx(1.2) and paired.hi - paired.lo < 1e-9
    assert unpaired.lo < 1.0 < unpaired.hi  # apart, the swings hide the change


def test_bad_values_are_refused() -> None:
    for bad in ([], [1.0, float("nan")], [1.0, float("inf")]):
        with pytest.raises(ValueError):
            stats.summarize(bad)
    with pytest.raises(ValueError):
        stats.location([1.0, 0.0])  # a ratio of logs needs positive figures
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0, 2.0], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("n", [3, BenchOptions().rounds, 10])
def test_single_export_interval_covers_the_truth(n: int) -> None:
    rng = np.random.default_rng(n)
    covered = 0
    for _ in range(N):
        loc = stats.location(rounds(rng, n, 400.0))
        assert loc is not None
        covered += loc.lo <= 400.0 <= loc.hi
    assert at_least(covered, 0.93)


@pytest.mark.parametrize("n", sorted({COMPARE_WINDOW.rounds, DEMO_BENCH.rounds}))
def test_paired_comparison_at_the_defaults(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    false_pos = covered = detected = 0
    for _ in range(N):
        same = stats.paired_ratio(rounds(rng, n), rounds(rng, n))
        assert same is not None
        false_pos += same.excludes_null
        slower = stats.paired_ratio(rounds(rng, n), rounds(rng, n, EFFECT))
        assert slower is not None
        covered += slower.lo <= EFFECT <= slower.hi
        detected += slower.lo > 1.0
    assert at_most(false_pos, 0.05), rate(false_pos)
    assert at_least(covered, 0.93), rate(covered)
    assert at_least(detected, 0.90), rate(detected)


def test_drift_is_cancelled_by_the_alternating_order() -> None:
    # A machine that slows down 20% over the run: with A B, B A, ... rounds the A/A rate stays
    # at 5%; with A B every round, B is always the later, slower one.
    n, rng = COMPARE_WINDOW.rounds, np.random.default_rng(7)
    slot = np.arange(2 * n).reshape(n, 2)
    drift = np.exp(-0.2 * slot / (2 * n - 1))
    alternating = slot.copy()
    alternating[1::2] = alternating[1::2, ::-1]
    hits = {"fixed": 0, "alternating": 0}
    for _ in range(N):
        noise = np.exp(rng.normal(0, NOISE, (n, 2)))
        for name, order in (("fixed", slot), ("alternating", alternating)):
            x = noise * drift.ravel()[order]
            r = stats.paired_ratio(x[:, 0], x[:, 1])
            assert r is not None
            hits[name] += r.excludes_null
    assert at_most(hits["alternating"], 0.05), rate(hits["alternating"])
    assert not at_most(hits["fixed"], 0.05), rate(hits["fixed"])  # why the runner alternates


@pytest.mark.parametrize(("na", "nb"), [(COMPARE_WINDOW.rounds,) * 2, (3, 8)])
def test_unpaired_comparison_keeps_its_false_positive_rate(na: int, nb: int) -> None:
    rng = np.random.default_rng(na * 10 + nb)
    false_pos = covered = 0
    for _ in range(N):
        # The side with fewer rounds twice as noisy: the case Welch's own df gets wrong.
        same = stats.unpaired_ratio(rounds(rng, na, noise=2 * NOISE), rounds(rng, nb))
        assert same is not None
        false_pos += same.excludes_null
        slower = stats.unpaired_ratio(rounds(rng, na), rounds(rng, nb, EFFECT))
        assert slower is not None
        covered += slower.lo <= EFFECT <= slower.hi
    assert at_most(false_pos, 0.05), rate(false_pos)
    assert at_least(covered, 0.93), rate(covered)


def test_heavy_tailed_noise_keeps_the_false_positive_rate() -> None:
    n, rng = COMPARE_WINDOW.rounds, np.random.default_rng(3)
    false_pos = 0
    for _ in range(N):
        # Student-t(3) noise with the same 5% sd: a neighbour now and then.
        a, b = (np.exp(NOISE / math.sqrt(3) * rng.standard_t(3, n)) for _ in range(2))
        r = stats.paired_ratio(a, b)
        assert r is not None
        false_pos += r.excludes_null
    assert at_most(false_pos, 0.05), rate(false_pos)


def test_stage_intervals_hold_for_all_five_stages_together() -> None:
    # Five unchanged stages, each with its own noise: at most 5% of A/A comparisons show any
    # stage as moved (95% per stage would show one in about 22%).
    n, rng = COMPARE_WINDOW.rounds, np.random.default_rng(11)
    cost = np.array([40e-6, 120e-6, 10e-6, 60e-6, 5e-6])
    sd = np.array([0.08, 0.05, 0.15, 0.06, 0.20])
    flagged = 0
    for _ in range(N):
        a = cost * np.exp(rng.normal(0, 1, (n, 5)) * sd)
        b = cost * np.exp(rng.normal(0, 1, (n, 5)) * sd)
        moved = False
        for k in range(5):
            d = stats.difference(a[:, k], b[:, k], paired=True, level=STAGE_LEVEL)
            assert d is not None
            moved |= d.excludes_null
        flagged += moved
    assert at_most(flagged, 0.05), rate(flagged)


def test_descriptive_figures() -> None:
    assert stats.median([1, 3, 2]) == 2 and stats.iqr([1, 2, 3, 4, 5]) == (2.0, 4.0)
    assert stats.relative_spread([90, 100, 110]) == pytest.approx(0.1)
    assert stats.geometric_mean([1, 100]) == pytest.approx(10)
    summary = stats.summarize([100.0])
    assert summary.center == pytest.approx(100.0) and summary.ci95[0] == summary.ci95[1]
