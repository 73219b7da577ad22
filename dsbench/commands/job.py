"""dsbench job EXPORT: a synchronous data-parallel job on torch.distributed, measured, with the
cluster model's prediction for the same job beside it.

Started plainly, it launches `--ranks` ranks on this machine through torch's elastic launcher.
Started by torchrun (on one node or many) or as an srun task, this process is one rank: the
launcher says which, and rank 0 prints the report and writes `--json`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from dsbench import fmt, installed
from dsbench.commands import vocabulary
from dsbench.commands.options import (
    GPU_BATCH,
    add_cluster_subset,
    add_json_argument,
    emit,
    parse_workers,
)
from dsbench.commands.sample_options import (
    add_clip_argument,
    add_pack_argument,
    add_seq_len_argument,
    add_tokenizer_argument,
    given,
)
from dsbench.errors import DsbenchError
from dsbench.job import identity, predict, result, share
from dsbench.job.launch import quiet_torch_cpp
from dsbench.job.options import DEVICES, MAX_RANKS, JobOptions
from dsbench.loader.decode import DECODERS
from dsbench.loader.options import BACKENDS, check_kind
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
                   help=f"ranks (one per GPU): those to start on this machine (default "
                        f"{_D.ranks}; under torchrun or srun the launcher's world size)")
    g.add_argument("--nodes", type=int, default=1,
                   help="nodes in the job: machines it spans, each running this same command "
                        "(default 1); with more than 1, give --rdzv")
    g.add_argument("--rdzv", default=None, metavar="HOST:PORT",
                   help="with --nodes: the first node's address and a free port, the same on "
                        "every node (torch's c10d rendezvous, as torchrun's --rdzv-endpoint)")
    g.add_argument("--ranks-sweep", default=None, metavar="N,N,...",
                   help="run the same job at each of these rank counts and report the tail "
                        "per count beside the model's (e.g. 1,2,4,8)")
    g.add_argument("--workers", type=int, default=_D.workers,
                   help=f"loader workers: per rank (default {_D.workers})")
    g.add_argument("--gpu-batch", type=int, default=_D.batch_size, dest="batch_size",
                   help=f"samples per GPU per step: each rank's loader batch (default "
                        f"{_D.batch_size})")
    vocabulary.refuse(g, "--batch-size", GPU_BATCH)
    g.add_argument("--steps", type=int, default=_D.steps,
                   help=f"steps of the job: run, the first workers x prefetch not counted "
                        f"(default {_D.steps})")
    add_cluster_subset(g, ClusterSpec(compute=_D.compute),
                       ("compute", "stall_prob", "stall_s", "prefetch"))
    g.add_argument("--backend", choices=BACKENDS, default=_D.backend,
                   help="the loader that reads the export: each rank's, dsbench's own or "
                        "torch's DataLoader around dsbench's reader")
    g.add_argument("--decoder", choices=DECODERS, default=_D.decoder, help="JPEG decoder")
    g.add_argument("--layout", default=None, help="read as this layout instead of detecting it")
    g.add_argument("--device", choices=DEVICES, default=_D.device,
                   help="where the all-reduce runs: cuda (nccl) when every rank of a node has "
                        "a GPU under auto, else cpu (gloo)")
    g.add_argument("--seed", type=int, default=_D.seed,
                   help="random seed: of the compute and stall draws and of the model "
                        "(default 0)")
    add_seq_len_argument(g)
    add_pack_argument(g)
    add_clip_argument(g)
    add_tokenizer_argument(g)
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
                      decoder=args.decoder, layout=args.layout, device=args.device,
                      seq_len=args.seq_len, clip_s=args.clip_seconds,
                      sample_rate=args.sample_rate, pack=args.pack)


def as_found(opts: JobOptions, found: share.Found, path: str, given: tuple[str, ...] = ()
             ) -> JobOptions:
    """The job's options for what share.check found its export's samples to carry (`given`:
    the options for one kind of sample the command line gave)."""
    check_kind(found.kind, path, pack=opts.pack, sample_rate=opts.sample_rate, given=given)
    return dataclasses.replace(opts, kind=found.kind, rate=found.rate,
                               tokenizer=found.tokenizer.source if found.tokenizer else None)


def run(args: argparse.Namespace) -> int:
    quiet_torch_cpp()  # before torch's first import, which the next line makes
    installed.require("torch", "dsbench job")
    ident = identity.detect()
    if ident is not None:
        if args.nodes != 1 or args.rdzv is not None:
            raise DsbenchError("--nodes and --rdzv are for dsbench's own launch; under "
                               "torchrun or srun the launcher says how many nodes there are")
        return _as_rank(args, ident)
    sweep = parse_workers(args.ranks_sweep, "--ranks-sweep") if args.ranks_sweep else None
    if sweep and args.ranks is not None:
        raise DsbenchError("give --ranks or --ranks-sweep, not both")
    nodes = _nodes(args, sweep)
    counts = sweep or (args.ranks if args.ranks is not None else _D.ranks,)
    if max(counts) > MAX_RANKS:
        raise DsbenchError(f"--ranks must be at most {MAX_RANKS} on one machine, got "
                           f"{max(counts)}")
    # Options for the whole job (its world size); each node starts `count` of its ranks.
    jobs = [options(args, n * nodes) for n in counts]  # every count checked before any starts
    found = share.check(args.path, args.workers, max(counts) * nodes, args.layout,
                        args.seq_len, args.tokenizer)
    jobs = [as_found(opts, found, args.path, given(args)) for opts in jobs]
    from dsbench.job.launch import launch

    docs = []
    for opts in jobs:  # a signal ends the launch in errors.Interrupted, which the cli reports
        per_node = opts.ranks // nodes
        where = f" on each of {nodes} nodes" if nodes > 1 else ""
        fmt.progress(f"job: {per_node} rank{'s' if per_node != 1 else ''}{where} x "
                     f"{opts.workers} loader worker{'s' if opts.workers != 1 else ''}, "
                     f"{opts.steps} steps")
        got = launch(args.path, opts, nodes=nodes, rdzv=args.rdzv, found_layout=found.layout,
                     tokenizer=found.tokenizer)
        if got is None:
            fmt.out(f"job: this node's {fmt.plural(per_node, 'rank')} finished; the node that "
                    "holds rank 0 prints the report and writes --json")
            return 0
        docs.append(got)
    doc = docs[-1]
    if sweep:
        doc["sweep"] = predict.tail_rows(docs)
    emit(args, doc, lambda: render(doc), lambda path, d: result.write(Path(path), d))
    return 0


def _nodes(args: argparse.Namespace, sweep: tuple[int, ...] | None) -> int:
    if args.nodes < 1:
        raise DsbenchError(f"--nodes must be at least 1, got {args.nodes}")
    if args.nodes > 1 and args.rdzv is None:
        raise DsbenchError("--nodes needs --rdzv HOST:PORT: the first node's address and a "
                           "free port, the same on every node")
    if args.nodes == 1 and args.rdzv is not None:
        raise DsbenchError("--rdzv is for a job of several --nodes")
    if args.nodes > 1 and sweep:
        raise DsbenchError("--ranks-sweep runs on one node: give --ranks with --nodes")
    if args.rdzv is not None:
        host, _, port = args.rdzv.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DsbenchError(f"--rdzv {args.rdzv!r}: expected HOST:PORT")
    return int(args.nodes)


def _as_rank(args: argparse.Namespace, ident: identity.Identity) -> int:
    """This process is one rank of a job that torchrun or srun started."""
    from dsbench.job import rank

    if args.ranks_sweep:
        raise DsbenchError("--ranks-sweep starts jobs itself: run it without torchrun or srun")
    if args.ranks is not None and args.ranks != ident.world:
        raise DsbenchError(f"--ranks {args.ranks}, but the launcher started {ident.world}")
    try:
        found = share.check(args.path, args.workers, ident.world, args.layout, args.seq_len,
                            args.tokenizer)
        opts = as_found(options(args, ident.world), found, args.path, given(args))
        doc = rank.run_rank(args.path, opts, ident, found.layout, found.tokenizer)
    except (DsbenchError, RuntimeError) as exc:
        rank.fail(str(ident.rank), exc)
        raise  # fail() does not return
    if doc is not None:
        emit(args, doc, lambda: render(doc), lambda path, d: result.write(Path(path), d))
    return 0

