"""litdata's `optimize()` output (layout `litdata`), read without litdata.

An export is a directory holding `index.json` ({"chunks": [{"filename", "chunk_size" (samples),
"chunk_bytes" (the file's bytes)}, ...], "config": {"data_format": one serializer name per
leaf, "data_spec": the sample's pytree structure as torch's treespec JSON, "compression",
"compression_level", "item_loader"}}) and the chunks it names (`chunk-W-K.bin`). A chunk is a
uint32 item count, N + 1 uint32 offsets, then the items; an item is one uint32 size per leaf,
then every leaf's bytes. Compression (zstd): `compression_level` "chunk" compresses the whole
file, "sample" each item, and "batch" (the default) writes framed chunks: a `LDFZ01` header
with item offsets into the concatenated item bytes, a frame table, and one zstd frame per run
of items. Items of PyTreeLoader exports are read here; TokensLoader's token streams (read in
blocks whose size the reader chooses) in litdata_tokens.py. A chunk of items without media
(texts, numbers, bytes: litdata's writer decides) may instead hold its items as rows of an Arrow
IPC file at its end: the header's offsets all equal (no item bodies), then the IPC file, its
uint32 length and `LDARW01\0`; its rows are read record batch by record batch, as litdata reads
them, each row's leaves named as the pytree names them.

Leaves: the pytree names them (a dict's keys, "a.b" when nested, list positions as numbers).
The payload is the leaf named by --image-field, else the only one with an image serializer
(`jpeg`, `image:<ext>`: the stored bytes; `pil`: raw pixels); with no image, token ids: the
integer array leaf (`no_header_numpy`, `no_header_tensor`, `numpy`, `tensor`; one named
input_ids/tokens/token_ids/ids where there are several), else a `bytes` leaf named for audio
(audio, flac, wav, ...) holding a clip, else a `str` leaf named text. Other leaves are fields:
`str`, `text` and `json` kept as stored for the fields stage, a float32 `no_header_numpy` as float32
bytes, numbers and other arrays decoded here, `pickle` and unknown serializers passed on as
bytes, never unpickled. The key is a `key` or `__key__` str leaf's text, else the sample's
number in the export.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from dsbench.adapters import base, indexed, litdata_rows, litdata_tokens
from dsbench.adapters.columns import KEY_NAMES, sniff_audio, sniff_codec
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage.files import Loc

# The numeric dtypes of litdata's (no_header_)numpy serializers, by their index; and of its
# (no_header_)tensor serializers, by torch's dtype index in litdata's table.
_NUMPY = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "complex64", "complex128", "bool")
_TORCH = {0: "float32", 1: "float32", 2: "float64", 3: "float64", 4: "complex64",
          5: "complex64", 6: "complex128", 7: "complex128", 8: "float16", 9: "float16",
          11: "uint8", 12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32",
          17: "int64", 18: "int64", 19: "bool", 20: "uint16"}
_FRAMED_MAGIC = b"LDFZ01\0\0"
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")


def leaf_names(spec: Any, prefix: str = "") -> list[str]:
    """The names of a treespec's leaves, in the order litdata stores them."""
    if not isinstance(spec, dict) or spec.get("type") is None:
        return [prefix or "item"]
    children = spec.get("children_spec") or []
    kind = spec.get("type")
    try:
        keys = json.loads(spec.get("context") or "null")
    except ValueError:
        keys = None
    if kind not in ("builtins.dict", "collections.OrderedDict") or not isinstance(keys, list) \
            or len(keys) != len(children):
        keys = list(range(len(children)))
    out: list[str] = []
    for key, child in zip(keys, children, strict=True):
        out += leaf_names(child, f"{prefix}.{key}" if prefix else str(key))
    return out


def _image_codec(serializer: str) -> str | None:
    """The codec of an image leaf's serializer ("image:png" -> png), None for other leaves."""
    name, _, ext = serializer.partition(":")
    if name == "pil":
        return "pil"
    if name == "jpeg":
        return "jpeg"
    if name == "image":
        return {"jpg": "jpeg", "jpeg": "jpeg"}.get(ext, ext or "jpeg")
    return None


def _encoding(serializer: str) -> str:
    name, _, arg = serializer.partition(":")
    if name in ("str", "text"):
        return base.ENC_TEXT
    if name == "json":
        return base.ENC_JSON
    if name == "no_header_numpy" and arg == str(_NUMPY.index("float32")):
        return base.ENC_F32
    if name in ("int", "float", "bool", "numpy", "no_header_numpy", "tensor",
                "no_header_tensor"):
        return base.ENC_VALUE
    return base.ENC_BYTES


def _token_dtype(serializer: str) -> str | None:
    """The integer dtype of an array leaf's serializer (token ids); None for other leaves (a
    serializer with a header states its dtype per item: taken as ids, checked when read)."""
    name, _, arg = serializer.partition(":")
    if name in ("numpy", "tensor"):
        return "per item"
    try:
        dtype = (_NUMPY[int(arg)] if name == "no_header_numpy" else
                 _TORCH[int(arg)] if name == "no_header_tensor" else None)
    except (ValueError, IndexError, KeyError):
        return None
    return dtype if dtype is not None and np.dtype(dtype).kind in "iu" else None


def _with_header(data: bytes, dtypes: Any) -> np.ndarray:
    code, ndim = struct.unpack_from("<II", data, 0)
    shape = struct.unpack_from(f"<{ndim}I", data, 8)
    return np.frombuffer(data, dtypes[code], offset=8 + 4 * ndim).reshape(shape)


def _value(serializer: str, data: bytes) -> Any:
    name, _, arg = serializer.partition(":")
    if name == "int":
        return struct.unpack("<q", data)[0]
    if name == "float":
        return struct.unpack("<d", data)[0]
    if name == "bool":
        return data[0] != 0
    if name == "no_header_numpy":
        return np.frombuffer(data, _NUMPY[int(arg)])
    if name == "no_header_tensor":
        return np.frombuffer(data, _TORCH[int(arg)])
    if name == "numpy":
        return _with_header(data, _NUMPY)
    if name == "tensor":
        return _with_header(data, _TORCH)
    return data


class LitdataExport(indexed.IndexedExport):
    layout = "litdata"
    what = "litdata"
    HANDLES_KEPT = 1  # litdata's reader keeps the chunk it read last open

    def __init__(self, path: Loc, image_field: str | None = None) -> None:
        self._row_chunks: set[str] = set()  # chunks found to hold Arrow rows (random access)
        super().__init__(path)
        config = self.index.get("config") or {}
        where = path / indexed.INDEX
        loader = config.get("item_loader")
        if loader not in (None, "PyTreeLoader"):
            raise DsbenchError(f"items of {loader}, an item loader dsbench does not read "
                               f"(it reads PyTreeLoader's and {litdata_tokens.LOADER}'s)",
                               path=where)
        self.formats = [str(f) for f in config.get("data_format") or []]
        try:
            spec = json.loads(config.get("data_spec") or "null")
        except ValueError:
            spec = None
        names = leaf_names(spec[1] if isinstance(spec, list) and len(spec) == 2 else spec)
        if len(names) != len(self.formats):
            names = [str(i) for i in range(len(self.formats))]
        self.names = names
        self.level = (config.get("compression_level") or "chunk") if config.get(
            "compression") else None
        self.image, self.kind = self._payload_leaf(image_field, where)
        self.payload_field = self.image
        self.serializer = dict(zip(names, self.formats, strict=True))
        self.key = next((n for n in KEY_NAMES if self.serializer.get(n) == "str"), None)
        self.field_names = [n for n in names if n not in (self.image, self.key)]
        self.field_encodings = {n: _encoding(self.serializer[n]) for n in self.field_names}
        # An Arrow row's leaves are values already; text stays text for the fields stage.
        self.row_encodings = {n: base.ENC_TEXT if e == base.ENC_TEXT else base.ENC_VALUE
                              for n, e in self.field_encodings.items()}

    def _entries(self, index: dict[str, Any]) -> list[indexed.Entry]:
        chunks, config = index.get("chunks"), index.get("config") or {}
        where = self.path / indexed.INDEX
        if not isinstance(chunks, list):
            raise DsbenchError("not a litdata index: no list of chunks", path=where)
        whole = config.get("compression") if (config.get("compression_level") or "chunk") \
            == "chunk" else None
        try:
            # A chunk compressed whole is named so (`.zstd.bin`); an Arrow-row chunk is not.
            return [indexed.Entry(str(c["filename"]), int(c["chunk_size"]),
                                  int(c["chunk_bytes"]) if c.get("chunk_bytes") is not None
                                  else None,
                                  whole if str(c["filename"]).endswith(f".{whole}.bin") else None)
                    for c in chunks]
        except (KeyError, TypeError, ValueError) as exc:
            raise DsbenchError(f"a chunk of the index lacks or misstates {exc}",
                               path=where) from None

    def _payload_leaf(self, image_field: str | None, where: Loc) -> tuple[str, str]:
        """The leaf the samples carry and its kind: an image, or token ids (an integer array
        leaf, as a tokenized export's optimize function returns a document)."""
        names, formats = self.names, self.formats
        if image_field is not None:
            if image_field not in names:
                raise DsbenchError(f"--image-field {image_field}: no such leaf (leaves: "
                                   f"{', '.join(names)})", path=where)
            serializer = formats[names.index(image_field)]
            if _token_dtype(serializer) is not None:
                return image_field, base.TOKENS
            if serializer == "str":
                return image_field, base.TEXT
            if serializer == "bytes" and image_field.rsplit(".", 1)[-1].lower() in \
                    base.AUDIO_NAMES:
                return image_field, base.AUDIO
            if serializer != "bytes" and _image_codec(serializer) is None:
                raise DsbenchError(f"--image-field {image_field}: its serializer is "
                                   f"{serializer}, not an image one nor an integer array "
                                   "(token ids)", path=where)
            return image_field, "image"
        images = [n for n, f in zip(names, formats, strict=True) if _image_codec(f)]
        tokens = [n for n, f in zip(names, formats, strict=True) if _token_dtype(f)]
        if len(images) == 1:
            return images[0], "image"
        token = None if images else base.chosen(tokens, base.TOKEN_NAMES)
        if token is not None:
            return token, base.TOKENS
        clips = [n for n, f in zip(names, formats, strict=True)
                 if f == "bytes" and n.rsplit(".", 1)[-1].lower() in base.AUDIO_NAMES]
        if not images and not tokens and len(clips) == 1:
            return clips[0], base.AUDIO
        texts = [n for n, f in zip(names, formats, strict=True)
                 if f == "str" and n.lower() in base.TEXT_NAMES]
        if not images and not tokens and len(texts) == 1:
            return texts[0], base.TEXT
        shown = ", ".join(f"{n} ({f})" for n, f in zip(names, formats, strict=True))
        what = (f"several image leaves ({', '.join(images)})" if images else
                f"several token leaves ({', '.join(tokens)})" if tokens else
                f"no image or token leaf: no jpeg, image or pil serializer, nor an integer "
                f"array, among {shown}")
        raise DsbenchError(f"{what}; name the one to read with --image-field", path=where)

    def _mapped(self, entry: indexed.Entry) -> bool:
        return entry.compression is None and self.level in (None, "sample") and \
            entry.name not in self._row_chunks

    def _records(self, entry: indexed.Entry, shard: indexed.Shard, where: str
                 ) -> Iterator[tuple[int, Any]]:
        data = shard.data
        if bytes(data[-8:]) == litdata_rows.MAGIC:
            offsets = indexed.offset_table(data, entry.samples, where)
            if offsets[0] == offsets[-1]:  # no item bodies: the rows of the Arrow file
                shard.touch(data[:offsets[0]])
                yield from litdata_rows.rows(shard.touch(data[offsets[0]:]), entry.samples, where)
                return
        if self.level == "batch" or bytes(data[:8]) == _FRAMED_MAGIC:
            yield from _framed(data, entry.samples, where)
            return
        yield from super()._records(entry, shard, where)

    def _record(self, entry: indexed.Entry, record: Any, where: str) -> Any:
        if isinstance(record, dict):  # an Arrow row
            return record
        if self.level == "sample":
            return memoryview(indexed.decompress(bytes(record), "zstd", None, where))
        return record

    def _locate(self, shard: Any, entry: indexed.Entry, offset: int) -> Any:
        record = shard.record(offset)
        if len(record):
            return record
        # A pytree item is never empty (a size per leaf): an empty one is an Arrow-row chunk's,
        # whose rows are read from the Arrow file at its end, the chunk whole (and from now on
        # without opening it in place first: _mapped).
        self._row_chunks.add(entry.name)
        return self._whole_shard(shard.unit, entry).record(offset)

    def _sample(self, entry: indexed.Entry, data: Any, key: str, where: str
                ) -> base.RawSample:
        if isinstance(data, dict):
            return litdata_rows.sample(self, data, key, where)
        k = len(self.formats)
        if len(data) < 4 * k:
            raise SampleError(f"corrupt item: {len(data)} bytes, shorter than its header",
                              path=where, key=key)
        sizes = np.frombuffer(data, "<u4", k).tolist()
        if 4 * k + sum(sizes) != len(data):
            raise SampleError(f"corrupt item: its leaves take {4 * k + sum(sizes)} bytes of "
                              f"{len(data)}", path=where, key=key)
        pos, values = 4 * k, {}
        for name, n in zip(self.names, sizes, strict=True):
            values[name] = bytes(data[pos:pos + n])
            pos += n
        if self.key is not None:
            key = values[self.key].decode("utf-8", "replace")
        image = values[self.image]
        if self.kind == base.AUDIO:
            return self.clip(image, self._fields(values, key, where), key, where)
        if self.kind != "image":  # token ids viewed, text decoded, in the decode stage
            payload = base.StoredIds(partial(_value, self.serializer[self.image]), image) \
                if self.kind == base.TOKENS else image
            return base.RawSample(key, where, payload, self.kind,
                                  self._fields(values, key, where), self.field_encodings)
        codec = _image_codec(self.serializer[self.image])
        codec = "pil" if codec == "pil" else (sniff_codec(image) or codec)
        if codec is None:
            raise SampleError(f"leaf {self.image!r} holds bytes that are not an image (they "
                              f"start {image[:8]!r})", path=where, key=key)
        return base.RawSample(key, where, image, codec, self._fields(values, key, where),
                              self.field_encodings)

    def clip(self, data: bytes, fields: dict[str, Any], key: str, where: str
              ) -> base.RawSample:
        codec = sniff_audio(data)
        if codec not in base.AUDIO_CODECS:
            raise SampleError(f"leaf {self.image!r} holds bytes that are not WAV, FLAC, Ogg or "
                              f"MP3 (they start {data[:8]!r})", path=where, key=key)
        return base.RawSample(key, where, data, codec, fields, self.field_encodings)

    def _fields(self, values: dict[str, bytes], key: str, where: str) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name in self.field_names:
            s = self.serializer[name]
            try:
                fields[name] = (values[name] if self.field_encodings[name] != base.ENC_VALUE
                                else _value(s, values[name]))
            except (struct.error, ValueError, KeyError, IndexError) as exc:
                raise SampleError(f"cannot read leaf {name!r} ({s}): {exc}", path=where,
                                  key=key) from None
        return fields

    def fields(self) -> dict[str, str]:
        return {n: self.serializer[n] for n in self.field_names}


def _framed(data: memoryview, samples: int, where: str) -> Iterator[tuple[int, memoryview]]:
    """The items of a framed zstd chunk (see the module docstring), frame by frame."""
    if len(data) < _PREFIX.size or bytes(data[:8]) != _FRAMED_MAGIC:
        raise SampleError("not a framed zstd chunk (no LDFZ01 header), though the index "
                          "says compression_level batch", path=where)
    _, version, _, n, _, frames = _PREFIX.unpack_from(data, 0)
    if version != 1 or n != samples:
        raise SampleError(f"framed chunk of version {version} with {n} items, where the index "
                          f"says {samples}", path=where)
    if len(data) < _PREFIX.size + 4 * (n + 1):
        raise SampleError("truncated in its offset table", path=where)
    offsets = np.frombuffer(data, "<u4", n + 1, _PREFIX.size).tolist()
    table = _PREFIX.size + 4 * (n + 1)
    if len(data) < table + _FRAME.size * frames:
        raise SampleError("truncated in its frame table", path=where)
    for f in range(frames):
        first, count, offset, stored, raw = _FRAME.unpack_from(data, table + f * _FRAME.size)
        if offset + stored > len(data):
            raise SampleError(f"truncated: frame {f} ends at byte {offset + stored}, but the "
                              f"chunk has {len(data)}", path=where)
        block = memoryview(indexed.decompress(bytes(data[offset:offset + stored]), "zstd", raw,
                                              where))
        start = offsets[first]
        for i in range(first, first + count):
            yield i, block[offsets[i] - start:offsets[i + 1] - start]


class LitdataAdapter:
    name = "litdata"

    def detect(self, path: Loc) -> bool:
        index = indexed.index_of(path)
        return isinstance((index or {}).get("chunks"), list) and isinstance(
            (index or {}).get("config"), dict)

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> indexed.IndexedExport:
        config = indexed.read_index(path, "litdata").get("config") or {}
        if config.get("item_loader") == litdata_tokens.LOADER:
            formats = config.get("data_format") or [None]
            dtype = _token_dtype(str(formats[0])) if len(formats) == 1 else None
            return litdata_tokens.TokenStreamExport(
                path, image_field, seq_len, None if dtype == "per item" else dtype)
        return LitdataExport(path, image_field)


ADAPTER = LitdataAdapter()
