"""dsbench compare BASE CAND: two exports side by side, with where the cost moved."""

from __future__ import annotations

import argparse

from dsbench import fmt
from dsbench.analysis.measure import compare_sides
from dsbench.commands.options import (
    add_cluster_arguments,
    add_json_argument,
    cluster_from_args,
    emit,
)
from dsbench.commands.sides import add_side_arguments, side_options
from dsbench.errors import DsbenchError
from dsbench.model.node import ClusterSpec
from dsbench.report.comparison import render

HELP = ("compare two exports (result files, or export paths measured in one interleaved run): "
        "ratios, significance, CPU by stage, and the predicted effect on a cluster")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_side_arguments(p)
    add_cluster_arguments(p, ClusterSpec(), "predicted cluster (a model; defaults: the "
                          "incident's 16 x 8 GPUs)")
    p.add_argument("--no-cluster", action="store_true", help="skip the cluster prediction")
    p.add_argument("--markdown", action="store_true", help="print GitHub markdown instead of text")
    add_json_argument(p, "the comparison document")


def run(args: argparse.Namespace) -> int:
    opts, cand_opts = side_options(args)
    comparison = compare_sides(
        [args.base, args.cand], opts, save=args.save, progress=fmt.progress,
        cluster=None if args.no_cluster else lambda batch: cluster_from_args(
            args, ClusterSpec(), measured_batch=batch)[0], cand_opts=cand_opts,
        any_order=args.any_order)
    if not comparison["comparable"]:
        # As the gate says it: ratios of results measured on other machines or with other
        # options would be printed as findings, and a script reading --json must not take
        # an empty comparison for one that found nothing.
        raise DsbenchError(f"{args.base} vs {args.cand}: results are not comparable: "
                           + "; ".join(comparison["not_comparable_reasons"]))
    emit(args, comparison, lambda: render(comparison, markdown=args.markdown))
    return 0
