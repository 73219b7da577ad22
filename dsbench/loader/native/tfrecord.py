"""TFRecord files through the tfrecord package's reader (`tfrecord.reader.tfrecord_loader`),
as a torch IterableDataset over files does: each DataLoader worker takes files[w::W] and reads
them record by record; the package parses each tf.train.Example (protobuf) into arrays and
bytes, without TensorFlow, and checks no CRC. The image feature's bytes (a clip's, a text's;
token ids as its int64 array) are decoded by the loader's decode stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.native import Item, Shuffle, View, require
from dsbench.storage.files import is_remote


def _plain(value: Any) -> Any:
    """An int64 or float feature of one value as that value, as a training step reads it."""
    if hasattr(value, "shape") and value.shape == (1,):
        return value[0].item()
    return value


class TfrecordReader:
    library = "tfrecord"
    usage = "tfrecord.reader.tfrecord_loader(FILE, None), files split over DataLoader workers"
    shuffle_usage = None  # the loader reads each file front to back; its shuffle is a queue

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        require("tfrecord", "tfrecord")
        from tfrecord.reader import tfrecord_loader

        return [(tfrecord_loader, "tfrecord.reader.tfrecord_loader")], {
            "data_path": "the export's files", "index_path": "the export's files",
            "compression_type": "each file's name (.gz)"}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Any:
        require("tfrecord", "tfrecord")
        if is_remote(export.path):
            raise DsbenchError("--backend native: the tfrecord package reads local files only; "
                               "in an object store, use dsbench's reader", path=export.path)
        return options

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        from tfrecord.reader import tfrecord_loader

        compressed = {True: "gzip", False: None}
        for index in range(worker, len(view.units), n_workers):
            unit = view.units[index]
            for n, record in enumerate(tfrecord_loader(unit, None, compression_type=compressed[
                    unit.endswith(".gz")], **prepared)):
                payload = record.pop(view.image or "image/encoded")
                # Token ids stay the package's int64 array; bytes (an image, a clip, text)
                # are handed over as bytes.
                yield (f"{unit}:{n}", payload if view.kind == base.TOKENS else bytes(payload),
                       {k: _plain(v) for k, v in record.items()}, (index, n))

    def close(self, prepared: Any) -> None:
        pass


READER = TfrecordReader()
