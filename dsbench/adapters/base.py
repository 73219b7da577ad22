"""What every format adapter shares: the raw sample it yields, its Protocol, and I/O accounting.

Readers yield *encoded* data (image bytes, field values as stored) so that decoding and parsing
are timed by the loader as stages of their own. Every file (or object) an adapter opens for
reading goes through `open_file` (or is counted with `count_open`), every memory-mapped byte
range it touches is added with `count_mapped`, and every byte an object store sends is counted
by dsbench.storage, so the loader can report files and bytes per sample exactly. Paths are
local or remote alike (dsbench.storage.files.Loc).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeVar

import numpy as np

from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import accounting, files
from dsbench.storage.files import Loc, is_ignored, location, open_seekable, open_stream, walk

__all__ = ["Loc", "is_ignored", "location", "walk"]  # the storage names readers use, re-exported

T = TypeVar("T")

# How a stored field value is encoded; the loader's field stage has one parser per encoding.
ENC_INT_TEXT = "int-text"  # ASCII integer, e.g. WebDataset's `.cls` member: b"417"
ENC_TEXT = "text"  # UTF-8 text (bytes) or str
ENC_JSON = "json"  # JSON text (bytes or str)
ENC_F32 = "f32"  # raw little-endian float32 bytes
ENC_NPY = "npy"  # a NumPy .npy file's bytes
ENC_VALUE = "value"  # already a Python or NumPy value (columnar readers)
ENC_BYTES = "bytes"  # opaque bytes of an unknown member extension, passed on as they are

# Member extensions (the part of a basename after the key) and how they are encoded, for exports
# that dsbench did not write. Longest match wins; unknown extensions are read as opaque bytes.
EXT_ENCODINGS: dict[str, str] = {
    "cls": ENC_INT_TEXT, "cls2": ENC_INT_TEXT, "index": ENC_INT_TEXT, "idx": ENC_INT_TEXT,
    "txt": ENC_TEXT, "text": ENC_TEXT, "caption": ENC_TEXT,
    "json": ENC_JSON, "jsn": ENC_JSON,
    "f32": ENC_F32, "npy": ENC_NPY,
}
# What a sample carries: its payload (RawSample.image) is an encoded image, whose codec names
# it; a sequence of token ids (codec TOKENS: a 1-d integer array, or bytes a reader views as
# one), which the loader crops to a sequence length rather than decodes to pixels; or raw text
# (codec TEXT: a str), which the loader tokenizes, then crops as token ids.
KINDS = ("image", "tokens", "text", "audio")
TOKENS = "tokens"
# Ids per training sequence where none is given (--seq-len): token samples are cropped or
# padded to it, and a token stream with no samples of its own is cut into blocks of it.
SEQ_LEN = 2048
TEXT = "text"
# Encoded audio (codec: its container, one of AUDIO_CODECS), which the loader decodes to
# frames with libsndfile (soundfile), then crops to a clip.
AUDIO = "audio"
AUDIO_EXTS: dict[str, str] = {"flac": "flac", "wav": "wav", "mp3": "mp3", "ogg": "ogg",
                              "opus": "ogg"}
AUDIO_CODECS = frozenset(AUDIO_EXTS.values())
AUDIO_NAMES = ("audio", "flac", "wav", "mp3", "speech")
# Column names that carry token ids, or text, where an export's schema does not mark one.
TOKEN_NAMES = ("input_ids", "tokens", "token_ids", "ids")
TEXT_NAMES = ("text", "content", "document", "raw_content")

IMAGE_EXTS: dict[str, str] = {
    "jpg": "jpeg", "jpeg": "jpeg", "png": "png", "ppm": "ppm", "webp": "webp",
}



def decode_stored(encoding: str | None, value: Any) -> Any:
    """A field's value from the form its encoding stores it in: the one decoding shared by the
    loader's fields stage and by re-exports. ENC_VALUE (already a value), ENC_BYTES and unknown
    encodings come back as they are. Bad data raises ValueError (UnicodeDecodeError and
    JSONDecodeError among them), TypeError, OSError or RecursionError (JSON nested too deep)."""
    if encoding == ENC_INT_TEXT:
        return int(bytes(value) if isinstance(value, memoryview) else value)
    if encoding == ENC_TEXT:
        return bytes(value).decode("utf-8") if isinstance(value, bytes | bytearray | memoryview) \
            else str(value)
    if encoding == ENC_JSON:
        return json.loads(value)
    if encoding == ENC_F32:
        return np.frombuffer(value, dtype="<f4")
    if encoding == ENC_NPY:
        return np.load(io.BytesIO(value), allow_pickle=False)
    return value


def chosen(candidates: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The payload column among `candidates`: the one whose name is in `names`, else the only
    candidate; None where there is no such one."""
    named = [c for c in candidates if c.lower() in names]
    if len(named) == 1:
        return named[0]
    return candidates[0] if len(candidates) == 1 else None


class StoredIds:
    """A sample's token ids as stored: its bytes, and how its format turns them into an array,
    run by the decode stage (token_ids) so that the read stage does only the reading."""

    __slots__ = ("data", "parse")

    def __init__(self, parse: Callable[[bytes], Any], data: bytes) -> None:
        self.parse, self.data = parse, data

    def numpy(self) -> np.ndarray:
        arr = np.asarray(self.parse(self.data))
        return arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr  # (1, n) or (n, 1)


def npy_header(data: bytes) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """A NumPy `.npy` file's array shape and dtype, from its header alone (the start of the
    file is enough); ValueError (or EOFError) where it is not one."""
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read(f)
    return tuple(shape), dtype


def npy_array(data: bytes) -> np.ndarray:
    """A NumPy `.npy` file's array (a WebDataset `.npy` member of token ids); never unpickled.
    ValueError where the bytes are not one."""
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"not a NumPy .npy array: {exc}") from None


def token_ids(payload: object) -> np.ndarray:
    """A sample's token ids as the reader found them (a view where the layout allows: an MDS
    ndarray's bytes, an Arrow list's values) or as a format's own library gave them (a list, a
    tensor): a 1-d integer array, not copied when it already is one. ValueError otherwise."""
    numpy = getattr(payload, "numpy", None)
    arr = numpy() if callable(numpy) and not isinstance(payload, np.ndarray) \
        else np.asarray(payload)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"expected a 1-d array of integer token ids, got {arr.dtype} of "
                         f"shape {arr.shape}")
    return arr


def text_of(payload: object) -> str:
    """A text sample's text: a str as stored, or UTF-8 bytes (a `str` column's raw value).
    UnicodeDecodeError (a ValueError) where the bytes are not UTF-8."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload).decode("utf-8")
    raise ValueError(f"expected text, got {type(payload).__name__}")


def kind_of(export: Any) -> str:
    """What an export's samples carry (KINDS): as its schema says, or, for a layout whose
    members or first record name it (WebDataset's, per-sample files', TFRecord's), its first
    sample's."""
    kind = getattr(export, "kind", None)
    if kind is None:
        samples = export.read()
        try:
            first = next(samples, None)
        finally:
            samples.close()
        codec = first.codec if first is not None else "image"
        kind = codec if codec in (TOKENS, TEXT) else AUDIO if codec in AUDIO_CODECS else "image"
    return str(kind)


def images_only(export: Any, what: str) -> None:
    """One line where a command that writes images is given an export of another kind."""
    kind = kind_of(export)
    if kind != "image":
        field = getattr(export, "payload_field", None)
        raise DsbenchError(f"{what}, and this export's samples carry {kind}"
                           f"{f' ({field})' if field else ''}: not built for them yet "
                           "(read, inspect, bench and compare take them)", path=export.path)


ON_ERROR = ("raise", "skip")

# File name endings that tell a layout's data files (the per-sample layout goes by its images).
SUFFIXES = {"wds": (".tar", ".tar.gz", ".tgz"), "arrow": (".arrow", ".feather", ".ipc", ".arrows"),
            "parquet": (".parquet",), "tfrecord": (".tfrecord", ".tfrecords", ".tfrec"),
            "jsonl": (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")}

# Per-process counters; a loader worker reads them before and after its measured window.
_opens = 0
_mapped_bytes = 0


def data_files(path: Loc, exts: tuple[str, ...], what: str) -> dict[Loc, int]:
    """The files of an export whose names end in one of `exts` (all of them when `path` is a
    file), with their sizes, sorted; a DsbenchError when there are none."""
    if not files.is_dir(path):
        size = files.size(path)
        if size is None:
            raise DsbenchError("no such file or directory", path=path)
        return {path: size}
    found = {path / rel: n for rel, n in walk(path) if rel.lower().endswith(exts)}
    if not found:
        raise DsbenchError(f"no {what} files ({', '.join(exts)}) here", path=path)
    return found


def open_file(path: str | os.PathLike[str] | Loc, seekable: bool = False) -> IO[bytes]:
    """Open a file of the export for reading, counting the open. A remote one is streamed
    from one GET, or read over range GETs when it must be `seekable`."""
    global _opens
    loc = location(path)
    f = open_seekable(loc) if seekable else open_stream(loc)
    _opens += 1
    return f


def count_open() -> None:
    """Record a file opened by a library rather than by `open_file` (e.g. `pa.memory_map`)."""
    global _opens
    _opens += 1


def count_mapped(nbytes: int) -> None:
    """Record bytes read through a memory map, which the OS's read_chars does not see."""
    global _mapped_bytes
    _mapped_bytes += nbytes


def io_counters() -> tuple[int, int]:
    """(files opened, bytes the OS's read_chars does not see: memory-mapped and received from
    an object store) by this process so far."""
    return _opens, _mapped_bytes + accounting.body_bytes()


@dataclass(slots=True)
class RawSample:
    """One sample as stored: its payload (`image`: the encoded image, or token ids when `codec`
    is TOKENS) and the other fields before parsing.

    `encodings` maps each field name to one of the ENC_* constants; readers usually share one
    mapping across all samples of a shard. `sources` names the file of a field where it is not
    `source` (per-sample files keep each field in its own file), so errors name the right one.
    """

    key: str
    source: str
    image: Any  # an encoded image's bytes; TOKENS: an integer array (or ids); TEXT: a str
    codec: str
    fields: dict[str, Any]
    encodings: Mapping[str, str]
    sources: Mapping[str, str] | None = None

    def source_of(self, field: str) -> str:
        return (self.sources or {}).get(field, self.source)


# Called with each bad sample when the error policy is "skip"; None means raise.
SkipHandler = Callable[[SampleError], None] | None


class Export(Protocol):
    """An export on disk, opened for reading by one adapter."""

    path: Loc
    layout: str
    ignored: list[str]  # files under `path` this layout does not read (set by open_export)

    def units(self) -> list[str]:
        """What workers split between them, sorted: shard files, or sample keys (per-sample)."""
        ...

    def read(self, worker: int = 0, n_workers: int = 1, skip: SkipHandler = None,
             ) -> Iterator[RawSample]:
        """Yield the samples of worker `worker`'s slice: units[worker::n_workers], in order."""
        ...

    def read_units(self, units: Sequence[str], skip: SkipHandler = None) -> Iterator[RawSample]:
        """Yield the samples of these units (from `units()`), in the order given."""
        ...

    def unit_samples(self, unit: str) -> int:
        """How many samples `read_units([unit])` yields from a readable unit, from indexes,
        headers and footers where the layout allows; a SampleError naming the unit when it
        cannot be read."""
        ...

    def survey(self) -> dict[str, Any]:
        """Layout facts for `inspect`, from indexes, headers and footers where the layout allows."""
        ...


class ReadsAt(Protocol):
    """An export whose single samples can be read where they lie, as a map-style Dataset's
    `__getitem__` reads them (`bench --order random` and `block`)."""

    def read_at(self, unit: str, offset: int, skip: SkipHandler = None) -> RawSample | None:
        """Sample `offset` of `unit` (as `read_units([unit])` yields them), read through the
        layout's random-access path; None where it is bad and `skip` took it."""
        ...

    def forget(self) -> None:
        """Close what random reads keep open (files, the last block read), so that counting
        starts cold."""
        ...


def reads_at(export: object) -> bool:
    """Whether dsbench reads this export's samples by random access."""
    return callable(getattr(export, "read_at", None))


class ReadsUnits:
    """What every export reads the same way: a worker's share is units[worker::n_workers]."""

    def units(self) -> list[str]:
        raise NotImplementedError

    def read_units(self, units: Sequence[str], skip: SkipHandler = None) -> Iterator[RawSample]:
        raise NotImplementedError

    def unit_samples(self, unit: str) -> int:
        # Counting by reading holds for any layout; layouts with an index override it.
        return sum(1 for _ in self.read_units([unit]))

    def read(self, worker: int = 0, n_workers: int = 1, skip: SkipHandler = None,
             ) -> Iterator[RawSample]:
        yield from self.read_units(worker_share(self.units(), worker, n_workers), skip)


class Adapter(Protocol):
    """One on-disk layout. See each module's docstring for the layout it reads."""

    name: str

    def detect(self, path: Loc) -> bool:
        """True when `path` looks like an export of this layout (cheap: names and magic bytes)."""
        ...

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> Export:
        """Open an export for reading; a DsbenchError naming the file when it cannot be read.
        `image_field` names the column (member extension, feature) holding the image where
        the format leaves a choice; None lets the format's schema, then the names, decide.
        `seq_len` is the sequence a token stream stored without samples of its own is cut
        into (litdata's TokensLoader chunks: the reader's block size; None: SEQ_LEN); the
        layouts whose samples are stored one by one do not use it."""
        ...


# --- what every reader shares ---------------------------------------------------------------

# dsbench's manifest at the root of an export it wrote (dsbench.export.generate writes it).
MANIFEST = "_dsbench.json"


def read_manifest(root: Loc) -> dict[str, Any] | None:
    """The manifest of an export dsbench wrote; None for a foreign or damaged one."""
    path = location(root) / MANIFEST
    if files.size(path) is None:
        return None
    try:
        data = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError, DsbenchError):
        return None
    return data if isinstance(data, dict) else None


def report(err: SampleError, skip: SkipHandler) -> None:
    """The error policy at one bad sample: raise it, or hand it to the skip handler."""
    if skip is None:
        raise err
    skip(err)


def unread(root: Loc, read: set[str], own: tuple[str, ...] = ()) -> list[str]:
    """The files under an export's `root` (relative paths) that its reader does not read: not
    among `read`, nor among the format's own metadata files `own` (an index), nor hidden."""
    return [rel for rel, _ in walk(root) if rel not in read and rel not in own]


def worker_share(units: Sequence[T], worker: int, n_workers: int) -> Sequence[T]:
    """Worker `worker`'s disjoint share of the units: units[worker::n_workers]."""
    if n_workers < 1 or not 0 <= worker < n_workers:
        raise DsbenchError(f"worker {worker} of {n_workers} does not exist")
    return units[worker::n_workers]
