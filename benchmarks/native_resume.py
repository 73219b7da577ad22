"""Each library's own resume, case by case (docs/resume.md's table).

    python -P benchmarks/native_resume.py OUT [--ranks 2] [--workers 2] [--restart-at 2]
        [--batch-size 8] [--buffer 32] [--hang-after 60]

The exports are written by each library itself (tests/formatlibs.py: 120 samples in shards of
40; webdataset's ShardWriter with the same samples), and each is audited with `dsbench resume
--backend native` (every case). Prints a Markdown table: per library and case, the shape, the
samples replayed and skipped against the uninterrupted epoch, the restart's time to its first
batch, or the hang or the library's refusal. Rerun it where the libraries are the versions a
team runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import formatlibs  # the tests' writers: each format's own library

from dsbench import fmt
from dsbench.report.resume import NATIVE_HEADERS, native_row
from dsbench.resume.native import NativeResumeOptions, run_native_resume

FORMATS = ("mds", "litdata", "hf", "hf-hub", "wds")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--restart-at", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--buffer", type=int, default=32)
    p.add_argument("--hang-after", type=float, default=60.0)
    args = p.parse_args()
    opts = NativeResumeOptions(restart_at=args.restart_at, ranks=args.ranks,
                               workers=args.workers, batch_size=args.batch_size,
                               buffer=args.buffer, hang_s=args.hang_after)
    rows = []
    for name in FORMATS:
        path = args.out / name
        if not path.exists():
            formatlibs.write(name, args.out)
        doc = run_native_resume(str(path), opts, fmt.progress)
        library = f"{name} ({doc['reader']['library']} {doc['reader']['version']})"
        rows += [[library, *native_row(case)] for case in doc["cases"]]
    print(fmt.table(["export", *NATIVE_HEADERS], rows, markdown=True))


if __name__ == "__main__":
    main()
