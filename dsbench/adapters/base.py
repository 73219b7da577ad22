"""What every format adapter shares: the raw sample it yields, its Protocol, and I/O accounting.

Readers yield *encoded* data (image bytes, field values as stored) so that decoding and parsing
are timed by the loader as stages of their own. Every file an adapter opens for reading goes
through `open_file`, and every memory-mapped byte range it touches is added with
`count_mapped`, so the loader can report files and bytes per sample exactly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from dsbench.errors import SampleError
from dsbench.spec import ExportSpec

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
IMAGE_EXTS: dict[str, str] = {
    "jpg": "jpeg", "jpeg": "jpeg", "png": "png", "ppm": "ppm", "webp": "webp",
}

ON_ERROR = ("raise", "skip")

# Per-process counters; a loader worker reads them before and after its measured window.
_opens = 0
_mapped_bytes = 0


def open_file(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a file of the export for reading, counting the open."""
    global _opens
    f = open(path, "rb")  # noqa: SIM115 - the caller owns the file object
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
    """(files opened, memory-mapped bytes touched) by this process so far."""
    return _opens, _mapped_bytes


@dataclass(slots=True)
class RawSample:
    """One sample as stored: the encoded image and the other fields before parsing.

    `encodings` maps each field name to one of the ENC_* constants; readers usually share one
    mapping across all samples of a shard.
    """

    key: str
    source: str
    image: bytes
    codec: str
    fields: dict[str, Any]
    encodings: Mapping[str, str]


# Called with each bad sample when the error policy is "skip"; None means raise.
SkipHandler = Callable[[SampleError], None] | None


class Export(Protocol):
    """An export on disk, opened for reading by one adapter."""

    path: Path
    layout: str

    def units(self) -> list[str]:
        """What workers split between them, sorted: shard files, or sample keys (per-sample)."""
        ...

    def read(self, worker: int = 0, n_workers: int = 1, skip: SkipHandler = None,
             ) -> Iterator[RawSample]:
        """Yield the samples of worker `worker`'s slice: units[worker::n_workers], in order."""
        ...

    def survey(self) -> dict[str, Any]:
        """Layout facts for `inspect`, from indexes, headers and footers where the layout allows."""
        ...


class Adapter(Protocol):
    """One on-disk layout. See each module's docstring for the layout it reads and writes."""

    name: str

    def detect(self, path: Path) -> bool:
        """True when `path` looks like an export of this layout (cheap: names and magic bytes)."""
        ...

    def open(self, path: Path) -> Export:
        """Open an export for reading; a DsbenchError naming the file when it cannot be read."""
        ...

    def unit_paths(self, spec: ExportSpec, out_dir: Path, unit: int) -> list[Path]:
        """The final paths of write unit `unit` (a shard, or a directory of per-sample files)."""
        ...

    def write_unit(self, spec: ExportSpec, out_dir: Path, unit: int,
                   samples: list[dict[str, Any]]) -> None:
        """Write one unit atomically: under temporary names, renamed when complete."""
        ...


def tmp_path(final: Path) -> Path:
    """A temporary sibling of `final` that readers and detect() ignore (leading dot)."""
    return final.with_name(f".{final.name}.tmp{os.getpid()}")


def commit(tmp: Path, final: Path) -> None:
    """Make a fully written temporary file visible under its final name in one atomic step.

    An interrupted writer leaves at most a dot-named temporary behind, never a partial file
    under a name that readers would pick up.
    """
    os.replace(tmp, final)
