"""docs/exact-cpu.md's calibration table: regressions planted in copies of one export, each
compared with it by instructions (counted) and by CPU time (timed, with its interval).

    python -P benchmarks/exact_calibration.py OUT [--samples 500] [--rounds 6] [--seconds 2]

The base is `before.toml` (WebDataset shards: JPEG quality 90 at ImageNet's sizes, and a label).
Each variant changes one thing a re-export can change: the codec, the JPEG quality or its
progressive encoding, the images' size, a field stored as a JSON list, the shards gzipped, the
layout (zstd Arrow, per-sample files, shards of ten samples); an unchanged copy at another path
is the control. Each is measured against the base in one interleaved run (`compare BASE
VARIANT --exact`), and the table is printed as Markdown: the instructions' ratio, the timed CPU
ratio with its 95% interval, and what the kernel counts beside the instructions (read calls and
page faults per sample). Every result and comparison is kept in OUT.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.analysis.compare import compare
from dsbench.export.generate import generate
from dsbench.export.spec import FORMATS_DIR, parse_spec
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches
from dsbench.results.document import write_result

# name -> what changes in before.toml's definition (None: made from the base's files)
VARIANTS: dict[str, dict[str, Any] | None] = {
    "copy (A/A)": None,
    "PNG": {"image": {"codec": "png"}},
    "JPEG quality 100": {"image": {"quality": 100}},
    "progressive JPEG": {"image": {"progressive": True}},
    "full resolution (1600 x 1200)": {"image": {"sizes": "fixed", "width": 1600,
                                                "height": 1200}},
    "embedding as JSON": {"fields_as": "json", "fields": {"embedding": {
        "type": "embedding", "dim": 768, "encoding": "json"}}},
    "gzipped shards": None,
    "zstd Arrow": {"layout": "arrow", "compression": "zstd"},
    "per-sample files": {"layout": "files", "fields_as": "json"},
    "shards of 10 samples": {"shard_samples": 10},
}


def _definition(change: dict[str, Any]) -> dict[str, Any]:
    data = tomllib.loads((FORMATS_DIR / "before.toml").read_text())
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    data["name"] = "variant"
    return data


def _made_from_base(name: str, base: Path, out: Path) -> None:
    if name.startswith("copy"):
        shutil.copytree(base, out)
        return
    out.mkdir()
    for shard in sorted(base.glob("*.tar")):
        (out / f"{shard.name}.gz").write_bytes(gzip.compress(shard.read_bytes(), mtime=0))


def _row(name: str, comparison: dict[str, Any], docs: list[dict[str, Any]]) -> list[str]:
    run = comparison["runs"][0]
    m = {x["metric"]: x for x in run["metrics"]}
    instr, cpu = m.get("instructions_per_sample"), m["cpu_s_per_sample"]
    lo, hi = cpu["ratio_ci95"] or (float("nan"), float("nan"))
    base, cand = (d["exact"] for d in docs)

    def per(key: str) -> str:
        return f"{fmt.sig(base[key])} → {fmt.sig(cand[key])}"

    return [name, fmt.instructions(cand["instructions_per_sample"]),
            fmt.ratio(instr["ratio"]) if instr else "-",
            f"{fmt.ratio(cpu['ratio'])} ({fmt.sig(lo)}x to {fmt.sig(hi)}x)",
            per("read_calls_per_sample"), per("minor_faults_per_sample")]


def main_(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / "base"
    generate(parse_spec(_definition({}), "before"), base, samples=args.samples)
    rows = []
    for i, (name, change) in enumerate(VARIANTS.items()):
        path = args.out / f"variant-{i}"
        if not path.exists():
            if change is None:
                _made_from_base(name, base, path)
            else:
                generate(parse_spec(_definition(change), name), path, samples=args.samples)
        opts = BenchOptions(rounds=args.rounds, seconds=args.seconds, exact=True)
        docs = run_benches([base, path], opts, fmt.progress)
        comparison = compare(*docs)
        for doc, side in zip(docs, ("base", "cand"), strict=True):
            write_result(args.out / f"variant-{i}-{side}.json", doc)
        (args.out / f"variant-{i}.json").write_text(json.dumps(comparison, indent=1))
        rows.append(_row(name, comparison, list(docs)))
    print(fmt.table(["variant", "instructions", "instructions' ratio",
                     "CPU time ratio (95% interval)", "read calls/sample",
                     "page faults/sample"], rows, markdown=True))


if __name__ == "__main__":
    main_()
