"""Hugging Face datasets through `datasets` with torch formatting, as a training script reads
them. save_to_disk: `datasets.load_from_disk(EXPORT)` (a DatasetDict's split), with
`.with_format("torch")`: a map-style dataset, memory-mapped, that DataLoader's workers fetch
batch by batch (worker w fetches batches w, w + W, ...: `__getitems__` of each batch's
indices, in order, as torch's sequential sampler hands them out). The Hub's Parquet layout:
`datasets.load_dataset("parquet", data_files=..., split=..., streaming=True)` with torch
formatting, an iterable dataset that splits its files over the workers itself (no cache
written). Either way the library decodes the Image feature to a uint8 tensor as it reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.native import Item, View, require
from dsbench.loader.native.options import split
from dsbench.storage.files import is_remote


class HfReader:
    library = "datasets"
    usage = ("datasets.load_from_disk(EXPORT).with_format('torch'), or load_dataset('parquet', "
             "streaming=True) for the Hub's layout")

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        datasets = require("datasets", "hf")
        torch = "the torch format, as a DataLoader takes it"
        if getattr(export, "hf", {}).get("form") == "save_to_disk":
            return [(datasets.load_from_disk, "datasets.load_from_disk"),
                    (datasets.Dataset.with_format, "Dataset.with_format")], {
                "dataset_path": "the export's path", "type": torch}
        return [(datasets.load_dataset, "datasets.load_dataset")], {
            "path": "the export's layout", "data_files": "the export's files",
            "split": "the export's split", "streaming": "the export's layout", "type": torch}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any]) -> Any:
        datasets = require("datasets", "hf")
        if is_remote(export.path):
            raise DsbenchError("--backend native reads Hugging Face datasets on a local disk; "
                               "in an object store, use dsbench's reader", path=export.path)
        info = getattr(export, "hf", {})
        if info.get("form") == "save_to_disk":
            targets, _ = self.options_targets(export)
            loading, formatting = split([target for target, _ in targets], options)
            ds = datasets.load_from_disk(str(export.path), **loading)
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[info["split"]]
            return ds.with_format("torch", **formatting)
        files = [str(u) for u in export.units()]
        return datasets.load_dataset("parquet", data_files={info.get("split") or "train": files},
                                     split=info.get("split") or "train",
                                     streaming=True, **options).with_format("torch")

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        image = view.image or "image"
        if hasattr(prepared, "__getitems__"):
            n = len(prepared)
            for start in range(worker * batch_size, n, n_workers * batch_size):
                rows = prepared.__getitems__(list(range(start, min(n, start + batch_size))))
                for i, row in enumerate(rows):
                    yield str(start + i), row.pop(image), row
            return
        for i, row in enumerate(prepared):
            yield f"{worker}:{i}", row.pop(image), row

    def close(self, prepared: Any) -> None:
        pass


READER = HfReader()
