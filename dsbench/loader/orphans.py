"""What a killed run left behind, removed by the next one.

A run removes its shared-memory ring and its temporary directory however it ends, except when it
is killed outright (SIGKILL, the OOM killer, a machine that loses power): then nothing of it runs
to clean up. Both carry the id of the process that made them (`dsbench-<pid>-<ring>-<worker>` in
/dev/shm, `dsbench-native-<pid>-...` in the temporary directory), so the next run removes those
whose owner is gone, and only those: a run still going, or another user's, keeps its own.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SHM = Path("/dev/shm")
_SEGMENT = re.compile(r"^dsbench-(\d+)-\d+-\d+$")
_TEMP = re.compile(r"^dsbench-native-(\d+)-")


@dataclass
class Cleared:
    segments: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    owners: set[int] = field(default_factory=set)

    def text(self) -> str:
        """One line for people, or '' when nothing was left."""
        parts = []
        if self.segments:
            n = len(self.segments)
            parts.append(f"{n} shared-memory segment{'s' if n != 1 else ''}")
        if self.dirs:
            n = len(self.dirs)
            parts.append(f"{n} temporary director{'ies' if n != 1 else 'y'}")
        if not parts:
            return ""
        pids = ", ".join(map(str, sorted(self.owners)))
        return (f"removed {' and '.join(parts)} left by killed dsbench runs (process "
                f"{pids}, no longer running)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to judge
        return True
    return True


def _orphaned(entry: Path, pattern: re.Pattern[str]) -> int | None:
    """The dead owner of `entry`, or None when it is not an orphan of ours."""
    m = pattern.match(entry.name)
    if m is None:
        return None
    pid = int(m[1])
    try:
        mine = entry.lstat().st_uid == os.getuid()
    except OSError:
        return None
    if not mine or pid == os.getpid() or alive(pid):
        return None
    return pid


def clear(shm: Path = SHM, temp: Path | None = None) -> Cleared:
    """Remove the segments and temporary directories whose owning process is gone."""
    out = Cleared()
    for root, pattern, names in ((shm, _SEGMENT, out.segments),
                                 (temp or Path(tempfile.gettempdir()), _TEMP, out.dirs)):
        try:
            entries = list(root.iterdir())
        except OSError:  # no /dev/shm (not Linux), or an unreadable directory
            continue
        for entry in entries:
            pid = _orphaned(entry, pattern)
            if pid is None:
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            except FileNotFoundError:  # another run cleared it first
                continue
            except OSError:
                continue
            names.append(entry.name)
            out.owners.add(pid)
    return out


_done = False


def clear_once(progress: object = None) -> Cleared | None:
    """clear(), the first time a process asks; says what it removed on `progress`."""
    global _done
    if _done:
        return None
    _done = True
    cleared = clear()
    text = cleared.text()
    if text and callable(progress):
        progress(text)
    return cleared
