"""Parquet shards: row groups, compression and statistics, struct image columns, bad footers.

What every layout does alike (round trip, worker slices, survey, truncated, empty, corrupt and
foreign input): tests/test_adapters_common.py; determinism: tests/test_generate.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from layouts import jpegs

from dsbench import adapters
from dsbench.adapters import parquet
from dsbench.errors import DsbenchError
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
    return ExportSpec(name="t", layout="parquet", shard_samples=shard_samples, image=IMAGE,
                      fields=fields)


def export(tmp_path: Path, samples: int = 13, seed: int = 0, name: str = "ex") -> Path:
    out = tmp_path / name
    generate(make_spec(), out, samples=samples, seed=seed, jobs=1)
    return out


def test_layout_row_groups_compression_and_statistics(tmp_path: Path) -> None:
    spec = ExportSpec(name="t", layout="parquet", shard_samples=4, image=IMAGE, fields=FIELDS)
    out = tmp_path / "ex"
    generate(spec, out, samples=4, jobs=1)
    shard = out / "shard-000000.parquet"
    md = pq.ParquetFile(shard).metadata
    assert (md.num_row_groups, md.row_group(0).num_rows) == (1, 4)
    chunks = {md.row_group(0).column(j).path_in_schema: md.row_group(0).column(j)
              for j in range(md.num_columns)}
    assert chunks["image"].compression == "UNCOMPRESSED"
    assert {c.compression for p, c in chunks.items() if p != "image"} == {"ZSTD"}
    assert chunks["boxes.list.element.cls"].compression == "ZSTD"
    assert {p for p, c in chunks.items() if c.is_stats_set} == {"key", "label"}
    assert {p for p, c in chunks.items() if c.has_dictionary_page} == {"label"}
    data = shard.read_bytes()
    assert all(make_sample(spec, 0, i)["image"] in data for i in range(4))
    field = pq.ParquetFile(shard).schema_arrow.field("image")
    assert field.metadata == {b"dsbench.kind": b"image", b"dsbench.codec": b"jpeg"}


def test_foreign_file_with_row_groups_and_struct_image_column(tmp_path: Path) -> None:
    # Images as Hugging Face datasets stores them: struct<bytes: binary, path: string>.
    images = jpegs(10)
    table = pa.table({
        "__key__": [f"s{i}" for i in range(10)],
        "image": pa.array([{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(images)],
                          pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "label": pa.array(range(10), pa.int16()),
        "vec": pa.array([[i / 4] * 3 for i in range(10)], pa.list_(pa.float32())),
    })
    path = tmp_path / "train.parquet"
    pq.write_table(table, path, row_group_size=3)
    assert pq.ParquetFile(path).num_row_groups == 4
    assert adapters.detect(tmp_path) is parquet.ADAPTER
    rows = list(adapters.open_export(tmp_path).read())
    assert [r.key for r in rows] == [f"s{i}" for i in range(10)]
    assert [r.image for r in rows] == images
    assert [r.fields["label"] for r in rows] == list(range(10))
    assert all(np.array_equal(r.fields["vec"], np.full(3, i / 4, np.float32))
               for i, r in enumerate(rows))


def test_corrupt_footer_is_an_error_naming_the_file(tmp_path: Path) -> None:
    shard = export(tmp_path, samples=5) / "shard-000000.parquet"
    data = bytearray(shard.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[-8 - footer:-8] = b"\x07" * footer  # keeps the magic and length, garbles the metadata
    shard.write_bytes(bytes(data))
    with pytest.raises(DsbenchError, match=r"shard-000000\.parquet: not a readable Parquet"):
        adapters.open_export(shard)


