"""WebDataset shards through webdataset's own pipeline, as a training script builds it:
`WebDataset(SHARDS, shardshuffle=False, workersplitter=split_by_worker).decode("pil")`, built in
each DataLoader worker (with --order shuffle, `shardshuffle=100, seed=SEED` and `.shuffle(B)`
before the decode, as its docs build a training pipeline), which takes its shards from torch's
worker info. The library decodes images to PIL (lazily: the pixels are decoded when the loader
asks for them, the decode stage) and fields by their extensions (`.cls` to an int, `.json`
parsed). A stage ahead of the shuffle counts each sample's offset in its shard, to place it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.native import Item, Shuffle, View, require
from dsbench.storage.files import is_remote


@dataclass(frozen=True)
class Prepared:
    options: dict[str, Any]
    shuffle: Shuffle | None


class Offsets:
    """A pipeline stage ahead of the shuffle: each sample's offset in its shard, counted as the
    library reads it (a shard is read front to back), so that the sample can be placed after
    the buffer has moved it."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        url = sample.get("__url__", "")
        sample[OFFSET] = self.seen.get(url, 0)
        self.seen[url] = sample[OFFSET] + 1
        return sample


OFFSET = "__dsbench_offset__"


class WdsReader:
    library = "webdataset"
    usage = "webdataset.WebDataset(SHARDS, shardshuffle=False).decode('pil')"
    shuffle_usage = ("webdataset.WebDataset(SHARDS, shardshuffle=100, seed=SEED)"
                     ".shuffle(--shuffle-buffer).decode('pil')")

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        wds = require("webdataset", "torch")
        split = "dsbench splits the shards over loader workers"
        return [(wds.WebDataset, "webdataset.WebDataset")], {
            "urls": "the export's shards", "shardshuffle": "--order", "nodesplitter": split,
            "workersplitter": split}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Prepared:
        require("webdataset", "torch")
        if is_remote(export.path):
            raise DsbenchError("--backend native: webdataset reads an object store through a "
                               "command (curl, aws) dsbench does not set up; in an object "
                               "store, use dsbench's reader", path=export.path)
        return Prepared(options, shuffle)  # the pipeline is built in each worker, with these

    def epoch(self, prepared: Prepared, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        import webdataset as wds

        shuffle = prepared.shuffle
        order: dict[str, Any] = (dict(shardshuffle=100, seed=shuffle.seed) if shuffle
                                 else dict(shardshuffle=False))
        pipeline = wds.WebDataset(list(view.units), nodesplitter=None,
                                  workersplitter=wds.split_by_worker,
                                  **({"empty_check": False} | order | prepared.options)
                                  ).map(Offsets())
        if shuffle:
            pipeline = pipeline.shuffle(shuffle.buffer, seed=shuffle.seed)
        unit = {u: i for i, u in enumerate(view.units)}
        for sample in pipeline.decode("pil"):
            key = sample.pop("__key__")
            index, offset = unit.get(sample.pop("__url__", "")), sample.pop(OFFSET, None)
            sample.pop("__local_path__", None)
            # An image member before an audio clip's, as dsbench's reader picks them.
            name = view.image or next((e for kinds in (base.IMAGE_EXTS, base.AUDIO_EXTS)
                                       for e in sample if e.rsplit(".", 1)[-1] in kinds), None)
            if name is None:
                raise ValueError(f"sample {key} has no image member ({', '.join(sample)})")
            image = sample.pop(name)
            fields: dict[str, Any] = {}
            for ext, value in sample.items():
                if isinstance(value, dict):  # a JSON document: one field per key, as ours
                    fields.update(value)
                else:
                    fields[ext] = value
            yield (key, image, fields,
                   None if index is None or offset is None else (index, int(offset)))

    def close(self, prepared: Any) -> None:
        pass


READER = WdsReader()
