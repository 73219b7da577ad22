"""litdata exports through litdata's own `StreamingDataset`, as a training script reads it.

Built once in the main process (`litdata.StreamingDataset(EXPORT)`) and iterated in each
DataLoader worker, where the library takes its worker's chunks. Its image serializers decode
JPEG to a CHW uint8 tensor with torchvision as they read (the read stage); the decode stage
only turns that tensor into an HWC array for the transform. A TokensLoader export is read with
`item_loader=TokensLoader(block_size=SEQ_LEN)`, the blocks dsbench's reader cuts. An export in
an object store is given as the library's `Dir(path=CACHE, url=EXPORT)`, its cache in the
session's directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.loader.native import Item, Placed, Shuffle, View, made_on_first_use, require
from dsbench.storage.files import is_remote


def flat(sample: Any, prefix: str = "") -> dict[str, Any]:
    """A pytree sample's leaves by the names dsbench's reader gives them ("a.b", "0")."""
    if isinstance(sample, dict):
        items = sample.items()
    elif isinstance(sample, list | tuple):
        items = enumerate(sample)  # type: ignore[assignment]
    else:
        return {prefix or "item": sample}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _make_positioned() -> type:
    """StreamingDataset with `__getitem__` overridden, as litdata's docs show for adding to a
    sample: here the global index the library asked for (the sample's number in the export,
    front to back), which places the sample for the order figures."""
    litdata = require("litdata", "litdata")

    class Positioned(litdata.StreamingDataset):  # type: ignore[name-defined]
        def __getitem__(self, index: Any) -> Any:
            return Placed(super().__getitem__(index), getattr(index, "index", None))

    return Positioned


def __getattr__(name: str) -> Any:
    if name == "Positioned":
        return made_on_first_use(globals(), name, _make_positioned)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LitdataReader:
    library = "litdata"
    usage = "litdata.StreamingDataset(EXPORT[, item_loader=TokensLoader(block_size=SEQ_LEN)])"
    shuffle_usage = "litdata.StreamingDataset(EXPORT, shuffle=True, seed=SEED)"

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        litdata = require("litdata", "litdata")
        return [(litdata.StreamingDataset, "litdata.StreamingDataset")], {
            "input_dir": "the export's path", "shuffle": "--order"}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Any:
        positioned = __getattr__("Positioned")
        order: dict[str, Any] = dict(shuffle=True, seed=shuffle.seed) if shuffle else {}
        block = getattr(export, "block", None)
        if block is not None:  # a token stream: blocks of the export's --seq-len, as dsbench's
            from litdata.streaming.item_loader import TokensLoader

            order["item_loader"] = TokensLoader(block_size=block)
        if is_remote(export.path):
            from litdata.streaming.resolver import Dir

            return positioned(Dir(path=str(tmp / "cache"), url=str(export.path)),
                              **(order | options))
        return positioned(str(export.path), **(order | options))

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        for n, placed in enumerate(prepared):
            leaves = flat(placed.sample)
            image = leaves.pop(view.image or "image")
            yield (f"{worker}:{n}", image, leaves,
                   None if placed.number is None else view.locate(placed.number))

    def close(self, prepared: Any) -> None:
        pass  # its cache lies in the session's directory


READER = LitdataReader()
