"""Samples of raw text: exports written by each library itself (tests/tokenlibs.py) are
inspected, read character for character, and benchmarked with the text tokenized in the loader
workers by a real tokenizer (Hugging Face tokenizers: trained on the export's own texts, or the
job's own file), then cropped to sequences like token samples."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import tokenlibs
from layouts import assert_one_line_error

from dsbench import adapters
from dsbench.adapters import base, tokenizer
from dsbench.adapters.survey import summarize
from dsbench.cli import main
from dsbench.loader.options import BenchOptions
from dsbench.loader.pipeline import parse_fields
from dsbench.loader.runner import run_benches
from dsbench.report.bench import render
from dsbench.results import schema

KINDS = ("text-jsonl", "mds-text", "hf-text", "parquet-text", "wds-text", "litdata-text",
         "lance-text", "tfrecord-text")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("text")
    return {k: tokenlibs.write(k, root) for k in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_every_text_is_read_as_written(kind: str, exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports[kind])
    samples = list(export.read())
    assert [raw.codec for raw in samples] == [base.TEXT] * tokenlibs.SAMPLES
    # As stored: a str, or its UTF-8 bytes (an MDS str column), decoded in the decode stage.
    assert [base.text_of(raw.image) for raw in samples] == [
        tokenlibs.text(i) for i in range(len(samples))]
    if kind in ("wds-text", "litdata-text", "lance-text", "tfrecord-text"):  # ...as the
        # library reads them back
        assert [base.text_of(raw.image).encode() for raw in samples] == [
            bytes(b) for b in tokenlibs.read_back(kind, exports[kind])]
    assert [parse_fields(raw)["doc_id"] for raw in samples] == [
        tokenlibs.doc_id(i) for i in range(len(samples))]
    s = summarize(export.survey(), exports[kind], export.ignored, export)
    assert s["sample"] == {"kind": "text", "field": "txt" if kind == "wds-text" else "text"}
    assert s["bad_samples"] == 0
    chars = [len(tokenlibs.text(i)) for i in range(s["text"]["count_checked"])]
    assert (s["text"]["chars_per_sample"]["min"], s["text"]["chars_per_sample"]["max"]) == (
        min(chars), max(chars))


def test_a_trained_tokenizer_encodes_and_decodes_the_exports_text_exactly() -> None:
    texts = [tokenlibs.text(i) for i in range(tokenlibs.SAMPLES)]
    spec = tokenizer.trained(texts, vocab=512)
    assert 256 < spec.vocab_size <= 512 and spec.source.endswith("first 120 texts of the export")
    encode = tokenizer.encoder(spec.json)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(spec.json)
    for t in texts[:10]:
        ids = encode(t)
        assert ids.dtype.kind == "u" and 0 < len(ids) < len(t.encode())  # merges learned
        assert tok.decode(ids.tolist()) == t


def test_text_is_tokenized_in_the_workers_and_cropped(exports: dict[str, Path],
                                                      tmp_path: Path) -> None:
    # JSON Lines and a `datasets` text column, each with the tokenizer trained on its texts
    # and with the job's own file; the `datasets` one through the library's reader too: all in
    # one interleaved run.
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=4, warmup_batches=1,
                        seq_len=128, exact=False)
    own = tmp_path / "tokenizer.json"
    own.write_text(tokenizer.trained([tokenlibs.text(i) for i in range(40)], vocab=300).json)
    sides = [("text-jsonl", opts, "first 120 texts"),
             ("text-jsonl", dataclasses.replace(opts, tokenizer=str(own)), f"--tokenizer {own}"),
             ("hf-text", opts, "first 120 texts"),
             ("hf-text", dataclasses.replace(opts, backend="native"), "first 120 texts")]
    docs = run_benches([exports[k] for k, _, _ in sides], opts, each=[o for _, o, _ in sides])
    for doc, (_, _, source) in zip(docs, sides, strict=True):
        schema.validate(doc, "bench")
        cfg = doc["config"]
        assert cfg["transform"] == "TokenCrop" and cfg["seq_len"] == 128
        assert source in cfg["tokenizer"]["source"]
        (run,) = doc["runs"]
        assert run["samples"] == 16 and run["stages"]["decode"] > 0  # the tokenizing
        assert "Text samples (text), tokenized in the workers by" in " ".join(
            render(doc).split())
    assert docs[1]["config"]["tokenizer"]["vocab_size"] <= 300
    assert docs[3]["reader"]["library"] == "datasets"
    # One run, one tokenizer: the sides without a --tokenizer share the first one trained (on
    # the first export's texts), as one job tokenizes whatever export it reads.
    trained = {doc["config"]["tokenizer"]["source"] for doc in (docs[0], docs[2], docs[3])}
    assert trained == {f"a byte-level BPE trained on the first 120 texts of "
                       f"{exports['text-jsonl']}"}


def test_a_bad_json_line_is_one_line_naming_its_file_and_line(
        exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    lines = (exports["text-jsonl"] / "part-00001.jsonl").read_text().splitlines()
    lines[7] = lines[7][:25]
    (bad / "part-00001.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["bench", str(bad), "--workers", "1", "--rounds", "1", "--seconds", "0.2",
                 "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "part-00001.jsonl",
                          "[sample part-00001.jsonl:7]", "not a JSON line")


def test_a_tokenizer_file_that_is_not_one_is_one_line(exports: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    wrong = tmp_path / "tokenizer.json"
    wrong.write_text(json.dumps({"not": "a tokenizer"}))
    assert main(["bench", str(exports["text-jsonl"]), "--tokenizer", str(wrong)]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", str(wrong),
                          "not a tokenizers JSON file")


def test_litdata_arrow_rows_read_alone_as_front_to_back(exports: dict[str, Path]) -> None:
    # litdata stores items without media as rows of an Arrow file at each chunk's end: a row
    # read alone (--order random) is the one read front to back.
    export = adapters.open_export(exports["litdata-text"])
    every = {raw.key: raw for raw in export.read()}
    for unit in export.units():
        for offset in (0, export.unit_samples(unit) - 1):
            raw = export.read_at(unit, offset)
            assert raw is not None and base.text_of(raw.image) == base.text_of(
                every[raw.key].image)
            assert parse_fields(raw) == parse_fields(every[raw.key])


@pytest.mark.parametrize("how,needle", [("cut", "corrupt Arrow rows"),
                                        ("rows", "its Arrow file holds 40 rows, but the index "
                                                 "says 41")])
def test_a_damaged_litdata_arrow_chunk_is_one_line(how: str, needle: str,
                                                   exports: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    out = tmp_path / how
    shutil.copytree(exports["litdata-text"], out)
    index = json.loads((out / "index.json").read_text())
    chunk = out / index["chunks"][1]["filename"]
    data = chunk.read_bytes()
    if how == "cut":  # the Arrow file's middle gone, its length and magic kept
        chunk.write_bytes(data[:len(data) // 2] + data[-12:])
        index["chunks"][1]["chunk_bytes"] = len(data) // 2 + 12
    else:  # an index that promises a row more than the chunk holds
        import numpy as np

        head = np.frombuffer(data, "<u4", 42).copy()
        chunk.write_bytes(np.concatenate([[41], head[1:41], head[40:]]).astype("<u4").tobytes()
                          + data[4 * 42:])
        index["chunks"][1]["chunk_size"] = 41
        index["chunks"][1]["chunk_bytes"] = len(data) + 4
    (out / "index.json").write_text(json.dumps(index))
    assert main(["inspect", str(out)]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", chunk.name, needle)


# litdata's optimize calls it in a worker process: module-level, so that it pickles.
def _nested_item(i: int) -> dict[str, Any]:
    return {"text": tokenlibs.text(i), "tags": [f"t{i % 3}", "web"][: 1 + i % 2],
            "meta": {"lang": "en" if i % 4 else None, "year": 2000 + i},
            "score": None if i % 5 == 0 else float(i)}


def test_litdata_arrow_rows_keep_lists_nested_leaves_and_nulls_as_litdata_hands_them(
        tmp_path: Path) -> None:
    # Lists, a nested dict and nulls: what makes litdata store rows as Arrow. Each field as
    # litdata's own reader hands it over, a null as None (not the text "None").
    import formatlibs
    import litdata

    out = tmp_path / "nested"
    with formatlibs.litdata_caches(tmp_path / "cache"):
        litdata.optimize(fn=_nested_item, inputs=list(range(30)), output_dir=str(out),
                         chunk_size=10, num_workers=1, mode="overwrite", start_method="fork")
    theirs = litdata.StreamingDataset(str(out))
    export = adapters.open_export(out)
    samples = list(export.read())
    assert len(samples) == len(theirs) == 30
    for i, raw in enumerate(samples):
        want = theirs[i]
        assert base.text_of(raw.image) == want["text"] == tokenlibs.text(i)
        fields = parse_fields(raw)
        got = {name: fields[name] for name in fields}
        assert got["tags"] == want["tags"] and got["score"] == want["score"]
        assert got["meta.lang"] == want["meta"]["lang"] and got["meta.year"] == 2000 + i
    assert parse_fields(samples[0])["score"] is None and parse_fields(samples[4])["meta.lang"] \
        is None


def test_arrow_row_chunks_read_alone_open_each_chunk_the_same_few_times_in_any_order(
        exports: dict[str, Path]) -> None:
    # Random access to an Arrow-row chunk reads it whole: one look in place finds no item
    # bodies, then the chunk is read whole and kept, whatever the order of the samples.
    opens = []
    for order in (lambda n: range(n), lambda n: reversed(range(n))):
        export = adapters.open_export(exports["litdata-text"])
        before = base.io_counters()[0]
        for unit in export.units():
            for offset in order(export.unit_samples(unit)):
                assert export.read_at(unit, offset) is not None
        opens.append(base.io_counters()[0] - before)
        export.forget()
    assert opens[0] == opens[1] == 2 * 3


def test_a_restart_of_a_text_loader_is_audited_with_the_text_tokenized_in_its_workers(
        exports: dict[str, Path]) -> None:
    # dsbench resume on raw text: its workers tokenize each text (a BPE trained on the export's
    # first texts, as bench trains one) and crop it; without state the first K batches come
    # again, with the loader's state nothing.
    from dsbench.resume.measure import ResumeOptions, run_resume

    k, batch = 2, 8
    doc = run_resume(str(exports["text-jsonl"]), ResumeOptions(
        restart_at=k, policies=("none", "stateful"), workers=1, batch_size=batch, seq_len=64))
    schema.validate(doc, "resume")
    assert doc["settings"]["kind"] == "text"
    by = {p["policy"]: p["total"] for p in doc["policies"]}
    assert (by["none"]["replayed"], by["none"]["skipped"]) == (k * batch, 0)
    assert (by["stateful"]["replayed"], by["stateful"]["skipped"]) == (0, 0)


def test_resume_tokenizes_with_the_jobs_own_tokenizer_file_and_refuses_it_for_other_kinds(
        exports: dict[str, Path], tmp_path: Path) -> None:
    from dsbench.errors import DsbenchError
    from dsbench.resume.measure import ResumeOptions, workers_pipeline

    own = tmp_path / "tokenizer.json"
    own.write_text(tokenizer.trained([tokenlibs.text(i) for i in range(20)], vocab=300).json)
    path = str(exports["text-jsonl"])
    export = adapters.open_export(path)
    with_file = ResumeOptions(restart_at=2, tokenizer=str(own))
    given = workers_pipeline(base.TEXT, export, path, with_file)
    trained = workers_pipeline(base.TEXT, export, path, ResumeOptions(restart_at=2))
    assert given.tokenizer == own.read_text() and trained.tokenizer != given.tokenizer
    with pytest.raises(DsbenchError, match="--tokenizer tokenizes text samples, and this "
                                           "export's samples carry tokens"):
        workers_pipeline(base.TOKENS, export, path, with_file)
