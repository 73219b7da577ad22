"""Machine metadata for result documents: what the figures were measured on.

Two results compare only when the facts that shape them match (CPU model, usable cores, library
versions), so they are recorded at the root of every result, as pyperf does. Everything here is
read from the OS and package metadata; nothing is imported to learn its version, so recording
torch's version does not cost a torch import.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from dsbench.results.types import Machine

LIBRARIES = ("numpy", "pillow", "pyarrow", "webdataset", "psutil", "simplejpeg", "torch")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Processor", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries that shape the figures; None when not installed."""
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(cwd: str | Path | None = None) -> dict[str, Any] | None:
    """{"commit", "dirty", "root"} of the git work tree holding `cwd`; None outside one."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        root = git("rev-parse", "--show-toplevel")
        try:
            commit: str | None = git("rev-parse", "HEAD")
        except subprocess.CalledProcessError:
            commit = None  # a repository without commits yet
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty, "root": root}


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def collect(cwd: str | Path | None = None) -> Machine:
    """The machine block of a result document."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count() or 1,
        "usable_cores": usable_cores(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "platform": platform.platform(),
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "libraries": library_versions(),
        "load_avg_1m": float(load[0]),
        "git": git_info(cwd),
    }
