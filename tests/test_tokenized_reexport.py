"""Tokenizing before the export: `generate --from` a text export (written by datasets and
MosaicML Streaming) with a token definition writes each text's ids as the job's tokenizer (or
the BPE bench trains) gives them; `advise` on a text export weighs the texts as stored against
their ids, every side tokenized by one tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tokenlibs
from layouts import assert_one_line_error

from dsbench import adapters
from dsbench.adapters import base
from dsbench.adapters.tokenizer import encoder, from_file, trained
from dsbench.advise import definition, kinds
from dsbench.advise.fields import found_fields
from dsbench.cli import main
from dsbench.export.reexport import first_samples
from dsbench.export.spec import load_spec

DEFINITION = """name = "pretokenized"
layout = "parquet"
samples = 120
shard_samples = 50

[tokens]
dtype = "{dtype}"

[fields.doc_id]
type = "int"
"""


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("texts")
    out = {k: tokenlibs.write(k, root) for k in ("hf-text", "mds-text", "mds-tokens")}
    # The job's own tokenizer: a BPE of another size, trained on other texts than bench's.
    spec = trained((tokenlibs.text(i) for i in range(40)), vocab=600)
    (root / "tokenizer.json").write_text(spec.json)
    out["tokenizer"] = root / "tokenizer.json"
    return out


def _definition(tmp_path: Path, dtype: str = "uint16") -> Path:
    path = tmp_path / f"pretokenized-{dtype}.toml"
    path.write_text(DEFINITION.format(dtype=dtype))
    return path


def _ids(path: Path) -> list[np.ndarray]:
    return [base.token_ids(r.image) for r in adapters.open_export(path).read()]


def test_generate_from_text_writes_the_ids_the_jobs_tokenizer_gives(
        texts: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ids"
    assert main(["generate", str(_definition(tmp_path)), str(out), "--from",
                 str(texts["hf-text"]), "--tokenizer", str(texts["tokenizer"])]) == 0
    said = capsys.readouterr().out
    assert f"token ids (uint16): tokenized by --tokenizer {texts['tokenizer']}" in said
    encode = encoder(texts["tokenizer"].read_text())
    got = _ids(out)
    assert len(got) == tokenlibs.SAMPLES
    for i, ids in enumerate(got):
        assert ids.dtype == np.uint16
        assert np.array_equal(ids, encode(tokenlibs.text(i))), i
    doc_ids = [r.fields["doc_id"] for r in adapters.open_export(out).read()]
    assert doc_ids == [tokenlibs.doc_id(i) for i in range(tokenlibs.SAMPLES)]


def test_generate_from_text_without_a_tokenizer_trains_the_bpe_bench_trains(
        texts: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "ids"
    assert main(["generate", str(_definition(tmp_path, "uint32")), str(out), "--from",
                 str(texts["mds-text"])]) == 0
    # bench's default: a BPE trained on the export's first texts (tokenize.settled).
    bench = trained(tokenlibs.text(i) for i in range(tokenlibs.SAMPLES))
    encode = encoder(bench.json)
    got = _ids(out)
    assert all(ids.dtype == np.uint32 for ids in got)
    assert all(np.array_equal(ids, encode(tokenlibs.text(i))) for i, ids in enumerate(got))


def test_a_tokenizer_that_cannot_apply_is_one_line(
        texts: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tokenizers import Tokenizer, models

    tokenizer = ["--tokenizer", str(texts["tokenizer"])]
    assert main(["generate", str(_definition(tmp_path)), str(tmp_path / "a"), *tokenizer]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "--tokenizer tokenizes a text "
                          "source (--from)")
    assert main(["generate", str(_definition(tmp_path)), str(tmp_path / "b"), "--from",
                 str(texts["mds-tokens"]), *tokenizer]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "--tokenizer tokenizes a text "
                          "source", str(texts["mds-tokens"]))
    # 71 words numbered up to 70,000: its largest id, not its size, is what uint16 must hold.
    sparse = tmp_path / "sparse.json"
    Tokenizer(models.WordLevel({f"w{i}": 1000 * i for i in range(71)}, unk_token="w0")).save(
        str(sparse))
    assert main(["generate", str(_definition(tmp_path)), str(tmp_path / "c"), "--from",
                 str(texts["hf-text"]), "--tokenizer", str(sparse)]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "70,001 ids do not fit uint16",
                          'dtype = "uint32"')
    # A text no tokenizer can take, met while training one: named, as the loader names it.
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "part-00000.jsonl").write_text(json.dumps({"text": "fine"}) + "\n"
                                           + json.dumps({"text": "bad \ud800 here"}) + "\n")
    assert main(["generate", str(_definition(tmp_path)), str(tmp_path / "d"), "--from",
                 str(lone)]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "part-00000.jsonl",
                          "surrogate")
    assert not any((tmp_path / d).exists() for d in "abcd")


def test_a_text_exports_candidates_hold_its_texts_and_again_its_ids(
        texts: dict[str, Path], tmp_path: Path) -> None:
    export = adapters.open_export(texts["mds-text"])
    raws = first_samples(export, 8, str(texts["mds-text"]))
    spec = from_file(str(texts["tokenizer"]))
    cands, skipped = kinds.candidates(found_fields(raws[0], export.layout), raws, "mds", 120,
                                     ("jsonl", "parquet", "mds", "megatron"), (64_000_000,),
                                     ("none",), tokenizer=spec)
    names = [c.name for c in cands]
    assert names == ["jsonl-64MB", "parquet-64MB", "mds-64MB", "parquet-64MB-tokens",
                     "mds-64MB-tokens"]
    assert [(s.layout, s.why) for s in skipped] == [
        ("megatron", "dsbench writes neither text nor token ids in megatron"),
        ("jsonl", "dsbench does not write token ids in jsonl")]
    for c in cands:
        assert (c.spec.kind, c.name.endswith("-tokens")) in (("text", False), ("tokens", True))
        if c.spec.tokens:  # 600 ids: uint16, and the tokenizer named
            assert c.spec.tokens.dtype == "uint16" and "--tokenizer" in c.what
        path = tmp_path / f"{c.name}.toml"
        path.write_text(definition.to_toml(c.spec, "a text candidate"))
        assert definition.same_writer(c.spec, load_spec(path)), c.name


# Writes two candidates, measures three sides and counts them under valgrind (~40 s): with the
# slow tests (CI runs them).
@pytest.mark.slow
def test_advise_weighs_tokenizing_before_the_export(texts: dict[str, Path],
                                                   tmp_path: Path) -> None:
    out, toml = tmp_path / "advice.json", tmp_path / "advised.toml"
    assert main(["advise", str(texts["mds-text"]), "--layouts", "parquet",
                 "--shard-sizes", "64MB", "--compressions", "none", "--budget", "8s",
                 "--batch-size", "8", "--seq-len", "128", "--exact",
                 "--tokenizer", str(texts["tokenizer"]), "--json", str(out),
                 "--write-definition", str(toml)]) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["tokenizer"]["file"] == str(texts["tokenizer"])
    rows = {r["name"]: r for r in doc["table"]}
    assert set(rows) == {"baseline", "parquet-64MB", "parquet-64MB-tokens"}
    # Counted exactly: the ids stored skip the tokenizing that every text side does.
    counted = {n: r["measured"]["instructions_per_sample"] for n, r in rows.items()}
    assert counted["parquet-64MB-tokens"] < counted["parquet-64MB"] / 2
    assert counted["parquet-64MB-tokens"] < counted["baseline"] / 2
    if doc["recommendation"]["winner"] == "parquet-64MB-tokens":
        assert f"--tokenizer {texts['tokenizer']}" in toml.read_text()
