"""Lance datasets (layout `lance`), read fragment by fragment through pylance.

An export is a directory holding `_versions/` (one manifest per version), `_transactions/` and
`data/*.lance` (one file per fragment, up to `max_rows_per_file` rows each). The Lance file
format is Lance's own, so its reader is the library's (the `lance` extra: pylance): dsbench
opens the latest version, takes each fragment as a unit (named by its data file), and reads it
as Arrow record batches (`LanceFragment.to_batches`), which go through the columnar plan as
Arrow and Parquet shards do (columns.py): the image is the column named by --image-field, else
one with dsbench's metadata, a telling name or JPEG/PNG bytes; a fixed-size float list is an
embedding. Lance reads with threads of its own, whose CPU is the reading process's.

Accounting: a fragment's data files count as opened when it is read (Lance opens them itself);
bytes are what its reads return to the process (/proc's read_chars), as for any reader. Rows a
deletion file removed are not samples. An export in an object store is read with the store's
settings from the environment (AWS_ENDPOINT_URL and the keys, as dsbench's own client takes
them); Lance's requests go through its own client, so requests per sample are not counted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from dsbench.adapters import base, payloads
from dsbench.adapters.columnar import ColumnarExport
from dsbench.adapters.columns import BadChunk, Unreadable
from dsbench.adapters.rows import one_row
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage import remote
from dsbench.storage.files import Loc, location

VERSIONS = "_versions"
BATCH_ROWS = 256


# dsbench's S3 settings (storage.remote, from the environment) by Lance's names for them.
_LANCE_KEYS = {"endpoint": "aws_endpoint", "access_key_id": "aws_access_key_id",
               "secret_access_key": "aws_secret_access_key", "token": "aws_session_token",
               "region": "aws_region", "allow_http": "allow_http"}


def storage_options(path: Loc) -> dict[str, str] | None:
    """Lance's storage options for an export in an object store: the settings dsbench's own
    client takes from the environment, by Lance's names."""
    if not store.is_remote(path):
        return None
    kwargs, options = remote.s3_options(os.environ)
    return {_LANCE_KEYS[k]: str(v) for k, v in {**kwargs, **options}.items()
            if k in _LANCE_KEYS}


def open_dataset(path: Loc) -> Any:
    try:
        import lance
    except ImportError:
        raise DsbenchError("reading a Lance dataset needs pylance: pip install "
                           "'dsbench[lance]'") from None
    try:
        return lance.dataset(str(path), storage_options=storage_options(path))
    except (OSError, ValueError, RuntimeError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DsbenchError(f"not a readable Lance dataset: {text}", path=path) from None


def _failed(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class LanceExport(ColumnarExport):
    layout = "lance"

    def __init__(self, path: Loc, image_field: str | None = None) -> None:
        self.ds = open_dataset(path)
        self.fragments: dict[str, Any] = {}
        found: dict[Loc, int] = {}
        listing = dict(base.walk(path))
        for fragment in self.ds.get_fragments():
            files = [f"data/{d.path}" for d in fragment.data_files()]
            unit = path / files[0]
            self.fragments[str(unit)] = fragment
            found[unit] = sum(listing.get(f, 0) for f in files)
        if not found:
            raise DsbenchError("the Lance dataset holds no fragments (no rows)", path=path)
        super().__init__(path, found, image_field)
        self.ignored = [rel for rel in base.unread(path, {store.relative(u, path)
                                                          for u in found})
                        if not rel.startswith("data/")]

    def _fragment(self, path: Loc) -> Any:
        return self.fragments[str(path)]

    def _header(self, path: Loc) -> tuple[pa.Schema, int | None]:
        try:
            return self.ds.schema, int(self._fragment(path).count_rows())
        except (OSError, ValueError, RuntimeError) as exc:
            raise Unreadable(f"cannot read the fragment: {_failed(exc)}") from None

    def _count_rows(self, path: Loc) -> int:
        return self._header(path)[1] or 0

    def _chunks(self, path: Loc) -> Iterator[pa.RecordBatch | BadChunk]:
        fragment = self._fragment(path)
        for _ in fragment.data_files():
            base.count_open()
        row = 0
        try:
            for batch in fragment.to_batches(batch_size=BATCH_ROWS):
                yield batch
                row += batch.num_rows
        except (OSError, ValueError, RuntimeError) as exc:
            yield BadChunk(0, f"rows from {row} on are unreadable: {_failed(exc)}")

    def read_at(self, unit: str, offset: int, skip: base.SkipHandler = None,
                ) -> base.RawSample | None:
        """Row `offset` of a fragment (rows a deletion file removed not counted), taken by
        Lance's own random access (`take`), which reads the row's own pages: what a map-style
        Dataset over a Lance dataset does for one index."""
        if unit in self._broken:
            base.report(SampleError(self._broken[unit], path=unit), skip)
            return None
        fragment = self._fragment(location(unit))
        for _ in fragment.data_files():
            # Lance opens the fragment's data files again for each take (strace shows one
            # openat per take), and reads their metadata again: counted as such.
            base.count_open()
        try:
            table = fragment.take([offset])
        except (OSError, ValueError, RuntimeError) as exc:
            base.report(SampleError(f"row {offset} is unreadable: {_failed(exc)}", path=unit),
                        skip)
            return None
        if table.num_rows != 1:
            raise DsbenchError(f"no row {offset} here", path=unit)
        return one_row(self, table.combine_chunks().to_batches()[0], unit, offset, skip)

    def forget(self) -> None:
        pass  # a take opens what it reads; nothing is kept between rows here

    def _head(self, path: Loc, cols: list[str], rows: int) -> pa.Table:
        try:
            return self._fragment(path).to_table(columns=cols, limit=rows)
        except (OSError, ValueError, RuntimeError) as exc:
            raise Unreadable(f"first rows are unreadable: {_failed(exc)}") from None

    def _sizes(self, path: Loc) -> tuple[np.ndarray, int]:
        size = self._size[str(path)]
        try:
            table = self._fragment(path).to_table(columns=[self.plan.image])
        except (OSError, ValueError, RuntimeError) as exc:
            raise Unreadable(f"cannot read the {self.kind} column: {_failed(exc)}") from None
        lengths = np.maximum(payloads.payload_lengths(table.column(self.plan.image)
                                                     .combine_chunks(), self.plan),
                             0).astype(np.float64)
        rest = max(0, size - int(lengths.sum()))
        return lengths + rest / max(1, len(lengths)), size


class LanceAdapter:
    name = "lance"

    def detect(self, path: Loc) -> bool:
        try:
            return store.is_dir(path) and store.is_dir(path / VERSIONS)
        except (OSError, DsbenchError):
            return False

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> LanceExport:
        return LanceExport(path, image_field)


ADAPTER = LanceAdapter()
