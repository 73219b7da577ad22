"""Load or measure the two sides of a comparison, and predict both on the same cluster."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dsbench.analysis.compare import compare
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import Progress, run_benches
from dsbench.model.cluster import extrapolate
from dsbench.model.node import ClusterSpec
from dsbench.results.document import read_result, write_result
from dsbench.results.types import BenchResult


def is_result_file(path: str) -> bool:
    """A side given as a `.json` file is a saved result; anything else is an export to measure."""
    return path.endswith(".json")


def load_or_measure(paths: Sequence[str], opts: BenchOptions, progress: Progress | None = None,
                    each: Sequence[BenchOptions] | None = None) -> list[BenchResult]:
    """Each side's result: read from its file, or measured, all exports in one interleaved run
    (each side with its own options from `each`, when given)."""
    docs: dict[int, BenchResult] = {i: read_result(p) for i, p in enumerate(paths)
                                       if is_result_file(p)}
    to_measure = [i for i in range(len(paths)) if i not in docs]
    if to_measure:
        measured = run_benches([paths[i] for i in to_measure], opts, progress,
                               [each[i] for i in to_measure] if each else None)
        docs.update(zip(to_measure, measured, strict=True))
    return [docs[i] for i in range(len(paths))]


def cluster_predictions(base: BenchResult, cand: BenchResult, cluster: ClusterSpec,
                        seed: int = 0, steps: int = 5000, paths: Sequence[str] = ("", "")
                        ) -> dict[str, dict[str, Any]]:
    """Extrapolate both sides to the same ClusterSpec with the same seed: only the loader differs.

    The scaling table is cut to 64 and 128 ranks, the two job sizes of the incident. `paths`
    name the sides in errors.
    """
    return {side: extrapolate(doc, cluster, np.random.default_rng(seed), steps=steps,
                              scaling=(64, 128), path=path or None)
            for side, doc, path in zip(("base", "cand"), (base, cand), paths, strict=True)}


def compare_sides(paths: Sequence[str], opts: BenchOptions, *,
                  save: Sequence[str] | None = None, progress: Progress | None = None,
                  cluster: Callable[[int], ClusterSpec] | None = None,
                  cand_opts: BenchOptions | None = None, any_order: bool = False
                  ) -> dict[str, Any]:
    """Load or measure both sides (saving their results when asked) and compare them; when
    `cluster` is given and they are comparable, predict both on the cluster it builds from
    the measured batch size. `cand_opts` reads the candidate otherwise (another backend);
    `any_order` compares results read in different orders."""
    base, cand = load_or_measure(paths, opts, progress,
                                 [opts, cand_opts] if cand_opts is not None else None)
    for path, doc in zip(save or (), (base, cand), strict=False):
        write_result(path, doc)
        if progress:
            progress(f"wrote {path}")
    comparison = compare(base, cand, any_order=any_order)
    if cluster is not None and comparison["comparable"]:
        spec = cluster(base["runs"][0]["batch_size"])
        comparison["cluster"] = cluster_predictions(base, cand, spec, paths=paths)
    return comparison
