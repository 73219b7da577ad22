"""Lance datasets through Lance's own torch dataset, `lance.torch.data.LanceDataset`, as a
training script reads one: each DataLoader worker builds one over the dataset with
`rank=w, world_size=W, shard_granularity="fragment"` (its share of the fragments) and the
record batches it yields are split into samples. Lance's default conversion to tensors refuses
binary columns, so, as a user with images must, a `to_tensor_fn` is given: it hands over the
Arrow batch, whose image bytes the loader's decode stage decodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.adapters.lance import storage_options
from dsbench.loader.native import Item, Shuffle, View, require
from dsbench.storage.files import location


def as_batch(batch: Any, **_: Any) -> Any:
    """LanceDataset's to_tensor_fn: the record batch as it is."""
    return batch


class LanceReader:
    library = "pylance"
    usage = ("lance.torch.data.LanceDataset(DATASET, batch_size=B, rank=w, world_size=W, "
             "shard_granularity='fragment', to_tensor_fn=...)")
    shuffle_usage = None  # LanceDataset samples; its order is not a shuffle of the fragments

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        require("lance", "lance")
        from lance.torch.data import LanceDataset

        split = "dsbench splits the fragments over loader workers"
        return [(LanceDataset, "lance.torch.data.LanceDataset")], {
            "dataset": "the export's path", "batch_size": "--batch-size", "rank": split,
            "world_size": split, "auto_detect_rank": split,
            "to_tensor_fn": "dsbench takes the record batches as they are"}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Any:
        require("lance", "lance")
        return str(export.path), options  # the dataset is opened in each worker

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        import lance
        from lance.torch.data import LanceDataset

        path, options = prepared
        dataset = lance.dataset(path, storage_options=storage_options(location(path)))
        torch_ds = LanceDataset(dataset, batch_size=batch_size, rank=worker,
                                world_size=n_workers, to_tensor_fn=as_batch,
                                **({"shard_granularity": "fragment"} | options))
        image = view.image or "image"
        n = 0
        for batch in torch_ds:
            columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            images = columns.pop(image)
            for i in range(batch.num_rows):
                yield f"{worker}:{n}", images[i], {k: v[i] for k, v in columns.items()}, None
                n += 1

    def close(self, prepared: Any) -> None:
        pass


READER = LanceReader()
