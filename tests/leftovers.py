"""What a dsbench run started in its own session left behind: for the cleanup tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil


def left_behind(session: int) -> list[str]:
    """Processes still running in the session, or its shared-memory segments, after a grace
    period. A zombie has exited and released everything; the one dsbench's exit leaves (Python's
    resource tracker, which outlives the main process by design and is then reparented) waits
    for init to reap it, which some inits do only every second or two, and others never."""
    deadline = time.monotonic() + 5.0
    while True:
        procs = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if os.getsid(p.pid) == session and p.info["status"] != psutil.STATUS_ZOMBIE:
                    procs.append(" ".join(p.info["cmdline"] or []))
            except (ProcessLookupError, PermissionError):
                pass
        segments = [s.name for s in Path("/dev/shm").glob(f"dsbench-{session}-*")]
        if (not procs and not segments) or time.monotonic() > deadline:
            return procs + segments
        time.sleep(0.1)


def as_in_a_terminal() -> None:
    """Popen's preexec_fn for a run that gets a Ctrl-C: SIGINT at its default action, as a
    terminal's foreground job has it. A shell starts a script's background jobs (`cmd &`) with
    SIGINT ignored, and a program that starts with it ignored keeps ignoring it, as shells
    intend; a suite run from such a job would otherwise send Ctrl-C to runs that never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def group_killed_after(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Whatever the test does to `proc`, its session is SIGKILLed at the end if still running,
    so that a failed assertion leaves no run behind."""
    try:
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def ended(proc: subprocess.Popen[str], timeout: float) -> tuple[str, float]:
    """Wait for `proc` to end: its stderr, and the seconds it took from now."""
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=timeout)
    return err, time.monotonic() - t0
