"""`dsbench bench` end to end: the JSON document, the table, a killed worker and Ctrl-C, with
nothing left behind (processes or shared memory). Bad options: tests/test_cli_errors.py."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from leftovers import as_in_a_terminal, ended, group_killed_after, left_behind

from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.spec import parse_spec
from dsbench.results.document import read_result

RUN_KEYS = {"workers", "batch_size", "samples_per_s", "samples_per_s_iqr", "samples_per_s_ci95",
            "cpu_s_per_sample", "cpu_s_per_sample_iqr", "cpu_s_per_sample_ci95", "stages",
            "bytes_per_sample", "files_per_sample", "peak_pss_bytes", "samples",
            "skipped_samples", "skipped", "accelerator_util", "scaling_efficiency",
            "batch_cpu_s", "rounds"}
CONFIG_KEYS = {"path", "batch_size", "seconds", "rounds", "warmup_batches", "step_time_s",
               "cold", "decoder", "normalize", "on_error", "backend", "prefetch"}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "export"
    spec = parse_spec({"name": "tiny", "layout": "files", "fields_as": "json",
                       "image": {"sizes": "fixed", "width": 64, "height": 48},
                       "fields": {"label": {"type": "int"}}}, "test")
    generate(spec, out, samples=12, jobs=1)
    return out


def test_bench_writes_every_key_and_prints_a_table_with_units(
        export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    rc = main(["bench", str(export), "--workers", "1,2", "--seconds", "0.3", "--rounds", "2",
               "--batch-size", "2", "--step-time", "0.001", "--json", str(out)])
    assert rc == 0
    doc = read_result(out)  # validates the schema too
    assert doc["schema_version"] == 2 and doc["kind"] == "dsbench-bench"
    assert {"created_utc", "dsbench_version", "machine", "export", "counts", "config",
            "statistics", "run_id", "runs"} <= set(doc)
    assert doc["counts"]["exact"] and doc["counts"]["files_per_sample"] == 2.0
    assert set(doc["config"]) >= CONFIG_KEYS
    assert doc["export"]["layout"] == "files"
    assert [r["workers"] for r in doc["runs"]] == [1, 2]
    for run in doc["runs"]:
        assert set(run) >= RUN_KEYS
        assert set(run["stages"]) == {"read", "decode", "fields", "transform", "collate"}
        assert len(run["rounds"]) == 2
        assert {"samples", "wall_s", "cpu_s", "samples_per_s", "cpu_s_per_sample"} <= set(
            run["rounds"][0])
        assert run["files_per_sample"] == 2.0
        assert 0 < run["accelerator_util"] <= 1
        assert len(run["batch_cpu_s"]) == sum(r["batches"] for r in run["rounds"])
    # Scaling efficiency: samples/s per worker against the 1-worker run's.
    one, two = doc["runs"]
    assert two["scaling_efficiency"] == pytest.approx(
        two["samples_per_s"] / (2 * one["samples_per_s"]))
    text = capsys.readouterr().out
    assert "samples/s" in text and ("ms/sample" in text or "µs/sample" in text)
    assert "files/sample" in text and "kB/sample" in text
    assert json.loads(out.read_text())["runs"][1]["workers"] == 2


def _start(export: Path) -> subprocess.Popen[str]:
    # A session of its own, so that everything it starts can be found (and none of it missed).
    return subprocess.Popen([sys.executable, "-m", "dsbench", "bench", str(export), "--workers",
                             "2", "--seconds", "60", "--rounds", "1", "--batch-size", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_in_a_terminal)


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # exited meanwhile (a zombie until reaped)
        return ""


def _workers(proc: subprocess.Popen[str], n: int, timeout: float = 30.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [c for c, line in ((c, _cmdline(c)) for c in psutil.Process(proc.pid).children())
                 if "spawn_main" in line and "resource_tracker" not in line]
        if len(found) == n:
            return found
        time.sleep(0.1)
    raise AssertionError("workers did not start")


def test_a_killed_worker_fails_the_run_quickly_and_cleanly(export: Path) -> None:
    proc = _start(export)
    with group_killed_after(proc):
        victim = _workers(proc, 2)[1]
        time.sleep(1.0)  # into the warm-up or the window: both must notice
        victim.send_signal(signal.SIGKILL)
        err, took = ended(proc, timeout=20)
    assert proc.returncode == 2
    assert took < 5.0
    assert "killed by signal SIGKILL" in err and err.strip().count("\n") == 0, err
    assert left_behind(proc.pid) == []


def _in_main(proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    """Wait until the command is in dsbench's main(): its SIGTERM handler, installed first there,
    shows in SigCgt. Before that, the interpreter is starting (Python's own Ctrl-C behaviour)."""
    sigterm = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{proc.pid}/status").read_text()
            if int(status.split("SigCgt:")[1].split()[0], 16) & sigterm:
                return
        time.sleep(0.001)
    raise AssertionError(f"dsbench bench did not reach main() (exit code {proc.poll()})")


def _owner(pid: int) -> str:
    """A running process's identity as the names of its segments carry it."""
    from dsbench.loader import orphans

    return f"{pid}-{orphans.start_ticks(pid)}-{orphans.namespace(pid)}"


def _segment(proc: subprocess.Popen[str], worker: int, written: bool = False,
             timeout: float = 30.0) -> None:
    """Wait until worker `worker`'s shared-memory ring exists (the main process is creating
    segments and starting workers) or, with `written`, holds a batch (tmpfs allocates the pages
    a worker writes: its first batch is built, so warm-up is under way). The segment must be in
    the run's memory map: one of the same name that a killed run of a recycled pid left is not
    this run's."""
    path = Path(f"/dev/shm/dsbench-{_owner(proc.pid)}-0-{worker}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):  # not there yet
            blocks = path.stat().st_blocks
            if ((blocks > 0 or not written)
                    and str(path) in Path(f"/proc/{proc.pid}/maps").read_text()):
                return
        time.sleep(0.001)
    raise AssertionError(f"{path.name} never {'held a batch' if written else 'appeared'} "
                         f"(exit code {proc.poll()})")


# Moments for Ctrl-C: an event of the run, then a delay drawn from a fixed seed, so that they are
# spread over the run and the same in every run of the test. Start-up is the imports, the survey
# and the count pass; "spawn" lands while segments are created and workers started (a few ms);
# then the workers' imports, the warm-up, the measured window.
_RNG = random.Random(20240611)
CTRL_C_MOMENTS = {
    "start-up": (_in_main, _RNG.uniform(0.0, 0.4)),
    "survey": (_in_main, _RNG.uniform(0.5, 0.9)),
    "spawn": (lambda p: _segment(p, 0), _RNG.uniform(0.0, 0.01)),
    "workers-importing": (lambda p: _workers(p, 2), _RNG.uniform(0.0, 0.3)),
    "warm-up": (lambda p: _segment(p, 0, written=True), _RNG.uniform(0.0, 0.01)),
    "window": (lambda p: _segment(p, 1, written=True), _RNG.uniform(0.2, 0.6)),
}


@pytest.mark.parametrize("moment", list(CTRL_C_MOMENTS))
def test_ctrl_c_stops_every_worker_and_leaves_nothing(export: Path, moment: str) -> None:
    reached, delay = CTRL_C_MOMENTS[moment]
    proc = _start(export)
    with group_killed_after(proc):
        reached(proc)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        err, took = ended(proc, timeout=20)
    where = f"Ctrl-C at {moment} + {delay:.3f} s"
    assert proc.returncode == 130, f"{where}: exit code {proc.returncode}: {err}"
    assert "interrupted" in err and err.strip().count("\n") == 0, f"{where}: {err}"
    assert took < 10.0, where
    assert left_behind(proc.pid) == [], where


def test_what_a_killed_run_left_the_next_run_removes(export: Path) -> None:
    """SIGKILL to the whole run (as the OOM killer or a cancelled job may): its segments stay,
    named by its process; the next run removes them, and says so in one line."""
    proc = _start(export)
    try:
        _segment(proc, 1, written=True)
        owner = _owner(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=20)
    left = sorted(p.name for p in Path("/dev/shm").glob(f"dsbench-{proc.pid}-*"))
    assert left == [f"dsbench-{owner}-0-0", f"dsbench-{owner}-0-1"]
    again = subprocess.run([sys.executable, "-m", "dsbench", "bench", str(export), "--workers",
                            "1", "--seconds", "0.2", "--rounds", "1", "--batch-size", "2"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    said = [ln for ln in again.stderr.splitlines() if "left by killed dsbench runs" in ln]
    assert not list(Path("/dev/shm").glob(f"dsbench-{proc.pid}-*"))
    # Any dsbench run clears them: one in the suite's other process (pytest-xdist) or on the
    # same machine may have started first and said so itself. This one says it at most once,
    # and when it does, it names the killed run and what it left.
    assert len(said) <= 1, again.stderr
    if said:
        assert f"process {proc.pid}" in said[0] and "2 shared-memory" in said[0], said


def test_only_what_dead_processes_left_is_removed(tmp_path: Path) -> None:
    """Removed: what a process that is gone made, and what an earlier process of a recycled id
    made (a live process has the id, but started at another time). Kept: this process's, a
    running process's, another PID namespace's (its processes are not visible here) and names
    that are not dsbench's."""
    from dsbench.loader import orphans

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ns, ppid = orphans.namespace(), os.getppid()
    started = orphans.start_ticks(ppid)
    assert started  # a Linux /proc, as the ring needs
    shm, temp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    temp.mkdir()
    names = {"gone": f"dsbench-{dead.pid}-5-{ns}-0-1",
             "recycled": f"dsbench-{ppid}-{started - 1}-{ns}-0-0",
             "mine": f"dsbench-{orphans.owner()}-3-0",
             "parent": f"dsbench-{ppid}-{started}-{ns}-0-0",
             "elsewhere": f"dsbench-{dead.pid}-5-{ns + 1}-0-0",
             "other": f"other-{dead.pid}-5-{ns}-0-0",
             "earlier version's": f"dsbench-{dead.pid}-0-0"}
    for name in names.values():
        (shm / name).write_bytes(b"x")
    # A native round's directory, advise's candidates and the exact pass's files, of the dead
    # run and of this one.
    for kind in ("native", "advise", "exact"):
        (temp / f"dsbench-{kind}-{dead.pid}-5-{ns}-abc").mkdir()
        (temp / f"dsbench-{kind}-{orphans.owner()}-def").mkdir()
    cleared = orphans.clear(shm, temp)
    assert sorted(cleared.segments) == sorted([names["gone"], names["recycled"],
                                               names["earlier version's"]])
    assert cleared.owners == {dead.pid, ppid}
    assert sorted(cleared.dirs) == [f"dsbench-{kind}-{dead.pid}-5-{ns}-abc"
                                    for kind in ("advise", "exact", "native")]
    assert sorted(p.name for p in shm.iterdir()) == sorted(
        names[k] for k in ("mine", "parent", "elsewhere", "other"))
    assert sorted(p.name for p in temp.iterdir()) == [f"dsbench-{kind}-{orphans.owner()}-def"
                                                      for kind in ("advise", "exact", "native")]
    assert "3 shared-memory segments and 3 temporary directories" in cleared.text()
    assert orphans.clear(shm, temp).text() == ""
