"""Each library's own shuffle against its read in order: what it costs and how random its
batches are (docs/formats.md's table).

    python -P benchmarks/native_shuffles.py OUT [--workers 1] [--rounds 4] [--seconds 1]
        [--buffer 64]

The exports are written by each library itself (tests/formatlibs.py: 120 samples in shards of
40, and webdataset's ShardWriter with the same samples), and each is read with `--backend
native` in order and with `--order shuffle`, the two interleaved round by round. Prints a
Markdown table: samples/s and CPU per sample with their 95% intervals, distinct shards per
batch, label entropy per batch and how far apart consecutive samples of a batch lie in the
export.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import formatlibs  # the tests' writers: each format's own library

from dsbench import fmt
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches

FORMATS = ("mds", "litdata", "hf", "hf-hub", "wds")


def write(name: str, root: Path) -> Path:
    out = root / name
    return out if out.exists() else formatlibs.write(name, root)


def row(name: str, order: str, doc: Any) -> list[str]:
    run = doc["runs"][0]
    q = run.get("order_figures") or {}
    lo, hi = run["samples_per_s_ci95"]
    clo, chi = run["cpu_s_per_sample_ci95"]

    def maybe(key: str, unit: str) -> str:
        return "-" if q.get(key) is None else f"{fmt.sig(q[key])} {unit}"

    return [f"{name} ({doc['reader']['library']} {doc['reader']['version']})", order,
            f"{fmt.sig(run['samples_per_s'])} ({fmt.sig(lo)}-{fmt.sig(hi)})",
            f"{fmt.seconds(run['cpu_s_per_sample'])} ({fmt.seconds(clo)}-{fmt.seconds(chi)})",
            maybe("units_per_batch", "shards"), maybe("label_entropy_bits", "bits"),
            maybe("source_distance", "samples")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--buffer", type=int, default=64)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in FORMATS:
        with contextlib.redirect_stdout(sys.stderr):
            path = write(name, args.out)
        opts = BenchOptions(workers=(args.workers,), batch_size=8, rounds=args.rounds,
                            seconds=args.seconds, exact=False, backend="native",
                            shuffle_buffer=args.buffer)
        with contextlib.redirect_stdout(sys.stderr):  # the libraries' own printing
            docs = run_benches([path, path], opts,
                               each=[opts, dataclasses.replace(opts, order="shuffle")])
        rows += [row(name, order, d) for order, d in zip(("in order", "shuffle"), docs,
                                                           strict=True)]
    head = ["export", "read", "samples/s (95% CI)", "CPU/sample (95% CI)", "per batch",
            "label entropy per batch", "apart in the export"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
