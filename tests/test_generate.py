"""Generation: byte-identical exports, resumption after interruption, refusals, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec

IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
FIELDS = (FieldSpec("label", "int", classes=10), FieldSpec("caption", "string", words=(2, 5)),
          FieldSpec("vec", "embedding", dim=4, encoding="binary"))
DEFINITION = """
name = "tiny"
layout = "wds"
samples = 6
shard_samples = 2
[image]
sizes = "fixed"
width = 64
height = 48
[fields.label]
type = "int"
"""


def make_spec(layout: str) -> ExportSpec:
    return ExportSpec(name="t", layout=layout, samples=7, shard_samples=3, files_per_dir=3,
                      fields_as="json" if layout == "files" else "members", image=IMAGE,
                      fields=FIELDS)


def tree(root: Path) -> dict[str, bytes]:
    """Every file below root (hidden ones included) and its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("layout", ["wds", "files", "arrow", "parquet"])
def test_same_seed_gives_byte_identical_exports_for_any_job_count(tmp_path: Path,
                                                                  layout: str) -> None:
    spec = make_spec(layout)
    generate(spec, tmp_path / "a", seed=11, jobs=1)
    generate(spec, tmp_path / "b", seed=11, jobs=1)
    generate(spec, tmp_path / "c", seed=11, jobs=2)
    a = tree(tmp_path / "a")
    # 7 samples: 3 shards, or a .jpg, a .json and a .vec.f32 each; and the manifest.
    assert len(a) == 1 + (21 if layout == "files" else 3)
    assert a == tree(tmp_path / "b") == tree(tmp_path / "c")
    generate(spec, tmp_path / "d", seed=12, jobs=1)
    d = tree(tmp_path / "d")
    assert d.keys() == a.keys()
    # Another seed changes every file: each holds samples drawn from it.
    assert [k for k in a if d[k] == a[k]] == []


@pytest.mark.parametrize(("layout", "victim"), [("wds", "shard-000001.tar"),
                                                ("files", "000001/00000004.json"),
                                                ("arrow", "shard-000001.arrow"),
                                                ("parquet", "shard-000001.parquet")])
def test_rerun_completes_a_deleted_unit_and_removes_stale_temporaries(
        tmp_path: Path, layout: str, victim: str) -> None:
    spec = make_spec(layout)
    generate(spec, tmp_path / "ref", jobs=1)
    out = tmp_path / "out"
    generate(spec, out, jobs=1)
    (out / victim).unlink()
    stale = (out / victim).with_name(f".{Path(victim).name}.tmp99999")
    stale.write_bytes(b"half-written")
    report = generate(spec, out, jobs=1)
    assert (report.units_written, report.units_skipped) == (1, 2)
    assert not stale.exists()
    assert tree(out) == tree(tmp_path / "ref")
    again = generate(spec, out, jobs=1)
    assert (again.units_written, again.samples_written) == (0, 0)


def test_refuses_a_directory_holding_another_export_or_other_files(tmp_path: Path) -> None:
    spec = make_spec("wds")
    generate(spec, tmp_path / "x", seed=0, jobs=1)
    before = tree(tmp_path / "x")
    with pytest.raises(DsbenchError, match="holds a different export"):
        generate(spec, tmp_path / "x", seed=1, jobs=1)
    with pytest.raises(DsbenchError, match="holds a different export"):
        generate(spec, tmp_path / "x", samples=8, jobs=1)
    assert tree(tmp_path / "x") == before
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "notes.txt").write_text("mine")
    with pytest.raises(DsbenchError, match="not empty"):
        generate(spec, tmp_path / "y", jobs=1)


def test_cli_generate_reports_throughput(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # Its refusals: tests/test_cli_errors.py.
    definition = tmp_path / "tiny.toml"
    definition.write_text(DEFINITION)
    assert main(["generate", str(definition), str(tmp_path / "out"), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "tiny: 6 samples" in out and "samples/s per core" in out
    assert sorted(p.name for p in (tmp_path / "out").glob("*.tar")) == [
        "shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]

