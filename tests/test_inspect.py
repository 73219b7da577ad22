"""`dsbench inspect`: figures per sample, fields, images, and bad samples reported with exit 2."""

from __future__ import annotations

import json
import statistics
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from layouts import LAYOUTS, assert_one_line_error, jpeg, make_spec, write, write_tar

from dsbench import adapters
from dsbench.adapters.survey import apportion, spread, summarize
from dsbench.cli import main
from dsbench.export.spec import ExportSpec, FieldSpec
from dsbench.report.survey import render
from dsbench.stats import distribution, percentile

FIELDS = (FieldSpec("label", "int", classes=10), FieldSpec("caption", "string", words=(2, 5)),
          FieldSpec("vec", "embedding", dim=4, encoding="binary"))
# Per-sample files get no binary embedding, as the after export: a .jpg and a .json per sample.
FIELDS_OF = {"files": FIELDS[:2]}
FIELD_TYPES = {
    "wds": {"cls": "int (ascii)", "txt": "string (utf-8)", "vec.f32": "float32[4] (raw)"},
    "files": {"json": "json object", "json.label": "int", "json.caption": "string"},
    "arrow": {"label": "int64", "caption": "string", "vec": "binary"},
    "parquet": {"label": "int64", "caption": "string", "vec": "binary"},
}
# 7 samples in units of 3: three shards, or one .jpg and one .json per sample.
UNITS = {"wds": 3, "files": 7, "arrow": 3, "parquet": 3}
FILES_PER_SAMPLE = {"wds": 3 / 7, "files": 2.0, "arrow": 3 / 7, "parquet": 3 / 7}
MEMBERS_PER_SAMPLE = {"wds": 4.0}  # jpg, cls, txt, vec.f32; the others have no members


def make_export(root: Path, layout: str, samples: int = 7) -> ExportSpec:
    spec = make_spec(layout, FIELDS_OF.get(layout, FIELDS), samples=samples)
    write(root, spec)
    return spec


def data_bytes(root: Path) -> int:
    """Bytes of the export's data files: not the manifest (`_dsbench.json`), not hidden ones."""
    return sum(p.stat().st_size for p in root.rglob("*")
               if p.is_file() and not p.name.startswith(("_", ".")))


def inspect_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any],
                                                                           str]:
    rc = main(["inspect", str(path), "--json", "-"])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out), captured.err


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inspect_json_reports_per_sample_figures_and_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str) -> None:
    make_export(tmp_path, layout)
    rc, s, err = inspect_json(tmp_path, capsys)
    assert (rc, err) == (0, "")
    assert (s["layout"], s["samples"], s["units"]) == (layout, 7, UNITS[layout])
    total = data_bytes(tmp_path)
    assert s["bytes"] == total
    assert s["bytes_per_sample"]["mean"] == pytest.approx(total / 7)
    # The median of what the adapter apportions to each sample, which adds up to the bytes.
    sample_bytes = adapters.open_export(tmp_path).survey()["sample_bytes"]
    assert sum(sample_bytes) == total and min(sample_bytes) > 0
    assert s["bytes_per_sample"]["p50"] == pytest.approx(statistics.median(sample_bytes))
    assert s["files_per_sample"] == pytest.approx(FILES_PER_SAMPLE[layout])
    assert s["members_per_sample"] == MEMBERS_PER_SAMPLE.get(layout)
    assert {n: f["type"] for n, f in s["fields"].items()} == FIELD_TYPES[layout]
    assert all(f["missing_in"] == [] for f in s["fields"].values())
    assert (s["image"]["codec"], s["image"]["count_checked"]) == ("jpeg", 7)
    assert s["image"]["common_sizes"] == [{"size": "64x48", "count": 7}]
    assert s["bad_samples"] == 0 and s["problems"] == []


def test_text_report_carries_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_export(tmp_path, "wds")
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for text in ("layout:             wds", "7 samples", "3 shards", "B/sample",
                 "files opened/sample", "4.00 members/sample", "64-64 px", "0 samples"):
        assert text in out, text


def test_partly_corrupt_files_export_reports_how_many_and_where(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_export(tmp_path, "files")
    (tmp_path / "000000/00000001.jpg").write_bytes(b"")
    (tmp_path / "000001/00000004.json").write_text('{"label": 3, "caption": ')
    jpg = tmp_path / "000002/00000006.jpg"
    jpg.write_bytes(jpg.read_bytes()[:-50])  # the header survives the cut
    rc, s, err = inspect_json(tmp_path, capsys)
    assert rc == 2
    assert err.count("\n") == 1
    assert str(tmp_path / "000000/00000001.jpg") in err and "[sample 000000/00000001]" in err
    assert "3 bad samples" in err
    assert s["samples"] == 7 and s["bad_samples"] == 3
    where = {(Path(p["file"]).relative_to(tmp_path).as_posix(), p["key"]) for p in s["problems"]}
    assert where == {("000000/00000001.jpg", "000000/00000001"),
                     ("000001/00000004.json", "000001/00000004"),
                     ("000002/00000006.jpg", "000002/00000006")}
    errors = {p["key"]: p["error"] for p in s["problems"]}
    assert "invalid JSON" in errors["000001/00000004"]
    assert "end-of-image marker" in errors["000002/00000006"]


def test_partly_corrupt_wds_export_counts_the_cut_sample(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_export(tmp_path, "wds")
    shard = tmp_path / "shard-000001.tar"
    with tarfile.open(shard) as tf:
        cut = tf.getmember("00000004.txt")
    shard.write_bytes(shard.read_bytes()[:cut.offset_data + 2])
    rc, s, err = inspect_json(tmp_path, capsys)
    assert rc == 2 and str(shard) in err and "[sample 00000004]" in err
    assert s["bad_samples"] == 1 and s["samples"] == 6  # sample 5 is lost with the cut
    assert s["problems_by_file"] == {str(shard): 1}
    assert "the last complete sample is 00000003" in s["problems"][0]["error"]


def test_fields_missing_from_some_units_are_bad_samples(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A field that changes between units is what a re-export that changed midway looks like:
    # the first sample that differs is named, and the field still lists where it is missing.
    img = jpeg()
    write_tar(tmp_path / "shard-000000.tar", [("a.jpg", img), ("a.cls", b"1"),
                                              ("b.jpg", img), ("b.cls", b"2")])
    write_tar(tmp_path / "shard-000001.tar", [("c.jpg", img), ("c.cls", b"3"), ("c.txt", b"hi"),
                                              ("d.jpg", img), ("d.cls", b"4"), ("d.txt", b"yo")])
    rc, s, err = inspect_json(tmp_path, capsys)
    assert rc == 2 and s["bad_samples"] == 1
    assert f"{tmp_path / 'shard-000001.tar'} [sample c]: field 'txt'" in err
    assert s["fields"]["txt"]["missing_in"] == ["shard-000000.tar"]
    assert s["fields"]["cls"]["missing_in"] == []

    tree = tmp_path / "tree"
    for d, doc in (("old", {"label": 1}), ("new", {"label": 2, "caption": "x"})):
        (tree / d).mkdir(parents=True)
        for k in ("0", "1"):
            (tree / d / f"{k}.jpg").write_bytes(img)
            (tree / d / f"{k}.json").write_text(json.dumps(doc))
    rc, s, err = inspect_json(tree, capsys)
    assert rc == 2
    assert f"{tree / 'old' / '0.json'} [sample old/0]: field 'json.caption' is missing" in err
    assert s["fields"]["json.caption"]["missing_in"] == ["old"]
    assert s["fields"]["json.label"]["missing_in"] == []


# Each maker writes one kind of bad input under `root` and returns the path the error must name,
# the sample key it must name (if any) and other words it must hold.
Bad = tuple[Path, str | None, tuple[str, ...]]


def _truncated_shard(root: Path) -> Bad:
    make_export(root, "wds", samples=3)
    shard = root / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        cut = tf.getmember("00000001.txt").offset_data + 1
    shard.write_bytes(shard.read_bytes()[:cut])
    return shard, "00000001", ("truncated shard",)


def _unsafe_member(root: Path) -> Bad:
    write_tar(root / "s.tar", [("a.jpg", jpeg()), ("../../etc/evil.jpg", jpeg())])
    return root / "s.tar", None, ("'../../etc/evil.jpg'",)


def _no_image(root: Path) -> Bad:
    write_tar(root / "s.tar", [("a.jpg", jpeg()), ("a.cls", b"1"), ("b.cls", b"2")])
    return root / "s.tar", "b", ("no image or audio member",)


def _no_json(root: Path) -> Bad:
    make_export(root, "files", samples=3)
    (root / "000000/00000002.json").unlink()
    return root / "000000/00000002.jpg", "000000/00000002", ("no .json member",)


def _zero_byte(root: Path) -> Bad:
    make_export(root, "files", samples=3)
    (root / "000000/00000000.json").write_bytes(b"")
    return root / "000000/00000000.json", "000000/00000000", ("zero-byte",)


def _invalid_json(root: Path) -> Bad:
    make_export(root, "files", samples=3)
    (root / "000000/00000001.json").write_text("{not json")
    return root / "000000/00000001.json", "000000/00000001", ("invalid JSON",)


def _not_a_tar(root: Path) -> Bad:
    (root / "x.tar").write_bytes(b"\x01garbage" * 100)
    return root / "x.tar", None, ("not a tar archive",)


def _missing(root: Path) -> Bad:
    return root / "nowhere", None, ("no such file or directory",)


def _empty(root: Path) -> Bad:
    return root, None, ("empty directory",)


def _unknown(root: Path) -> Bad:
    (root / "notes.md").write_text("# not data")
    return root, None, ()


def _truncated_columnar(layout: str, cut: Callable[[int], int]) -> Callable[[Path], Bad]:
    def make(root: Path) -> Bad:
        make_export(root, layout, samples=3)
        shard = root / f"shard-000000.{layout}"
        data = shard.read_bytes()
        shard.write_bytes(data[:cut(len(data))])
        return shard, None, ("truncated or corrupt",)
    make.__name__ = f"_truncated_{layout}"
    return make


def _zero_byte_file(suffix: str) -> Callable[[Path], Bad]:
    def make(root: Path) -> Bad:
        (root / f"empty.{suffix}").write_bytes(b"")
        # An Arrow or Parquet file has no schema to open; a shard is reported as a bad unit.
        says = "empty file" if suffix == "tar" else "empty file (0 bytes)"
        return root / f"empty.{suffix}", None, (says,)
    make.__name__ = f"_zero_byte_{suffix}"
    return make


def _no_image_column(layout: str) -> Callable[[Path], Bad]:
    def make(root: Path) -> Bad:
        table = pa.table({"key": ["a", "b"], "label": [1, 2]})
        path = root / f"labels.{layout}"
        if layout == "arrow":
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        else:
            pq.write_table(table, path)
        return path, None, ("no image or token column", "columns: key, label")
    make.__name__ = f"_no_image_column_{layout}"
    # Inspected by itself: in a directory of its own, the export as a whole lacks the column.
    make.inspect_file = True  # type: ignore[attr-defined]
    return make


BAD_INPUTS = [_truncated_shard, _unsafe_member, _no_image, _no_json, _zero_byte, _invalid_json,
              _not_a_tar, _missing, _empty, _unknown,
              _truncated_columnar("arrow", lambda n: n // 2),
              _truncated_columnar("parquet", lambda n: n - 200),
              _zero_byte_file("arrow"), _zero_byte_file("parquet"), _zero_byte_file("tar"),
              _no_image_column("arrow"), _no_image_column("parquet")]


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("make_bad", BAD_INPUTS, ids=[f.__name__.strip("_") for f in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_naming_file_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        make_bad: Callable[[Path], Bad]) -> None:
    # The export sits two levels down a sandbox, and inspect runs from inside it, so that a
    # member named ../../etc/evil.jpg, extracted relative to either, would land in the sandbox.
    root = tmp_path / "sandbox" / "a" / "export"
    root.mkdir(parents=True)
    path, key, words = make_bad(root)
    target = path if make_bad is _missing or getattr(make_bad, "inspect_file", False) else root
    monkeypatch.chdir(root)
    before = _tree(tmp_path)
    assert main(["inspect", str(target)]) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err, "inspect", str(path), *words)
    if key is not None:
        assert f"[sample {key}]" in err
    assert _tree(tmp_path) == before  # inspect wrote nothing, anywhere in the sandbox


def test_unknown_layout_option_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["inspect", str(tmp_path), "--layout", "zip"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_summary_helpers() -> None:
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert apportion(1000, [100, 300]) == [250, 750]
    assert sum(apportion(10_007, [3, 5, 11, 0])) == 10_007
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([], 99) == 0.0
    assert distribution([2, 4]) == {"mean": 3.0, "p50": 3.0, "p99": pytest.approx(3.98),
                                    "max": 4.0}
    assert spread(5, 10) == [0, 1, 2, 3, 4] and spread(1000, 3) == [0, 499, 999]


def test_render_of_a_columnar_survey_has_no_tar_line() -> None:
    survey = {"layout": "parquet", "samples": 4, "units": 1, "files": 1, "bytes": 4000,
              "sample_bytes": [1000] * 4, "files_per_sample": 0.25, "members_per_sample": None,
              "fields": {"label": {"type": "int64", "missing_in": []}},
              "image": {"codec": "jpeg", "count_checked": 4, "width": [5] * 4, "height": [4] * 4},
              "problems": [], "bad_samples": 0}
    text = render(summarize(survey, "x.parquet"))
    assert "members/sample" not in text
    assert "1.00 kB/sample" in text and "label  int64  (in all files)" in text
