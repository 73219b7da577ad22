"""Per-sample files: foreign nested trees, incomplete samples, empty members, unit paths.

Round trip, worker slices and opens, the empty directory: tests/test_adapters_common.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from layouts import jpeg

from dsbench import adapters
from dsbench.adapters import files
from dsbench.errors import DsbenchError, SampleError
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
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
    ({"d/1.json": b"{}"}, "d/1.json", "no image or audio member"),
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


def test_unit_paths_list_every_file_of_the_last_short_directory(tmp_path: Path) -> None:
    spec = make_spec(samples=7)
    generate(spec, tmp_path, samples=5, jobs=1)  # --samples overrides the definition's 7
    paths = WRITERS["files"].unit_paths(spec, tmp_path, 1)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        "000001/00000003.jpg", "000001/00000003.json", "000001/00000004.jpg",
        "000001/00000004.json"]
    assert all(p.exists() for p in paths)
    assert sorted(p.name for p in (tmp_path / "000001").iterdir()) == [p.name for p in paths]


def test_per_sample_files_of_token_ids_or_text_are_read_as_written(tmp_path: Path) -> None:
    # Written as a team writes them: NumPy's np.save for each document's ids, a .txt file for
    # each text, with a label or JSON member beside.
    import numpy as np

    from dsbench.adapters import base
    from dsbench.loader.pipeline import parse_fields

    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 50_000, size=int(rng.integers(20, 90))).astype(np.uint16)
           for _ in range(6)]
    (tmp_path / "tok").mkdir()
    (tmp_path / "txt").mkdir()
    for i, doc in enumerate(ids):
        np.save(tmp_path / "tok" / f"{i:04d}.input_ids.npy", doc)
        (tmp_path / "tok" / f"{i:04d}.cls").write_text(str(i))
        (tmp_path / "txt" / f"{i:04d}.txt").write_text(f"déjà vu {i} " * (i + 1), "utf-8")
    tokens = adapters.open_export(tmp_path / "tok")
    assert (tokens.layout, tokens.kind, tokens.payload_field) == ("files", base.TOKENS,
                                                                   "input_ids.npy")
    got = list(tokens.read())
    assert all(np.array_equal(base.token_ids(r.image), d) for r, d in zip(got, ids, strict=True))
    assert [parse_fields(r)["cls"] for r in got] == list(range(6))
    text = adapters.open_export(tmp_path / "txt")
    assert [base.text_of(r.image) for r in text.read()] == [f"déjà vu {i} " * (i + 1)
                                                             for i in range(6)]
    # Two members that could carry the ids: --image-field names one, else one line.
    np.save(tmp_path / "tok" / "0000.other.npy", ids[0])
    with pytest.raises(DsbenchError, match="several members could carry the samples' tokens"):
        adapters.open_export(tmp_path / "tok")
    named = adapters.open_export(tmp_path / "tok", image_field="input_ids.npy")
    assert named.kind == base.TOKENS
