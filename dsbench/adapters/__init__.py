"""Format adapters: one module per on-disk layout, a plain registry, and layout detection.

In: a path. Out: an `Export` (base.py) that yields raw samples (`RawSample`: encoded bytes and
fields as stored) for a worker's share, and surveys itself for `inspect` (survey.py). Reads
exports whoever wrote them. May import: the foundation modules only.
"""

from __future__ import annotations

from pathlib import Path

from dsbench.adapters import arrow, base, files, members, parquet, wds
from dsbench.adapters.base import Adapter, Export, RawSample
from dsbench.errors import DsbenchError

FORMATS: dict[str, Adapter] = {
    "wds": wds.ADAPTER,
    "files": files.ADAPTER,
    "arrow": arrow.ADAPTER,
    "parquet": parquet.ADAPTER,
}

__all__ = ["FORMATS", "NAMES", "Adapter", "Export", "RawSample", "census", "detect", "get",
           "open_export"]


def get(layout: str) -> Adapter:
    try:
        return FORMATS[layout]
    except KeyError:
        raise DsbenchError(f"unknown layout {layout!r} (known: {', '.join(FORMATS)})") from None


# What each layout's files are called in messages.
NAMES = {"wds": "WebDataset shards", "arrow": "Arrow IPC files", "parquet": "Parquet files",
         "files": "per-sample image files"}
_OTHER = ""  # a field member of a per-sample layout, or a file no layout reads (README.md)


def _layout_of(rel: str, images: dict[str, str]) -> str:
    low = rel.lower()
    if wds.is_shard(rel):
        return "wds"
    if low.endswith(arrow.EXTS):
        return "arrow"
    if low.endswith(parquet.EXTS):
        return "parquet"
    parsed = members.split_name(rel)
    if parsed and members.pick_image([parsed[1]], images):
        return "files"
    return _OTHER


def census(root: Path) -> dict[str, list[str]]:
    """The files under a directory (relative paths) by the layout they belong to, by name."""
    images = members.image_exts(root)
    out: dict[str, list[str]] = {}
    for rel, _ in base.walk(root):
        out.setdefault(_layout_of(rel, images), []).append(rel)
    return out


def _listing(files: list[str], what: str) -> str:
    shown = ", ".join(files[:2]) + (", ..." if len(files) > 2 else "")
    return f"{len(files)} {what} ({shown})"


def detect(path: str | Path) -> Adapter:
    """The adapter whose layout `path` holds; a one-line error when none, when the directory
    mixes layouts (reading one would silently leave the rest out), or the path is unusable."""
    p = Path(path)
    if not p.exists():
        raise DsbenchError("no such file or directory", path=p)
    if p.is_dir():
        found = census(p)
        layouts = [name for name in FORMATS if name in found]
        if len(layouts) > 1:
            parts = [_listing(found[name], NAMES[name]) for name in layouts]
            raise DsbenchError(f"mixed layouts: {'; '.join(parts)}: read one of them with "
                               f"--layout {' or '.join(layouts)}", path=p)
        if layouts:
            return FORMATS[layouts[0]]
    # A file, or a directory whose data files have no telling name: their magic bytes decide.
    for name in ("arrow", "parquet", "wds", "files"):
        if FORMATS[name].detect(p):
            return FORMATS[name]
    if p.is_dir() and not any(p.iterdir()):
        raise DsbenchError("empty directory: no export here", path=p)
    raise DsbenchError("unknown layout: not WebDataset shards, per-sample files, Arrow IPC "
                       "or Parquet", path=p)


def open_export(path: str | Path, layout: str | None = None) -> Export:
    """Open an export for reading, detecting its layout unless one is given.

    The export's `ignored` lists the files under it that its layout does not read, so that
    what was left out is said, never silent.
    """
    adapter = get(layout) if layout else detect(path)
    p = Path(path)
    export = adapter.open(p)
    if p.is_dir():
        found = census(p)
        ignored = [f for name, files in found.items() if name != adapter.name
                   and not (adapter.name == "files" and name == _OTHER) for f in files]
        if adapter.name == "files":
            ignored += [f for f in found.get(_OTHER, []) if members.split_name(f) is None]
        export.ignored = sorted(ignored)
    return export
