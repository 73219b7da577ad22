"""Random access to the samples of record shards (MDS, litdata): `bench --order random` and
`block` (loader/sampling.py), as a map-style Dataset over these shards reads one index.

A shard whose samples lie at their offsets in the file (not compressed whole) is read where
they lie, as MosaicML Streaming's MDS reader reads a sample from its cached shard: the sample's
pair of offsets (8 bytes of the table), then its bytes, each one unbuffered read at its
position, a range GET in an object store. A shard compressed whole cannot be read that way:
it is read and decompressed whole when a sample of it is first asked for, as both libraries
decompress a shard into their local cache before reading from it, and its samples are kept.
Up to MAX_OPEN shards are kept open (least recently used closed first).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

from dsbench.adapters import base
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store

# indexed.IndexedExport takes these methods from ShardsAt, so this module names its types
# loosely (an export and its index entries: `Any`) rather than import it back.
Entry = Any

# Shards a random reader keeps open at once: a map-style Dataset over many shards keeps some
# handles (or decompressed shards), not one per shard.
MAX_OPEN = 16
_PAIR = struct.Struct("<II")


class _InPlace:
    """A shard read where its samples lie: an unbuffered file (local) or range GETs (remote)."""

    def __init__(self, unit: str, entry: Entry, table: int, size: int) -> None:
        self.unit, self.table, self.size = unit, table, size
        try:
            self.f: Any = store.open_raw(store.location(unit))
        except OSError as exc:
            raise SampleError(f"cannot read: {exc.strerror or exc}", path=unit) from None
        base.count_open()
        try:
            n = self._at(table, 4, "its sample count")
        except BaseException:
            self.f.close()
            raise
        if int.from_bytes(n, "little") != entry.samples:
            self.f.close()
            raise SampleError(f"holds {int.from_bytes(n, 'little')} samples by its header, "
                              f"but {entry.samples} by the index (another shard's file, or "
                              "corrupt)", path=unit)

    def _at(self, pos: int, n: int, what: str) -> bytes:
        try:
            self.f.seek(pos)
            data = self.f.read(n)
        except OSError as exc:
            raise SampleError(f"cannot read: {exc.strerror or exc}", path=self.unit) from None
        if data is None or len(data) != n:
            raise SampleError(f"truncated in {what} ({self.size} bytes)", path=self.unit)
        return bytes(data)

    def record(self, i: int) -> memoryview:
        start, end = _PAIR.unpack(self._at(self.table + 4 + 4 * i, 8, "its offset table"))
        if not start <= end <= self.size:
            raise SampleError(f"corrupt offset table: sample {i} runs from byte {start} to "
                              f"{end} of {self.size}", path=self.unit)
        return memoryview(self._at(start, end - start, f"sample {i}"))

    def close(self) -> None:
        self.f.close()


class _Whole:
    """A shard compressed whole: read and decompressed once, its records kept."""

    def __init__(self, export: Any, unit: str, entry: Entry) -> None:
        with export._open(entry, unit) as shard:
            self.records = [bytes(r) for _, r in export._records(entry, shard, unit)]

    def record(self, i: int) -> memoryview:
        return memoryview(self.records[i])

    def close(self) -> None:
        self.records = []


class ShardsAt:
    """`read_at` and `forget` for an IndexedExport (see the module docstring)."""

    def _init_random(self) -> None:
        self._shards_open: OrderedDict[str, _InPlace | _Whole] = OrderedDict()
        self._firsts: dict[str, int] | None = None

    def read_at(self: Any, unit: str, offset: int, skip: base.SkipHandler = None,
                ) -> base.RawSample | None:
        """Sample `offset` of shard `unit`, read as the module docstring says."""
        if unit in self.broken:
            base.report(SampleError(self.broken[unit], path=unit), skip)
            return None
        entry = self._by_unit[unit]
        if not 0 <= offset < entry.samples:
            raise DsbenchError(f"no sample {offset} here ({entry.samples} samples)", path=unit)
        try:
            shard = self._shard_at(unit, entry)
            record = shard.record(offset)
            if isinstance(shard, _InPlace):  # a whole shard's records are made in _records
                record = self._record(entry, record, unit)
            return self._sample(entry, record, str(self._first_of(unit) + offset), unit)
        except SampleError as err:
            base.report(err, skip)
            return None

    def forget(self: Any) -> None:
        for shard in self._shards_open.values():
            shard.close()
        self._shards_open.clear()

    def _shard_at(self: Any, unit: str, entry: Entry) -> _InPlace | _Whole:
        shard = self._shards_open.pop(unit, None)
        if shard is None:
            if self._mapped(entry):
                shard = _InPlace(unit, entry, self._table_start(entry), self.sizes[unit])
            else:
                shard = _Whole(self, unit, entry)
            if len(self._shards_open) >= MAX_OPEN:
                self._shards_open.popitem(last=False)[1].close()
        self._shards_open[unit] = shard  # now the most recently used
        return shard

    def _first_of(self: Any, unit: str) -> int:
        """The export-wide number of the shard's first sample (a sample's key without one)."""
        if self._firsts is None:
            self._firsts, total = {}, 0
            for u, e in self._by_unit.items():
                self._firsts[u] = total
                total += e.samples
        first: int = self._firsts[unit]
        return first
