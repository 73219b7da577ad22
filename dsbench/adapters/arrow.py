"""Arrow IPC shards (layout `arrow`), memory-mapped and read zero-copy.

An export is a file or a tree of `.arrow` (`.feather`, `.ipc`, `.arrows`) files, each an Arrow
IPC *file* (the random-access format, magic b"ARROW1") or *stream*; columns as in columns.py.

Reading: each shard is opened with `pa.memory_map` (counted with base.count_open, since pyarrow
opens the file itself) and read batch by batch with the file format's random access
(`get_batch(k)`); the bytes of each batch's buffers are counted with base.count_mapped. Also
read: the IPC *stream* format (as RecordBatchStreamWriter writes it: no footer, read front to
back), compressed IPC files (e.g. Feather v2 with lz4, whose decompressed buffers are not in
the map: the batch's share of the file is counted instead), and the extensions .feather, .ipc
and .arrows. A file is told apart by its first bytes: b"ARROW1" for the file format, the
continuation marker 0xFFFFFFFF for a stream.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dsbench.adapters import base, payloads
from dsbench.adapters.columnar import ColumnarAdapter
from dsbench.adapters.columns import BadChunk, Unreadable
from dsbench.adapters.rows import RandomRowsExport
from dsbench.storage import files as store
from dsbench.storage.files import Loc

EXTS = base.SUFFIXES["arrow"]
FILE_MAGIC = b"ARROW1"
STREAM_MAGIC = b"\xff\xff\xff\xff"


def _has_magic(head: bytes) -> bool:
    return head.startswith((FILE_MAGIC, STREAM_MAGIC))


class _Mapped:
    """One shard, memory-mapped, with its IPC file or stream reader."""

    def __init__(self, path: Loc) -> None:
        try:
            self.size = path.stat().st_size if isinstance(path, Path) else (store.size(path) or 0)
        except OSError as exc:
            raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
        if self.size == 0:
            raise Unreadable("empty file (0 bytes)")
        self.remote = not isinstance(path, Path)
        try:
            # An object in a store cannot be mapped: it is read over range requests, whose
            # bytes the store's accounting counts, so nothing is counted as mapped.
            self.mm: Any = (pa.PythonFile(store.open_seekable(path), mode="r") if self.remote
                            else pa.memory_map(str(path)))
        except OSError as exc:
            raise Unreadable(f"cannot open: {exc}") from None
        base.count_open()
        # The magic, and the address range of the map (to tell mapped buffers from copies).
        first = self.mm.read_buffer(min(8, self.size))
        head, self.lo = first.to_pybytes(), first.address
        self.mm.seek(0)
        if head.startswith(FILE_MAGIC):
            self.stream = False
        elif head.startswith(STREAM_MAGIC):
            self.stream = True
        else:
            self.mm.close()
            if head.startswith(b"FEA1"):
                raise Unreadable("a Feather version 1 file; only Arrow IPC (Feather v2) is read")
            raise Unreadable(f"not an Arrow IPC file or stream (it starts {head!r})")
        kind = "stream" if self.stream else "file"
        try:
            self.reader: Any = (pa.ipc.open_stream(self.mm) if self.stream
                                else pa.ipc.open_file(self.mm))
        except (pa.ArrowException, OSError) as exc:
            self.mm.close()
            raise Unreadable(f"not a readable Arrow IPC {kind} (truncated or corrupt?): {exc}"
                             ) from None

    def __enter__(self) -> _Mapped:
        return self

    def __exit__(self, *exc: object) -> None:
        # Buffers handed out keep the mapped region alive; closing only drops the file handle.
        self.mm.close()

    def batches(self) -> Iterator[pa.RecordBatch | BadChunk]:
        if self.stream:
            k = 0
            while True:
                try:
                    batch = self.reader.read_next_batch()
                except StopIteration:
                    return
                except (pa.ArrowException, OSError) as exc:
                    # A stream has no index: nothing after a damaged message can be found.
                    yield BadChunk(0, f"record batch {k} and after unreadable: {exc}")
                    return
                yield batch
                k += 1
        for k in range(self.reader.num_record_batches):
            try:
                batch = self.reader.get_batch(k)
            except (pa.ArrowException, OSError) as exc:
                yield BadChunk(0, f"record batch {k} unreadable: {exc}")
                continue
            yield batch

    def count_rows(self) -> int:
        if not self.stream:
            return int(self.reader.count_rows())  # message headers only
        return sum(b.num_rows for b in self.batches() if isinstance(b, pa.RecordBatch))

    def mapped_bytes(self, batch: pa.RecordBatch, total_rows: int) -> int:
        if self.remote:
            return 0
        inside = outside = 0
        for column in batch.columns:
            for buf in column.buffers():
                if buf is None:
                    continue
                if self.lo <= buf.address < self.lo + self.size:
                    inside += buf.size
                else:
                    outside += buf.size
        if outside and total_rows:
            # Compressed IPC: what was read through the map is this batch's share of the file.
            return round(self.size * batch.num_rows / total_rows)
        return inside


class _Batches(_Mapped):
    """A shard opened for random access: its record batches, located through the file's footer
    (a stream has none: its batches are found by reading its message headers once, as a
    memory-mapped stream is read whole), each taken zero-copy from the map."""

    def __init__(self, path: Loc) -> None:
        super().__init__(path)
        self.name = "record batch"
        try:
            self.found = list(self.batches()) if self.stream else None
            located = self.found if self.found is not None else [
                self.reader.get_batch(k) for k in range(self.reader.num_record_batches)]
        except (pa.ArrowException, OSError) as exc:
            self.mm.close()
            raise Unreadable(f"record batches cannot be located: {exc}") from None
        rows = [b.rows if isinstance(b, BadChunk) else b.num_rows for b in located]
        self.starts = list(itertools.accumulate(rows, initial=0))
        self.stored = [0 if isinstance(b, BadChunk) else b.nbytes for b in located]
        first = next((b for b in located if not isinstance(b, BadChunk)), None)
        self.zero_copy = not self.remote and (first is None or self._in_map(first))
        # Over range requests, or decompressed, a batch is read whole; mapped, a row is not.
        self.whole = not self.zero_copy

    def _in_map(self, batch: pa.RecordBatch) -> bool:
        return all(self.lo <= buf.address < self.lo + self.size
                   for column in batch.columns for buf in column.buffers() if buf is not None)

    def block(self, k: int) -> pa.RecordBatch | BadChunk:
        if self.found is not None:
            batch = self.found[k]
            if isinstance(batch, BadChunk):
                return batch
        else:
            try:
                batch = self.reader.get_batch(k)
            except (pa.ArrowException, OSError) as exc:
                return BadChunk(0, f"record batch {k} unreadable: {exc}")
        if not self.remote:
            # A compressed batch is decompressed whole, out of the map: its share of the file
            # was read. Otherwise only the rows taken are touched (took()).
            self.zero_copy = self._in_map(batch)
            if not self.zero_copy:
                base.count_mapped(self.mapped_bytes(batch, self.starts[-1]))
        return batch

    def took(self, row: pa.RecordBatch) -> None:
        if self.remote or not self.zero_copy:
            return
        try:
            # Offsets of a corrupt file must not send anyone reading outside its buffers.
            row.validate(full=True)
        except pa.ArrowException as exc:
            raise ValueError(f"corrupt: {exc}") from None
        base.count_mapped(row.nbytes)  # a slice's own bytes: what touching the row maps in

    def close(self) -> None:
        self.mm.close()


class ArrowExport(RandomRowsExport):
    layout = "arrow"

    def _header(self, path: Loc) -> tuple[pa.Schema, int | None]:
        with _Mapped(path) as m:
            # A stream has no footer: a local one is counted here, while opening (its batches
            # are mapped, so this reads message headers), rather than by reopening it at the
            # first read that needs its row count; a remote one would be fetched whole.
            return m.reader.schema, (None if m.stream and m.remote else m.count_rows())

    def _count_rows(self, path: Loc) -> int:
        with _Mapped(path) as m:
            return m.count_rows()

    def _chunks(self, path: Loc) -> Iterator[pa.RecordBatch | BadChunk]:
        rows = self._rows.get(str(path)) or 0
        with _Mapped(path) as m:
            for k, batch in enumerate(m.batches()):
                if isinstance(batch, BadChunk):
                    yield batch
                    continue
                base.count_mapped(m.mapped_bytes(batch, rows))
                try:
                    # Offsets of a corrupt file must not send anyone reading outside its buffers.
                    batch.validate(full=True)
                except pa.ArrowException as exc:
                    yield BadChunk(batch.num_rows, f"record batch {k} is corrupt: {exc}")
                    continue
                yield batch

    def _blocks(self, path: Loc) -> _Batches:
        return _Batches(path)

    def _head(self, path: Loc, columns: list[str], rows: int) -> pa.Table:
        got: list[pa.RecordBatch] = []
        with _Mapped(path) as m:
            schema = pa.schema([m.reader.schema.field(c) for c in columns])
            for batch in m.batches():
                if isinstance(batch, BadChunk):
                    raise Unreadable(batch.message)
                batch = batch.select(columns)
                try:
                    batch.validate(full=True)
                except pa.ArrowException as exc:
                    raise Unreadable(f"record batch {len(got)} is corrupt: {exc}") from None
                got.append(batch)
                if sum(b.num_rows for b in got) >= rows:
                    break
        return pa.Table.from_batches(got, schema=schema).slice(0, rows)

    def _sizes(self, path: Loc) -> tuple[np.ndarray, int]:
        weights: list[np.ndarray] = []
        with _Mapped(path) as m:
            for batch in m.batches():
                if isinstance(batch, BadChunk):
                    raise Unreadable(batch.message)
                n = batch.num_rows
                if n == 0:
                    continue
                try:
                    batch.validate()  # buffer sizes only: the offsets are about to be read
                except pa.ArrowException as exc:
                    raise Unreadable(f"a record batch is corrupt: {exc}") from None
                # Each row: its payload's bytes and an equal share of the batch's other columns.
                lengths = np.maximum(payloads.payload_lengths(batch.column(self.plan.image),
                                                             self.plan), 0)
                base.count_mapped(4 * (n + 1))  # the offsets that binary_lengths looked at
                rest = max(0, batch.nbytes - int(lengths.sum()))
                weights.append(lengths + rest / n)
        return (np.concatenate(weights) if weights else np.empty(0)), m.size


ADAPTER = ColumnarAdapter("arrow", EXTS, _has_magic, "Arrow IPC", ArrowExport)
