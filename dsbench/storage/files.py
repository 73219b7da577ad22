"""Files wherever they are: the few operations the adapters need, for a local path or a URL.

`location(text)` gives a `pathlib.Path` or a `RemotePath`; the rest take either. Remote files
are read two ways: streamed from one GET (`open_stream`: a tar shard front to back, a
per-sample file whole), or seekable over range GETs (`open_seekable`: Parquet and Arrow
footers and row groups). A seekable file starts with one range request for the last 64 KiB,
which gives its size without a HEAD and holds most footers.

Readers ignore names starting with '.' or '_' at any depth (temporaries, manifests, Spark's
_SUCCESS), and on local disks do not follow symbolic links to directories, nor open anything
that is not a regular file (a FIFO named like a shard would block forever).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from dsbench.errors import DsbenchError
from dsbench.storage import remote
from dsbench.storage.remote import RemotePath, is_url

Loc = Path | RemotePath
TAIL_BYTES = 64 * 1024


def location(text: str | os.PathLike[str] | Loc) -> Loc:
    if isinstance(text, RemotePath | Path):
        return text
    s = os.fspath(text)
    return RemotePath(s) if is_url(s) else Path(s)


def named(text: str | os.PathLike[str] | Loc) -> Loc:
    """The location of a path a person gave: an empty one is refused, since Path("") would
    quietly mean the current directory."""
    if not isinstance(text, RemotePath | Path) and not os.fspath(text):
        raise DsbenchError("an empty path names no file or directory")
    return location(text)


def is_remote(p: Loc) -> bool:
    return isinstance(p, RemotePath)


def relative(p: Loc, root: Loc) -> str:
    """`p` under `root`, as a posix path ('name' for a file that is the root itself)."""
    if p == root:
        return p.name
    if isinstance(p, RemotePath) and isinstance(root, RemotePath):
        return p.relative_to(root).as_posix()
    if isinstance(p, Path) and isinstance(root, Path):
        return p.relative_to(root).as_posix()
    raise ValueError(f"{p} is not under {root}")


def directory_of(p: Loc) -> Loc:
    """`p` when it is a directory (or prefix), else the directory holding it."""
    return p if is_dir(p) else p.parent


def is_ignored(name: str) -> bool:
    """Readers skip names starting with '.' or '_' (temporaries, the manifest, OS litter)."""
    return name.startswith((".", "_"))


# --- what is there ------------------------------------------------------------------------------

# What walk(..., skipped) says of an entry it does not yield.
HIDDEN = "hidden: its name starts with '.' or '_'"
EMPTY_DIR = "an empty directory"


def walk(root: Loc, skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[str, int]]:
    """(relative posix path, size) of every regular file under `root`, in name order, depth
    first. Each entry it does not yield (hidden name, not a regular file, dangling or looping
    link, link to a directory, empty directory) is added to `skipped` as (path, why), so that a
    caller can say what was not read; a directory that cannot be listed is a DsbenchError."""
    if isinstance(root, RemotePath):
        for rel, size in remote.listing(root):
            if not any(is_ignored(part) for part in rel.split("/")):
                yield rel, size
            elif skipped is not None:
                skipped.append((rel, HIDDEN))
        return
    note = skipped.append if skipped is not None else (lambda entry: None)
    stack = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise DsbenchError(f"cannot list this directory: {exc.strerror or exc}",
                               path=directory) from None
        if not entries and prefix:
            note((prefix, EMPTY_DIR))
        subdirs = []
        for e in entries:
            rel = prefix + e.name
            if is_ignored(e.name):
                note((rel, HIDDEN))
                continue
            why = _unread(e)
            if why == "":
                subdirs.append((Path(e.path), f"{rel}/"))
            elif why is None:
                yield rel, e.stat().st_size
            else:
                note((rel, why))
        stack.extend(reversed(subdirs))


def _unread(e: os.DirEntry[str]) -> str | None:
    """None for a regular file walk yields, '' for a directory it enters, else why neither:
    links to directories are not followed (a loop would never end), and nothing that is not a
    regular file is opened (a FIFO named like a shard would block forever)."""
    try:
        if e.is_dir(follow_symlinks=False):
            return ""
        if e.is_file():
            return None
        if e.is_dir():
            return "a symbolic link to a directory, not followed"
        if e.is_symlink():
            return "a dangling symbolic link"
        return "not a regular file"
    except OSError as exc:  # a link loop, or a target that cannot be examined
        return f"cannot be examined: {exc.strerror or exc}"


def is_dir(p: Loc) -> bool:
    if isinstance(p, RemotePath):
        return bool(remote.listing(p))
    return p.is_dir()


def is_file(p: Loc) -> bool:
    if isinstance(p, RemotePath):
        return not remote.listing(p) and size(p) is not None
    return p.is_file()


def exists(p: Loc) -> bool:
    return is_dir(p) or is_file(p)


def size(p: Loc) -> int | None:
    """Bytes of the file at `p`, or None when there is none."""
    if isinstance(p, RemotePath):
        for rel, n in remote.listing(p.parent):
            if rel == p.name:
                return n
        return remote.head_size(p)
    try:
        return p.stat().st_size if p.is_file() else None
    except OSError:
        return None


# --- reading --------------------------------------------------------------------------------------

def open_stream(p: Loc) -> IO[bytes]:
    """A file to read front to back (a remote one from a single GET)."""
    if isinstance(p, RemotePath):
        return io.BufferedReader(_Stream(p), buffer_size=1 << 20)
    if not p.is_file():
        raise OSError(f"not a regular file: {p}")
    return open(p, "rb")


def open_seekable(p: Loc) -> IO[bytes]:
    """A file to seek in (a remote one over range GETs)."""
    if isinstance(p, RemotePath):
        return io.BufferedReader(_Ranges(p), buffer_size=256 * 1024)
    return open_stream(p)


def open_raw(p: Loc) -> IO[bytes]:
    """A file to seek in, unbuffered: each read is one read at its position (one range GET in
    an object store), as a reader of single records at known offsets reads them."""
    if isinstance(p, RemotePath):
        return _Ranges(p)  # type: ignore[return-value]
    if not p.is_file():
        raise OSError(f"not a regular file: {p}")
    return open(p, "rb", buffering=0)


def read_bytes(p: Loc) -> bytes:
    with open_stream(p) as f:
        return f.read()


class _Stream(io.RawIOBase):
    """One streaming GET as a non-seekable raw file."""

    def __init__(self, path: RemotePath) -> None:
        self.path = path
        self._chunks = remote.stream(path)
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        while not self._buf:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._buf = memoryview(chunk)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            self._chunks.close()  # type: ignore[attr-defined]  # a generator: counts the GET
        super().close()


class _Ranges(io.RawIOBase):
    """A seekable raw file over range GETs, its tail fetched first (size and footer at once)."""

    def __init__(self, path: RemotePath) -> None:
        self.path = path
        self._tail, self._size = remote.get_tail(path, TAIL_BYTES)
        self._tail_start = self._size - len(self._tail)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise DsbenchError(f"seek before the start of the object ({base + offset})",
                               path=self.path)
        self._pos = base + offset
        return self._pos

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        end = min(self._size, self._pos + len(b))
        if end <= self._pos:
            return 0
        if self._pos >= self._tail_start:
            data = self._tail[self._pos - self._tail_start:end - self._tail_start]
        else:
            data = remote.get(self.path, self._pos, end)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)


def evict(path: Path) -> None:
    """Drop a local file's pages (or every file's under a directory) from the page cache
    (POSIX_FADV_DONTNEED), so that the next read goes to the device. Dirty pages cannot be
    dropped, so the file is flushed first; a file that cannot be opened, or a filesystem
    without the advice, is left as it is."""
    if path.is_dir():
        for d, _, names in os.walk(path):
            for name in names:
                evict(Path(d) / name)
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)
