"""Reading dsbench's sentences back: each function returns what a sentence claims that its own
figures contradict (an empty list when it holds). The property tests (test_claims.py) run them
over text rendered from generated documents; test_claims.py also runs them on sentences that
once shipped, which they must catch."""

from __future__ import annotations

import re

NUM = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
DIRECTION = r"(faster|slower|more|less|fewer)"
# "1.08x slower (95% interval 1.03x to 1.13x slower)"; the interval may follow other figures.
CHANGE = re.compile(rf"{NUM}x {DIRECTION}\b(?:[^()]*?\([^()]*?|[^()]*?)"
                    rf"95% interval {NUM}x to {NUM}x(?: {DIRECTION})?")
HOLDS = re.compile(rf"95% interval {NUM}x to {NUM}x holds 1x")
ANY_INTERVAL = re.compile(rf"95% interval {NUM}x to {NUM}x")


def changes(text: str) -> list[str]:
    """A change and its interval must read one way: the interval turned like the ratio, with
    the same word, every end past 1x as printed, the ratio inside it."""
    bad = []
    for m in CHANGE.finditer(text):
        x, word, lo, hi, word2 = float(m[1]), m[2], float(m[3]), float(m[4]), m[5]
        if word2 != word:
            bad.append(f"interval not in the ratio's direction ({word2 or 'no word'} after "
                       f"'{word}'): {m[0]!r}")
        if not (1.0 < lo <= hi):
            bad.append(f"an interval of a change must lie past 1x as printed: {m[0]!r}")
        if not (lo <= x <= hi):
            bad.append(f"the ratio lies outside its interval: {m[0]!r}")
    for m in HOLDS.finditer(text):
        if not float(m[1]) <= 1.0 <= float(m[2]):
            bad.append(f"'holds 1x' for an interval that does not: {m[0]!r}")
    return bad


def distinguishable_iff(text: str, ci: tuple[float, float] | None) -> list[str]:
    """'not distinguishable' is said exactly when the interval holds 1x."""
    if ci is None:
        return []
    holds = ci[0] <= 1.0 <= ci[1]
    said = "not distinguishable" in text
    if holds != said:
        return [f"interval {ci} {'holds' if holds else 'excludes'} 1x, yet the text "
                f"{'does not say' if holds else 'says'} 'not distinguishable': {text!r}"]
    return []


def table_row(mark: str, ratio: str, ci: str, change: str, true_ci: list[float] | None,
              higher_is_better: bool) -> list[str]:
    """A comparison table's row: mark, ratio and interval cells, and the change's words."""
    bad = []
    moved = change not in ("no change", "not distinguishable from noise") and \
        not change.startswith("not distinguishable") and not change.startswith("unknown")
    if (mark.strip() in ("+", "-")) != moved:
        bad.append(f"mark {mark!r} with change {change!r}")
    if true_ci is not None:
        lo, hi = (float(v.rstrip("x")) for v in ci.split(" to "))
        excludes = not true_ci[0] <= 1.0 <= true_ci[1]
        if excludes and (lo <= 1.0 <= hi):
            bad.append(f"an interval that excludes 1x printed as {ci!r}")
        if excludes != moved:
            bad.append(f"interval {true_ci} with change {change!r}")
        if moved:
            up = float(ratio.rstrip("x")) > 1.0
            word = change.split(";")[0].split()[-1]
            expect = {True: {"faster", "more"}, False: {"slower", "less", "fewer"}}[up]
            if word not in expect:
                bad.append(f"ratio {ratio} read as {word!r}")
            if mark.strip() != ("+" if up != higher_is_better else "-"):
                bad.append(f"mark {mark!r} for a ratio {ratio} (higher is better: "
                           f"{higher_is_better})")
    return bad


SHARES = re.compile(rf"{NUM}% of seconds at >= 90% busy, {NUM}% at <= 10%")
BURST_SHARE, SELDOM = 10.0, 0.90


def timeline(note: str, mean_util: float) -> list[str]:
    """Shape words of the timeline's note against the shares printed beside them."""
    m = SHARES.search(note)
    if m is None:
        return [f"no shares in {note!r}"]
    high, low = float(m[1]), float(m[2])
    bad = []
    if "back to back (~100%)" in note and high < BURST_SHARE:
        bad.append(f"'back to back (~100%)' beside {high}% of seconds at >= 90% busy")
    if "(~0%)" in note and low < BURST_SHARE:
        bad.append(f"'waits ... (~0%)' beside {low}% of seconds at <= 10%")
    if "seldom wait" in note and mean_util < SELDOM:
        bad.append(f"'seldom wait' at a mean utilization of {mean_util:.3g}")
    return bad


GROWTH = re.compile(rf"at 128 \({NUM}x\)")
HELD = re.compile(rf"holds up {NUM}% of steps at 64 GPUs and {NUM}% at 128")
TAIL_GROWTH, P99_SHARE = 1.05, 1.0


def tail(text: str) -> list[str]:
    """The tail's words against the p99 growth and the stalled share printed beside them."""
    m = GROWTH.search(text)
    if m is None:
        return [f"no growth figure in {text!r}"]
    g = float(m[1])
    held = HELD.search(text)
    bad = []
    if "hardly moves" in text and not 1 / TAIL_GROWTH <= g <= TAIL_GROWTH:
        bad.append(f"'hardly moves' for a p99 that changed {g}x: {text!r}")
    if "it sets the p99" in text:
        if g <= TAIL_GROWTH:
            bad.append(f"'sets the p99' for a p99 that changed {g}x: {text!r}")
        if held is None or float(held[2]) < P99_SHARE:
            bad.append(f"'past 1% of steps it sets the p99' beside a stall in under 1% of "
                       f"steps at 128: {text!r}")
    if "under the 1% of steps" in text and (held is None or float(held[2]) >= P99_SHARE):
        bad.append(f"'under the 1% of steps' beside a stall in 1% or more at 128: {text!r}")
    if "more ranks draw a slower one" in text and g <= TAIL_GROWTH:
        bad.append(f"growth explained for a p99 that changed {g}x: {text!r}")
    if "lower at 128 GPUs than at 64" in text and g >= 1 / TAIL_GROWTH:
        bad.append(f"'lower at 128' for a p99 that changed {g}x: {text!r}")
    if not any(w in text for w in ("hardly moves", "it sets the p99", "more ranks draw",
                                   "lower at 128")):
        bad.append(f"the tail's change left unexplained: {text!r}")
    return bad


SCALE = {"n": 1e-9, "µ": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def figure(cell: str) -> tuple[float, float]:
    """A printed figure ('604 MB', '4.06 ms/sample', '400 samples/s') as (value, half a unit
    of its last printed digit): what rounding may have moved it by."""
    number, _, unit = cell.strip().partition(" ")
    mantissa = number.split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(number.split("e")[1]) if "e" in number else 0
    # A unit's prefix: joined ('4.06 ms', '604 MB') or a word of its own ('22.5 M instructions').
    prefixed = len(unit) > 1 and unit[0] in SCALE and (unit[1] in "Bs" or unit[1] == " ")
    scale = SCALE[unit[0]] if prefixed else 1.0
    return float(number) * scale, 0.5 * 10.0 ** (exponent - decimals) * scale


LIMIT = re.compile(rf"ratio (<=|>=) {NUM}(?: or \+(.+))?$")


def gate_table(text: str) -> list[str]:
    """Each gate row's status against its ratio, interval and limit, and the ratio against the
    two figures beside it (the same statistic: their quotient is the ratio, to the digits
    printed)."""
    lines = text.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("----"))
    bad = []
    for line in lines[rule + 1:]:
        if line.startswith("kind:"):
            break
        status, label, base, cand, ratio, ci, limit, kind = re.split(r"\s{2,}", line.strip())
        r = float(ratio.rstrip("x"))
        m = LIMIT.match(limit)
        if m is None:
            bad.append(f"a limit that does not read: {line!r}")
            continue
        lower, lim = m[1] == ">=", float(m[2])
        past = r < lim if lower else r > lim
        (b, eb), (c, ec) = figure(base), figure(cand)
        if b > 0:
            er = 0.5 * 10.0 ** -(len(ratio.rstrip("x").split(".")[1]) if "." in ratio else 0)
            worst = (c + ec) / max(b - eb, 1e-300), (c - ec) / (b + eb)
            if not min(worst) - er <= r <= max(worst) + er:
                bad.append(f"{label}: ratio {ratio} is not {cand} / {base}")
        if ci != "exact" and ci != "-":
            lo, hi = (float(v.rstrip("x")) for v in ci.split(" to "))
            if not lo <= r <= hi:
                bad.append(f"{label}: ratio {ratio} outside its interval {ci}")
            cleared = hi < lim if lower else lo > lim
        else:
            cleared = past
        grew_within = False
        if m[3]:  # an allowance: past the ratio, a growth under it passes
            allowance = figure(m[3])[0]
            grew_within = c - b <= allowance + ec + eb
        if status == "pass" and past and not grew_within:
            bad.append(f"pass past the limit: {line!r}")
        if status in ("WARN", "FAIL") and not past:
            bad.append(f"{status} within the limit: {line!r}")
        if status == "FAIL" and (kind != "hard" or not cleared or grew_within):
            bad.append(f"FAIL for a check that a figure clears: {line!r}")
        if status == "WARN" and kind == "hard" and cleared and not grew_within \
                and "different load" not in text:
            bad.append(f"WARN where the whole interval is past a hard limit: {line!r}")
    return bad


def notes_carried(text: str, notes: list[str]) -> list[str]:
    """Every warning raised about a figure appears in the sentence that uses it."""
    return [f"warning {n!r} not carried into {text!r}" for n in notes if n not in text]


CHECK = re.compile(rf"(within|missed by) {NUM}% \(model/measured {NUM}(?:; tolerance {NUM}%)?\)")


def checks(text: str, tolerances: list[float]) -> list[str]:
    """Every check says within or missed by, and says it truly: within iff |ratio - 1| is at
    most the tolerance."""
    found = CHECK.findall(text)
    bad = []
    if len(found) != len(tolerances):
        bad.append(f"{len(tolerances)} checks, {len(found)} said within or missed: {text!r}")
    for (word, pct, ratio, _), tol in zip(found, tolerances, strict=False):
        miss = abs(float(ratio) - 1.0)
        if (word == "within") != (miss <= tol + 1e-12):
            bad.append(f"'{word} {pct}%' for model/measured {ratio} at tolerance {tol}")
        if word == "missed by" and float(pct) <= 100 * tol:
            bad.append(f"'{word} {pct}%' for model/measured {ratio} at tolerance {tol}")
    if "where the model has" in text:
        bad.append(f"a model figure beside a measured one with no within or missed: {text!r}")
    return bad
