"""What the layout tables (token_layouts.py, audio_layouts.py) share: every export read by
dsbench's reader, its instructions counted, and by its library's own where it has one, all in
one interleaved run; and each side's peak memory from a run of that side alone."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches


def interleaved(exports: Sequence[tuple[str, Path, bool]], opts: BenchOptions
                ) -> list[tuple[str, str, Any, float | None]]:
    """(name, backend, result, peak anonymous memory alone) per side of `exports`: (name,
    path, read by its library too)."""
    paths, each, names = [], [], []
    for name, path, native in exports:
        for backend in ("dsbench", "native") if native else ("dsbench",):
            paths.append(path)
            each.append(dataclasses.replace(opts, backend=backend,
                                            exact=None if backend == "dsbench" else False))
            names.append((name, backend))
    with contextlib.redirect_stdout(sys.stderr):  # the libraries' own printing
        docs = run_benches(paths, opts, each=each, progress=fmt.progress)
    return [(name, backend, doc, alone(path, side))
            for (name, backend), doc, path, side in zip(names, docs, paths, each, strict=True)]


def alone(path: Path, opts: BenchOptions) -> float | None:
    """The loader's peak anonymous memory, measured in a run of this side alone: in the
    interleaved run, workers come from one fork server that imported every side's library."""
    with contextlib.redirect_stdout(sys.stderr):
        (doc,) = run_benches([path], dataclasses.replace(opts, rounds=1, exact=False))
    value = doc["runs"][0].get("peak_pss_anon_bytes")
    return None if value is None else float(value)


def table(head: list[str], rows: list[list[str]]) -> None:
    """A Markdown table on stdout."""
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
