"""Human-facing numbers: three significant digits and a unit, always; plain and markdown tables."""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
from collections.abc import Sequence

from dsbench.errors import DsbenchError

_TIME_STEPS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_BYTE_STEPS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))


def sig(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant digits, without scientific notation for everyday magnitudes."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}" if x != 0 else "0"
    magnitude = math.floor(math.log10(abs(x)))
    # 10.0 ** 309 overflows; nothing near the largest float rounds up past it anyway.
    next_power = 10.0 ** (magnitude + 1) if magnitude < 308 else math.inf
    if abs(round(x, max(0, digits - 1 - magnitude))) >= next_power:
        magnitude += 1  # 99.97 rounds to 100: three digits of 100, not "100.0"
    decimals = max(0, digits - 1 - magnitude)
    if magnitude >= 6 or magnitude < -6:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{decimals}f}"


def seconds(x: float, per: str = "") -> str:
    """3.41e-3 -> '3.41 ms' (with per='sample': '3.41 ms/sample')."""
    suffix = f"/{per}" if per else ""
    if x == 0:
        return f"0 s{suffix}"
    for scale, unit in _TIME_STEPS:
        if abs(x) >= scale * 0.9995:
            return f"{sig(x / scale)} {unit}{suffix}"
    return f"{sig(x / 1e-9)} ns{suffix}"


def nbytes(x: float, per: str = "") -> str:
    """95212 -> '95.2 kB' (decimal units, as storage and networks are quoted)."""
    suffix = f"/{per}" if per else ""
    for scale, unit in _BYTE_STEPS:
        if abs(x) >= scale * 0.9995:
            return f"{sig(x / scale)} {unit}{suffix}"
    return f"{sig(x)} B{suffix}"


_BYTE_UNITS = {"": 1.0, "B": 1.0, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
               "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}


def parse_nbytes(text: str) -> float:
    """'2TB' -> 2e12, '512 GiB' -> 512 * 2**30, '1e9' -> 1e9 (decimal and binary units)."""
    s = text.strip()
    number = s.rstrip("".join(sorted({c for u in _BYTE_UNITS for c in u})) + " ")
    unit = s[len(number):].strip()
    try:
        value = float(number)
    except ValueError:
        raise DsbenchError(f"{text!r} is not a size (e.g. 2TB, 512GiB, 1e12)") from None
    if unit not in _BYTE_UNITS:
        raise DsbenchError(f"{text!r}: unknown unit {unit!r} (known: "
                           f"{', '.join(u for u in _BYTE_UNITS if u)})")
    return value * _BYTE_UNITS[unit]


_COUNT_STEPS = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def count(x: float) -> str:
    """24.8e6 -> '24.8 M' (decimal prefixes, as counts are quoted), for a unit said beside it."""
    for scale, prefix in _COUNT_STEPS:
        if abs(x) >= scale * 0.9995:
            return f"{sig(x / scale)} {prefix}"
    return sig(x)


def instructions(x: float, per: str = "sample") -> str:
    """24.8e6 -> '24.8 M instructions/sample'."""
    return f"{count(x)} instructions{f'/{per}' if per else ''}"


def rate(x: float, unit: str = "samples/s") -> str:
    return f"{sig(x)} {unit}"


def plural(n: float, word: str, many: str = "") -> str:
    """(1, 'worker') -> '1 worker'; (2, 'worker') -> '2 workers'; (0.5, 'batch', 'batches')."""
    count = str(int(n)) if float(n).is_integer() else sig(n)
    return f"{count} {word if n == 1 else many or word + 's'}"


def percent(fraction: float) -> str:
    return f"{sig(100.0 * fraction)}%"


def ratio(x: float) -> str:
    """A ratio of new to old; '1.87x'."""
    return f"{sig(x)}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> str:
    """A table of strings: aligned columns for terminals, or a GitHub-markdown table."""
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        # First column left-aligned (names), the rest right-aligned (numbers).
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


WIDTH = 100  # a report's lines: a terminal's width beside another, read without scrolling


def wrap(text: str, width: int = WIDTH) -> str:
    """`text` with every line longer than `width` broken at spaces, its continuation indented
    under the line's own text (a "1. " or "- " item's text too). Words are not split: a path
    or URL longer than the width stays whole on its line."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        body = line.lstrip(" ")
        indent = " " * (len(line) - len(body))
        item = re.match(r"(\d+\. |- )", body)
        hang = indent + " " * (len(item.group(1)) if item else 2)
        lines.extend(textwrap.wrap(line, width, subsequent_indent=hang, break_long_words=False,
                                   break_on_hyphens=False, drop_whitespace=True))
    return "\n".join(lines)


def out(text: str) -> None:
    """Print for people or machines on stdout. A reader that went away (`dsbench ... | head`)
    is not an error of ours: the rest of stdout goes nowhere, and the command still finishes,
    so an error found after the report is still said on stderr with its exit code."""
    if sys.stdout is None:  # started with stdout closed (`>&-`): the report would vanish
        raise DsbenchError("cannot write to standard output: it is closed")
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _discard_stdout()
    except OSError as exc:  # a full disk or device: the report is lost, which is an error
        _discard_stdout()
        raise DsbenchError(f"cannot write to standard output: {exc.strerror or exc}") from None


def _discard_stdout() -> None:
    # What is still buffered goes nowhere, so the flush at exit cannot fail a second time.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def progress(message: str) -> None:
    """Progress and warnings go to stderr, so stdout stays clean for results."""
    print(message, file=sys.stderr, flush=True)


class Progress:
    """A one-line progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, label: str, total: int, unit: str = "") -> None:
        self.label, self.total, self.unit, self.done = label, total, unit, 0
        self.enabled = sys.stderr.isatty() and total > 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            width = 30
            filled = int(width * self.done / self.total)
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total} {self.unit}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
