"""Bad input and faults: each gives exit 2 with one line naming the file (and the sample), in
seconds, with bounded memory, and leaves no process, shared memory or temporary file behind."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import psutil
import pytest
import resultdocs as rd
from conftest import write_export
from leftovers import ended, group_killed_after, left_behind
from PIL import Image

from dsbench.adapters import base
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export import write
from dsbench.export.write import Writer
from dsbench.results.document import write_result

DSBENCH = [sys.executable, "-m", "dsbench"]


def one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsbench "), err
    for needle in needles:
        assert needle in err, err
    return err


def run(argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DSBENCH, *argv], capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)


# Runs the command given after it and reports, as its last line of standard error, the peak
# resident set (kB) of the command's process tree: what wait4 says of it.
_PEAK = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[1:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "sys.stderr.write(f'{usage.ru_maxrss}\\n')\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n")


def run_with_peak(argv: list[str], timeout: float = 30.0
                  ) -> tuple[subprocess.CompletedProcess[str], int]:
    """`run`, and the peak resident set (kB) of the command's own process tree (it and the
    loader workers it waited for), from wait4 in a small launcher process. Not this test
    session's RUSAGE_CHILDREN (the largest child it ever reaped: a torch rank, over 1 GB), nor
    wait4 on a child forked from it: a process's peak survives exec, so a child forked from a
    test session that has imported torch and the format libraries starts at its 1.2 GB."""
    proc = subprocess.run([sys.executable, "-c", _PEAK, *DSBENCH, *argv], capture_output=True,
                          text=True, timeout=timeout, start_new_session=True)
    err, _, peak = proc.stderr.rstrip("\n").rpartition("\n")
    return (subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout,
                                        err + "\n" if err else ""), int(peak))


# --- files that cannot be read or written -----------------------------------------------------

def test_an_unreadable_shard_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    # As root nothing is unreadable, so the denial is what open() raises for one shard.
    export = write_export(tmp_path, "wds", 20, shard_samples=10)
    locked = export / "shard-000001.tar"
    real = base.open_file

    def open_file(path: str | os.PathLike[str]) -> io.BufferedReader:
        if Path(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)  # type: ignore[return-value]

    monkeypatch.setattr(base, "open_file", open_file)
    for argv in (["inspect", str(export)], ["bench", str(export), "--rounds", "1"]):
        assert main(argv) == 2
        one_line_error(capsys, str(locked), "Permission denied")


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_generate_into_a_file_is_refused(tmp_path: Path, where: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    out = blocker if where == "a file" else blocker / "export"
    assert main(["generate", "formats/before.toml", str(out), "--samples", "2"]) == 2
    one_line_error(capsys, str(out))
    assert blocker.read_text() == "not a directory"


def _generate_with_a_failing_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  unit: int, fail: Callable[[], None]) -> list[str]:
    """`generate` of 4 WebDataset units with 2 writers, unit `unit` leaving a temporary and
    then calling `fail`; the exit code must be 2; the names left in the export."""
    real = write.WRITERS["wds"]

    def failing(spec, out_dir, u, samples):  # type: ignore[no-untyped-def]
        if u == unit:
            (out_dir / f".shard-{unit:06d}.tar.tmp1").write_bytes(b"half")
            fail()
        real.write_unit(spec, out_dir, u, samples)

    # The writers fork: they see the patched writer.
    monkeypatch.setitem(write.WRITERS, "wds", Writer("wds", real.unit_paths, failing))
    definition = tmp_path / "tiny.toml"
    definition.write_text('name = "tiny"\nlayout = "wds"\nshard_samples = 10\n[image]\n'
                          'sizes = "fixed"\nwidth = 32\nheight = 24\n'
                          '[fields.label]\ntype = "int"\n')
    out = tmp_path / "export"
    assert main(["generate", str(definition), str(out), "--samples", "40", "--jobs", "2"]) == 2
    return sorted(p.name for p in out.iterdir())


@pytest.mark.usefixtures("forked_writers")
def test_a_full_disk_during_generate_is_one_line_and_leaves_whole_units(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    names = _generate_with_a_failing_unit(tmp_path, monkeypatch, 1, full)
    one_line_error(capsys, "No space left on device")
    assert ".shard-000001.tar.tmp1" not in names  # nothing half-written left
    assert "shard-000001.tar" not in names


@pytest.mark.usefixtures("forked_writers")
def test_a_writing_process_killed_mid_unit_is_one_line_and_leaves_whole_units(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # A writer killed by the kernel (out of memory) sends no answer: the run must notice its
    # end instead of waiting for the unit forever, and remove what it left half-written.
    names = _generate_with_a_failing_unit(tmp_path, monkeypatch, 2,
                                          lambda: os.kill(os.getpid(), signal.SIGKILL))
    one_line_error(capsys, "a writing process ended unexpectedly (signal 9)")
    assert not [n for n in names if n.startswith(".shard")]  # nothing half-written left
    assert "shard-000002.tar" not in names
    # Every writer was reaped (Python's resource tracker stays, as it does for any pool).
    assert not [c for c in psutil.Process().children(recursive=True)
                if "resource_tracker" not in " ".join(c.cmdline())]


def _double(x: int) -> int:
    return 2 * x


def test_a_writing_process_that_died_while_idle_is_one_error_not_a_broken_pipe(
        tmp_path: Path) -> None:
    from dsbench.export.pool import worker_pool

    with pytest.raises(DsbenchError, match=r"ended unexpectedly \(signal 9\)"), \
            worker_pool(tmp_path, 2) as pool:
        assert list(pool.imap(_double, range(4))) == [0, 2, 4, 6]  # in order
        os.kill(pool.procs[1].pid, signal.SIGKILL)  # type: ignore[arg-type]
        pool.procs[1].join()
        list(pool.imap(_double, range(4)))
    assert all(p.exitcode is not None for p in pool.procs)


def test_an_absurd_batch_size_is_refused_before_any_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = write_export(tmp_path, "wds", 10)
    assert main(["bench", str(export), "--batch-size", "100000000"]) == 2
    one_line_error(capsys, "--batch-size 100000000", "shared memory")
    assert not list(Path("/dev/shm").glob(f"dsbench-{os.getpid()}-*"))


@pytest.mark.parametrize("command", ["compare", "extrapolate"])
def test_a_result_nested_too_deep_is_one_line(tmp_path: Path, command: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    argv = [command, str(deep), str(deep)] if command == "compare" else [command, str(deep)]
    assert main(argv) == 2
    one_line_error(capsys, str(deep), "nested too deep")


def test_a_result_with_no_cpu_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    good = write_result(tmp_path / "good.json", rd.document([rd.run()]))
    doc = json.loads(good.read_text())
    doc["runs"][0]["cpu_s_per_sample"] = 0
    bad = tmp_path / "zero.json"
    bad.write_text(json.dumps(doc))
    assert main(["compare", str(good), str(bad)]) == 2
    one_line_error(capsys, str(bad), "cpu_s_per_sample")


def test_a_fifo_named_like_a_shard_does_not_hang_inspect(tmp_path: Path) -> None:
    export = write_export(tmp_path, "wds", 10)
    os.mkfifo(export / "shard-000009.tar")
    proc = run(["inspect", str(export)], timeout=10)
    assert proc.returncode == 0, proc.stderr


# --- bad samples ------------------------------------------------------------------------------

def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (90, 120, 30)).save(buf, "JPEG")
    return buf.getvalue()


def _tar(path: Path, samples: list[dict[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i, sample in enumerate(samples):
            for ext, data in sample.items():
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))


@pytest.fixture()
def retyped(tmp_path: Path) -> Path:
    """WebDataset samples whose JSON label is an int, except in sample 0005 (a string)."""
    export = tmp_path / "retyped"
    export.mkdir()
    labels: list[object] = [1, 2, 3, 4, 5, "six", 7, 8]
    _tar(export / "shard-0.tar", [{"jpg": _jpeg(), "json": json.dumps({"label": v}).encode()}
                                  for v in labels])
    return export


def test_a_field_that_changes_type_is_an_error(retyped: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(retyped)]) == 2
    one_line_error(capsys, "shard-0.tar [sample 0005]", "field 'json.label' is string here")
    assert main(["bench", str(retyped), "--rounds", "1", "--batch-size", "2"]) == 2
    one_line_error(capsys, "[sample 0005]", "label' is string here")


def test_with_skip_a_changed_type_is_counted_and_named(retyped: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["bench", str(retyped), "--rounds", "1", "--seconds", "0.3", "--batch-size", "2",
                 "--on-error", "skip", "--json", str(out)]) == 0
    run_ = json.loads(out.read_text())["runs"][0]
    assert run_["skipped_samples"] >= 1
    assert run_["skipped"][0]["key"] == "0005" and "'label'" in run_["skipped"][0]["error"]


def _declaring(width: int, height: int) -> bytes:
    """A small JPEG whose header claims another size (the SOF0 frame's dimensions)."""
    data = bytearray(_jpeg())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


@pytest.mark.parametrize("decoder", ["pillow", "simplejpeg"])
def test_a_decompression_bomb_is_refused_from_its_header(tmp_path: Path, decoder: str) -> None:
    export = tmp_path / "bomb"
    export.mkdir()
    _tar(export / "shard-0.tar", [{"jpg": _jpeg(), "cls": b"1"} for _ in range(3)]
         + [{"jpg": _declaring(12000, 12000), "cls": b"1"}])
    t0 = time.monotonic()
    proc, peak_kb = run_with_peak(["bench", str(export), "--rounds", "1", "--batch-size", "4",
                                   "--decoder", decoder])
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "[sample 0003]" in proc.stderr and "12000 x 12000 px" in proc.stderr
    assert "over the limit" in proc.stderr
    # No process of the command held the image's 432 MB of pixels: refused, the tree peaks near
    # 100 MB; decoded (a --max-pixels above it), near 500 MB with either decoder.
    assert peak_kb * 1024 < 12000 * 12000 * 3


def test_invalid_json_of_a_per_sample_export_names_the_json_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = write_export(tmp_path, "files", 6)
    bad = export / "000000" / "00000003.json"
    bad.write_text('{"label": ')
    assert main(["bench", str(export), "--rounds", "1", "--batch-size", "2"]) == 2
    one_line_error(capsys, f"{bad} [sample 000000/00000003]", "cannot parse field 'json'")


def test_a_corrupt_parquet_footer_is_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    export = write_export(tmp_path, "parquet", 8, shard_samples=4)
    shard = export / "shard-000001.parquet"
    data = bytearray(shard.read_bytes())
    data[-40:-8] = b"\x07" * 32  # the footer's Thrift, garbled; its length and magic intact
    shard.write_bytes(bytes(data))
    assert main(["inspect", str(export)]) == 2
    one_line_error(capsys, "shard-000001.parquet")


def test_an_error_after_the_report_survives_a_closed_stdout(retyped: Path) -> None:
    # `dsbench inspect BAD | head -1`: the reader goes away after one line.
    proc = subprocess.Popen([*DSBENCH, "inspect", str(retyped)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 2
    assert err.count("\n") == 1 and "sample 0005" in err, err


# --- stopped, stuck and interrupted runs ----------------------------------------------------------

@pytest.fixture(scope="module")
def long_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_export(tmp_path_factory.mktemp("long"), "wds", 200, shard_samples=50)


def _bench(export: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*DSBENCH, "bench", str(export), "--workers", "2", "--seconds", "60",
                             "--rounds", "1", "--batch-size", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _workers(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = []
        for child in psutil.Process(proc.pid).children():
            try:
                line = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "spawn_main" in line and "resource_tracker" not in line:
                found.append(child)
        if len(found) == 2:
            return found
        time.sleep(0.1)
    raise AssertionError("workers did not start")


@pytest.mark.parametrize("how", ["stopped", "terminated"])
def test_a_stopped_worker_or_sigterm_ends_the_run_cleanly(long_export: Path, how: str) -> None:
    proc = _bench(long_export)
    with group_killed_after(proc):
        victim = _workers(proc)[1]
        time.sleep(1.0)  # into the warm-up or the window
        if how == "stopped":
            victim.send_signal(signal.SIGSTOP)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        err, took = ended(proc, timeout=30)
    assert took < 10.0
    if how == "stopped":
        assert proc.returncode == 2 and err.count("\n") == 1, err
        assert f"loader worker 1 (pid {victim.pid}) is stopped" in err
    else:
        assert proc.returncode == 143 and "terminated" in err and "Traceback" not in err, err
    assert left_behind(proc.pid) == []


def _fails_then_lingers(ctrl_recv: Connection, data_send: Connection) -> None:
    """A worker that failed on a sample: closes its control pipe, says why, exits late."""
    ctrl_recv.close()
    data_send.send(("error", "usersteps:fails_at_5 failed on sample 5", True))
    time.sleep(0.5)  # the exit that lags behind the closed pipe


def test_a_failed_worker_is_reported_even_while_it_is_still_exiting() -> None:
    """A worker that failed on a sample closes its pipes and says why, then takes a moment to
    exit: freeing its slot meanwhile meets a closed pipe, and the run must report the worker's
    reason, not a BrokenPipeError (seen under load)."""
    import multiprocessing

    from dsbench.loader.sources import ShmSource
    from dsbench.loader.worker import BatchReport

    # Spawned, not forked: this test process may hold another test's library threads (Lance).
    ctx = multiprocessing.get_context("spawn")
    data_recv, data_send = ctx.Pipe(duplex=False)
    ctrl_recv, ctrl_send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_fails_then_lingers, args=(ctrl_recv, data_send))
    proc.start()
    data_send.close()
    ctrl_recv.close()
    try:
        assert data_recv.poll(30)  # its control pipe is closed by now
        source = ShmSource.__new__(ShmSource)
        source.procs, source.data, source.ctrl = [proc], [data_recv], [ctrl_send]
        report = BatchReport(0, 0, 0, [], [], 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0, [], None)
        with pytest.raises(DsbenchError, match="failed on sample 5"):
            source.release(report)
    finally:
        proc.join(10)
