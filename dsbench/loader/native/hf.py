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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.native import Item, Shuffle, View, require
from dsbench.loader.native.options import split
from dsbench.storage.files import is_remote


@dataclass(frozen=True)
class Prepared:
    dataset: Any
    rows: Any = None  # a shuffled map-style dataset's original row at each position


class HfReader:
    library = "datasets"
    usage = ("datasets.load_from_disk(EXPORT).with_format('torch'), or load_dataset('parquet', "
             "streaming=True) for the Hub's layout")
    shuffle_usage = ("Dataset.shuffle(generator=numpy.random.default_rng(SEED)), or for the "
                     "Hub's layout IterableDataset.shuffle(seed=SEED, buffer_size="
                     "--shuffle-buffer)")

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        datasets = require("datasets", "hf")
        torch = "the torch format, as a DataLoader takes it"
        if getattr(export, "hf", {}).get("form") == "save_to_disk":
            return [(datasets.load_from_disk, "datasets.load_from_disk"),
                    (datasets.Dataset.with_format, "Dataset.with_format")], {
                "dataset_path": "the export's path", "type": torch}
        # load_dataset hands the keywords it does not name itself to the builder's config
        # (**config_kwargs): for a Parquet export, ParquetConfig's (batch_size, columns,
        # filters, on_bad_files).
        from datasets.packaged_modules.parquet.parquet import ParquetConfig

        return [(datasets.load_dataset, "datasets.load_dataset"),
                (ParquetConfig, "the Parquet builder's ParquetConfig")], {
            "path": "the export's layout", "data_files": "the export's files",
            "split": "the export's split", "streaming": "the export's layout", "type": torch,
            "name": "the builder's default configuration", "data_dir": "the export's files"}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Prepared:
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
            rows = None
            if shuffle:
                # The library's permutation is the generator's (its documented use of it): the
                # same generator's gives each position's original row.
                rows = np.random.default_rng(shuffle.seed).permutation(len(ds))
                # In memory: on disk, the library writes its indices into the export's folder.
                ds = ds.shuffle(generator=np.random.default_rng(shuffle.seed),
                                keep_in_memory=True)
            return Prepared(ds.with_format("torch", **formatting), rows)
        files = [str(u) for u in export.units()]
        stream = datasets.load_dataset("parquet", data_files={info.get("split") or "train": files},
                                       split=info.get("split") or "train",
                                       streaming=True, **options)
        if shuffle:
            stream = stream.shuffle(seed=shuffle.seed, buffer_size=shuffle.buffer)
        return Prepared(stream.with_format("torch"))

    def epoch(self, prepared: Prepared, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        image, ds = view.image or "image", prepared.dataset
        if hasattr(ds, "__getitems__"):
            n = len(ds)
            for start in range(worker * batch_size, n, n_workers * batch_size):
                rows = ds.__getitems__(list(range(start, min(n, start + batch_size))))
                for i, row in enumerate(rows):
                    at = start + i
                    yield (str(at), row.pop(image), row,
                           view.locate(int(prepared.rows[at]) if prepared.rows is not None
                                       else at))
            return
        # A streaming dataset's rows do not say where they lie: no position.
        for i, row in enumerate(ds):
            yield f"{worker}:{i}", row.pop(image), row, None

    def close(self, prepared: Any) -> None:
        pass


READER = HfReader()
