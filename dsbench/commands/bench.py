"""dsbench bench PATH: read an export as a training job does and say what each sample costs."""

from __future__ import annotations

import argparse

from dsbench import fmt
from dsbench.commands.options import (
    add_json_argument,
    add_native_option_argument,
    add_window_arguments,
    emit,
    window_options,
)
from dsbench.errors import DsbenchError
from dsbench.loader.native import options as native_options
from dsbench.loader.options import BACKENDS, BenchOptions
from dsbench.loader.runner import run_bench
from dsbench.report.bench import render
from dsbench.results.document import write_result

HELP = ("measure samples/s, CPU per sample and where it goes, bytes and files per sample, "
        "reading an export with W worker processes")


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = BenchOptions()
    p.add_argument("path", nargs="?", default=None,
                   help="the export: a directory of shards or files, or one file (none with "
                        "--dataset)")
    add_window_arguments(p)
    p.add_argument("--warmup-batches", type=int, default=d.warmup_batches,
                   help=f"batches per worker before the window, not counted "
                        f"(default {d.warmup_batches})")
    p.add_argument("--step-time", type=float, default=d.step_time_s, metavar="S",
                   help="emulated training step per batch in s; reports accelerator "
                        "utilization (default 0: consume as fast as possible)")
    p.add_argument("--normalize", action="store_true",
                   help="end the transform with float32 mean/std normalisation")
    p.add_argument("--prefetch", type=int, default=d.prefetch,
                   help=f"batches each loader worker may hold ready (default {d.prefetch})")
    p.add_argument("--on-error", choices=("raise", "skip"), default=d.on_error,
                   help="a sample that cannot be read: fail (default) or skip and count it")
    p.add_argument("--backend", choices=BACKENDS, default=d.backend,
                   help="the loader that reads the export: dsbench's own, torch's DataLoader "
                        "around dsbench's reader (pip install 'dsbench[torch]'), or the "
                        "format's own library (native: docs/formats.md)")
    add_native_option_argument(p)
    p.add_argument("--dataset", default=None, metavar="MODULE:FACTORY",
                   help="your own torch Dataset or IterableDataset, built by FACTORY(), "
                        "measured as a black box through torch's DataLoader "
                        "(docs/pipeline.md)")
    p.add_argument("--ceiling", action="store_true",
                   help="also measure the same loader handing over batches it already built "
                        "(no reading, decoding or transforms), rounds interleaved, and report "
                        "the throughput as a fraction of that ceiling: how much of the time is "
                        "the export's and how much the loader's (docs/access-patterns.md)")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="random seed: of the transform (default 0)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                   help="a worker silent this long fails the run (default: 20 times its usual "
                        "time between batches, 5 to 300 s, and 60 s before its first)")
    add_json_argument(p, "the result document")


def run(args: argparse.Namespace) -> int:
    opts = window_options(args, warmup_batches=args.warmup_batches, step_time_s=args.step_time,
                          normalize=args.normalize, on_error=args.on_error,
                          backend=args.backend, prefetch=args.prefetch, seed=args.seed,
                          stall_s=args.stall_timeout, dataset=args.dataset,
                          ceiling=args.ceiling,
                          native_options=native_options.parse(args.native_option))
    if (args.path is None) == (args.dataset is None):
        raise DsbenchError("name an export PATH, or --dataset MODULE:FACTORY, not both")
    doc = run_bench(args.path or args.dataset, opts, progress=fmt.progress)
    emit(args, doc, lambda: render(doc), write_result)
    return 0
