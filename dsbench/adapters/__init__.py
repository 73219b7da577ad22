"""Format adapters: one module per on-disk layout, a plain registry, and layout detection.

In: a path. Out: an `Export` (base.py) that yields raw samples (`RawSample`: encoded bytes and
fields as stored) for a worker's share, and surveys itself for `inspect` (survey.py). Reads
exports whoever wrote them. May import: the foundation modules only.

Detection asks the adapters in turn. Formats with a signature at the export's root (an index
or metadata file, a directory of versions) answer first, each by its own `detect()`; then the
files under a directory are sorted by name into the layouts told by file names (`census`), and
a directory holding more than one of those is refused; last, a file's (or a directory's first
files') magic bytes decide. A new format is a module and a registry line.
"""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path

from dsbench.adapters import base, indexed, members
from dsbench.adapters.base import SUFFIXES, Adapter, Export, RawSample
from dsbench.atomic import is_tmp
from dsbench.errors import DsbenchError
from dsbench.storage import files as store
from dsbench.storage.files import Loc

# Layout name -> its module. Imported when first used: a loader worker reading shards need not
# pay for importing pyarrow, and it starts once per worker per round.
FORMATS = {"wds": "dsbench.adapters.wds", "files": "dsbench.adapters.files",
           "arrow": "dsbench.adapters.arrow", "parquet": "dsbench.adapters.parquet",
           "mds": "dsbench.adapters.mds", "litdata": "dsbench.adapters.litdata",
           "hf": "dsbench.adapters.hf", "lance": "dsbench.adapters.lance",
           "tfrecord": "dsbench.adapters.tfrecord", "megatron": "dsbench.adapters.megatron",
           "jsonl": "dsbench.adapters.jsonl"}
# Formats a directory is told by at its root (MDS's and litdata's index.json, `datasets`'
# dataset_info.json and state.json or Parquet footers holding its features, Lance's
# _versions/, Megatron's .idx beside its .bin): asked first, in this order. Each such export
# lists what it does not read.
SIGNED = ("mds", "litdata", "hf", "lance", "megatron")
# Formats told by their data files' names; a directory may hold only one of them.
NAMED = ("wds", "files", "arrow", "parquet", "tfrecord", "jsonl")
# The order in which magic bytes are tried when names do not tell.
BY_MAGIC = ("arrow", "parquet", "tfrecord", "wds", "files")

__all__ = ["FORMATS", "NAMES", "Adapter", "Export", "RawSample", "census", "detect", "get",
           "open_export"]


def get(layout: str) -> Adapter:
    if layout not in FORMATS:
        raise DsbenchError(f"unknown layout {layout!r} (known: {', '.join(FORMATS)})")
    adapter: Adapter = importlib.import_module(FORMATS[layout]).ADAPTER
    return adapter


# What each named layout's files are called in messages (one, several).
NAMES = {"wds": ("WebDataset shard", "WebDataset shards"),
         "arrow": ("Arrow IPC file", "Arrow IPC files"),
         "parquet": ("Parquet file", "Parquet files"),
         "tfrecord": ("TFRecord file", "TFRecord files"),
         "files": ("per-sample image file", "per-sample image files"),
         "jsonl": ("JSON Lines file", "JSON Lines files")}
_OTHER = ""  # a field member of a per-sample layout, or a file no layout reads (README.md)


def _layout_of(rel: str, images: dict[str, str]) -> str:
    low = rel.lower()
    for layout in ("wds", "arrow", "parquet", "tfrecord", "jsonl"):
        if low.endswith(SUFFIXES[layout]):
            return layout
    parsed = members.split_name(rel)
    if parsed and members.pick_image([parsed[1]], images):
        return "files"
    return _OTHER


def census(root: Loc, unread: list[str] | None = None) -> dict[str, list[str]]:
    """The files under a directory (relative paths) by the layout they belong to, by name.

    `unread` receives what no layout can read, as 'path (why)': entries that are not regular
    files, and hidden ('.', '_') files or empty directories named like data (a `_shard.tar`
    copy would otherwise go unmentioned); dsbench's own manifest and temporaries are not."""
    images = members.image_exts(root)
    out: dict[str, list[str]] = {}
    skipped: list[tuple[str, str]] = []
    for rel, _ in base.walk(root, skipped):
        out.setdefault(_layout_of(rel, images), []).append(rel)
    if unread is not None:
        for rel, why in skipped:
            name = rel.rstrip("/").rpartition("/")[2]
            if why in (store.HIDDEN, store.EMPTY_DIR) and (
                    is_tmp(Path(name)) or _layout_of(name.lstrip("._"), images) == _OTHER):
                continue
            unread.append(f"{rel} ({why})")
    return out


def _listing(files: list[str], layout: str) -> str:
    shown = ", ".join(files[:2]) + (", ..." if len(files) > 2 else "")
    return f"{len(files)} {NAMES[layout][len(files) > 1]} ({shown})"


def detect(path: str | Loc) -> Adapter:
    """The adapter whose layout `path` holds; a one-line error when none, when the directory
    mixes layouts (reading one would silently leave the rest out), or the path is unusable."""
    p = store.named(path)
    if not store.exists(p):
        raise DsbenchError("no objects under this prefix" if store.is_remote(p) else
                           "no such file or directory", path=p)
    for name in SIGNED:
        if get(name).detect(p):
            return get(name)
    if store.is_dir(p):
        found = census(p)
        layouts = [name for name in NAMED if name in found]
        if len(layouts) > 1:
            parts = [_listing(found[name], name) for name in layouts]
            raise DsbenchError(f"mixed layouts: {'; '.join(parts)}: read one of them with "
                               f"--layout {' or '.join(layouts)}", path=p)
        if layouts:
            return get(layouts[0])
    # A file, or a directory whose data files have no telling name: their magic bytes decide.
    for name in BY_MAGIC:
        if get(name).detect(p):
            return get(name)
    if store.is_dir(p) and next(store.walk(p), None) is None:
        raise DsbenchError("empty directory: no export here", path=p)
    raise DsbenchError(f"unknown layout: {_found(p)}, not one of {', '.join(FORMATS)} (the "
                       "signatures looked for are in docs/formats.md)", path=p)


def _found(p: Loc) -> str:
    """What a path that no adapter claims holds, for the one line that says so."""
    if not store.is_dir(p):
        head = b""
        try:
            with store.open_stream(p) as f:
                head = f.read(8)
        except (OSError, DsbenchError):
            pass
        return f"a file that starts {head!r}"
    names = [rel for rel, _ in itertools.islice(store.walk(p), 4)]
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    index = f"; its {indexed.INDEX} lists neither MDS shards nor litdata chunks" if \
        indexed.INDEX in names else ""
    return f"{'files' if len(names) > 1 else 'a file'} such as {shown}{index}"


def open_export(path: str | Loc, layout: str | None = None,
                image_field: str | None = None, seq_len: int | None = None) -> Export:
    """Open an export for reading, detecting its layout unless one is given; `image_field`
    names the column (or member extension) holding the image where the format's own schema
    leaves a choice, `seq_len` the block a stream of token ids is cut into (Adapter.open).

    The export's `ignored` lists the files under it that its layout does not read, so that
    what was left out is said, never silent.
    """
    p = store.named(path)
    adapter = get(layout) if layout else detect(p)
    export = adapter.open(p, image_field=image_field, seq_len=seq_len)
    if store.is_dir(p) and adapter.name in NAMED:
        ignored: list[str] = []
        found = census(p, ignored)
        ignored += [f for name, names in found.items() if name != adapter.name
                    and not (adapter.name == "files" and name == _OTHER) for f in names]
        if adapter.name == "files":
            ignored += [f for f in found.get(_OTHER, []) if members.split_name(f) is None]
        export.ignored = sorted(ignored)
    return export
