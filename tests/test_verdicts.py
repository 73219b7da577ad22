"""Verdicts on real measurements: counts that do not depend on the window, a gate that never
fails an export against itself, rounds in alternating order, no silent partial reads."""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import quick, write_export

from dsbench import adapters
from dsbench.analysis import compare, gate
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.loader import runner
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_bench, run_benches
from dsbench.results.document import write_result


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shard of 300 samples: a short window ends inside it."""
    return write_export(tmp_path_factory.mktemp("shard"), "wds", 300, shard_samples=300)


# Windows of so many batches (of 8), not seconds: how far a window of seconds reads into the
# shard depends on the machine's speed (0.2 s read 376 samples on a quiet machine, 3 x 0.6 s
# fewer than 300 on a busy one). After the warm-up's batch, the short window reads samples 8 to
# 88 of the shard's 300; each long one reads 320, round the shard and past where it began.
SHORT_BATCHES, LONG_BATCHES = 10, 40


@pytest.fixture(scope="module")
def short_and_long(one_shard: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return (run_bench(one_shard, quick(rounds=1, batches=SHORT_BATCHES)),
            run_bench(one_shard, quick(rounds=3, batches=LONG_BATCHES)))


def test_counts_do_not_depend_on_the_window(short_and_long: tuple[dict, dict]) -> None:
    short, long = short_and_long
    # The short window read only part of the shard, each long one went round it and further.
    short_reads = [r["samples"] for r in short["runs"][0]["rounds"]]
    long_reads = [r["samples"] for r in long["runs"][0]["rounds"]]
    assert short_reads == [8 * SHORT_BATCHES] and 8 + short_reads[0] < 300
    assert long_reads == [8 * LONG_BATCHES] * 3 and min(long_reads) > 300
    for doc in (short, long):
        assert doc["counts"]["exact"] and doc["counts"]["samples"] == 300
        assert doc["runs"][0]["files_per_sample"] == pytest.approx(1 / 300, rel=0.01)
    a, b = short["runs"][0], long["runs"][0]
    assert b["files_per_sample"] == pytest.approx(a["files_per_sample"], rel=1e-3)
    assert b["bytes_per_sample"] == pytest.approx(a["bytes_per_sample"], rel=1e-3)


def test_the_gate_passes_an_export_against_itself_in_both_orders(
        short_and_long: tuple[dict, dict], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    short, long = short_and_long
    a, b = write_result(tmp_path / "short.json", short), write_result(tmp_path / "long.json",
                                                                      long)
    for base, cand in ((a, b), (b, a)):
        assert main(["gate", str(base), str(cand)]) == 0, capsys.readouterr().out
        capsys.readouterr()
        g = gate.evaluate(compare.compare(short, long), gate.Thresholds())
        counted = [c for c in g["checks"] if c["counted"]]
        assert [c["status"] for c in counted] == ["pass", "pass"]


def test_before_vs_after_fails_the_gate_on_files(tiny_exports: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # One round each: files per sample is a count over whole units, whatever the rounds.
    rc = main(["gate", str(tiny_exports["before"]), str(tiny_exports["after"]),
               "--seconds", "0.3", "--rounds", "1", "--batch-size", "8"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert re.search(r"FAIL +files opened per sample", out)
    assert "a count over whole units" in out


def test_rounds_alternate_their_order(tiny_exports: dict[str, Path],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = runner.run_round

    def recording(path: Path, opts: BenchOptions, n_workers: int) -> dict[str, Any]:
        seen.append(path.name)
        return real(path, opts, n_workers)

    monkeypatch.setattr(runner, "run_round", recording)
    a, b = tiny_exports["before"], tiny_exports["after"]
    # Three rounds: in order, reversed, in order again.
    docs = run_benches([a, b], quick(0.1, 3))
    assert seen == [a.name, b.name, b.name, a.name, a.name, b.name]
    # One run: the two documents share a run id, so compare pairs their rounds.
    assert docs[0]["run_id"] == docs[1]["run_id"]
    assert compare.compare(docs[0], docs[1])["paired"]


def _mixed(root: Path) -> Path:
    mixed = root / "mixed"
    shutil.copytree(write_export(root, "arrow", 20, shard_samples=10), mixed)
    shutil.copy(write_export(root, "wds", 10) / "shard-000000.tar", mixed / "extra.tar")
    shutil.copy(write_export(root, "files", 3) / "000000" / "00000000.jpg", mixed / "loose.jpg")
    return mixed


@pytest.mark.parametrize("command", ["inspect", "bench"])
def test_a_directory_of_mixed_layouts_is_refused_in_one_line(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    mixed = _mixed(tmp_path)
    assert main([command, str(mixed)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mixed layouts" in err
    assert "2 Arrow IPC files" in err and "1 WebDataset shard (extra.tar)" in err
    assert "1 per-sample image file (loose.jpg)" in err
    assert "--layout wds or files or arrow" in err


def test_a_chosen_layout_says_what_it_leaves_out(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    mixed = _mixed(tmp_path)
    export = adapters.open_export(mixed, "arrow")
    assert export.ignored == ["extra.tar", "loose.jpg"]
    assert main(["inspect", str(mixed), "--layout", "arrow"]) == 0
    assert "not read:           2 files that are not arrow data (extra.tar, loose.jpg)" in (
        capsys.readouterr().out)
    doc = run_bench(mixed, BenchOptions(layout="arrow", batch_size=4, rounds=1, batches=2,
                                        warmup_batches=1))
    assert doc["export"]["ignored_files"]["count"] == 2
    assert any("were not read" in w for w in doc["warnings"])


def test_plain_and_gzip_shards_are_read_whole(tmp_path: Path) -> None:
    out = write_export(tmp_path, "wds", 40, shard_samples=10)
    for name in ("shard-000001.tar", "shard-000003.tar"):
        with open(out / name, "rb") as src, gzip.open(out / (name + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        (out / name).unlink()
    export = adapters.open_export(out)
    assert export.layout == "wds" and len(export.units()) == 4 and export.ignored == []
    assert sum(1 for _ in export.read()) == 40
    assert adapters.open_export(out).survey()["samples"] == 40
    doc = run_bench(out, BenchOptions(batch_size=4, rounds=1, batches=3, warmup_batches=1))
    assert doc["counts"]["samples"] == 40 and doc["counts"]["exact"]


def test_an_unknown_layout_name_is_refused() -> None:
    with pytest.raises(DsbenchError, match="unknown layout 'zip'"):
        BenchOptions(layout="zip")
