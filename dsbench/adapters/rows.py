"""Random access to the rows of a columnar export (Parquet row groups, Arrow record batches),
as a map-style Dataset's `__getitem__` over those files reads one index: `bench --order random`
and `block` (loader/sampling.py).

A row is read with its block, the finest unit the format reads: the block is read whole (a
Parquet row group: every column chunk read and decompressed; an Arrow record batch located
through the footer, its rows taken in place from the memory map), kept as the last block read,
and the one row converted. A subclass opens a shard as `Blocks`.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from dsbench.adapters import base
from dsbench.adapters.columnar import ColumnarExport
from dsbench.adapters.columns import BadChunk, Unreadable, batch_rows
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage.files import Loc, location

# Shards a random reader keeps open at once (least recently used closed first): a map-style
# Dataset over many shards keeps some handles, not one per shard.
MAX_OPEN = 16
BLOCK_UNITS = 64  # shards whose blocks survey() describes (footers only)


class Blocks(Protocol):
    """One shard opened for random access: its blocks (row groups, record batches), each read
    whole, as the format's random-access path reads them."""

    name: str  # what a block is called: "row group", "record batch"
    starts: list[int]  # the first row of each block, then the shard's row count
    stored: list[int]  # each block's bytes as read whole (compressed where stored so)
    whole: bool  # a row costs its whole block (read, decompressed), not only its own bytes

    def block(self, k: int) -> pa.RecordBatch | BadChunk:
        """Block `k`, read (and decompressed) whole."""
        ...

    def took(self, row: pa.RecordBatch) -> None:
        """Count the bytes of one row taken from a block, where the OS does not see them."""
        ...

    def close(self) -> None:
        ...


def one_row(export: ColumnarExport, row: pa.RecordBatch, unit: str, offset: int,
            skip: base.SkipHandler) -> base.RawSample | None:
    """Row `offset` of `unit`, read alone as `row` (a batch of that one row), as a sample; None
    where it does not convert and `skip` took it."""
    keyed = export.plan.key is not None and export.plan.key in export._columns[unit]
    first = 0 if keyed else export._first_row(unit)
    try:
        item = next(batch_rows(row, export.schema, export.plan, unit, first + offset,
                               export._encodings(unit)))
    except (pa.ArrowException, ValueError) as exc:
        item = SampleError(f"row {offset} does not convert to the export's schema: {exc}",
                           path=unit)
    if isinstance(item, SampleError):
        base.report(item, skip)
        return None
    return item


class RandomRowsExport(ColumnarExport):
    """A columnar export whose rows are read by random access, block by block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Shards kept open, and the block read last ((unit, index), block).
        self._open: OrderedDict[str, Blocks] = OrderedDict()
        self._last: tuple[tuple[str, int], pa.RecordBatch | BadChunk] | None = None

    def _blocks(self, path: Loc) -> Blocks:
        """The shard opened for random access; Unreadable if it cannot be."""
        raise NotImplementedError

    def read_at(self, unit: str, offset: int, skip: base.SkipHandler = None,
                ) -> base.RawSample | None:
        """Row `offset` of `unit`: its block (row group, record batch) read whole unless it is
        the block read last, then the one row converted, as a map-style Dataset over these files
        reads an index."""
        if unit in self._broken:
            base.report(SampleError(self._broken[unit], path=unit), skip)
            return None
        try:
            blocks = self._open_for_random(unit)
        except Unreadable as exc:
            base.report(SampleError(str(exc), path=unit), skip)
            return None
        k = bisect.bisect_right(blocks.starts, offset) - 1
        if not 0 <= offset < blocks.starts[-1]:
            raise DsbenchError(f"no row {offset} here ({blocks.starts[-1]} rows)", path=unit)
        if self._last is None or self._last[0] != (unit, k):
            self._last = ((unit, k), blocks.block(k))
        chunk = self._last[1]
        if isinstance(chunk, BadChunk):
            base.report(SampleError(chunk.message, path=unit, key=f"row {offset}"), skip)
            return None
        one = chunk.slice(offset - blocks.starts[k], 1)
        blocks.took(one)
        return one_row(self, one, unit, offset, skip)

    def forget(self) -> None:
        for blocks in self._open.values():
            blocks.close()
        self._open.clear()
        self._last = None

    def _open_for_random(self, unit: str) -> Blocks:
        blocks = self._open.pop(unit, None)
        if blocks is None:
            blocks = self._blocks(location(unit))
            if len(self._open) >= MAX_OPEN:
                self._open.popitem(last=False)[1].close()
        self._open[unit] = blocks  # now the most recently used
        return blocks

    def survey(self) -> dict[str, Any]:
        return super().survey() | {"blocks": self._block_survey()}

    def _block_survey(self) -> dict[str, Any] | None:
        """What a sample read alone reads, from the footers of the first BLOCK_UNITS shards:
        its block's name, whether a row costs the whole block, and the blocks' count, rows and
        bytes (p50)."""
        rows: list[int] = []
        stored: list[int] = []
        name, whole = "", False
        for p in self._files[:BLOCK_UNITS]:
            if str(p) in self._broken:
                continue
            try:
                blocks = self._blocks(p)
            except Unreadable:
                continue
            try:
                name, whole = blocks.name, whole or blocks.whole
                rows += [b - a for a, b in zip(blocks.starts, blocks.starts[1:], strict=False)]
                stored += blocks.stored
            finally:
                blocks.close()
        if not rows:
            return None
        return {"name": name, "whole": whole, "count": len(rows),
                "shards": min(len(self._files), BLOCK_UNITS),
                "rows_p50": float(np.median(rows)), "bytes_p50": float(np.median(stored))}
