"""generate for raw text: a definition's [text] table makes documents of made-up words (Zipf's
law over a fixed vocabulary, sentences of 8 to 20 words, log-normal lengths), written in JSON
Lines and each layout that stores a string per sample, read back character for character; and
`generate --from` re-lays a text export a library wrote, copying each text as stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenlibs
from layouts import assert_one_line_error, written_back

from dsbench import adapters
from dsbench.adapters import base
from dsbench.adapters.survey import summarize
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.generate import generate
from dsbench.export.payloads import TEXT_LAYOUTS, TextSpec
from dsbench.export.reexport import reexport
from dsbench.export.spec import load_spec, parse_spec
from dsbench.export.synth import make_sample, make_text
from dsbench.loader.pipeline import parse_fields

DEFINITION: dict[str, Any] = {
    "name": "text-test", "samples": 12, "shard_samples": 5, "fields_as": "json",
    "text": {"median_words": 60, "max_words": 400},
    "fields": {"doc_id": {"type": "int", "classes": 1_000_000}}}


def _spec(layout: str) -> Any:
    return parse_spec({**DEFINITION, "layout": layout}, "text-test.toml")


@pytest.mark.parametrize("layout", TEXT_LAYOUTS)
def test_a_text_definition_is_written_in_each_layout_and_read_back_as_written(
        layout: str, tmp_path: Path, private_tmp: Path) -> None:
    spec = _spec(layout)
    export, samples = written_back(spec, tmp_path / layout)
    for i, raw in enumerate(samples):
        made = make_sample(spec, 3, i)
        assert raw.codec == base.TEXT
        assert base.text_of(raw.image) == made["text"], (layout, i)
        assert parse_fields(raw)["doc_id"] == made["doc_id"]
    s = summarize(export.survey(), tmp_path / layout, export.ignored, export)
    assert s["sample"]["kind"] == "text" and s["bad_samples"] == 0


def test_documents_follow_the_definitions_lengths_in_sentences() -> None:
    t = TextSpec(median_words=300, sigma=0.8, min_words=8, max_words=20_000)
    docs = [make_text(t, np.random.default_rng([0, i])) for i in range(400)]
    words = np.array([len(d.split()) for d in docs])
    assert words.min() >= 8 and words.max() <= 20_000
    assert 260 <= np.median(words) <= 340  # log-normal around the median asked for
    for d in docs[:20]:
        sentences = d.split(". ")
        assert d.endswith(".") and all(s[0].isupper() for s in sentences)
        # 8 to 20 words, but the last: what is left of the document's words.
        assert all(8 <= len(s.split()) <= 20 for s in sentences[:-1])
        assert len(sentences[-1].split()) <= 20


def test_a_jsonl_export_is_the_same_however_many_jobs_wrote_it_and_a_cut_unit_is_rewritten(
        tmp_path: Path, private_tmp: Path) -> None:
    spec = _spec("jsonl")
    generate(spec, tmp_path / "one", seed=3, jobs=1)
    generate(spec, tmp_path / "two", seed=3, jobs=2)
    units = sorted(p.name for p in (tmp_path / "one").glob("*.jsonl"))
    assert len(units) == 3
    for name in units:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    # A unit cut at a line's end ends as a whole one does: its lines are counted on a re-run.
    cut = tmp_path / "two" / units[1]
    whole = cut.read_bytes()
    cut.write_bytes(b"".join(whole.splitlines(keepends=True)[:2]))
    report = generate(spec, tmp_path / "two", seed=3, jobs=1)
    assert report.units_written == 1 and cut.read_bytes() == whole


@pytest.mark.parametrize("kind,layout", [("mds-text", "jsonl"), ("text-jsonl", "parquet")])
def test_generate_from_a_libraries_text_export_copies_every_text_and_the_doc_id(
        kind: str, layout: str, tmp_path: Path, private_tmp: Path) -> None:
    source = tokenlibs.write(kind, tmp_path)
    reexport(_spec(layout), tmp_path / "out", str(source), jobs=1)
    samples = list(adapters.open_export(tmp_path / "out").read())
    assert len(samples) == tokenlibs.SAMPLES
    for i, raw in enumerate(samples):
        assert base.text_of(raw.image) == tokenlibs.text(i)
        assert parse_fields(raw)["doc_id"] == tokenlibs.doc_id(i)


@pytest.mark.parametrize("more,needle", [
    ({"image": {"codec": "jpeg"}}, "one of an image, token ids, an audio clip or text"),
    ({"text": {"median_words": 5}}, "text.median_words: 5 is out of range"),
    ({"text": {"words": 5}}, "text.words: unknown key"),
    ({"fields": {"text": {"type": "string"}}}, "fields.text: a text export's payload"),
    ({"layout": "jsonl", "text": None}, "layout: jsonl holds documents' text only"),
    ({"layout": "jsonl", "fields": {"id": {"type": "int"}}}, "fields.id: a JSON Lines"),
    ({"layout": "jsonl", "fields": {"e": {"type": "embedding", "dim": 4}}},
     "fields.e.encoding: JSON Lines stores an embedding as a JSON list"),
    ({"layout": "wds", "fields_as": "members",
      "fields": {"lang": {"type": "string", "ext": "lang.txt"}}},
     "fields.lang.ext: member extension 'lang.txt' ends as the text's member does"),
    ({"text": {"max_words": 10**6}}, "text.max_words: 1000000 is out of range")])
def test_a_bad_text_definition_names_its_key(more: dict[str, Any], needle: str) -> None:
    data = {**DEFINITION, "layout": "mds", **more}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(DsbenchError, match=needle):
        parse_spec(data, "text-test.toml")


def test_a_bad_text_definition_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.toml").write_text('name = "t"\nlayout = "jsonl"\n[tokens]\n')
    assert main(["generate", str(tmp_path / "t.toml"), str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "t.toml", "layout: jsonl holds "
                          "documents' text only")
    assert not (tmp_path / "out").exists()


def test_a_source_text_no_writer_can_store_is_one_line(
        tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"text": "fine"}\n{"text": "bad \\ud800"}\n')
    assert main(["generate", "text", str(tmp_path / "out"), "--from",
                 str(tmp_path / "src")]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "a.jsonl", "cannot read its "
                          "text")


def test_generate_from_refuses_a_definition_of_another_kind_in_one_line(
        tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (A token definition tokenizes the texts: tests/test_tokenized_reexport.py.)
    source = tokenlibs.write("text-jsonl", tmp_path)
    for other in ("speech", "before"):
        assert main(["generate", other, str(tmp_path / other), "--from", str(source)]) == 2
        assert_one_line_error(capsys.readouterr().err, "generate", "carry text",
                              "use a definition with [text]")
        assert not (tmp_path / other).exists()


def test_the_shipped_text_definition_loads() -> None:
    spec = load_spec("text")
    assert spec.text is not None and spec.layout == "jsonl"
