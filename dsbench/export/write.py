"""Writers: one per layout, each writing one unit of an export whole or not at all.

A unit is a shard (`shard_samples` samples: `wds`, `arrow`, `parquet`) or, for `files`, a
directory of `files_per_dir` samples. What each writes:

* `wds`: `shard-000000.tar`, ... with plain ustar headers: integer mtime 0, uid/gid 0, mode
  0644, no user or group names. An integer mtime matters: a float one makes Python's tarfile add
  a PAX header to every member (one more 512-byte block or two per member). Same definition and
  seed, byte-identical shards.
* `files`: directories `000000/`, `000001/`, ... holding `<key>.<ext>` per member.
* `arrow`: one Arrow IPC *file* per shard (`shard-000000.arrow`) in record batches of
  ARROW_BATCH_ROWS rows, uncompressed unless the definition's `compression` says zstd or lz4:
  IPC compression makes every read decompress into fresh memory, and zero-copy memory mapping
  is the reason to choose this layout; compressed is a candidate `advise` tries, for fields
  that compress.
* `parquet`: one file per shard (`shard-000000.parquet`), row groups of up to `shard_samples`
  rows. zstd at pyarrow's default level for every column except a JPEG, PNG (or, copied by a
  re-export, WebP) image column or a FLAC clip column, stored uncompressed: those bytes are
  compressed already (measured on the image column of 1000 synthetic q90 JPEGs: zstd made it
  2 kB larger, 92.5 MB either way, and reading the row group took 42.8 instead of 29.0 ms of
  CPU); raw .npy (and PPM) images and WAV clips are compressed like the rest. Dictionary
  encoding only for integer fields (labels repeat; keys, images and embeddings do not), column
  statistics only for the key and integer fields.

Every file goes through dsbench.atomic, so a unit is either absent or whole; the manifest is
dsbench.export.generate's.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dsbench import atomic
from dsbench.adapters import base
from dsbench.export import libraries
from dsbench.export.encode import jsonl_line, member_exts, sample_members, to_record_batch
from dsbench.export.spec import ExportSpec

SHARD_NAME = "shard-{:06d}{}"
DIR_NAME = "{:06d}"
TAR_MTIME = 0
ARROW_BATCH_ROWS = 256
PARQUET_COMPRESSION = "zstd"

Samples = list[dict[str, Any]]


@dataclass(frozen=True)
class Writer:
    """How one layout lays out a unit: its final paths, and the function that writes them.

    Formats written through their own libraries (export.libraries) may also need a step once
    every unit is whole (`finish(spec, out, units)`: a merged index, the units joined), may
    know their finished units otherwise than by their paths (`rows_done(spec, out)`: the rows
    a Lance dataset holds, which commits each append whole), and may need their units written
    one after another, in order (`sequential`)."""

    layout: str
    unit_paths: Callable[[ExportSpec, Path, int], list[Path]]
    write_unit: Callable[[ExportSpec, Path, int, Samples], None]
    finish: Callable[[ExportSpec, Path, int], None] | None = None
    rows_done: Callable[[ExportSpec, Path], int] | None = None
    sequential: bool = False
    # The file whose presence, once the units' directory is gone, says `finish` ran.
    finished: str | None = None


def _shard(suffix: str) -> Callable[[ExportSpec, Path, int], list[Path]]:
    return lambda spec, out_dir, unit: [out_dir / SHARD_NAME.format(unit, suffix)]


# --- wds --------------------------------------------------------------------------------------

def _write_tar(spec: ExportSpec, out_dir: Path, unit: int, samples: Samples) -> None:
    final = out_dir / SHARD_NAME.format(unit, ".tar")
    with atomic.replacing(final) as tmp, open(tmp, "wb") as f, \
            tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for sample in samples:
            for ext, data in sample_members(spec, sample):
                info = tarfile.TarInfo(f"{sample['__key__']}.{ext}")
                info.size, info.mtime, info.mode = len(data), TAR_MTIME, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tf.addfile(info, io.BytesIO(data))


# --- files ------------------------------------------------------------------------------------

def _sample_count(spec: ExportSpec, out_dir: Path) -> int:
    """Samples in the export being written: the manifest's count (generate's --samples) when
    there is one, else the definition's; the last directory holds the remainder."""
    manifest = base.read_manifest(out_dir) or {}
    count = manifest.get("samples")
    return count if isinstance(count, int) and not isinstance(count, bool) else spec.samples


def total_units(spec: ExportSpec, out_dir: Path) -> int:
    """Units of the export being written (names such as `-of-00004` hold it)."""
    return -(-_sample_count(spec, out_dir) // spec.shard_samples)


def _counted(write: Callable[[ExportSpec, Path, int, int, Samples], None]
             ) -> Callable[[ExportSpec, Path, int, Samples], None]:
    """A library writer, given the export's unit count (its file names hold it)."""
    return lambda spec, out, unit, samples: write(spec, out, unit, total_units(spec, out),
                                                 samples)


def _library(paths: Callable[[ExportSpec, Path, int, int], list[Path]],
             write: Callable[[ExportSpec, Path, int, int, Samples], None]
             ) -> tuple[Callable[[ExportSpec, Path, int], list[Path]],
                        Callable[[ExportSpec, Path, int, Samples], None]]:
    return (lambda spec, out, unit: paths(spec, out, unit, total_units(spec, out)),
            _counted(write))


def _file_paths(spec: ExportSpec, out_dir: Path, unit: int) -> list[Path]:
    exts = member_exts(spec)
    first = unit * spec.files_per_dir
    stop = min(_sample_count(spec, out_dir), first + spec.files_per_dir)
    d = out_dir / DIR_NAME.format(unit)
    return [d / f"{i:08d}.{ext}" for i in range(first, stop) for ext in exts]


def _write_files(spec: ExportSpec, out_dir: Path, unit: int, samples: Samples) -> None:
    d = out_dir / DIR_NAME.format(unit)
    d.mkdir(parents=True, exist_ok=True)
    for sample in samples:
        for ext, data in sample_members(spec, sample):
            atomic.write_bytes(d / f"{sample['__key__']}.{ext}", data)


# --- arrow and parquet ------------------------------------------------------------------------

def _write_arrow(spec: ExportSpec, out_dir: Path, unit: int, samples: Samples) -> None:
    batch = to_record_batch(spec, samples)
    options = pa.ipc.IpcWriteOptions(compression=spec.compression)
    with atomic.replacing(out_dir / SHARD_NAME.format(unit, ".arrow")) as tmp, \
            pa.OSFile(str(tmp), "wb") as sink, \
            pa.ipc.new_file(sink, batch.schema, options=options) as writer:
        for start in range(0, batch.num_rows, ARROW_BATCH_ROWS):
            writer.write_batch(batch.slice(start, ARROW_BATCH_ROWS))


def _leaf_paths(schema: pa.Schema) -> dict[str, list[str]]:
    """Parquet leaf column paths per top-level column (per-column options name leaves)."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    pschema = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema
    leaves: dict[str, list[str]] = {}
    for i in range(len(pschema)):
        path = pschema.column(i).path
        leaves.setdefault(path.split(".")[0], []).append(path)
    return leaves


def parquet_options(spec: ExportSpec, schema: pa.Schema) -> dict[str, Any]:
    """pq.write_table options for an export of `spec` (see the module docstring)."""
    leaves = _leaf_paths(schema)
    # A JPEG, PNG or WebP image and a FLAC clip are compressed already; a WAV clip is not.
    packed = (spec.audio.codec == "flac" if spec.audio else
              spec.kind == "image" and spec.image.codec in ("jpeg", "png", "webp"))
    compression = {leaf: ("NONE" if top == spec.payload and packed else PARQUET_COMPRESSION)
                   for top, paths in leaves.items() for leaf in paths}
    ints = [f.name for f in spec.fields if f.type == "int"]
    return {"row_group_size": spec.shard_samples, "compression": compression,
            "use_dictionary": ints, "write_statistics": ["key", *ints]}


def _write_parquet(spec: ExportSpec, out_dir: Path, unit: int, samples: Samples) -> None:
    batch = to_record_batch(spec, samples)
    with atomic.replacing(out_dir / SHARD_NAME.format(unit, ".parquet")) as tmp:
        pq.write_table(pa.Table.from_batches([batch]), str(tmp),
                       **parquet_options(spec, batch.schema))


# --- JSON Lines -------------------------------------------------------------------------------

def _write_jsonl(spec: ExportSpec, out_dir: Path, unit: int, samples: Samples) -> None:
    with atomic.replacing(out_dir / SHARD_NAME.format(unit, ".jsonl")) as tmp:
        tmp.write_bytes(b"".join(jsonl_line(spec, s) for s in samples))


# How each kind of file the writers make ends when whole: a cut keeps the head, not the end.
_ENDINGS = {".tar": bytes(2 * tarfile.BLOCKSIZE), ".arrow": b"ARROW1", ".parquet": b"PAR1",
            ".jsonl": b"\n"}


def is_whole(path: Path) -> bool:
    """Whether a unit's file, already there, was written whole: a shard ends as its format
    ends (tar's two zero blocks, Arrow's and Parquet's closing magic); a per-sample file is not
    empty. Cheap (one short read), so a re-run checks every unit it would otherwise skip."""
    try:
        size = path.stat().st_size
        ending = _ENDINGS.get(path.suffix)
        if ending is None:
            return size > 0
        if size < len(ending):
            return False
        with open(path, "rb") as f:
            f.seek(size - len(ending))
            return f.read() == ending
    except OSError:
        return False


WRITERS: dict[str, Writer] = {
    "wds": Writer("wds", _shard(".tar"), _write_tar),
    "files": Writer("files", _file_paths, _write_files),
    "arrow": Writer("arrow", _shard(".arrow"), _write_arrow),
    "parquet": Writer("parquet", _shard(".parquet"), _write_parquet),
    "jsonl": Writer("jsonl", _shard(".jsonl"), _write_jsonl),
    "mds": Writer("mds", *_library(libraries.mds_unit_paths, libraries.write_mds),
                  finish=libraries.finish_mds),
    "litdata": Writer("litdata", *_library(libraries.units_path, libraries.write_litdata),
                      finish=libraries.finish_litdata, finished="index.json"),
    "hf": Writer("hf", *_library(libraries.units_path, libraries.write_hf),
                 finish=libraries.finish_hf, finished="state.json"),
    "hf-hub": Writer("hf", *_library(libraries.hub_paths, libraries.write_hf)),
    "lance": Writer("lance", lambda spec, out, unit: [], _counted(libraries.write_lance),
                    rows_done=libraries.lance_rows, sequential=True),
    "tfrecord": Writer("tfrecord", *_library(libraries.tfrecord_paths,
                                             libraries.write_tfrecord)),
}


def writer_of(spec: ExportSpec) -> Writer:
    """The writer of a definition: its layout's, and for `hf` its form's."""
    return WRITERS["hf-hub" if spec.layout == "hf" and spec.form == "hub" else spec.layout]
