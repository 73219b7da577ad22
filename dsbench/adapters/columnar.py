"""Finding and opening a columnar export (Arrow IPC or Parquet shards): units, reading, survey.

An export is a file, or a directory tree of data files found by extension (names starting with
. or _ are skipped at any depth, so manifests, temporaries and Spark's _SUCCESS are ignored).

`ColumnarExport` does everything that does not depend on the file format; a subclass supplies
five small hooks that open one shard: its header (schema, and row count where cheap), its row
count, its batches, a few rows of some columns, and the on-disk size of its rows. Opening reads
every shard's schema from its header or footer and unifies them (columnar.unify), so all shards
are read with one schema.

A shard whose header cannot be read does not stop the others: it is reported by survey() and
raised (or skipped, one SampleError for the shard) when read. Only when no shard is readable,
or when the schemas disagree, is opening itself an error. survey() reads the rows of the first
shards (ROWS_CHECKED rows; images not decoded) for what no footer shows: corrupt chunks, nulls
among values, embeddings whose length changes; a column some shards lack (from the footers:
every shard) is a problem of each such shard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsbench.adapters import base
from dsbench.adapters.columns import (
    BadChunk,
    Unreadable,
    batch_rows,
    make_plan,
    unify,
)
from dsbench.adapters.payloads import survey_payloads
from dsbench.adapters.survey import (
    apportion,
    finish_image,
    new_survey,
    problem,
)
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc, location

IMAGES_CHECKED = 200  # image headers that survey() opens, spread over up to SURVEY_UNITS shards
SURVEY_UNITS = 8
# Rows of whole shards that survey() reads, in order, to check what footers do not show: as
# many as bench's count pass reads, so that neither inspect nor bench's set-up reads a large
# export whole (an object store's, least of all).
ROWS_CHECKED, ROWS_CHECKED_REMOTE = 20_000, 2_000


# ---- finding files ------------------------------------------------------------------------------

def _walk(root: Loc) -> Iterator[tuple[Loc, int]]:
    return ((root / rel, n) for rel, n in base.walk(root))


def read_head(path: Loc, n: int = 8) -> bytes:
    with base.open_file(path) as f:
        return f.read(n)


def detect_files(path: Loc, exts: tuple[str, ...], magic: Callable[[bytes], bool],
                 limit: int = 1000) -> bool:
    """A file with one of `exts` or with the magic; a directory holding such a file with the
    magic, or holding only files with `exts` (so that a directory of damaged shards still gets
    this layout's error messages). Looks at no more than `limit` files."""
    try:
        if not store.is_dir(path):
            return store.is_file(path) and (path.suffix.lower() in exts
                                            or magic(read_head(path)))
        ours = others = 0
        for i, (p, _) in enumerate(_walk(path)):
            if i >= limit:
                break
            if p.suffix.lower() not in exts:
                others += 1
            elif magic(read_head(p)):
                return True
            else:
                ours += 1
        return ours > 0 and others == 0
    except (OSError, DsbenchError):
        return False


data_files = base.data_files  # the columnar layouts' data files, by their names' endings


class ColumnarExport(base.ReadsUnits):
    layout = ""

    def __init__(self, path: Loc, found: dict[Loc, int], image_field: str | None = None,
                 image: tuple[str, str | None] | None = None, image_kind: str = "image"
                 ) -> None:
        self.path = path
        self.ignored: list[str] = []
        self._root = store.directory_of(path)
        self._files = list(found)
        self._size = {str(p): n for p, n in found.items()}
        self._broken: dict[str, str] = {}
        self._rows: dict[str, int | None] = {}
        self._columns: dict[str, set[str]] = {}
        # Per unit, once: read_at asks for them at every row it reads.
        self._firsts: dict[str, int] = {}
        self._unit_encodings: dict[str, dict[str, str]] = {}
        schemas: list[tuple[str, pa.Schema]] = []
        for p in self._files:
            try:
                schema, rows = self._header(p)
            except Unreadable as exc:
                self._broken[str(p)] = str(exc)
                continue
            schemas.append((self.name(p), schema))
            self._rows[str(p)] = rows
            self._columns[str(p)] = set(schema.names)
        if not schemas:
            unit, message = next(iter(self._broken.items()))
            raise DsbenchError(message, path=unit)
        self.schema, self.missing = unify(path, schemas)
        self.plan = make_plan(self.schema, self._probe, path, image_field, image, image_kind)
        self.kind, self.payload_field = self.plan.kind, self.plan.image
        lacking = self.missing[self.plan.image]
        if lacking:
            raise DsbenchError(f"no {self.kind} column {self.plan.image!r} in "
                               f"{', '.join(lacking[:3])}"
                               f"{' ...' if len(lacking) > 3 else ''}", path=path)

    # ---- hooks of a file format ----

    def _header(self, path: Loc) -> tuple[pa.Schema, int | None]:
        """Schema and (when cheap) row count, from the header or footer; Unreadable if bad."""
        raise NotImplementedError

    def _count_rows(self, path: Loc) -> int:
        raise NotImplementedError

    def _chunks(self, path: Loc) -> Iterator[pa.RecordBatch | BadChunk]:
        """The shard's record batches in order; a BadChunk for a part that cannot be read."""
        raise NotImplementedError

    def _head(self, path: Loc, columns: list[str], rows: int) -> pa.Table:
        """The first `rows` rows of `columns`, reading as little as the format allows."""
        raise NotImplementedError

    def _sizes(self, path: Loc) -> tuple[np.ndarray, int]:
        """(a weight per row proportional to its stored size, the file's size in bytes)."""
        raise NotImplementedError

    # ---- the Export protocol ----

    def name(self, path: Loc) -> str:
        """A shard's name for messages: its path relative to the export."""
        return store.relative(path, self._root)

    def units(self) -> list[str]:
        return [str(p) for p in self._files]

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None,
                   ) -> Iterator[base.RawSample]:
        for unit in units:
            yield from self._read_unit(unit, skip)

    def unit_samples(self, unit: str) -> int:
        # Rows, from the header or footer read at opening (an IPC stream is counted here).
        if unit in self._broken:
            raise SampleError(self._broken[unit], path=unit)
        if self._rows.get(unit) is None:
            try:
                self._rows[unit] = self._count_rows(location(unit))
            except Unreadable as exc:
                raise SampleError(str(exc), path=unit) from None
        return self._rows[unit] or 0

    def _encodings(self, unit: str) -> dict[str, str]:
        # A field an old shard lacks reads as None, which is a value, whatever the new encoding.
        if unit not in self._unit_encodings:
            have = self._columns[unit]
            self._unit_encodings[unit] = {n: (e if n in have else base.ENC_VALUE)
                                          for n, e in self.plan.encodings.items()}
        return self._unit_encodings[unit]

    def _first_row(self, unit: str) -> int:
        """Row number (in the whole export) of the unit's first row; keys of key-less exports."""
        if unit in self._firsts:
            return self._firsts[unit]
        total = 0
        for p in self._files:
            if str(p) == unit:
                break
            if str(p) not in self._broken:
                if self._rows[str(p)] is None:
                    self._rows[str(p)] = self._count_rows(p)
                total += self._rows[str(p)] or 0
        self._firsts[unit] = total
        return total

    def _read_unit(self, unit: str, skip: base.SkipHandler) -> Iterator[base.RawSample]:
        if unit in self._broken:
            base.report(SampleError(self._broken[unit], path=unit), skip)
            return
        keyed = self.plan.key is not None and self.plan.key in self._columns[unit]
        first = 0 if keyed else self._first_row(unit)
        encodings = self._encodings(unit)
        row = 0
        try:
            for chunk in self._chunks(location(unit)):
                if isinstance(chunk, BadChunk):
                    _fail_rows(unit, chunk, row, skip)
                    row += chunk.rows
                    continue
                try:
                    rows = batch_rows(chunk, self.schema, self.plan, unit, first + row, encodings)
                except (pa.ArrowException, ValueError) as exc:
                    bad = BadChunk(chunk.num_rows, f"rows {row}-{row + chunk.num_rows - 1} do "
                                   f"not convert to the export's schema: {exc}")
                    _fail_rows(unit, bad, row, skip)
                    row += chunk.num_rows
                    continue
                for item in rows:
                    if isinstance(item, SampleError):
                        base.report(item, skip)
                    else:
                        yield item
                row += chunk.num_rows
        except Unreadable as exc:
            base.report(SampleError(str(exc), path=unit), skip)

    def _probe(self, columns: list[str]) -> pa.Table | None:
        for p in self._files:
            have = [c for c in columns if c in self._columns.get(str(p), ())]
            if have:
                try:
                    return self._head(p, have, 16)
                except Unreadable:
                    continue
        return None

    # ---- survey ----

    def survey(self) -> dict[str, Any]:
        survey = new_survey(self.layout)
        problems = survey["problems"]
        problems += [problem(u, None, m) for u, m in self._broken.items()]
        sample_bytes: list[int] = survey["sample_bytes"]
        firsts: dict[str, int] = {}
        readable: list[Loc] = []
        seen: dict[str, Any] = {}  # field -> its float-vector length, or True: holds values
        rows_budget = ROWS_CHECKED_REMOTE if store.is_remote(self._root) else ROWS_CHECKED
        for p in self._files:
            if str(p) in self._broken:
                continue
            try:
                weights, size = self._sizes(p)
            except Unreadable as exc:
                problems.append(problem(str(p), None, str(exc)))
                continue
            if len(sample_bytes) < rows_budget:
                self._check_rows(p, len(sample_bytes), seen, problems)
            firsts[str(p)] = len(sample_bytes)
            # The footer and headers are shared by the shard's rows in proportion to their size.
            sample_bytes += apportion(size, weights.tolist())
            readable.append(p)
        self._survey_images(survey, readable, firsts)
        # A column that some shards lack: each such shard is a problem, since its samples would
        # reach the loader without the field (a re-export that dropped it midway).
        paths = {self.name(p): p for p in self._files}
        for n in self.plan.fields:
            problems += [problem(paths.get(shard, shard), None, f"field {n!r} is missing in "
                                 "this shard but present in others") for shard in self.missing[n]]
        samples = len(sample_bytes)
        survey.update({
            "samples": samples,
            "units": len(self._files),
            "files": len(self._files),
            "bytes": sum(self._size.values()),
            "files_per_sample": len(self._files) / samples if samples else 0.0,
            "fields": {n: {"type": str(self.schema.field(n).type), "missing_in": self.missing[n]}
                       for n in self.plan.fields},
            "bad_samples": sum(1 for p in problems if p["key"] is not None),
        })
        return survey

    def _check_rows(self, path: Loc, first: int, seen: dict[str, Any],
                    problems: list[dict[str, Any]]) -> None:
        """Read the shard's rows once (images not decoded) for what no header or footer shows:
        a chunk that does not read (a corrupt page), a null where other rows hold a value, a
        float vector (embedding) of another length than the first; each field's first one is
        a problem, as the loader would fail at that sample."""
        row = 0
        for chunk in self._chunks(path):
            if isinstance(chunk, BadChunk):
                problems.append(problem(str(path), None, chunk.message))
                return
            keys = (chunk.column(self.plan.key).to_pylist() if self.plan.key in
                    chunk.schema.names else range(first + row, first + row + chunk.num_rows))
            for name in self.plan.fields:
                if name in chunk.schema.names and name not in seen.get("\0", ()):
                    why = _row_problem(name, chunk.column(name), seen)
                    if why is not None:
                        seen.setdefault("\0", set()).add(name)  # said once per field
                        problems.append(problem(str(path), str(keys[why[0]]), why[1]))
            row += chunk.num_rows

    def _survey_images(self, survey: dict[str, Any], units: list[Loc],
                       firsts: dict[str, int]) -> None:
        """Codec and sizes from the headers of up to IMAGES_CHECKED images, spread over shards."""
        picked = sorted({round(x) for x in np.linspace(0, len(units) - 1,
                                                       min(len(units), SURVEY_UNITS))}
                        ) if units else []
        per_unit = math.ceil(IMAGES_CHECKED / max(1, len(picked)))
        columns = [self.plan.image] + ([self.plan.key] if self.plan.key else [])
        problems = survey["problems"]
        for i in picked:
            p, want = units[i], min(per_unit, IMAGES_CHECKED - survey["image"]["count_checked"])
            if want <= 0:
                break
            try:
                head = self._head(p, [c for c in columns if c in self._columns[str(p)]], want)
            except Unreadable as exc:
                problems.append(problem(str(p), None, str(exc)))
                continue
            keys = (head.column(self.plan.key).to_pylist() if self.plan.key in head.column_names
                    else [firsts[str(p)] + j for j in range(head.num_rows)])
            survey_payloads(survey, self.plan, head.column(self.plan.image).combine_chunks(),
                            keys, str(p))
        finish_image(survey)
        if self.kind == "image":
            survey["image"]["codec"] = survey["image"]["codec"] or self.plan.codec or "unknown"


def _row_problem(name: str, col: pa.Array, seen: dict[str, Any]) -> tuple[int, str] | None:
    """(row, message) of the first null after values (or values after nulls) or float vector
    of another length in one column of one chunk; None when there is none."""
    valid = col.is_valid().to_pylist()
    if col.null_count and (seen.get(name) or col.null_count < len(col)):
        return valid.index(False), (f"field {name!r} is null here but holds values in "
                                    "other samples")
    if col.null_count < len(col):
        seen.setdefault(name, True)
    kind = col.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)
            or pa.types.is_fixed_size_list(kind)) or not pa.types.is_floating(kind.value_type):
        return None
    lengths = pc.list_value_length(col).to_pylist()
    want = seen.get(name) if not isinstance(seen.get(name), bool) else None
    for j, n in enumerate(lengths):
        if n is None:
            continue
        if want is None:
            want = seen[name] = n
        elif n != want:
            return j, (f"field {name!r} is a float array of {n} values here but a float array "
                       f"of {want} values in earlier samples")
    return None


def _fail_rows(unit: str, chunk: BadChunk, first: int, skip: base.SkipHandler) -> None:
    """A lost chunk is one error when raising, and one per lost row when counting skips."""
    if skip is None or chunk.rows == 0:
        base.report(SampleError(chunk.message, path=unit), skip)
        return
    for j in range(chunk.rows):
        skip(SampleError(chunk.message, path=unit, key=f"row {first + j}"))


class ColumnarAdapter:
    """The Adapter of a columnar file format: its data files found by extension or magic."""

    def __init__(self, name: str, exts: tuple[str, ...], magic: Callable[[bytes], bool],
                 what: str, export: Callable[..., ColumnarExport]) -> None:
        self.name, self.exts, self.magic, self.what, self.export = name, exts, magic, what, export

    def detect(self, path: Loc) -> bool:
        return detect_files(path, self.exts, self.magic)

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> ColumnarExport:
        return self.export(path, data_files(path, self.exts, self.what), image_field)
