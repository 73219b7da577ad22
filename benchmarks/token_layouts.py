"""Token exports in each layout their library writes, read by dsbench's reader and by the
library's own: what each costs per token (docs/tokens.md's table).

    python -P benchmarks/token_layouts.py OUT [--kind tokens|text] [--workers 1] [--rounds 6]
        [--seconds 1] [--seq-len 2048] [--batch-size 16]

The exports are written by each library itself (tests/tokenlibs.py: 120 documents of 20-300
token ids, uint16, Zipf-distributed over a 50,000-id vocabulary, and a doc id, in 3 shards):
MosaicML Streaming (an `ndarray:uint16` column; and the same tokens with the doc id in a JSON
column, the planted regression), litdata's `optimize` (a NumPy leaf; and with TokensLoader, the
documents laid end to end and read in blocks of --seq-len ids), Hugging Face `datasets`
(`save_to_disk`, a list of uint16), Parquet (pyarrow, a list of uint16) and Megatron's
IndexedDatasetBuilder (a blend of three .bin/.idx datasets, no doc ids). With `--kind text`:
120 English-like texts with a doc id as JSON Lines, through MDSWriter (a `str` column),
`datasets` and Parquet, tokenized in the workers by a BPE trained on them; the columns are then
per character. Every export and
reader is measured in one interleaved run, so the ratios between rows are measured together;
CPU is also counted exactly (valgrind) where it is installed. Prints a Markdown table: samples
per second with their 95% interval, sequence tokens per second (samples/s x seq_len), CPU (timed
and, exactly, instructions) per id the export stores (its documents' mean; for TokensLoader's
blocks, per id read), bytes read per id,
and the peak
anonymous memory of one worker's loader, from a run of that side alone (the interleaved run's
workers share one fork server that imported every side's library); the results as JSON in OUT.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sides  # what the layout tables share
import tokenlibs  # the tests' writers: each format's own library

from dsbench import fmt
from dsbench.loader.options import BenchOptions

# (export, read by the library's own reader too), for token samples and for raw text
KINDS = {"tokens": (("mds-tokens", True), ("mds-tokens-json", False),
                    ("litdata-tokens-pytree", True), ("litdata-tokens", True),
                    ("hf-tokens", True),
                    ("parquet-tokens", False), ("megatron-tokens", True)),
         "text": (("text-jsonl", False), ("mds-text", True), ("hf-text", True),
                  ("parquet-text", False))}
# What the per-unit columns divide by: the ids a token export stores, a text's characters.
UNIT = {"tokens": ("id", "tokens", "mean_per_sample"),
        "text": ("character", "text", "mean_chars_per_sample")}


def write(kind: str, root: Path) -> Path:
    out = root / kind
    return out if out.exists() else tokenlibs.write(kind, root)


def row(kind: str, doc: Any, seq_len: int, memory: float | None, what: str) -> list[str]:
    run = doc["runs"][0]
    lo, hi = run["samples_per_s_ci95"]
    _, block, key = UNIT[what]
    ids = doc["export"][block][key]  # every document checked: 120 of 120
    per_sample = (doc.get("exact") or {}).get("instructions_per_sample")
    reader = (f"{doc['reader']['library']} {doc['reader']['version']}"
              if doc.get("reader") else "dsbench")
    return [kind, reader,
            f"{fmt.sig(run['samples_per_s'])} ({fmt.sig(lo)}-{fmt.sig(hi)})",
            f"{fmt.count(run['samples_per_s'] * seq_len)}",
            fmt.seconds(run["cpu_s_per_sample"] / ids),
            "-" if per_sample is None else fmt.sig(per_sample / ids),
            fmt.nbytes(run["bytes_per_sample"] / ids),
            "-" if memory is None else fmt.nbytes(memory)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--kind", choices=sorted(KINDS), default="tokens",
                   help="token exports, or raw text tokenized in the workers")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    opts = BenchOptions(workers=(args.workers,), batch_size=args.batch_size,
                        rounds=args.rounds, seconds=args.seconds, seq_len=args.seq_len)
    exports = []
    for kind, native in KINDS[args.kind]:
        with contextlib.redirect_stdout(sys.stderr):  # the libraries' own printing
            exports.append((kind, write(kind, args.out), native))
    unit = UNIT[args.kind][0]
    head = ["export", "reader", "samples/s (95% CI)", "tokens/s (sequences)",
            f"CPU/{unit} stored", f"instructions/{unit} (exact)", f"read/{unit}",
            "peak anon. memory"]
    rows = []
    for kind, backend, doc, memory in sides.interleaved(exports, opts):
        (args.out / f"{kind}-{backend}.json").write_text(json.dumps(doc))
        rows.append(row(kind, doc, args.seq_len, memory, args.kind))
    sides.table(head, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
