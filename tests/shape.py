"""The shape of a command's output, to tell a doc's transcript that no longer matches what the
command prints: its tables' column headings, its tables' row names and its labelled lines
("where the cost moved: ..."), without the figures, which differ from run to run.

The docs test (test_docs.py) runs each command on small data: a few rows and labels there
depend on that size or on the machine, and are said in ALLOWED with why."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RULE = re.compile(r"^\s*-+(?:\s{2,}-+)*\s*$")  # the dashes under a table's header
MARKS = {"+", "-", "?"}  # compare's first column: worse, better, no interval
LABEL = re.compile(r"^([A-Za-z][^:\d]{0,48}):(?:\s|$)")

# Rows and labels a transcript may show that the docs test's run does not print, and why.
ALLOWED = {
    # Counted under valgrind, which the docs test leaves off (DSBENCH_EXACT=0, conftest.py):
    # the docs were made where it counts.
    "CPU instructions per sample": "exact pass",
    "CPU per sample by stage, counted": "exact pass",
    # Measured across worker counts: the docs test measures one (--workers 1).
    "contention": "one worker count",
    "scaling": "one worker count",
    # Said when a run's figures call for it (a short window, a noisy round).
    "warning": "the run's figures",
    # advise's candidates its budget left out: the docs test gives it one layout to try.
    "not tried": "one layout",
}


@dataclass
class Shape:
    headers: set[tuple[str, ...]] = field(default_factory=set)
    rows: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)


def cells(line: str) -> list[str]:
    return [c for c in re.split(r"\s{2,}", line.strip()) if c]


def shape(text: str) -> Shape:
    found = Shape()
    lines = text.splitlines()
    in_table = False
    for i, line in enumerate(lines):
        if RULE.match(line) and i > 0 and line.strip():
            found.headers.add(tuple(cells(lines[i - 1])))
            in_table = True
            continue
        if not line.strip():
            in_table = False
            continue
        row = cells(line)
        if in_table and len(row) > 1:
            name = next((c for c in row if c not in MARKS), "")
            # Worker counts and other figures name rows by value, not by kind.
            if name and not re.match(r"^[\d.]", name):
                found.rows.add(name)
            continue
        in_table = False  # a line of prose under a table ends it
        if label := LABEL.match(line):
            found.labels.add(label.group(1))
    return found


def differences(shown: str, printed: str) -> list[str]:
    """What a transcript (`shown`) shows that the command no longer prints, and what it prints
    that the transcript lacks, in table headings, row names and labels; ALLOWED excepted.

    Rows are checked one way: what the command prints now must be in the doc (a row added to
    the output since), while the doc's run, at its own size and options, may have had more (a
    candidate or a worker count the small run leaves out). An excerpt (the doc's first line is
    not the output's) is checked one way too: what it shows must still be printed."""
    a, b = shape(shown), shape(printed)
    excerpt = bool(shown.strip()) and shown.lstrip("\n").splitlines()[0] != next(
        iter(printed.lstrip("\n").splitlines()), "")
    out = []
    for kind in ("headers", "rows", "labels"):
        was, now = getattr(a, kind), getattr(b, kind)
        gone = {x for x in was - now if x not in ALLOWED} if kind != "rows" else set()
        new = {x for x in now - was if x not in ALLOWED} if not excerpt else set()
        if gone:
            out.append(f"{kind} the doc shows that the command no longer prints: {sorted(gone)}")
        if new:
            out.append(f"{kind} the command prints that the doc lacks: {sorted(new)}")
    return out
