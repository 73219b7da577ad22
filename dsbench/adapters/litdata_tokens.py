"""litdata exports written with `optimize(..., item_loader=TokensLoader())` (layout `litdata`):
a token stream per chunk, read in blocks whose length the reader chooses.

Such a chunk has the usual header (a uint32 item count N, then N + 1 uint32 offsets, here of
its documents), then its documents' ids laid end to end, with no per-item size header; the
index states each chunk's `dim` (its ids) and one data format for all of them
(`no_header_numpy:K` or `no_header_tensor:K`, K an integer dtype). litdata's
`TokensLoader(block_size=B)` hands over blocks of B consecutive ids, chunk after chunk: a block
runs across documents but never across chunks, and the last `dim % B` ids of a chunk are never
read. dsbench reads the same blocks, B being the reader's sequence length (`--seq-len`): a
sample is a block, numbered across the export as litdata numbers them, and its ids are copied
out of the shard as litdata's reader copies them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from dsbench.adapters import base, indexed
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage.files import Loc

LOADER = "TokensLoader"
_HEADER_ONLY = ("no_header_numpy", "no_header_tensor")


class TokenStreamExport(indexed.IndexedExport):
    """A TokensLoader export: see the module docstring."""

    layout = "litdata"
    what = "litdata"
    HANDLES_KEPT = 1  # litdata's reader keeps the chunk it read last open
    kind = base.TOKENS
    image = "item"  # the name litdata's reader gives a lone leaf (the native reader's payload)
    payload_field = "the chunks' token stream"

    def __init__(self, path: Loc, image_field: str | None, seq_len: int | None,
                 dtype: str | None) -> None:
        where = path / indexed.INDEX
        if image_field is not None:
            raise DsbenchError(f"--image-field {image_field}: the samples of a {LOADER} export "
                               "are blocks of its token stream, with no fields to choose from",
                               path=where)
        if dtype is None:
            raise DsbenchError(f"a {LOADER} export whose data format is not one integer array "
                               f"({', '.join(_HEADER_ONLY)} of an integer dtype): litdata's "
                               f"{LOADER} does not read it either", path=where)
        self.block = base.SEQ_LEN if seq_len is None else seq_len
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.chunk: dict[str, tuple[int, int]] = {}  # file -> (documents, ids)
        self._spans: dict[str, str | None] = {}  # chunks read where they lie: why not, or None
        self.field_names: list[str] = []
        self.field_encodings: dict[str, str] = {}
        super().__init__(path)
        if self.index["config"].get("compression"):
            raise DsbenchError(f"a {LOADER} export with compressed chunks "
                               f"({self.index['config'].get('compression')}): dsbench does not "
                               "read them yet", path=where)
        if not any(e.samples for e in self.entries):
            longest = max(ids for _, ids in self.chunk.values())
            raise DsbenchError(f"no block of {self.block} ids (--seq-len) fits in a chunk: the "
                               f"longest holds {longest} ids", path=where)
        self._parse = partial(np.frombuffer, dtype=self.dtype)

    def _entries(self, index: dict[str, Any]) -> list[indexed.Entry]:
        chunks, where = index.get("chunks"), self.path / indexed.INDEX
        if not isinstance(chunks, list):
            raise DsbenchError("not a litdata index: no list of chunks", path=where)
        out = []
        for c in chunks:
            try:
                name, documents, ids = str(c["filename"]), int(c["chunk_size"]), int(c["dim"])
                stored = int(c["chunk_bytes"]) if c.get("chunk_bytes") is not None else None
            except (KeyError, TypeError, ValueError) as exc:
                raise DsbenchError(f"a chunk of the {LOADER} index lacks or misstates {exc} "
                                   "(its documents, ids or file)", path=where) from None
            self.chunk[name] = (documents, ids)
            out.append(indexed.Entry(name, ids // self.block, stored))
        return out

    def _span(self, entry: indexed.Entry) -> tuple[int, int, int]:
        """Where a chunk's ids start, how many bytes they take, and a block's bytes."""
        documents, ids = self.chunk[entry.name]
        return 4 * (documents + 2), ids * self.dtype.itemsize, self.block * self.dtype.itemsize

    def _problem(self, entry: indexed.Entry, first: int, end: int, length: int) -> str | None:
        """Why a chunk whose offsets put its documents from byte `first` to `end`, in a file of
        `length` bytes, does not hold the index's ids where litdata reads them; None if it does."""
        start, size, _ = self._span(entry)
        if first != start or end - first != size:
            return (f"its offsets put the ids at bytes {first} to {end}, but the index's "
                    f"{self.chunk[entry.name][1]} ids of {self.dtype.name} lie at {start} to "
                    f"{start + size}")
        if length < start + size:
            return (f"truncated: its ids end at byte {start + size}, but the chunk has "
                    f"{length}")
        return None

    def _records(self, entry: indexed.Entry, shard: indexed.Shard, where: str
                 ) -> Iterator[tuple[int, memoryview]]:
        start, _, block = self._span(entry)
        data = shard.data
        offsets = indexed.offset_table(data, self.chunk[entry.name][0], where)
        shard.touch(data[:start])
        why = self._problem(entry, offsets[0], offsets[-1], len(data))
        if why:
            raise SampleError(why, path=where)
        for i in range(entry.samples):
            yield i, shard.touch(data[start + i * block:start + (i + 1) * block])

    def _header_count(self, entry: indexed.Entry) -> int:
        return self.chunk[entry.name][0]

    def _locate(self, shard: Any, entry: indexed.Entry, offset: int) -> memoryview:
        """A block read where it lies; the chunk's first and last offsets checked once, as a
        read front to back checks them, so that both orders refuse the same chunks."""
        start, _, block = self._span(entry)
        if entry.name not in self._spans:
            documents = self.chunk[entry.name][0]
            first = int.from_bytes(shard.at(4, 4, "its offset table"), "little")
            end = int.from_bytes(shard.at(4 + 4 * documents, 4, "its offset table"), "little")
            self._spans[entry.name] = self._problem(entry, first, end, shard.size)
        why = self._spans[entry.name]
        if why:
            raise SampleError(why, path=shard.unit)
        return memoryview(shard.at(start + offset * block, block, f"block {offset}"))

    def _sample(self, entry: indexed.Entry, data: Any, key: str, where: str
                ) -> base.RawSample:
        # Copied out of the shard, as litdata's TokensLoader copies each block it hands over.
        return base.RawSample(key, where, base.StoredIds(self._parse, bytes(data)), base.TOKENS,
                              {}, {})

    def fields(self) -> dict[str, str]:
        return {}

    def survey(self) -> dict[str, Any]:
        survey = super().survey()
        ids = [i for _, i in self.chunk.values()]
        survey["stream"] = {"block": self.block, "ids": sum(ids),
                            "documents": sum(d for d, _ in self.chunk.values()),
                            "unread_ids": sum(i % self.block for i in ids)}
        return survey
