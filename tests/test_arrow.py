"""Arrow IPC shards: round trip, determinism, zero-copy accounting, foreign files, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from dsbench import adapters
from dsbench.adapters import arrow, base
from dsbench.cli import main
from dsbench.errors import DsbenchError, SampleError
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


def assert_matches(raw: base.RawSample, spec: ExportSpec, seed: int = 0) -> None:
    want = make_sample(spec, seed, int(raw.key))
    assert raw.image == want["image"]
    assert raw.codec == "jpeg"
    f, enc = raw.fields, raw.encodings
    assert f["label"] == want["label"] and enc["label"] == base.ENC_VALUE
    assert f["caption"] == want["caption"] and enc["caption"] == base.ENC_VALUE
    assert enc["emb_bin"] == base.ENC_F32
    assert np.array_equal(np.frombuffer(f["emb_bin"], "<f4"), want["emb_bin"])
    assert enc["emb_json"] == base.ENC_JSON
    assert np.array_equal(np.asarray(json.loads(f["emb_json"]), np.float32), want["emb_json"])
    assert enc["emb_list"] == base.ENC_VALUE
    assert isinstance(f["emb_list"], np.ndarray) and f["emb_list"].dtype == np.float32
    assert np.array_equal(f["emb_list"], want["emb_list"])
    assert f["boxes"] == want["boxes"] and enc["boxes"] == base.ENC_VALUE


@pytest.fixture()
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several record batches per shard, so that batch boundaries are crossed.
    monkeypatch.setattr(write, "ARROW_BATCH_ROWS", 2)


def test_round_trip_reads_back_synth_images_and_values(tmp_path: Path, small_batches: None
                                                      ) -> None:
    out = export(tmp_path)
    ex = adapters.open_export(out)
    assert ex.layout == "arrow"
    assert [Path(u).name for u in ex.units()] == [f"shard-{i:06d}.arrow" for i in range(3)]
    rows = list(ex.read())
    assert [r.key for r in rows] == [f"{i:08d}" for i in range(13)]
    for r in rows:
        assert_matches(r, make_spec())
        assert Path(r.source).name == f"shard-{int(r.key) // 5:06d}.arrow"
        # the list embedding is a view into the memory map, not a copy
        assert not r.fields["emb_list"].flags.owndata


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


def test_same_seed_gives_byte_identical_shards(tmp_path: Path) -> None:
    a, b = export(tmp_path, name="a"), export(tmp_path, name="b")
    c = export(tmp_path, seed=1, name="c")
    names = sorted(p.name for p in a.glob("*.arrow"))
    assert names == sorted(p.name for p in b.glob("*.arrow")) and len(names) == 3
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes()
        assert (a / n).read_bytes() != (c / n).read_bytes()


def test_workers_read_disjoint_shard_slices(tmp_path: Path) -> None:
    ex = adapters.open_export(export(tmp_path))
    units = ex.units()
    seen = []
    for w in range(2):
        rows = list(ex.read(w, 2))
        assert sorted({r.source for r in rows}) == units[w::2]
        seen += [r.key for r in rows]
    assert sorted(seen) == [f"{i:08d}" for i in range(13)]
    with pytest.raises(DsbenchError, match="worker 2 of 2"):
        list(ex.read(2, 2))


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


def test_survey_reports_rows_sizes_fields_and_image_headers(tmp_path: Path) -> None:
    out = export(tmp_path)
    s = adapters.open_export(out).survey()
    on_disk = sum(p.stat().st_size for p in out.glob("*.arrow"))
    assert (s["layout"], s["samples"], s["units"], s["files"]) == ("arrow", 13, 3, 3)
    assert s["bytes"] == on_disk == sum(s["sample_bytes"])
    assert s["files_per_sample"] == pytest.approx(3 / 13)
    assert s["members_per_sample"] is None
    # Within a shard, apportioned by each row's own image bytes: bigger images, bigger samples.
    lengths = [len(make_sample(make_spec(), 0, i)["image"]) for i in range(5)]
    assert np.corrcoef(lengths, s["sample_bytes"][:5])[0, 1] > 0.99
    assert s["fields"]["emb_list"] == {"type": "fixed_size_list<item: float>[8]",
                                       "missing_in": []}
    assert s["fields"]["label"]["type"] == "int64"
    assert set(s["fields"]) == {f.name for f in FIELDS}
    assert s["image"] == {"codec": "jpeg", "count_checked": 13, "width": [64] * 13,
                          "height": [48] * 13}
    assert (s["problems"], s["bad_samples"]) == ([], 0)


def test_inspect_json_reports_the_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    out = export(tmp_path)
    assert main(["inspect", str(out), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["layout"], doc["samples"]) == ("arrow", 13)
    assert set(doc["fields"]) == {f.name for f in FIELDS}


# ---- files that dsbench did not write ----

def jpegs(n: int) -> list[bytes]:
    return [make_sample(make_spec(fields=()), 7, i)["image"] for i in range(n)]


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


def test_foreign_ipc_stream_without_key_uses_row_numbers(tmp_path: Path) -> None:
    images = jpegs(4)
    table = pa.table({"img": pa.array(images, pa.binary()), "caption": ["a", "b", "c", "d"]})
    for name in ("part-0.arrows", "part-1.arrows"):
        with pa.OSFile(str(tmp_path / name), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=3)
    assert (tmp_path / "part-0.arrows").read_bytes()[:4] == b"\xff\xff\xff\xff"
    ex = adapters.open_export(tmp_path)
    assert ex.layout == "arrow"
    rows = list(ex.read())
    assert [r.key for r in rows] == [str(i) for i in range(8)]  # numbered across both files
    assert [r.image for r in rows] == images * 2
    assert [r.fields["caption"] for r in rows] == ["a", "b", "c", "d"] * 2
    assert next(iter(ex.read(1, 2))).key == "4"
    assert ex.survey()["samples"] == 8


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

def assert_inspect_fails(path: Path, capsys: pytest.CaptureFixture[str], *words: str) -> None:
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    for w in words:
        assert w in err


def test_truncated_shard_is_an_error_naming_it(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    shard = export(tmp_path, samples=5) / "shard-000000.arrow"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(DsbenchError, match=r"shard-000000\.arrow.*truncated or corrupt"):
        adapters.open_export(shard)
    assert_inspect_fails(shard, capsys, "shard-000000.arrow", "truncated or corrupt")


def test_zero_byte_file_is_an_error_naming_it(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.arrow"
    path.write_bytes(b"")
    with pytest.raises(DsbenchError, match=r"empty\.arrow: empty file \(0 bytes\)"):
        adapters.open_export(path)
    assert_inspect_fails(path, capsys, "empty.arrow", "0 bytes")


def test_corrupt_offsets_are_a_sample_error_not_a_crash(tmp_path: Path) -> None:
    shard = export(tmp_path, samples=5) / "shard-000000.arrow"
    mm = pa.memory_map(str(shard))
    start = mm.read_buffer(1).address
    offsets = pa.ipc.open_file(mm).get_batch(0).column("image").buffers()[1]
    at, size = offsets.address - start, offsets.size
    data = bytearray(shard.read_bytes())
    data[at:at + size] = b"\xff" * size  # every image offset now points far outside the file
    shard.write_bytes(bytes(data))
    ex = adapters.open_export(shard)
    with pytest.raises(SampleError, match=r"shard-000000\.arrow.*record batch 0 is corrupt"):
        list(ex.read())
    skipped: list[SampleError] = []
    assert len(list(ex.read(skip=skipped.append))) == 0
    assert len(skipped) == 5  # the whole batch, one error per row
    problems = ex.survey()["problems"]
    assert [p["file"] for p in problems] == ["shard-000000.arrow"]
    assert "corrupt" in problems[0]["error"]


def test_partly_broken_export_reads_the_rest_and_names_the_bad_shard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = export(tmp_path)
    bad = out / "shard-000001.arrow"
    bad.write_bytes(bad.read_bytes()[:100])
    ex = adapters.open_export(out)
    with pytest.raises(SampleError, match=r"shard-000001\.arrow"):
        list(ex.read())
    skipped: list[SampleError] = []
    keys = [r.key for r in ex.read(skip=skipped.append)]
    assert keys == [f"{i:08d}" for i in [*range(5), *range(10, 13)]]
    assert len(skipped) == 1 and "shard-000001.arrow" in str(skipped[0])
    s = ex.survey()
    assert s["samples"] == 8
    assert [p["file"] for p in s["problems"]] == ["shard-000001.arrow"]
    assert_inspect_fails(out, capsys, "shard-000001.arrow")


def test_missing_image_column_is_an_error_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "labels.arrow"
    table = pa.table({"key": ["a", "b"], "label": [1, 2], "blob": [b"xx", b"yy"]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(DsbenchError, match=r"labels\.arrow: no image column.*key, label, blob"):
        adapters.open_export(path)
    assert_inspect_fails(path, capsys, "labels.arrow", "no image column")


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


def test_empty_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(DsbenchError, match="nothing: empty directory"):
        adapters.open_export(empty)
    with pytest.raises(DsbenchError, match="no Arrow IPC files"):
        arrow.ADAPTER.open(empty)
    assert_inspect_fails(empty, capsys, "nothing")


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
