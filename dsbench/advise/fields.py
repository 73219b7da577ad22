"""What a source export's samples hold, as definition fields a candidate can carry.

advise re-lays a sample of the user's export into candidate layouts; every candidate must
carry every field the export has, so each source field is typed from the first sample's parsed
value (as export.carry parses it for `generate --from`): an integer is an `int` field, text a
`string`, a list of numbers an `embedding` of its length, a list of records with x, y, w, h and
cls `boxes`. A field of any other kind cannot be carried by dsbench's writers; advise refuses
the export rather than propose candidates that silently lose it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.errors import DsbenchError
from dsbench.export import carry
from dsbench.export.payloads import AUDIO_NAME, TOKENS_NAME
from dsbench.export.spec import FieldSpec

# How the source stores an embedding, in the definition's words.
JSON, BINARY, LIST = "json", "binary", "list"


@dataclass(frozen=True)
class Found:
    """The source's fields as definition fields, and how the source stores each now."""

    fields: tuple[FieldSpec, ...]
    stored: dict[str, str]  # field name -> where it is: `.cls`, `.json['embedding']`, a column
    embedding_encoding: str | None  # how the source stores its embeddings now (None: it has none)
    in_document: bool  # the source keeps its fields in one JSON document per sample

    def has(self, ftype: str) -> bool:
        return any(f.type == ftype for f in self.fields)


def _is_int(v: Any) -> bool:
    # Only what the source stores as an integer: text of digits ("000123", a JSON string) is
    # text, and an int would drop its zeros or refuse the next sample's words.
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _is_text(v: Any) -> bool:
    if isinstance(v, str):
        return True
    if isinstance(v, bytes | bytearray):
        try:
            bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    return False


def _numbers(v: Any) -> int | None:
    """The length of a list or array of numbers; None for anything else."""
    if isinstance(v, bytes | bytearray | str | dict):
        return None
    try:
        arr = np.asarray(v)
    except (TypeError, ValueError):
        return None
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "fiu":
        return None
    return int(arr.size)


def _is_boxes(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(b, dict) and {"x", "y", "w", "h", "cls"} <= b.keys() for b in v)


def typed(name: str, value: Any, where: str, raw: base.RawSample) -> FieldSpec:
    """The definition field that holds `value` (the source field `name`'s parsed value)."""
    if _is_int(value):
        return FieldSpec(name, "int")
    if _is_boxes(value):
        return FieldSpec(name, "boxes")
    dim = _numbers(value)
    if dim is not None:
        return FieldSpec(name, "embedding", dim=dim, encoding=LIST)
    if _is_text(value):
        return FieldSpec(name, "string")
    raise DsbenchError(f"field {name!r} ({where}) holds {type(value).__name__}, which dsbench's "
                       "writers cannot carry (integers, text, lists of numbers and boxes): "
                       "no candidate could hold it", path=raw.source_of(name), key=raw.key)


def found_fields(raw: base.RawSample, layout: str) -> Found:
    """The fields of the source's first sample `raw`, typed (the module docstring has how)."""
    docs: dict[str, Any] = {}
    fields, stored = [], {}
    encoding = None
    in_document = False
    for src in carry.source_fields(raw, layout):
        value = carry.parsed(raw, src, docs)
        if value is None:
            raise DsbenchError(f"field {src.name!r} ({src.stored_as}) is null in the first "
                               "sample: its type cannot be told", path=raw.source_of(src.raw),
                               key=raw.key)
        if not src.name.isidentifier() or src.name.startswith("__"):
            raise DsbenchError(f"field {src.name!r} ({src.stored_as}): a definition names its "
                               "fields as identifiers (letters, digits, _), so no candidate "
                               "could name this one", path=raw.source_of(src.raw), key=raw.key)
        f = typed(src.name, value, src.stored_as, raw)
        fields.append(f)
        stored[f.name] = src.stored_as
        in_document = in_document or src.item is not None
        if f.type == "embedding":
            encoding = (JSON if src.item is not None or raw.encodings.get(src.raw) == base.ENC_JSON
                        else BINARY if src.member else LIST)
    names = [f.name for f in fields]
    # The names a candidate's writer gives the sample's own key and payload (export.payloads;
    # a definition reserves them: export.spec).
    clash = next((n for n in ("image", "key", TOKENS_NAME, AUDIO_NAME) if n in names), None)
    if clash is not None:
        raise DsbenchError(f"a field named {clash!r} besides the sample's own: a definition "
                           "cannot name it", path=raw.source, key=raw.key)
    return Found(tuple(fields), stored, encoding, in_document)
