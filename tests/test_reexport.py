"""generate --from: an existing export's samples re-laid in a definition's layout (reexport.py).

Images byte-identical to the source's, carried fields equal, synthesised and dropped fields said,
the subset rule, byte-identical re-runs, resumption, provenance, and one-line refusals.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_spec
from layouts import assert_one_line_error, write_tar

from dsbench.adapters import base, open_export
from dsbench.adapters.base import MANIFEST
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.carry import SourceField, plan_fields, source_fields
from dsbench.export.generate import generate
from dsbench.export.reexport import reexport
from dsbench.export.spec import parse_spec

REPO = Path(__file__).resolve().parents[1]
CAPTION = {"caption": {"type": "string", "words": [2, 4]}}
# What the candidates hold besides the label (formats/arrow.toml's fields, small).
EXTRA = {**CAPTION, "embedding": {"type": "embedding", "dim": 8, "encoding": "binary"},
         "boxes": {"type": "boxes", "max_boxes": 3}}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small exports to re-lay: WebDataset shards of 5 (.jpg, .cls, .txt), per-sample files
    with a JSON document (label, 8-d embedding, boxes) in directories of 3, Arrow and Parquet
    shards of 4 with every candidate field."""
    root = tmp_path_factory.mktemp("sources")
    out = {"wds": root / "wds", "files": root / "files", "arrow": root / "arrow",
           "parquet": root / "parquet"}
    generate(tiny_spec("wds", CAPTION, shard_samples=5), out["wds"], samples=12, jobs=1)
    generate(tiny_spec("files", {"embedding": {"type": "embedding", "dim": 8,
                                               "encoding": "json"},
                                 "boxes": {"type": "boxes"}}, files_per_dir=3),
             out["files"], samples=7, jobs=1)
    for layout in ("arrow", "parquet"):
        generate(tiny_spec(layout, EXTRA, shard_samples=4), out[layout], samples=10, seed=3,
                 jobs=1)
    return out


def candidate(layout: str, fields: dict[str, Any] | None = None, unit: int = 3) -> Any:
    """A definition of `layout` with the label and the candidates' fields, units of `unit`."""
    extra: dict[str, Any] = {"shard_samples": unit, "files_per_dir": unit}
    return tiny_spec(layout, EXTRA if fields is None else fields, **extra)


def samples(path: Path) -> list[base.RawSample]:
    return list(open_export(path).read())


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def parsed(raw: base.RawSample) -> dict[str, Any]:
    """A sample's fields by name, parsed, whatever layout stored them."""
    out: dict[str, Any] = {}
    for name, value in raw.fields.items():
        enc = raw.encodings[name]
        if enc == base.ENC_JSON:
            value = json.loads(value)
            if isinstance(value, dict):
                out.update(value)
                continue
        elif enc == base.ENC_INT_TEXT:
            value = int(value)
        elif enc == base.ENC_TEXT:
            value = bytes(value).decode()
        elif enc == base.ENC_F32:
            value = np.frombuffer(value, "<f4")
        name = {"cls": "label", "txt": "caption"}.get(name, name)
        out[name.split(".")[0]] = value
    return {k: (np.asarray(v, np.float32).tolist() if k == "embedding" else v)
            for k, v in out.items()}


# (source, destination layout, fields carried, fields synthesised)
PAIRS = [("wds", "arrow", ["label", "caption"], ["embedding", "boxes"]),
         ("wds", "parquet", ["label", "caption"], ["embedding", "boxes"]),
         ("files", "wds", ["label", "embedding", "boxes"], ["caption"]),
         ("arrow", "files", ["label", "caption", "embedding", "boxes"], []),
         ("parquet", "wds", ["label", "caption", "embedding", "boxes"], [])]


@pytest.mark.parametrize(("src", "layout", "carried", "made"), PAIRS,
                         ids=[f"{s}-{d}" for s, d, *_ in PAIRS])
def test_images_are_byte_identical_and_fields_carried(
        sources: dict[str, Path], tmp_path: Path, src: str, layout: str, carried: list[str],
        made: list[str]) -> None:
    report = reexport(candidate(layout), tmp_path / "out", str(sources[src]), jobs=2)
    assert [n for n, _ in report.fields.carried] == carried
    assert list(report.fields.synthesised) == made
    before, after = samples(sources[src]), samples(tmp_path / "out")
    assert len(after) == len(before) == report.samples
    assert [r.image for r in after] == [r.image for r in before]
    assert {r.codec for r in after} == {"jpeg"}
    for a, b in zip(before, after, strict=True):
        have, got = parsed(a), parsed(b)
        assert {k: got[k] for k in carried} == {k: have[k] for k in carried}
        assert set(got) == {"label", *EXTRA}
    # Keys are renumbered as generate names samples.
    assert [r.key.rpartition("/")[2] for r in after] == [f"{i:08d}" for i in range(len(after))]


def test_acceptance_arrow_candidate_of_a_before_export(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """formats/arrow.toml from a before-like export (WebDataset: .jpg + .cls), --samples 500."""
    src = tmp_path / "before"
    generate(tiny_spec("wds", shard_samples=400), src, samples=520, jobs=2)
    out = tmp_path / "arrow-real"
    rc = main(["generate", str(REPO / "formats" / "arrow.toml"), str(out), "--from", str(src),
               "--samples", "500"])
    printed = capsys.readouterr().out
    assert rc == 0
    before, after = samples(src)[:500], samples(out)
    assert [r.image for r in after] == [r.image for r in before]
    assert [r.fields["label"] for r in after] == [int(r.fields["cls"]) for r in before]
    assert "  carried: label (from .cls)\n" in printed
    assert "  synthesised (not in the source): caption, embedding, boxes\n" in printed
    assert "  dropped (not in the definition): none\n" in printed
    assert "the first 500 samples in its unit order" in printed
    assert "definition's image settings (codec, quality, sizes) are not applied" in printed
    assert len(list(out.glob("*.arrow"))) == 1


def test_same_inputs_give_byte_identical_exports_for_any_job_count(
        sources: dict[str, Path], tmp_path: Path) -> None:
    spec = candidate("parquet")
    for name, jobs in (("a", 1), ("b", 3)):
        reexport(spec, tmp_path / name, str(sources["wds"]), samples=11, seed=5, jobs=jobs)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    reexport(spec, tmp_path / "c", str(sources["wds"]), samples=11, seed=6, jobs=1)
    a, c = samples(tmp_path / "a"), samples(tmp_path / "c")
    # Another seed: the same images and carried fields, other synthesised ones.
    assert [r.image for r in a] == [r.image for r in c]
    assert [r.fields["label"] for r in a] == [r.fields["label"] for r in c]
    assert all(x.fields["embedding"] != y.fields["embedding"] for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize(("layout", "victim"), [("wds", "shard-000002.tar"),
                                                ("files", "000001/00000004.jpg")])
def test_rerun_completes_a_deleted_unit(sources: dict[str, Path], tmp_path: Path, layout: str,
                                        victim: str) -> None:
    spec = candidate(layout)
    reexport(spec, tmp_path / "ref", str(sources["parquet"]), samples=9, jobs=1)
    out = tmp_path / "out"
    reexport(spec, out, str(sources["parquet"]), samples=9, jobs=2)
    (out / victim).unlink()
    stale = (out / victim).with_name(f".{Path(victim).name}.tmp99999")
    stale.write_bytes(b"half-written")
    report = reexport(spec, out, str(sources["parquet"]), samples=9, jobs=2)
    assert (report.units_written, report.units_skipped, report.samples_written) == (1, 2, 3)
    assert not stale.exists()
    assert tree(out) == tree(tmp_path / "ref")


def test_samples_takes_the_first_n_in_unit_order(sources: dict[str, Path],
                                                  tmp_path: Path) -> None:
    # 7 of shards of 5: the second source shard is cut; output units of 3 straddle both.
    report = reexport(candidate("arrow", CAPTION, unit=3), tmp_path / "out",
                      str(sources["wds"]), samples=7, jobs=2)
    assert report.subset == "the first 7 samples in its unit order"
    before, after = samples(sources["wds"])[:7], samples(tmp_path / "out")
    assert [r.image for r in after] == [r.image for r in before]
    assert [r.fields["caption"] for r in after] == [r.fields["txt"].decode() for r in before]


def test_manifest_records_the_provenance(sources: dict[str, Path], tmp_path: Path) -> None:
    reexport(candidate("arrow", {}), tmp_path / "out", str(sources["files"]), samples=4, jobs=1)
    manifest = json.loads((tmp_path / "out" / base.MANIFEST).read_text())
    assert manifest["complete"] is True and manifest["samples"] == 4
    assert manifest["source"] == {
        "path": str(sources["files"].resolve()), "layout": "files", "samples": 4,
        "subset": "the first 4 samples in its unit order", "units": 4,
        "images": {"codec": "jpeg", "copied": "byte for byte, as stored"},
        "fields": {"carried": {"label": ".json['label']"}, "synthesised": [],
                   "dropped": ["embedding", "boxes"]}}


# --- fields: names and matching -----------------------------------------------------------

def _raw(fields: dict[str, Any], encodings: dict[str, str]) -> base.RawSample:
    return base.RawSample("k", "src", b"", "jpeg", fields, encodings)


def test_member_names_drop_their_encoding_suffix_and_documents_give_their_keys() -> None:
    raw = _raw({"cls": b"3", "emb.f32": b"", "caption.json": b'"x"', "json": b'{"a": 1, "b": 2}',
                "meta.bin": b""},
               {"cls": base.ENC_INT_TEXT, "emb.f32": base.ENC_F32, "caption.json": base.ENC_JSON,
                "json": base.ENC_JSON, "meta.bin": base.ENC_BYTES})
    names = [(f.name, f.stored_as) for f in source_fields(raw, "wds")]
    assert names == [("caption", ".caption.json"), ("cls", ".cls"), ("emb", ".emb.f32"),
                     ("a", ".json['a']"), ("b", ".json['b']"), ("meta.bin", ".meta.bin")]
    columns = _raw({"label": 1, "json": "{}"}, {"label": base.ENC_VALUE, "json": base.ENC_JSON})
    assert [f.stored_as for f in source_fields(columns, "parquet")] == ["json", "label"]


def test_same_name_first_then_the_alias_then_the_definitions_own_member() -> None:
    spec = parse_spec({"name": "t", "layout": "arrow", "fields": {
        "label": {"type": "int"}, "cls": {"type": "int"}, "caption": {"type": "string"},
        "note": {"type": "string", "ext": "remark"}}}, "t")
    found = [SourceField(n, n) for n in ("cls", "txt", "remark", "extra")]
    plan = plan_fields(spec, found)
    # cls keeps its own name; label's alias is then taken, so label is synthesised.
    assert [(n, s.name) for n, s in plan.carried] == [("cls", "cls"), ("caption", "txt"),
                                                       ("note", "remark")]
    assert plan.synthesised == ("label",) and plan.dropped == ("extra",)
    alias = plan_fields(spec, [SourceField("label", "label")])
    assert [(n, s.name) for n, s in alias.carried] == [("label", "label")]
    only_cls = parse_spec({"name": "t", "layout": "arrow", "fields": {"cls": {"type": "int"}}},
                          "t")
    reverse = plan_fields(only_cls, [SourceField("label", "label")])
    assert [(n, s.name) for n, s in reverse.carried] == [("cls", "label")]


# --- refusals -----------------------------------------------------------------------------

def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    capsys.readouterr()
    assert main(["generate", *argv]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", *needles)


def _definition(tmp: Path, layout: str = "arrow", fields: str = "") -> str:
    path = tmp / f"{layout}.toml"
    path.write_text(f'name = "c"\nlayout = "{layout}"\n[fields.label]\ntype = "int"\n{fields}')
    return str(path)


def test_refusals_are_one_line_and_write_nothing(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _definition(tmp_path)
    out = str(tmp_path / "out")
    _refused([d, out, "--from", str(sources["wds"]), "--samples", "13"], capsys,
             "--samples 13 is more than the 12 samples", str(sources["wds"]))
    _refused([d, out, "--from", str(tmp_path / "nope")], capsys, "nope",
             "no such file or directory")
    _refused([d, str(sources["wds"] / "sub"), "--from", str(sources["wds"])], capsys,
             "inside the source")
    embedding = '[fields.embedding]\ntype = "embedding"\ndim = 4\n'
    _refused([_definition(tmp_path, "wds", embedding), out, "--from", str(sources["files"])],
             capsys, "00000000.json [sample 000000/00000000]", "holds 8 numbers", "dim = 4")
    assert not (tmp_path / "out").exists()


def test_a_source_of_two_layouts_is_read_as_the_one_named_and_the_rest_said(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(sources["wds"], mixed)
    shutil.copytree(sources["files"], mixed / "more")  # 7 samples as .jpg + .json files
    (mixed / MANIFEST).unlink()  # not one export any more: its layout is detected
    d, out = _definition(tmp_path), tmp_path / "out"
    _refused([d, str(out), "--from", str(mixed)], capsys, "mixed layouts", "--layout")
    _refused([d, str(out), "--layout", "wds"], capsys, "--layout", "--from")
    assert not out.exists()
    assert main(["generate", d, str(out), "--from", str(mixed), "--layout", "wds"]) == 0
    text = capsys.readouterr().out
    assert [s.key for s in samples(out)] == [s.key for s in samples(sources["wds"])]
    assert "(wds), all 12 samples" in text
    assert "not read: 14 files under the source that wds does not read" in text


def test_a_bad_source_sample_stops_with_one_line_naming_it(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    jpg = samples(sources["wds"])[0].image
    write_tar(src / "a.tar", [("s1.jpg", jpg), ("s1.cls", b"1"), ("s2.jpg", jpg),
                              ("s2.cls", b"two")])
    d = _definition(tmp_path)
    _refused([d, str(tmp_path / "o1"), "--from", str(src)], capsys,
             "a.tar [sample s2]", "field 'cls' (.cls)")
    # A shard that breaks off mid-sample: named with the last complete sample.
    data = (src / "a.tar").read_bytes()
    (src / "a.tar").write_bytes(data[:512 * 5])
    _refused([d, str(tmp_path / "o2"), "--from", str(src)], capsys, "a.tar", "truncated")
    (src / "a.tar").write_bytes(b"not a tar at all" * 64)
    _refused([d, str(tmp_path / "o3"), "--from", str(src)], capsys, "a.tar", "not a tar")
    # Written so far: whole units only; no temporaries.
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]


def test_a_different_source_is_refused_where_a_re_export_was_written(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, out = _definition(tmp_path), str(tmp_path / "out")
    assert main(["generate", d, out, "--from", str(sources["wds"]), "--samples", "3"]) == 0
    _refused([d, out, "--from", str(sources["parquet"]), "--samples", "3"], capsys,
             "holds a different export (definition, seed, sample count or source)")
    _refused([d, out, "--samples", "3"], capsys, "holds a different export")


@pytest.mark.usefixtures("forked_writers")
def test_a_worker_that_cannot_open_the_source_stops_the_run(
        sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The source gone between the parent's look and a writer's (a forked one, or this
    process when one writer does it all): an error, not a pool that starts its failing
    workers again forever."""
    real, looks = open_export, []

    def gone_in_workers(path: str, layout: str | None = None) -> Any:
        looks.append(path)
        if len(looks) > 1:  # the parent's look is the first
            raise DsbenchError("no such file or directory", path=path)
        return real(path, layout)

    monkeypatch.setattr("dsbench.adapters.open_export", gone_in_workers)
    _refused([_definition(tmp_path), str(tmp_path / "out"), "--from", str(sources["wds"]),
              "--jobs", "2"], capsys, str(sources["wds"]), "no such file or directory")


def test_a_round_trip_gives_back_the_source_shards_byte_for_byte(
        sources: dict[str, Path], tmp_path: Path) -> None:
    """wds -> arrow -> wds with the source's own definition: the same tar shards."""
    spec = tiny_spec("wds", CAPTION, shard_samples=5)
    reexport(candidate("arrow"), tmp_path / "arrow", str(sources["wds"]), jobs=1)
    reexport(spec, tmp_path / "back", str(tmp_path / "arrow"), jobs=2)
    shards = sorted(p.name for p in sources["wds"].glob("*.tar"))
    assert shards == sorted(p.name for p in (tmp_path / "back").glob("*.tar"))
    assert all((sources["wds"] / s).read_bytes() == (tmp_path / "back" / s).read_bytes()
               for s in shards)
