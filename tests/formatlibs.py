"""Exports written by each format's own library, as its users write them, and what each library
reads back: the test data of the formats dsbench reads (never a hand-written imitation).

Every export holds SAMPLES samples: a small JPEG (or the PIL image it was made from, where the
library encodes it itself), a label, a caption and an 8-d float32 embedding, in several shards
so that workers have units to split. `library_samples` reads an export back through the
library, in its own order, as (label, HWC uint8 pixels) per sample.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from dsbench import procs

SAMPLES = 120
PER_SHARD = 40
DIM = 8
FORMATS = ("mds", "mds-zstd", "litdata", "hf", "hf-hub", "lance", "tfrecord")
# The layout dsbench detects for each, and the library it names with --backend native.
LAYOUT = {"mds": "mds", "mds-zstd": "mds", "litdata": "litdata", "hf": "hf", "hf-hub": "hf",
          "lance": "lance", "tfrecord": "tfrecord"}
LIBRARY = {"mds": "mosaicml-streaming", "litdata": "litdata", "hf": "datasets",
           "lance": "pylance", "tfrecord": "tfrecord"}


def pixels(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    return rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)


def jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels(i)).save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def label(i: int) -> int:
    return (7 * i) % 10


def caption(i: int) -> str:
    return f"sample {i} of {SAMPLES}"


def embedding(i: int) -> np.ndarray:
    return (np.arange(DIM, dtype=np.float32) + i) / 10


def jpeg_files(root: Path) -> list[Path]:
    """The JPEGs as files, as an ImageNet-style source tree holds them."""
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(SAMPLES):
        path = root / f"{i:05d}.jpg"
        path.write_bytes(jpeg(i))
        out.append(path)
    return out


def write_mds(out: Path, compression: str | None = None) -> Path:
    """MDSWriter with a `jpeg` column given in-memory PIL images (MDS encodes them itself)."""
    from streaming import MDSWriter

    columns = {"image": "jpeg", "label": "int", "caption": "str",
               "embedding": f"ndarray:float32:{DIM}"}
    size = len(jpeg(0)) * PER_SHARD
    with MDSWriter(out=str(out), columns=columns, compression=compression, size_limit=size,
                   progress_bar=False) as w:
        for i in range(SAMPLES):
            w.write({"image": Image.fromarray(pixels(i)), "label": label(i),
                     "caption": caption(i), "embedding": embedding(i)})
    return out


def _litdata_item(path: str) -> dict[str, Any]:
    i = int(Path(path).stem)
    return {"image": Image.open(path), "label": label(i), "caption": caption(i),
            "embedding": embedding(i)}


def litdata_caches(cache: Path) -> contextlib.AbstractContextManager[None]:
    """optimize() makes its chunk and download caches (left empty when the output is local) in
    the temp dir (/tmp/chunks, /tmp/data), or where these variables say: under `cache`."""
    return procs.environ({"DATA_OPTIMIZER_CACHE_FOLDER": str(cache / "chunks"),
                          "DATA_OPTIMIZER_DATA_CACHE_FOLDER": str(cache / "data")})


def write_litdata(out: Path, sources: Path) -> Path:
    """litdata.optimize over JPEG files opened with PIL (litdata stores the files' bytes)."""
    import litdata

    files = [str(p) for p in jpeg_files(sources)]
    with litdata_caches(out.parent / f"{out.name}-cache"):
        litdata.optimize(fn=_litdata_item, inputs=files, output_dir=str(out),
                         chunk_size=PER_SHARD, num_workers=1, mode="overwrite",
                         start_method="fork")
    return out


def _hf_dataset() -> Any:
    import datasets

    features = datasets.Features({
        "image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10),
        "caption": datasets.Value("string"),
        "embedding": datasets.Sequence(datasets.Value("float32"), length=DIM)})
    return datasets.Dataset.from_dict(
        {"image": [{"bytes": jpeg(i), "path": None} for i in range(SAMPLES)],
         "label": [label(i) for i in range(SAMPLES)],
         "caption": [caption(i) for i in range(SAMPLES)],
         "embedding": [embedding(i) for i in range(SAMPLES)]}, features=features)


def write_hf(out: Path) -> Path:
    """A DatasetDict saved with save_to_disk: train (3 shards) and a small test split."""
    import datasets

    ds = _hf_dataset()
    datasets.DatasetDict({"train": ds, "test": ds.select(range(10))}).save_to_disk(
        str(out), num_shards={"train": SAMPLES // PER_SHARD, "test": 1})
    return out


def write_hf_hub(out: Path) -> Path:
    return hub_parquet(_hf_dataset(), out, SAMPLES // PER_SHARD)


def hub_parquet(ds: Any, out: Path, n: int) -> Path:
    """The Hub's Parquet layout, data/train-0000K-of-0000N.parquet, as push_to_hub writes it
    (the features in each file's schema metadata): `ds` in `n` contiguous shards."""
    (out / "data").mkdir(parents=True)
    for k in range(n):
        ds.shard(n, k, contiguous=True).to_parquet(
            str(out / "data" / f"train-{k:05d}-of-{n:05d}.parquet"))
    return out


def write_lance(out: Path) -> Path:
    import lance
    import pyarrow as pa

    table = pa.table({
        "image": pa.array([jpeg(i) for i in range(SAMPLES)], pa.binary()),
        "label": pa.array([label(i) for i in range(SAMPLES)], pa.int64()),
        "caption": [caption(i) for i in range(SAMPLES)],
        "embedding": pa.FixedSizeListArray.from_arrays(
            pa.array(np.concatenate([embedding(i) for i in range(SAMPLES)])), DIM)})
    lance.write_dataset(table, str(out), max_rows_per_file=PER_SHARD)
    return out


def write_tfrecord(out: Path) -> Path:
    """ImageNet-style tf.train.Example records (image/encoded, image/class/label), in files
    named as TensorFlow's converters name them."""
    import tfrecord

    out.mkdir(parents=True)
    n = SAMPLES // PER_SHARD
    for k in range(n):
        writer = tfrecord.TFRecordWriter(str(out / f"train-{k:05d}-of-{n:05d}"))
        for i in range(k * PER_SHARD, (k + 1) * PER_SHARD):
            writer.write({"image/encoded": (jpeg(i), "byte"), "image/format": (b"JPEG", "byte"),
                          "image/class/label": (label(i), "int"),
                          "image/caption": (caption(i).encode(), "byte"),
                          "embedding": (embedding(i).tolist(), "float")})
        writer.close()
    return out


def write(fmt: str, root: Path) -> Path:
    out = root / fmt
    if fmt == "mds":
        return write_mds(out)
    if fmt == "mds-zstd":
        return write_mds(out, "zstd")
    if fmt == "litdata":
        return write_litdata(out, root / "litdata-sources")
    return {"hf": write_hf, "hf-hub": write_hf_hub, "lance": write_lance,
            "tfrecord": write_tfrecord, "wds": write_wds}[fmt](out)


def write_wds(out: Path) -> Path:
    """webdataset's ShardWriter: tar shards of PER_SHARD samples (jpg, cls, txt members)."""
    import webdataset

    out.mkdir(parents=True)
    with webdataset.ShardWriter(str(out / "train-%04d.tar"), maxcount=PER_SHARD,
                                verbose=0) as sink:
        for i in range(SAMPLES):
            sink.write({"__key__": f"s{i:04d}", "jpg": jpeg(i), "cls": label(i),
                        "txt": caption(i)})
    return out


def _hwc(image: Any) -> np.ndarray:
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    if isinstance(image, bytes | bytearray):
        return np.asarray(Image.open(io.BytesIO(image)).convert("RGB"))
    arr = image.numpy() if hasattr(image, "numpy") else np.asarray(image)
    return arr.transpose(1, 2, 0) if arr.shape[0] == 3 else arr


def library_samples(fmt: str, path: Path) -> list[tuple[int, np.ndarray]]:
    """(label, pixels) of every sample, as the format's own library reads it, in its order."""
    if fmt.startswith("mds"):
        from streaming import StreamingDataset

        ds = StreamingDataset(remote=str(path), local=str(path.parent / f"{fmt}-cache"),
                              shuffle=False, batch_size=1)
        items = [ds[i] for i in range(ds.num_samples)]
        return [(int(x["label"]), _hwc(x["image"])) for x in items]
    if fmt == "litdata":
        import litdata

        lds = litdata.StreamingDataset(str(path))
        return [(int(x["label"]), _hwc(x["image"])) for x in (lds[i] for i in range(len(lds)))]
    if fmt.startswith("hf"):
        import datasets

        if fmt == "hf":
            hds = datasets.load_from_disk(str(path))
            hds = hds["train"] if isinstance(hds, datasets.DatasetDict) else hds
        else:
            hds = datasets.Dataset.from_parquet(sorted(map(str, path.glob("data/*.parquet"))))
        return [(int(x["label"]), _hwc(x["image"])) for x in hds]
    if fmt == "lance":
        import lance

        rows = lance.dataset(str(path)).to_table().to_pylist()
        return [(int(r["label"]), _hwc(r["image"])) for r in rows]
    from tfrecord.reader import tfrecord_loader

    out = []
    for f in sorted(p for p in path.iterdir() if not p.name.startswith(("_", "."))):
        for r in tfrecord_loader(str(f), None):
            # ImageNet's converters name the label image/class/label; dsbench's writer, label.
            value = r.get("image/class/label", r.get("label"))
            out.append((int(value[0]), _hwc(bytes(r["image/encoded"]))))
    return out


def library_bytes(fmt: str, path: Path) -> list[bytes] | None:
    """Each sample's encoded image as the format's own library hands it back, where it hands
    back bytes (litdata only gives decoded tensors: None)."""
    if fmt.startswith("mds"):
        from streaming import StreamingDataset

        ds = StreamingDataset(remote=str(path), local=str(path.parent / f"{fmt}-bytes-cache"),
                              shuffle=False, batch_size=1)
        # The `jpeg` column comes back as a PIL image over the stored bytes, not yet decoded.
        return [ds[i]["image"].fp.getvalue() for i in range(ds.num_samples)]
    if fmt.startswith("hf"):
        import datasets

        if fmt == "hf":
            hds = datasets.load_from_disk(str(path))
            hds = hds["train"] if isinstance(hds, datasets.DatasetDict) else hds
        else:
            hds = datasets.Dataset.from_parquet(sorted(map(str, path.glob("data/*.parquet"))))
        hds = hds.cast_column("image", datasets.Image(decode=False))
        return [x["image"]["bytes"] for x in hds]
    if fmt == "lance":
        import lance

        return [r["image"] for r in lance.dataset(str(path)).to_table(columns=["image"])
                .to_pylist()]
    if fmt == "tfrecord":
        from tfrecord.reader import tfrecord_loader

        return [bytes(r["image/encoded"])
                for f in sorted(p for p in path.iterdir() if not p.name.startswith(("_", ".")))
                for r in tfrecord_loader(str(f), None)]
    return None
