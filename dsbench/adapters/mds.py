"""MosaicML Streaming's MDS (layout `mds`), read without the streaming library.

An export is a directory holding `index.json` ({"version": 2, "shards": [...]}, one entry per
shard: "format": "mds", "column_names", "column_encodings", "column_sizes" (bytes of a
fixed-size column, null for a variable one), "samples", "raw_data" {"basename", "bytes"},
"compression" and "zip_data" (the compressed file, or null)) and the shards it names
(`shard.00000.mds`, or `shard.00000.mds.zstd` and the like when compressed: gz, bz2, zstd, br and
snappy are read). A shard is a uint32 sample count, N + 1 uint32 offsets, the writer's config
as JSON, then the samples; a sample is one uint32 size per variable-size column, then every
column's bytes, columns in the index's (sorted) order.

Columns: the payload is the column named by --image-field, else the only one with an image
encoding (`jpeg`: the stored JPEG's bytes; `png`; `pil`: raw pixels), else a `bytes` column
named image/jpg/jpeg/png/img; with no image, token ids: the integer `ndarray` column (one named
input_ids/tokens/token_ids/ids where there are several), viewed as ids in the decode stage.
Other columns are fields, kept as stored for the loader's fields
stage where dsbench has a parser for the encoding (`str` as text, `json` as JSON, a 1-d
`ndarray:float32` as float32 bytes, `str_int` as integer text), decoded here where they are
plain numbers (`int`, the scalar dtypes, other ndarrays); `pkl` and the list encodings are
passed on as bytes, never unpickled. The key is a `key` or `__key__` column's text, else the
sample's number in the export.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from dsbench.adapters import base, indexed
from dsbench.adapters.columns import IMAGE_NAMES, KEY_NAMES, sniff_audio, sniff_codec
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage.files import Loc

IMAGE_ENCODINGS = {"jpeg": "jpeg", "png": "png", "pil": "pil"}
_SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
            "float16", "float32", "float64")
# MDS's dynamic ndarray header: value dtypes by their code, shape dtypes by theirs.
_ND_VALUES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
              33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
_ND_SHAPES = {0: "uint8", 1: "uint16", 2: "uint32", 3: "uint64"}


def _field_encoding(encoding: str) -> str:
    """How the loader's fields stage gets a column's value (base.ENC_*)."""
    if encoding == "str":
        return base.ENC_TEXT
    if encoding == "json":
        return base.ENC_JSON
    if encoding == "str_int":
        return base.ENC_INT_TEXT
    if encoding.startswith("ndarray:float32:") and "," not in encoding.split(":")[2]:
        return base.ENC_F32
    if encoding in ("int", "str_float", *_SCALARS) or encoding.startswith("ndarray"):
        return base.ENC_VALUE
    return base.ENC_BYTES


def _ndarray(encoding: str, data: bytes) -> np.ndarray:
    parts = encoding.split(":")
    dtype = parts[1] if len(parts) > 1 and parts[1] else None
    shape = tuple(int(x) for x in parts[2].split(",")) if len(parts) > 2 else None
    pos = 0
    if dtype is None:
        dtype = _ND_VALUES[data[0]]
        pos = 1
    if shape is None:
        ndim, code = data[pos] >> 2, data[pos] & 3
        width = np.dtype(_ND_SHAPES[code]).itemsize
        shape = tuple(int(x) for x in np.frombuffer(data, _ND_SHAPES[code], ndim, pos + 1))
        pos += 1 + ndim * width
    return np.frombuffer(data, dtype, offset=pos).reshape(shape)


def _token_encoding(encoding: str) -> bool:
    """An ndarray column of integers (its dtype stated, or left to each sample's header)."""
    parts = encoding.split(":")
    if parts[0] != "ndarray":
        return False
    if len(parts) < 2 or not parts[1]:
        return True
    return parts[1] in _SCALARS and np.dtype(parts[1]).kind in "iu"


def _value(encoding: str, data: bytes) -> Any:
    if encoding == "int":
        return int(np.frombuffer(data, "<i8", 1)[0])
    if encoding in _SCALARS:
        return np.frombuffer(data, encoding, 1)[0].item()
    if encoding == "str_float":
        return float(data.decode("utf-8"))
    if encoding.startswith("ndarray"):
        return _ndarray(encoding, data)
    return data


def _type_name(encoding: str) -> str:
    if encoding == "pkl":
        return "pkl (pickled; passed on as bytes, not unpickled)"
    return encoding


class MdsExport(indexed.IndexedExport):
    layout = "mds"
    what = "MDS"

    def __init__(self, path: Loc, image_field: str | None = None) -> None:
        super().__init__(path)
        first = self.entries[0]
        names, encodings = self._columns(0)
        for i in range(1, len(self.entries)):
            if self._columns(i) != (names, encodings):
                raise DsbenchError(f"{self.entries[i].name} has other columns than "
                                   f"{first.name}: {self._columns(i)} against "
                                   f"{(names, encodings)}", path=path / indexed.INDEX)
        self.names, self.encodings = names, encodings
        self.sizes_fixed = [s if isinstance(s, int) else None
                            for s in self.index["shards"][0].get("column_sizes", [])]
        if len(self.sizes_fixed) != len(names):
            self.sizes_fixed = [None] * len(names)
        self.image, self.kind = self._payload_column(image_field)
        self.payload_field = self.image
        self.key = next((n for n in KEY_NAMES if n in names
                         and encodings[names.index(n)] == "str"), None)
        self.field_names = [n for n in names if n not in (self.image, self.key)]
        self.field_encodings = {n: _field_encoding(encodings[names.index(n)])
                                for n in self.field_names}

    def _columns(self, i: int) -> tuple[list[str], list[str]]:
        shard = self.index["shards"][i]
        return list(shard.get("column_names", [])), list(shard.get("column_encodings", []))

    def _entries(self, index: dict[str, Any]) -> list[indexed.Entry]:
        shards = index.get("shards")
        where = self.path / indexed.INDEX
        if not isinstance(shards, list):
            raise DsbenchError("not an MDS index: no list of shards", path=where)
        out = []
        for i, s in enumerate(shards):
            try:
                if s.get("format") != "mds":
                    raise DsbenchError(f"shard {i} is in format {s.get('format')!r}; dsbench "
                                       "reads MDS shards", path=where)
                raw, zipped = s["raw_data"], s.get("zip_data")
                stored = zipped or raw
                out.append(indexed.Entry(str(stored["basename"]), int(s["samples"]),
                                         int(stored["bytes"]),
                                         s.get("compression") if zipped else None,
                                         int(raw["bytes"])))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise DsbenchError(f"shard {i} of the index lacks or misstates {exc}",
                                   path=where) from None
        return out

    def _payload_column(self, image_field: str | None) -> tuple[str, str]:
        """The column the samples carry and its kind: an image, or token ids (an integer
        ndarray column, as a tokenized export stores a document)."""
        names, encodings = self.names, self.encodings
        where = self.path / indexed.INDEX
        if image_field is not None:
            if image_field not in names:
                raise DsbenchError(f"--image-field {image_field}: no such column (columns: "
                                   f"{', '.join(names)})", path=where)
            encoding = encodings[names.index(image_field)]
            if _token_encoding(encoding):
                return image_field, base.TOKENS
            if encoding == "str":
                return image_field, base.TEXT
            if encoding not in (*IMAGE_ENCODINGS, "bytes"):
                raise DsbenchError(f"--image-field {image_field}: its encoding is {encoding}, "
                                   "not jpeg, png, pil or bytes (an image) nor an integer "
                                   "ndarray (token ids)", path=where)
            return image_field, (base.AUDIO if encoding == "bytes"
                                 and image_field.lower() in base.AUDIO_NAMES else "image")
        images = [n for n, e in zip(names, encodings, strict=True) if e in IMAGE_ENCODINGS]
        if len(images) > 1:
            raise DsbenchError(f"several image columns ({', '.join(images)}): name the one "
                               "to read with --image-field", path=where)
        images = images or [n for n, e in zip(names, encodings, strict=True)
                            if e == "bytes" and n.lower() in IMAGE_NAMES]
        if images:
            return images[0], "image"
        # MDS has no audio encoding: a clip is stored as bytes, in a column named for it.
        clips = [n for n, e in zip(names, encodings, strict=True)
                 if e == "bytes" and n.lower() in base.AUDIO_NAMES]
        if len(clips) == 1:
            return clips[0], base.AUDIO
        tokens = [n for n, e in zip(names, encodings, strict=True) if _token_encoding(e)]
        token = base.chosen(tokens, base.TOKEN_NAMES)
        if token is not None:
            return token, base.TOKENS
        texts = [n for n, e in zip(names, encodings, strict=True)
                 if e == "str" and n.lower() in base.TEXT_NAMES]
        if not tokens and len(texts) == 1:
            return texts[0], base.TEXT
        shown = ", ".join(f"{n} ({e})" for n, e in zip(names, encodings, strict=True))
        what = (f"several token columns ({', '.join(tokens)})" if tokens else
                "no image or token column: no column is encoded jpeg, png or pil, nor a bytes "
                f"column named {'/'.join(IMAGE_NAMES)} (an image) or "
                f"{'/'.join(base.AUDIO_NAMES)} (audio), nor an integer ndarray")
        raise DsbenchError(f"{what} (columns: {shown}); name one with --image-field",
                           path=where)

    def _sample(self, entry: indexed.Entry, data: Any, key: str, where: str
                ) -> base.RawSample:
        variable = sum(1 for s in self.sizes_fixed if s is None)
        head = 4 * variable
        if len(data) < head:
            raise SampleError(f"corrupt sample: {len(data)} bytes, shorter than its header",
                              path=where, key=key)
        sizes = iter(np.frombuffer(data, "<u4", variable).tolist())
        pos = head
        values: dict[str, bytes] = {}
        for name, fixed in zip(self.names, self.sizes_fixed, strict=True):
            n = fixed if fixed is not None else next(sizes)
            values[name] = bytes(data[pos:pos + n])
            pos += n
        if pos != len(data):
            raise SampleError(f"corrupt sample: its columns take {pos} bytes of {len(data)}",
                              path=where, key=key)
        if self.key is not None:
            key = values[self.key].decode("utf-8", "replace")
        enc = self.encodings[self.names.index(self.image)]
        image = values[self.image]
        if self.kind == base.AUDIO:
            codec = sniff_audio(image)
            if codec not in base.AUDIO_CODECS:
                raise SampleError(f"column {self.image!r} holds bytes that are not WAV, FLAC, "
                                  f"Ogg or MP3 (they start {image[:8]!r})", path=where, key=key)
            return base.RawSample(key, where, image, codec, self._fields(values, key, where),
                                  self.field_encodings)
        if self.kind != "image":  # token ids viewed, text decoded, in the decode stage
            payload = base.StoredIds(partial(_ndarray, enc), image) \
                if self.kind == base.TOKENS else image
            return base.RawSample(key, where, payload, self.kind,
                                  self._fields(values, key, where), self.field_encodings)
        codec = IMAGE_ENCODINGS.get(enc) if enc != "jpeg" else sniff_codec(image) or "jpeg"
        codec = codec or sniff_codec(image)
        if codec is None:
            raise SampleError(f"column {self.image!r} holds bytes that are not an image "
                              f"(they start {image[:8]!r})", path=where, key=key)
        return base.RawSample(key, where, image, codec, self._fields(values, key, where),
                              self.field_encodings)

    def _fields(self, values: dict[str, bytes], key: str, where: str) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name in self.field_names:
            e = self.encodings[self.names.index(name)]
            try:
                fields[name] = (values[name] if self.field_encodings[name] != base.ENC_VALUE
                                else _value(e, values[name]))
            except (ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
                raise SampleError(f"cannot read column {name!r} ({e}): {exc}", path=where,
                                  key=key) from None
        return fields

    def fields(self) -> dict[str, str]:
        return {n: _type_name(self.encodings[self.names.index(n)]) for n in self.field_names}


def _is_mds(index: dict[str, Any] | None) -> bool:
    shards = (index or {}).get("shards")
    return (isinstance(shards, list) and bool(shards) and isinstance(shards[0], dict)
            and shards[0].get("format") == "mds")


class MdsAdapter:
    name = "mds"

    def detect(self, path: Loc) -> bool:
        return _is_mds(indexed.index_of(path))

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> MdsExport:
        return MdsExport(path, image_field)


ADAPTER = MdsAdapter()
