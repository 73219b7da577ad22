"""advise for a packed job (`--pack`): a token stream (litdata's TokensLoader chunks, written by
litdata's own writer) is tried beside the per-document layouts, and every side is stated per
sequence, the job's sample, so that a document and a stream's block are not compared as alike
samples (advise.sequences)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenlibs

from dsbench import adapters, stats
from dsbench.adapters import base
from dsbench.advise import definition, grid, kinds
from dsbench.advise.fields import found_fields
from dsbench.advise.run import definition_of
from dsbench.advise.sequences import exact_in_sequences, in_sequences
from dsbench.analysis.compare import not_comparable
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.reexport import first_samples, reexport
from dsbench.export.spec import parse_spec
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches

SEQ_LEN = 64


@pytest.fixture(scope="module")
def megatron(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> Path:
    # Megatron's builder: documents that carry their ids alone.
    return tokenlibs.write("megatron-tokens", tmp_path_factory.mktemp("advise-pack"))


@pytest.fixture(scope="module")
def mds(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> Path:
    # MosaicML Streaming's writer: documents with a doc id beside their ids.
    return tokenlibs.write("mds-tokens", tmp_path_factory.mktemp("advise-pack-mds"))


@pytest.fixture(scope="module")
def stream(megatron: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The same documents as a TokensLoader stream, 50 a chunk, through litdata's own writer.
    spec = parse_spec({"name": "s", "layout": "litdata", "shard_samples": 50,
                       "tokens": {"stream": True}}, "s.toml")
    out = tmp_path_factory.mktemp("advise-pack-stream") / "s"
    reexport(spec, out, str(megatron), jobs=1)
    return out


def _grid(path: Path, pack: bool, seq_len: int = SEQ_LEN, sizes: tuple[int, ...] = (
        64_000_000, 1_000)) -> tuple[list[grid.Candidate], list[grid.Skipped]]:
    export = adapters.open_export(path)
    raws = first_samples(export, 20, str(path))
    return kinds.candidates(found_fields(raws[0], export.layout), raws, export.layout, 120,
                            ("mds", "litdata"), sizes, ("none",),
                            pack_len=seq_len if pack else None)


def test_a_packed_job_is_offered_the_token_stream_sized_by_its_ids(megatron: Path) -> None:
    cands, skipped = _grid(megatron, pack=True)
    streams = [c for c in cands if c.name.startswith("litdata-stream")]
    assert [c.name for c in streams] == ["litdata-stream-64MB", "litdata-stream-1kB"]
    assert all(c.spec.tokens and c.spec.tokens.stream and not c.spec.fields for c in streams)
    mean = np.mean([tokenlibs.length(i) * 2 for i in range(20)])  # uint16 ids
    assert streams[1].spec.shard_samples == round(1_000 / mean)
    assert not skipped
    # Cropped, a block is not the job's sample: no stream is tried.
    cands, _ = _grid(megatron, pack=False)
    assert not any(c.spec.tokens and c.spec.tokens.stream for c in cands)
    # A chunk of 1 kB (3 documents, about 500 ids) holds no block of 4096 ids: not tried, and
    # where no size holds one, said.
    cands, _ = _grid(megatron, pack=True, seq_len=4096)
    assert [c.name for c in cands if c.name.startswith("litdata-s")] == ["litdata-stream-64MB"]
    cands, skipped = _grid(megatron, pack=True, seq_len=4096, sizes=(1_000,))
    assert not any(c.name.startswith("litdata-s") for c in cands)
    assert [s.why for s in skipped] == ["no chunk of --shard-sizes holds a block of 4096 ids "
                                        "(--seq-len) of these 120 documents"]


def test_documents_with_fields_are_not_laid_into_a_stream_and_advise_says_why(
        mds: Path) -> None:
    cands, skipped = _grid(mds, pack=True)
    assert not any(c.spec.tokens and c.spec.tokens.stream for c in cands)
    assert [(s.layout, s.why) for s in skipped] == [
        (kinds.STREAM, "the documents carry doc_id, and a TokensLoader chunk holds the ids "
                      "alone")]


def test_a_json_lines_documents_id_is_its_key_and_its_texts_ids_make_a_stream(
        tmp_path: Path) -> None:
    from dsbench.adapters.tokenizer import texts_of, trained
    from dsbench.export.generate import generate
    from dsbench.export.spec import load_spec

    generate(load_spec("text"), tmp_path / "text", samples=30, seed=0)
    export = adapters.open_export(tmp_path / "text")
    raws = first_samples(export, 30, str(tmp_path / "text"))
    found = found_fields(raws[0], export.layout)
    assert [f.name for f in found.fields] == ["id"]
    tokenizer = trained(texts_of(raws), vocab=400)
    cands, skipped = kinds.candidates(found, raws, "jsonl", 30, ("litdata",), (64_000_000,),
                                      ("none",), tokenizer=tokenizer, pack_len=SEQ_LEN)
    stream = next(c for c in cands if c.name == "litdata-stream-64MB")
    assert stream.spec.fields == () and stream.spec.tokens == grid.TokensSpec(
        dtype="uint16", stream=True)
    assert "the texts as uint16 token ids" in stream.what and not skipped


def test_a_stream_definition_loads_back_and_refuses_what_a_stream_cannot_hold(
        megatron: Path) -> None:
    stream = next(c for c in _grid(megatron, pack=True)[0] if c.name.startswith("litdata-s"))
    text = definition.to_toml(stream.spec, "test")
    assert "stream = true" in text
    definition.check_text(stream.spec, text, "advised.toml")
    # A document-per-sample definition's manifest says nothing of streams (as before them).
    other = next(c for c in _grid(megatron, pack=True)[0] if c.name.startswith("mds"))
    assert "stream" not in other.spec.to_dict()["tokens"]
    base_def: dict[str, Any] = {"name": "s", "layout": "litdata", "tokens": {"stream": True}}
    for more, needle in (({"layout": "mds"}, "tokens.stream: a token stream is litdata's"),
                         ({"fields": {"doc_id": {"type": "int"}}},
                          "fields.doc_id: a token stream's chunks hold the ids alone"),
                         ({"compression": "zstd"}, "compression: dsbench reads a token "
                                                   "stream's chunks uncompressed only"),
                         ({"tokens": {"stream": "yes"}}, "tokens.stream: expected true")):
        with pytest.raises(DsbenchError, match=needle):
            parse_spec({**base_def, **more}, "s.toml")


def test_a_stream_written_by_litdatas_writer_holds_every_id_in_blocks_both_readers_read(
        stream: Path) -> None:
    from litdata import StreamingDataset
    from litdata.streaming.item_loader import TokensLoader

    # 50 documents a chunk; TokensLoader's blocks run across documents, never across chunks.
    expected = []
    for start in range(0, tokenlibs.SAMPLES, 50):
        ids = np.concatenate([tokenlibs.tokens(i) for i in
                              range(start, min(start + 50, tokenlibs.SAMPLES))])
        expected += [ids[at:at + SEQ_LEN] for at in range(0, len(ids) - SEQ_LEN + 1, SEQ_LEN)]
    native = StreamingDataset(str(stream), item_loader=TokensLoader(block_size=SEQ_LEN))
    assert len(native) == len(expected)
    ours = list(adapters.open_export(stream, seq_len=SEQ_LEN).read())
    assert len(ours) == len(expected)
    for i, want in enumerate(expected):
        assert np.array_equal(np.asarray(native[i]), want), i
        assert np.array_equal(base.token_ids(ours[i].image), want), i


def test_empty_documents_lay_nothing_in_a_stream(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # pyarrow's Parquet writer, a document of no id first (litdata's writer would take its
    # chunk's length from it: null, and no reader could read the stream).
    docs = [np.zeros(0, np.uint16), tokenlibs.tokens(1), np.zeros(0, np.uint16),
            tokenlibs.tokens(3)]
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"input_ids": pa.array([d.tolist() for d in docs],
                                                   pa.list_(pa.uint16()))}),
                   tmp_path / "src" / "part-0.parquet")
    spec = parse_spec({"name": "s", "layout": "litdata", "tokens": {"stream": True}}, "s.toml")
    reexport(spec, tmp_path / "s", str(tmp_path / "src"), jobs=1)
    ids = np.concatenate(docs)
    blocks = list(adapters.open_export(tmp_path / "s", seq_len=SEQ_LEN).read())
    assert len(blocks) == len(ids) // SEQ_LEN
    for i, raw in enumerate(blocks):
        assert np.array_equal(base.token_ids(raw.image), ids[i * SEQ_LEN:(i + 1) * SEQ_LEN])


def test_a_packed_side_is_restated_per_sequence_round_by_round(mds: Path, stream: Path
                                                               ) -> None:
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=2, batches=3, seq_len=SEQ_LEN,
                        pack=True)
    doc, blocks = run_benches([mds, stream], opts)
    # Per sample, compare would set a document against a block: not comparable.
    assert any("token stream's block" in r for r in not_comparable(doc, blocks))
    assert not not_comparable(doc, doc)
    before = copy.deepcopy(doc)
    out = in_sequences(doc)
    assert doc == before  # the measured document is left as it is
    run, was = out["runs"][0], before["runs"][0]
    for r, w in zip(run["rounds"], was["rounds"], strict=True):
        sequences = w["batches"] * 4
        assert r["samples"] == sequences
        assert r["cpu_s_per_sample"] == pytest.approx(w["cpu_s"] / sequences)
        assert r["samples_per_s"] == pytest.approx(w["samples_per_s"] * sequences /
                                                   w["samples"])
    docs = sum(w["samples"] for w in was["rounds"]) / sum(w["batches"] * 4
                                                         for w in was["rounds"])
    # Documents of 20-300 ids (about 160): a sequence of 64 holds part of one.
    assert 0.2 < docs < 1
    assert run["bytes_per_sample"] == pytest.approx(was["bytes_per_sample"] * docs)
    # The run's CPU and rate, summarised from the restated rounds as bench summarises rounds.
    for key in ("cpu_s_per_sample", "samples_per_s"):
        assert run[key] == stats.summarize([r[key] for r in run["rounds"]]).center
    assert out["export"]["documents"] == tokenlibs.SAMPLES
    assert out["export"]["samples"] == round(tokenlibs.SAMPLES / docs)
    # Cropped, a sample is a sequence already: the document comes back as it is.
    cropped, = run_benches([mds], BenchOptions(workers=(1,), batch_size=4, rounds=1,
                                               batches=2, seq_len=SEQ_LEN))
    assert in_sequences(cropped) is cropped


def test_an_exact_count_is_restated_by_the_ids_of_the_documents_each_stage_counted() -> None:
    # read counted over whole units (documents of 512 ids on average), the other stages over
    # the first documents (256 ids on average).
    exact = {"counted": True, "instructions_per_sample": 1000.0,
             "stages": {"read": 400.0, "collate": 600.0}, "ids_per_sample": 256.0,
             "read_ids_per_sample": 512.0, "read_calls_per_sample": 0.5,
             "kernel_stages": {"read": {"read_calls": 0.5}, "collate": {"read_calls": 0.0}}}
    packed: Any = {"config": {"pack": True, "seq_len": 1024}}
    out = exact_in_sequences(packed, exact)
    assert out["stages"] == {"read": 800.0, "collate": 2400.0}
    assert out["instructions_per_sample"] == 3200.0
    assert out["read_calls_per_sample"] == 1.0 and out["kernel_stages"]["read"] == {
        "read_calls": 1.0}
    assert exact["instructions_per_sample"] == 1000.0  # not changed in place
    assert exact_in_sequences({"config": {"pack": False, "seq_len": 1024}}, exact) is exact
    # No id packed: not a count per sequence, and not shown as one.
    none = exact_in_sequences(packed, {**exact, "ids_per_sample": 0.0})
    assert none["counted"] is False and "packed no token id" in none["why_not"]


# Writes three candidates and measures four sides with the exact pass, ~40 s: with the slow
# tests (CI runs them).
@pytest.mark.slow
def test_advise_weighs_the_token_stream_against_packing_in_the_workers_per_sequence(
        megatron: Path, tmp_path: Path, private_tmp: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "advice.json"
    assert main(["advise", str(megatron), "--pack", "--seq-len", str(SEQ_LEN),
                 "--layouts", "mds,litdata", "--shard-sizes", "64MB", "--compressions",
                 "none", "--budget", "8s", "--batch-size", "8", "--exact", "--json", str(out),
                 "--write-definition", str(tmp_path / "advised.toml")]) == 0
    doc = json.loads(out.read_text())
    assert capsys.readouterr().out.count("CPU/sequence") == 1
    rows = {r["name"]: r for r in doc["table"]}
    stream = rows.get("litdata-stream-64MB")
    assert stream is not None, [c["name"] for c in doc["candidates_tried"]]
    assert definition_of(stream).tokens.stream  # type: ignore[union-attr]
    # Per sequence of 64 uint16 ids (128 bytes), whatever each side's sample is: per document
    # (20-300 ids, about 160) a side would read about 2.5x as much, per block the same.
    for r in doc["table"]:
        m = r["measured"]
        # (bytes are counted per document over whole units, sequences per document over the
        # rounds: the two agree within a few percent)
        assert 128 * 0.97 <= m["bytes_per_sample"] < 128 * 1.25, (r["name"], m)
        assert m["instructions_per_sample"] > 0
        assert m["disk_bytes_per_sample"] < 128 * 1.25, (r["name"], m)
    assert stream["vs_baseline"]["instructions_per_sample"]["exact"]
    # The job's export is its documents, not its sequences.
    assert doc["source"]["samples"] == tokenlibs.SAMPLES
