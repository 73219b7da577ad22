"""Parquet shards: round trip, layout choices, determinism, foreign files, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dsbench import adapters
from dsbench.adapters import base, parquet
from dsbench.cli import main
from dsbench.errors import DsbenchError, SampleError
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


def jpegs(n: int) -> list[bytes]:
    return [make_sample(make_spec(fields=()), 7, i)["image"] for i in range(n)]


def test_round_trip_reads_back_synth_images_and_values(tmp_path: Path) -> None:
    ex = adapters.open_export(export(tmp_path))
    assert ex.layout == "parquet"
    assert [Path(u).name for u in ex.units()] == [f"shard-{i:06d}.parquet" for i in range(3)]
    rows = list(ex.read())
    assert [r.key for r in rows] == [f"{i:08d}" for i in range(13)]
    for r in rows:
        want = make_sample(make_spec(), 0, int(r.key))
        f, enc = r.fields, r.encodings
        assert r.image == want["image"] and r.codec == "jpeg"
        assert (f["label"], f["caption"], f["boxes"]) == (want["label"], want["caption"],
                                                          want["boxes"])
        assert np.array_equal(np.frombuffer(f["emb_bin"], "<f4"), want["emb_bin"])
        assert np.array_equal(np.asarray(json.loads(f["emb_json"]), np.float32),
                              want["emb_json"])
        assert f["emb_list"].dtype == np.float32
        assert np.array_equal(f["emb_list"], want["emb_list"])
        assert enc == {"label": base.ENC_VALUE, "caption": base.ENC_VALUE,
                       "emb_bin": base.ENC_F32, "emb_json": base.ENC_JSON,
                       "emb_list": base.ENC_VALUE, "boxes": base.ENC_VALUE}


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


def test_same_seed_gives_byte_identical_shards(tmp_path: Path) -> None:
    a, b = export(tmp_path, name="a"), export(tmp_path, name="b")
    c = export(tmp_path, seed=1, name="c")
    names = sorted(p.name for p in a.glob("*.parquet"))
    assert len(names) == 3
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes()
        assert (a / n).read_bytes() != (c / n).read_bytes()


def test_workers_split_shards_and_every_open_is_counted(tmp_path: Path) -> None:
    ex = adapters.open_export(export(tmp_path))
    opens0, _ = base.io_counters()
    first = list(ex.read(0, 2))
    assert base.io_counters()[0] - opens0 == 2  # shards 0 and 2, one open each
    second = list(ex.read(1, 2))
    assert {r.source for r in first} == set(ex.units()[0::2])
    assert {r.source for r in second} == set(ex.units()[1::2])
    assert sorted(r.key for r in first + second) == [f"{i:08d}" for i in range(13)]


def test_survey_reads_footers(tmp_path: Path) -> None:
    out = export(tmp_path)
    s = adapters.open_export(out).survey()
    assert (s["layout"], s["samples"], s["units"], s["files"]) == ("parquet", 13, 3, 3)
    assert s["bytes"] == sum(p.stat().st_size for p in out.glob("*.parquet"))
    assert sum(s["sample_bytes"]) == s["bytes"] and len(s["sample_bytes"]) == 13
    assert s["fields"]["boxes"]["type"].startswith("list<element: struct<x: float")
    assert s["fields"]["caption"] == {"type": "string", "missing_in": []}
    assert s["image"]["codec"] == "jpeg" and s["image"]["count_checked"] == 13
    assert set(s["image"]["width"]) == {64} and set(s["image"]["height"]) == {48}
    assert s["problems"] == []


def test_inspect_json_reports_the_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    assert main(["inspect", str(export(tmp_path)), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["layout"], doc["samples"]) == ("parquet", 13)
    assert set(doc["fields"]) == {f.name for f in FIELDS}


# ---- files that dsbench did not write ----

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


def test_foreign_files_without_key_are_numbered_across_files(tmp_path: Path) -> None:
    images = jpegs(6)
    for k in range(2):
        pq.write_table(pa.table({"blob": images[3 * k:3 * k + 3], "n": [1, 2, 3]}),
                       tmp_path / f"part-{k}.parquet", row_group_size=2)
    (tmp_path / "_SUCCESS").write_bytes(b"")  # Spark's marker: ignored
    ex = adapters.open_export(tmp_path)
    rows = list(ex.read())
    assert [r.key for r in rows] == [str(i) for i in range(6)]
    assert [r.image for r in rows] == images  # "blob" found by its JPEG bytes
    assert [r.key for r in ex.read(1, 2)] == ["3", "4", "5"]
    assert rows[0].encodings == {"n": base.ENC_VALUE}


# ---- bad input ----

def assert_inspect_fails(path: Path, capsys: pytest.CaptureFixture[str], *words: str) -> None:
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    for w in words:
        assert w in err


def test_truncated_file_is_an_error_naming_it(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    shard = export(tmp_path, samples=5) / "shard-000000.parquet"
    shard.write_bytes(shard.read_bytes()[:-200])
    with pytest.raises(DsbenchError, match=r"shard-000000\.parquet: not a readable Parquet file"):
        adapters.open_export(shard)
    assert_inspect_fails(shard, capsys, "shard-000000.parquet", "truncated or corrupt")


def test_zero_byte_file_is_an_error_naming_it(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"")
    with pytest.raises(DsbenchError, match=r"empty\.parquet: empty file \(0 bytes\)"):
        adapters.open_export(path)
    assert_inspect_fails(path, capsys, "empty.parquet", "0 bytes")


def test_corrupt_footer_is_an_error_naming_the_file(tmp_path: Path) -> None:
    shard = export(tmp_path, samples=5) / "shard-000000.parquet"
    data = bytearray(shard.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[-8 - footer:-8] = b"\x07" * footer  # keeps the magic and length, garbles the metadata
    shard.write_bytes(bytes(data))
    with pytest.raises(DsbenchError, match=r"shard-000000\.parquet: not a readable Parquet"):
        adapters.open_export(shard)


def test_corrupt_row_group_is_a_sample_error_naming_file_and_rows(tmp_path: Path) -> None:
    table = pa.table({"key": [f"k{i}" for i in range(9)], "image": jpegs(9),
                      "caption": [f"caption {i}" * 20 for i in range(9)]})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=3, compression="zstd", use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(2)  # caption, rows 3-5
    data = bytearray(path.read_bytes())
    at = chunk.data_page_offset
    data[at:at + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
    ex = adapters.open_export(path)
    with pytest.raises(SampleError, match=r"d\.parquet: row group 1 \(rows 3-5\) is unreadable"):
        list(ex.read())
    skipped: list[SampleError] = []
    assert [r.key for r in ex.read(skip=skipped.append)] == ["k0", "k1", "k2", "k6", "k7", "k8"]
    assert [e.key for e in skipped] == ["row 3", "row 4", "row 5"]


def test_missing_image_column_is_an_error_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "meta.parquet"
    pq.write_table(pa.table({"key": ["a"], "label": [1]}), path)
    with pytest.raises(DsbenchError, match=r"meta\.parquet: no image column"):
        adapters.open_export(path)
    assert_inspect_fails(path, capsys, "meta.parquet", "no image column")


def test_shard_lacking_the_image_column_is_an_error_naming_it(tmp_path: Path) -> None:
    pq.write_table(pa.table({"image": jpegs(1), "label": [1]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"label": [2]}), tmp_path / "b.parquet")
    with pytest.raises(DsbenchError, match=r"no image column 'image' in b\.parquet"):
        adapters.open_export(tmp_path)


def test_empty_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(DsbenchError, match="no Parquet files"):
        parquet.ADAPTER.open(empty)
    assert_inspect_fails(empty, capsys, "nothing", "empty directory")
