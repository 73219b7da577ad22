"""Sentences from typed claims: one place decides how a ratio, its interval and a check read.

A verdict is a claim about figures; the words are rendered from the claim, never written beside
it by hand, so that they cannot disagree with it:

- a change reads in one direction: "1.08x slower (95% interval 1.03x to 1.13x slower)", the
  interval turned the same way as the ratio;
- with as many digits as it takes for an interval that excludes 1x never to print an end as
  "1.00x", and for a ratio that is not 1 never to print as 1;
- "not distinguishable" exactly when the interval holds 1x;
- a warning raised about a figure travels with it ("noisy: rounds vary 11.6%");
- a check of a model against a measurement says "within" or "missed by", and its tolerance.

The thresholds behind qualitative words (back to back, hardly moves, ...) are listed in
docs/verdicts.md; those of the demo's shapes sit in dsbench/model/explain.py and
dsbench/report/verdict.py beside the sentence they gate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dsbench import fmt

MAX_DIGITS = 6  # past this a ratio is 1 for every purpose a person has
CHECK_DIGITS = 10  # a check prints its ratio with at most this many


def ratio_digits(values: Iterable[float], digits: int = 3) -> int:
    """Significant digits for ratios such that none that differs from 1 prints as 1 ("1.00"),
    and none above 1 as below it, or the other way: the sides of 1x stay readable."""
    return side_digits(values, 1.0, digits)


def side_digits(values: Iterable[float], mark: float, digits: int = 3) -> int:
    """Significant digits for each value to print on its own side of `mark` (a threshold a word
    depends on): 1.0497 against 1.05 prints 1.0497, not 1.05."""
    vs = [v for v in values if v != mark and v > 0]

    def reads_true(v: float, d: int) -> bool:
        shown = float(fmt.sig(v, d))
        return shown != mark and (shown > mark) == (v > mark)

    while digits < MAX_DIGITS and not all(reads_true(v, digits) for v in vs):
        digits += 1
    return digits


def apart(lo: float, hi: float, digits: int) -> int:
    """At least `digits`, and enough for two different ends of an interval to print apart."""
    if math.isclose(lo, hi, rel_tol=1e-9):  # equal but for float rounding: nothing to part
        return digits
    while digits < MAX_DIGITS and fmt.sig(lo, digits) == fmt.sig(hi, digits):
        digits += 1
    return digits


def times(x: float, digits: int = 3) -> str:
    return f"{fmt.sig(x, digits)}x"


def interval(lo: float, hi: float) -> str:
    """'0.882x to 0.972x', with the digits that keep 1x on the side it is on."""
    d = apart(lo, hi, ratio_digits((lo, hi)))
    return f"{times(lo, d)} to {times(hi, d)}"


def holds_one(ci: Sequence[float]) -> bool:
    return ci[0] <= 1.0 <= ci[1]


@dataclass(frozen=True)
class Change:
    """A figure of a candidate against a base: ratio = candidate / base.

    `more` and `less` are the words for a ratio above and below 1 ("faster"/"slower" for a
    rate, "more"/"less" for a cost). `ci` is the ratio's 95% interval, None for a count (exact,
    needs none) or when one round per side gave none. `notes` are what a warning about either
    side's figure earned ("noisy: rounds vary 11.6%")."""

    ratio: float | None
    ci: tuple[float, float] | None
    more: str
    less: str
    counted: bool = False
    notes: tuple[str, ...] = ()

    @property
    def distinguishable(self) -> bool | None:
        """Counts: whether they differ; timings: whether the interval excludes 1x (None: no
        interval)."""
        if self.ratio is None:
            return True
        if self.counted:
            return self.ratio != 1.0
        if self.ci is None:
            return None
        return not holds_one(self.ci)

    def words(self) -> str:
        """'1.08x slower (95% interval 1.03x to 1.13x slower)', 'not distinguishable (95%
        interval 0.97x to 1.05x holds 1x)', '2.00x more (counted)'."""
        head, detail = self.parts()
        return f"{head} ({detail})"

    def parts(self) -> tuple[str, str]:
        """The change and what qualifies it: ('1.08x slower', '95% interval 1.03x to 1.13x
        slower; noisy: rounds vary 11.6%')."""
        r, ci = self.ratio, self.ci
        if r is None:
            return "a new cost", "the base had none"
        if self.counted:
            return ("the same", "counted") if r == 1.0 else (self.factor(), "counted")
        if ci is None:
            return "no verdict", self._noted("no interval: one round per side")
        if holds_one(ci):
            return "not distinguishable", self._noted(f"95% interval {interval(*ci)} holds 1x")
        up = ci[0] > 1.0  # the interval's side, which a distinguishable estimate shares
        word = self.more if up else self.less
        x, a, b = (r, ci[0], ci[1]) if up else (1 / r, 1 / ci[1], 1 / ci[0])
        d = apart(a, b, ratio_digits((x, a, b)))  # one precision for the ratio and its ends
        return (f"{times(x, d)} {word}",
                self._noted(f"95% interval {times(a, d)} to {times(b, d)} {word}"))

    def factor(self) -> str:
        """The ratio alone, in its direction: '1.08x slower'; '0.3% more' when three digits of a
        ratio would print 1.00x."""
        assert self.ratio is not None
        r = self.ratio
        up = r >= 1
        x = r if up else 1 / r
        text = times(x) if times(x) != "1.00x" else fmt.percent(x - 1)
        return f"{text} {self.more if up else self.less}"

    def _noted(self, text: str) -> str:
        return "; ".join((text, *self.notes))


@dataclass(frozen=True)
class Check:
    """A modelled figure against the measured one, with the relative tolerance it must meet."""

    what: str
    model: float
    measured: float
    tolerance: float

    @property
    def ratio(self) -> float:
        return self.model / self.measured if self.measured else float("inf")

    @property
    def miss(self) -> float:
        """How far the model is from the measurement, relative to the measurement."""
        return abs(self.ratio - 1.0)

    @property
    def within(self) -> bool:
        # A miss equal to the tolerance is within it: float division must not make 1.1/1.0 a
        # miss "by 10.0000000%"; nor may a miss too small to print at CHECK_DIGITS.
        slack = self.tolerance * (1 + 1e-9)
        return self.miss <= slack or abs(float(fmt.sig(self.ratio, CHECK_DIGITS)) - 1) <= slack

    def words(self) -> str:
        """'within 10% (model/measured 1.003)' or 'missed by 37.0% (model/measured 1.370;
        tolerance 10%)', with the digits it takes for the printed figures to agree with the
        verdict (a miss of 10.04% is not printed as 10.0% against a tolerance of 10%)."""
        d = 4
        while d < CHECK_DIGITS and not self._reads_true(d):
            d += 1
        r = f"model/measured {fmt.sig(self.ratio, d)}"
        tol = fmt.percent(self.tolerance)
        if self.within:
            return f"within {tol} ({r})"
        return f"missed by {self._missed_by(d)}% ({r}; tolerance {tol})"

    def _missed_by(self, digits: int) -> str:
        """The miss in percent, from the ratio as printed, with the digits that keep it above
        the tolerance."""
        pct = 100 * abs(float(fmt.sig(self.ratio, digits)) - 1.0)
        d = digits - 1
        while d < CHECK_DIGITS and float(fmt.sig(pct, d)) <= 100 * self.tolerance:
            d += 1
        return fmt.sig(pct, d)

    def _reads_true(self, digits: int) -> bool:
        shown = abs(float(fmt.sig(self.ratio, digits)) - 1.0) <= self.tolerance * (1 + 1e-9)
        if self.within:
            return shown
        return not shown and float(self._missed_by(digits)) > 100 * self.tolerance


def missed(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if not c.within]


# How closely the model must meet a measured job (docs/job.md, "The model, checked"): its mean
# step and utilization within 10%, its p99 within 25%; the time-sharing factor it extrapolates
# from CPU within 15% of a batch's measured wall / CPU.
TOLERANCE = {"mean": 0.10, "gpu_util": 0.10, "p99": 0.25, "time_sharing": 0.15}
LABEL = {"mean": "mean step", "gpu_util": "GPU utilization", "p99": "p99 step",
         "time_sharing": "time-sharing (a batch's wall / CPU)"}


def job_checks(model: dict[str, float], measured: dict[str, float],
               time_sharing: dict[str, Any] | None = None) -> list[Check]:
    """The model against a measured job: the model's and the measured job's mean step, GPU
    utilization and p99 (keys "mean", "gpu_util", "p99"; those absent are not checked), and
    the time-sharing factor measured and modelled, when the job recorded it."""
    out = [Check(LABEL[k], float(model[k]), float(measured[k]), TOLERANCE[k])
           for k in ("mean", "gpu_util", "p99") if k in model and k in measured]
    ts = time_sharing or {}
    if ts.get("measured") is not None and ts.get("model") is not None:
        out.append(Check(LABEL["time_sharing"], float(ts["model"]), float(ts["measured"]),
                         TOLERANCE["time_sharing"]))
    return out


def checks_text(checks: Sequence[Check]) -> str:
    """'mean step within 10% (model/measured 1.003), p99 step missed by 37% (...)'."""
    return ", ".join(f"{c.what} {c.words()}" for c in checks)
