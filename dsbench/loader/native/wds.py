"""WebDataset shards through webdataset's own pipeline, as a training script builds it:
`WebDataset(SHARDS, shardshuffle=False, workersplitter=split_by_worker).decode("pil")`, built in
each DataLoader worker (which takes its shards from torch's worker info). The library decodes
images to PIL (lazily: the pixels are decoded when the loader asks for them, the decode stage)
and fields by their extensions (`.cls` to an int, `.json` parsed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.native import Item, View, require
from dsbench.storage.files import is_remote

_IMAGES = ("jpg", "jpeg", "png", "webp", "ppm")


class WdsReader:
    library = "webdataset"
    usage = "webdataset.WebDataset(SHARDS, shardshuffle=False).decode('pil')"

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        wds = require("webdataset", "torch")
        split = "dsbench splits the shards over loader workers"
        return [(wds.WebDataset, "webdataset.WebDataset")], {
            "urls": "the export's shards", "shardshuffle": "--order", "nodesplitter": split,
            "workersplitter": split}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any]) -> Any:
        require("webdataset", "torch")
        if is_remote(export.path):
            raise DsbenchError("--backend native: webdataset reads an object store through a "
                               "command (curl, aws) dsbench does not set up; in an object "
                               "store, use dsbench's reader", path=export.path)
        return options  # the pipeline is built in each worker, with these

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        import webdataset as wds

        pipeline = wds.WebDataset(list(view.units), shardshuffle=False, nodesplitter=None,
                                  workersplitter=wds.split_by_worker,
                                  **({"empty_check": False} | prepared)).decode("pil")
        for sample in pipeline:
            key = sample.pop("__key__")
            sample.pop("__url__", None)
            sample.pop("__local_path__", None)
            name = view.image or next((e for e in sample if e.rsplit(".", 1)[-1] in _IMAGES),
                                      None)
            if name is None:
                raise ValueError(f"sample {key} has no image member ({', '.join(sample)})")
            image = sample.pop(name)
            fields: dict[str, Any] = {}
            for ext, value in sample.items():
                if isinstance(value, dict):  # a JSON document: one field per key, as ours
                    fields.update(value)
                else:
                    fields[ext] = value
            yield key, image, fields

    def close(self, prepared: Any) -> None:
        pass


READER = WdsReader()
