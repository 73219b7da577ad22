"""Megatron-LM's indexed datasets through Megatron's own reader,
`megatron.core.datasets.indexed_dataset.IndexedDataset`, as Megatron's GPT dataset reads one:
each DataLoader worker opens the datasets of its units (ranges of one prefix's sequences, as
dsbench's reader splits them) and indexes their sequences in order; each item is a sequence's
ids as the library hands them over (a view of its memory-mapped .bin).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.adapters.megatron import UNIT_SEQUENCES
from dsbench.errors import DsbenchError
from dsbench.loader.native import Item, Shuffle, View, require
from dsbench.storage.files import is_remote

# Each worker's open datasets, for the worker's life: a dataset unmaps its .bin when it is
# collected, and the sequences handed over are views of that map.
_OPEN: dict[str, Any] = {}


class MegatronReader:
    library = "megatron-core"
    usage = "megatron.core.datasets.indexed_dataset.IndexedDataset(PREFIX)[i]"
    shuffle_usage = None  # Megatron shuffles through its GPT dataset's sample index, not here

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        indexed = require("megatron.core.datasets.indexed_dataset", "megatron")
        return [(indexed.IndexedDataset, "IndexedDataset")], {
            "path_prefix": "the export's prefixes"}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Any:
        require("megatron.core.datasets.indexed_dataset", "megatron")
        if is_remote(export.path):
            raise DsbenchError("--backend native reads Megatron datasets on a local disk; in "
                               "an object store, use dsbench's reader", path=export.path)
        return str(export.path), options  # each worker opens the datasets of its units

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        root, options = prepared
        for u in range(worker, len(view.units), n_workers):
            prefix, _, first = view.units[u].rpartition("@")
            path = f"{root}/{prefix}"
            if path not in _OPEN:
                _OPEN[path] = IndexedDataset(path, **options)
            ds = _OPEN[path]
            end = min(int(first) + UNIT_SEQUENCES, len(ds))
            for offset, i in enumerate(range(int(first), end)):
                yield f"{prefix}:{i}", ds[i], {}, (u, offset)

    def close(self, prepared: Any) -> None:
        pass


READER = MegatronReader()
