"""Random access to the samples of record shards (MDS, litdata): `bench --order random` and
`block` (loader/sampling.py), as each library's reader reads one index of a shard it holds.

A shard whose samples lie at their offsets in the file (not compressed whole) is read where
they lie: the sample's pair of offsets (8 bytes of the shard's table), then its bytes, each one
unbuffered read at its position. MosaicML Streaming's MDS reader opens the shard for every
sample it reads (`open(..., 'rb', 0)` in `get_sample_data`); litdata's keeps the last chunk it
read open and opens another when the sample lies elsewhere: `HANDLES_KEPT` says which, and
files per sample count those opens.

A shard compressed whole cannot be read that way, and a shard in an object store is not: both
libraries download a shard whole into their local cache, decompressed, before reading a sample
of it. Such a shard is read whole (one GET) and decompressed when a sample of it is first asked
for, and its samples kept, in memory (the libraries keep them on disk), up to MAX_WHOLE shards
(least recently used dropped first).

A shard that cannot be opened (its sample count differs from the index's, a compressed shard
that does not decompress) is remembered, and each of its samples then reported as that shard's
error without opening it again; the samples of a compressed shard before the point where it
broke are read, as front to back.
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

MAX_WHOLE = 16  # decompressed shards kept at once
_PAIR = struct.Struct("<II")


class _InPlace:
    """A shard read where its samples lie: an unbuffered file (local) or range GETs (remote),
    opened when made (counted as one open) and closed by close()."""

    def __init__(self, unit: str, table: int, size: int) -> None:
        self.unit, self.table, self.size = unit, table, size
        try:
            self.f: Any = store.open_raw(store.location(unit))
        except OSError as exc:
            raise SampleError(f"cannot read: {exc.strerror or exc}", path=unit) from None
        base.count_open()

    def samples(self) -> int:
        """The shard's sample count, from its header."""
        return int.from_bytes(self.at(self.table, 4, "its sample count"), "little")

    def at(self, pos: int, n: int, what: str) -> bytes:
        """`n` bytes at `pos`, in one read; a SampleError saying `what` was cut off."""
        try:
            self.f.seek(pos)
            data = self.f.read(n)
        except OSError as exc:
            raise SampleError(f"cannot read: {exc.strerror or exc}", path=self.unit) from None
        if data is None or len(data) != n:
            raise SampleError(f"truncated in {what} ({self.size} bytes)", path=self.unit)
        return bytes(data)

    def record(self, i: int) -> memoryview:
        start, end = _PAIR.unpack(self.at(self.table + 4 + 4 * i, 8, "its offset table"))
        if not self.table + 4 <= start <= end <= self.size:
            raise SampleError(f"corrupt offset table: sample {i} runs from byte {start} to "
                              f"{end} of {self.size}", path=self.unit)
        return memoryview(self.at(start, end - start, f"sample {i}"))

    def close(self) -> None:
        self.f.close()


class _Whole:
    """A shard compressed whole: read and decompressed once, its records kept; where it breaks
    off, the records before it, and its error for the rest."""

    def __init__(self, export: Any, unit: str, entry: Entry) -> None:
        self.records: list[Any] = []
        self.error: SampleError | None = None
        try:
            with export._open(entry, unit) as shard:
                for _, r in export._records(entry, shard, unit):
                    # Copied out of the shard's map; a record that is a value already (a
                    # litdata Arrow row) kept as it is.
                    self.records.append(bytes(r) if isinstance(r, memoryview) else r)
        except SampleError as err:
            self.error = err

    def record(self, i: int) -> Any:
        if i >= len(self.records):
            assert self.error is not None  # a whole shard holds every sample
            raise self.error
        r = self.records[i]
        return memoryview(r) if isinstance(r, bytes) else r


class ShardsAt:
    """`read_at` and `forget` for an IndexedExport (see the module docstring)."""

    # Shards kept open between reads where they lie: 0 opens the shard for every sample (MDS's
    # reader), 1 keeps the last one (litdata's).
    HANDLES_KEPT = 0

    def _init_random(self) -> None:
        self._handles: OrderedDict[str, _InPlace] = OrderedDict()
        self._whole: OrderedDict[str, _Whole] = OrderedDict()
        self._checked: dict[str, str | None] = {}  # shards opened: None, or why they cannot be
        self._firsts: dict[str, int] | None = None  # indexed.IndexedExport._first's

    def read_at(self: Any, unit: str, offset: int, skip: base.SkipHandler = None,
                ) -> base.RawSample | None:
        """Sample `offset` of shard `unit`, read as the module docstring says."""
        if unit in self.broken:
            base.report(SampleError(self.broken[unit], path=unit), skip)
            return None
        entry = self._by_unit[unit]
        if not 0 <= offset < entry.samples:
            raise DsbenchError(f"no sample {offset} here ({entry.samples} samples)", path=unit)
        key = str(self._first(unit) + offset)
        try:
            if not self._mapped(entry) or store.is_remote(self.root):
                record = self._whole_shard(unit, entry).record(offset)
            else:
                record = self._record(entry, self._in_place(unit, entry, offset), unit)
            return self._sample(entry, record, key, unit)
        except SampleError as err:
            base.report(err, skip)
            return None

    def forget(self: Any) -> None:
        for shard in self._handles.values():
            shard.close()
        self._handles.clear()
        self._whole.clear()
        self._checked.clear()

    def _in_place(self: Any, unit: str, entry: Entry, offset: int) -> memoryview:
        why = self._checked.get(unit, "")
        if why:
            raise SampleError(why, path=unit)
        shard = self._handles.pop(unit, None)
        if shard is None:
            shard = _InPlace(unit, self._table_start(entry), self.sizes[unit])
        try:
            if why is not None:  # first opened since forget(): its count against the index
                n, listed = shard.samples(), self._header_count(entry)
                self._checked[unit] = None if n == listed else (
                    f"holds {n} samples by its header, but {listed} by the index "
                    "(another shard's file, or corrupt)")
                if self._checked[unit]:
                    raise SampleError(self._checked[unit], path=unit)
            return self._locate(shard, entry, offset)
        finally:
            self._keep(unit, shard)

    def _header_count(self, entry: Entry) -> int:
        """The count a shard's header states: its samples (a token stream's: its documents)."""
        return int(entry.samples)

    def _locate(self, shard: _InPlace, entry: Entry, offset: int) -> memoryview:
        """Sample `offset`'s bytes, read where they lie (from its pair of offsets)."""
        return shard.record(offset)

    def _keep(self: Any, unit: str, shard: _InPlace) -> None:
        if self.HANDLES_KEPT == 0:
            shard.close()
            return
        self._handles[unit] = shard  # now the most recently used
        while len(self._handles) > self.HANDLES_KEPT:
            self._handles.popitem(last=False)[1].close()

    def _whole_shard(self: Any, unit: str, entry: Entry) -> _Whole:
        shard = self._whole.pop(unit, None) or _Whole(self, unit, entry)
        self._whole[unit] = shard
        while len(self._whole) > MAX_WHOLE:
            self._whole.popitem(last=False)
        return shard
