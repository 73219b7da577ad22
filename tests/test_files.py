"""Per-sample files: round trip, foreign nested trees, one open per member, incomplete samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dsbench import adapters
from dsbench.adapters import base, files
from dsbench.errors import DsbenchError, SampleError
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample
from dsbench.export.write import WRITERS

IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
AFTER_FIELDS = (
    FieldSpec("label", "int", classes=10),
    FieldSpec("caption", "string", words=(2, 6)),
    FieldSpec("embedding", "embedding", dim=6, encoding="json"),
    FieldSpec("boxes", "boxes", max_boxes=3),
)


def make_spec(fields_as: str = "json", fields: tuple[FieldSpec, ...] = AFTER_FIELDS,
              samples: int = 7) -> ExportSpec:
    return ExportSpec(name="t", layout="files", samples=samples, files_per_dir=3,
                      fields_as=fields_as, image=IMAGE, fields=fields)


def jpeg(i: int = 0) -> bytes:
    return make_sample(ExportSpec(name="j", layout="files", image=IMAGE), 0, i)["image"]


def test_round_trip_json_document(tmp_path: Path) -> None:
    spec = make_spec()
    generate(spec, tmp_path, seed=5, jobs=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000000", "000001", "000002",
                                                         "_dsbench.json"]
    export = adapters.open_export(tmp_path)
    assert export.layout == "files"
    assert export.units() == [f"{i // 3:06d}/{i:08d}" for i in range(7)]
    got = list(export.read())
    for i, s in enumerate(got):
        want = make_sample(spec, 5, i)
        assert s.key == f"{i // 3:06d}/{i:08d}"
        assert s.image == want["image"] and s.codec == "jpeg"
        assert dict(s.encodings) == {"json": base.ENC_JSON}
        doc = json.loads(s.fields["json"])
        assert doc["label"] == want["label"] and doc["caption"] == want["caption"]
        assert doc["boxes"] == want["boxes"]
        np.testing.assert_array_equal(np.float32(doc["embedding"]), want["embedding"])


def test_round_trip_members_with_raw_images(tmp_path: Path) -> None:
    fields = (FieldSpec("label", "int", classes=10),
              FieldSpec("vec", "embedding", dim=5, encoding="binary"))
    spec = ExportSpec(name="t", layout="files", samples=4, files_per_dir=3,
                      fields_as="members", image=ImageSpec(codec="raw", sizes="fixed",
                                                           width=16, height=8), fields=fields)
    generate(spec, tmp_path, jobs=1)
    got = list(adapters.open_export(tmp_path).read())
    assert len(got) == 4
    for i, s in enumerate(got):
        want = make_sample(spec, 0, i)
        assert s.codec == "raw" and s.image == want["image"]
        assert s.fields["cls"] == str(want["label"]).encode()
        np.testing.assert_array_equal(np.frombuffer(s.fields["vec.f32"], "<f4"), want["vec"])


def test_workers_split_keys_and_open_one_file_per_member(tmp_path: Path) -> None:
    generate(make_spec(), tmp_path, jobs=1)
    export = adapters.open_export(tmp_path)
    keys = export.units()
    opens0, _ = base.io_counters()
    parts = [[s.key for s in export.read(w, 3)] for w in range(3)]
    assert base.io_counters()[0] - opens0 == 2 * len(keys)  # one .jpg and one .json each
    assert parts == [keys[0::3], keys[1::3], keys[2::3]]
    assert export.survey()["files_per_sample"] == 2.0


def test_reads_nested_foreign_tree_grouped_by_directory_and_key(tmp_path: Path) -> None:
    layout = {
        "a/b/0001.jpg": jpeg(1), "a/b/0001.json": b'{"y": 1}',
        "a/c/0001.jpg": jpeg(2), "a/c/0001.json": b'{"y": 2}',
        "z/0002.png.jpg": jpeg(3), "z/0002.json": b'{"y": 3}',
        "README": b"not a sample", ".cache/0009.jpg": b"hidden", "_tmp/x.jpg": b"ignored",
        "a/b/.0003.jpg.tmp": b"partial",
    }
    for rel, data in layout.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    export = adapters.open_export(tmp_path)
    assert export.layout == "files"
    assert export.units() == ["a/b/0001", "a/c/0001", "z/0002"]
    got = list(export.read())
    assert [json.loads(s.fields["json"])["y"] for s in got] == [1, 2, 3]
    assert [s.image for s in got] == [jpeg(1), jpeg(2), jpeg(3)]
    assert sorted(got[2].fields) == ["json"]  # "png.jpg" is the image, by its last suffix


def write_tree(root: Path, entries: dict[str, bytes]) -> None:
    for rel, data in entries.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


@pytest.mark.parametrize(("entries", "bad_file", "message"), [
    ({"d/1.jpg": b"", "d/1.json": b"{}"}, "d/1.jpg", "zero-byte"),
    ({"d/1.jpg": b"x", "d/1.json": b""}, "d/1.json", "zero-byte"),
    ({"d/1.json": b"{}"}, "d/1.json", "no image member"),
    ({"d/1.jpg": b"x"}, "d/1.jpg", "no .json member"),
])
def test_bad_sample_names_file_and_key(tmp_path: Path, entries: dict[str, bytes],
                                       bad_file: str, message: str) -> None:
    good = {"d/0.jpg": b"x", "d/0.json": b"{}", "d/2.jpg": b"x", "d/2.json": b"{}"}
    write_tree(tmp_path, {**good, **entries})
    export = files.ADAPTER.open(tmp_path)
    with pytest.raises(SampleError, match=message) as exc:
        list(export.read())
    assert exc.value.path == str(tmp_path / bad_file) and exc.value.key == "d/1"
    errors: list[SampleError] = []
    assert [s.key for s in export.read(skip=errors.append)] == ["d/0", "d/2"]
    assert len(errors) == 1


def test_empty_caption_is_a_legal_empty_member(tmp_path: Path) -> None:
    write_tree(tmp_path, {"0.jpg": b"x", "0.txt": b"", "1.jpg": b"x", "1.txt": b"words"})
    assert [s.fields["txt"] for s in files.ADAPTER.open(tmp_path).read()] == [b"", b"words"]


def test_empty_directory_and_no_samples_are_errors(tmp_path: Path) -> None:
    with pytest.raises(DsbenchError, match="empty directory"):
        adapters.open_export(tmp_path)
    (tmp_path / "_dsbench.json").write_text("{}")
    with pytest.raises(DsbenchError, match="no sample files"):
        files.ADAPTER.open(tmp_path)
    assert not files.ADAPTER.detect(tmp_path)


def test_unit_paths_list_every_file_of_the_last_short_directory(tmp_path: Path) -> None:
    spec = make_spec(samples=7)
    generate(spec, tmp_path, samples=5, jobs=1)  # --samples overrides the definition's 7
    paths = WRITERS["files"].unit_paths(spec, tmp_path, 1)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        "000001/00000003.jpg", "000001/00000003.json", "000001/00000004.jpg",
        "000001/00000004.json"]
    assert all(p.exists() for p in paths)
    assert sorted(p.name for p in (tmp_path / "000001").iterdir()) == [p.name for p in paths]
