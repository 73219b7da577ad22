"""dsbench generate DEFINITION OUT_DIR: write (or complete) an export from a definition."""

from __future__ import annotations

import argparse

from dsbench import fmt
from dsbench.export.generate import generate
from dsbench.export.spec import load_spec

HELP = "write an export from a definition in formats/ (resumable: re-run to complete it)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("definition", help="export definition (TOML), e.g. formats/before.toml")
    p.add_argument("out_dir", help="directory to write the export into")
    p.add_argument("--samples", type=int, default=None,
                   help="number of samples (default: the definition's `samples`)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes to use (default: every core this process may run on)")


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.definition)
    report = generate(spec, args.out_dir, samples=args.samples, seed=args.seed, jobs=args.jobs)
    per_core = report.samples_written / report.cpu_s if report.cpu_s > 0 else 0.0
    line = (f"{spec.name}: {report.samples} samples in {report.out_dir} "
            f"({report.units_written} units written, {report.units_skipped} already complete) "
            f"in {fmt.seconds(report.wall_s)}")
    if per_core:
        line += f", {fmt.rate(per_core, 'samples/s per core')}"
    fmt.out(line)
    return 0
