"""What a dsbench run started in its own session left behind: for the cleanup tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil


def left_behind(session: int) -> list[str]:
    """Processes still in the session, or its shared-memory segments, after a grace period."""
    deadline = time.monotonic() + 5.0
    while True:
        procs = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if os.getsid(p.pid) == session:
                    procs.append(" ".join(p.info["cmdline"] or []))
            except (ProcessLookupError, PermissionError):
                pass
        segments = [s.name for s in Path("/dev/shm").glob(f"dsbench-{session}-*")]
        if (not procs and not segments) or time.monotonic() > deadline:
            return procs + segments
        time.sleep(0.1)
