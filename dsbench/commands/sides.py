"""Options shared by `compare` and `gate` (the two sides, how to measure them, the cluster), and
the cluster built from command options, which `demo` uses too."""

from __future__ import annotations

import argparse
from typing import Any

from dsbench import fmt
from dsbench.cluster import ClusterSpec
from dsbench.commands.bench import add_window_arguments, parse_workers
from dsbench.compare import cluster_predictions, compare, load_or_measure
from dsbench.errors import DsbenchError
from dsbench.loadcost import DIST_SYNTAX, Distribution
from dsbench.runner import BenchOptions
from dsbench.storage import PROFILES, parse_storage


def add_side_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="the current export: a result .json or an export path")
    p.add_argument("cand", help="the candidate export: a result .json or an export path")
    m = p.add_argument_group("measuring export paths (both in one run, rounds interleaved)")
    add_window_arguments(m)
    m.add_argument("--save", nargs=2, metavar=("BASE_JSON", "CAND_JSON"),
                   help="write both sides' result documents")


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    d = ClusterSpec()
    c = p.add_argument_group("predicted cluster (a model; defaults: the incident's 16 x 8 GPUs)")
    c.add_argument("--nodes", type=int, default=d.nodes, help=f"(default {d.nodes})")
    c.add_argument("--gpus-per-node", type=int, default=d.gpus_per_node,
                   help=f"(default {d.gpus_per_node})")
    c.add_argument("--cores-per-node", type=int, default=d.cores_per_node,
                   help=f"(default {d.cores_per_node})")
    c.add_argument("--workers-per-gpu", type=int, default=d.workers_per_gpu,
                   help=f"(default {d.workers_per_gpu})")
    c.add_argument("--gpu-batch", type=int, default=None,
                   help="samples per GPU per step (default: the measured batch size)")
    c.add_argument("--compute", default=None,
                   help=f"GPU seconds per step: {DIST_SYNTAX} (default {d.compute.mean:g})")
    c.add_argument("--storage", default="local", help=f"{', '.join(PROFILES)} (default local)")
    c.add_argument("--no-cluster", action="store_true", help="skip the cluster prediction")


def bench_options(args: argparse.Namespace) -> BenchOptions:
    return BenchOptions(workers=parse_workers(args.workers), batch_size=args.batch_size,
                        seconds=args.seconds, rounds=args.rounds, decoder=args.decoder,
                        cold=args.cold)


# ClusterSpec names its fields in errors; these commands' options for them are spelled so.
_OPTION_OF = {"batch-size": "--gpu-batch", "stall-s": "--stall-time", "stall-prob": "--stall-prob",
              "nodes": "--nodes", "gpus-per-node": "--gpus-per-node",
              "cores-per-node": "--cores-per-node", "workers-per-gpu": "--workers-per-gpu"}


def build_cluster(base: ClusterSpec, compute: str | None, **fields: Any) -> ClusterSpec:
    """`base` with `fields` replaced and `--compute` parsed; errors name options, not fields."""
    try:
        if compute is not None:
            fields["compute"] = Distribution.parse(compute)
    except DsbenchError as exc:
        raise DsbenchError(f"--compute {exc}") from None
    try:
        return base.replace(**fields)
    except DsbenchError as exc:
        text = str(exc)
        for name, option in _OPTION_OF.items():
            if text.startswith(name + " "):
                text = option + text[len(name):]
                break
        raise DsbenchError(text) from None


def cluster_spec(args: argparse.Namespace, measured_batch: int) -> ClusterSpec:
    return build_cluster(ClusterSpec(), args.compute, nodes=args.nodes,
                         gpus_per_node=args.gpus_per_node, cores_per_node=args.cores_per_node,
                         workers_per_gpu=args.workers_per_gpu,
                         batch_size=measured_batch if args.gpu_batch is None else args.gpu_batch,
                         storage=parse_storage(args.storage))


def compare_sides(args: argparse.Namespace, with_cluster: bool) -> dict[str, Any]:
    """Load or measure both sides and compare them; extrapolate both when asked and comparable."""
    from dsbench import results

    base, cand = load_or_measure([args.base, args.cand], bench_options(args), fmt.progress)
    if getattr(args, "save", None):
        for path, doc in zip(args.save, (base, cand), strict=True):
            results.write_result(path, doc)
            fmt.progress(f"wrote {path}")
    comparison = compare(base, cand)
    if with_cluster and comparison["comparable"]:
        spec = cluster_spec(args, base["runs"][0]["batch_size"])
        comparison["cluster"] = cluster_predictions(base, cand, spec)
    return comparison
