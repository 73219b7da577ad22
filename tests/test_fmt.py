"""Human-facing numbers: three significant digits, a unit, and no digit too many at a boundary."""

from __future__ import annotations

import pytest

from dsbench import fmt


@pytest.mark.parametrize(("x", "text"), [
    (123.4, "123"), (1.0, "1.00"), (0.0012345, "0.00123"), (99.94, "99.9"),
    (99.97, "100"), (0.99996, "1.00"), (9.9996e-3, "0.0100"), (999.6, "1000"), (0, "0"),
])
def test_three_significant_digits_also_where_rounding_adds_one(x: float, text: str) -> None:
    assert fmt.sig(x) == text


def test_units_are_always_there() -> None:
    assert fmt.seconds(3.41e-3, "sample") == "3.41 ms/sample"
    assert fmt.nbytes(95212) == "95.2 kB"
    assert fmt.percent(0.99996) == "100%"
    assert fmt.ratio(1.874) == "1.87x"
