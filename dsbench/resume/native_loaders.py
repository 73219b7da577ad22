"""Each format's own library with its own loader and its own resume, as a job uses them
(`resume --backend native`).

The dataset is the native reader's (loader/native/: the same construction, --native-option
and shuffle as `bench --backend native`), built in the main process with the rank's
environment, and read by the loader its library documents for resuming: MosaicML Streaming's
`StreamingDataLoader` and litdata's `StreamingDataLoader` (each with `state_dict` and
`load_state_dict`), torchdata's `StatefulDataLoader` for a Hugging Face dataset (whose
IterableDataset keeps its own state; a map-style one resumes through the loader's sampler), and
torch's DataLoader for webdataset, which keeps no state: its restart begins the epoch again.

Ranks are one process's datasets built one after another, each told its rank as a launcher
tells it: MosaicML Streaming and litdata read RANK, WORLD_SIZE (and their node counts) from the
environment when the dataset is made and when its state is taken or loaded; a Hugging Face
dataset is split by `datasets.distributed.split_dataset_by_node`, webdataset's shards by its
`nodesplitter`. Each rank is its own node (LOCAL_WORLD_SIZE=1): the libraries' node-local
coordination (shared memory) is not shared between ranks that do not run together.

What leaves a worker is each sample's identity, a digest of everything the library handed over
(decoded as the library decodes it): the audit compares an interrupted epoch's samples with an
uninterrupted one's by content, whatever the library calls its samples.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dsbench import procs
from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.loader.native import Placed, Shuffle, get, require

# How each library resumes, for people and the result.
RESUMES = {
    "mds": "streaming.StreamingDataLoader: state_dict() / load_state_dict()",
    "litdata": "litdata.StreamingDataLoader: state_dict() / load_state_dict()",
    "hf": "torchdata StatefulDataLoader: state_dict() / load_state_dict() (the dataset's own "
          "state for an IterableDataset, the sampler's for a map-style one)",
    "wds": "none: webdataset keeps no state, so a restart begins the epoch again",
}


def check(layout: str) -> None:
    if layout not in RESUMES:
        raise DsbenchError(f"resume --backend native audits the resume of "
                           f"{', '.join(RESUMES)} exports through their own libraries; "
                           f"{layout} has no resume of its own to audit")
    from dsbench.loader import native

    native.check(layout)


def identities(batch: list[Any]) -> dict[str, list[str]]:
    """A loader's collate_fn: each sample's digest (a dict, so that the libraries' loaders count
    the batch's samples as its first value's length)."""
    return {"ids": [_digest(s.sample if isinstance(s, Placed) else s) for s in batch]}


def _digest(sample: Any) -> str:
    h = hashlib.blake2b(digest_size=12)
    items = sorted(sample.items()) if isinstance(sample, dict) else enumerate(sample)
    for name, value in items:
        if isinstance(name, str) and name in ("__url__", "__local_path__"):
            continue  # where webdataset found the sample, not what it is
        h.update(str(name).encode())
        h.update(_bytes(value))
    return h.hexdigest()


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if hasattr(value, "numpy"):  # a torch tensor
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return value.tobytes()
    if hasattr(value, "tobytes"):  # a PIL image
        return bytes(value.tobytes())
    if isinstance(value, dict):
        return _digest(value).encode()
    return repr(value).encode()


@contextlib.contextmanager
def as_rank(rank: int, ranks: int) -> Iterator[None]:
    """The environment a launcher gives rank `rank` of `ranks`, each rank its own node."""
    with procs.environ(dict(RANK=str(rank), GLOBAL_RANK=str(rank), WORLD_SIZE=str(ranks),
                            LOCAL_WORLD_SIZE="1", LOCAL_RANK="0", NNODES=str(ranks))):
        yield


def rank_shards(urls: Any, rank: int, ranks: int) -> Any:
    """webdataset's nodesplitter for one rank: every `ranks`-th shard from `rank`."""
    return list(urls)[rank::ranks]


@contextlib.contextmanager
def process_group(layout: str, tmp: Path) -> Iterator[None]:
    """For MosaicML Streaming, a torch.distributed group of this one process (over a file, no
    port): told of more ranks, the library otherwise starts one of that many processes and waits
    for the others. Its rank and world come from the environment (as_rank) all the same."""
    import torch.distributed as dist

    if layout != "mds" or not dist.is_available() or dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp / "group"), 1), rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class Shape:
    rank: int
    ranks: int
    workers: int
    batch_size: int
    shuffle: Shuffle | None


class NativeLoader:
    """One rank's loader over the library's dataset; `state()` is None for a library that keeps
    none (webdataset)."""

    def __init__(self, export: base.Export, shape: Shape, options: dict[str, Any], tmp: Path,
                 context: Any, stall_s: float, state: Any = None) -> None:
        self.layout, self.shape = export.layout, shape
        self.prepared: Any = None
        self.it: Any = None
        self.iterators: list[Any] = []  # torch's, made by the loader (_record)
        self.loader: Any = None
        try:
            self._open(export, shape, options, tmp, context, stall_s, state)
        except BaseException:
            self.close()  # what was made before the failure (MDS's shared memory)
            raise

    def _open(self, export: base.Export, shape: Shape, options: dict[str, Any], tmp: Path,
              context: Any, stall_s: float, state: Any) -> None:
        with as_rank(shape.rank, shape.ranks):
            dataset = self._dataset(export, shape, options, tmp)
            kwargs: dict[str, Any] = dict(
                batch_size=shape.batch_size, num_workers=shape.workers,
                collate_fn=identities, timeout=stall_s if shape.workers else 0,
                multiprocessing_context=context if shape.workers else None)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*set_vital.*")
                warnings.filterwarnings("ignore", message="This DataLoader will create")
                self.loader = self._loader(dataset, kwargs)
                _record(self.loader, self.iterators)
                if state is not None:
                    self.loader.load_state_dict(state)

    def _dataset(self, export: base.Export, shape: Shape, options: dict[str, Any],
                 tmp: Path) -> Any:
        if self.layout == "wds":
            wds = require("webdataset", "torch")
            order = (dict(shardshuffle=100, seed=shape.shuffle.seed) if shape.shuffle
                     else dict(shardshuffle=False))
            pipeline = wds.WebDataset(
                [str(u) for u in export.units()], empty_check=False,
                nodesplitter=partial(rank_shards, rank=shape.rank, ranks=shape.ranks),
                **(order | options))
            if shape.shuffle:
                pipeline = pipeline.shuffle(shape.shuffle.buffer, seed=shape.shuffle.seed)
            return pipeline
        self.prepared = get(self.layout).prepare(export, shape.batch_size, tmp, options,
                                                 shape.shuffle)
        if self.layout != "hf":
            return self.prepared
        from datasets.distributed import split_dataset_by_node

        return split_dataset_by_node(self.prepared.dataset, shape.rank, shape.ranks)

    def _loader(self, dataset: Any, kwargs: dict[str, Any]) -> Any:
        if self.layout == "mds":
            return require("streaming", "mds").StreamingDataLoader(dataset, **kwargs)
        if self.layout == "litdata":
            return require("litdata", "litdata").StreamingDataLoader(dataset, **kwargs)
        if self.layout == "hf":
            from torchdata.stateful_dataloader import StatefulDataLoader

            # Every batch's state kept, so that a restart owes nothing to snapshot spacing.
            return StatefulDataLoader(dataset, snapshot_every_n_steps=1, **kwargs)
        from torch.utils.data import DataLoader

        return DataLoader(dataset, **kwargs)

    def next(self) -> list[str] | None:
        """The next batch's sample identities; None at the epoch's end."""
        with as_rank(self.shape.rank, self.shape.ranks), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*set_vital.*")
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            if self.it is None:
                self.it = iter(self.loader)
            try:
                batch = next(self.it)
            except StopIteration:
                return None
        ids: list[str] = batch["ids"]
        return ids

    def state(self) -> Any:
        if self.layout == "wds":
            return None
        with as_rank(self.shape.rank, self.shape.ranks):
            return self.loader.state_dict()

    def close(self) -> None:
        from dsbench.loader.torch_source import shutdown

        it, self.it = self.it, None
        if isinstance(it, types.GeneratorType):
            it.close()
        for made in self.iterators:
            shutdown(made)
        self.iterators.clear()
        if self.loader is not None:
            self.loader._iterator = None
        if self.prepared is not None:
            prepared, self.prepared = self.prepared, None
            get(self.layout).close(prepared)


def _record(loader: Any, into: list[Any]) -> None:
    """Keep every iterator torch's DataLoader makes for `loader`, to stop its workers at close.

    The libraries' loaders (MosaicML Streaming's, litdata's) iterate torch's iterator inside
    their own generator, out of reach; one whose worker failed stays referenced by the
    exception's frames, and its workers outlive the loader (and the fork server they came from
    waits for them). `_get_iterator` is where DataLoader makes each one."""
    make = loader._get_iterator

    def recorded() -> Any:
        try:
            it = make()
        except BaseException as exc:
            # An iterator can fail in its own __init__ after its workers started (torchdata
            # checks a restored state's worker count there): found in the failure's frames.
            tb = exc.__traceback__
            while tb is not None:
                made = tb.tb_frame.f_locals.get("self")
                if hasattr(made, "_shutdown_workers") and made not in into:
                    into.append(made)
                tb = tb.tb_next
            raise
        into.append(it)
        return it

    loader._get_iterator = recorded


def failure(exc: BaseException) -> str:
    """A library's exception in one line: a loader worker's own (torch wraps it with the
    worker's traceback), and where an assertion without a message was made."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    name = type(exc).__name__
    if text and text[0].startswith("Caught ") and len(text) > 1:
        # The worker's exception: the traceback's last "Name: message" line.
        raised = [t for t in text[1:] if re.match(r"[A-Za-z_][\w.]*: ", t)]
        return raised[-1] if raised else text[-1]
    if text:
        return f"{name}: {text[0]}"
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return f"{name} without a message"
    import linecache

    code = tb.tb_frame.f_code.co_filename
    line = linecache.getline(code, tb.tb_lineno).strip()
    return (f"{name} without a message at {'/'.join(Path(code).parts[-2:])}:{tb.tb_lineno}"
            + (f" ({line})" if line else ""))
