"""dsbench advise EXPORT: which layout to roll out, measured on a sample of the export."""

from __future__ import annotations

import argparse
from pathlib import Path

from dsbench import atomic, fmt
from dsbench.commands import vocabulary
from dsbench.commands.options import (
    add_cluster_arguments,
    add_exact_arguments,
    add_json_argument,
    cluster_from_args,
    emit,
    json_target,
)
from dsbench.commands.sample_options import (
    add_clip_argument,
    add_pack_argument,
    add_seq_len_argument,
    add_tokenizer_argument,
    given,
)
from dsbench.errors import DsbenchError
from dsbench.loader.options import BenchOptions
from dsbench.loader.order import ORDERS, SEQUENTIAL

HELP = ("which layout to roll out: re-lay a sample of the export into candidate layouts, shard "
        "sizes and encodings, measure them against the export within a budget, carry them to "
        "the cluster and recommend one (docs/advise.md)")

DEFAULT_DEFINITION = "advised.toml"


def parse_budget(text: str, option: str = "--budget") -> float:
    """'10m', '90s', '1h', '600' -> seconds."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * scale[t[-1]] if t and t[-1] in scale else float(t)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise DsbenchError(f"{option} {text!r}: expected a duration like 10m, 90s or 600")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dsbench.adapters import FORMATS
    from dsbench.advise.run import DEFAULT_SAMPLES, AdviseOptions
    from dsbench.loader.decode import DECODERS
    from dsbench.report.demo import DEMO_CLUSTER

    d = AdviseOptions()
    p.add_argument("path", metavar="EXPORT", help="the export as it is: its directory, or its "
                   "URL in an object store (its candidates are then measured from the same "
                   "store)")
    p.add_argument("--samples", type=int, default=None, metavar="N",
                   help=f"samples in each export made: the first N in the export's unit "
                        f"order, re-laid into each candidate and measured (default "
                        f"{DEFAULT_SAMPLES}, or all of a smaller export)")
    p.add_argument("--export-samples", type=int, default=None, metavar="N",
                   help="samples of the export the job trains on, where EXPORT is a part of "
                        "it: what the shard sizes mean for the cluster's loader workers "
                        "(default: EXPORT's own)")
    p.add_argument("--budget", default="10m",
                   help="about how long the measuring may take, candidates' writing included "
                        "(default 10m)")
    p.add_argument("--layouts", default=",".join(d.layouts),
                   help="layouts to try, comma-separated (default "
                        f"{','.join(d.layouts)}; also hf, lance, tfrecord, files)")
    p.add_argument("--shard-sizes", default="64MB,256MB,1GB",
                   help="shard sizes to try, in bytes (default 64MB,256MB,1GB)")
    p.add_argument("--compressions", default=",".join(d.compressions),
                   help="how the shards of Arrow, MDS and litdata candidates are tried: none, "
                        f"zstd or both (default {','.join(d.compressions)})")
    p.add_argument("--reencode", default=None, metavar="quality=Q[,quality=Q]",
                   help="also try each sharded candidate with its images re-encoded as JPEG at "
                        "these qualities (changes the data; default: images byte for byte)")
    p.add_argument("--stage-url", default=None, metavar="URL",
                   help="an export in an object store: where its candidates are uploaded to be "
                        "measured from the same store (default: a prefix beside the export, "
                        "named for the run); deleted at the end")
    p.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                   help="write the candidates here and keep them (default: a temporary "
                        "directory, removed at the end)")
    p.add_argument("--write-definition", type=Path, default=Path(DEFAULT_DEFINITION),
                   metavar="FILE", dest="definition",
                   help=f"where the winner's definition goes (default {DEFAULT_DEFINITION}); "
                        "nothing is written when no candidate wins")
    vocabulary.refuse(p, "--definition", "--definition names a definition to read; where "
                      "advise writes the winner's is --write-definition FILE")
    p.add_argument("--html", type=Path, default=None, metavar="FILE",
                   help="also write the table and the Pareto plot as one HTML page")
    m = p.add_argument_group("how to read (each side alike)")
    m.add_argument("--workers", type=int, default=1, help="loader workers (default 1)")
    m.add_argument("--batch-size", type=int, default=64,
                   help="samples per loader batch (default 64)")
    m.add_argument("--decoder", choices=DECODERS, default="pillow", help="JPEG decoder")
    m.add_argument("--order", choices=ORDERS, default=SEQUENTIAL,
                   help="how the workers read the export: sequential, shuffle (units "
                        "permuted, a "
                        "shuffle buffer on shards), random (samples permuted, each read where "
                        "it lies: only candidates of layouts read by random access are tried) "
                        "or block (blocks of --block samples) (default sequential)")
    m.add_argument("--block", type=int, default=BenchOptions().block, metavar="N",
                   help="with --order block: consecutive samples per block (default "
                        f"{BenchOptions().block})")
    m.add_argument("--pipeline", default=None, metavar="MODULE:CALLABLE",
                   help="your own per-sample step in place of dsbench's decode, fields and "
                        "transform: run on every side (docs/pipeline.md)")
    m.add_argument("--layout", choices=sorted(FORMATS), default=None,
                   help="read as this layout instead of detecting it")
    add_seq_len_argument(m)
    add_pack_argument(m)
    add_tokenizer_argument(m)
    add_clip_argument(m)
    add_exact_arguments(m, BenchOptions(), "count CPU instructions per sample by stage, "
                        "exactly: after the last pass, of the export and its candidates")
    add_cluster_arguments(p, DEMO_CLUSTER, "the cluster each candidate is carried to (a "
                          "model; defaults: the incident's 16 x 8 GPUs at 256 samples per GPU "
                          "in 0.15 s of compute)", measured_batch=False)
    add_json_argument(p, "the advice document")


def run(args: argparse.Namespace) -> int:
    from dsbench.advise import grid
    from dsbench.advise.run import AdviseOptions, advise, write_definition
    from dsbench.model.profiles import PROFILES
    from dsbench.report import advise as report
    from dsbench.report.demo import DEMO_CLUSTER
    from dsbench.results import schema

    if args.samples is not None and args.samples < 2:
        raise DsbenchError(f"--samples must be at least 2, got {args.samples}")
    if args.export_samples is not None and args.export_samples < 1:
        raise DsbenchError(f"--export-samples must be at least 1, got {args.export_samples}")
    for out in (args.definition, args.html):
        if out is not None:
            atomic.check_output(out)
    if args.work_dir is not None and args.work_dir.exists() and not args.work_dir.is_dir():
        raise DsbenchError("--work-dir: cannot make it a directory: a file is there",
                           path=args.work_dir)
    opts = AdviseOptions(samples=args.samples, budget_s=parse_budget(args.budget),
                         layouts=grid.parse_layouts(args.layouts),
                         shard_sizes=grid.parse_shard_sizes(args.shard_sizes),
                         compressions=grid.parse_compressions(args.compressions),
                         reencode=(() if args.reencode is None
                                   else grid.parse_reencode(args.reencode)),
                         work_dir=args.work_dir, layout=args.layout,
                         export_samples=args.export_samples, stage_url=args.stage_url)
    bench = BenchOptions(workers=(args.workers,), batch_size=args.batch_size,
                         decoder=args.decoder, order=args.order, step=args.pipeline,
                         block=args.block, exact=args.exact, exact_samples=args.exact_samples,
                         seq_len=args.seq_len, clip_s=args.clip_seconds,
                         sample_rate=args.sample_rate, pack=args.pack,
                         tokenizer=args.tokenizer, given=given(args))
    cluster, sources = cluster_from_args(args, DEMO_CLUSTER)
    if sources["storage"] == "default" and args.path.lower().startswith("s3://"):
        # The demo's shared filesystem is not where this job reads from: S3's published
        # figures are, unless --storage says otherwise.
        # (The report's "predicted for" line names the profile.)
        cluster = cluster.replace(storage=PROFILES["s3"])
    doc = advise(args.path, opts, bench, cluster, fmt.progress)
    written = write_definition(doc, args.definition)
    doc["definition_path"] = None if written is None else str(written)
    schema.validate(doc, "advice", "the advice document")
    if args.html is not None:
        atomic.write_output(args.html, report.render_html(doc).encode())
    emit(args, doc, lambda: report.render(doc))
    if written is not None and json_target(args) != "-":
        fmt.progress(f"wrote {written}: dsbench generate {written} OUT --from {args.path} "
                     "makes the full export")
    if args.html is not None:
        fmt.progress(f"wrote {args.html}")
    return 0
