"""`dsbench resume --backend native`: each format's library resuming its own loader, on exports
that library wrote (tests/formatlibs.py), against the uninterrupted epoch; the counting against
a scripted loader whose replays and skips are known; a hang caught; a layout without a resume
of its own refused in one line."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import formatlibs
import pytest
from formatlibs import SAMPLES
from layouts import assert_one_line_error

from dsbench.cli import main
from dsbench.resume import native
from dsbench.resume.native_loaders import Shape

K, BATCH = 3, 8


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("resume-native")
    return {f: formatlibs.write(f, root) for f in ("mds", "litdata", "hf", "hf-hub", "wds")}


def _audit(path: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "resume.json"
    assert main(["resume", str(path), "--backend", "native", "--restart-at", str(K),
                 "--batch-size", str(BATCH), "--workers", "2", "--hang-after", "60",
                 "--json", str(out), *extra]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


# MosaicML Streaming's same shape is audited on two ranks below, with its other cases.
@pytest.mark.parametrize("fmt", ["litdata", "hf", "hf-hub"])
def test_a_library_that_keeps_state_resumes_the_same_shape_exactly(
        fmt: str, exports: dict[str, Path], tmp_path: Path) -> None:
    doc = _audit(exports[fmt], tmp_path, "--case", "same shape")
    (case,) = doc["cases"]
    assert case["outcome"] == "measured", case
    # The uninterrupted epoch delivered every sample the library wrote, and the job's K steps
    # and the restart together delivered each of them once: nothing replayed, nothing skipped.
    assert case["epoch_samples"] == SAMPLES
    assert case["delivered"] == SAMPLES
    assert (case["replayed"], case["skipped"]) == (0, 0)
    assert doc["reader"]["version"] not in ("", "not installed")


def test_webdataset_keeps_no_state_and_its_restart_replays_the_job_s_steps(
        exports: dict[str, Path], tmp_path: Path) -> None:
    doc = _audit(exports["wds"], tmp_path, "--case", "same shape")
    (case,) = doc["cases"]
    assert case["outcome"] == "no state"
    # The restart began the epoch again: the K batches already delivered come twice.
    assert (case["replayed"], case["skipped"]) == (K * BATCH, 0)
    assert case["delivered"] == SAMPLES + K * BATCH


def test_mds_resumes_exactly_the_same_shape_a_second_time_and_on_more_ranks(
        exports: dict[str, Path], tmp_path: Path) -> None:
    # Two ranks, each told its rank through the environment, MosaicML Streaming given a
    # process group of this process alone; its state is a sample count over the whole job.
    doc = _audit(exports["mds"], tmp_path, "--case", "same shape,second resume,other ranks",
                 "--ranks", "2")
    assert [c["case"] for c in doc["cases"]] == ["same shape", "second resume", "other ranks"]
    by_case = {c["case"]: c for c in doc["cases"]}
    assert by_case["other ranks"]["ranks"] == [2, 3]
    for case in by_case.values():
        assert case["outcome"] == "measured", case
        assert (case["epoch_samples"], case["delivered"]) == (SAMPLES, SAMPLES)
        assert (case["replayed"], case["skipped"]) == (0, 0)
    # Its uninterrupted epoch on three ranks was read too: 120 samples divide among three
    # ranks as among two, so the same samples, none padded.
    assert by_case["other ranks"]["shape_epoch"] == {"samples": SAMPLES, "differs": 0}
    assert by_case["same shape"]["shape_epoch"] is None
    assert "own node" in doc["settings"]["ranks_as"]


class _Scripted:
    """A loader over samples 0..n-1 in batches of 2 whose restart resumes `shift` samples
    off (negative: replays them; positive: skips them); with more than one worker its epoch
    drops the last `drop` samples (as a library that drops a partial batch in some shapes)."""

    def __init__(self, shape: Shape, state: Any, n: int, shift: int, block: bool,
                 pace_s: float = 0.0, drop: int = 0) -> None:
        self.at = 0 if state is None else state + shift
        self.n = n - (drop if shape.workers > 1 else 0)
        self.block, self.pace_s = block, pace_s

    def next(self) -> list[str] | None:
        if self.block:
            time.sleep(30)  # a library waiting for something that never comes
        time.sleep(self.pace_s)  # a slow library: each batch within the wait
        if self.at >= self.n:
            return None
        batch = [str(i) for i in range(self.at, min(self.n, self.at + 2))]
        self.at += 2
        return batch

    def state(self) -> Any:
        return self.at

    def close(self) -> None:
        pass


@pytest.mark.parametrize("shift,replayed,skipped", [(0, 0, 0), (-3, 3, 0), (4, 0, 4)])
def test_replayed_and_skipped_are_counted_against_the_epoch(shift: int, replayed: int,
                                                            skipped: int) -> None:
    n = 20
    phase = native._Phase(lambda shape, state: _Scripted(shape, state, n, shift, False), 5.0)
    opts = native.NativeResumeOptions(restart_at=3, workers=1)
    shape = Shape(0, 1, 1, 2, None)
    case = native._case("same shape", phase, opts, shape, _epoch(phase))
    # The job's 3 batches are samples 0-5; the restart reads from 6 + shift to 19.
    assert (case["replayed"], case["skipped"]) == (replayed, skipped)
    assert case["delivered"] == 6 + (n - 6 - shift)
    assert case["shape_epoch"] is None


def _epoch(phase: native._Phase) -> Any:
    """The uninterrupted epoch in a shape, read by the phase's own loader."""
    return lambda shape: native._total(phase.read("the epoch", shape, [None] * shape.ranks,
                                                  None)[0])


@pytest.mark.parametrize("shift,skipped", [(0, 0), (4, 4)])
def test_what_the_new_shape_alone_changes_is_not_counted_as_the_resume_s(shift: int,
                                                                        skipped: int) -> None:
    # With two workers the loader's epoch drops its last 2 of 20 samples: a restart on two
    # workers that ends there has skipped nothing the new shape delivers, and the difference
    # is reported as the shape's; a restart that also skips 4 samples has skipped those 4.
    phase = native._Phase(
        lambda shape, state: _Scripted(shape, state, 20, shift, False, drop=2), 5.0)
    opts = native.NativeResumeOptions(restart_at=3, workers=1, workers_after=2)
    case = native._case("other workers", phase, opts, Shape(0, 1, 1, 2, None), _epoch(phase))
    assert case["workers"] == [1, 2]
    assert case["shape_epoch"] == {"samples": 18, "differs": 2}
    assert (case["replayed"], case["skipped"]) == (0, skipped)
    assert case["delivered"] == 6 + (18 - 6 - shift)


def test_a_restart_that_never_delivers_is_reported_as_a_hang_within_the_wait() -> None:
    opened = []

    def open_loader(shape: Shape, state: Any) -> _Scripted:
        opened.append(state)
        return _Scripted(shape, state, 20, 0, block=state is not None)

    def reference(_shape: Shape) -> list[Counter[str]]:
        return [Counter(str(i) for i in range(20))]

    handler = signal.getsignal(signal.SIGALRM)
    t0 = time.perf_counter()
    case = native.audited("same shape", native._Phase(open_loader, 0.5),
                          native.NativeResumeOptions(restart_at=2, workers=1),
                          Shape(0, 1, 1, 2, None), reference)
    assert time.perf_counter() - t0 < 5  # cut short at the wait, not at the 30 s sleep
    assert case["outcome"] == "hang" and case["detail"].startswith("the restart: no batch")
    assert opened == [None, 4]  # the job ran; the restart with its state is what hung
    assert signal.getsignal(signal.SIGALRM) is handler  # and the wait left no alarm set


def test_a_slow_loader_that_keeps_delivering_is_not_a_hang() -> None:
    # 20 batches of 50 ms: a second a read, twice the wait, each batch well within it.
    def open_loader(shape: Shape, state: Any) -> _Scripted:
        return _Scripted(shape, state, 40, 0, block=False, pace_s=0.05)

    case = native.audited("same shape", native._Phase(open_loader, 0.5),
                          native.NativeResumeOptions(restart_at=2, workers=1),
                          Shape(0, 1, 1, 2, None), lambda _: [Counter(str(i) for i in range(40))])
    assert case["outcome"] == "measured"
    assert (case["replayed"], case["skipped"], case["delivered"]) == (0, 0, 40)


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet"])
def test_a_layout_without_a_resume_of_its_own_is_one_line(fmt: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    from conftest import write_export

    path = write_export(tmp_path, fmt, 8) if fmt == "parquet" else formatlibs.write(
        fmt, tmp_path)
    assert main(["resume", str(path), "--backend", "native", "--restart-at", "1"]) == 2
    assert_one_line_error(capsys.readouterr().err, "resume", "has no resume of its own")


def test_policies_are_refused_with_the_library_s_own_resume(
        exports: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", str(exports["wds"]), "--backend", "native", "--restart-at", "1",
                 "--policy", "fast-forward"]) == 2
    assert_one_line_error(capsys.readouterr().err, "resume", "--policy")


def test_a_signal_during_the_libraries_own_resume_ends_it_cleanly(
        exports: dict[str, Path], tmp_path: Path) -> None:
    # MosaicML Streaming on two ranks (its shared memory, a process group, torch's workers
    # forked from a server): a CI runner's SIGTERM to the command alone (the command must stop
    # its workers itself), in its uninterrupted epoch or its job, ends it as every command ends
    # (tests/test_signals.py; a Ctrl-C to the whole group was measured to end it the same way).
    sig, delay = signal.SIGTERM, 3.0
    import os
    import subprocess
    import sys
    import tempfile

    from leftovers import as_in_a_terminal, ended, group_killed_after, left_behind

    proc = subprocess.Popen(
        [sys.executable, "-m", "dsbench", "resume", str(exports["mds"]), "--backend", "native",
         "--restart-at", "2", "--ranks", "2", "--batch-size", "4", "--workers", "2",
         "--json", str(tmp_path / "a.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=as_in_a_terminal)
    with group_killed_after(proc):
        time.sleep(delay)
        assert proc.poll() is None, "the audit ended before the signal: move the moment"
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        err, took = ended(proc, timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
    assert err.strip().splitlines()[-1].endswith(
        "interrupted" if sig == signal.SIGINT else "terminated"), err
    assert took < 10, f"took {took:.1f} s"
    assert left_behind(proc.pid) == []
    assert list(Path(tempfile.gettempdir()).glob(f"dsbench-*-{proc.pid}-*")) == []
    assert not (tmp_path / "a.json").exists()
