"""generate for token ids: a definition's [tokens] table makes documents of Zipf-distributed ids
of log-normal lengths, written in each layout that stores token ids, read back id for id; and
`generate --from` re-lays a token export written by a library, copying every id as stored."""

from __future__ import annotations

import dataclasses
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
from dsbench.export.payloads import TOKEN_LAYOUTS, TokensSpec
from dsbench.export.reexport import reexport
from dsbench.export.spec import load_spec, parse_spec
from dsbench.export.synth import make_sample, make_tokens
from dsbench.loader.pipeline import parse_fields

DEFINITION: dict[str, Any] = {
    "name": "tokens-test", "samples": 30, "shard_samples": 10, "fields_as": "json",
    "tokens": {"vocab": 50_000, "median_length": 120, "max_length": 600},
    "fields": {"doc_id": {"type": "int", "classes": 1_000_000}}}


def _spec(layout: str, **more: Any) -> Any:
    return parse_spec({**DEFINITION, "layout": layout, **more}, "tokens-test.toml")


@pytest.mark.parametrize("layout", TOKEN_LAYOUTS)
def test_a_token_definition_is_written_in_each_layout_and_read_back_id_for_id(
        layout: str, tmp_path: Path, private_tmp: Path) -> None:
    spec = _spec(layout)
    export, samples = written_back(spec, tmp_path / layout)
    for i, raw in enumerate(samples):
        made = make_sample(spec, 3, i)
        ids = base.token_ids(raw.image)
        assert raw.codec == base.TOKENS and ids.dtype == np.uint16
        assert np.array_equal(ids, made["input_ids"]), (layout, i)
        assert parse_fields(raw)["doc_id"] == made["doc_id"]
    s = summarize(export.survey(), tmp_path / layout, export.ignored, export)
    assert s["sample"]["kind"] == "tokens" and s["bad_samples"] == 0


def test_documents_follow_the_definitions_lengths_and_zipf_law() -> None:
    t = TokensSpec(vocab=50_000, zipf=1.1, median_length=400, sigma=1.0, min_length=16,
                   max_length=8192)
    docs = [make_tokens(t, np.random.default_rng([0, i])) for i in range(2000)]
    lengths = np.array([len(d) for d in docs])
    assert lengths.min() >= 16 and lengths.max() <= 8192
    assert 360 <= np.median(lengths) <= 440  # log-normal around the median asked for
    ids = np.concatenate(docs)
    assert ids.dtype == np.uint16 and ids.max() < 50_000
    # Zipf's law: id 0 (rank 1) is drawn 2^1.1 times as often as id 1 (rank 2).
    counts = np.bincount(ids, minlength=2)
    assert counts[0] / counts[1] == pytest.approx(2 ** 1.1, rel=0.05)


@pytest.mark.parametrize("layout", ["parquet", "litdata"])
def test_generate_from_a_libraries_token_export_copies_every_id_and_carries_the_doc_id(
        layout: str, tmp_path: Path, private_tmp: Path) -> None:
    source = tokenlibs.write("mds-tokens", tmp_path)
    spec = _spec(layout)
    reexport(spec, tmp_path / "out", str(source), jobs=1)
    export = adapters.open_export(tmp_path / "out")
    samples = list(export.read())
    assert len(samples) == tokenlibs.SAMPLES
    for i, raw in enumerate(samples):
        assert np.array_equal(base.token_ids(raw.image), tokenlibs.tokens(i))
        assert base.token_ids(raw.image).dtype == np.uint16
        assert parse_fields(raw)["doc_id"] == tokenlibs.doc_id(i)


@pytest.mark.parametrize("more,needle", [
    ({"image": {"codec": "jpeg"}}, "one of an image, token ids, an audio clip or text"),
    ({"layout": "lance"},
     "dsbench writes token ids in wds, files, arrow, parquet, mds, litdata, hf, not lance"),
    ({"tokens": {"vocab": 70_000}}, "tokens.vocab: 70000 is out of range"),
    ({"tokens": {"dtype": "float32"}}, "tokens.dtype: 'float32' is not one of"),
    ({"tokens": {"median_length": 5, "min_length": 16}}, "tokens.median_length: 5 is out of"),
    ({"fields": {"input_ids": {"type": "int"}}}, "other than 'image', 'key', 'input_ids'")])
def test_a_bad_token_definition_names_its_key(more: dict[str, Any], needle: str) -> None:
    data = {**DEFINITION, "layout": "mds", **more}
    with pytest.raises(DsbenchError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(data, "tokens-test.toml")


def test_generate_from_refuses_a_definition_of_the_other_kind_in_one_line(
        tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tokenlibs.write("mds-tokens", tmp_path)
    assert main(["generate", "parquet", str(tmp_path / "a"), "--from", str(source)]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "carry token ids",
                          "use a definition with [tokens]")
    assert not (tmp_path / "a").exists()


def test_the_shipped_token_definition_loads() -> None:
    spec = load_spec("tokens")
    assert spec.tokens is not None and spec.layout in TOKEN_LAYOUTS
    assert dataclasses.asdict(spec.tokens)["dtype"] == "uint16"


# Writes and measures three sides, 25 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_advise_relays_a_token_export_in_the_layouts_that_hold_token_ids(
        tmp_path: Path, private_tmp: Path) -> None:
    # advise on a library's MDS token export: the candidates carry the ids as stored (uint16)
    # and the doc id; the layouts that hold no token ids are said not tried, and why.
    import json

    from dsbench.results import schema

    source = tokenlibs.write("mds-tokens", tmp_path)
    out = tmp_path / "advice.json"
    assert main(["advise", str(source), "--layouts", "parquet,litdata,lance",
                 "--shard-sizes", "64MB", "--compressions", "none", "--budget", "6s",
                 "--batch-size", "8", "--seq-len", "128", "--exact", "--json", str(out),
                 "--write-definition", str(tmp_path / "advised.toml")]) == 0
    doc = json.loads(out.read_text())
    schema.validate(doc, "advice")
    assert [n["layout"] for n in doc["not_tried"]] == ["lance"]
    assert {r["name"].split("-")[0] for r in doc["table"][1:]} == {"parquet", "litdata"}
    assert all(r["definition"]["tokens"]["dtype"] == "uint16" for r in doc["table"][1:])
    # The exact pass (a user's default) counts every side as a token pipeline (it decoded the ids
    # as an image and failed before).
    assert all(r["measured"]["instructions_per_sample"] > 0 for r in doc["table"])


def test_a_token_candidates_definition_loads_back_as_the_same_writer(
        tmp_path: Path, private_tmp: Path) -> None:
    from dsbench.advise import definition, kinds
    from dsbench.advise.fields import found_fields
    from dsbench.export.reexport import first_samples

    source = tokenlibs.write("mds-tokens", tmp_path)
    export = adapters.open_export(source)
    raws = first_samples(export, 8, str(source))
    cands, skipped = kinds.candidates(found_fields(raws[0], export.layout), raws, "mds", 120,
                                     ("wds", "parquet", "mds", "litdata", "hf", "tfrecord"),
                                     (64_000_000,))
    assert [s.layout for s in skipped] == ["tfrecord"]
    for c in cands:
        assert c.spec.tokens is not None and c.spec.tokens.dtype == "uint16"
        path = tmp_path / f"{c.name}.toml"
        path.write_text(definition.to_toml(c.spec, "a token candidate"))
        assert definition.same_writer(c.spec, load_spec(path)), c.name
