"""Parquet shards: `shard-%06d.parquet`, read row group by row group.

Layout written: one Parquet file per shard of `shard_samples` rows, in row groups of at most
`shard_samples` rows, with the columns described in columnar.py (pyarrow stores the Arrow
schema, field metadata included, in the footer). Compression: zstd at pyarrow's default level
for every column except a JPEG or PNG image column, which is stored uncompressed: those bytes
are compressed already (measured on the image column of 1000 synthetic q90 JPEGs: zstd made it
2 kB larger, 92.5 MB either way, and reading the row group took 42.8 instead of 29.0 ms of CPU);
raw .npy images are zstd-compressed like the rest. Dictionary
encoding only for integer fields (labels repeat; keys, images and embeddings do not), and
column statistics only for the key and integer fields (min/max of image bytes help nobody).

Reading: every shard is opened as a native pyarrow file (counted with base.count_open), its
footer read for the schema and row counts, and its row groups read one at a time
(`ParquetFile.read_row_group`) on one thread: a loader worker is one process on one core.
Parquet always decodes, so nothing is zero-copy. Files that dsbench did not write are read the
same way, whatever their row groups.

survey(): a footer holds sizes per column chunk, not per row, so each row of a row group is
given an equal share of the row group's compressed size (and of the footer).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsbench.adapters import base, columnar, columnar_export
from dsbench.adapters.columnar import BadChunk, Unreadable
from dsbench.adapters.columnar_export import ColumnarExport
from dsbench.spec import ExportSpec

EXTS = (".parquet",)
MAGIC = b"PAR1"
COMPRESSION = "zstd"


def _has_magic(head: bytes) -> bool:
    return head.startswith(MAGIC)


class _Opened:
    """One shard, opened as a native pyarrow file, with its footer parsed."""

    def __init__(self, path: Path, streaming: bool = False) -> None:
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
        if size == 0:
            raise Unreadable("empty file (0 bytes)")
        self.size = size
        try:
            # A native file, as pyarrow opens a path itself: handing it a Python file object
            # instead made every read_row_group cost about twice the CPU (measured: 110 vs
            # 55 ms per 96 MB shard), which would charge Parquet for dsbench's own wrapper.
            self.f = pa.OSFile(str(path))
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


class ParquetExport(ColumnarExport):
    layout = "parquet"

    def _header(self, path: Path) -> tuple[pa.Schema, int | None]:
        with _Opened(path) as o:
            return o.schema, o.pf.metadata.num_rows

    def _count_rows(self, path: Path) -> int:
        with _Opened(path) as o:
            return int(o.pf.metadata.num_rows)

    def _chunks(self, path: Path) -> Iterator[pa.RecordBatch | BadChunk]:
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

    def _head(self, path: Path, columns: list[str], rows: int) -> pa.Table:
        with _Opened(path, streaming=True) as o:
            schema = pa.schema([o.schema.field(c) for c in columns])
            try:
                for batch in o.pf.iter_batches(batch_size=rows, columns=columns,
                                               use_threads=False):
                    return pa.Table.from_batches([batch], schema=schema)
            except (pa.ArrowException, OSError) as exc:
                raise Unreadable(f"first rows are unreadable: {exc}") from None
        return schema.empty_table()

    def _sizes(self, path: Path) -> tuple[np.ndarray, int]:
        with _Opened(path) as o:
            md = o.pf.metadata
            weights = []
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                stored = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
                weights.append(np.full(rg.num_rows, stored / max(1, rg.num_rows)))
            return (np.concatenate(weights) if weights else np.empty(0)), o.size


def _leaf_paths(schema: pa.Schema) -> dict[str, list[str]]:
    """Parquet leaf column paths per top-level column (per-column options name leaves)."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    pschema = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema
    leaves: dict[str, list[str]] = {}
    for i in range(len(pschema)):
        path = pschema.column(i).path
        leaves.setdefault(path.split(".")[0], []).append(path)
    return leaves


def write_options(spec: ExportSpec, schema: pa.Schema) -> dict[str, Any]:
    """pq.write_table options for an export of `spec` (see the module docstring)."""
    leaves = _leaf_paths(schema)
    plain_image = spec.image.codec in ("jpeg", "png")
    compression = {leaf: ("NONE" if top == "image" and plain_image else COMPRESSION)
                   for top, paths in leaves.items() for leaf in paths}
    ints = [f.name for f in spec.fields if f.type == "int"]
    return {"row_group_size": spec.shard_samples, "compression": compression,
            "use_dictionary": ints, "write_statistics": ["key", *ints]}


class ParquetAdapter:
    name = "parquet"

    def detect(self, path: Path) -> bool:
        return columnar_export.detect_files(path, EXTS, _has_magic)

    def open(self, path: Path) -> ParquetExport:
        return ParquetExport(path, columnar_export.data_files(path, EXTS, "Parquet"))

    def unit_paths(self, spec: ExportSpec, out_dir: Path, unit: int) -> list[Path]:
        return [out_dir / f"shard-{unit:06d}.parquet"]

    def write_unit(self, spec: ExportSpec, out_dir: Path, unit: int,
                   samples: list[dict[str, Any]]) -> None:
        batch = columnar.to_record_batch(spec, samples)
        table = pa.Table.from_batches([batch])
        options = write_options(spec, batch.schema)
        columnar.write_atomically(self.unit_paths(spec, out_dir, unit)[0],
                                  lambda tmp: pq.write_table(table, str(tmp), **options))


ADAPTER = ParquetAdapter()
