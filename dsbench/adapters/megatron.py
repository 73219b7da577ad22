"""Megatron-LM's indexed datasets (layout `megatron`), read without Megatron.

An export is a directory of datasets, each a prefix with two files: `PREFIX.bin`, the token ids
of every sequence laid end to end, and `PREFIX.idx`: the 9 bytes `MMIDIDX\\0\\0`, a uint64
version (1), a uint8 dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
7 float32, 8 uint16), a uint64 sequence count S and a uint64 count of document boundaries D + 1,
then S int32 sequence lengths (ids), S int64 byte offsets of the sequences in the .bin and the
D + 1 int64 boundaries (sequence numbers) of the documents; a multimodal index ends with S int8
modes. A directory holding several prefixes is a blend, as Megatron's data paths list several.

A sample is a sequence, as Megatron's IndexedDataset hands it over: its ids viewed where they
lie in the memory-mapped .bin (a range read in an object store). Loader workers split the
export by units of up to UNIT_SEQUENCES consecutive sequences of one prefix (`PREFIX@FIRST`), as
Megatron's samplers give each rank a range of the index. A .bin shorter than its index says is
reported by survey() and is a bad sample when read; an index that does not parse is refused.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.adapters.survey import CHECK_LIMIT, add_tokens, apportion, new_survey, problem
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc

MAGIC = b"MMIDIDX\x00\x00"
_HEAD = struct.Struct("<9sQBQQ")
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64", 7: "float32",
          8: "uint16"}
UNIT_SEQUENCES = 4096


@dataclass(frozen=True)
class Index:
    """One prefix's .idx, parsed."""

    dtype: np.dtype[Any]
    lengths: np.ndarray  # ids per sequence
    pointers: np.ndarray  # byte offset of each sequence in the .bin
    bin_bytes: int  # the .bin's size on disk
    idx_bytes: int  # the .idx's


def _parse(data: bytes, where: Loc) -> tuple[np.dtype[Any], np.ndarray, np.ndarray]:
    if len(data) < _HEAD.size or not data.startswith(MAGIC):
        raise DsbenchError("not a Megatron index: no MMIDIDX header", path=where)
    _, version, code, sequences, boundaries = _HEAD.unpack_from(data)
    if version != 1 or code not in DTYPES:
        raise DsbenchError(f"Megatron index of version {version}, dtype code {code}: dsbench "
                           f"reads version 1 with codes {sorted(DTYPES)}", path=where)
    need = _HEAD.size + 12 * sequences + 8 * boundaries
    if len(data) < need:
        raise DsbenchError(f"truncated Megatron index: {len(data)} bytes where its counts "
                           f"({sequences} sequences, {boundaries} document boundaries) need "
                           f"{need}", path=where)
    lengths = np.frombuffer(data, "<i4", sequences, _HEAD.size)
    pointers = np.frombuffer(data, "<i8", sequences, _HEAD.size + 4 * sequences)
    return np.dtype(DTYPES[code]), lengths, pointers


def prefixes(listing: dict[str, int]) -> list[str]:
    """The dataset prefixes of a directory's files (relative path -> size), each with an .idx
    and a .bin."""
    return sorted(rel[:-4] for rel in listing
                  if rel.endswith(".idx") and rel[:-4] + ".bin" in listing)


class MegatronExport(base.ReadsUnits):
    layout = "megatron"
    kind = base.TOKENS
    payload_field = "the .bin's sequences"

    def __init__(self, path: Loc) -> None:
        self.path = path
        self.ignored: list[str] = []
        listing = dict(store.walk(path))
        found = prefixes(listing)
        if not found:
            raise DsbenchError("no Megatron dataset: no PREFIX.idx with its PREFIX.bin",
                               path=path)
        self.index: dict[str, Index] = {}
        for prefix in found:
            where = path / f"{prefix}.idx"
            with store.open_stream(where) as f:
                data = f.read()
            self.index[prefix] = Index(*_parse(data, where), listing[f"{prefix}.bin"],
                                       listing[f"{prefix}.idx"])
        dtypes = {str(i.dtype) for i in self.index.values()}
        if len(dtypes) > 1:
            raise DsbenchError(f"a blend of datasets of several dtypes "
                               f"({', '.join(sorted(dtypes))}): read each on its own", path=path)
        pairs = {f"{p}.{ext}" for p in found for ext in ("bin", "idx")}
        self.ignored = sorted(rel for rel in listing if rel not in pairs and rel != base.MANIFEST)
        self.bytes = sum(listing[rel] for rel in pairs)
        self._units = {f"{p}@{first}": (p, first, min(first + UNIT_SEQUENCES, len(i.lengths)))
                       for p, i in self.index.items()
                       for first in range(0, len(i.lengths), UNIT_SEQUENCES)}
        self._maps: dict[str, Any] = {}  # each .bin mapped once, kept while the export lives

    def units(self) -> list[str]:
        return list(self._units)

    def unit_samples(self, unit: str) -> int:
        _, first, end = self._span(unit)
        return end - first

    def _span(self, unit: str) -> tuple[str, int, int]:
        if unit not in self._units:
            raise SampleError("no such unit of the export", path=unit)
        return self._units[unit]

    def fields(self) -> dict[str, str]:
        return {}

    def _data(self, prefix: str, start: int, stop: int) -> Any:
        """The .bin's bytes [start, stop): a view of its memory map, or one range read."""
        loc = self.path / f"{prefix}.bin"
        if store.is_remote(loc):
            with base.open_file(loc, seekable=True) as f:
                f.seek(start)
                return f.read(stop - start)
        if prefix not in self._maps:
            with open(str(loc), "rb") as f:
                base.count_open()
                self._maps[prefix] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) \
                    if self.index[prefix].bin_bytes else b""
        base.count_mapped(stop - start)
        return memoryview(self._maps[prefix])[start:stop]

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None
                   ) -> Iterator[base.RawSample]:
        for unit in units:
            yield from self._read_unit(unit, skip)

    def _read_unit(self, unit: str, skip: base.SkipHandler) -> Iterator[base.RawSample]:
        prefix, first, end = self._span(unit)
        idx, where = self.index[prefix], str(self.path / f"{prefix}.bin")
        width = idx.dtype.itemsize
        ends = idx.pointers[first:end] + idx.lengths[first:end].astype(np.int64) * width
        start = int(idx.pointers[first]) if end > first else 0
        stop = min(int(ends.max()) if end > first else 0, idx.bin_bytes)
        data = self._data(prefix, start, stop) if stop > start else b""
        for i in range(first, end):
            at, n = int(idx.pointers[i]) - start, int(idx.lengths[i])
            if at < 0 or at + n * width > len(data) or n < 0:
                base.report(SampleError(f"sequence {i} lies at bytes {idx.pointers[i]}+"
                                        f"{n * width} of a .bin of {idx.bin_bytes} bytes "
                                        "(truncated?)", path=where, key=f"{prefix}:{i}"), skip)
                continue
            yield base.RawSample(f"{prefix}:{i}", where, np.frombuffer(data, idx.dtype, n, at),
                                 base.TOKENS, {}, {})

    def survey(self) -> dict[str, Any]:
        survey = new_survey(self.layout)
        sample_bytes: list[int] = survey["sample_bytes"]
        checked = 0
        for prefix, idx in self.index.items():
            width = idx.dtype.itemsize
            # The pair's bytes, the index's shared in proportion to each sequence's ids.
            sample_bytes += apportion(idx.bin_bytes + idx.idx_bytes,
                                      (idx.lengths.astype(np.int64) * width).tolist())
            bad = np.nonzero(idx.pointers + idx.lengths.astype(np.int64) * width
                             > idx.bin_bytes)[0]
            for i in bad[:CHECK_LIMIT].tolist():
                survey["problems"].append(problem(self.path / f"{prefix}.bin", f"{prefix}:{i}",
                                                  "the sequence lies past the .bin's end "
                                                  "(truncated?)"))
            for n in idx.lengths[:max(0, CHECK_LIMIT - checked)].tolist():
                add_tokens(survey, str(idx.dtype), n)
                checked += 1
        samples = sum(len(i.lengths) for i in self.index.values())
        survey.update({
            "samples": samples, "units": len(self._units), "files": 2 * len(self.index),
            "bytes": self.bytes,
            "files_per_sample": len(self.index) / samples if samples else 0.0,
            "bad_samples": sum(1 for p in survey["problems"] if p["key"] is not None),
        })
        return survey


def _signed(path: Loc) -> bool:
    if not store.is_dir(path):
        return False
    for prefix in prefixes(dict(store.walk(path)))[:1]:
        with store.open_stream(path / f"{prefix}.idx") as f:
            return f.read(len(MAGIC)) == MAGIC
    return False


class MegatronAdapter:
    name = "megatron"

    def detect(self, path: Loc) -> bool:
        try:
            return _signed(path)
        except (OSError, DsbenchError):
            return False

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> MegatronExport:
        if image_field is not None:
            raise DsbenchError(f"--image-field {image_field}: a Megatron dataset's samples are "
                               "its sequences of token ids, with no fields to choose from",
                               path=path)
        return MegatronExport(path)


ADAPTER = MegatronAdapter()
