"""`dsbench probe` on a local directory and on the local S3 server: the documents validate, say
what was measured, and `--storage FILE.json` (with or without a stated round trip) feeds the
model with inputs marked measured. Small windows: the figures are rough, the structure exact."""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import resultdocs as rd
from layouts import assert_one_line_error, write_result

from dsbench.cli import build_parser, main
from dsbench.commands import demo
from dsbench.errors import DsbenchError
from dsbench.model.cluster import extrapolate
from dsbench.model.costs import LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.model.profiles import LOCAL, PROFILES, load_probe, with_added_latency
from dsbench.report.verdict import carries_text
from dsbench.results import schema
from dsbench.storage.probe import public_location, sample
from dsbench.storage.remote import RemotePath
from dsbench.storage.server import CREDENTIALS, LocalS3

FAST = ["--objects", "12", "--readers", "1,2", "--seconds", "0.1"]
SIZES = {"a/0.bin": 3000, "a/1.bin": 70_000, "b.bin": 250_000, "c.bin": 10, "d.bin": 1_500_000,
         "empty.bin": 0}
MODEL = ["--cpu-per-sample", "0.004", "--files-per-sample", "2", "--bytes-per-sample", "1e5",
         "--nodes", "1", "--steps", "300", "--scaling", "2", "--json", "-"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six files of 0 B to 1.5 MB in two directories, and a hidden one that readers skip."""
    root = tmp_path_factory.mktemp("probe-tree")
    (root / "a").mkdir()
    rng = random.Random(0)
    for rel, n in SIZES.items():
        (root / rel).write_bytes(rng.randbytes(n))
    (root / ".hidden").write_bytes(b"x")
    return root


def probe_to(target: str, out: Path, *extra: str) -> dict[str, Any]:
    assert main(["probe", target, *FAST, *extra, "--json", str(out)]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.fixture(scope="module")
def local_profile(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profiles") / "local.json"
    probe_to(str(tree), out)
    return out


def use(server: LocalS3, mp: pytest.MonkeyPatch, tree: Path) -> str:
    """A bucket of this test's own holding `tree` under data/, the client pointed at `server`."""
    for key, value in server.env.items():
        mp.setenv(key, value)
    bucket = f"probe-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    server.upload_tree(tree, f"s3://{bucket}/data")
    return f"s3://{bucket}/data"


@pytest.fixture(scope="module")
def s3_profile(s3_server: LocalS3, tree: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Path:
    out = tmp_path_factory.mktemp("profiles") / "s3.json"
    with pytest.MonkeyPatch.context() as mp:
        probe_to(use(s3_server, mp, tree), out)
    return out


def common_checks(doc: dict[str, Any]) -> None:
    schema.validate(doc, "probe")
    assert doc["files"] == {"listed": 6, "bytes": sum(SIZES.values()), "empty": 1}
    lat = doc["latency"]
    assert (lat["timed"], lat["distinct_files"]) == (12, 5)
    assert lat["p99_s"] is None and any("no p99" in n for n in doc["notes"])
    assert 0 < lat["min_s"] <= lat["p50_s"] <= lat["max_s"]
    runs = doc["bandwidth"]["runs"]
    assert [r["readers"] for r in runs] == [1, 2]
    assert all(r["bytes"] > 0 and r["files"] > 0 for r in runs)
    assert doc["bandwidth"]["best"]["bytes_per_s"] == max(r["bytes_per_s"] for r in runs)


def test_a_local_directory_gives_a_profile_that_says_what_was_measured(
        local_profile: Path, tree: Path) -> None:
    doc = json.loads(local_profile.read_text())
    common_checks(doc)
    assert doc["location"] == str(tree.resolve())
    assert doc["remote"] is False and doc["client"] is None
    assert "evicted" in doc["latency"]["what"] and "evicted" in doc["bandwidth"]["what"]
    cache = doc["latency"]["page_cache"]
    assert set(cache) == {"resident_before", "resident_after_evict"}
    # Every local file is read at most once per pass: never more bytes than there are.
    assert all(r["bytes"] <= sum(SIZES.values()) for r in doc["bandwidth"]["runs"])


def test_the_report_gives_every_figure_a_unit(tree: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", str(tree), *FAST]) == 0
    out = capsys.readouterr().out
    timing = r"[\d.]+ (ns|µs|ms|s)"
    assert re.search(rf"p50 {timing}, mean {timing}, no p99 from 12 timings, max {timing}", out)
    assert re.search(r"latency per file +[\d.]+ (ns|µs|ms|s) \(the p50", out)
    assert re.search(r"bandwidth +[\d.]+ [kMGT]?B/s per node", out)
    assert "files/s" in out and "%" in out


def test_a_p99_needs_a_hundred_timings(tree: Path, tmp_path: Path) -> None:
    doc = probe_to(str(tree), tmp_path / "p.json", "--objects", "100")
    lat = doc["latency"]
    assert lat["timed"] == 100 and lat["distinct_files"] == 5  # round the 5 files again
    assert lat["p50_s"] <= lat["p99_s"] <= lat["max_s"]
    assert not any("no p99" in n for n in doc["notes"])


def test_one_file_is_probed_alone(tree: Path, tmp_path: Path) -> None:
    doc = probe_to(str(tree / "b.bin"), tmp_path / "one.json")
    assert doc["files"] == {"listed": 1, "bytes": SIZES["b.bin"], "empty": 0}
    assert doc["latency"]["distinct_files"] == 1 and doc["bandwidth"]["files"] == 1


def test_the_local_s3_server_gives_a_profile_with_its_client_and_no_secret(
        s3_profile: Path) -> None:
    text = s3_profile.read_text()
    doc = json.loads(text)
    common_checks(doc)
    assert re.fullmatch(r"s3://probe-\w+/data", doc["location"])
    assert doc["remote"] is True and doc["client"]["client"] == "obstore"
    assert doc["latency"]["page_cache"] is None and "range GET" in doc["latency"]["what"]
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in text


def test_a_missing_bucket_is_one_line(s3_server: LocalS3, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    assert main(["probe", f"s3://nobucket-{uuid.uuid4().hex[:12]}/x", *FAST]) == 2
    assert_one_line_error(capsys.readouterr().err, "probe", "no such bucket")


@pytest.mark.parametrize("which", ["local_profile", "s3_profile"])
def test_extrapolate_takes_a_probe_profile_as_measured(
        which: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    path: Path = request.getfixturevalue(which)
    probed = json.loads(path.read_text())
    p50, best = probed["latency"]["p50_s"], probed["bandwidth"]["best"]["bytes_per_s"]
    assert main(["extrapolate", *MODEL, "--storage", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    schema.validate(doc, "extrapolation")
    row = next(r for r in doc["inputs"] if r["name"] == "storage")
    assert row["source"] == "measured" and probed["location"] in row["note"]
    assert doc["storage"]["per_file_s"] == pytest.approx(p50)
    assert doc["storage"]["node_bytes_per_s"] == pytest.approx(best)
    assert doc["node"]["latency_s"] == pytest.approx(2 * p50)

    assert main(["extrapolate", *MODEL, "--storage", f"{path}+0.02"]) == 0
    doc = json.loads(capsys.readouterr().out)
    schema.validate(doc, "extrapolation")
    row = next(r for r in doc["inputs"] if r["name"] == "storage")
    assert row["source"] == "measured + stated" and "plus 20.0 ms per request" in row["note"]
    assert doc["storage"]["per_file_s"] == pytest.approx(p50 + 0.02)
    assert doc["storage"]["node_bytes_per_s"] == pytest.approx(best)


def test_the_report_of_extrapolate_shows_where_the_storage_figures_came_from(
        local_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extrapolate", *MODEL[:-2], "--storage", f"{local_profile}+0.005"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"storage +probe:local\.json\+0\.005s: .* measured \+ stated", out)
    assert "storage: measured by dsbench probe of" in out


def test_compare_and_demo_take_a_probe_profile_too(
        local_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (write_result(tmp_path, f"{n}.json", rd.document([rd.run(sps=s)]))
            for n, s in (("a", [400, 405, 395]), ("b", [300, 310, 305])))
    assert main(["compare", a, b, "--nodes", "1", "--storage", str(local_profile),
                 "--json", "-"]) == 0
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    for side in cluster.values():
        assert next(r for r in side["inputs"] if r["name"] == "storage")["source"] == "measured"
    args = build_parser().parse_args(["demo", "--storage", f"{local_profile}+0.02"])
    assert demo.options(args).cluster.storage.origin == "measured + stated"


def test_the_demo_verdict_says_the_latency_was_measured(local_profile: Path) -> None:
    cost = LoaderCost.stated(0.004, files_per_sample=2, bytes_per_sample=1e5)
    for storage, words in ((load_probe(local_profile), "measured by dsbench probe (probe:"),
                           (with_added_latency(load_probe(local_profile), 0.01, "x"),
                            "measured by dsbench probe, plus a stated round trip"),
                           (PROFILES["efs"], "assumed by the efs profile")):
        doc = extrapolate(cost, ClusterSpec(nodes=1, storage=storage),
                          np.random.default_rng(0), steps=200, scaling=(2,))
        assert words in carries_text(doc, "after")


def _without_latency(doc: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in doc.items() if k != "latency"})


@pytest.mark.parametrize(("contents", "needle"), [
    (lambda doc: "{not json", "not JSON"),
    (lambda doc: json.dumps(doc)[:200], "not JSON"),
    (lambda doc: json.dumps({"kind": "dsbench-bench"}), "not a storage profile"),
    (lambda doc: "[]", "not a storage profile"),
    (_without_latency, "not a valid storage profile"),
    (lambda doc: json.dumps(doc).replace('"p50_s": ', '"p50_s": -'),
     "not a valid storage profile: latency.p50_s"),
    (lambda doc: b"\xff\xfe\x00", "cannot read the storage profile"),
], ids=["not-json", "truncated", "other-kind", "a-list", "no-latency", "negative",
        "binary"])
def test_a_bad_profile_file_is_one_line_and_exit_2(
        contents: Any, needle: str, local_profile: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    data = contents(json.loads(local_profile.read_text()))
    if isinstance(data, bytes):
        bad.write_bytes(data)
    else:
        bad.write_text(data)
    assert main(["extrapolate", *MODEL, "--storage", str(bad)]) == 2
    assert_one_line_error(capsys.readouterr().err, "extrapolate", str(bad), needle)
    assert main(["extrapolate", *MODEL, "--storage", f"{bad}+0.01"]) == 2
    assert_one_line_error(capsys.readouterr().err, "extrapolate", str(bad), needle)


def test_a_stated_round_trip_adds_per_request_and_says_so(local_profile: Path) -> None:
    probed = load_probe(local_profile)
    assert probed.origin == "measured" and probed.ops_per_file == 1
    more = with_added_latency(probed, 0.02, "a WAN round trip")
    assert more.origin == "measured + stated" and "a WAN round trip" in more.source
    assert more.per_file_s == pytest.approx(probed.per_file_s + 0.02)
    assert with_added_latency(more, 0.01, "again").origin == "measured + stated"
    efs = with_added_latency(PROFILES["efs"], 0.01, "x")  # two requests per file: twice
    assert efs.origin == "profile + stated"
    assert efs.per_file_s == pytest.approx(PROFILES["efs"].per_file_s + 0.02)
    with pytest.raises(DsbenchError, match="no request per file"):
        with_added_latency(LOCAL, 0.01, "x")
    with pytest.raises(DsbenchError, match=">= 0"):
        with_added_latency(probed, -1, "x")


def test_no_credential_reaches_the_recorded_location(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://user:secret@host.example/exports/x?X-Amz-Signature=abc"
    assert public_location(RemotePath(url)) == "https://host.example/exports/x"
    assert public_location(RemotePath("s3://bucket/prefix")) == "s3://bucket/prefix"
    monkeypatch.chdir(tmp_path)
    assert public_location(Path("rel")) == str(tmp_path.resolve() / "rel")


def test_the_sample_is_deterministic_and_nested() -> None:
    listed = [(f"d{i % 3}/{i:04d}.bin", 100 + i) for i in range(50)]
    assert sample(listed, 7) == sample(list(reversed(listed)), 7)
    assert sample(listed, 7) == sample(listed, 20)[:7]
    assert len(set(sample(listed, 50))) == 50
    assert sample(listed[:2], 5) == [*sample(listed[:2], 2)] * 2 + sample(listed[:2], 1)
