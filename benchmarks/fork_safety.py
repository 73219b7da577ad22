"""Re-export a Lance export, written by Lance's own library, again and again: no run may crash or
hang (Lance is not fork-safe; dsbench's writers are spawned where it is loaded).

    python -P benchmarks/fork_safety.py OUT [--runs 30] [--samples 120] [--timeout 120]

Each run is `dsbench generate thumbnails OUT/run --from OUT/lance --jobs 2` (shards of 25
samples: two writers) as a fresh process, ended if it takes longer than --timeout seconds; the
script prints each failed run's last line and a count, and exits 1 if any run failed or hung.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image


def write_lance(out: Path, samples: int) -> None:
    """JPEG images and labels, written by Lance's library in files of 40 rows."""
    import lance
    import pyarrow as pa

    rng = np.random.default_rng(0)
    images = []
    for _ in range(samples):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)).save(buf, "JPEG")
        images.append(buf.getvalue())
    table = pa.table({"image": pa.array(images, pa.binary()),
                      "label": pa.array(rng.integers(0, 10, samples), pa.int64())})
    lance.write_dataset(table, str(out), max_rows_per_file=40)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--samples", type=int, default=120)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take")
    args = parser.parse_args()
    source = args.out / "lance"
    if not source.exists():
        write_lance(source, args.samples)
    failed = 0
    t0 = time.perf_counter()
    for run in range(1, args.runs + 1):
        out = args.out / "run"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "dsbench", "generate", "thumbnails", str(out), "--from",
               str(source), "--jobs", "2"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            failed += 1
            print(f"run {run}: hung (no end within {args.timeout:g} s)")
            continue
        if done.returncode != 0:
            failed += 1
            last = (done.stderr.strip().splitlines() or ["(nothing said)"])[-1]
            print(f"run {run}: exit {done.returncode}: {last}")
    took = time.perf_counter() - t0
    print(f"{args.runs - failed} of {args.runs} re-exports from Lance whole in {took:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
