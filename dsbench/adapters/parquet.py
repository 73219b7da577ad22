"""Parquet shards (layout `parquet`), read row group by row group.

An export is a `.parquet` file or a tree of them; columns as in columns.py (pyarrow stores the
Arrow schema, field metadata included, in the footer).

Reading: every shard is opened as a native pyarrow file (counted with base.count_open), its
footer read for the schema and row counts, and its row groups read one at a time
(`ParquetFile.read_row_group`) on one thread: a loader worker is one process on one core.
Parquet always decodes, so nothing is zero-copy. Files that dsbench did not write are read the
same way, whatever their row groups.

Memory: pyarrow reads and decodes a row group's column chunks whole, so each worker holds about
a row group in memory (measured on 1000-row groups of ~95 kB samples: ~200 MB per worker,
the same read whole or in batches of 128 rows). That is the layout's cost, and bench's peak
PSS shows it; smaller row groups lower it.

survey(): a footer holds sizes per column chunk, not per row, so each row of a row group is
given an equal share of the row group's compressed size (and of the footer). A footer cannot
show a corrupt page, a null or an embedding of another length either, so the survey also reads
the row groups of the first shards (columnar.ROWS_CHECKED rows, images not decoded).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsbench.adapters import base
from dsbench.adapters.columnar import ColumnarAdapter
from dsbench.adapters.columns import BadChunk, Unreadable
from dsbench.adapters.rows import RandomRowsExport
from dsbench.storage import files as store
from dsbench.storage.files import Loc

EXTS = base.SUFFIXES["parquet"]
MAGIC = b"PAR1"


def _has_magic(head: bytes) -> bool:
    return head.startswith(MAGIC)


class _Opened:
    """One shard, opened as a native pyarrow file, with its footer parsed."""

    def __init__(self, path: Loc, streaming: bool = False) -> None:
        try:
            size = path.stat().st_size if isinstance(path, Path) else (store.size(path) or 0)
        except OSError as exc:
            raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
        if size == 0:
            raise Unreadable("empty file (0 bytes)")
        self.size = size
        try:
            # A native file, as pyarrow opens a path itself: handing it a Python file object
            # instead made every read_row_group cost about twice the CPU (measured: 110 vs
            # 55 ms per 96 MB shard), which would charge Parquet for dsbench's own wrapper.
            # An object in a store has no native file here: it is read over range requests.
            self.f: Any = (pa.OSFile(str(path)) if isinstance(path, Path)
                           else pa.PythonFile(store.open_seekable(path), mode="r"))
        except OSError as exc:
            raise Unreadable(f"cannot open: {exc.strerror or exc}") from None
        base.count_open()
        try:
            # streaming: read pages as needed instead of whole column chunks (survey's samples).
            self.pf = (pq.ParquetFile(self.f, pre_buffer=False, buffer_size=1 << 20) if streaming
                       else pq.ParquetFile(self.f))
            self.schema = self.pf.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            self.f.close()
            raise Unreadable(f"not a readable Parquet file (truncated or corrupt?): {exc}"
                             ) from None

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


class _RowGroups(_Opened):
    """A shard opened for random access: a row is read by reading its row group whole
    (decompressing every column chunk of it), which is the finest a Parquet reader can read."""

    def __init__(self, path: Loc) -> None:
        super().__init__(path)
        md = self.pf.metadata
        groups = [md.row_group(g) for g in range(md.num_row_groups)]
        self.name, self.whole = "row group", True
        self.starts = list(itertools.accumulate((g.num_rows for g in groups), initial=0))
        self.stored = [sum(g.column(j).total_compressed_size for j in range(g.num_columns))
                       for g in groups]

    def block(self, k: int) -> pa.RecordBatch | BadChunk:
        n = self.starts[k + 1] - self.starts[k]
        try:
            table = self.pf.read_row_group(k, use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            return BadChunk(n, f"row group {k} (rows {self.starts[k]}-{self.starts[k + 1] - 1}) "
                               f"is unreadable: {exc}")
        return table.combine_chunks().to_batches()[0] if n else pa.RecordBatch.from_pylist(
            [], schema=table.schema)

    def took(self, row: pa.RecordBatch) -> None:
        pass  # the row group's bytes were read by the OS (read_chars), all of them

    def close(self) -> None:
        self.f.close()


class ParquetExport(RandomRowsExport):
    layout = "parquet"

    def _header(self, path: Loc) -> tuple[pa.Schema, int | None]:
        with _Opened(path) as o:
            return o.schema, o.pf.metadata.num_rows

    def _count_rows(self, path: Loc) -> int:
        with _Opened(path) as o:
            return int(o.pf.metadata.num_rows)

    def _chunks(self, path: Loc) -> Iterator[pa.RecordBatch | BadChunk]:
        with _Opened(path) as o:
            row = 0
            for g in range(o.pf.num_row_groups):
                n = o.pf.metadata.row_group(g).num_rows
                try:
                    table = o.pf.read_row_group(g, use_threads=False)
                except (pa.ArrowException, OSError) as exc:
                    yield BadChunk(n, f"row group {g} (rows {row}-{row + n - 1}) is unreadable: "
                                      f"{exc}")
                else:
                    yield from table.to_batches()
                row += n

    def _blocks(self, path: Loc) -> _RowGroups:
        return _RowGroups(path)

    def _head(self, path: Loc, columns: list[str], rows: int) -> pa.Table:
        with _Opened(path, streaming=True) as o:
            schema = pa.schema([o.schema.field(c) for c in columns])
            try:
                for batch in o.pf.iter_batches(batch_size=rows, columns=columns,
                                               use_threads=False):
                    return pa.Table.from_batches([batch], schema=schema)
            except (pa.ArrowException, OSError) as exc:
                raise Unreadable(f"first rows are unreadable: {exc}") from None
        return schema.empty_table()

    def _sizes(self, path: Loc) -> tuple[np.ndarray, int]:
        with _Opened(path) as o:
            md = o.pf.metadata
            weights = []
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                stored = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
                weights.append(np.full(rg.num_rows, stored / max(1, rg.num_rows)))
            return (np.concatenate(weights) if weights else np.empty(0)), o.size


ADAPTER = ColumnarAdapter("parquet", EXTS, _has_magic, "Parquet", ParquetExport)
