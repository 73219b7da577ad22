"""dsbench bench PATH: read an export as a training job does and say what each sample costs."""

from __future__ import annotations

import argparse
from typing import Any

from dsbench import fmt, results
from dsbench.errors import DsbenchError
from dsbench.pipeline import DECODERS, STAGES
from dsbench.runner import BACKENDS, BenchOptions, run_bench

HELP = ("measure samples/s, CPU per sample and where it goes, bytes and files per sample, "
        "reading an export with W worker processes")


def add_window_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """What to measure and for how long: shared by `bench`, `compare` and `gate`."""
    d = BenchOptions()
    p.add_argument("--workers", default="1",
                   help="worker counts to run, comma-separated, e.g. 1,2,4 (default 1)")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help=f"samples per batch (default {d.batch_size})")
    p.add_argument("--seconds", type=float, default=d.seconds,
                   help=f"length of each measured window in s (default {d.seconds:g})")
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help=f"rounds per worker count, each with fresh workers (default {d.rounds})")
    p.add_argument("--cold", action="store_true",
                   help="evict the export's files from the page cache before each round")
    p.add_argument("--decoder", choices=DECODERS, default=d.decoder,
                   help="JPEG decoder (simplejpeg: pip install 'dsbench[fast]')")


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = BenchOptions()
    p.add_argument("path", help="the export: a directory of shards or files, or one file")
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
                   help=f"ready batches each worker may hold (default {d.prefetch})")
    p.add_argument("--on-error", choices=("raise", "skip"), default=d.on_error,
                   help="a sample that cannot be read: fail (default) or skip and count it")
    p.add_argument("--backend", choices=BACKENDS, default=d.backend,
                   help="dsbench's own loader, or torch.utils.data.DataLoader "
                        "(pip install 'dsbench[torch]')")
    p.add_argument("--seed", type=int, default=d.seed, help="transform seed (default 0)")
    p.add_argument("--json", metavar="OUT", help="also write the result document here")


def parse_workers(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(c < 1 for c in counts):
        raise DsbenchError(f"--workers expects positive integers separated by commas, like "
                           f"1,2,4; got {text!r}")
    return counts


def render(doc: dict[str, Any]) -> str:
    """The result as two tables for people: throughput and cost, then CPU per stage."""
    runs = doc["runs"]
    rows = []
    for r in runs:
        lo, hi = r["samples_per_s_ci95"]
        au = r["accelerator_util"]
        rows.append([
            str(r["workers"]), fmt.rate(r["samples_per_s"]),
            f"{fmt.sig(lo)}-{fmt.sig(hi)} samples/s",
            fmt.seconds(r["cpu_s_per_sample"], "sample"),
            fmt.nbytes(r["bytes_per_sample"], "sample"),
            fmt.rate(r["files_per_sample"], "files/sample"),
            fmt.nbytes(r["peak_pss_bytes"]),
            fmt.percent(r["scaling_efficiency"]) if r["scaling_efficiency"] is not None else "-",
            fmt.percent(au) if au is not None else "-",
        ])
    main = fmt.table(["workers", "throughput", "95% CI", "CPU", "bytes read", "files opened",
                      "peak PSS", "scaling", "accel. util"], rows)
    stage_rows = []
    for r in runs:
        # Stages are pooled over all rounds, so "other" is taken against the pooled CPU too
        # (the headline CPU figure is the median of the rounds).
        pooled = sum(x["cpu_s"] for x in r["rounds"]) / r["samples"]
        other = pooled - sum(r["stages"].values())
        stage_rows.append([str(r["workers"]),
                           *(fmt.seconds(r["stages"][s], "sample") for s in STAGES),
                           fmt.seconds(other, "sample")])
    stages = fmt.table(["workers", *STAGES, "other"], stage_rows)
    cfg = doc["config"]
    head = (f"{cfg['path']}: {doc['export'].get('layout', '?')} export, batch "
            f"{cfg['batch_size']}, {cfg['rounds']} rounds of {fmt.seconds(cfg['seconds'])}, "
            f"backend {cfg['backend']}, decoder {cfg['decoder']}"
            + (", cold cache" if cfg["cold"] else ""))
    skipped = sum(r["skipped_samples"] for r in runs)
    tail = f"\nskipped {skipped} bad samples (see 'skipped' in --json)" if skipped else ""
    return (f"{head}\n\n{main}\n\nCPU per sample by stage (other: main process, hand-over, "
            f"idle wake-ups)\n{stages}{tail}")


def run(args: argparse.Namespace) -> int:
    opts = BenchOptions(
        workers=parse_workers(args.workers), batch_size=args.batch_size, seconds=args.seconds,
        rounds=args.rounds, warmup_batches=args.warmup_batches, step_time_s=args.step_time,
        cold=args.cold, decoder=args.decoder, normalize=args.normalize,
        on_error=args.on_error, backend=args.backend, prefetch=args.prefetch, seed=args.seed)
    doc = run_bench(args.path, opts, progress=fmt.progress)
    if args.json:
        results.write_result(args.json, doc)
    print(render(doc))
    if args.json:
        fmt.progress(f"wrote {args.json}")
    return 0
