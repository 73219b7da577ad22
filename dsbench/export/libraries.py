"""Writers through each format's own library: MDS, litdata, Hugging Face, Lance and TFRecord.

A unit (`shard_samples` samples) is written by the library whole, under a temporary name
renamed when done (dsbench.atomic), so that a re-run finds it whole or absent; what a format
needs beyond its units is made once every unit is whole (`finish`):

* `mds`: each unit is an MDS dataset of its own in `part-0000K/` (MDSWriter, `compression`
  from the definition); `finish` merges their indexes into the root `index.json` with
  streaming's `merge_index`, as MDS exports written in parallel are.
* `litdata`: each unit is written by litdata's BinaryWriter (what `optimize()` runs in its
  workers) into `.units/0000K/`; `finish` joins them with litdata's `merge_datasets` (chunks
  renumbered) and removes `.units/`.
* `hf` (`form = "save_to_disk"`, the default): each unit a `datasets.Dataset` saved in
  `.units/0000K/`; `finish` concatenates them and saves the whole with one shard per unit
  (`data-0000K-of-0000N.arrow`, state.json, dataset_info.json) and removes `.units/`.
  `form = "hub"`: the Hub's layout, each unit `data/train-0000K-of-0000N.parquet` written by
  `Dataset.to_parquet` (its footer holds the features).
* `lance`: each unit appended to the dataset (`lance.write_dataset(mode="append")`), in order:
  Lance commits each append whole, and the rows already there say which units are done.
* `tfrecord`: each unit `train-0000K-of-0000N.tfrecord` of tf.train.Example records written by
  the tfrecord package (`image/encoded`, `image/format`, `key`, and one feature per field).

Images stay the bytes they were: a JPEG goes into an MDS `jpeg` column as a file-backed PIL
image (the library then stores the file's bytes; the file is an anonymous memory file, never
on disk), into litdata as `Image(bytes=...)`, into `datasets` as an Image feature's bytes. A
PNG, WebP or raw image goes into MDS as a `bytes` column, into litdata as bytes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dsbench import atomic
from dsbench.errors import DsbenchError
from dsbench.export.payloads import AUDIO_NAME, TEXT_NAME, TOKENS_NAME
from dsbench.export.spec import ExportSpec, FieldSpec

Samples = list[dict[str, Any]]
UNITS = ".units"  # where litdata's and save_to_disk's units wait for `finish`
BOX_KEYS = ("x", "y", "w", "h", "cls")
# MDS stores sample offsets as uint32: a shard holds less than 4 GiB (a larger unit is split).
MDS_SHARD_LIMIT = (1 << 32) - 1


def require(module: str, layout: str) -> Any:
    import importlib

    try:
        lib = importlib.import_module(module)
    except ImportError as exc:
        raise DsbenchError(f"writing a {layout} export needs {module} ({exc}): pip install "
                           f"'dsbench[{layout}]'") from None
    if module == "datasets":
        lib.disable_progress_bars()  # generate draws its own progress
    return lib


def _name(unit: int, total: int, prefix: str, suffix: str) -> str:
    return f"{prefix}-{unit:05d}-of-{total:05d}{suffix}"


def _boxes(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (int(b[k]) if k == "cls" else float(b[k])) for k in BOX_KEYS} for b in value]


@contextlib.contextmanager
def _jpeg_file(data: bytes) -> Iterator[Any]:
    """A PIL image backed by an anonymous memory file holding `data`: libraries that keep a
    file-backed JPEG's own bytes (MDS's `jpeg` encoding) store them unchanged."""
    from PIL import Image

    fd = os.memfd_create("dsbench-jpeg")
    try:
        os.write(fd, data)
        with Image.open(f"/proc/self/fd/{fd}") as im:
            yield im
    finally:
        os.close(fd)


# ---- MDS -------------------------------------------------------------------------------------

def _mds_columns(spec: ExportSpec) -> dict[str, str]:
    # A clip is a bytes column: MDS has no audio encoding.
    columns = ({"key": "str", TOKENS_NAME: f"ndarray:{spec.tokens.dtype}"} if spec.tokens else
               {"key": "str", AUDIO_NAME: "bytes"} if spec.audio else
               {"key": "str", TEXT_NAME: "str"} if spec.text else
               {"key": "str", "image": "jpeg" if spec.image.codec == "jpeg" else "bytes"})
    for f in spec.fields:
        columns[f.name] = {"int": "int", "string": "str", "boxes": "json"}.get(
            f.type, "json" if f.encoding == "json" else f"ndarray:float32:{f.dim}")
    return columns


def _mds_value(f: FieldSpec, value: Any) -> Any:
    if f.type == "embedding":
        arr = np.asarray(value, np.float32)
        return arr.tolist() if f.encoding == "json" else arr
    return _boxes(value) if f.type == "boxes" else value


def mds_unit_paths(spec: ExportSpec, out: Path, unit: int, total: int) -> list[Path]:
    return [out / f"part-{unit:05d}" / "index.json"]


def write_mds(spec: ExportSpec, out: Path, unit: int, total: int, samples: Samples) -> None:
    streaming = require("streaming", "mds")
    columns = _mds_columns(spec)
    with atomic.replacing(out / f"part-{unit:05d}") as tmp, \
            streaming.MDSWriter(out=str(tmp), columns=columns, compression=spec.compression,
                                size_limit=MDS_SHARD_LIMIT, progress_bar=False) as writer:
        for s in samples:
            row = {"key": s["__key__"]}
            row.update({f.name: _mds_value(f, s[f.name]) for f in spec.fields})
            if spec.kind != "image":
                writer.write({**row, spec.payload: s[spec.payload]})
            elif columns["image"] == "jpeg":
                with _jpeg_file(s["image"]) as im:
                    writer.write({**row, "image": im})
            else:
                writer.write({**row, "image": s["image"]})


def finish_mds(spec: ExportSpec, out: Path, total: int) -> None:
    from streaming.base.util import merge_index

    (out / "index.json").unlink(missing_ok=True)  # an interrupted merge's, made again
    logging.disable(logging.WARNING)  # it logs the temporary directory it uses, on the root logger
    try:
        merge_index([str(out / f"part-{u:05d}" / "index.json") for u in range(total)],
                    str(out))
    finally:
        logging.disable(logging.NOTSET)


# ---- litdata ---------------------------------------------------------------------------------

def _lit_row(spec: ExportSpec, s: dict[str, Any]) -> dict[str, Any]:
    litdata = require("litdata", "litdata")
    # Token ids are a NumPy leaf (litdata's numpy serializer, the dtype in its header); a clip
    # is a bytes leaf, which litdata stores with the other plain values as Arrow rows.
    if spec.kind != "image":
        row: dict[str, Any] = {"key": s["__key__"], spec.payload: s[spec.payload]}
    else:
        image = (litdata.Image(bytes=s["image"]) if spec.image.codec in ("jpeg", "png", "webp")
                 else s["image"])
        row = {"key": s["__key__"], "image": image}
    for f in spec.fields:
        row[f.name] = np.asarray(s[f.name], np.float32) if f.type == "embedding" else s[f.name]
    return row


def units_path(spec: ExportSpec, out: Path, unit: int, total: int) -> list[Path]:
    return [out / UNITS / f"{unit:05d}" / ("index.json" if spec.layout == "litdata"
                                            else "state.json")]


def write_litdata(spec: ExportSpec, out: Path, unit: int, total: int, samples: Samples) -> None:
    require("litdata", "litdata")
    from litdata.streaming.writer import BinaryWriter

    (out / UNITS).mkdir(exist_ok=True)
    with atomic.replacing(out / UNITS / f"{unit:05d}") as tmp:
        tmp.mkdir()
        if spec.tokens and spec.tokens.stream:
            # A TokensLoader chunk: its documents' ids end to end, the chunk's size counted in
            # ids (litdata's writer counts an array item as its length).
            from litdata.streaming.item_loader import TokensLoader

            # An empty document lays nothing in the stream (and litdata's writer takes a
            # chunk's first item's length for the chunk's: an empty one would make it null).
            ids = [x for x in (np.asarray(s[TOKENS_NAME], spec.tokens.dtype) for s in samples)
                   if len(x)]
            if not ids:
                raise DsbenchError(f"a token stream's chunk of {len(samples)} documents would "
                                   "hold no id: each is empty", path=out)
            writer = BinaryWriter(str(tmp), chunk_size=max(1, sum(len(x) for x in ids)),
                                  item_loader=TokensLoader())
            rows: Any = ids
        else:
            writer = BinaryWriter(str(tmp), chunk_size=max(1, len(samples)),
                                  compression=spec.compression)
            rows = (_lit_row(spec, s) for s in samples)
        for i, row in enumerate(rows):
            writer.add_item(i, row)
        writer.done()
        writer.merge(1)


def finish_litdata(spec: ExportSpec, out: Path, total: int) -> None:
    from litdata import merge_datasets

    units = [str(out / UNITS / f"{u:05d}") for u in range(total)]
    for p in out.glob("chunk-*.bin"):  # an interrupted merge's, made again
        p.unlink()
    (out / "index.json").unlink(missing_ok=True)
    if total == 1:
        for p in Path(units[0]).iterdir():
            os.replace(p, out / p.name)
    else:
        with contextlib.redirect_stderr(io.StringIO()):  # its progress bar; generate has one
            merge_datasets(units, str(out), max_workers=1)
    shutil.rmtree(out / UNITS)


# ---- Hugging Face datasets -------------------------------------------------------------------

MAX_LABELS = 100_000


def hf_features(spec: ExportSpec) -> Any:
    datasets = require("datasets", "hf")
    box = {k: datasets.Value("int32" if k == "cls" else "float32") for k in BOX_KEYS}
    features = {"key": datasets.Value("string")} | (
        {TOKENS_NAME: datasets.Sequence(datasets.Value(spec.tokens.dtype))} if spec.tokens
        else {AUDIO_NAME: datasets.Audio()} if spec.audio
        else {TEXT_NAME: datasets.Value("string")} if spec.text else {"image": datasets.Image()})
    for f in spec.fields:
        # An int of a few classes is a label; of more, an id (a document's): a ClassLabel would
        # store every class's name in each shard's schema (1e6 names: 10 MB a shard).
        label = datasets.ClassLabel(num_classes=f.classes) if f.classes <= MAX_LABELS else \
            datasets.Value("int64")
        features[f.name] = {
            "int": label, "string": datasets.Value("string"),
            "embedding": datasets.Sequence(datasets.Value("float32"), length=f.dim),
            "boxes": datasets.Sequence(box)}[f.type]
    return datasets.Features(features)


def _hf_dataset(spec: ExportSpec, samples: Samples) -> Any:
    datasets = require("datasets", "hf")
    columns: dict[str, list[Any]] = {"key": [s["__key__"] for s in samples]}
    if spec.tokens or spec.text:
        columns[spec.payload] = [s[spec.payload] for s in samples]
    else:
        # The encoded file as it is: `datasets` stores an Image's or Audio's bytes without
        # decoding them. An Audio keeps its file's name (the codec is in its extension).
        ext = spec.audio.ext if spec.audio else None
        columns[spec.payload] = [{"bytes": s[spec.payload],
                                  "path": f"{s['__key__']}.{ext}" if ext else None}
                                 for s in samples]
    for f in spec.fields:
        values = [s[f.name] for s in samples]
        if f.type == "boxes":
            values = [{k: [b[k] for b in _boxes(v)] for k in BOX_KEYS} for v in values]
        columns[f.name] = values
    return datasets.Dataset.from_dict(columns, features=hf_features(spec))


def hub_paths(spec: ExportSpec, out: Path, unit: int, total: int) -> list[Path]:
    return [out / "data" / _name(unit, total, "train", ".parquet")]


def write_hf(spec: ExportSpec, out: Path, unit: int, total: int, samples: Samples) -> None:
    ds = _hf_dataset(spec, samples)
    if spec.form == "hub":
        (out / "data").mkdir(exist_ok=True)
        with atomic.replacing(hub_paths(spec, out, unit, total)[0]) as tmp:
            ds.to_parquet(str(tmp))
        return
    (out / UNITS).mkdir(exist_ok=True)
    with atomic.replacing(out / UNITS / f"{unit:05d}") as tmp:
        ds.save_to_disk(str(tmp))


def finish_hf(spec: ExportSpec, out: Path, total: int) -> None:
    if spec.form == "hub":
        return
    datasets = require("datasets", "hf")
    parts = [datasets.load_from_disk(str(out / UNITS / f"{u:05d}")) for u in range(total)]
    whole = datasets.concatenate_datasets(parts)
    whole.save_to_disk(str(out), num_shards=total)
    shutil.rmtree(out / UNITS)


# ---- Lance -----------------------------------------------------------------------------------

def lance_rows(spec: ExportSpec, out: Path) -> int:
    """Rows already appended: Lance commits each append whole, so they end a unit."""
    if not (out / "_versions").is_dir():
        return 0
    lance = require("lance", "lance")
    return int(lance.dataset(str(out)).count_rows())


def write_lance(spec: ExportSpec, out: Path, unit: int, total: int, samples: Samples) -> None:
    import pyarrow as pa

    from dsbench.export.encode import to_record_batch

    lance = require("lance", "lance")
    table = pa.Table.from_batches([to_record_batch(spec, samples)])
    lance.write_dataset(table, str(out), mode="append" if unit else "create",
                        max_rows_per_file=spec.shard_samples)


# ---- TFRecord --------------------------------------------------------------------------------

def tfrecord_paths(spec: ExportSpec, out: Path, unit: int, total: int) -> list[Path]:
    return [out / _name(unit, total, "train", ".tfrecord")]


def _tf_example(spec: ExportSpec, s: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    ex: dict[str, tuple[Any, str]] = (
        {AUDIO_NAME: (s[AUDIO_NAME], "byte")} if spec.audio else
        {TEXT_NAME: (s[TEXT_NAME].encode("utf-8"), "byte")} if spec.text else
        {"image/encoded": (s["image"], "byte"),
         "image/format": (spec.image.codec.encode(), "byte")}) | {
        "key": (s["__key__"].encode(), "byte")}
    for f in spec.fields:
        v = s[f.name]
        if f.type == "int":
            ex[f.name] = (int(v), "int")
        elif f.type == "string":
            ex[f.name] = (v.encode(), "byte")
        else:
            ex[f.name] = (np.asarray(v, np.float32).tolist(), "float")
    return ex


def write_tfrecord(spec: ExportSpec, out: Path, unit: int, total: int,
                   samples: Samples) -> None:
    tfrecord = require("tfrecord", "tfrecord")
    from tfrecord import example_pb2

    crc = tfrecord.TFRecordWriter.masked_crc
    with atomic.replacing(tfrecord_paths(spec, out, unit, total)[0]) as tmp:
        writer = tfrecord.TFRecordWriter(str(tmp))
        try:
            for s in samples:
                # The library's Example, serialised deterministically: its own write() leaves
                # the feature map's order to protobuf, which differs from process to process,
                # so the same samples made different bytes in every run.
                proto = example_pb2.Example.FromString(
                    tfrecord.TFRecordWriter.serialize_tf_example(_tf_example(spec, s)))
                record = proto.SerializeToString(deterministic=True)
                length = struct.pack("<Q", len(record))
                writer.file.write(length + crc(length) + record + crc(record))
        finally:
            writer.close()
