"""dsbench job EXPORT: a synchronous data-parallel job on torch.distributed, measured, with the
cluster model's prediction for the same job beside it.

Started plainly, it launches `--ranks` ranks on this machine through torch's elastic launcher.
Started by torchrun (on one node or many) or as an srun task, this process is one rank: the
launcher says which, and rank 0 prints the report and writes `--json`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dsbench import fmt
from dsbench.commands.options import (
    add_cluster_subset,
    add_json_argument,
    emit,
    parse_workers,
)
from dsbench.errors import DsbenchError
from dsbench.job import identity, predict, result, share
from dsbench.job.options import DEVICES, JobOptions
from dsbench.loader.decode import DECODERS
from dsbench.loader.options import BACKENDS
from dsbench.model.costs import Distribution
from dsbench.model.node import ClusterSpec
from dsbench.report.job import render

HELP = ("run a synchronous data-parallel job on torch.distributed (each rank its own loader, "
        "emulated compute, an all-reduce per step), measure its steps and check the cluster "
        "model against them")

_D = JobOptions()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="the export each rank reads its share of")
    g = p.add_argument_group("the job")
    g.add_argument("--ranks", type=int, default=None,
                   help=f"ranks to start on this machine (default {_D.ranks}; under torchrun "
                        "or srun the launcher's world size)")
    g.add_argument("--ranks-sweep", default=None, metavar="N,N,...",
                   help="run the same job at each of these rank counts and report the tail "
                        "per count beside the model's (e.g. 1,2,4,8)")
    g.add_argument("--workers", type=int, default=_D.workers,
                   help=f"loader workers per rank (default {_D.workers})")
    g.add_argument("--batch-size", type=int, default=_D.batch_size,
                   help=f"samples per rank per step (default {_D.batch_size})")
    g.add_argument("--steps", type=int, default=_D.steps,
                   help=f"steps to run; the first workers x prefetch are not counted "
                        f"(default {_D.steps})")
    add_cluster_subset(g, ClusterSpec(compute=_D.compute),
                       ("compute", "stall_prob", "stall_s", "prefetch"))
    g.add_argument("--backend", choices=BACKENDS, default=_D.backend,
                   help="each rank's loader: dsbench's own or torch.utils.data.DataLoader")
    g.add_argument("--decoder", choices=DECODERS, default=_D.decoder, help="JPEG decoder")
    g.add_argument("--layout", default=None, help="read as this layout instead of detecting it")
    g.add_argument("--device", choices=DEVICES, default=_D.device,
                   help="where the all-reduce runs: cuda (nccl) when every rank of a node has "
                        "a GPU under auto, else cpu (gloo)")
    g.add_argument("--seed", type=int, default=_D.seed,
                   help="seed of the compute and stall draws and of the model (default 0)")
    add_json_argument(p, "the job result document")


def options(args: argparse.Namespace, ranks: int) -> JobOptions:
    compute = _D.compute
    if args.cluster_compute is not None:
        try:
            compute = Distribution.parse(args.cluster_compute)
        except DsbenchError as exc:
            raise DsbenchError(f"--compute {exc}") from None
    return JobOptions(ranks=ranks, workers=args.workers, batch_size=args.batch_size,
                      steps=args.steps, compute=compute,
                      stall_prob=args.cluster_stall_prob or 0.0,
                      stall_s=args.cluster_stall_s or 0.0, backend=args.backend,
                      prefetch=args.cluster_prefetch or _D.prefetch, seed=args.seed,
                      decoder=args.decoder, layout=args.layout, device=args.device)


def run(args: argparse.Namespace) -> int:
    ident = identity.detect()
    if ident is not None:
        return _as_rank(args, ident)
    sweep = parse_workers(args.ranks_sweep, "--ranks-sweep") if args.ranks_sweep else None
    if sweep and args.ranks is not None:
        raise DsbenchError("give --ranks or --ranks-sweep, not both")
    counts = sweep or (args.ranks if args.ranks is not None else _D.ranks,)
    jobs = [options(args, n) for n in counts]  # every count checked before any job starts
    share.check(args.path, args.workers, max(counts), args.layout)
    from dsbench.job.launch import launch

    docs = []
    for opts in jobs:  # a signal ends the launch in errors.Interrupted, which the cli reports
        fmt.progress(f"job: {opts.ranks} rank{'s' if opts.ranks != 1 else ''} x "
                     f"{opts.workers} loader worker{'s' if opts.workers != 1 else ''}, "
                     f"{opts.steps} steps")
        docs.append(launch(args.path, opts))
    doc = docs[-1]
    if sweep:
        doc["sweep"] = predict.tail_rows(docs)
    emit(args, doc, lambda: render(doc), lambda path, d: result.write(Path(path), d))
    return 0


def _as_rank(args: argparse.Namespace, ident: identity.Identity) -> int:
    """This process is one rank of a job that torchrun or srun started."""
    from dsbench.job import rank

    if args.ranks_sweep:
        raise DsbenchError("--ranks-sweep starts jobs itself: run it without torchrun or srun")
    if args.ranks is not None and args.ranks != ident.world:
        raise DsbenchError(f"--ranks {args.ranks}, but the launcher started {ident.world}")
    try:
        opts = options(args, ident.world)
        share.check(args.path, args.workers, ident.world, args.layout)
        doc = rank.run_rank(args.path, opts, ident)
    except (DsbenchError, RuntimeError) as exc:
        rank.fail(str(ident.rank), exc)
        raise  # fail() does not return
    if doc is not None:
        emit(args, doc, lambda: render(doc), lambda path, d: result.write(Path(path), d))
    return 0

