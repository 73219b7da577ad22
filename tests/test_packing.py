"""--pack: token documents laid end to end and cut into sequences of --seq-len ids, read from an
export MosaicML Streaming's own writer made (tests/tokenlibs.py): every id in order, none
padded or cropped away; a sample is still a document, and the model's sample a sequence."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenlibs
from layouts import assert_one_line_error

from dsbench import adapters
from dsbench.analysis.compare import not_comparable
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.loader.options import BenchOptions
from dsbench.loader.packing import Packer, TokenPack, documents_per_sequence
from dsbench.loader.pipeline import BatchBuilder, Pipeline, StageTimes
from dsbench.loader.runner import run_benches
from dsbench.model.cluster import extrapolate
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.report.bench import render as render_bench
from dsbench.results import schema


@pytest.fixture(scope="module")
def mds(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> Path:
    return tokenlibs.write("mds-tokens", tmp_path_factory.mktemp("pack"))


def test_packed_sequences_hold_every_id_in_reading_order_across_batches(mds: Path) -> None:
    # Batches of 3 sequences of 50 ids from documents of 20-300 ids: a document spans
    # sequences and batches, and a batch may read no document at all.
    export = adapters.open_export(mds)
    builder = BatchBuilder(Pipeline(transform=TokenPack(seq_len=50)),
                           lambda _skip: export.read(), np.random.default_rng(0))
    rows = np.empty((3, 50), dtype=np.int64)
    sequences, keys, doc_ids, without = [], [], [], 0
    with pytest.raises(StopIteration):  # the export read once, its last ids held
        while True:
            got, fields = builder.build(rows, StageTimes())
            sequences.append(rows.copy())
            keys += got
            doc_ids += list(fields.get("doc_id", []))
            without += not got
    stream = np.concatenate([tokenlibs.tokens(i) for i in range(tokenlibs.SAMPLES)])
    packed = np.concatenate(sequences).ravel()
    # Every id of the documents read, in order, none padded: all but the last (fewer than a
    # batch's 150) are in a sequence.
    assert np.array_equal(packed, stream[:len(packed)])
    assert 0 <= len(stream) - len(packed) < 150
    # Each batch names the documents read for it, in order, with their fields.
    assert doc_ids == [tokenlibs.doc_id(i) for i in range(len(keys))]
    assert len(keys) in (tokenlibs.SAMPLES, tokenlibs.SAMPLES - 1) and without > 0


def test_a_packer_refuses_a_stream_of_empty_documents() -> None:
    packer = Packer(4)
    packer.add(np.arange(3))
    assert not packer.full
    with pytest.raises(Exception, match="hold no token id"):
        for _ in range(10_000):
            packer.add(np.arange(0))


def test_a_packed_run_says_sequences_and_the_model_counts_in_them(mds: Path) -> None:
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=2, batches=6, seq_len=64,
                        exact=False, pack=True)
    crop = dataclasses.replace(opts, pack=False)
    packed, cropped = run_benches([mds] * 2, opts, each=[opts, crop])
    schema.validate(packed, "bench")
    assert packed["config"]["pack"] is True and packed["config"]["transform"] == "TokenPack"
    assert cropped["config"]["pack"] is False
    (run,) = packed["runs"]
    docs = documents_per_sequence(run)
    # 2 rounds of 6 batches of 4 sequences of 64 ids; documents of 160 ids on average.
    assert docs == pytest.approx(sum(r["samples"] for r in run["rounds"]) / 48)
    assert 0.25 < docs < 0.6
    said = " ".join(render_bench(packed).split())
    assert "token ids packed into sequences of 64" in said
    assert "documents laid end to end and cut into sequences of 64 ids, no padding" in said
    assert "documents per sequence (measured)" in said
    # Batches that read no document (a long one's ids still held) take nothing from the
    # figures of how random the batches were.
    assert run["order_figures"]["units_per_batch"] > 0
    # Packed and cropped are two jobs: not compared as one.
    assert any("bench option pack differs" in r for r in not_comparable(cropped, packed))
    # The model's sample is a sequence: the export's per-document files and bytes scaled.
    cost = LoaderCost.from_result(packed)
    assert cost.documents_per_sample == pytest.approx(docs)
    assert cost.bytes_per_sample == pytest.approx(docs * run["bytes_per_sample"])
    assert cost.export_samples == round(tokenlibs.SAMPLES / docs)
    cluster = ClusterSpec(nodes=2, gpus_per_node=8, batch_size=8,
                          compute=Distribution.parse("0.2"))
    model = extrapolate(packed, cluster, np.random.default_rng(0), steps=100, scaling=[1])
    schema.validate(model, "extrapolation")
    assert model["tokens"]["per_step_per_gpu"] == 8 * 64
    assert any(i["name"] == "documents_per_sample" for i in model["inputs"])


def test_pack_and_sample_rate_on_another_kind_are_one_line_before_anything_runs(
        mds: Path, tiny_exports: dict[str, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    quick = ["--seconds", "0.1", "--rounds", "1", "--no-exact"]
    assert main(["bench", str(tiny_exports["before"]), "--pack", *quick]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--pack packs token documents",
                          "this export's samples are images", str(tiny_exports["before"]))
    assert main(["bench", str(mds), "--sample-rate", "16000", *quick]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--sample-rate resamples audio",
                          "samples are token ids")
    # The same where job, resume and advise take --sample-rate, before anything starts.
    for command in (["job", str(mds), "--ranks", "1"], ["resume", str(mds), "--restart-at", "2"],
                    ["advise", str(mds), "--budget", "5s"]):
        assert main([*command, "--sample-rate", "16000"]) == 2
        assert_one_line_error(capsys.readouterr().err, command[0],
                              "--sample-rate resamples audio", "samples are token ids")
    for command in (["advise", str(tiny_exports["before"]), "--budget", "5s"],
                    ["job", str(tiny_exports["before"]), "--ranks", "1"]):
        assert main([*command, "--pack"]) == 2
        assert_one_line_error(capsys.readouterr().err, command[0],
                              "--pack packs token documents")
    # Options for one kind of sample, given for another: said, not ignored (their defaults are).
    for command, option, value, said in (
            ("bench", "--clip-seconds", "2", "--clip-seconds sets the length of audio clips"),
            ("compare", "--tokenizer", "tok.json", "--tokenizer tokenizes text"),
            ("resume", "--clip-seconds", "2", "--clip-seconds sets the length of audio clips"),
            ("job", "--clip-seconds", "2", "--clip-seconds sets the length of audio clips"),
            ("advise", "--clip-seconds", "2", "--clip-seconds sets the length of audio clips")):
        paths = [str(mds)] * (2 if command == "compare" else 1)
        more = {"resume": ["--restart-at", "2"], "job": ["--ranks", "1"],
                "advise": ["--budget", "5s"]}.get(command, quick)
        assert main([command, *paths, option, value, *more]) == 2
        assert_one_line_error(capsys.readouterr().err, command, said,
                              "this export's samples are token ids")
    assert main(["bench", str(tiny_exports["before"]), "--seq-len", "512", *quick]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--seq-len sets the length of "
                          "token sequences", "this export's samples are images")
    for other in (["--epochs", "1"], ["--ceiling"]):
        assert main(["bench", str(mds), "--pack", *other, *quick]) == 2
        assert_one_line_error(capsys.readouterr().err, "bench", "--pack carries",
                              "not with --epochs or --ceiling")
    assert main(["bench", str(mds), "--pack", "--backend", "native", *quick]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--pack packs documents",
                          "--backend dsbench or torch")


def test_an_option_for_one_kind_is_checked_over_all_sides() -> None:
    from dsbench.loader.options import check_given

    # Raw text beside its tokenized export (compare RAW TOKENIZED --tokenizer FILE): the text
    # side takes the tokenizer, so the two sides together do.
    check_given(("--tokenizer", "--seq-len"), ["text", "tokens"], "raw")
    with pytest.raises(DsbenchError, match="--tokenizer tokenizes text; this export's samples "
                                           "are token ids"):
        check_given(("--tokenizer",), ["tokens", "tokens"], "a")
    with pytest.raises(DsbenchError, match="--clip-seconds sets the length of audio clips"):
        check_given(("--clip-seconds",), ["image", "tokens"], "a")


# Two exact passes under valgrind (~10 s each): with the slow tests (CI runs them).
@pytest.mark.slow
def test_the_exact_pass_counts_the_packing(mds: Path) -> None:
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=2, seq_len=64,
                        exact=True, exact_samples=16, pack=True)
    crop = dataclasses.replace(opts, pack=False)
    packed, again, cropped = run_benches([mds] * 3, opts, each=[opts, opts, crop])

    def stages(doc: dict[str, Any]) -> dict[str, float]:
        assert doc["exact"]["counted"]
        return dict(doc["exact"]["stages"])

    # Exact: the same count from two passes; and the packing's, not the crop's.
    assert stages(packed) == stages(again)
    assert stages(packed)["transform"] != stages(cropped)["transform"]
    assert stages(packed)["collate"] != stages(cropped)["collate"]
    # The ids it packed: the first 16 documents'; the read stage's, its whole units' (advise
    # states a count per sequence by them).
    x = packed["exact"]
    assert x["ids_per_sample"] == np.mean([tokenlibs.length(i) for i in range(16)])
    read = x["read_samples"]  # the first shard, whole
    assert read > 16
    assert x["read_ids_per_sample"] == np.mean([tokenlibs.length(i) for i in range(read)])
    assert "ids_per_sample" not in cropped["exact"]


def test_a_packed_window_that_read_no_document_is_said_not_divided_by(mds: Path) -> None:
    # Sequences of 8 ids, one a batch, from documents of at least 20: the warm-up batch reads
    # the first document, and the one measured batch is cut from its ids still held.
    opts = BenchOptions(workers=(1,), batch_size=1, rounds=1, batches=1, seq_len=8,
                        exact=False, pack=True)
    with pytest.raises(DsbenchError, match=r"batches read no sample .* a longer --seconds"):
        run_benches([mds], opts)


def test_a_jobs_ranks_pack_as_bench_does() -> None:
    from dsbench.job.identity import Identity
    from dsbench.job.options import JobOptions
    from dsbench.job.rank import bench_options

    ident = Identity(rank=1, world=2, local_rank=1, local_world=2, node=0, nodes=1,
                     launcher="dsbench")
    packed = bench_options(JobOptions(kind="tokens", seq_len=64, pack=True), ident)
    assert packed.pipeline().transform == TokenPack(64)
    cropped = bench_options(JobOptions(kind="tokens", seq_len=64), ident)
    assert type(cropped.pipeline().transform).__name__ == "TokenCrop"
    with pytest.raises(DsbenchError, match="--backend dsbench or torch"):
        JobOptions(kind="tokens", pack=True, backend="native")


# Two ranks started by dsbench's launcher, ~10 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_a_packed_job_runs_and_says_so(mds: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from dsbench.job import result

    out = tmp_path / "job.json"
    assert main(["job", str(mds), "--ranks", "2", "--workers", "1", "--gpu-batch", "4",
                 "--compute", "0.005", "--steps", "12", "--seq-len", "64", "--pack",
                 "--json", str(out)]) == 0
    doc = result.read(out)
    assert doc["config"]["options"]["pack"] is True
    assert doc["ranks"] == 2 and all(len(r["step_s"]) == 12 for r in doc["per_rank"])
    # Sequences of one id, one a step: the first document (20 ids or more), read before the
    # counted steps, fills them all. Said in one line (after the job's start line), not
    # divided by.
    capsys.readouterr()
    assert main(["job", str(mds), "--ranks", "1", "--workers", "1", "--gpu-batch", "1",
                 "--compute", "0.001", "--steps", "10", "--seq-len", "1", "--pack"]) == 2
    started, said = capsys.readouterr().err.splitlines()
    assert started.startswith("job: 1 rank")
    assert_one_line_error(said + "\n", "job", "counted steps read no sample",
                          "give more --steps")


# torch's DataLoader in spawned workers, 7 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_torchs_dataloader_packs_as_dsbenchs_workers_do(mds: Path) -> None:
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=2, batches=6, seq_len=64,
                        exact=False, pack=True)
    ours, torched = run_benches([mds] * 2, opts,
                                each=[opts, dataclasses.replace(opts, backend="torch")])
    assert torched["config"]["transform"] == "TokenPack"
    # One export read in one order: the same documents per sequence, within the rounds' ends.
    docs = [documents_per_sequence(d["runs"][0]) or 0 for d in (ours, torched)]
    assert 0.25 < docs[1] < 0.6 and abs(docs[0] - docs[1]) < 0.1, docs
