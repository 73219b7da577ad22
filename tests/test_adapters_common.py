"""What every adapter does alike, one parametrised suite over the layouts: round trip, worker
slices, survey, truncated, empty, corrupt and foreign input. Layout-specific behaviour (tar
headers, IPC record batches, Parquet row groups, nested trees) stays in test_<layout>.py."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from layouts import (
    COLUMNAR,
    EMPTY_MESSAGE,
    IMAGE,
    LAYOUTS,
    OPENS_PER_UNIT,
    SHARDED,
    SUFFIX,
    jpegs,
    make_spec,
    unit_of,
    write,
    write_columnar,
)

from dsbench import adapters
from dsbench.adapters import base
from dsbench.errors import DsbenchError, SampleError
from dsbench.export import write as writers
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample, sample_key

FIELDS = (
    FieldSpec("label", "int", classes=10),
    FieldSpec("caption", "string", words=(2, 6)),
    FieldSpec("vec", "embedding", dim=8, encoding="binary"),
    FieldSpec("emb", "embedding", dim=4, encoding="json"),
    FieldSpec("boxes", "boxes", max_boxes=3),
)
# Columns can hold an embedding as a fixed-size list of float32 too.
EMB_LIST = FieldSpec("emb_list", "embedding", dim=8, encoding="list")
RAW = ImageSpec(codec="raw", sizes="fixed", width=16, height=8)
SAMPLES, UNIT, SEED = 7, 3, 3


def fields_of(layout: str) -> tuple[FieldSpec, ...]:
    return (*FIELDS, EMB_LIST) if layout in COLUMNAR else FIELDS


def key_of(layout: str, i: int) -> str:
    """Sample i's key: per-sample files are keyed by their path under the export."""
    return f"{i // UNIT:06d}/{i:08d}" if layout == "files" else sample_key(i)


def unit_index(layout: str, i: int) -> int:
    """The unit sample i is written to: its shard, or for per-sample files the sample itself."""
    return i if layout == "files" else i // UNIT


def unit_name(layout: str, i: int) -> str:
    return key_of(layout, i) if layout == "files" else f"shard-{i:06d}{SUFFIX[layout]}"


# ---- round trip ----

MEMBERS = {"cls": base.ENC_INT_TEXT, "txt": base.ENC_TEXT, "vec.f32": base.ENC_F32,
           "emb.json": base.ENC_JSON, "boxes.json": base.ENC_JSON}
JSON_DOC = {"json": base.ENC_JSON, "vec.f32": base.ENC_F32}  # a binary embedding stays a member
COLUMNS = {"label": base.ENC_VALUE, "caption": base.ENC_VALUE, "vec": base.ENC_F32,
           "emb": base.ENC_JSON, "emb_list": base.ENC_VALUE, "boxes": base.ENC_VALUE}
# (layout, fields_as, image) -> the fields each sample carries and their encodings.
ROUND_TRIPS: dict[tuple[str, str, ImageSpec], dict[str, str]] = {
    ("wds", "members", IMAGE): MEMBERS, ("wds", "json", IMAGE): JSON_DOC,
    ("files", "json", IMAGE): JSON_DOC, ("files", "members", RAW): MEMBERS,
    ("arrow", "members", IMAGE): COLUMNS, ("parquet", "members", IMAGE): COLUMNS,
}
# A member's extension -> the definition's field it holds (WebDataset conventions).
MEMBER_FIELD = {"cls": "label", "txt": "caption", "vec.f32": "vec", "emb.json": "emb",
                "boxes.json": "boxes"}


def decoded(value: Any, encoding: str) -> Any:
    """A stored field value as the definition's value."""
    if encoding == base.ENC_INT_TEXT:
        return int(value)
    if encoding == base.ENC_TEXT:
        return value.decode()
    if encoding == base.ENC_F32:
        return np.frombuffer(value, "<f4")
    if encoding == base.ENC_JSON:
        return json.loads(value)
    return value


def values(raw: base.RawSample) -> dict[str, Any]:
    """Every field of the sample by its definition's name, whatever the layout stored."""
    out: dict[str, Any] = {}
    for name, value in raw.fields.items():
        v = decoded(value, raw.encodings[name])
        if name == "json":
            out.update(v)
        else:
            out[MEMBER_FIELD.get(name, name)] = v
    return out


def assert_same(got: Any, want: Any, name: str) -> None:
    if isinstance(want, np.ndarray):
        if isinstance(got, list):  # a JSON list of numbers
            got = np.asarray(got, np.float32)
        # Raw and list embeddings come back as float32 arrays, as they were written.
        assert isinstance(got, np.ndarray) and got.dtype == np.float32, name
        assert np.array_equal(got, want), name
    else:
        assert got == want, name


@pytest.mark.parametrize(("layout", "fields_as", "image"), list(ROUND_TRIPS),
                         ids=[f"{lay}-{fa}-{im.codec}" for lay, fa, im in ROUND_TRIPS])
def test_round_trip_gives_back_the_generated_bytes_and_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, fields_as: str,
        image: ImageSpec) -> None:
    # Several Arrow record batches per shard, so that batch boundaries are crossed.
    monkeypatch.setattr(writers, "ARROW_BATCH_ROWS", 2)
    spec = make_spec(layout, fields_of(layout), fields_as=fields_as, image=image)
    export = adapters.open_export(write(tmp_path, spec, seed=SEED))
    assert export.layout == layout
    written = ([f"{d:06d}" for d in range(3)] if layout == "files"
               else [unit_name(layout, i) for i in range(3)])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*written, "_dsbench.json"])
    n_units = SAMPLES if layout == "files" else 3
    assert [Path(u).name if layout != "files" else u for u in export.units()] == [
        unit_name(layout, i) for i in range(n_units)]
    got = list(export.read())
    # Every sample once, in order; the loop below then checks each of them.
    assert [r.key for r in got] == [key_of(layout, i) for i in range(SAMPLES)]
    for i, raw in enumerate(got):
        want = make_sample(spec, SEED, i)
        assert raw.image == want["image"] and raw.codec == image.codec
        assert unit_of(layout, raw) == export.units()[unit_index(layout, i)]
        assert dict(raw.encodings) == ROUND_TRIPS[layout, fields_as, image]
        have = values(raw)
        assert sorted(have) == sorted(f.name for f in spec.fields)
        for f in spec.fields:
            assert_same(have[f.name], want[f.name], f.name)
        if layout == "arrow":  # the list embedding is a view into the memory map, not a copy
            assert not raw.fields["emb_list"].flags.owndata


# ---- worker slices ----

@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_workers_read_disjoint_slices_that_cover_the_export_one_open_per_file(
        tmp_path: Path, layout: str, n_workers: int) -> None:
    # No binary embedding: per-sample files are then one .jpg and one .json.
    export = adapters.open_export(write(tmp_path, make_spec(layout, FIELDS[:2])))
    units = export.units()
    seen: list[str] = []
    for w in range(n_workers):
        opens0, _ = base.io_counters()
        rows = list(export.read(w, n_workers))
        assert base.io_counters()[0] - opens0 == len(units[w::n_workers]) * OPENS_PER_UNIT[layout]
        # Worker w reads units w, w + n, ... in order, and every sample of each.
        assert list(dict.fromkeys(unit_of(layout, r) for r in rows)) == units[w::n_workers]
        assert [r.key for r in rows] == [key_of(layout, i) for i in range(SAMPLES)
                                         if unit_index(layout, i) % n_workers == w]
        seen += [r.key for r in rows]
    assert sorted(seen) == [key_of(layout, i) for i in range(SAMPLES)]  # disjoint and complete
    with pytest.raises(DsbenchError, match=f"worker {n_workers} of {n_workers} does not exist"):
        list(export.read(n_workers, n_workers))


# ---- survey ----

FIELD_TYPES = {
    "wds": {"cls": "int (ascii)", "txt": "string (utf-8)", "vec.f32": "float32[8] (raw)",
            "emb.json": "list<float>[4] (json)",
            "boxes.json": "list<struct{x, y, w, h, cls}> (json)"},
    "files": {"json": "json object", "json.label": "int", "json.caption": "string",
              "json.emb": "list<float>[4]", "json.boxes": "list<struct{x, y, w, h, cls}>",
              "vec.f32": "float32[8] (raw)"},
    "arrow": {"label": "int64", "caption": "string", "vec": "binary", "emb": "string",
              "emb_list": "fixed_size_list<item: float>[8]",
              "boxes": "list<item: struct<x: float, y: float, w: float, h: float, cls: int32>>"},
    "parquet": {"label": "int64", "caption": "string", "vec": "binary", "emb": "string",
                "emb_list": "fixed_size_list<element: float>[8]",
                "boxes": "list<element: struct<x: float, y: float, w: float, h: float, "
                         "cls: int32>>"},
}
# Files per sample: a shard per 3 samples; a .jpg, a .json and a .vec.f32 per sample.
FILES = {"wds": 3, "files": 3 * SAMPLES, "arrow": 3, "parquet": 3}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_survey_reports_rows_sizes_fields_and_image_headers(tmp_path: Path,
                                                            layout: str) -> None:
    spec = make_spec(layout, fields_of(layout))
    s = adapters.open_export(write(tmp_path, spec)).survey()
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*")
                  if p.is_file() and not p.name.startswith("_"))
    units = SAMPLES if layout == "files" else 3
    assert (s["layout"], s["samples"], s["units"], s["files"]) == (layout, SAMPLES, units,
                                                                    FILES[layout])
    assert s["bytes"] == on_disk == sum(s["sample_bytes"]) and len(s["sample_bytes"]) == SAMPLES
    assert s["files_per_sample"] == pytest.approx(FILES[layout] / SAMPLES)
    assert s["members_per_sample"] == (6.0 if layout == "wds" else None)
    assert {n: f["type"] for n, f in s["fields"].items()} == FIELD_TYPES[layout]
    assert all(f["missing_in"] == [] for f in s["fields"].values())
    assert s["image"] == {"codec": "jpeg", "count_checked": SAMPLES, "width": [64] * SAMPLES,
                          "height": [48] * SAMPLES}
    assert (s["problems"], s["bad_samples"]) == ([], 0)
    if layout == "arrow":
        # Within a shard, apportioned by each sample's own bytes: bigger images, bigger samples.
        lengths = [len(make_sample(spec, 0, i)["image"]) for i in range(UNIT)]
        assert np.corrcoef(lengths, s["sample_bytes"][:UNIT])[0, 1] > 0.99
    if layout == "wds":
        # Apportioned by what each sample takes in the tar: its members' headers and data in
        # whole 512-byte blocks (images of a few kB can round to the same number of blocks).
        shard = next(p for p in sorted(tmp_path.rglob("*.tar")))
        spans: dict[str, int] = {}
        with tarfile.open(shard) as tf:
            for m in tf:
                key = m.name.split(".")[0]
                spans[key] = spans.get(key, 0) + m.offset_data - m.offset + \
                    -(-m.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        share = shard.stat().st_size / sum(spans.values())
        for got, span in zip(s["sample_bytes"][:UNIT], spans.values(), strict=True):
            assert abs(got - span * share) <= 1


# ---- truncated, empty and missing ----

def _cut_tar(shard: Path, at: str) -> None:
    """Cut a shard inside the third sample's first member, or just before it."""
    with tarfile.open(shard) as tf:
        third = next(m for m in tf.getmembers() if m.name.startswith(sample_key(2)))
    end = third.offset_data + 100 if at == "mid-member" else third.offset
    shard.write_bytes(shard.read_bytes()[:end])


def _cut_file(shard: Path, at: str) -> None:
    data = shard.read_bytes()
    shard.write_bytes(data[:100] if at == "head" else data[:len(data) // 2])


# (layout, where the shard is cut, what the error says beyond the shard's name)
TRUNCATIONS = [
    ("wds", "mid-member", "truncated shard.*the last complete sample is 00000001"),
    ("wds", "member-boundary", "truncated shard.*the last complete sample is 00000001"),
    ("arrow", "head", "not a readable Arrow IPC file"),
    ("arrow", "half", "not a readable Arrow IPC file"),
    ("parquet", "head", "not a readable Parquet file"),
    ("parquet", "half", "not a readable Parquet file"),
]


@pytest.mark.parametrize(("layout", "at", "message"), TRUNCATIONS,
                         ids=[f"{t[0]}-{t[1]}" for t in TRUNCATIONS])
def test_truncated_shard_is_an_error_naming_it_and_the_rest_still_reads(
        tmp_path: Path, layout: str, at: str, message: str) -> None:
    out = write(tmp_path, make_spec(layout, FIELDS[:2]))
    bad = out / f"shard-000000{SUFFIX[layout]}"
    (_cut_tar if layout == "wds" else _cut_file)(bad, at)
    # In a directory, a truncated shard is a bad unit: the export opens, reading it fails.
    export = adapters.open_export(out)
    with pytest.raises(SampleError, match=message) as exc:
        list(export.read())
    assert str(bad) in str(exc.value)
    skipped: list[SampleError] = []
    got = [r.key for r in export.read(skip=skipped.append)]
    # A tar keeps the samples before the cut; a columnar file is lost whole.
    kept = [0, 1] if layout == "wds" else []
    assert got == [sample_key(i) for i in [*kept, 3, 4, 5, 6]]
    assert len(skipped) == 1 and str(bad) in str(skipped[0])
    s = export.survey()
    # The survey counts what was read plus the samples it found broken.
    assert s["samples"] == len(got) + s["bad_samples"]
    assert s["problems"] and {Path(p["file"]).name for p in s["problems"]} == {bad.name}


@pytest.mark.parametrize(("layout", "cut", "message"), [
    ("arrow", lambda n: n // 2, r"shard-000000\.arrow.*truncated or corrupt"),
    ("parquet", lambda n: n - 200, r"shard-000000\.parquet: not a readable Parquet file"),
], ids=["arrow", "parquet"])
def test_a_truncated_columnar_file_opened_by_itself_is_refused_naming_it(
        tmp_path: Path, layout: str, cut: Callable[[int], int], message: str) -> None:
    # Opened on its own, the file is the export: without its footer there is no schema.
    shard = write(tmp_path, make_spec(layout, FIELDS[:2])) / f"shard-000000.{layout}"
    data = shard.read_bytes()
    shard.write_bytes(data[:cut(len(data))])
    with pytest.raises(DsbenchError, match=message):
        adapters.open_export(shard)


@pytest.mark.parametrize("layout", SHARDED)
def test_zero_byte_file_is_an_error_naming_it(tmp_path: Path, layout: str) -> None:
    path = tmp_path / f"empty{SUFFIX[layout]}"
    path.write_bytes(b"")
    if layout in COLUMNAR:  # a columnar file has no schema to open
        with pytest.raises(DsbenchError, match=rf"{path.name}: empty file \(0 bytes\)"):
            adapters.open_export(path)
        return
    # A shard is a unit like any other: reported when read, so that the others still are.
    errors: list[SampleError] = []
    assert list(adapters.open_export(tmp_path).read(skip=errors.append)) == []
    assert [Path(str(e.path)).name for e in errors] == [path.name]
    assert "empty file" in str(errors[0])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_directory_is_an_error(tmp_path: Path, layout: str) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(DsbenchError, match="nothing: empty directory"):
        adapters.open_export(empty)
    # A manifest alone is no data either.
    (empty / "_dsbench.json").write_text("{}")
    adapter = adapters.get(layout)
    assert not adapter.detect(empty)
    with pytest.raises(DsbenchError, match=EMPTY_MESSAGE[layout]):
        adapter.open(empty)


@pytest.mark.parametrize("layout", COLUMNAR)
def test_missing_image_column_is_an_error_naming_the_file(tmp_path: Path, layout: str) -> None:
    path = write_columnar(tmp_path / f"labels.{layout}",
                          pa.table({"key": ["a", "b"], "label": [1, 2], "blob": [b"xx", b"yy"]}))
    with pytest.raises(DsbenchError,
                       match=rf"labels\.{layout}: no image or token column.*key, label, blob"):
        adapters.open_export(path)


@pytest.mark.parametrize("layout", COLUMNAR)
def test_shard_lacking_the_image_column_is_an_error_naming_it(tmp_path: Path,
                                                             layout: str) -> None:
    write_columnar(tmp_path / f"a.{layout}", pa.table({"image": jpegs(1), "label": [1]}))
    write_columnar(tmp_path / f"b.{layout}", pa.table({"label": [2]}))
    with pytest.raises(DsbenchError, match=rf"no image column 'image' in b\.{layout}"):
        adapters.open_export(tmp_path)


# ---- files that dsbench did not write ----

def _ipc_stream(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=2)
    assert path.read_bytes()[:4] == b"\xff\xff\xff\xff"  # a stream (continuation marker)


def _parquet(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path, row_group_size=2)


# layout -> (writer, file suffix, a name for the image column that says nothing)
FOREIGN = {"arrow": (_ipc_stream, ".arrows", "img"), "parquet": (_parquet, ".parquet", "blob")}


@pytest.mark.parametrize("layout", COLUMNAR)
def test_foreign_files_without_key_are_numbered_across_files(tmp_path: Path,
                                                            layout: str) -> None:
    writer, suffix, column = FOREIGN[layout]
    images = jpegs(6)
    for k in range(2):
        table = pa.table({column: pa.array(images[3 * k:3 * k + 3], pa.binary()),
                          "caption": ["a", "b", "c"]})
        writer(tmp_path / f"part-{k}{suffix}", table)
    (tmp_path / "_SUCCESS").write_bytes(b"")  # Spark's marker: ignored
    export = adapters.open_export(tmp_path)
    assert export.layout == layout
    rows = list(export.read())
    assert [r.key for r in rows] == [str(i) for i in range(6)]  # numbered across both files
    assert [r.image for r in rows] == images  # the image column found by its JPEG bytes
    assert [r.fields["caption"] for r in rows] == ["a", "b", "c"] * 2
    assert rows[0].encodings == {"caption": base.ENC_VALUE}
    assert [r.key for r in export.read(1, 2)] == ["3", "4", "5"]
    assert export.survey()["samples"] == 6


# ---- corrupt data inside a unit ----

def _corrupt_arrow_offsets(root: Path) -> tuple[Path, str, list[str], list[str]]:
    """Every image offset of shard 0's first record batch points far outside the file."""
    out = write(root, ExportSpec(name="t", layout="arrow", shard_samples=5, image=IMAGE),
                samples=5)
    shard = out / "shard-000000.arrow"
    mm = pa.memory_map(str(shard))
    start = mm.read_buffer(1).address
    offsets = pa.ipc.open_file(mm).get_batch(0).column("image").buffers()[1]
    at, size = offsets.address - start, offsets.size
    data = bytearray(shard.read_bytes())
    data[at:at + size] = b"\xff" * size
    shard.write_bytes(bytes(data))
    # The batch is lost whole: one error per row, keyed by row number.
    return shard, r"shard-000000\.arrow.*record batch 0 is corrupt", [], [
        f"row {i}" for i in range(5)]


def _corrupt_parquet_row_group(root: Path) -> tuple[Path, str, list[str], list[str]]:
    """Row group 1 (rows 3-5) of one file has its caption chunk overwritten."""
    table = pa.table({"key": [f"k{i}" for i in range(9)], "image": jpegs(9),
                      "caption": [f"caption {i}" * 20 for i in range(9)]})
    path = root / "d.parquet"
    pq.write_table(table, path, row_group_size=3, compression="zstd", use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(2)
    data = bytearray(path.read_bytes())
    at = chunk.data_page_offset
    data[at:at + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
    rest = ["k0", "k1", "k2", "k6", "k7", "k8"]
    return path, r"d\.parquet: row group 1 \(rows 3-5\) is unreadable", rest, [
        "row 3", "row 4", "row 5"]


CORRUPTIONS = {"arrow": _corrupt_arrow_offsets, "parquet": _corrupt_parquet_row_group}


@pytest.mark.parametrize("layout", COLUMNAR)
def test_corrupt_data_is_a_sample_error_naming_file_and_rows(tmp_path: Path,
                                                            layout: str) -> None:
    path, message, rest, bad_keys = CORRUPTIONS[layout](tmp_path)
    export = adapters.open_export(path)
    with pytest.raises(SampleError, match=message):
        list(export.read())
    skipped: list[SampleError] = []
    assert [r.key for r in export.read(skip=skipped.append)] == rest  # the rest still reads
    assert [e.key for e in skipped] == bad_keys  # one error per row lost
    assert all(path.name in str(e) for e in skipped)


@pytest.mark.parametrize("layout", COLUMNAR)
def test_survey_names_the_file_with_corrupt_data(tmp_path: Path, layout: str) -> None:
    path, *_ = CORRUPTIONS[layout](tmp_path)
    problems = adapters.open_export(path).survey()["problems"]
    assert [Path(p["file"]).name for p in problems] == [path.name]
    assert "corrupt" in problems[0]["error"] or "unreadable" in problems[0]["error"]
