"""Files that appear whole or not at all: write under a hidden temporary name, then rename.

Every file dsbench writes (shards, per-sample files, manifests, result documents, the demo's
report directory) goes through `replacing`: the caller writes the temporary path it is given,
and only a write that finished is renamed onto the final name, which is atomic on POSIX. An
interrupted or failed write removes its temporary, so readers never see a partial file and a
re-run finds no litter. Temporaries start with '.', which every reader of an export ignores.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dsbench.errors import DsbenchError

TMP_MARK = ".tmp"


def tmp_path(final: Path) -> Path:
    """A hidden sibling of `final`, unique to this process."""
    return final.with_name(f".{final.name}{TMP_MARK}{os.getpid()}")


def final_of(tmp: Path) -> Path:
    """The final path a temporary (`tmp_path`'s) was written for."""
    return tmp.with_name(tmp.name[1:].split(TMP_MARK)[0])


def is_tmp(path: Path) -> bool:
    """Whether `path` is a temporary that `replacing` made (left behind by a killed writer)."""
    return path.name.startswith(".") and TMP_MARK in path.name


@contextmanager
def replacing(final: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `final`, on failure it is removed.

    Works for a file or a whole directory; a directory already at `final` is replaced whole.
    """
    tmp = tmp_path(final)
    try:
        yield tmp
        if tmp.is_dir() and final.is_dir():
            old = final.with_name(f".{final.name}.old{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_bytes(final: Path, data: bytes, fsync: bool = False) -> Path:
    """Write `data` to `final` atomically (fsync first when the file must survive a crash)."""
    with replacing(final) as tmp, open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return final


def write_text(final: Path, text: str, fsync: bool = False) -> Path:
    return write_bytes(final, text.encode("utf-8"), fsync)


# --- a command's own files: what it reads (definitions, documents) and writes (--json OUT) ------

def check_input(path: Path) -> None:
    """Refuse to read a file a command takes (a definition, a document) that is there but is not
    a regular file: reading a FIFO would block forever, a directory cannot be read."""
    if path.exists() and not path.is_file():
        raise DsbenchError("not a regular file", path=path)


def _target(path: Path) -> tuple[Path, os.stat_result | None]:
    """What writing `path` writes: a symbolic link's target (the link stays a link), and that
    target's status, None when nothing is there yet."""
    target = Path(os.path.realpath(path))
    try:
        return target, os.stat(target)
    except FileNotFoundError:
        return target, None
    except OSError as exc:
        raise DsbenchError(f"cannot write here: {exc.strerror or exc}", path=path) from None


def _is_stream(st: os.stat_result | None) -> bool:
    # A character device (/dev/null, a terminal) or a FIFO takes bytes in place: replacing it
    # with a regular file would destroy the node and leave its reader waiting.
    return st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode))


def is_stream(path: Path) -> bool:
    """Whether `path` (or its link's target) is a character device or FIFO, written in place."""
    return _is_stream(_target(path)[1])


def check_output(path: Path) -> None:
    """Refuse, before any work, an output path that cannot take a whole file: a directory, a
    block device, a socket, a missing or read-only directory. A regular file there is replaced
    atomically; a character device or FIFO is written in place."""
    target, st = _target(path)
    if st is None:
        parent = target.parent
        if not parent.is_dir():
            raise DsbenchError("cannot write: no such directory", path=path)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise DsbenchError("cannot write: the directory is not writable", path=path)
    elif stat.S_ISDIR(st.st_mode):
        raise DsbenchError("cannot write: is a directory", path=path)
    elif stat.S_ISREG(st.st_mode):
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise DsbenchError("cannot write: the directory is not writable", path=path)
    elif not _is_stream(st):
        raise DsbenchError("cannot write: not a regular file, character device or FIFO",
                           path=path)


def write_output(path: Path, data: bytes, fsync: bool = False) -> Path:
    """A command's output: a regular file (or a link's target) replaced whole, a character
    device or FIFO written in place. OSError (a full device, say) is the caller's to word."""
    check_output(path)
    target, st = _target(path)
    if _is_stream(st):
        with open(target, "wb") as f:
            f.write(data)
        return path
    write_bytes(target, data, fsync)
    return path
