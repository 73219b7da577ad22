"""A source export's fields carried into a definition's: names, matching, values.

Used by export.reexport (`dsbench generate DEFINITION OUT --from EXPORT`).

Names of a source's fields, from its first sample:

* columnar layouts (`arrow`, `parquet`): the column's name;
* member layouts (`wds`, `files`): the member's extension less its encoding suffix (`cls` is
  `cls`, `embedding.f32` is `embedding`, `caption.json` is `caption`); a JSON document (a bare
  `<key>.json`) that holds an object gives one field per key, as dsbench's `fields_as = "json"`
  writes them.

Matching, each source field taken at most once: every definition field first takes the source
field of its own name; a field still without one then takes, in order, the conventional alias
(`label` <-> `cls`) or the member extension the definition would store the field under (its
`ext`, else `cls` for an int, `txt` for a string), so that an export dsbench re-laid into members
maps back. Definition fields left without a source field are synthesised; source fields left
unmatched are dropped.

Values are parsed as stored (by the reader's encoding) and converted to the definition's type:
an int from an integer (or ASCII integer text), a string from text, an embedding from `dim`
numbers (as float32), boxes from a list of records with x, y, w, h (as float32) and cls (int).
A value that does not convert is a SampleError naming the file and sample.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.errors import SampleError
from dsbench.export.spec import ExportSpec, FieldSpec, member_ext

ALIASES = {"label": "cls", "cls": "label"}
_MEMBER_LAYOUTS = ("wds", "files")
_DOCUMENT_EXTS = ("json", "jsn")
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class SourceField:
    """One field of the source: its name, the raw field (member extension or column) that
    holds it and, for a key of a JSON document, that key."""

    name: str
    raw: str
    item: str | None = None
    member: bool = False  # stored in a member of a sample (raw is its extension)

    @property
    def stored_as(self) -> str:
        """Where the field is stored, for people: `.cls`, `.json["label"]`, a column name."""
        where = f".{self.raw}" if self.member else self.raw
        return where if self.item is None else f"{where}[{self.item!r}]"


@dataclass(frozen=True)
class FieldPlan:
    """Which definition fields come from which source fields, and what is made or left out."""

    carried: tuple[tuple[str, SourceField], ...]  # (definition field, source field)
    synthesised: tuple[str, ...]  # definition fields the source lacks
    dropped: tuple[str, ...]  # source fields the definition does not name

    def provenance(self) -> dict[str, Any]:
        return {"carried": {name: src.stored_as for name, src in self.carried},
                "synthesised": list(self.synthesised), "dropped": list(self.dropped)}


def _member_name(ext: str) -> str:
    stem, dot, suffix = ext.rpartition(".")
    return stem if dot and stem and suffix in base.EXT_ENCODINGS else ext


def source_fields(raw: base.RawSample, layout: str) -> list[SourceField]:
    """The fields of a source sample by name, in the order the sample holds them."""
    found: dict[str, SourceField] = {}

    def add(f: SourceField) -> None:
        # Two members naming one field (`caption.txt`, `caption.json`): the second keeps
        # its whole extension as its name.
        found.setdefault(f.name if f.name not in found else f.raw, f)

    for key in sorted(raw.fields):
        if layout not in _MEMBER_LAYOUTS:
            add(SourceField(key, key))
            continue
        if key in _DOCUMENT_EXTS and raw.encodings.get(key) == base.ENC_JSON:
            doc = _document(raw, key)
            if isinstance(doc, dict):
                for item in doc:
                    add(SourceField(str(item), key, str(item), member=True))
                continue
        add(SourceField(_member_name(key), key, member=True))
    return list(found.values())


def plan_fields(spec: ExportSpec, found: list[SourceField]) -> FieldPlan:
    """Match the definition's fields with the source's (the module docstring has the rule)."""
    free = {f.name: f for f in found}
    matched: dict[str, SourceField] = {}
    for f in spec.fields:
        if f.name in free:
            matched[f.name] = free.pop(f.name)
    for f in spec.fields:
        if f.name in matched:
            continue
        for name in (ALIASES.get(f.name), member_ext(spec, f)):
            if name is not None and name in free:
                matched[f.name] = free.pop(name)
                break
    carried = tuple((f.name, matched[f.name]) for f in spec.fields if f.name in matched)
    synthesised = tuple(f.name for f in spec.fields if f.name not in matched)
    return FieldPlan(carried, synthesised, tuple(free))


# --- values -------------------------------------------------------------------------------

def _fail(raw: base.RawSample, src: SourceField, message: str) -> SampleError:
    return SampleError(f"field {src.name!r} ({src.stored_as}): {message}",
                       path=raw.source_of(src.raw), key=raw.key)


def _document(raw: base.RawSample, key: str) -> Any:
    try:
        return json.loads(raw.fields[key])
    except (TypeError, ValueError) as exc:
        raise SampleError(f"invalid JSON in .{key}: {exc}", path=raw.source_of(key),
                          key=raw.key) from None


def parsed(raw: base.RawSample, src: SourceField, docs: dict[str, Any]) -> Any:
    """The stored value of a source field, parsed by its encoding (as the loader parses it)."""
    if src.raw not in raw.fields:
        raise _fail(raw, src, "missing here, though the source's first sample has it")
    if src.item is not None:
        if src.raw not in docs:
            docs[src.raw] = _document(raw, src.raw)
        doc = docs[src.raw]
        if not isinstance(doc, dict) or src.item not in doc:
            raise _fail(raw, src, "missing here, though the source's first sample has it")
        return doc[src.item]
    value = raw.fields[src.raw]
    encoding = raw.encodings.get(src.raw)
    try:
        return base.decode_stored(encoding, value)
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(raw, src, f"cannot parse it ({encoding}): {exc}") from None
    except RecursionError:
        raise _fail(raw, src, f"cannot parse it ({encoding}): nested too deep") from None


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool | np.bool_):
        return None
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating) and float(v).is_integer():
        return int(v)
    if isinstance(v, str | bytes):
        try:
            return int(v.strip())  # int() takes ASCII digits as bytes too
        except ValueError:
            return None
    return None


def _as_boxes(v: Any) -> list[dict[str, Any]] | None:
    if not isinstance(v, list):
        return None
    boxes = []
    for b in v:
        if not isinstance(b, dict) or not {"x", "y", "w", "h", "cls"} <= b.keys():
            return None
        cls = _as_int(b["cls"])
        try:
            # float32 values rounded as the definition's columns (float32) hold them
            coords = {k: float(np.float32(b[k])) for k in ("x", "y", "w", "h")}
        except (TypeError, ValueError):
            return None
        if cls is None:
            return None
        boxes.append({**coords, "cls": cls})
    return boxes


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def convert(f: FieldSpec, raw: base.RawSample, src: SourceField, value: Any) -> Any:
    """A parsed source value as the definition's field `f` holds it."""
    if value is None:
        raise _fail(raw, src, "null here")
    if f.type == "int":
        n = _as_int(value)
        if n is None:
            raise _fail(raw, src, f"expected an integer for int field {f.name!r}, got "
                                  f"{_short(value)}")
        if not _INT64[0] <= n <= _INT64[1]:
            raise _fail(raw, src, f"{n} does not fit a 64-bit integer")
        return n
    if f.type == "string":
        if isinstance(value, bytes | bytearray):
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _fail(raw, src, f"not UTF-8 text: {exc}") from None
        if not isinstance(value, str):
            raise _fail(raw, src, f"expected text for string field {f.name!r}, got "
                                  f"{_short(value)}")
        return value
    if f.type == "embedding":
        if isinstance(value, bytes | bytearray | str):
            raise _fail(raw, src, f"expected {f.dim} numbers for embedding {f.name!r}, got "
                                  f"{type(value).__name__}")
        arr = np.asarray(value)
        if arr.ndim != 1 or arr.dtype.kind not in "fiu":
            raise _fail(raw, src, f"expected {f.dim} numbers for embedding {f.name!r}, got "
                                  f"{_short(value)}")
        if len(arr) != f.dim:
            raise _fail(raw, src, f"holds {len(arr)} numbers; the definition's {f.name!r} has "
                                  f"dim = {f.dim}")
        # A copy: a columnar reader's value may be a view into a memory-mapped shard.
        return np.array(arr, dtype=np.float32)
    boxes = _as_boxes(value)
    if boxes is None:
        raise _fail(raw, src, f"expected boxes (a list of records with x, y, w, h, cls) for "
                              f"{f.name!r}, got {_short(value)}")
    return boxes


def carried_values(spec: ExportSpec, plan: FieldPlan, raw: base.RawSample) -> dict[str, Any]:
    """The carried fields of one source sample, by definition field name."""
    docs: dict[str, Any] = {}  # a JSON document parsed once per sample, for all its keys
    return {name: convert(spec.field(name), raw, src, parsed(raw, src, docs))
            for name, src in plan.carried}
