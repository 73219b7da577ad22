"""How random the batches a run delivered were, from where their samples came from: distinct
units per batch, label entropy per batch beside that of every label read, and the distance of
consecutive samples in the source order (docs/access-patterns.md)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from dsbench.adapters.base import Export
from dsbench.errors import DsbenchError
from dsbench.loader.order import WorkerSamples
from dsbench.results.types import OrderFigures
from dsbench.storage.files import is_remote, location

# The label field when none is named: the first of these names the samples have (WebDataset's
# `.cls` member is `cls`; dsbench's definitions call it `label`).
LABEL_NAMES = ("label", "cls", "class", "target")


# Where a batch's samples came from: their units' indexes and their offsets in them (None where
# a format's own library does not tell), and their labels (None when the samples have none);
# what the order figures are computed from.
Where = tuple[list[int] | None, list[int] | None, list[int] | None]


def batch_where(samples: WorkerSamples, keys: list[str], fields: dict[str, Any]
                ) -> Where | None:
    """Where a batch built from `samples` came from; None where that is not known (a format's
    own reader)."""
    return where_of([samples.where(k) for k in keys], fields)


def where_of(found: list[tuple[int, int] | None], fields: dict[str, Any]) -> Where | None:
    """A batch's `Where` from its samples' (unit index, offset), in batch order, and its labels:
    without the positions where one is not known, None where neither is."""
    labels = labels_of(fields)
    if not found or any(f is None for f in found):
        return (None, None, labels) if found and labels else None
    return [f[0] for f in found if f], [f[1] for f in found if f], labels


def labels_of(fields: dict[str, Any]) -> list[int] | None:
    """A batch's integer labels from its collated fields (the first of LABEL_NAMES that holds
    integers), or None."""
    for name in LABEL_NAMES:
        value = fields.get(name)
        if isinstance(value, np.ndarray) and value.ndim == 1 and \
                np.issubdtype(value.dtype, np.integer):
            return [int(v) for v in value]
    return None


# Positions in the source order need every earlier unit's sample count (tar headers, footers,
# indexes: read in the main process after the rounds, on local exports); past this many units
# they are not read.
DISTANCE_MAX_UNITS = 4096


def entropy_bits(labels: Sequence[int]) -> float:
    """Shannon entropy of these labels' distribution, in bits."""
    counts = Counter(labels)
    n = len(labels)
    return max(0.0, -sum(c / n * math.log2(c / n) for c in counts.values()))


def counted_cheaply(export: Export, units: int) -> bool:
    """Whether the sample counts of `units` units come from headers, footers and indexes: not
    in an object store (its shards are streamed whole to be counted), not past
    DISTANCE_MAX_UNITS, and not for an export a caller's opener made (it may not say)."""
    return units <= DISTANCE_MAX_UNITS and not is_remote(location(export.path)) and \
        hasattr(export, "unit_samples")


def unit_starts(export: Export, last: int) -> list[int] | None:
    """Where units 0..last start in the source order, in samples; None where that would mean
    reading the units again (an object store's shards are streamed whole to be counted), past
    DISTANCE_MAX_UNITS, or where a unit cannot be counted: the figure is then not given, and
    the run it describes stands."""
    if export.layout == "files":
        return list(range(last + 1))  # a unit is one sample
    if not counted_cheaply(export, last + 1):
        return None
    start = [0]
    try:
        for unit in export.units()[:last]:
            start.append(start[-1] + export.unit_samples(unit))
    except DsbenchError:
        return None
    return start


def order_figures(export: Export, batches: Sequence[Where]) -> OrderFigures:
    """How random the batches a run delivered were, from where their samples came from (where
    that is known):
    distinct units per batch; label entropy per batch beside that of every label the run
    delivered; the mean distance, in samples of the source order (each worker's units in
    sorted order, front to back), between consecutive samples of a batch."""
    placed = [(u, o) for u, o, _ in batches if u is not None and o is not None]
    out: OrderFigures = {
        "batches": len(batches),
        "units_per_batch": statistics.fmean(len(set(u)) for u, _ in placed) if placed
        else None,
        "label_entropy_bits": None, "label_entropy_all_bits": None, "source_distance": None}
    labelled = [labels for _, _, labels in batches if labels]
    if labelled:
        out["label_entropy_bits"] = statistics.fmean(entropy_bits(x) for x in labelled)
        out["label_entropy_all_bits"] = entropy_bits([x for b in labelled for x in b])
    if not placed:
        return out
    start = unit_starts(export, max(max(u) for u, _ in placed))
    if start is None:
        return out
    steps = [abs((start[u1] + o1) - (start[u0] + o0))
             for units, offsets in placed
             for u0, o0, u1, o1 in zip(units, offsets, units[1:], offsets[1:], strict=False)]
    out["source_distance"] = statistics.fmean(steps) if steps else None
    return out
