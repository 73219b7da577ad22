"""An elastic restart (`resume --ranks-after/--workers-after`): the job restarts on another
number of ranks or workers, the ranks together, and what was replayed or skipped is counted
over the whole epoch across all ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import write_export
from test_resume import _shm, _stray

from dsbench.cli import main
from dsbench.results import schema
from dsbench.results.machine import collect
from dsbench.resume.measure import ResumeOptions, run_resume

K, B = 3, 4


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 shards of 10 samples: 160 samples, 4 ranks' first K steps all full batches."""
    return write_export(tmp_path_factory.mktemp("elastic"), "wds", 160, shard_samples=10)


def _by_policy(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["policy"]: p for p in doc["policies"]}


def _check(doc: dict[str, Any], ranks: int, after: int) -> dict[str, dict[str, Any]]:
    by = _by_policy(doc)
    epoch = 160
    job = ranks * K * B  # the job's K steps, every batch full
    if "stateful" in by:
        t = by["stateful"]["total"]
        assert (t["replayed"], t["skipped"]) == (0, 0)
        # What the restarted ranks delivered is the rest of the epoch, each sample once.
        assert sum(r["delivered_samples"] for r in by["stateful"]["restarted"]) == epoch - job
        assert t["state_bytes"] > 0
    if "none" in by:
        # The whole epoch again on the new ranks: the job's samples are replayed, none skipped.
        t = by["none"]["total"]
        assert (t["replayed"], t["skipped"]) == (job, 0)
        assert sum(r["delivered_samples"] for r in by["none"]["restarted"]) == epoch
    for p in by.values():
        assert len(p["ranks"]) == ranks and len(p["restarted"]) == after
        assert sum(r["replayed"] for r in p["ranks"]) == p["total"]["replayed"]
        assert all(r["first_batch_s"] is None or r["first_batch_s"] > 0
                   for r in p["restarted"])
    doc["machine"] = collect()
    schema.validate(doc, "resume", "the resume result")
    return by


def test_four_ranks_restarted_on_two_replay_and_skip_nothing_when_stateful(export: Path
                                                                             ) -> None:
    shm = _shm()
    doc = run_resume(str(export), ResumeOptions(restart_at=K, policies=("none", "fast-forward",
                                                                         "stateful"),
                                                ranks=4, workers=1, batch_size=B, buffer=8,
                                                ranks_after=2))
    by = _check(doc, 4, 2)
    assert all(p["burst"]["requests"] == 0 for p in by.values())  # local disk: no requests
    # Fast-forward skips the new ranks' first K batches of a different order: it both replays
    # and skips, and the two differ by what the new ranks discarded and the job delivered.
    t = by["fast-forward"]["total"]
    assert t["replayed"] > 0 and t["skipped"] > 0 and t["fast_forward_s"] > 0
    assert t["skipped"] - t["replayed"] == 2 * K * B - 4 * K * B
    assert doc["settings"]["ranks_after"] == 2
    assert _stray() == []
    assert not {n for n in _shm() - shm if Path("/dev/shm", n).exists()}


def test_fewer_workers_and_more_ranks_after_replay_and_skip_nothing(export: Path) -> None:
    doc = run_resume(str(export), ResumeOptions(restart_at=K, policies=("stateful",), ranks=2,
                                                workers=2, batch_size=B, buffer=8,
                                                ranks_after=3, workers_after=1))
    _check(doc, 2, 3)


def test_torchdatas_stateful_loader_is_resharded_too(export: Path) -> None:
    pytest.importorskip("torchdata")
    doc = run_resume(str(export), ResumeOptions(restart_at=K, policies=("stateful",),
                                                ranks=2, workers=1, batch_size=B, buffer=8,
                                                backend="torch", ranks_after=1))
    _check(doc, 2, 1)
    assert _stray() == []


def test_the_report_names_the_new_shape_and_each_new_ranks_first_batch(
        export: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", str(export), "--restart-at", str(K), "--ranks", "2", "--workers",
                 "1", "--ranks-after", "1", "--batch-size", str(B), "--policy",
                 "stateful"]) == 0
    out = capsys.readouterr().out
    assert "restart after K = 3 steps on 1 rank(s) x 1 worker(s), the ranks together" in out
    assert "The restart on 1 rank(s), started together" in out
    assert "stateful: rank 0: 0 / 0; rank 1: 0 / 0" in out


@pytest.mark.parametrize(("argv", "said"), [
    (["--ranks-after", "0"], "--ranks-after must be at least 1"),
    (["--workers-after", "0"], "--workers-after must be at least 1"),
    (["--ranks-after", "9", "--workers-after", "2"], "cannot give 9 ranks x 2 workers"),
])
def test_a_bad_elastic_shape_is_one_line(export: Path, argv: list[str], said: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", str(export), "--restart-at", "1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err


def test_a_worker_the_job_took_nothing_from_still_owes_its_share(export: Path) -> None:
    # One step with two workers: the job's batch came from worker 0; worker 1 has no saved
    # stream, and everything it would have read is still owed.
    doc = run_resume(str(export), ResumeOptions(restart_at=1, policies=("stateful",), ranks=2,
                                                workers=2, batch_size=B, buffer=8,
                                                ranks_after=1, workers_after=2))
    t = _by_policy(doc)["stateful"]
    assert (t["total"]["replayed"], t["total"]["skipped"]) == (0, 0)
    assert sum(r["delivered_samples"] for r in t["restarted"]) == 160 - 2 * B


def test_from_an_object_store_the_burst_counts_its_requests(export: Path, s3_env: Any) -> None:
    url = s3_env.create_bucket("elastic")
    s3_env.upload_tree(export, f"{url}/shards")
    doc = run_resume(f"{url}/shards", ResumeOptions(restart_at=K, policies=("stateful",),
                                                     ranks=2, workers=1, batch_size=B,
                                                     buffer=8, ranks_after=1))
    p = _by_policy(doc)["stateful"]
    assert (p["total"]["replayed"], p["total"]["skipped"]) == (0, 0)
    burst = p["burst"]
    # Each shard the first steps came from was read from the store: one request or more each.
    assert burst["steps"] >= 1 and burst["requests"] > 0
    assert burst["requests_per_s"] == pytest.approx(burst["requests"] / burst["seconds"])
