"""Audio exports in each layout their library writes, read by dsbench's reader and by the
library's own: what each costs per second of audio (docs/audio.md's table).

    python -P benchmarks/audio_layouts.py OUT [--workers 1] [--rounds 6] [--seconds 1]
        [--clip-seconds 1] [--batch-size 16]

The exports are written by each library itself (tests/audiolibs.py: 24 clips of 16-bit PCM at
16 kHz, 0.4 to 1.2 s, every fifth in stereo, with a speaker id and a transcript, in 3 shards):
WebDataset's TarWriter with `.flac` members, and the same clips as `.wav` (the planted
regression), Hugging Face `datasets` (an Audio feature, `save_to_disk`) and MosaicML Streaming
(a `bytes` column). Every export and reader is measured in one interleaved run, so the ratios
between rows are measured together; CPU is also counted exactly (valgrind) where it is
installed. Prints a Markdown table: samples per second with their 95% interval, seconds of
audio per second (samples/s x the clip), CPU (timed and, exactly, instructions) per second of
audio the export stores (its clips' mean), bytes read per second of audio, and the peak
anonymous memory of one worker's loader from a run of that side alone (the interleaved run's
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

import audiolibs  # the tests' writers: each format's own library
import sides  # what the layout tables share

from dsbench import fmt
from dsbench.loader.options import BenchOptions

# (export, read by the library's own reader too)
EXPORTS = (("wds-flac", True), ("wds-wav", False), ("hf-audio", True), ("mds-audio", True))


def row(kind: str, doc: Any, clip_s: float, memory: float | None) -> list[str]:
    run = doc["runs"][0]
    lo, hi = run["samples_per_s_ci95"]
    stored = doc["export"]["audio"]["mean_seconds_per_sample"]  # every clip checked
    per_sample = (doc.get("exact") or {}).get("instructions_per_sample")
    reader = (f"{doc['reader']['library']} {doc['reader']['version']}"
              if doc.get("reader") else "dsbench")
    return [kind, reader,
            f"{fmt.sig(run['samples_per_s'])} ({fmt.sig(lo)}-{fmt.sig(hi)})",
            fmt.sig(run["samples_per_s"] * clip_s),
            fmt.seconds(run["cpu_s_per_sample"] / stored),
            "-" if per_sample is None else fmt.count(per_sample / stored),
            fmt.nbytes(run["bytes_per_sample"] / stored),
            "-" if memory is None else fmt.nbytes(memory)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--clip-seconds", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    opts = BenchOptions(workers=(args.workers,), batch_size=args.batch_size,
                        rounds=args.rounds, seconds=args.seconds, clip_s=args.clip_seconds)
    exports = []
    for kind, native in EXPORTS:
        path = args.out / kind
        if not path.exists():
            with contextlib.redirect_stdout(sys.stderr):  # the libraries' own printing
                audiolibs.write(kind, args.out)
        exports.append((kind, path, native))
    head = ["export", "reader", "samples/s (95% CI)", "audio s/s (clips)",
            "CPU/s of audio stored", "instructions/s of audio (exact)", "read/s of audio",
            "peak anon. memory"]
    rows = []
    for kind, backend, doc, memory in sides.interleaved(exports, opts):
        (args.out / f"{kind}-{backend}.json").write_text(json.dumps(doc))
        rows.append(row(kind, doc, args.clip_seconds, memory))
    sides.table(head, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
