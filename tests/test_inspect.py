"""`dsbench inspect`: figures per sample, fields, images, and bad samples reported with exit 2."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dsbench.adapters.survey import apportion, spread, summarize
from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample
from dsbench.report.survey import render
from dsbench.stats import distribution, percentile

IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
FIELDS = (FieldSpec("label", "int", classes=10), FieldSpec("caption", "string", words=(2, 5)),
          FieldSpec("vec", "embedding", dim=4, encoding="binary"))


def make_export(root: Path, layout: str, samples: int = 7) -> ExportSpec:
    spec = ExportSpec(name="t", layout=layout, samples=samples, shard_samples=3,
                      files_per_dir=3, fields_as="json" if layout == "files" else "members",
                      image=IMAGE, fields=FIELDS)
    generate(spec, root, jobs=1)
    return spec


def inspect_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any],
                                                                           str]:
    rc = main(["inspect", str(path), "--json", "-"])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out), captured.err


def jpeg() -> bytes:
    return make_sample(ExportSpec(name="j", layout="wds", image=IMAGE), 0, 0)["image"]


def write_tar(path: Path, entries: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_inspect_wds_reports_per_sample_figures_and_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_export(tmp_path, "wds")
    rc, s, err = inspect_json(tmp_path, capsys)
    assert (rc, err) == (0, "")
    shard_bytes = sum(os.path.getsize(p) for p in tmp_path.glob("*.tar"))
    assert (s["layout"], s["samples"], s["units"], s["files"]) == ("wds", 7, 3, 3)
    assert s["bytes"] == shard_bytes
    assert s["bytes_per_sample"]["mean"] == pytest.approx(shard_bytes / 7)
    assert s["bytes_per_sample"]["p50"] <= s["bytes_per_sample"]["p99"]
    assert s["files_per_sample"] == pytest.approx(3 / 7)
    assert s["members_per_sample"] == 4.0  # jpg, cls, txt, vec.f32
    assert {n: f["type"] for n, f in s["fields"].items()} == {
        "cls": "int (ascii)", "txt": "string (utf-8)", "vec.f32": "float32[4] (raw)"}
    assert all(f["missing_in"] == [] for f in s["fields"].values())
    assert (s["image"]["codec"], s["image"]["count_checked"]) == ("jpeg", 7)
    assert s["image"]["common_sizes"] == [{"size": "64x48", "count": 7}]
    assert s["bad_samples"] == 0 and s["problems"] == []


def test_inspect_files_reports_json_fields_and_two_files_per_sample(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = ExportSpec(name="t", layout="files", samples=7, files_per_dir=3, fields_as="json",
                      image=IMAGE, fields=FIELDS[:2])  # no binary embedding: .jpg + .json
    generate(spec, tmp_path / "two", jobs=1)
    rc, s, _ = inspect_json(tmp_path / "two", capsys)
    assert rc == 0
    assert (s["layout"], s["samples"], s["files_per_sample"]) == ("files", 7, 2.0)
    assert s["members_per_sample"] is None
    assert {n: f["type"] for n, f in s["fields"].items()} == {
        "json": "json object", "json.label": "int", "json.caption": "string"}
    total = sum(p.stat().st_size for p in (tmp_path / "two").rglob("0*.*"))
    assert s["bytes"] == total and s["bytes_per_sample"]["mean"] == pytest.approx(total / 7)


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


def test_fields_missing_from_older_units_are_listed_not_bad(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    img = jpeg()
    write_tar(tmp_path / "shard-000000.tar", [("a.jpg", img), ("a.cls", b"1"),
                                              ("b.jpg", img), ("b.cls", b"2")])
    write_tar(tmp_path / "shard-000001.tar", [("c.jpg", img), ("c.cls", b"3"), ("c.txt", b"hi"),
                                              ("d.jpg", img), ("d.cls", b"4"), ("d.txt", b"yo")])
    rc, s, _ = inspect_json(tmp_path, capsys)
    assert rc == 0 and s["bad_samples"] == 0
    assert s["fields"]["txt"]["missing_in"] == ["shard-000000.tar"]
    assert s["fields"]["cls"]["missing_in"] == []

    tree = tmp_path / "tree"
    for d, doc in (("old", {"label": 1}), ("new", {"label": 2, "caption": "x"})):
        (tree / d).mkdir(parents=True)
        for k in ("0", "1"):
            (tree / d / f"{k}.jpg").write_bytes(img)
            (tree / d / f"{k}.json").write_text(json.dumps(doc))
    rc, s, _ = inspect_json(tree, capsys)
    assert rc == 0
    assert s["fields"]["json.caption"]["missing_in"] == ["old"]
    assert s["fields"]["json.label"]["missing_in"] == []


def _truncated_shard(root: Path) -> tuple[Path, str | None]:
    make_export(root, "wds", samples=3)
    shard = root / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        cut = tf.getmember("00000001.txt").offset_data + 1
    shard.write_bytes(shard.read_bytes()[:cut])
    return shard, "00000001"


def _unsafe_member(root: Path) -> tuple[Path, str | None]:
    write_tar(root / "s.tar", [("a.jpg", jpeg()), ("../../etc/evil.jpg", jpeg())])
    return root / "s.tar", None


def _no_image(root: Path) -> tuple[Path, str | None]:
    write_tar(root / "s.tar", [("a.jpg", jpeg()), ("a.cls", b"1"), ("b.cls", b"2")])
    return root / "s.tar", "b"


def _no_json(root: Path) -> tuple[Path, str | None]:
    make_export(root, "files", samples=3)
    (root / "000000/00000002.json").unlink()
    return root / "000000/00000002.jpg", "000000/00000002"


def _zero_byte(root: Path) -> tuple[Path, str | None]:
    make_export(root, "files", samples=3)
    (root / "000000/00000000.json").write_bytes(b"")
    return root / "000000/00000000.json", "000000/00000000"


def _invalid_json(root: Path) -> tuple[Path, str | None]:
    make_export(root, "files", samples=3)
    (root / "000000/00000001.json").write_text("{not json")
    return root / "000000/00000001.json", "000000/00000001"


def _not_a_tar(root: Path) -> tuple[Path, str | None]:
    (root / "x.tar").write_bytes(b"\x01garbage" * 100)
    return root / "x.tar", None


def _missing(root: Path) -> tuple[Path, str | None]:
    return root / "nowhere", None


def _empty(root: Path) -> tuple[Path, str | None]:
    return root, None


def _unknown(root: Path) -> tuple[Path, str | None]:
    (root / "notes.md").write_text("# not data")
    return root, None


@pytest.mark.parametrize("make_bad", [_truncated_shard, _unsafe_member, _no_image, _no_json,
                                      _zero_byte, _invalid_json, _not_a_tar, _missing, _empty,
                                      _unknown])
def test_bad_input_exits_2_with_one_line_naming_file_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], make_bad: Any) -> None:
    path, key = make_bad(tmp_path)
    target = path if make_bad is _missing else tmp_path
    assert main(["inspect", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsbench inspect: error: ")
    assert str(path) in err
    if key is not None:
        assert f"[sample {key}]" in err
    assert not (tmp_path.parent / "etc").exists()


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
