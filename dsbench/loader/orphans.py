"""What a killed run left behind, removed by the next one.

A run removes its shared-memory ring and its temporary directory however it ends, except when it
is killed outright (SIGKILL, the OOM killer, a machine that loses power): then nothing of it runs
to clean up. Both carry the identity of the process that made them (`owner()`: its id, its start
time and its PID namespace; `dsbench-<owner>-<ring>-<worker>` in /dev/shm,
`dsbench-native-<owner>-...`, `dsbench-advise-<owner>-...` and `dsbench-exact-<owner>-...` in
the temporary directory), so the next run removes those whose owner is gone, and only those: a
run still going, or another user's, keeps its own. The start
time tells a dead owner from a later process that was given its id (containers start every run
at the same small ids); the namespace keeps a run from judging another container's entries in a
/dev/shm they share, whose processes it cannot see. Names made by earlier versions carry the
id alone, and are judged by it alone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SHM = Path("/dev/shm")
_OWNER = r"(\d+)-(\d+)-(\d+)"  # pid, start time, PID namespace
_SEGMENT = re.compile(rf"^dsbench-{_OWNER}-\d+-\d+$")
_TEMP = re.compile(rf"^dsbench-(?:native|advise|exact)-{_OWNER}-")  # native, advise, exact pass
# Names of earlier versions, with the process id alone: judged by it alone.
_OLD_SEGMENT = re.compile(r"^dsbench-(\d+)-\d+-\d+$")
_OLD_TEMP = re.compile(r"^dsbench-native-(\d+)-[^-]*$")


def start_ticks(pid: int | str) -> int | None:
    """When the process started (clock ticks since boot; /proc/PID/stat's 22nd field), or None
    when there is no such process here; 0 where the system has no /proc."""
    if not Path("/proc/self/stat").exists():
        return 0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def namespace(pid: int | str = "self") -> int:
    """The process's PID namespace (its inode), 0 where the system has none."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return 0


def owner() -> str:
    """This process's identity in the names of what it makes: 'PID-START-NAMESPACE'."""
    return f"{os.getpid()}-{start_ticks('self') or 0}-{namespace()}"


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


def gone(pid: int, start: int, ns: int) -> bool:
    """Whether the process that made an entry is gone: no process has its id, or the one that
    has it started at another time. Entries of another PID namespace are never judged gone."""
    if ns != namespace():
        return False
    now = start_ticks(pid)
    if now == 0:  # no /proc: the id alone
        return not _alive(pid)
    return now is None or now != start


def _orphaned(entry: Path, pattern: re.Pattern[str]) -> int | None:
    """The dead owner of `entry`, or None when it is not an orphan of ours."""
    m = pattern.match(entry.name)
    old = None if m else (_OLD_SEGMENT if pattern is _SEGMENT else _OLD_TEMP).match(entry.name)
    if m is None and old is None:
        return None
    try:
        mine = entry.lstat().st_uid == os.getuid()
    except OSError:
        return None
    if not mine:
        return None
    if m is not None:
        pid = int(m[1])
        return pid if gone(pid, int(m[2]), int(m[3])) else None
    assert old is not None
    pid = int(old[1])
    return pid if pid != os.getpid() and not _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
