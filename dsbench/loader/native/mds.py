"""MDS through MosaicML Streaming's `StreamingDataset`, as a training script reads it.

The dataset is built once in the main process (`StreamingDataset(local=EXPORT, batch_size=B,
shuffle=False)`) and iterated in each DataLoader worker, where it takes its share of the
samples from torch's worker info. An export whose shards are compressed, or that lives in an
object store, is given as `remote` with the session's directory as `local`, where the library
copies and decompresses shards, as it does for a job: reading a compressed export in place
would write decompressed shards into it. A `jpeg`, `png` or `pil` column comes back as a PIL
image, decoded when the loader asks for its pixels (the decode stage). The shared memory the
library makes for its workers' coordination is removed when the round ends.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

from dsbench.adapters import base
from dsbench.loader.native import Item, Placed, Shuffle, View, made_on_first_use, require
from dsbench.storage.files import is_remote


def _make_positioned() -> type:
    """StreamingDataset with `__getitem__` overridden, as the library's users add to a sample:
    here the sample id the library asked for (its number in the export, front to back), which
    places the sample for the order figures."""
    streaming = require("streaming", "mds")

    class Positioned(streaming.StreamingDataset):  # type: ignore[name-defined]
        def __getitem__(self, index: Any) -> Any:
            # (the library's sample ids are numpy integers)
            return Placed(super().__getitem__(index),
                          int(index) if isinstance(index, numbers.Integral) else None)

    return Positioned


def __getattr__(name: str) -> Any:
    if name == "Positioned":
        return made_on_first_use(globals(), name, _make_positioned)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MdsReader:
    library = "mosaicml-streaming"
    usage = "streaming.StreamingDataset(local=EXPORT, batch_size=B, shuffle=False)"
    shuffle_usage = ("streaming.StreamingDataset(..., shuffle=True, shuffle_seed=SEED): its "
                     "default algorithm and block, or --native-option shuffle_algo=... "
                     "shuffle_block_size=...")

    def options_targets(self, export: base.Export) -> tuple[list[Any], dict[str, str]]:
        streaming = require("streaming", "mds")
        return [(streaming.StreamingDataset, "streaming.StreamingDataset")], {
            "local": "the export's path", "remote": "the export's path",
            "batch_size": "--batch-size", "shuffle": "--order"}

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Any:
        entries = getattr(export, "entries", [])
        compressed = any(e.compression for e in entries)
        where = (dict(remote=str(export.path), local=str(tmp / "mds"))
                 if compressed or is_remote(export.path) else dict(local=str(export.path)))
        order = (dict(shuffle=True, shuffle_seed=shuffle.seed) if shuffle
                 else dict(shuffle=False))
        return __getattr__("Positioned")(**where, batch_size=batch_size,
                                         **(order | options))

    def epoch(self, prepared: Any, view: View, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        for n, placed in enumerate(prepared):
            sample = placed.sample
            yield (f"{worker}:{n}", sample[view.image],
                   {k: v for k, v in sample.items() if k != view.image},
                   None if placed.number is None else view.locate(placed.number))

    def close(self, prepared: Any) -> None:
        # The library's shared-memory segments, through their own handles: unlinking them by
        # name would leave them registered with Python's resource tracker, which then warns
        # at exit that they are gone.
        for shm in _segments(prepared):
            with contextlib.suppress(OSError, BufferError):
                shm.close()
            with contextlib.suppress(OSError):
                shm.unlink()


def _segments(obj: Any, depth: int = 0) -> Iterator[SharedMemory]:
    """The shared-memory segments a StreamingDataset holds (in its shared scalars, arrays and
    barrier), found by walking its attributes a few levels deep."""
    if isinstance(obj, SharedMemory):
        yield obj
        return
    if depth > 3 or not hasattr(obj, "__dict__") or (
            type(obj).__module__.split(".")[0] != "streaming" and type(obj).__module__ != __name__):
        return
    for value in vars(obj).values():
        yield from _segments(value, depth + 1)


READER = MdsReader()
