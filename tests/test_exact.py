"""Exact CPU per sample: instructions counted under valgrind, the same whatever the window,
workers or load; a gzipped copy of shards fails the gate on them, a plain copy passes; without
valgrind every command says why CPU was not counted exactly; and the pass's failures are one
line with nothing left behind."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import resultdocs as rd
from conftest import write_export
from layouts import assert_one_line_error
from leftovers import ended, group_killed_after, left_behind

from dsbench.analysis import gate, instructions
from dsbench.analysis.compare import compare
from dsbench.cli import main
from dsbench.loader import counter, exact
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_bench, run_benches
from dsbench.results.document import read_result, write_result
from dsbench.results.stages import STAGES

# One round: what these commands are checked for (the exact pass, its failures, what they say
# without it) comes before any timed round or does not depend on how many there are.
QUICK = ["--rounds", "1", "--seconds", "0.2", "--batch-size", "16"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """WebDataset shards of 16 samples, the same shards gzipped, and a plain copy of them at a
    path of another length."""
    root = tmp_path_factory.mktemp("exact")
    # (Small: each side's instructions are counted under valgrind, about 50 times slower.)
    plain = write_export(root, "wds", 32, shard_samples=16)
    gz, copy = root / "gzipped", root / "a-copy-of-the-shards-at-a-longer-path"
    shutil.copytree(plain, copy)
    gz.mkdir()
    for shard in sorted(plain.glob("*.tar")):
        (gz / f"{shard.name}.gz").write_bytes(gzip.compress(shard.read_bytes(), mtime=0))
    return {"plain": plain, "gz": gz, "copy": copy}


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """`n` processes spinning on a core each: a busy neighbour."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def counted(shards: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Path]:
    """The shards, their copy at a longer path and the shards gzipped, measured in one run with
    their instructions counted: each side's result file. One timed round each: the tests check
    the counts (made before the rounds, the same whatever they are), and a gate fails a timing
    only on an interval, which one round does not give."""
    root = tmp_path_factory.mktemp("counted")
    names = ("plain", "copy", "gz")
    docs = run_benches([shards[n] for n in names],
                       BenchOptions(workers=(1,), batch_size=16, seconds=0.2, rounds=1,
                                    exact=True))
    out = {}
    for name, doc in zip(names, docs, strict=True):
        out[name] = write_result(root / f"{name}.json", doc)
    return out


# These two share a fixture of three exact passes (26 s) and count once more beside a busy
# neighbour (15 s): with the slow tests, which CI runs too.
@pytest.mark.slow
def test_the_count_is_the_same_whatever_the_window_workers_path_or_a_busy_neighbour(
        shards: dict[str, Path], counted: dict[str, Path]) -> None:
    quiet, copy = read_result(counted["plain"]), read_result(counted["copy"])
    # The shards again, with two workers, a longer window and a busy neighbour.
    with busy_loops(1):
        busy = run_bench(shards["plain"], BenchOptions(workers=(2,), batch_size=16, seconds=0.5,
                                                       rounds=1, exact=True))
    x, y = quiet["exact"], busy["exact"]
    assert x["counted"] and x["why_not"] is None
    assert x.get("counter", {})["name"] == "valgrind cachegrind"
    assert x.get("counter", {})["version"] == counter.version()
    # All 32 samples through every stage, read over both whole shards.
    assert (x.get("samples"), x.get("read_samples"), x.get("units_read"),
            x.get("whole_units")) == (32, 32, 2, True)
    stages = x.get("stages", {})
    assert set(stages) == set(STAGES) and all(stages[s] > 0 for s in STAGES)
    for key in ("instructions_per_sample", "stages", "read_calls_per_sample",
                "write_calls_per_sample"):
        assert y.get(key) == x.get(key), key  # to the instruction
    # Page faults are the kernel's: they repeat within a fault or two in thousands.
    assert y.get("minor_faults_per_sample") == pytest.approx(
        x.get("minor_faults_per_sample"), rel=0.01)
    # Reading a tar member takes read calls; nothing is written.
    assert x.get("read_calls_per_sample", 0) > 0
    assert x.get("write_calls_per_sample") == 0
    # The copy at a longer path: its buffers lie elsewhere, and its count moves by less than
    # the tolerance within which two counts are the same; the gate passes it.
    result = gate.evaluate(compare(quiet, copy), gate.Thresholds())
    check = next(c for c in result["checks"] if c["metric"] == "instructions_per_sample")
    assert check["status"] == "pass" and abs(check["ratio"] - 1) < instructions.TOLERANCE
    assert result["exact_cpu"]["checked"]


@pytest.mark.slow
def test_gzipped_shards_fail_the_gate_on_exact_cpu(
        counted: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gz.json"
    code = main(["gate", str(counted["plain"]), str(counted["gz"]), "--json", str(out)])
    text, doc = capsys.readouterr().out, json.loads(out.read_text())
    assert code == 1
    check = next(c for c in doc["gate"]["checks"] if c["metric"] == "instructions_per_sample")
    assert check["status"] == "fail" and check["exact"] and check["ratio_ci95"] is None
    # Inflating these small images' shards adds about 3% to the count: past the default.
    assert check["ratio"] > 1.02 and check["limit"] == "ratio <= 1.02"
    assert doc["gate"]["exact_cpu"]["checked"]
    assert "CPU checked exactly: instructions per sample counted by valgrind cachegrind" in text
    # Inflating the shards is read's: the other stages run the same code on the same samples.
    rows = {r["what"]: r for r in doc["comparison"]["runs"][0]["attribution"]}
    assert rows["read instructions"]["distinguishable"]
    assert rows["read instructions"]["delta"] > 0
    for stage in ("decode", "fields", "transform"):
        assert not rows[f"{stage} instructions"]["distinguishable"], stage
    assert "read +" in text and "instructions/sample (exact)" in text


def test_a_pipeline_step_is_counted_in_place_of_decode_fields_and_transform(
        shards: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mystep.py").write_text(textwrap.dedent('''
        import numpy as np

        def first_bytes(sample):
            return np.frombuffer(sample["image"], np.uint8)[:64].astype(np.float32)
    '''))
    monkeypatch.chdir(tmp_path)
    doc = run_bench(shards["plain"], BenchOptions(batch_size=16, seconds=0.2, rounds=1,
                                                  exact=True, step="mystep:first_bytes"))
    stages = doc["exact"].get("stages", {})
    # Nothing of the pipeline runs in decode and fields: they hold only the pass's own steps
    # from one batch to the next (slicing it, a call), a few hundred instructions a sample.
    assert 0 <= stages["decode"] + stages["fields"] < 0.001 * sum(stages.values())
    assert stages["transform"] > 0 and stages["read"] > 0


def test_a_bad_image_in_the_counted_samples_is_one_line_and_leaves_nothing(
        tmp_path: Path) -> None:
    export = write_export(tmp_path, "files", 8)
    bad = sorted(export.rglob("*.jpg"))[2]
    bad.write_bytes(b"\xff\xd8\xff not a jpeg")
    env = {**os.environ, exact.ENV: "1"}
    proc = subprocess.Popen([sys.executable, "-m", "dsbench", "bench", str(export), *QUICK],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    with group_killed_after(proc):
        err, _ = ended(proc, timeout=120)
    assert proc.returncode == 2
    assert_one_line_error(err, "bench", str(bad), f"[sample {bad.parent.name}/{bad.stem}]")
    assert left_behind(proc.pid) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"dsbench-exact-{proc.pid}-*"))


def test_sigterm_during_the_exact_pass_ends_it_and_leaves_nothing(
        shards: dict[str, Path]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "dsbench", "bench", str(shards["plain"]),
                             "--exact", *QUICK], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    with group_killed_after(proc):
        assert proc.stderr is not None
        # The counted process has started under valgrind (it logs there at once); then it
        # imports, warms up and counts for seconds more.
        deadline = time.monotonic() + 30
        while not list(Path(tempfile.gettempdir()).glob(f"dsbench-exact-*{proc.pid}*/*/logs/*")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        err, took = ended(proc, timeout=30)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "dsbench bench: terminated"
    assert took < 10
    assert left_behind(proc.pid) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"dsbench-exact-{proc.pid}-*"))


def test_without_valgrind_each_command_says_why_cpu_was_not_counted_exactly(
        tiny_exports: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(counter, "version", lambda: None)
    monkeypatch.delenv(exact.ENV)
    before = str(tiny_exports["before"])
    assert main(["bench", before, *QUICK]) == 0
    said = capsys.readouterr().out
    assert ("CPU per sample, exact: not counted: valgrind is not installed, so CPU per sample "
            "is timed only (install it: sudo apt-get install valgrind on Debian and Ubuntu, "
            "sudo dnf install valgrind on Fedora)") in said
    assert main(["gate", before, before, *QUICK]) == 0
    said = capsys.readouterr().out
    assert "CPU not checked exactly: the base's instructions were not counted: valgrind is " \
           "not installed" in said
    assert "the timed CPU check stands alone" in said
    assert "CPU instructions per sample" not in said
    # Asked for, it is an error before anything runs.
    assert main(["bench", before, "--exact", *QUICK]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--exact: valgrind is not installed")


def test_a_bad_dsbench_exact_setting_is_one_line(tiny_exports: dict[str, Path],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(exact.ENV, "sometimes")
    assert main(["bench", str(tiny_exports["before"]), *QUICK]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench",
                          "DSBENCH_EXACT=sometimes: expected 1 (count CPU exactly), 0 (do not) "
                          "or auto")


# ---- comparing counts, on made-up documents ----

def _counted(doc: dict[str, Any], total: float, **change: Any) -> dict[str, Any]:
    stages = {s: total / len(STAGES) for s in STAGES}
    doc["exact"] = {"counted": True, "why_not": None, "samples": 64, "read_samples": 64,
                    "units_read": 1, "whole_units": True, "instructions_per_sample": total,
                    "stages": stages,
                    "counter": {"name": "valgrind cachegrind", "version": "3.19.0",
                                "kind": "simulated", "event": "instructions",
                                "options": "--tool=cachegrind"}}
    for key, value in change.items():
        doc["exact"][key] = value
    return doc


@pytest.mark.parametrize(("change", "paired", "reason"), [
    ({"counter": {"name": "valgrind cachegrind", "version": "3.22.0"}}, True,
     "counted by different counters or options"),
    ({"samples": 32}, True, "counted over different numbers of samples (64 vs 32"),
    ({}, False, "measured apart with different libraries"),
])
def test_counts_made_otherwise_are_not_compared(change: dict[str, Any], paired: bool,
                                                reason: str) -> None:
    base = _counted(rd.document([rd.run()]), 2e7)
    cand = _counted(rd.document([rd.run()]), 2e7, **change)
    if not paired:
        cand["machine"]["libraries"] = {**base["machine"].get("libraries", {}), "pillow": "0.1"}
    said = instructions.section(base, cand, paired)
    assert not said["compared"] and said["why_not"].startswith(reason)
    alike = instructions.section(base, _counted(rd.document([rd.run()]), 2e7), paired)
    assert alike["compared"] and alike["why_not"] is None


def test_what_a_snapshot_costs_is_taken_off_every_stage() -> None:
    cost = 4708  # instructions between two snapshots back to back
    marks = [0, cost, 2 * cost + 1000, 3 * cost + 1050, 4 * cost + 1057]
    snaps = [(s, {"n": m}) for s, m in zip(("start", "snapshot", "read", "decode", "read"),
                                            marks, strict=True)]
    stages = exact.per_stage(snaps, ("n",))
    assert stages["read"]["n"] == 1000 + 7 and stages["decode"]["n"] == 50
    assert stages["transform"]["n"] == 0


@pytest.mark.parametrize("value", ["", "x", "x" * 17, "x" * 5000])
def test_the_pass_sees_the_same_environment_size_whatever_the_callers_holds(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The count moved by up to 0.05% with the environment's length (pytest's own variable
    # changes between a test's setup and its call): what varies between runs is left out, and
    # the rest padded to whole pages.
    monkeypatch.setenv("PYTEST_CURRENT_TEST", value)
    monkeypatch.setenv("A_VARIABLE_OF_THE_CALLERS", value)
    argv = ["python", "-m", "dsbench.loader.exact_pass", "instructions.plan"]
    env = exact.child_environment(argv)
    assert "PYTEST_CURRENT_TEST" not in env and env["PYTHONHASHSEED"] == "0"
    assert env["A_VARIABLE_OF_THE_CALLERS"] == value  # a pipeline step may read its own
    size = sum(len(k) + len(v) + 2 for k, v in env.items()) + sum(len(a) + 1 for a in argv)
    assert size % exact.PAGE == 0


@pytest.mark.parametrize("batch", [1, 2, 16])
def test_the_pass_runs_at_a_batch_smaller_than_its_warm_up(batch: int,
                                                          shards: dict[str, Path]) -> None:
    # Run directly (mode "kernel": the kernel's counts, no counter): the warm-up's samples go
    # through the stages in the run's batches, as the counted samples do, never more rows than
    # the batch's buffer holds.
    from dsbench.loader.exact_pass import WARMUP, Plan, run

    assert batch < WARMUP or batch == 16
    plan = Plan(str(shards["plain"]), None, BenchOptions().pipeline(), 8, batch, 0,
                "kernel", tuple(sys.path))
    got = run(plan)
    assert (got["samples"], got["units_read"], got["whole_units"]) == (8, 1, True)
    counted = [stage for stage, _ in got["snapshots"]]
    assert counted[:2] == ["start", "snapshot"]
    assert counted.count("decode") == -(-8 // batch)  # one per batch of the kept samples
