"""Columns of Arrow IPC and Parquet exports: schema unification, the payload column, rows.

dsbench's own exports (dsbench.export.encode) mark every column with field metadata: KIND
(the field type, or "image"), ENCODING (one of base.ENC_*: how the loader parses the stored
value) and, on the image column, CODEC.

Reading is schema-first: the schemas of all shards, from headers and footers only, are unified,
so a field that a re-export added is read from every shard (None where an old shard lacks it)
instead of vanishing as it does when the first file's schema is taken for the whole dataset.
Exports that dsbench did not write are read too: the image column is the one with dsbench
metadata, else one named image/jpg/jpeg/png/img, else the first binary column whose values start
with a JPEG or PNG signature (a struct<bytes, path> column, as Hugging Face datasets stores
images, counts as binary). With no image column, the samples are token ids: the column of integer
lists (one named input_ids/tokens/token_ids/ids where there are several), each row's ids a view
of the column's values. The key column is `key` or `__key__`, else the row number in the export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dsbench.adapters import base, mp3
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage.files import Loc

KIND = b"dsbench.kind"
ENCODING = b"dsbench.encoding"
CODEC = b"dsbench.codec"
IMAGE_NAMES = ("image", "jpg", "jpeg", "png", "img")
KEY_NAMES = ("key", "__key__")
_ENCODINGS = {base.ENC_F32, base.ENC_JSON, base.ENC_VALUE, base.ENC_TEXT, base.ENC_NPY}
_SIGNATURES = ((b"\xff\xd8\xff", "jpeg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"\x93NUMPY", "raw"),
               (b"P6", "ppm"), (b"fLaC", "flac"), (b"OggS", "ogg"), (b"ID3", "mp3"))


class Unreadable(Exception):
    """A shard that cannot be read; the export turns the message into a DsbenchError."""


@dataclass(frozen=True)
class BadChunk:
    """A record batch or row group that could not be read: `rows` rows (0 when unknown) lost."""

    rows: int
    message: str


# ---- schemas ------------------------------------------------------------------------------------

def _compatible(a: pa.DataType, b: pa.DataType) -> bool:
    try:
        pa.unify_schemas([pa.schema([("c", a)]), pa.schema([("c", b)])],
                         promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


def unify(where: Loc, schemas: list[tuple[str, pa.Schema]],
          ) -> tuple[pa.Schema, dict[str, list[str]]]:
    """One schema for all shards, and for each column the shards that lack it.

    Types that widen safely (int32 and int64, binary and large_binary, null and anything) are
    promoted; any other disagreement is an error naming the column and both shards.
    """
    first: dict[str, tuple[pa.DataType, str]] = {}
    for shard, schema in schemas:
        dupes = sorted({n for n in schema.names if schema.names.count(n) > 1})
        if dupes:
            raise DsbenchError(f"{shard} has duplicate columns: {', '.join(dupes)}", path=where)
        for fld in schema:
            seen_type, seen_in = first.setdefault(fld.name, (fld.type, shard))
            if seen_type != fld.type and not _compatible(seen_type, fld.type):
                raise DsbenchError(f"column {fld.name!r} is {seen_type} in {seen_in} but "
                                   f"{fld.type} in {shard}", path=where)
    try:
        unified = pa.unify_schemas([s for _, s in schemas], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise DsbenchError(f"shard schemas cannot be unified: {exc}", path=where) from None
    missing = {n: [shard for shard, s in schemas if s.get_field_index(n) < 0]
               for n in unified.names}
    return unified, missing


def sniff_codec(data: bytes) -> str | None:
    """The image or audio codec that `data` starts with, or None."""
    for signature, codec in _SIGNATURES:
        if data.startswith(signature):
            return codec
    if data[:4] == b"RIFF" and data[8:12] in (b"WEBP", b"WAVE"):
        return "webp" if data[8:12] == b"WEBP" else "wav"
    # An MP3 without an ID3 tag starts with a frame's sync bits, which UTF-16 text and AAC
    # start with too: it is told by its frames chaining (mp3.looks_like), and only where a
    # column holds audio (sniff_audio).
    return None


def sniff_audio(data: bytes) -> str | None:
    """The codec of an audio column's value: as sniff_codec, or MP3 where its first frames
    chain though no ID3 tag opens it."""
    return sniff_codec(data) or ("mp3" if mp3.looks_like(bytes(data[:8192])) else None)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _image_candidate(fld: pa.Field) -> tuple[str, str | None] | None:
    """(column, struct child holding the bytes or None) when `fld` could hold encoded images."""
    if _is_binary(fld.type):
        return fld.name, None
    if pa.types.is_struct(fld.type):
        i = fld.type.get_field_index("bytes")
        if i >= 0 and _is_binary(fld.type.field(i).type):
            return fld.name, "bytes"
    return None


def _token_candidate(fld: pa.Field) -> bool:
    """A column of integer lists: each row a document's token ids."""
    t = fld.type
    return ((pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))
            and pa.types.is_integer(t.value_type))


@dataclass(frozen=True)
class Plan:
    """How to turn the unified schema's columns into RawSamples."""

    image: str  # the payload's column: an image's, or the token ids' (kind TOKENS)
    image_child: str | None  # "bytes" for struct<bytes, path> image columns
    codec: str | None  # from the column's metadata; otherwise sniffed per image
    key: str | None
    fields: tuple[str, ...]
    encodings: dict[str, str]
    kind: str = "image"


def _encoding(fld: pa.Field) -> str:
    stored = (fld.metadata or {}).get(ENCODING, b"").decode(errors="replace")
    if stored in _ENCODINGS:
        return stored
    return base.ENC_BYTES if _is_binary(fld.type) else base.ENC_VALUE


def named_image(schema: pa.Schema, name: str, where: Loc) -> tuple[str, str | None]:
    """The image column a person named (--image-field): it must hold encoded images (or, for
    make_plan, token ids)."""
    if schema.get_field_index(name) < 0:
        raise DsbenchError(f"--image-field {name}: no such column (columns: "
                           f"{', '.join(schema.names)})", path=where)
    found = _image_candidate(schema.field(name))
    if found is None:
        raise DsbenchError(f"--image-field {name}: the column is {schema.field(name).type}, "
                           "not binary (or a struct with a binary 'bytes' child) holding "
                           "encoded images, nor a list of integers (token ids)", path=where)
    return found


def _text_candidate(fld: pa.Field) -> bool:
    t = fld.type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _text_plan(schema: pa.Schema, image_field: str | None, key: str | None) -> str | None:
    """The text column: the one named, else the one named text/content/document/raw_content,
    else the only string column besides the key; None where there is none."""
    if image_field is not None:
        return image_field if _text_candidate(schema.field(image_field)) else None
    return base.chosen([f.name for f in schema if _text_candidate(f) and f.name != key],
                       base.TEXT_NAMES)


def _token_plan(schema: pa.Schema, image_field: str | None, where: Loc) -> str | None:
    """The token column: the one named, else the integer-list column (one named
    input_ids/tokens/token_ids/ids where there are several); None where there is none."""
    if image_field is not None:
        return image_field if _token_candidate(schema.field(image_field)) else None
    tokens = [f.name for f in schema if _token_candidate(f)]
    token = base.chosen(tokens, base.TOKEN_NAMES)
    if token is not None:
        return token
    if tokens:
        raise DsbenchError(f"several token columns ({', '.join(tokens)}): name the one to "
                           "read with --image-field", path=where)
    return None


def make_plan(schema: pa.Schema, probe: Callable[[list[str]], pa.Table | None],
              where: Loc, image_field: str | None = None,
              image: tuple[str, str | None] | None = None, image_kind: str = "image") -> Plan:
    """Find the payload and key columns; `probe(columns)` returns a few rows of those columns.
    The payload column is the one named by `image_field`, else `image` (what the format's own
    schema says, with its kind: image or audio), else found by metadata, name or content.
    Encoded audio is the payload of kind audio: a column named audio (or flac, wav, ...), or
    one whose first value is a WAV, FLAC, Ogg or MP3 file."""
    key = next((n for n in KEY_NAMES if n in schema.names and (
        pa.types.is_string(t := schema.field(n).type) or pa.types.is_large_string(t)
        or pa.types.is_integer(t))), None)
    if image is None and schema.get_field_index(image_field or "") >= 0:
        tokens = _token_plan(schema, image_field, where)
        if tokens is not None:
            return _plan(schema, tokens, None, base.TOKENS, key, base.TOKENS)
        text = _text_plan(schema, image_field, key)
        if text is not None:
            return _plan(schema, text, None, base.TEXT, key, base.TEXT)
    candidates = [c for c in map(_image_candidate, schema) if c]
    given = named_image(schema, image_field, where) if image_field else image
    # What the format's schema says of the payload it gives (an HF Audio feature), or the name
    # a person gave it.
    kind = base.AUDIO if given is not None and (
        image_kind == base.AUDIO or (image_field or "").lower() in base.AUDIO_NAMES) else "image"
    found = given or next((c for c in candidates
                           if (schema.field(c[0]).metadata or {}).get(KIND) == b"image"), None)
    found = found or next((c for c in candidates if c[0].lower() in IMAGE_NAMES), None)
    if found is None:
        found = next((c for c in candidates if c[0].lower() in base.AUDIO_NAMES), None)
        kind = base.AUDIO if found is not None else kind
    if found is None and candidates:
        head = probe([c[0] for c in candidates])
        for c in candidates:
            if head is None or c[0] not in head.column_names:
                continue
            values = image_column(head.column(c[0]).combine_chunks(), c[1])
            first = next((values[i] for i in range(head.num_rows) if values[i] is not None),
                         None)
            codec = sniff_audio(first) if first is not None else None
            if codec in ("jpeg", "png") or codec in base.AUDIO_CODECS:
                found, kind = c, base.AUDIO if codec in base.AUDIO_CODECS else "image"
                break
    if found is None:
        tokens = None if image_field else _token_plan(schema, None, where)
        if tokens is not None:
            return _plan(schema, tokens, None, base.TOKENS, key, base.TOKENS)
        text = None if image_field else _text_plan(schema, None, key)
        if text is not None:
            return _plan(schema, text, None, base.TEXT, key, base.TEXT)
        raise DsbenchError(f"no image or token column: no column has dsbench image metadata, "
                           f"is named {'/'.join(IMAGE_NAMES)}, holds JPEG/PNG bytes, is a "
                           f"list of integers or text named {'/'.join(base.TEXT_NAMES)} "
                           f"(columns: {', '.join(schema.names)})", path=where)
    codec = (schema.field(found[0]).metadata or {}).get(CODEC, b"").decode() or None
    return _plan(schema, found[0], found[1], codec, key, kind)


def _plan(schema: pa.Schema, payload: str, child: str | None, codec: str | None,
          key: str | None, kind: str) -> Plan:
    fields = tuple(n for n in schema.names if n not in (payload, key))
    return Plan(payload, child, codec, key, fields,
                {n: _encoding(schema.field(n)) for n in fields}, kind)


# ---- rows ---------------------------------------------------------------------------------------

class _Slices:
    """Values of a binary column, copied out of its data buffer one row at a time.

    Slicing lazily keeps a batch's images out of Python objects until each row is asked for.
    """

    __slots__ = ("_data", "_off", "_valid")

    def __init__(self, arr: pa.Array) -> None:
        n = len(arr)
        _, offsets, data = arr.buffers()[:3]
        width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        self._off = (np.frombuffer(offsets, width, count=arr.offset + n + 1)[arr.offset:].tolist()
                     if n else [0])
        self._data = memoryview(data) if data is not None else memoryview(b"")
        self._valid = arr.is_valid().to_pylist() if arr.null_count else None

    def __len__(self) -> int:
        return len(self._off) - 1

    def __getitem__(self, i: int) -> bytes | None:
        if self._valid is not None and not self._valid[i]:
            return None
        return bytes(self._data[self._off[i]:self._off[i + 1]])


class _Rows:
    """Per-row values from a NumPy array (or per-row slices of one), None where the row is null."""

    __slots__ = ("_off", "_valid", "_values")

    def __init__(self, values: np.ndarray, arr: pa.Array, offsets: list[int] | None) -> None:
        self._values, self._off = values, offsets
        self._valid = arr.is_valid().to_pylist() if arr.null_count else None

    def __getitem__(self, i: int) -> np.ndarray | None:
        if self._valid is not None and not self._valid[i]:
            return None
        if self._off is None:
            return self._values[i]
        return self._values[self._off[i]:self._off[i + 1]]


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_integer(t)


def column_values(arr: pa.Array) -> Sequence[Any] | _Rows | _Slices:
    """Row-indexable values of one column: bytes, NumPy views for numeric lists, else Python."""
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _Slices(arr)
    if pa.types.is_fixed_size_list(t) and _numeric(t.value_type):
        d = t.list_size
        child = arr.values.slice(arr.offset * d, len(arr) * d)
        if child.null_count == 0:
            # Zero-copy for a memory-mapped batch: each row is a view, not per-float objects.
            return _Rows(child.to_numpy(zero_copy_only=False).reshape(len(arr), d), arr, None)
    if ((pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type)
            and arr.values.null_count == 0):
        return _Rows(arr.values.to_numpy(zero_copy_only=False), arr,
                     arr.offsets.to_numpy().tolist())
    return arr.to_pylist()


def image_column(arr: pa.Array, child: str | None) -> _Slices | list[Any]:
    """The encoded images of a binary column (or of a struct's binary child), row by row."""
    if child is not None:
        arr = arr.flatten()[arr.type.get_field_index(child)]
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return _Slices(arr)
    return list(arr.to_pylist())


def _conformed(batch: pa.RecordBatch, name: str, want: pa.DataType) -> pa.Array | None:
    i = batch.schema.get_field_index(name)
    if i < 0:
        return None
    arr = batch.column(i)
    return arr if arr.type == want else arr.cast(want)


def batch_rows(batch: pa.RecordBatch, schema: pa.Schema, plan: Plan, source: str,
               first_row: int, encodings: dict[str, str]) -> Iterator[base.RawSample | SampleError]:
    """The rows of one batch read against the unified `schema`: a RawSample, or the SampleError
    of a bad row. Columns are converted (and cast to the unified types) before the first row, so
    an unconvertible batch raises here, not midway."""
    image = _conformed(batch, plan.image, schema.field(plan.image).type)
    if image is None:
        raise DsbenchError(f"no {plan.kind} column {plan.image!r}", path=source)
    images = column_values(image) if plan.kind in (base.TOKENS, base.TEXT) else \
        image_column(image, plan.image_child)
    key_arr = _conformed(batch, plan.key, schema.field(plan.key).type) if plan.key else None
    keys = key_arr.to_pylist() if key_arr is not None else None
    values = {}
    for n in plan.fields:
        arr = _conformed(batch, n, schema.field(n).type)
        values[n] = column_values(arr) if arr is not None else None
    return _rows(batch.num_rows, images, keys, values, plan, source, first_row, encodings)


def _rows(n: int, images: Any, keys: list[Any] | None, values: dict[str, Any], plan: Plan,
          source: str, first_row: int, encodings: dict[str, str],
          ) -> Iterator[base.RawSample | SampleError]:
    # A null in a column the loader would parse (JSON, float32 bytes) is a value: None.
    parsed = [name for name, e in encodings.items() if e != base.ENC_VALUE]
    for i in range(n):
        k = keys[i] if keys is not None else None
        key = str(first_row + i) if k is None else str(k)
        data = images[i]
        if data is None:
            yield SampleError(f"{plan.kind} column {plan.image!r} is null", path=source,
                              key=key)
            continue
        codec = plan.codec or (sniff_audio(data) if plan.kind == base.AUDIO
                               else sniff_codec(data))
        if codec is None or (codec in base.AUDIO_CODECS) != (plan.kind == base.AUDIO):
            what = ("WAV, FLAC, Ogg or MP3" if plan.kind == base.AUDIO
                    else "JPEG, PNG, WebP, PPM or .npy")
            yield SampleError(f"{plan.kind} column {plan.image!r} holds bytes that are not "
                              f"{what} (they start {bytes(data[:8])!r})", path=source, key=key)
            continue
        fields = {name: (v[i] if v is not None else None) for name, v in values.items()}
        nulls = [name for name in parsed if fields[name] is None]
        yield base.RawSample(key, source, data, codec, fields,
                             {**encodings, **dict.fromkeys(nulls, base.ENC_VALUE)} if nulls
                             else encodings)
