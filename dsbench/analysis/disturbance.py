"""A neighbour is not a finding: the pairs of rounds of one interleaved run that another
program's CPU disturbed (docs/statistics.md).

Pairing the rounds of two exports cancels what a pair shares; a neighbour that comes and goes
within a pair loads one side and not the other, which it does not cancel.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

# A neighbour that comes and goes within a pair of rounds loads one side and not the other,
# which pairing does not cancel. Each round records the host's busy CPU over its window and the
# loader's own: the rest is other programs'. A pair whose difference in it between the sides
# departs from the run's usual difference by this many cores was disturbed, and is left out of
# the timings' intervals. The usual difference is the median over the quieter half of the pairs
# (the least other CPU on both sides together): a steady process that serves one side, such as a
# local object-store server, is part of what is compared, and a neighbour that happened to load
# the same side in most pairs does not become the usual.
DISTURBED_CORES = 0.25
TIMED = ("samples_per_s", "cpu_s_per_sample", "host_cpu_s_per_sample")  # what a neighbour moves


def others_cores(r: Mapping[str, Any]) -> float | None:
    """Cores other programs kept busy, on average, over a round's window (None: not recorded)."""
    if "host_cpu_s" not in r or not r.get("wall_s"):
        return None
    return max(0.0, r["host_cpu_s"] - r["cpu_s"]) / r["wall_s"]


def disturbance(rb: Sequence[Mapping[str, Any]], rc: Sequence[Mapping[str, Any]], paired: bool
                ) -> dict[str, Any] | None:
    """The pairs of rounds (one interleaved run) during which other programs' CPU differed
    between the sides beyond DISTURBED_CORES of the usual: which, by how many CPU seconds, and
    which pairs are kept; `steady` where the sides differ by more than DISTURBED_CORES even in
    the quieter pairs; `left_in` where too few pairs are undisturbed to leave the others out.
    None where the rounds are not paired or did not record the host."""
    if not paired or len(rb) != len(rc) or not rb:
        return None
    a = [others_cores(r) for r in rb]
    b = [others_cores(r) for r in rc]
    if any(x is None for x in a + b):
        return None
    d = [float(y) - float(x) for x, y in zip(a, b, strict=True)]  # type: ignore[arg-type]
    total = [float(x) + float(y) for x, y in zip(a, b, strict=True)]  # type: ignore[arg-type]
    quiet = sorted(range(len(d)), key=lambda i: total[i])[:(len(d) + 1) // 2]
    usual = statistics.median(d[i] for i in quiet)
    bad = [i for i, x in enumerate(d) if abs(x - usual) > DISTURBED_CORES]
    extra = sum(abs((rc[i]["host_cpu_s"] - rc[i]["cpu_s"]) - (rb[i]["host_cpu_s"] - rb[i]["cpu_s"]))
                for i in bad)
    return {"pairs": len(d), "disturbed": bad, "kept": [i for i in range(len(d)) if i not in bad],
            "others_cores": {"base": a, "cand": b}, "usual_difference_cores": usual,
            "threshold_cores": DISTURBED_CORES, "others_cpu_s": extra,
            # Other programs busier on one side in the quieter pairs too: a process serving that
            # side, or a neighbour in step with the rounds; the timings cannot tell which.
            "steady": abs(usual) > DISTURBED_CORES,
            # Fewer than two undisturbed pairs make no interval: then none is left out, the
            # timings hold the disturbance, and the gate only warns on them.
            "left_in": len(bad) > 0 and len(d) - len(bad) < 2}
