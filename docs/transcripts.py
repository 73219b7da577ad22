"""Rerun the commands a doc shows with their output, and put what they print now in its place.

    python docs/transcripts.py                      # every doc that shows a transcript
    python docs/transcripts.py docs/incident.md ...  # these docs

In each doc, every fenced block whose lines start with `$ ` is a transcript: its commands run in
the order shown, each in bash from one scratch directory (what one writes under /tmp/dsbench is
there for the next, as in a reader's terminal), and the lines under each command become what
it printed on standard output, with the one-line error of a command that fails on purpose.
A command shown without output is run, and left so; an excerpt that starts at a heading of the
output stays an excerpt of as many lines. A ```python block is run too, in order, as the docs
test runs it, and a block after it marked `<!-- output of the Python block above -->` shows what
it printed. A block preceded by `<!-- output of: COMMAND -->` is one command's output without
the `$ ` line (docs/demo.md's). Figures come from this machine, as the docs say.

A doc is rewritten only when all of its commands ended as the doc shows them (exit 0, a gate's
1, or an error the doc shows on purpose; never a traceback), and whole: never half old, half
new. The docs test (tests/test_docs.py) runs the same commands on small data on every run,
checks the model's outputs, which do not vary, byte for byte, and the others in shape.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.S | re.M)
MARKER = re.compile(r"<!-- output of: (.+?) -->\n\n?\Z")
PYTHON_OUTPUT = "<!-- output of the Python block above -->"


@dataclass
class Shown:
    """One command and the span of the doc (character offsets) its output occupies; a Python
    block is run as a step (its output is not shown)."""
    command: str
    start: int
    end: int
    python: bool = False


def transcripts(text: str) -> list[Shown]:
    found = []
    for block in FENCE.finditer(text):
        if block.group(1) == "python":  # a step the doc's commands depend on (a server, a file)
            found.append(Shown(block.group(2), block.end(), block.end(), python=True))
            continue
        if found and found[-1].python and found[-1].start == found[-1].end and \
                PYTHON_OUTPUT in text[found[-1].end:block.start()]:
            found[-1].start, found[-1].end = block.start(2), block.end(2)
            continue
        marker = MARKER.search(text[:block.start()])
        if marker:
            found.append(Shown(marker.group(1), block.start(2), block.end(2)))
            continue
        offset, lines = block.start(2), block.group(2).splitlines(keepends=True)
        current: Shown | None = None
        continued = False  # the command's line ended with a backslash: it goes on
        for line in lines:
            if continued and current:
                current.command = current.command[:-1].rstrip() + " " + line.strip()
                current.start = current.end = offset + len(line)
            elif line.startswith("$ "):
                if current:
                    found.append(current)
                start = offset + len(line)
                current = Shown(line[2:].strip(), start, start)
            elif current:
                current.end = offset + len(line)
            continued = (current is not None and line.rstrip().endswith("\\")
                         and current.start == current.end)
            offset += len(line)
        if current:
            found.append(current)
    return found


def run(command: str, cwd: Path, python: bool = False) -> tuple[int, str, str]:
    """(exit code, what a doc shows of the output, standard error): standard output, and the
    one-line error a failing command prints on standard error."""
    # The dsbench installed beside the Python running this script, first on the PATH.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    argv = [sys.executable, "-P", "-c", command] if python else ["bash", "-c", command]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PATH": path})
    sys.stderr.write(proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    shown = proc.stdout + "".join(ln + "\n" for ln in errors) if proc.returncode else proc.stdout
    return proc.returncode, shown, proc.stderr


def expected(code: int, command: str, shown: str, stderr: str) -> bool:
    """An exit the doc shows: success, a gate's failed verdict (1), or an error shown on
    purpose (2); never a traceback, whatever its exit code."""
    if "Traceback (most recent call last)" in stderr:
        return False
    return code == 0 or (code == 1 and command.startswith("dsbench gate")) or (
        code == 2 and ": error: " in shown)


def excerpt(shown: str, out: str) -> str:
    """What replaces `shown`: the whole output, or where the doc shows an excerpt (its first
    line is a later line of the output, a heading) as many lines from that heading."""
    was, now = shown.splitlines(), out.splitlines()
    if was and now and was[0] != now[0] and was[0] in now:
        start = now.index(was[0])
        now = now[start:start + len(was)]
    return "".join(line + "\n" for line in now)


def regenerate(doc: Path, cwd: Path) -> bool:
    text = doc.read_text(encoding="utf-8")
    spans = transcripts(text)
    pieces, last, replaced = [], 0, 0
    for shown in spans:
        said = "a Python block" if shown.python else f"$ {shown.command}"
        print(f"{doc.name}: {said}", file=sys.stderr, flush=True)
        code, out, stderr = run(shown.command, cwd, shown.python)
        if shown.python and shown.start == shown.end:
            if code:  # a sketch for the reader may need what this script does not make
                print(f"{doc.name}: the Python block exited {code}", file=sys.stderr)
            continue
        if not expected(code, shown.command, text[shown.start:shown.end], stderr):
            print(f"{doc.name}: exit {code} from `{shown.command}`: left as it was",
                  file=sys.stderr)
            return False
        if shown.start == shown.end:  # shown without its output: run for what it writes
            continue
        pieces += [text[last:shown.start], excerpt(text[shown.start:shown.end], out)]
        last, replaced = shown.end, replaced + 1
    pieces.append(text[last:])
    tmp = doc.with_name(f".{doc.name}.tmp")
    tmp.write_text("".join(pieces), encoding="utf-8")
    os.replace(tmp, doc)
    print(f"{doc.name}: {replaced} outputs regenerated ({len(spans)} steps run)",
          file=sys.stderr)
    return True


# Docs whose transcripts need more than this machine, and what: regenerated by hand.
ELSEWHERE = {
    "object-store.md": "its buckets on an S3 server and a throttling proxy that serves until "
                       "stopped (the docs test fills the buckets on a local server)",
    "asv.md": "asv's own commands over a repository's history",
}


def every_doc() -> list[Path]:
    """The README and the docs that show a transcript, in a fixed order; ELSEWHERE's said."""
    docs = Path(__file__).resolve().parent
    found = [docs.parent / "README.md", *sorted(docs.glob("*.md"))]
    for name, why in ELSEWHERE.items():
        print(f"{name}: not regenerated here: it needs {why}", file=sys.stderr)
    return [d for d in found if d.name not in ELSEWHERE
            and transcripts(d.read_text(encoding="utf-8"))]


def main(argv: list[str]) -> int:
    docs = [Path(a) for a in argv] or every_doc()
    with tempfile.TemporaryDirectory(prefix="dsbench-transcripts-") as scratch:
        ok = [regenerate(d, Path(scratch)) for d in docs]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
