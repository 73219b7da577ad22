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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_MARK = ".tmp"


def tmp_path(final: Path) -> Path:
    """A hidden sibling of `final`, unique to this process."""
    return final.with_name(f".{final.name}{TMP_MARK}{os.getpid()}")


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
