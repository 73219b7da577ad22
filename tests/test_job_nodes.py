"""A job of several nodes, each a launcher of its own on this machine: dsbench's launcher with
--nodes reading one export from the local S3 server, a node lost mid-job, and the Slurm path
with srun's environment as srun sets it for two tasks."""

from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import write_export
from test_job import _check_records, _free_port, _job_dirs, _shm, assert_nothing_left

from dsbench.job import launch, predict, result

pytest.importorskip("torch")

JOB = ["--ranks", "1", "--workers", "1", "--gpu-batch", "4"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_export(tmp_path_factory.mktemp("nodes"), "wds", 80, shard_samples=20)


def _node(path: str, port: int, *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dsbench", "job", path, "--nodes", "2",
                             "--rdzv", f"127.0.0.1:{port}", *JOB, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


@pytest.mark.slow  # 15 to 20 s: `python -m pytest -m slow` (CI runs it)
def test_two_nodes_read_one_export_from_an_object_store_and_the_model_holds_across_them(
        shards: Path, s3_env: Any, tmp_path: Path) -> None:
    url = s3_env.create_bucket("nodes")
    s3_env.upload_tree(shards, f"{url}/shards")
    port, out, steps = _free_port(), tmp_path / "job.json", 60
    nodes = [_node(f"{url}/shards", port, "--compute", "0.03", "--steps", str(steps),
                   "--json", str(out)) for _ in range(2)]
    said = [p.communicate(timeout=240) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], said
    doc = result.read(out)
    _check_records(doc, 2, steps)
    assert doc["launch"]["launcher"] == "dsbench" and doc["launch"]["nodes"] == 2
    assert sorted((r["rank"], r["node"]) for r in doc["per_rank"]) == [(0, 0), (1, 1)]
    assert sum("this node's 1 rank finished" in o for o, _ in said) == 1
    # The model beside the measurement, as on one node (one clock: both "nodes" are this
    # host) and as across two hosts, which share no clock: the all-reduce is then the last
    # arrival's own time. Either way the predicted steps are those the two nodes measured.
    across = copy.deepcopy(doc)
    for r in across["per_rank"]:
        r["host"] = f"host{r['node']}"
    for model in (doc["model"], predict.predict(across)):
        assert 0.75 <= model["ratios"]["mean"] <= 1.33, model["ratios"]
        assert 0.75 <= model["ratios"]["p50"] <= 1.33, model["ratios"]
    assert predict.predict(across)["inputs"]["departure_s"] is None


def _stepping(launcher: psutil.Process) -> bool:
    """Whether the launcher's rank has started its loader worker (it is in its steps)."""
    for p in launcher.children(recursive=True):
        try:
            if "dsbench.job.rank" in " ".join(p.cmdline()) and p.children():
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.parametrize("victim", [0, 1])
def test_a_node_whose_launcher_dies_fails_the_other_with_one_line_and_leaves_nothing(
        shards: Path, victim: int) -> None:
    shm_before, dirs_before = _shm(), _job_dirs()
    port = _free_port()
    first = _node(str(shards), port, "--compute", "0.01", "--steps", "100000")
    time.sleep(0.5)  # the first to start holds the rendezvous
    second = _node(str(shards), port, "--compute", "0.01", "--steps", "100000")
    launchers = [psutil.Process(p.pid) for p in (first, second)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(_stepping(p) for p in launchers):
        time.sleep(0.2)
    assert all(_stepping(p) for p in launchers), "the nodes did not start"
    time.sleep(1.0)
    tree = [p for launcher in launchers for p in [launcher, *launcher.children(recursive=True)]]
    killed = (first, second)[victim]
    survivor = (first, second)[1 - victim]
    killed_at = time.monotonic()
    killed.send_signal(signal.SIGKILL)
    _, err = survivor.communicate(timeout=60)
    took = time.monotonic() - killed_at
    killed.communicate(timeout=30)
    assert took < 30
    assert survivor.returncode == 2
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("job: ")]  # progress
    assert len(lines) == 1, err
    # The survivor hears of it from its rank's lost connections or, when the rendezvous's
    # host went, possibly first from the rendezvous: one line either way.
    assert re.fullmatch(r"dsbench job: error: the other node of the job stopped or became "
                        r"unreachable: (this node's rank [01] lost the job's other ranks "
                        r"\(.+\)|lost the job's rendezvous at 127\.0\.0\.1:\d+, which the "
                        r"first node's launcher held \(\w+\))", lines[0]), lines[0]
    assert_nothing_left(tree, shm_before)
    # The survivor's logs and result file; the killed launcher's wait for the next launch,
    # which removes the directories of launchers killed outright.
    assert {d for d in _job_dirs() - dirs_before
            if d.name.split("-")[2] == str(survivor.pid)} == set()
    launch._remove_stale()
    assert {d for d in _job_dirs() - dirs_before
            if d.name.split("-")[2] == str(killed.pid)} == set()


def test_two_srun_tasks_make_one_job(shards: Path, tmp_path: Path) -> None:
    """srun starts `dsbench job` once per task with SLURM_* set; the batch script exports the
    first node's address and a port (MASTER_ADDR, MASTER_PORT)."""
    port, out, steps = _free_port(), tmp_path / "job.json", 30
    tasks = []
    for task in range(2):
        env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0",
               "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "1",
               "SLURM_PROCID": str(task), "SLURM_NODEID": str(task), "SLURM_LOCALID": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        tasks.append(subprocess.Popen(
            [sys.executable, "-m", "dsbench", "job", str(shards), "--workers", "1",
             "--gpu-batch", "4", "--compute", "0.01", "--steps", str(steps), "--json",
             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    said = [p.communicate(timeout=240) for p in tasks]
    assert [p.returncode for p in tasks] == [0, 0], said
    doc = result.read(out)
    _check_records(doc, 2, steps)
    assert doc["launch"]["launcher"] == "slurm" and doc["launch"]["nodes"] == 2
    assert sorted((r["rank"], r["node"]) for r in doc["per_rank"]) == [(0, 0), (1, 1)]
    assert said[1][0] == ""  # only rank 0 reports


def test_node_options_are_refused_in_one_line(shards: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from dsbench.cli import main

    for argv, said in ((["--nodes", "2"], "--nodes needs --rdzv"),
                       (["--rdzv", "127.0.0.1:1234"], "--rdzv is for a job of several"),
                       (["--nodes", "2", "--rdzv", "nohost"], "expected HOST:PORT"),
                       (["--nodes", "0"], "--nodes must be at least 1")):
        assert main(["job", str(shards), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
