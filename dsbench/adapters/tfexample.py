"""TFRecord's framing and tf.train.Example's protobuf wire format, parsed without TensorFlow.

A TFRecord file is a run of records: a uint64 length (little-endian), the masked CRC32C of
those 8 bytes, the record's bytes and their masked CRC32C (mask: the CRC rotated right by 15
bits plus 0xa282ead8). A tf.train.Example is a protobuf message: field 1, Features, whose
field 1 is a map from a feature's name (1) to a Feature (2), itself one of BytesList (1),
FloatList (2) or Int64List (3), each a repeated field 1 (packed or not).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from dsbench.adapters import base
from dsbench.errors import SampleError
from dsbench.storage.files import Loc

_CASTAGNOLI = 0x82F63B78
_MASK_DELTA = 0xA282EAD8


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _CASTAGNOLI if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _table()


def _crc32c_py(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes, crc: Any = _crc32c_py) -> int:
    c = crc(data)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def fast_crc() -> Any:
    try:
        import crc32c
    except ImportError:
        return None
    return crc32c.crc32c


def looks_like(head: bytes) -> bool:
    """Whether 12 bytes start a TFRecord record: a length and its masked CRC32C."""
    return len(head) >= 12 and struct.unpack("<I", head[8:12])[0] == masked_crc(head[:8])


# ---- protobuf wire format -------------------------------------------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("a varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: ints for varints and fixed32,
    bytes for length-delimited fields."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("a field runs past the end of the record")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"wire type {wire} is not one a tf.train.Example holds")
        yield number, wire, value


def _list(kind: int, msg: bytes) -> list[Any]:
    """The values of a BytesList (1), FloatList (2) or Int64List (3)."""
    out: list[Any] = []
    for number, wire, value in _fields(msg):
        if number != 1:
            continue
        if kind == 1:
            out.append(bytes(value))
        elif kind == 2:
            out += np.frombuffer(value, "<f4").tolist() if wire == 2 else \
                [struct.unpack("<f", value)[0]]
        elif wire == 2:
            pos = 0
            while pos < len(value):
                v, pos = _varint(value, pos)
                out.append(v - (1 << 64) if v >> 63 else v)
        else:
            out.append(value - (1 << 64) if value >> 63 else value)
    return out


def parse_example(record: bytes) -> dict[str, tuple[int, list[Any]]]:
    """A tf.train.Example's features: name -> (1 bytes, 2 floats, 3 int64s; the values)."""
    features: dict[str, tuple[int, list[Any]]] = {}
    for number, _, features_msg in _fields(record):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(features_msg):
            if entry_number != 1:
                continue
            name, value = "", b""
            for n, _, v in _fields(entry):
                if n == 1:
                    name = bytes(v).decode("utf-8")
                elif n == 2:
                    value = v
            kind, values = 0, []
            for n, _, v in _fields(value):
                kind, values = n, _list(n, v)
            features[name] = (kind, values)
    return features


def value_of(kind: int, values: list[Any]) -> Any:
    if kind == 1:
        return values[0] if len(values) == 1 else values
    if len(values) == 1:
        return values[0]
    return np.asarray(values, np.float32 if kind == 2 else np.int64)


def open_records(path: Loc) -> IO[bytes]:
    f = base.open_file(path)
    if str(path).endswith(".gz"):
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


def _head(f: IO[bytes], i: int, where: str) -> int | None:
    """Record i's length from its 12-byte head, checked; None at a clean end of file."""
    head = f.read(12)
    if not head:
        return None
    if len(head) < 12:
        raise SampleError(f"truncated: record {i} is cut inside its length", path=where,
                          key=str(i))
    if not looks_like(head):
        raise SampleError(f"corrupt: record {i}'s length fails its CRC (not a TFRecord file, "
                          "or damaged here)", path=where, key=str(i))
    return int(struct.unpack("<Q", head[:8])[0])


def _cut(i: int, n: int, where: str) -> SampleError:
    return SampleError(f"truncated: record {i} of {n} bytes is cut short", path=where,
                       key=str(i))


def records(f: IO[bytes], where: str, crc: Any) -> Iterator[tuple[int, bytes]]:
    """(record number, its bytes) of a TFRecord stream, its framing checked as the module
    docstring says (the record's own CRC with `crc`, a crc32c function); a SampleError naming
    the record where the framing breaks."""
    i = 0
    while (n := _head(f, i, where)) is not None:
        data, tail = f.read(n), f.read(4)
        if len(data) < n or len(tail) < 4:
            raise _cut(i, n, where)
        if crc and struct.unpack("<I", tail)[0] != masked_crc(data, crc):
            raise SampleError(f"corrupt: record {i} fails its CRC", path=where, key=str(i))
        yield i, data
        i += 1


def record_sizes(f: IO[bytes], where: str) -> Iterator[int]:
    """The framed size of each record (16 bytes of framing plus its own), seeking over the
    records where the file allows."""
    i = 0
    while (n := _head(f, i, where)) is not None:
        if f.seekable():
            f.seek(n, 1)
            if len(f.read(4)) < 4:  # past the end: the record was cut short
                raise _cut(i, n, where)
        elif len(f.read(n)) < n or len(f.read(4)) < 4:
            raise _cut(i, n, where)
        yield n + 16
        i += 1
