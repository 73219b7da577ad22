"""Requests in flight: a worker reading from a store asks for the next units while it works on
the current one (bench --inflight K), as a loader that prefetches does.

A per-sample object costs a round trip before its first byte; read one after another, a worker
waits a round trip per object, and its samples/s say more about the link's latency than about
the export. With K requests in flight the waits overlap, which is what a DataLoader's
prefetching threads (or an async client) give a real job. For shards (WebDataset, TFRecord)
the next K shards are streamed while the current one is used, as a loader that downloads ahead
does: a worker then holds up to K shards' samples in memory, which its peak memory shows.
Columnar files (Arrow, Parquet) are read by range requests within a file and are not read
ahead here.

The samples come back in the order the worker would read them, so the stream's position,
state and order figures are the same with or without read-ahead; a sample's error is raised
(or skipped) when its turn comes, as without.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from dsbench.adapters.base import Export, RawSample, SkipHandler
from dsbench.storage import files, remote

READ_AHEAD_LAYOUTS = ("files", "wds", "tfrecord")


def read_ahead(export: Export) -> int:
    """How many units to keep requested for this export: 1 unless it is a per-sample or shard
    layout in an object store and --inflight asked for more."""
    k = remote.inflight()
    path = getattr(export, "path", None)
    if k <= 1 or path is None or not files.is_remote(files.location(path)) or \
            getattr(export, "layout", None) not in READ_AHEAD_LAYOUTS:
        return 1
    return k


class ReadAhead:
    """The samples of unit `pos` of `units`, with the next k - 1 units' already requested
    (k = 1: read as they are asked for, as a generator, and no thread is started)."""

    def __init__(self, export: Export, units: Sequence[str], k: int, skip: SkipHandler) -> None:
        self.export, self.units, self.k, self.skip = export, units, k, skip
        self.pool = ThreadPoolExecutor(k, thread_name_prefix="dsbench-read-ahead") \
            if k > 1 else None
        self.pending: dict[int, Future[list[RawSample]]] = {}

    @classmethod
    def of(cls, export: Export, units: Sequence[str], skip: SkipHandler) -> ReadAhead:
        """A reader of `units` ahead as far as --inflight asks for this export."""
        return cls(export, units, read_ahead(export), skip)

    def _read(self, unit: str) -> list[RawSample]:
        return list(self.export.read_units([unit], self.skip))

    def read(self, pos: int) -> Iterator[RawSample]:
        if self.pool is None:
            return iter(self.export.read_units([self.units[pos]], self.skip))
        for stale in [p for p in self.pending if p < pos]:  # a resumed or skipped position
            self.pending.pop(stale).cancel()
        for p in range(pos, min(pos + self.k, len(self.units))):
            if p not in self.pending:
                self.pending[p] = self.pool.submit(self._read, self.units[p])
        return iter(self.pending.pop(pos).result())

    def close(self) -> None:
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
