"""What MDS and litdata exports share: an index file listing binary shards of records.

Both formats write `index.json` at the export's root naming every shard, its sample count and
its size, and shards that start with a table of sample offsets: a uint32 count N, then N + 1
uint32 offsets, each sample's bytes running from one offset to the next. A sample is a header
of uint32 sizes followed by its columns' bytes. A shard may be compressed whole (MDS's
`.mds.zstd`, litdata's `compression_level="chunk"`); litdata's framed zstd is its own module's.

`IndexedExport` does what does not depend on the format: units are the shards in the index's
order; a local shard is memory-mapped (its offset table and each sample's bytes are counted as
mapped bytes, the file as one open), a remote one is fetched in one GET, a compressed one read
whole and decompressed; a shard whose file is missing or whose size differs from the index's is
broken, reported by survey() and raised (or skipped) when read. A subclass parses the index
(`_entries`) and turns one sample's bytes into a RawSample (`_sample`).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import itertools
import json
import math
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.adapters.shard_at import ShardsAt
from dsbench.adapters.survey import (
    CHECK_LIMIT,
    add_payload,
    apportion,
    finish_image,
    new_survey,
    problem,
)
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc

INDEX = "index.json"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SURVEY_UNITS = 8  # shards whose images survey() opens
OFFSETS_CHECKED = 200_000  # samples whose stored size survey() reads from offset tables


@dataclass(frozen=True)
class Entry:
    """One shard as the index lists it: the file, its samples, the bytes the file should
    hold, and how it is compressed (None, or the codec) with its size once decompressed."""

    name: str  # relative to the export's root
    samples: int
    stored_bytes: int | None
    compression: str | None = None
    raw_bytes: int | None = None


def read_index(root: Loc, what: str) -> dict[str, Any]:
    """The export's index.json as a dict; a DsbenchError naming it when it is not one."""
    path = root / INDEX
    try:
        data = json.loads(store.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise DsbenchError(f"not a readable {what} index: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise DsbenchError(f"not a {what} index: a JSON {type(data).__name__}", path=path)
    return data


def index_of(root: Loc) -> dict[str, Any] | None:
    """A directory's index.json if it has one that parses as a JSON object (for detection)."""
    if not store.is_dir(root) or store.size(root / INDEX) is None:
        return None
    try:
        data = json.loads(store.read_bytes(root / INDEX).decode("utf-8"))
    except (OSError, ValueError, DsbenchError):
        return None
    return data if isinstance(data, dict) else None


def zstd_content_size(data: bytes) -> int | None:
    """The decompressed size a zstd frame's header states (Frame_Content_Size), or None."""
    if len(data) < 6 or data[:4] != _ZSTD_MAGIC:
        return None
    fhd = data[4]
    single = (fhd >> 5) & 1
    fcs_size = {0: single, 1: 2, 2: 4, 3: 8}[fhd >> 6]
    pos = 5 + (0 if single else 1) + {0: 0, 1: 1, 2: 2, 3: 4}[fhd & 3]
    if fcs_size == 0 or len(data) < pos + fcs_size:
        return None
    size = int.from_bytes(data[pos:pos + fcs_size], "little")
    return size + 256 if fcs_size == 2 else size


def decompress(data: bytes, codec: str, size: int | None, where: str) -> bytes:
    """A shard compressed whole, decompressed; a SampleError naming it when that fails."""
    name = codec.split(":", 1)[0]
    try:
        if name == "gz":
            return gzip.decompress(data)
        if name == "bz2":
            return bz2.decompress(data)
        import pyarrow as pa

        arrow = {"zstd": "zstd", "br": "brotli", "snappy": "snappy"}.get(name)
        if arrow is None:
            raise SampleError(f"compression {codec!r} is not one dsbench reads (gz, bz2, zstd, "
                              "br, snappy)", path=where)
        size = size if size is not None else zstd_content_size(data)
        if size is None:
            raise SampleError(f"{codec} data that does not state its decompressed size",
                              path=where)
        return bytes(pa.Codec(arrow).decompress(data, decompressed_size=size, asbytes=True))
    except (OSError, EOFError, ValueError) as exc:
        raise SampleError(f"cannot decompress ({codec}; truncated or corrupt?): {exc}",
                          path=where) from None
    except Exception as exc:  # pyarrow raises its own types for corrupt input
        if type(exc).__module__.startswith("pyarrow"):
            raise SampleError(f"cannot decompress ({codec}; truncated or corrupt?): {exc}",
                              path=where) from None
        raise


def offset_table(buf: memoryview | bytes, samples: int, where: str, start: int = 0
                 ) -> list[int]:
    """The N + 1 sample offsets of a record shard (uint32 count, then the offsets), checked:
    the count matches the index, the offsets rise and stay within the shard."""
    if len(buf) < start + 4:
        raise SampleError(f"truncated: {len(buf) - start} bytes, not even a sample count",
                          path=where)
    n = int(np.frombuffer(buf, np.uint32, 1, start)[0])
    if n != samples:
        raise SampleError(f"holds {n} samples by its header, but {samples} by the index "
                          "(another shard's file, or corrupt)", path=where)
    if len(buf) < start + 4 * (n + 2):
        raise SampleError(f"truncated in its offset table ({len(buf)} bytes)", path=where)
    offsets = np.frombuffer(buf, np.uint32, n + 1, start + 4).tolist()
    if any(b < a for a, b in itertools.pairwise(offsets)):
        raise SampleError("corrupt offset table: offsets do not rise", path=where)
    return offsets


class IndexedExport(ShardsAt, base.ReadsUnits):
    """An export of record shards listed by an index; see the module docstring. Its samples
    are also read one at a time where they lie (shard_at.py)."""

    layout = ""
    what = ""  # the format in messages: "MDS", "litdata"

    def __init__(self, path: Loc) -> None:
        if not store.is_dir(path):
            raise DsbenchError(f"a {self.what} export is a directory holding {INDEX}",
                               path=path)
        self.path = self.root = path
        self.index = read_index(path, self.what)
        self._init_random()
        self.entries = self._entries(self.index)
        if not self.entries:
            raise DsbenchError(f"the {self.what} index lists no shards", path=path / INDEX)
        self._by_unit = {str(path / e.name): e for e in self.entries}
        listed = dict(base.walk(path))
        self.sizes = {str(path / e.name): listed.get(e.name, 0) for e in self.entries}
        self.broken: dict[str, str] = {}
        for e in self.entries:
            have = listed.get(e.name)
            if have is None:
                self.broken[str(path / e.name)] = "missing: the index lists this shard"
            elif e.stored_bytes is not None and have != e.stored_bytes:
                self.broken[str(path / e.name)] = (
                    f"{have} bytes, but {e.stored_bytes} by the index "
                    f"({'truncated' if have < e.stored_bytes else 'longer than written'})")
        # A merged index's parts keep their own index.json: read for nothing, and not data.
        self.ignored = [rel for rel in base.unread(path, {e.name for e in self.entries},
                                                   (INDEX,))
                        if rel.rpartition("/")[2] != INDEX]

    # ---- hooks of a format ----

    def _entries(self, index: dict[str, Any]) -> list[Entry]:
        raise NotImplementedError

    def _records(self, entry: Entry, shard: Shard, where: str
                 ) -> Iterator[tuple[int, memoryview]]:
        """(sample number in the shard, its bytes) of a whole shard's (decompressed) data."""
        data, start = shard.data, self._table_start(entry)
        offsets = offset_table(data, entry.samples, where, start)
        shard.touch(data[start:start + 4 * (entry.samples + 2)])
        if offsets[-1] > len(data):
            raise SampleError(f"truncated: sample {len(offsets) - 2} ends at byte "
                              f"{offsets[-1]}, but the shard has {len(data)}", path=where)
        for i in range(entry.samples):
            yield i, self._record(entry, shard.touch(data[offsets[i]:offsets[i + 1]]), where)

    def _table_start(self, entry: Entry) -> int:
        return 0

    def _record(self, entry: Entry, record: memoryview, where: str) -> memoryview:
        """A sample's bytes as stored at its offsets, made ready for `_sample` (litdata's
        compressed items are decompressed)."""
        return record

    def _sample(self, entry: Entry, data: memoryview, key: str, where: str) -> base.RawSample:
        """One sample's bytes as a RawSample; a SampleError naming the shard and key when its
        columns do not parse."""
        raise NotImplementedError

    def fields(self) -> dict[str, str]:
        """Each non-image field and its type, as the index states it."""
        raise NotImplementedError

    # ---- the Export protocol ----

    def units(self) -> list[str]:
        return list(self._by_unit)

    def unit_samples(self, unit: str) -> int:
        if unit in self.broken:
            raise SampleError(self.broken[unit], path=unit)
        return self._by_unit[unit].samples

    def _first(self, unit: str) -> int:
        """The export-wide number of the shard's first sample (a sample's key without one)."""
        if self._firsts is None:
            self._firsts = dict(zip(self._by_unit, itertools.accumulate(
                (e.samples for e in self._by_unit.values()), initial=0), strict=False))
        return self._firsts[unit]

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None,
                   ) -> Iterator[base.RawSample]:
        for unit in units:
            yield from self._read_unit(unit, skip)

    def _read_unit(self, unit: str, skip: base.SkipHandler) -> Iterator[base.RawSample]:
        if unit in self.broken:
            base.report(SampleError(self.broken[unit], path=unit), skip)
            return
        entry, first = self._by_unit[unit], self._first(unit)
        try:
            with self._open(entry, unit) as shard:
                for i, record in self._records(entry, shard, unit):
                    try:
                        yield self._sample(entry, record, str(first + i), unit)
                    except SampleError as err:
                        base.report(err, skip)
        except SampleError as err:
            base.report(err, skip)

    def _open(self, entry: Entry, unit: str) -> _ShardData:
        return _ShardData(store.location(unit), entry, mapped=self._mapped(entry))

    def _mapped(self, entry: Entry) -> bool:
        """Whether a local shard is read through a memory map (one not compressed whole)."""
        return entry.compression is None

    # ---- survey ----

    def survey(self) -> dict[str, Any]:
        survey = new_survey(self.layout)
        problems = survey["problems"]
        problems += [problem(u, None, m) for u, m in self.broken.items()]
        sample_bytes: list[int] = survey["sample_bytes"]
        readable = [u for u in self._by_unit if u not in self.broken]
        checked = 0
        for unit, e in self._by_unit.items():
            size = self.sizes[unit]
            weights: list[int] | None = None
            if unit in readable and checked < OFFSETS_CHECKED:
                try:
                    weights = self._stored_sizes(e, unit)
                    checked += e.samples
                except SampleError as err:
                    problems.append(problem(unit, None, str(err)))
                    readable.remove(unit)
            # The offset table and headers are shared by the shard's samples in proportion to
            # their sizes; beyond what was checked, samples share their shard's size evenly.
            sample_bytes += apportion(size, weights or [1] * e.samples)
        self._survey_images(survey, readable)
        samples = sum(e.samples for e in self.entries)
        survey.update({
            "samples": samples, "units": len(self.entries), "files": len(self.entries),
            "bytes": sum(self.sizes.values()),
            "files_per_sample": len(self.entries) / samples if samples else 0.0,
            "fields": {n: {"type": t, "missing_in": []} for n, t in self.fields().items()},
            "bad_samples": sum(1 for p in problems if p["key"] is not None),
        })
        return survey

    def _stored_sizes(self, e: Entry, unit: str) -> list[int]:
        """Each sample's stored size from the shard's offset table (the whole shard when it
        is compressed, where the table is inside the compressed data); rows of a columnar
        file inside the shard (litdata's Arrow rows) share its bytes evenly."""
        with self._open(e, unit) as shard:
            return [len(r) if isinstance(r, memoryview | bytes) else 1
                    for _, r in self._records(e, shard, unit)]

    def _survey_images(self, survey: dict[str, Any], units: list[str]) -> None:
        picked = sorted({round(x) for x in np.linspace(0, len(units) - 1,
                                                       min(len(units), SURVEY_UNITS))}
                        ) if units else []
        per_unit = math.ceil(CHECK_LIMIT / max(1, len(picked)))
        for i in picked:
            unit = units[i]
            entry, first = self._by_unit[unit], self._first(unit)
            try:
                with self._open(entry, unit) as shard:
                    for j, record in self._records(entry, shard, unit):
                        if j >= per_unit or survey["image"]["count_checked"] >= CHECK_LIMIT:
                            break
                        self._check_image(survey, entry, record, str(first + j), unit)
            except SampleError as err:
                survey["problems"].append(problem(unit, err.key, str(err)))
        finish_image(survey)

    def _check_image(self, survey: dict[str, Any], entry: Entry, record: memoryview,
                     key: str, unit: str) -> None:
        try:
            raw = self._sample(entry, record, key, unit)
            add_payload(survey, raw.codec, raw.image)
        except SampleError as err:
            survey["problems"].append(problem(unit, key, str(err)))
        except ValueError as exc:
            survey["problems"].append(problem(unit, key, str(exc)))


@dataclass
class Shard:
    """A shard's (decompressed) bytes; `mapped` when they are a local file's memory map,
    whose bytes the OS's read counters do not see (the reader counts what it touches)."""

    data: memoryview
    mapped: bool

    def touch(self, view: memoryview) -> memoryview:
        if self.mapped:
            base.count_mapped(len(view))
        return view


class _ShardData:
    """A shard for a `with` block: a local one not compressed whole is memory-mapped, any
    other read whole (one GET in an object store) and decompressed when it is compressed."""

    def __init__(self, path: Loc, entry: Entry, mapped: bool) -> None:
        self.path, self.entry, self.mapped = path, entry, mapped and isinstance(path, Path)
        self._mm: mmap.mmap | None = None
        self._f: Any = None
        self._view: memoryview | None = None

    def __enter__(self) -> Shard:
        where = str(self.path)
        try:
            if self.mapped:
                self._f = open(self.path, "rb")  # type: ignore[arg-type]  # a Path: mapped
                base.count_open()
                if self.path.stat().st_size == 0:  # type: ignore[union-attr]
                    raise SampleError("empty file (0 bytes)", path=where)
                self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
                self._view = memoryview(self._mm)
                return Shard(self._view, True)
            with base.open_file(self.path) as f:
                data = f.read()
        except OSError as exc:
            self.__exit__()
            raise SampleError(f"cannot read: {exc.strerror or exc}", path=where) from None
        if self.entry.compression:
            data = decompress(data, self.entry.compression, self.entry.raw_bytes, where)
        return Shard(memoryview(data), False)

    def __exit__(self, *exc: object) -> None:
        if self._view is not None:
            self._view.release()
        if self._mm is not None:
            # A slice still alive (an error unwinding): the map goes when it does.
            with contextlib.suppress(BufferError):
                self._mm.close()
        if self._f is not None:
            self._f.close()
