"""Format adapters: one module per on-disk layout, a plain registry, and layout detection.

In: a path. Out: an `Export` (base.py) that yields raw samples (`RawSample`: encoded bytes and
fields as stored) for a worker's share, and surveys itself for `inspect` (survey.py). Reads
exports whoever wrote them. May import: the foundation modules only.
"""

from __future__ import annotations

from pathlib import Path

from dsbench.adapters import arrow, files, parquet, wds
from dsbench.adapters.base import Adapter, Export, RawSample
from dsbench.errors import DsbenchError

FORMATS: dict[str, Adapter] = {
    "wds": wds.ADAPTER,
    "files": files.ADAPTER,
    "arrow": arrow.ADAPTER,
    "parquet": parquet.ADAPTER,
}

__all__ = ["FORMATS", "Adapter", "Export", "RawSample", "detect", "get", "open_export"]


def get(layout: str) -> Adapter:
    try:
        return FORMATS[layout]
    except KeyError:
        raise DsbenchError(f"unknown layout {layout!r} (known: {', '.join(FORMATS)})") from None


def detect(path: str | Path) -> Adapter:
    """The adapter whose layout `path` holds; a one-line error when none or the path is unusable."""
    p = Path(path)
    if not p.exists():
        raise DsbenchError("no such file or directory", path=p)
    # Columnar and tar layouts are recognised by their files' magic bytes, so they go first;
    # "files" accepts any directory of per-sample files and is the fallback.
    for name in ("arrow", "parquet", "wds", "files"):
        if FORMATS[name].detect(p):
            return FORMATS[name]
    if p.is_dir() and not any(p.iterdir()):
        raise DsbenchError("empty directory: no export here", path=p)
    raise DsbenchError("unknown layout: not WebDataset shards, per-sample files, Arrow IPC "
                       "or Parquet", path=p)


def open_export(path: str | Path, layout: str | None = None) -> Export:
    """Open an export for reading, detecting its layout unless one is given."""
    adapter = get(layout) if layout else detect(path)
    return adapter.open(Path(path))
