"""Arrow IPC shards: record batches, zero-copy accounting, foreign IPC and feather files, nulls.

What every layout does alike (round trip, worker slices, survey, truncated, empty, corrupt and
foreign input): tests/test_adapters_common.py; determinism: tests/test_generate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest
from layouts import jpegs

from dsbench import adapters
from dsbench.adapters import arrow, base
from dsbench.errors import SampleError
from dsbench.export import write
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample

IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
FIELDS = (
    FieldSpec("label", "int", classes=10),
    FieldSpec("caption", "string", words=(2, 6)),
    FieldSpec("emb_bin", "embedding", dim=8, encoding="binary"),
    FieldSpec("emb_json", "embedding", dim=8, encoding="json"),
    FieldSpec("emb_list", "embedding", dim=8, encoding="list"),
    FieldSpec("boxes", "boxes", max_boxes=3),
)


def make_spec(shard_samples: int = 5, fields: tuple[FieldSpec, ...] = FIELDS) -> ExportSpec:
    return ExportSpec(name="t", layout="arrow", shard_samples=shard_samples, image=IMAGE,
                      fields=fields)


def export(tmp_path: Path, samples: int = 13, seed: int = 0, name: str = "ex",
           spec: ExportSpec | None = None) -> Path:
    out = tmp_path / name
    generate(spec or make_spec(), out, samples=samples, seed=seed, jobs=1)
    return out


@pytest.fixture()
def small_batches(monkeypatch: pytest.MonkeyPatch, forked_writers: None) -> None:
    # Several record batches per shard, so that batch boundaries are crossed.
    monkeypatch.setattr(write, "ARROW_BATCH_ROWS", 2)


def test_shards_are_uncompressed_ipc_files_in_record_batches(tmp_path: Path, small_batches: None
                                                             ) -> None:
    out = export(tmp_path, samples=5)
    shard = out / "shard-000000.arrow"
    data = shard.read_bytes()
    assert data.startswith(b"ARROW1")
    # Uncompressed: every JPEG is in the file byte for byte.
    assert all(make_sample(make_spec(), 0, i)["image"] in data for i in range(5))
    reader = pa.ipc.open_file(pa.memory_map(str(shard)))
    assert reader.num_record_batches == 3
    image = reader.schema.field("image")
    assert image.type == pa.binary()
    assert image.metadata == {b"dsbench.kind": b"image", b"dsbench.codec": b"jpeg"}
    assert reader.schema.field("emb_list").type == pa.list_(pa.float32(), 8)
    assert reader.schema.field("emb_bin").metadata[b"dsbench.encoding"] == b"f32"
    assert not list(out.glob(".*")), "no temporaries left behind"


def test_reading_counts_opens_and_mapped_bytes(tmp_path: Path) -> None:
    out = export(tmp_path)
    ex = adapters.open_export(out)
    opens0, mapped0 = base.io_counters()
    rows = list(ex.read())
    opens1, mapped1 = base.io_counters()
    assert opens1 - opens0 == 3  # one memory map per shard
    images = sum(len(r.image) for r in rows)
    on_disk = sum(p.stat().st_size for p in out.glob("*.arrow"))
    assert images < mapped1 - mapped0 < on_disk


def test_foreign_ipc_file_with_unnamed_image_column(tmp_path: Path) -> None:
    images = jpegs(5)
    table = pa.table({
        "__key__": [f"k{i}" for i in range(5)],
        "photo": pa.array(images, pa.binary()),  # no telling name: found by its JPEG bytes
        "label": pa.array(range(5), pa.int32()),
        "emb": pa.array([[float(i), 0.5] * i for i in range(5)], pa.list_(pa.float32())),
    })
    path = tmp_path / "frames.ipc"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=2)
    assert adapters.detect(tmp_path) is arrow.ADAPTER
    rows = list(adapters.open_export(path).read())
    assert [r.key for r in rows] == [f"k{i}" for i in range(5)]
    assert [r.image for r in rows] == images
    assert [r.fields["label"] for r in rows] == list(range(5))
    for i, r in enumerate(rows):
        assert r.fields["emb"].dtype == np.float32
        assert r.fields["emb"].tolist() == [float(i), 0.5] * i
    assert rows[0].encodings == {"label": base.ENC_VALUE, "emb": base.ENC_VALUE}


def test_foreign_compressed_feather_file(tmp_path: Path) -> None:
    images = jpegs(3)
    path = tmp_path / "data.feather"
    feather.write_feather(pa.table({"image": images, "label": [3, 1, 2]}), str(path))  # lz4
    assert adapters.detect(path) is arrow.ADAPTER
    ex = adapters.open_export(path)
    _, mapped0 = base.io_counters()
    rows = list(ex.read())
    assert base.io_counters()[1] - mapped0 == path.stat().st_size  # the whole file, compressed
    assert [r.image for r in rows] == images
    assert [r.fields["label"] for r in rows] == [3, 1, 2]
    assert ex.survey()["image"]["codec"] == "jpeg"


# ---- bad input ----

def test_null_or_non_image_bytes_are_sample_errors_naming_the_key(tmp_path: Path) -> None:
    images: list[Any] = jpegs(3)
    images[1], images[2] = None, b"not an image"
    table = pa.table({"key": ["a", "b", "c"], "image": pa.array(images, pa.binary())})
    path = tmp_path / "x.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    ex = adapters.open_export(path)
    with pytest.raises(SampleError, match=r"x\.arrow \[sample b\]: image column 'image' is null"):
        list(ex.read())
    skipped: list[SampleError] = []
    assert [r.key for r in ex.read(skip=skipped.append)] == ["a"]
    assert [e.key for e in skipped] == ["b", "c"]
    s = ex.survey()
    assert s["bad_samples"] == 2 and {p["key"] for p in s["problems"]} == {"b", "c"}


def test_nulls_in_encoded_columns_read_as_none_values(tmp_path: Path) -> None:
    table = pa.table({"image": jpegs(2), "meta": ['{"a": 1}', None], "vec": [b"\0\0\x80?", None]})
    fields = [table.schema.field("image"),
              table.schema.field("meta").with_metadata({b"dsbench.encoding": b"json"}),
              table.schema.field("vec").with_metadata({b"dsbench.encoding": b"f32"})]
    path = tmp_path / "n.arrow"
    write = pa.Table.from_arrays(table.columns, schema=pa.schema(fields))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, write.schema) as w:
        w.write_table(write)
    first, second = adapters.open_export(path).read()
    assert first.encodings == {"meta": base.ENC_JSON, "vec": base.ENC_F32}
    assert (first.fields["meta"], first.fields["vec"]) == ('{"a": 1}', b"\0\0\x80?")
    assert second.encodings == {"meta": base.ENC_VALUE, "vec": base.ENC_VALUE}
    assert second.fields == {"meta": None, "vec": None}
