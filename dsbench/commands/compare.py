"""dsbench compare BASE CAND: two exports side by side, with where the cost moved."""

from __future__ import annotations

import argparse
import json

from dsbench import tables
from dsbench.commands.sides import add_cluster_arguments, add_side_arguments, compare_sides

HELP = ("compare two exports (result files, or export paths measured in one interleaved run): "
        "ratios, significance, CPU by stage, and the predicted effect on a cluster")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_side_arguments(p)
    add_cluster_arguments(p)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="GitHub-markdown tables")
    out.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    comparison = compare_sides(args, with_cluster=not args.no_cluster)
    if args.json:
        print(json.dumps(comparison))
    else:
        print(tables.render(comparison, markdown=args.markdown))
    return 0
