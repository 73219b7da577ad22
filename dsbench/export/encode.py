"""A synthetic sample as the bytes and columns an exporting pipeline would write.

Member layouts (`wds`, `files`): with `fields_as = "json"` one `<key>.json` document holds every
field except binary embeddings; with `fields_as = "members"` each field is its own member
(`spec.member_ext`): `.cls` ASCII integer, `.txt` UTF-8 text, `.<name>.f32` raw little-endian
float32, `.<name>.json` a JSON value. A token export's ids are an `input_ids.npy` member.

Columnar layouts (`arrow`, `parquet`), the same columns in both:

    key              string      the sample key ("%08d")
    image            binary      the encoded image; field metadata dsbench.kind=image and
                                 dsbench.codec=jpeg|png|raw
    (input_ids       list<int>   a token export's ids, in its dtype, in place of the image)
    <int field>      int64
    <string field>   string
    <embedding>      binary of raw little-endian float32 (encoding "binary"), string holding a JSON
                     list ("json"), or fixed_size_list<float32>[dim] ("list")
    <boxes>          list<struct<x, y, w, h: float32, cls: int32>>

Every field column carries metadata dsbench.kind (the field type) and dsbench.encoding (one of
the readers' ENC_* names), so a reader can tell the loader how each stored value is encoded.
The names come from the adapters, so what is written here is what they read.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa

from dsbench.adapters import base
from dsbench.adapters.columns import CODEC, ENCODING, KIND
from dsbench.export.payloads import TOKENS_NAME
from dsbench.export.spec import ExportSpec, FieldSpec, member_ext

BOX_TYPE = pa.struct([("x", pa.float32()), ("y", pa.float32()), ("w", pa.float32()),
                      ("h", pa.float32()), ("cls", pa.int32())])
BOXES_TYPE = pa.list_(BOX_TYPE)


# --- members ---------------------------------------------------------------------------------

def _binary(f: FieldSpec) -> bool:
    return f.type == "embedding" and f.encoding == "binary"


def _json_value(f: FieldSpec, value: Any) -> Any:
    return value.tolist() if f.type == "embedding" else value


def encode_field(f: FieldSpec, value: Any) -> bytes:
    """One field as the bytes of its own member."""
    if f.type == "int":
        return str(int(value)).encode("ascii")
    if f.type == "string":
        return str(value).encode("utf-8")
    if _binary(f):
        return np.asarray(value, dtype="<f4").tobytes()
    return json.dumps(_json_value(f, value)).encode("utf-8")


def _own_members(spec: ExportSpec) -> list[FieldSpec]:
    return [f for f in spec.fields if spec.fields_as == "members" or _binary(f)]


def member_exts(spec: ExportSpec) -> list[str]:
    """Extensions of a synthetic sample's members, in the order they are written."""
    json_doc = ["json"] if spec.fields_as == "json" else []
    return [spec.payload_ext, *json_doc, *(member_ext(spec, f) for f in _own_members(spec))]


def _npy(ids: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.save(f, ids, allow_pickle=False)
    return f.getvalue()


def sample_members(spec: ExportSpec, sample: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(extension, bytes) of every member of a synthetic sample, image (or token ids, as a
    NumPy .npy file) first, in spec order."""
    payload = sample[spec.payload]
    out = [(spec.payload_ext, _npy(payload) if spec.tokens else
            payload.encode("utf-8") if spec.text else payload)]
    if spec.fields_as == "json":
        doc = {f.name: _json_value(f, sample[f.name]) for f in spec.fields if not _binary(f)}
        out.append(("json", json.dumps(doc).encode("utf-8")))
    out += [(member_ext(spec, f), encode_field(f, sample[f.name])) for f in _own_members(spec)]
    return out


def jsonl_line(spec: ExportSpec, sample: dict[str, Any]) -> bytes:
    """A text sample as one line of JSON Lines: its id, its text, then each field's value."""
    doc = {"id": sample["__key__"], spec.payload: sample[spec.payload]}
    doc.update({f.name: _json_value(f, sample[f.name]) for f in spec.fields})
    return json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"


# --- columns ---------------------------------------------------------------------------------

def _field_type(f: FieldSpec) -> tuple[pa.DataType, str]:
    if f.type == "int":
        return pa.int64(), base.ENC_VALUE
    if f.type == "string":
        return pa.string(), base.ENC_VALUE
    if f.type == "boxes":
        return BOXES_TYPE, base.ENC_VALUE
    if f.encoding == "binary":
        return pa.binary(), base.ENC_F32
    if f.encoding == "json":
        return pa.string(), base.ENC_JSON
    return pa.list_(pa.float32(), f.dim), base.ENC_VALUE


def export_schema(spec: ExportSpec) -> pa.Schema:
    """The Arrow schema of an export written from `spec` (see the module docstring)."""
    columns = [pa.field("key", pa.string())]
    if spec.tokens:
        columns.append(pa.field(TOKENS_NAME,
                                pa.list_(pa.from_numpy_dtype(np.dtype(spec.tokens.dtype)))))
    elif spec.text:
        columns.append(pa.field(spec.payload, pa.string()))
    else:
        codec = spec.audio.codec if spec.audio else spec.image.codec
        columns.append(pa.field(spec.payload, pa.binary(),
                                metadata={KIND: spec.kind.encode(), CODEC: codec.encode()}))
    for f in spec.fields:
        ftype, enc = _field_type(f)
        columns.append(pa.field(f.name, ftype, metadata={KIND: f.type.encode(),
                                                         ENCODING: enc.encode()}))
    return pa.schema(columns)


def _field_array(f: FieldSpec, values: list[Any]) -> pa.Array:
    ftype, _ = _field_type(f)
    if f.type != "embedding":
        return pa.array(values, ftype)
    if f.encoding == "binary":
        return pa.array([np.asarray(v, "<f4").tobytes() for v in values], ftype)
    if f.encoding == "json":
        # What a typical exporter writes: json.dumps of the list of Python floats.
        return pa.array([json.dumps(np.asarray(v, np.float32).tolist()) for v in values], ftype)
    flat = (np.stack(values).astype("<f4", copy=False).reshape(-1) if values
            else np.empty(0, np.float32))
    return pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), f.dim)


def _token_lists(docs: list[np.ndarray], dtype: str) -> pa.ListArray:
    """Documents' ids as one list column, in their stored dtype: one array of every id and the
    offsets where each document starts."""
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int32)
    ids = np.concatenate(docs) if docs else np.empty(0, dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids.astype(dtype, copy=False)))


def to_record_batch(spec: ExportSpec, samples: list[dict[str, Any]]) -> pa.RecordBatch:
    """Samples from synth.make_sample as one record batch of `export_schema(spec)`."""
    arrays = [pa.array([s["__key__"] for s in samples], pa.string()),
              _token_lists([s[TOKENS_NAME] for s in samples], spec.tokens.dtype) if spec.tokens
              else
              pa.array([s[spec.payload] for s in samples],
                       pa.string() if spec.text else pa.binary())]
    arrays += [_field_array(f, [s[f.name] for s in samples]) for f in spec.fields]
    return pa.RecordBatch.from_arrays(arrays, schema=export_schema(spec))
