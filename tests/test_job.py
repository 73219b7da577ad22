"""dsbench job: real ranks on torch.distributed (2 and 4 on one machine, two "nodes" on
localhost), the document they write, the model beside it, and a killed rank's clean failure."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from conftest import write_export

from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.job import identity, result
from dsbench.job.launch import describe
from dsbench.job.options import JobOptions
from dsbench.job.rank import PEER_LOST
from dsbench.model.costs import Distribution
from dsbench.results import schema
from dsbench.results.machine import usable_cores

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight shards of 20 samples: enough units for 4 ranks with a worker each."""
    return write_export(tmp_path_factory.mktemp("job"), "wds", 160, shard_samples=20)


def _shm() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("dsbench-*")}


def _check_records(doc: dict[str, Any], ranks: int, steps: int) -> None:
    assert doc["ranks"] == ranks == len(doc["per_rank"]) == len(doc["lateness"])
    counted = steps - doc["warmup_steps"]
    assert doc["steps"] == counted
    assert sum(r["slowest_steps"] for r in doc["lateness"]) == counted
    for r in doc["per_rank"]:
        assert len(r["step_s"]) == steps
        # Each step is the sum of its parts: wait for data, compute, the collective.
        for parts in zip(r["wait_s"], r["compute_s"], r["collective_s"], r["step_s"],
                         strict=True):
            assert abs(sum(parts[:3]) - parts[3]) < 1e-5
        # The hand-over is the part of the wait after the batch was built: never more.
        assert all(0 <= h <= w + 1e-6 for h, w in zip(r["handover_s"], r["wait_s"],
                                                      strict=True))
    loader = doc["loader"]
    assert len(loader["batch_wall_s"]) == len(loader["batch_cpu_s"]) == counted * ranks
    st = doc["step_time_s"]
    assert 0 < st["p50"] <= st["p99"] <= st["max"]
    assert 0 < doc["gpu_util"] <= 1
    assert set(doc["model"]["ratios"]) == {"mean", "p50", "p99", "max", "gpu_util"}


def test_a_two_rank_job_with_torch_loaders_writes_a_valid_document_and_extrapolate_reads_it(
        shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "job.json"
    # Run from a folder holding a data directory named dsbench (as /tmp/dsbench in the docs):
    # the ranks must still import the package.
    (tmp_path / "dsbench").mkdir()
    monkeypatch.chdir(tmp_path)
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    assert main(["job", str(shards), "--ranks", "2", "--workers", "1", "--gpu-batch", "8",
                 "--compute", "0.01", "--steps", "30", "--backend", "torch",
                 "--json", str(out)]) == 0
    # torch's launcher sets handlers of its own and leaves them; the job puts these back (a
    # Ctrl-C after a job, as in the demo, is then dsbench's to report).
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers
    doc = result.read(out)  # validates against the schema
    _check_records(doc, 2, 30)
    assert doc["loader"]["backend"] == "torch" and doc["launch"]["launcher"] == "dsbench"
    assert doc["launch"]["backend"] == "gloo"
    # Compute is stated at 10 ms and slept: every counted step takes at least that long.
    assert min(min(r["compute_s"]) for r in doc["per_rank"]) >= 0.01
    assert doc["model"]["inputs"]["cluster"]["gpus_per_node"] == 2
    report = capsys.readouterr().out
    assert "Model beside measurement" in report and "model/measured" in report

    assert main(["extrapolate", str(out), "--steps", "2000", "--json", "-"]) == 0
    again = json.loads(capsys.readouterr().out)
    schema.validate(again, "job")
    assert again["model"]["steps"] == 2000
    assert again["step_time_s"] == doc["step_time_s"]  # the measurement, unchanged


@pytest.mark.slow  # 15 to 20 s: `python -m pytest -m slow` (CI runs it)
def test_a_four_rank_job_sees_every_drawn_stall_in_its_step_times(
        shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.json"
    steps = 80
    assert main(["job", str(shards), "--ranks", "4", "--workers", "1", "--gpu-batch", "4",
                 "--compute", "0.01", "--stall-prob", "0.2", "--stall-time", "0.15",
                 "--steps", str(steps), "--json", str(out)]) == 0
    doc = result.read(out)
    _check_records(doc, 4, steps)
    slow = doc["slow_steps"]
    # A stall of 150 ms against 10 ms steps: the steps that held one are the slow ones.
    assert abs(slow["fraction"] - slow["stalled_fraction"]) <= 0.1
    # 1 - (1 - q)^N = 59% for q = 0.2 and 4 ranks; 76 steps give it a sd of 5.6 points.
    assert doc["model"]["prediction"]["independent_fraction"] == pytest.approx(1 - 0.8 ** 4)
    assert abs(slow["fraction"] - (1 - 0.8 ** 4)) <= 0.2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_on_localhost_under_torchrun_make_one_job(shards: Path, tmp_path: Path
                                                            ) -> None:
    port, out = _free_port(), tmp_path / "job.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
           "--nproc-per-node", "1", "--max-restarts", "0", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}",
           "-m", "dsbench", "job", str(shards), "--workers", "1", "--gpu-batch", "4",
           "--compute", "0.01", "--steps", "20", "--json", str(out)]
    nodes = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outs
    doc = result.read(out)
    _check_records(doc, 2, 20)
    assert doc["launch"]["launcher"] == "torchrun" and doc["launch"]["nodes"] == 2
    assert sorted(r["node"] for r in doc["per_rank"]) == [0, 1]
    # One host holds both "nodes": the model gives each half of its cores.
    assert doc["launch"]["cores_per_node"] == max(1, round(usable_cores() / 2))
    # Only global rank 0 reports.
    assert sum("Model beside measurement" in o for o, _ in outs) == 1


def _ranks_of(launcher: psutil.Process) -> dict[int, psutil.Process]:
    """The rank processes: a rank's own short-lived children (forked to run a program) carry its
    command line until they exec, so a rank is one whose parent is not a rank."""
    found = {}
    try:
        family = launcher.children(recursive=True)
    except psutil.Error:
        return {}
    for p in family:
        try:
            if ("dsbench.job.rank" in " ".join(p.cmdline())
                    and "dsbench.job.rank" not in " ".join(psutil.Process(p.ppid()).cmdline())):
                found[int(p.environ()["RANK"])] = p
        except (psutil.Error, KeyError, ValueError):
            continue
    return found


def _has_worker(rank: psutil.Process) -> bool:
    try:
        return bool(rank.children())
    except psutil.Error:
        return False


def assert_nothing_left(tree: list[psutil.Process], shm_before: set[str]) -> None:
    """No process of `tree` is left a second later, nor a shared-memory segment one made.
    Segments are named dsbench-<pid of the process that made them>-...; other dsbench runs on
    the machine may make their own meanwhile."""
    time.sleep(1.0)
    alive = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    pids = {str(p.pid) for p in tree}
    assert {n for n in _shm() - shm_before if n.split("-")[1] in pids} == set()


def _job_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("dsbench-job-*"))


def test_a_killed_rank_fails_the_job_at_once_with_one_line_and_leaves_nothing(
        shards: Path) -> None:
    shm_before, dirs_before = _shm(), _job_dirs()
    proc = subprocess.Popen([sys.executable, "-m", "dsbench", "job", str(shards), "--ranks",
                             "2", "--workers", "1", "--gpu-batch", "4", "--compute", "0.01",
                             "--steps", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    launcher = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    ranks: dict[int, psutil.Process] = {}
    try:
        # Wait for both ranks to be in their steps: each has started its loader worker.
        while time.monotonic() < deadline:
            ranks = _ranks_of(launcher)
            if len(ranks) == 2 and all(_has_worker(r) for r in ranks.values()):
                break
            time.sleep(0.2)
        assert len(ranks) == 2, "the ranks did not start"
        time.sleep(2.0)
        tree = [launcher, *launcher.children(recursive=True)]
        killed_at = time.monotonic()
        ranks[1].send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # failed before the job ended: end it, or it runs on
            with contextlib.suppress(psutil.Error):
                family = [*launcher.children(recursive=True), launcher]
                for p in family:
                    with contextlib.suppress(psutil.Error):
                        p.kill()
            proc.communicate()
    took = time.monotonic() - killed_at
    assert took < 10
    assert proc.returncode == 2
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("job: ")]  # progress
    assert len(lines) == 1, err
    assert re.fullmatch(r"dsbench job: error: rank 1 \(pid \d+\) was killed by SIGKILL; the "
                        r"other 1 rank stopped", lines[0]), lines[0]
    assert_nothing_left(tree, shm_before)
    # the launcher's logs and result file (named by its pid: other jobs may run meanwhile)
    assert {d for d in _job_dirs() - dirs_before
            if d.name.startswith(f"dsbench-job-{proc.pid}-")} == set()


# --- without launching ------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--ranks", "0"], ["--ranks", "9"], ["--workers", "0"],
                                  ["--compute", "fast"], ["--stall-prob", "0.1"],
                                  ["--steps", "3"], ["--ranks", "2", "--ranks-sweep", "1,2"]])
def test_bad_options_are_one_line_and_exit_2(shards: Path, argv: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", str(shards), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dsbench job: error: ")


def test_the_rank_comes_from_torchrun_then_slurm_and_otherwise_dsbench_launches() -> None:
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
    slurm = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_PROCID": "2",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NNODES": "2"}
    assert identity.detect(torchrun) == identity.Identity(3, 4, 1, 2, 1, 2, "torchrun")
    assert identity.detect({**slurm, **torchrun}).launcher == "torchrun"  # type: ignore[union-attr]
    assert identity.detect(slurm) == identity.Identity(2, 4, 0, 2, 1, 2, "slurm")
    assert identity.detect({"RANK": "1", "WORLD_SIZE": "2"}) is None  # a stale shell variable
    assert identity.detect({**slurm, "SLURM_NTASKS": "1"}) is None  # a batch shell, not a task
    with pytest.raises(DsbenchError, match="MASTER_ADDR"):
        identity.slurm_rendezvous(identity.Identity(0, 2, 0, 1, 0, 2, "slurm"), {})


def _failure(pid: int, code: int) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, exitcode=code, error_file=None,
                           signal_name=lambda: signal.Signals(-code).name)


def test_a_failure_names_the_rank_that_died_not_the_peers_it_took_along() -> None:
    # The agent lists the peer that noticed first; the dead rank is still the root cause.
    failures = {0: _failure(10, PEER_LOST), 2: _failure(12, -9), 1: _failure(11, -15)}
    assert describe(failures, 4) == "rank 2 (pid 12) was killed by SIGKILL; the other 3 " \
                                    "ranks stopped"


def test_a_rank_that_died_before_torch_could_record_why_is_described_from_its_log(
        tmp_path: Path) -> None:
    # An import that fails kills the rank before torch's error file exists: the reason is
    # the last line the rank wrote to its log.
    log = tmp_path / "run1" / "attempt_0" / "1" / "stderr.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module "
                   "named 'dsbench.job'\n")
    failures = {1: _failure(11, 1), 0: _failure(10, PEER_LOST)}
    assert describe(failures, 2, tmp_path) == (
        "rank 1 (pid 11) exited with code 1 (ModuleNotFoundError: No module named "
        "'dsbench.job'); the other 1 rank stopped")


def _record(rank: int, wait: list[float], busy: list[float], coll: list[float]
            ) -> dict[str, Any]:
    steps = [w + b + c for w, b, c in zip(wait, busy, coll, strict=True)]
    starts = [sum(steps[:i]) for i in range(len(steps))]
    return {"rank": rank, "local_rank": rank, "node": 0, "nodes": 1, "world": 2,
            "local_world": 2, "launcher": "dsbench", "host": "h", "pid": 100 + rank,
            "backend": "gloo", "start_s": starts, "wait_s": wait, "busy_s": busy,
            "stall_s": [0.0] * len(wait), "compute_drawn_s": busy, "collective_s": coll,
            "step_s": steps, "idle_collective_s": [0.001], "batch_cpu_s": [0.01] * 8,
            "batch_wall_s": [0.02] * 8, "handover_s": [min(w, 0.0005) for w in wait],
            "samples": 32, "window_s": sum(steps), "rank_cpu_s": 0.01, "workers_cpu_s": 0.08,
            "origin_s": 100.0,
            "host_busy_s": 0.2}


def test_the_slowest_rank_is_the_one_that_waited_least_at_the_collective() -> None:
    opts = JobOptions(ranks=2, workers=1, prefetch=1, batch_size=4, steps=10,
                      compute=Distribution("const", 0.05))
    n = 10
    # Rank 1 waits 30 ms for data in steps 0-5 and so reaches the collective last there.
    late = [0.03 if i < 6 else 0.0 for i in range(n)]
    r0 = _record(0, [0.0] * n, [0.05] * n, [0.001 + x for x in late])
    r1 = _record(1, late, [0.05] * n, [0.001] * n)
    doc = result.build("x", opts, [r1, r0], "cpu")
    by_rank = {r["rank"]: r["slowest_steps"] for r in doc["lateness"]}
    assert by_rank == {1: 5, 0: 4}  # steps 1-5 and 6-9 counted (the first is warmup)
    # Lost to data: 30 ms in each of rank 1's late steps, of 81 ms.
    assert doc["data_wait_share"] == pytest.approx(5 * 0.030 / (5 * 0.081 + 4 * 0.051))
    assert doc["gpu_util"] == pytest.approx(9 * 0.05 / (5 * 0.081 + 4 * 0.051))


def test_the_model_resamples_the_measured_all_reduce_and_hand_over_not_their_means() -> None:
    opts = JobOptions(ranks=2, workers=1, prefetch=1, batch_size=4, steps=202,
                      compute=Distribution("const", 0.05))
    n = 202
    # The all-reduce takes 1 ms, but 60 ms in one step of 50: its mean (2.2 ms) would give
    # a model without a tail, the measured steps give the model's p99 the 60 ms.
    coll = [0.06 if i % 50 == 7 else 0.001 for i in range(n)]
    docs = result.build("x", opts, [_record(r, [0.0] * n, [0.05] * n, coll) for r in (0, 1)],
                        "cpu")
    pred = docs["model"]["prediction"]["step_time_s"]
    assert pred["p50"] == pytest.approx(0.05 + 0.001, abs=1e-3)
    assert pred["p99"] == pytest.approx(0.05 + 0.06, abs=2e-3)
    assert docs["model"]["inputs"]["allreduce_per_step_s"]["max"] == pytest.approx(0.06)
    # The batches took twice their CPU: the time-sharing the model's own is checked against.
    assert docs["model"]["time_sharing"]["measured"] == pytest.approx(2.0)


def test_the_model_takes_each_batchs_measured_build_time_and_older_documents_their_cpu(
        ) -> None:
    from dsbench.job import predict

    opts = JobOptions(ranks=2, workers=1, prefetch=1, batch_size=4, steps=202,
                      compute=Distribution("const", 0.005))
    n = 202
    records = [_record(r, [0.0] * n, [0.005] * n, [0.001] * n) for r in (0, 1)]
    for r in records:
        # 10 ms of CPU per batch; one batch in 25 lost its core and took 200 ms.
        r["batch_cpu_s"] = [0.01] * (n - 1)
        r["batch_wall_s"] = [0.2 if i % 25 == 3 else 0.01 for i in range(n - 1)]
    doc = result.build("x", opts, records, "cpu")
    walls = doc["model"]["prediction"]["step_time_s"]
    assert walls["p50"] == pytest.approx(0.01 + 0.001, abs=2e-3)  # input-bound: a batch's build
    assert walls["p99"] >= 0.15  # 8% of steps wait on a 200 ms batch of one rank or the other
    del doc["loader"]["batch_wall_s"]
    cpu = predict.predict(doc)["prediction"]["step_time_s"]
    assert cpu["p99"] < 0.05  # the CPU route: every batch 10 ms of CPU, no tail


@pytest.mark.parametrize("hosts", [("h", "h"), ("h1", "h2")])
def test_on_one_clock_the_all_reduce_ends_at_the_first_departure_and_later_ones_delay_a_rank(
        hosts: tuple[str, str]) -> None:
    opts = JobOptions(ranks=2, workers=1, prefetch=1, batch_size=4, steps=100,
                      compute=Distribution("const", 0.05))
    n = 100
    # Rank 1 leaves every all-reduce 10 ms after rank 0, so it also arrives 10 ms later; the
    # all-reduce itself takes 1 ms. Each rank spends 11 ms in it; a step is 61 ms.
    records = [_record(r, [0.0] * n, [0.05] * n, [0.011] * n) for r in (0, 1)]
    records[1]["origin_s"] += 0.010
    for r, host in zip(records, hosts, strict=True):
        r["host"] = host
    doc = result.build("x", opts, records, "cpu")
    inputs = doc["model"]["inputs"]
    if hosts[0] == hosts[1]:
        assert inputs["allreduce_per_step_s"]["mean"] == pytest.approx(0.001, abs=1e-6)
        assert inputs["departure_s"]["max"] == pytest.approx(0.010, abs=1e-6)
    else:  # no common clock: the last rank's time in it, and the ranks leave together
        assert inputs["allreduce_per_step_s"]["mean"] == pytest.approx(0.011, abs=1e-6)
        assert inputs["departure_s"] is None
    assert doc["model"]["prediction"]["step_time_s"]["mean"] == pytest.approx(0.061, abs=1e-4)
    assert doc["data_wait_share"] == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize(("cut", "named"), [
    (lambda d: d["per_rank"][1]["handover_s"].pop(), "per_rank[1].handover_s"),
    (lambda d: d["per_rank"][0]["step_s"].pop(), "per_rank[0].step_s"),
    (lambda d: d["loader"]["batch_wall_s"].pop(), "loader.batch_wall_s")])
def test_extrapolate_refuses_a_job_document_whose_records_do_not_line_up(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: Any, named: str) -> None:
    opts = JobOptions(ranks=2, workers=1, prefetch=1, batch_size=4, steps=20,
                      compute=Distribution("const", 0.05))
    doc = result.build("x", opts, [_record(r, [0.0] * 20, [0.05] * 20, [0.001] * 20)
                                   for r in (0, 1)], "cpu")
    cut(doc)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))  # valid by the schema: only the lengths disagree
    assert main(["extrapolate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and str(path) in err


def test_a_launch_removes_the_directories_of_launchers_killed_outright(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsbench.job import launch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    gone, alive = tmp_path / f"dsbench-job-{dead}-x1", tmp_path / f"dsbench-job-{os.getpid()}-x2"
    for d in (gone, alive):
        (d / "logs").mkdir(parents=True)
    launch._remove_stale()
    assert not gone.exists() and alive.exists()


# Records TORCH_CPP_LOG_LEVEL at the moment torch is first imported, then runs `dsbench job` on
# a path that does not exist: the command imports torch (to check its version) before it finds
# the path missing.
_AT_IMPORT = """
import importlib.abc, os, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("TORCH_CPP_LOG_LEVEL"))
        return None
sys.meta_path.insert(0, Watch())
from dsbench.cli import main
code = main(["job", sys.argv[1]])
print(code, seen)
"""


def test_torchs_cpp_warnings_are_quieted_before_torch_is_first_imported(tmp_path: Path) -> None:
    # c10 reads its log level once, at torch's import: set later, a node that lost the other
    # printed the store's C++ warning and its stack frames beside dsbench's one line.
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", _AT_IMPORT, str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.stdout.split() == ["2", "['ERROR']"], proc.stdout + proc.stderr
