"""The one exception type that the command line turns into a one-line message and exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DsbenchError(Exception):
    """Bad input or bad options: a message for a person, naming the file (and sample) at fault.

    `main()` prints it as a single line and exits 2; nothing else in dsbench is caught there, so a
    traceback always means a bug in dsbench rather than in the user's data.
    """

    def __init__(self, message: str, *, path: object = None, key: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if key is not None:
                where += f" [sample {key}]"
            where += ": "
        # One line, whatever a library put in its message (pyarrow's span several).
        super().__init__(" ".join((where + message).split()))
        self.path = path
        self.key = key


class SampleError(DsbenchError):
    """One sample could not be read or decoded; `--on-error skip` counts these, not fails."""


class Missing(DsbenchError):
    """A library the export's samples need is not installed: no sample's fault, so said once
    for the run, not counted against each sample that needed it."""


class Interrupted(Exception):
    """A signal that a launcher caught for its children (torch's elastic agent turns SIGINT and
    SIGTERM into an exception of its own): the run stopped, and every child with it. The
    command line ends it as it ends a Ctrl-C, with 128 + the signal's number."""

    def __init__(self, signum: int, stopped: str) -> None:
        super().__init__(stopped)
        self.signum, self.stopped = signum, stopped


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """" (did you mean X?)" with the nearest of `known`, or "" where none is near: the tail of
    a message refusing a misspelt key or option."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
