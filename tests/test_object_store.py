"""Exports in an object store, read from a real S3-compatible server (moto) on 127.0.0.1: every
layout inspected and measured through the same adapters as on disk, requests counted per sample,
and a bad credential, bucket or prefix refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import quick, write_export
from layouts import assert_one_line_error

from dsbench.cli import main
from dsbench.loader.runner import run_bench, run_benches
from dsbench.results import schema
from dsbench.results.document import write_result


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """before: 2 shards of 250 (1 GET per 250 samples); after: a JPEG and a JSON per sample;
    arrow and parquet: one file each, read over range requests."""
    root = tmp_path_factory.mktemp("store")
    return {"before": write_export(root, "wds", 500, shard_samples=250),
            "after": write_export(root, "files", 120),
            "arrow": write_export(root, "arrow", 120, shard_samples=60),
            "parquet": write_export(root, "parquet", 120, shard_samples=60)}


@pytest.fixture(scope="module")
def bucket(s3_server: Any, exports: dict[str, Path]) -> str:
    url = s3_server.create_bucket("exports")
    for name, path in exports.items():
        s3_server.upload_tree(path, f"{url}/{name}")
    return url


def _inspect(target: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out = tmp / f"{target.rsplit('/', 1)[-1]}-{abs(hash(target))}.json"
    assert main(["inspect", target, "--json", str(out)]) == 0, capsys.readouterr().err
    summary: dict[str, Any] = json.loads(out.read_text())
    return summary


@pytest.mark.parametrize("name", ["before", "after", "arrow", "parquet"])
def test_inspect_in_a_bucket_finds_what_it_finds_on_disk(
        name: str, bucket: str, s3_env: Any, exports: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    remote = _inspect(f"{bucket}/{name}", tmp_path, capsys)
    local = _inspect(str(exports[name]), tmp_path, capsys)
    assert remote["layout"] == local["layout"]
    assert remote["samples"] == local["samples"] > 0
    assert remote["bytes"] == local["bytes"]
    assert remote["problems"] == local["problems"] == []
    assert remote["fields"] == local["fields"]


def test_requests_per_sample_tell_a_per_sample_layout_from_shards(
        bucket: str, s3_env: Any, exports: dict[str, Path], tmp_path: Path) -> None:
    # Two rounds: the counts are exact in any window, and compare gets a pair of rounds.
    before, after = run_benches([f"{bucket}/before", f"{bucket}/after"],
                                quick(rounds=2, workers=(1, 2)))
    # after read from disk, for its counts (a pass over whole units, whatever the rounds): one
    # round of one worker, not four beside the others.
    local_after = run_bench(exports["after"], quick(rounds=1))
    for doc in (before, after):
        schema.validate(doc, "bench")
        assert doc["requests"]["client"] == "obstore"
        assert doc["requests"]["method"] == "whole units"
        assert [r["workers"] for r in doc["runs"]] == [1, 2]
        assert all(r["samples"] > 0 and r["host_cpu_s_per_sample"] > 0 for r in doc["runs"])
    # One GET per image and one per JSON file; one streamed GET per 250-sample shard.
    assert after["requests"]["get_per_sample"] == pytest.approx(2.0)
    assert after["runs"][0]["requests_per_sample"] == pytest.approx(2.0)
    assert before["requests"]["requests_per_sample"] == pytest.approx(1 / 250)
    assert after["requests"]["first_byte_s"]["p99"] >= after["requests"]["first_byte_s"]["p50"]
    assert after["requests"]["client_cpu_s_per_request"] > 0
    # The same objects read from a bucket or from disk: the same counts.
    assert after["counts"]["files_per_sample"] == local_after["counts"]["files_per_sample"]
    assert after["counts"]["bytes_per_sample"] == local_after["counts"]["bytes_per_sample"]
    assert "requests" not in local_after and "requests_per_sample" not in local_after["runs"][0]

    paths = []
    for name, doc in (("before", before), ("after", after)):
        paths.append(tmp_path / f"{name}.json")
        write_result(paths[-1], doc)
    out = tmp_path / "cmp.json"
    assert main(["compare", *map(str, paths), "--json", str(out)]) in (0, 1)
    comparison = json.loads(out.read_text())
    metrics = {m["metric"]: m for m in comparison["runs"][0]["metrics"]}
    assert {"cpu_s_per_sample", "host_cpu_s_per_sample", "requests_per_sample"} <= set(metrics)
    assert metrics["requests_per_sample"]["ratio"] == pytest.approx(500.0)
    assert metrics["requests_per_sample"]["counted"] and metrics["requests_per_sample"]["exact"]


@pytest.mark.parametrize(("where", "needle"), [
    ("s3://no-such-bucket/before", "no such bucket"),
    ("{bucket}/no-such-prefix", "no objects under this prefix"),
])
def test_a_missing_bucket_or_prefix_is_one_line(where: str, needle: str, bucket: str,
                                                s3_env: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    target = where.format(bucket=bucket)
    for command in ("inspect", "bench"):
        assert main([command, target]) == 2
        err = capsys.readouterr().err
        assert_one_line_error(err, command, target, needle)


def test_bad_credentials_are_one_line_without_the_secret(
        bucket: str, s3_env: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-42")
    s3_env.enforce_auth(True)
    try:
        assert main(["inspect", f"{bucket}/before"]) == 2
    finally:
        s3_env.enforce_auth(False)
    err = capsys.readouterr().err
    assert_one_line_error(err, "inspect", f"{bucket}/before", "InvalidAccessKeyId")
    assert "not-the-secret-42" not in err


def test_nothing_listening_is_one_line(monkeypatch: pytest.MonkeyPatch, s3_env: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from dsbench.storage.server import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    assert main(["inspect", "s3://exports/before"]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "cannot connect to the store")


def test_generate_from_a_bucket_copies_the_images_byte_for_byte(
        bucket: str, s3_env: Any, exports: dict[str, Path], tmp_path: Path) -> None:
    from dsbench.adapters import open_export

    out = tmp_path / "arrow"
    assert main(["generate", str(Path(__file__).resolve().parents[1] / "formats/arrow.toml"),
                 str(out), "--from", f"{bucket}/after", "--samples", "30"]) == 0
    source = [s.image for s in open_export(exports["after"]).read()][:30]
    assert [s.image for s in open_export(out).read()] == source
