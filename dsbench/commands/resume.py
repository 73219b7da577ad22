"""dsbench resume EXPORT --restart-at K --policy POLICY: what a restart does to the data order.

The measuring is dsbench.resume; this parses, adds the machine block, checks the document
against its schema, writes it and prints the report (and, with --plot, the entropy figure).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dsbench import fmt
from dsbench.commands.options import (
    add_json_argument,
    add_native_option_argument,
    emit,
)
from dsbench.commands.sample_options import (
    add_clip_argument,
    add_seq_len_argument,
    add_tokenizer_argument,
    given,
)
from dsbench.errors import DsbenchError
from dsbench.loader.native import options as native_options
from dsbench.report.resume import render, render_native, write_plot
from dsbench.results import machine, schema
from dsbench.resume.measure import BACKENDS, POLICIES, ResumeOptions, run_resume
from dsbench.resume.native import CASES, NativeResumeOptions, run_native_resume

HELP = ("interrupt a training job's loader after K steps, restart it by a policy (no state, "
        "fast-forward, stateful) and count the samples replayed and skipped, the time to the "
        "first batch and the batches' label entropy against an uninterrupted epoch")

_D = ResumeOptions(restart_at=1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("export", help="an export directory (any layout dsbench reads)")
    p.add_argument("--restart-at", type=int, required=True, metavar="K",
                   help="steps of the epoch before the restart")
    p.add_argument("--policy", default="none",
                   help=f"how the job restarts, one or several comma-separated: "
                        f"{', '.join(POLICIES)}, or all (default %(default)s)")
    p.add_argument("--backend", choices=(*BACKENDS, "native"), default=_D.backend,
                   help="the loader that reads the export: dsbench's own, torch's "
                        "DataLoader (torchdata's StatefulDataLoader for --policy stateful), "
                        "or native: the format's own library and its own resume (MDS, "
                        "litdata, Hugging Face, WebDataset), audited case by case (--case) "
                        "(default %(default)s)")
    p.add_argument("--ranks", type=int, default=_D.ranks,
                   help="ranks (one per GPU): those the epoch is sharded over (default "
                        "%(default)s)")
    p.add_argument("--workers", type=int, default=_D.workers,
                   help="loader workers: processes per rank (default %(default)s)")
    p.add_argument("--ranks-after", type=int, default=None, metavar="M",
                   help="restart on M ranks, as after a lost node (default: --ranks); the "
                        "ranks run together and replayed and skipped samples are counted over "
                        "the whole epoch across them")
    p.add_argument("--workers-after", type=int, default=None, metavar="V",
                   help="restart with V loader workers per rank (default: --workers)")
    p.add_argument("--batch-size", type=int, default=_D.batch_size,
                   help="samples per loader batch (default %(default)s)")
    p.add_argument("--buffer", type=int, default=_D.buffer,
                   help="shuffle-buffer samples per worker, for shard layouts "
                        "(default %(default)s)")
    p.add_argument("--seed", type=int, default=_D.seed,
                   help="random seed: of the shuffle (default %(default)s)")
    p.add_argument("--epoch", type=int, default=_D.epoch,
                   help="the epoch to interrupt (default %(default)s)")
    p.add_argument("--window", type=int, default=_D.window,
                   help="steps after the restart whose diversity and throughput are reported "
                        "(default %(default)s)")
    p.add_argument("--label", default=None,
                   help="the label field (default: label, cls, class or target)")
    p.add_argument("--units", type=int, default=None, metavar="N",
                   help="only the export's first N units (shards, or files): a quicker run")
    add_seq_len_argument(p)
    add_clip_argument(p)
    add_tokenizer_argument(p)
    p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="draw the label entropy per step around the restart (needs matplotlib)")
    native = p.add_argument_group("--backend native")
    native.add_argument("--case", default="all",
                        help=f"the restarts audited, comma-separated: {', '.join(CASES)}, or "
                             "all (default %(default)s)")
    native.add_argument("--hang-after", type=float, default=60.0, metavar="S",
                        help="a restart with no batch for S seconds is reported as a hang "
                             "(default %(default)s)")
    add_native_option_argument(native)
    add_json_argument(p, "the resume result")


def _listed(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list of names, or all of `known`."""
    if text == "all":
        return known
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _policies(text: str) -> tuple[str, ...]:
    names = _listed(text, POLICIES)
    bad = [n for n in names if n not in POLICIES]
    if bad or not names:
        raise DsbenchError(f"unknown policy {(bad or [text])[0]!r} (known: "
                           f"{', '.join(POLICIES)}, all)")
    return names


def _native(args: argparse.Namespace) -> int:
    """--backend native: the library's own resume (resume/native.py)."""
    if args.policy != "none" or args.epoch or args.units or args.plot \
            or args.tokenizer is not None or args.sample_rate is not None:
        raise DsbenchError("--backend native restores the library's own state: --policy, "
                           "--epoch, --units, --plot, --tokenizer and --sample-rate are for "
                           "dsbench's and torch's loaders")
    opts = NativeResumeOptions(
        restart_at=args.restart_at, ranks=args.ranks, workers=args.workers,
        ranks_after=args.ranks_after, workers_after=args.workers_after,
        batch_size=args.batch_size, buffer=args.buffer, seed=args.seed,
        hang_s=args.hang_after, cases=_listed(args.case, CASES),
        options=native_options.parse(args.native_option))
    opts.check()
    doc = run_native_resume(args.export, opts, fmt.progress)
    doc["machine"] = machine.collect()
    schema.validate(doc, "resume-native", "the native resume result")
    emit(args, doc, lambda: render_native(doc))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.backend == "native":
        return _native(args)
    opts = ResumeOptions(restart_at=args.restart_at, policies=_policies(args.policy),
                         backend=args.backend, ranks=args.ranks, workers=args.workers,
                         batch_size=args.batch_size, buffer=args.buffer, seed=args.seed,
                         epoch=args.epoch, window=args.window, label=args.label,
                         units=args.units, ranks_after=args.ranks_after,
                         workers_after=args.workers_after, seq_len=args.seq_len,
                         clip_s=args.clip_seconds, sample_rate=args.sample_rate,
                         tokenizer=args.tokenizer, given=given(args))
    opts.check()  # bad options fail before the export is read
    if args.plot is not None:
        from dsbench.report.plots import available

        if not available():
            raise DsbenchError("--plot needs matplotlib: pip install 'dsbench[plot]'")
    doc = run_resume(args.export, opts, fmt.progress)
    doc["machine"] = machine.collect()
    schema.validate(doc, "resume", "the resume result")
    emit(args, doc, lambda: render(doc))
    if args.plot is not None:
        fmt.progress(f"wrote {write_plot(doc, args.plot)}")
    return 0
