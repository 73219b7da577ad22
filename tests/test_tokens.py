"""Samples of token ids: exports written by each library itself (tests/tokenlibs.py) are
inspected, read id for id as written, benchmarked with dsbench's reader and the library's own,
and a planted regression (doc ids as a JSON string per sample) is found in the fields stage."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenlibs
from layouts import assert_one_line_error

from dsbench import adapters
from dsbench.adapters import base
from dsbench.adapters.survey import summarize
from dsbench.adapters.tokenizer import trained
from dsbench.cli import main
from dsbench.errors import SampleError
from dsbench.loader.options import BenchOptions
from dsbench.loader.pipeline import TokenCrop, parse_fields
from dsbench.loader.runner import run_benches
from dsbench.model.cluster import extrapolate
from dsbench.model.costs import Distribution
from dsbench.model.node import ClusterSpec
from dsbench.report.bench import render as render_bench
from dsbench.report.extrapolation import render
from dsbench.results import schema

READ = ("mds-tokens", "hf-tokens", "parquet-tokens", "litdata-tokens-pytree", "megatron-tokens",
        "wds-tokens", "lance-tokens", "tfrecord-tokens")
# TFRecord's only integer type: its ids are int64 whatever they were.
STORED = {"tfrecord-tokens": "int64"}
# The payload's name where it is not input_ids: a Megatron sample is its sequence; a
# WebDataset sample's ids are a member.
FIELD = {"megatron-tokens": "the .bin's sequences", "wds-tokens": "input_ids.npy"}


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokens")
    out = {k: tokenlibs.write(k, root) for k in (*READ, "mds-tokens-json", "litdata-tokens")}
    out["mds-tokens-int32"] = tokenlibs.write("mds-tokens", root / "int32", dtype="int32")
    return out


@pytest.mark.parametrize("kind", [*READ, "mds-tokens-int32"])
def test_every_token_is_read_as_written(kind: str, exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports[kind])
    dtype = "int32" if kind.endswith("int32") else STORED.get(kind, "uint16")
    samples = list(export.read())
    assert len(samples) == tokenlibs.SAMPLES
    for i, raw in enumerate(samples):
        assert raw.codec == base.TOKENS
        ids = base.token_ids(raw.image)
        # Every id equal, in the stored width (a reader that widened or narrowed them would
        # hide what a re-export in another dtype costs).
        assert ids.dtype == np.dtype(dtype) and np.array_equal(ids, tokenlibs.tokens(i, dtype))
        if kind != "megatron-tokens":  # a Megatron dataset keeps the ids alone
            assert parse_fields(raw)["doc_id"] == tokenlibs.doc_id(i)
    library = {"mds-tokens-int32": "mds-tokens"}.get(kind, kind)
    theirs = tokenlibs.read_back(library, exports[kind])
    assert all(np.array_equal(base.token_ids(raw.image), ids)
               for raw, ids in zip(samples, theirs, strict=True))


def test_a_tokensloader_export_is_read_in_the_blocks_litdata_hands_over(
        exports: dict[str, Path]) -> None:
    # optimize(item_loader=TokensLoader()) stores each chunk's documents end to end; litdata's
    # TokensLoader(block_size=B) reads blocks of B ids across documents, never across chunks.
    # dsbench cuts the same blocks, B being --seq-len, front to back and one at a time.
    path = exports["litdata-tokens"]
    export = adapters.open_export(path, seq_len=tokenlibs.BLOCK)
    samples = list(export.read())
    written = tokenlibs.expected("litdata-tokens")
    theirs = tokenlibs.read_back("litdata-tokens", path)
    assert len(samples) == len(written) == len(theirs)
    for raw, ids, their in zip(samples, written, theirs, strict=True):
        got = base.token_ids(raw.image)
        assert raw.codec == base.TOKENS and got.dtype == np.uint16
        assert np.array_equal(got, ids) and np.array_equal(got, their)
    # Read alone (--order random), a block is the same ids, taken where it lies.
    units = export.units()
    for unit, offset in [(units[0], 0), (units[1], 5), (units[-1],
                                                        export.unit_samples(units[-1]) - 1)]:
        raw = export.read_at(unit, offset)
        assert raw is not None and np.array_equal(base.token_ids(raw.image),
                                                  written[int(raw.key)])
    s = summarize(export.survey(), path, export.ignored, export)
    lengths = [tokenlibs.length(i) for i in range(tokenlibs.SAMPLES)]
    stream = s["tokens"]["stream"]
    assert stream["block"] == tokenlibs.BLOCK and stream["documents"] == tokenlibs.SAMPLES
    assert stream["ids"] == sum(lengths)
    assert stream["unread_ids"] == sum(lengths) - tokenlibs.BLOCK * len(written)
    assert s["samples"] == len(written) and s["fields"] == {} and s["bad_samples"] == 0
    assert s["tokens"]["per_sample"] == {"min": tokenlibs.BLOCK, "p50": tokenlibs.BLOCK,
                                         "max": tokenlibs.BLOCK}
    # Another --seq-len, other blocks: at the default's 2048 ids, as many as litdata counts.
    import litdata
    from litdata.streaming.item_loader import TokensLoader

    theirs_2048 = litdata.StreamingDataset(str(path), item_loader=TokensLoader(block_size=2048))
    assert adapters.open_export(path).survey()["samples"] == len(theirs_2048) > 0


def _damaged(src: Path, dst: Path, how: str) -> Path:
    import shutil

    shutil.copytree(src, dst)
    index = json.loads((dst / "index.json").read_text())
    chunk = dst / index["chunks"][1]["filename"]
    if how == "cut":
        chunk.write_bytes(chunk.read_bytes()[:-100])
        index["chunks"][1]["chunk_bytes"] -= 100  # an index rewritten to match: the ids decide
    else:
        index["chunks"][1]["dim"] += 7
    (dst / "index.json").write_text(json.dumps(index))
    return chunk


@pytest.mark.parametrize("how,needle", [("cut", "truncated: its ids end at byte"),
                                        ("dim", "lie at")])
def test_a_damaged_tokensloader_chunk_is_one_line(how: str, needle: str,
                                                  exports: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    chunk = _damaged(exports["litdata-tokens"], tmp_path / how, how)
    assert main(["bench", str(tmp_path / how), "--seq-len", "64", "--workers", "1",
                 "--rounds", "1", "--seconds", "0.2", "--no-exact", "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", chunk.name, needle)
    # A block read alone (--order random) is refused for the same reason, even the first.
    export = adapters.open_export(tmp_path / how, seq_len=tokenlibs.BLOCK)
    with pytest.raises(SampleError, match=needle.replace("(", r"\(")):
        export.read_at(str(chunk), 0)


@pytest.mark.parametrize("argv,needle", [
    (["--seq-len", "100000"], "no block of 100000 ids (--seq-len) fits in a chunk"),
    (["--image-field", "input_ids"], "blocks of its token stream, with no fields")])
def test_a_tokensloader_export_refuses_what_it_cannot_be_read_as(
        argv: list[str], needle: str, exports: dict[str, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(exports["litdata-tokens"]), *argv]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "index.json", needle)


@pytest.mark.parametrize("kind", READ)
def test_inspect_says_the_samples_carry_token_ids(kind: str, exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports[kind])
    s = summarize(export.survey(), exports[kind], export.ignored, export)
    assert s["sample"] == {"kind": "tokens", "field": FIELD.get(kind, "input_ids")}
    lengths = [tokenlibs.length(i) for i in range(s["tokens"]["count_checked"])]
    assert s["tokens"]["dtype"] == STORED.get(kind, "uint16")
    assert (s["tokens"]["per_sample"]["min"], s["tokens"]["per_sample"]["max"]) == (
        min(lengths), max(lengths))
    assert s["tokens"]["mean_per_sample"] == pytest.approx(np.mean(lengths))
    # A Megatron dataset keeps the ids alone; a WebDataset sample's doc id is in its .json.
    assert list(s["fields"]) == {"megatron-tokens": [], "wds-tokens": ["json", "json.doc_id"]
                                 }.get(kind, ["doc_id"])
    assert s["image"]["count_checked"] == 0 and s["bad_samples"] == 0


def test_a_token_sample_is_cropped_at_a_random_offset_or_padded() -> None:
    crop = TokenCrop(seq_len=8)
    rng = np.random.default_rng(0)
    doc = np.arange(100, 130, dtype=np.uint16)
    starts = set()
    for _ in range(20):
        out = crop(doc, rng)
        assert out.dtype == np.int64 and out.shape == (8,)
        # A window of the document, its ids consecutive as stored.
        assert np.array_equal(out, np.arange(out[0], out[0] + 8))
        starts.add(int(out[0]))
    assert len(starts) > 1 and min(starts) >= 100 and max(starts) <= 122
    short = crop(np.array([5, 6, 7], dtype=np.uint32), rng)
    assert short.tolist() == [5, 6, 7, 0, 0, 0, 0, 0]


NATIVE = ("mds-tokens", "hf-tokens", "litdata-tokens-pytree", "megatron-tokens",
          "litdata-tokens", "wds-tokens", "lance-tokens", "tfrecord-tokens")
FIELD["litdata-tokens"] = "the chunks' token stream"


# Three layouts in the suite, the other five with the slow tests (CI runs both): 10 s a group.
@pytest.mark.parametrize("kinds", [
    pytest.param(NATIVE[:1] + NATIVE[4:6], id="mds-stream-wds"),
    pytest.param(NATIVE[1:4] + NATIVE[6:], id="the-others", marks=pytest.mark.slow)])
def test_token_exports_are_benchmarked_with_both_readers(kinds: tuple[str, ...],
                                                         exports: dict[str, Path]) -> None:
    # Each token export with a library of its own, read by dsbench's reader and by the
    # library's, all in one interleaved run.
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=4, warmup_batches=1,
                        seq_len=64, exact=False)
    each = [dataclasses.replace(opts, backend=b) for _ in kinds for b in ("dsbench", "native")]
    docs = run_benches([exports[k] for k in kinds for _ in (0, 1)], opts, each=each)
    for doc, kind in zip(docs, [k for k in kinds for _ in (0, 1)], strict=True):
        schema.validate(doc, "bench")
        assert doc["config"]["transform"] == "TokenCrop" and doc["config"]["seq_len"] == 64
        assert doc["export"]["sample"]["kind"] == "tokens"
        (run,) = doc["runs"]
        assert run["samples"] == 16 and run["cpu_s_per_sample"] > 0, kind
        said = " ".join(render_bench(doc).split())
        if kind == "litdata-tokens":  # blocks of the stream, cut as litdata's TokensLoader does
            assert "(the chunks' token stream, uint16): blocks of 64 ids, cut from 120 " \
                "documents laid end to end, as litdata's TokensLoader(block_size=64)" in said
            assert "no padding" in said and "per id read:" in said
            continue
        assert f"Token samples ({FIELD.get(kind, 'input_ids')}, {STORED.get(kind, 'uint16')}): " \
            "sequences of 64 ids" \
            in said
        assert "a document longer than 64 ids is cropped; per id stored:" in said
    assert [d["config"]["backend"] for d in docs] == ["dsbench", "native"] * len(kinds)
    assert all(d["reader"]["library"] for d in docs[1::2])
    # Carried to a job, the rates are said in token ids too: 8 sequences of 64 ids per GPU.
    cluster = ClusterSpec(nodes=2, gpus_per_node=8, batch_size=8,
                          compute=Distribution.parse("0.2"))
    model = extrapolate(docs[0], cluster, np.random.default_rng(0), steps=200, scaling=[1])
    schema.validate(model, "extrapolation")
    tokens = model["tokens"]
    assert tokens["seq_len"] == 64 and tokens["per_step_per_gpu"] == 8 * 64
    assert tokens["demand_per_s_per_node"] == pytest.approx(64 * 8 * 8 / 0.2)
    assert tokens["supply_per_s_per_node"] == pytest.approx(
        64 * model["supply_samples_per_s_per_node"])
    assert "in tokens: supply" in render(model)


# Counted under valgrind on both sides, 13 to 19 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_doc_ids_as_a_json_string_cost_the_fields_stage(exports: dict[str, Path],
                                                        tmp_path: Path) -> None:
    # The planted regression: the same tokens, the doc id moved into a JSON document per
    # sample. Counted exactly, the extra instructions are the fields stage's (one timed round:
    # the counts are made before the rounds and do not depend on them).
    out = tmp_path / "cmp.json"
    assert main(["compare", str(exports["mds-tokens"]), str(exports["mds-tokens-json"]),
                 "--workers", "1", "--rounds", "1", "--seconds", "0.1", "--batch-size", "8",
                 "--seq-len", "64", "--exact", "--exact-samples", "16", "--no-cluster",
                 "--json", str(out)]) in (0, 1)
    run = json.loads(out.read_text())["runs"][0]
    counted = {a["what"].removesuffix(" instructions"): a for a in run["attribution"]
               if a["unit"] == "instructions/sample"}
    assert set(counted) == {"read", "decode", "fields", "transform", "collate"}
    grew = max(counted.values(), key=lambda a: a["delta"])
    assert grew["what"] == "fields instructions" and grew["distinguishable"], counted
    # The ids themselves cost about the same: viewed and cropped alike on both sides (a few
    # hundred instructions apart at most, where fields grew by tens of thousands).
    for stage in ("decode", "transform"):
        assert abs(counted[stage]["delta"]) < 0.02 * grew["delta"], counted


def _truncated(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    shard = sorted(dst.glob("shard.*.mds"))[1]
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) - 100])
    return shard


def test_a_truncated_token_shard_is_one_line(exports: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    shard = _truncated(exports["mds-tokens"], tmp_path / "cut")
    assert main(["bench", str(tmp_path / "cut"), "--workers", "1", "--rounds", "1",
                 "--seconds", "0.2", "--no-exact", "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", shard.name)


@pytest.mark.parametrize("field,needle", [("doc_id", "not jpeg, png, pil or bytes"),
                                          ("nope", "no such column")])
def test_a_named_payload_that_is_not_token_ids_is_one_line(
        field: str, needle: str, exports: dict[str, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(exports["mds-tokens"]), "--image-field", field]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", needle)


def test_a_megatron_bin_shorter_than_its_index_is_one_line(exports: dict[str, Path],
                                                         tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(exports["megatron-tokens"], cut)
    data = cut / "corpus-1_text_document.bin"
    data.write_bytes(data.read_bytes()[:-50])
    s = summarize(adapters.open_export(cut).survey(), cut)
    assert s["bad_samples"] == 1 and s["problems"][0]["key"] == "corpus-1_text_document:39"
    assert main(["bench", str(cut), "--workers", "1", "--rounds", "1", "--seconds", "0.2",
                 "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", data.name,
                          "[sample corpus-1_text_document:39]", "truncated")
    (cut / "corpus-2_text_document.idx").write_bytes(b"MMIDIDX\x00\x00" + bytes(5))
    assert main(["inspect", str(cut)]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "corpus-2_text_document.idx",
                          "Megatron index")


def test_generate_from_a_token_export_with_an_image_definition_is_one_line(
        exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "parquet", str(tmp_path / "out"), "--from",
                 str(exports["mds-tokens"])]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "samples carry token ids",
                          "the definition 'parquet' makes images")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bad,needle", [
    (np.linspace(0, 1, 50, dtype=np.float32), "expected a 1-d array of integer token ids"),
    (b"not an npy file", "not a NumPy .npy array")])
def test_a_webdataset_member_that_is_not_token_ids_is_one_line(
        bad: object, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Written by webdataset's own TarWriter, in the third sample: floats where the ids should
    # be, or bytes that are no .npy file (its encoder writes bytes as they are).
    import webdataset as wds

    out = tmp_path / "wds"
    out.mkdir()
    with wds.TarWriter(str(out / "shard-00000.tar")) as w:
        for i in range(6):
            ids = bad if i == 2 else tokenlibs.tokens(i)
            w.write({"__key__": f"{i:06d}", "json": {"doc_id": i},
                     "input_ids.npy": ids})
    assert main(["inspect", str(out)]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "shard-00000.tar",
                          "[sample 000002]", needle)
    assert main(["bench", str(out), "--workers", "1", "--rounds", "1", "--seconds", "0.2",
                 "--no-exact", "--count-samples", "0", "--batch-size", "2"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "shard-00000.tar",
                          "[sample 000002]", needle)


def test_webdataset_samples_with_two_token_members_ask_which_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import webdataset as wds

    out = tmp_path / "wds"
    out.mkdir()
    with wds.TarWriter(str(out / "shard-00000.tar")) as w:
        for i in range(4):
            w.write({"__key__": f"{i:06d}", "input_ids.npy": tokenlibs.tokens(i),
                     "loss_mask.npy": np.ones(tokenlibs.length(i), np.uint8)})
    assert main(["inspect", str(out)]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "shard-00000.tar",
                          "several members could carry the samples' tokens (.input_ids.npy, "
                          ".loss_mask.npy): name one with --image-field")
    assert main(["inspect", str(out), "--image-field", "input_ids.npy", "--json",
                 str(tmp_path / "s.json")]) == 0
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["sample"] == {"kind": "tokens", "field": "input_ids.npy"}
    assert list(s["fields"]) == ["loss_mask.npy"] and s["tokens"]["count_checked"] == 4


def test_token_and_text_exports_read_from_an_object_store_as_on_disk(
        exports: dict[str, Path], s3_env: Any, tmp_path: Path) -> None:
    # The same blocks, ids and texts through the S3 client as from the disk: a TokensLoader
    # chunk fetched whole (front to back and one block alone), WebDataset members streamed.
    text = tokenlibs.write("wds-text", tmp_path)
    url = s3_env.create_bucket("tokens")
    paths = {"litdata-tokens": exports["litdata-tokens"], "wds-tokens": exports["wds-tokens"],
             "wds-text": text}
    for name, path in paths.items():
        s3_env.upload_tree(path, f"{url}/{name}")
    for name, path in paths.items():
        remote = adapters.open_export(f"{url}/{name}", seq_len=tokenlibs.BLOCK)
        local = adapters.open_export(path, seq_len=tokenlibs.BLOCK)
        got, want = list(remote.read()), list(local.read())
        assert len(got) == len(want) > 0 and remote.kind == local.kind != "image", name
        for a, b in zip(got, want, strict=True):
            assert a.key == b.key and a.codec == b.codec
            if a.codec == base.TOKENS:
                assert np.array_equal(base.token_ids(a.image), base.token_ids(b.image))
            else:
                assert base.text_of(a.image) == base.text_of(b.image)
    stream = adapters.open_export(f"{url}/litdata-tokens", seq_len=tokenlibs.BLOCK)
    unit = stream.units()[2]
    raw = stream.read_at(unit, 4)
    assert raw is not None and np.array_equal(
        base.token_ids(raw.image), tokenlibs.expected("litdata-tokens")[int(raw.key)])


def test_a_webdataset_image_export_whose_first_sample_lacks_its_image_stays_one_of_images(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Its first sample has a caption and no image: that sample is bad, the export still one of
    # images with captions, not of text.
    import webdataset as wds
    from PIL import Image

    out = tmp_path / "wds"
    out.mkdir()
    with wds.TarWriter(str(out / "shard-00000.tar")) as w:
        w.write({"__key__": "000000", "txt": "a caption without its picture"})
        for i in range(1, 6):
            w.write({"__key__": f"{i:06d}", "jpg": Image.new("RGB", (8, 8), (i, 0, 0)),
                     "txt": f"caption {i}"})
    export = adapters.open_export(out)
    assert export.kind is None and export.payload_field is None
    s = summarize(export.survey(), out, export.ignored, export)
    assert s["sample"]["kind"] == "image" and s["image"]["count_checked"] == 5
    assert s["bad_samples"] == 1 and s["problems"][0]["key"] == "000000"
    assert "no image or audio member" in s["problems"][0]["error"]


# Two ranks launched by torch's launcher, 7 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_a_job_reads_a_token_stream_in_blocks_on_every_rank(exports: dict[str, Path],
                                                            tmp_path: Path) -> None:
    # Two ranks over a litdata TokensLoader export's three chunks, each sample a 64-id block
    # (--seq-len): the ranks open the stream cut as bench cuts it.
    from dsbench.job import result

    out = tmp_path / "job.json"
    assert main(["job", str(exports["litdata-tokens"]), "--ranks", "2", "--workers", "1",
                 "--gpu-batch", "4", "--compute", "0.005", "--steps", "12", "--seq-len",
                 str(tokenlibs.BLOCK), "--json", str(out)]) == 0
    doc = result.read(out)
    options = doc["config"]["options"]
    assert (options["kind"], options["seq_len"]) == ("tokens", tokenlibs.BLOCK)
    assert doc["ranks"] == 2 and all(len(r["step_s"]) == 12 for r in doc["per_rank"])


# Two ranks launched by torch's launcher, twice, 15 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_a_jobs_ranks_tokenize_text_with_the_launchers_tokenizer(tmp_path: Path) -> None:
    # The launcher trains the BPE once (or loads --tokenizer) and every rank's workers encode
    # with it: a rank without one would fail its first text ("no tokenizer").
    from dsbench.job import result

    text = tokenlibs.write("text-jsonl", tmp_path)
    own = tmp_path / "tokenizer.json"
    own.write_text(trained([tokenlibs.text(i) for i in range(40)], vocab=300).json)
    for given, source in (([], "byte-level BPE trained on the first"),
                          (["--tokenizer", str(own)], f"--tokenizer {own}")):
        out = tmp_path / "job.json"
        assert main(["job", str(text), "--ranks", "2", "--workers", "1", "--gpu-batch", "4",
                     "--compute", "0.005", "--steps", "12", "--seq-len", "64", *given,
                     "--json", str(out)]) == 0
        doc = result.read(out)
        options = doc["config"]["options"]
        assert (options["kind"], options["seq_len"]) == ("text", 64)
        assert source in options["tokenizer"]
        assert doc["ranks"] == 2 and all(len(r["step_s"]) == 12 for r in doc["per_rank"])


def test_a_job_refuses_a_tokenizer_for_token_ids_in_one_line(
        exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.json").write_text("{}")
    assert main(["job", str(exports["litdata-tokens"]), "--ranks", "2", "--workers", "1",
                 "--seq-len", str(tokenlibs.BLOCK), "--tokenizer",
                 str(tmp_path / "t.json")]) == 2
    assert_one_line_error(capsys.readouterr().err, "job", "--tokenizer tokenizes text samples")


def test_a_restart_of_a_token_streams_loader_is_audited_block_for_block(
        exports: dict[str, Path]) -> None:
    # dsbench resume on the TokensLoader export's 64-id blocks: restarted without state, the
    # first K batches come again; with the loader's state, nothing is replayed or skipped.
    from dsbench.resume.measure import ResumeOptions, run_resume

    k, batch = 3, 8
    doc = run_resume(str(exports["litdata-tokens"]), ResumeOptions(
        restart_at=k, policies=("none", "stateful"), workers=1, batch_size=batch,
        seq_len=tokenlibs.BLOCK))
    schema.validate(doc, "resume")
    by = {p["policy"]: p["total"] for p in doc["policies"]}
    assert (by["none"]["replayed"], by["none"]["skipped"]) == (k * batch, 0)
    assert (by["stateful"]["replayed"], by["stateful"]["skipped"]) == (0, 0)
    assert doc["settings"]["seq_len"] == tokenlibs.BLOCK


@pytest.mark.parametrize("command", ["bench", "job", "resume"])
@pytest.mark.parametrize("option,value", [("--seq-len", "0"), ("--clip-seconds", "0")])
def test_a_sequence_or_clip_of_nothing_is_refused_in_one_line(
        command: str, option: str, value: str, exports: dict[str, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    more = ["--restart-at", "1"] if command == "resume" else []
    assert main([command, str(exports["litdata-tokens"]), option, value, *more]) == 2
    assert_one_line_error(capsys.readouterr().err, command, option)
