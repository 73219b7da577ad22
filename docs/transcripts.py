"""Rerun the commands a doc shows with their output, and put what they print now in its place.

    python docs/transcripts.py docs/incident.md docs/demo.md ...

In each doc, every fenced block whose lines start with `$ ` is a transcript: its commands run in
the order shown, each in bash from one scratch directory (what one writes under /tmp/dsbench is
there for the next, as in a reader's terminal), and the lines under each command become what
it printed on standard output. A block preceded by a line `<!-- output of: COMMAND -->` is one
command's output without the `$ ` line (docs/demo.md's verdict). Figures come from this
machine, as the docs say of their transcripts.

A doc is rewritten only when all of its commands ended as the doc shows them (exit 0, a gate's
1, or an error the doc shows on purpose), and whole: never half old, half new. The docs test
(tests/test_docs.py) runs the same commands on small data on every test run, and checks the
model's outputs, which do not vary, byte for byte.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```[a-z]*\n(.*?)^```\n", re.S | re.M)
MARKER = re.compile(r"<!-- output of: (.+?) -->\n\n?\Z")


@dataclass
class Shown:
    """One command and the span of the doc (character offsets) its output occupies."""
    command: str
    start: int
    end: int


def transcripts(text: str) -> list[Shown]:
    found = []
    for block in FENCE.finditer(text):
        marker = MARKER.search(text[:block.start()])
        if marker:
            found.append(Shown(marker.group(1), block.start(1), block.end(1)))
            continue
        offset, lines = block.start(1), block.group(1).splitlines(keepends=True)
        current: Shown | None = None
        for line in lines:
            if line.startswith("$ "):
                if current:
                    found.append(current)
                start = offset + len(line)
                current = Shown(line[2:].strip(), start, start)
            elif current:
                current.end = offset + len(line)
            offset += len(line)
        if current:
            found.append(current)
    return found


def run(command: str, cwd: Path) -> tuple[int, str]:
    # The dsbench installed beside the Python running this script, first on the PATH.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PATH": path})
    sys.stderr.write(proc.stderr)
    return proc.returncode, proc.stdout


def expected(code: int, shown: str) -> bool:
    """An exit the doc shows: success, a gate's failed verdict, or an error shown on purpose."""
    return code in (0, 1) or (code == 2 and ": error: " in shown)


def regenerate(doc: Path, cwd: Path) -> bool:
    text = doc.read_text(encoding="utf-8")
    spans = transcripts(text)
    pieces, last = [], 0
    for shown in spans:
        print(f"{doc.name}: $ {shown.command}", file=sys.stderr, flush=True)
        code, out = run(shown.command, cwd)
        if not expected(code, text[shown.start:shown.end]):
            print(f"{doc.name}: exit {code} from `{shown.command}`: left as it was",
                  file=sys.stderr)
            return False
        pieces += [text[last:shown.start], out if out.endswith("\n") or not out else out + "\n"]
        last = shown.end
    pieces.append(text[last:])
    tmp = doc.with_name(f".{doc.name}.tmp")
    tmp.write_text("".join(pieces), encoding="utf-8")
    os.replace(tmp, doc)
    print(f"{doc.name}: {len(spans)} outputs regenerated", file=sys.stderr)
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dsbench-transcripts-") as scratch:
        ok = [regenerate(Path(a), Path(scratch)) for a in argv]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
