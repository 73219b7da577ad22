"""The same epoch through torch's DataLoader, or torchdata's StatefulDataLoader to save state.

`OrderedSamples` is an IterableDataset over one rank's streams (order.SampleStream, one per
torch worker) that torchdata sees as Stateful: each worker's `state_dict()` is its stream's
state, which torchdata attaches to every batch the worker makes and keeps for the last batch it
handed to the job (`snapshot_every_n_steps=1`, so that restoring replays no batch). Imported
only for `--backend torch`, so that dsbench never imports torch otherwise.
"""

from __future__ import annotations

import gc
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dsbench import adapters, procs
from dsbench.errors import DsbenchError
from dsbench.loader.order import Plan, SampleStream, fresh_state
from dsbench.loader.pipeline import Pipeline
from dsbench.loader.torch_source import shutdown
from dsbench.resume.reshard import PieceStream, worker_stream
from dsbench.resume.work import Item, SampleWork

STALL_S = 120.0


class OrderedSamples(IterableDataset[tuple[Item, np.ndarray]]):
    def __init__(self, path: str, plan: Plan, rank: int, epoch: int, pipeline: Pipeline,
                 label: str | None, pieces: list[list[Any]] | None = None) -> None:
        self.path, self.plan, self.rank, self.epoch = path, plan, rank, epoch
        self.pipeline, self.label = pipeline, label
        self.pieces = pieces  # per worker: an elastic restart's share (reshard.py)
        self._pending: dict[str, Any] | None = None
        self._stream: SampleStream | PieceStream | None = None
        self._rng: np.random.Generator | None = None

    def _worker(self) -> int:
        info = get_worker_info()
        return info.id if info is not None else 0

    def __iter__(self) -> Iterator[tuple[Item, np.ndarray]]:
        w = self._worker()
        state, self._pending = self._pending, None
        export = adapters.open_export(self.path, self.plan.layout, seq_len=getattr(
            self.pipeline.transform, "seq_len", None))  # a TokensLoader stream's blocks
        stream = worker_stream(export, self.plan, self.rank, w, self.epoch, state,
                               None if self.pieces is None else self.pieces[w])
        rng = np.random.default_rng([self.plan.seed, self.epoch, self.rank, w, 1])
        if state is not None and "aug_rng" in state:
            rng.bit_generator.state = state["aug_rng"]
        self._stream, self._rng = stream, rng
        work = SampleWork(self.pipeline, self.label, rng)
        while (got := stream.next()) is not None:
            yield work(*got)

    # torchdata's Stateful protocol, called in the worker process.
    def state_dict(self) -> dict[str, Any]:
        if self._stream is None or self._rng is None:
            return self._pending or fresh_state(self.plan, self.epoch, self.rank, self._worker())
        return {**self._stream.state(), "aug_rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = state


def worker_states(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each worker's dataset state (its stream's) in a StatefulDataLoader's state: what an
    elastic restart redistributes (torchdata's own state fits only the same worker count)."""
    try:
        snaps = state["_snapshot"]["_worker_snapshots"]
        return [snaps[f"worker_{w}"]["dataset_state"] for w in range(len(snaps))]
    except (KeyError, TypeError):
        raise DsbenchError("the StatefulDataLoader's state holds no per-worker dataset state "
                           "(a torchdata version dsbench does not know?)") from None


def collate_items(batch: list[tuple[Item, np.ndarray]]) -> dict[str, Any]:
    """Pixels stacked by torch (into shared memory, as torch hands them over); the items kept."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only Pillow arrays, only read here
        images = torch.stack([torch.from_numpy(np.ascontiguousarray(px)) for _, px in batch])
    return {"items": [item for item, _ in batch], "images": images}


class TorchLoader:
    """One rank's epoch through DataLoader (stateful=False) or StatefulDataLoader."""

    def __init__(self, path: str, plan: Plan, rank: int, epoch: int, pipeline: Pipeline,
                 label: str | None, prefetch: int, stateful: bool,
                 state: dict[str, Any] | None = None,
                 pieces: list[list[Any]] | None = None) -> None:
        dataset = OrderedSamples(path, plan, rank, epoch, pipeline, label, pieces)
        kwargs: dict[str, Any] = dict(batch_size=plan.batch_size, num_workers=plan.workers,
                                      prefetch_factor=prefetch, collate_fn=collate_items,
                                      multiprocessing_context="spawn", timeout=STALL_S)
        self.loader: Any
        with warnings.catch_warnings():
            # torchdata 0.11 calls a torch API that torch 2.13 deprecates; harmless here.
            warnings.filterwarnings("ignore", message=".*set_vital.*")
            if stateful:
                from torchdata.stateful_dataloader import StatefulDataLoader

                self.loader = StatefulDataLoader(dataset, snapshot_every_n_steps=1, **kwargs)
                if state is not None:
                    self.loader.load_state_dict(state)
            else:
                self.loader = DataLoader(dataset, **kwargs)
            # Workers start with SIGINT blocked (a Ctrl-C to the group must not interrupt one
            # mid-import); the main process handles it and stops them.
            self.it: Any = None
            try:
                with procs.spawning():
                    self.it = iter(self.loader)
            except BaseException:
                # A Ctrl-C held during the spawn surfaces as the block ends, before the
                # caller holds this loader: stop its workers and queues here (otherwise
                # their semaphores outlive the run and Python's resource tracker warns).
                self.close()
                raise

    def next(self) -> list[Item] | None:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*set_vital.*")
                batch = next(self.it)
        except StopIteration:
            return None
        except DsbenchError as exc:
            # torch re-raises a worker's exception with its whole traceback as the message.
            raise DsbenchError(str(exc).strip().splitlines()[-1].split(": ", 1)[-1]) from None
        except RuntimeError as exc:
            raise DsbenchError(f"torch DataLoader failed: {str(exc).splitlines()[0]}") from None
        items: list[Item] = batch["items"]
        return items

    def requests(self) -> int | None:
        return None  # torch's workers do not report them

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.loader.state_dict()
        return state

    @staticmethod
    def state_bytes(state: dict[str, Any]) -> int:
        return len(pickle.dumps(state))  # what torch.save would write, near enough

    def close(self) -> None:
        with procs.uninterrupted():  # a second Ctrl-C must not cut this short
            it, self.it = self.it, None
            if it is None:
                return
            shutdown(it)
            # The iterator's queues and events hold named semaphores, released (unlinked, and
            # struck off Python's resource tracker) only when they are collected: released
            # here, while signals are held, not at a later allocation or by a queue's feeder
            # thread as the process exits (join_feeders says why). StatefulDataLoader keeps
            # its iterator too.
            if getattr(self.loader, "_iterator", None) is it:
                self.loader._iterator = None
            del it
            gc.collect()
