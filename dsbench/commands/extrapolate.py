"""dsbench extrapolate RESULT.json: a bench result's loader costs -> a synchronous job's steps.

Argument parsing and printing only; the model is dsbench.model.cluster. Options left unset take
dsbench's defaults, and the output marks them as assumed ("default") rather than given.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import numpy as np

from dsbench.commands import vocabulary
from dsbench.commands.options import (
    _CLUSTER_OPTIONS,
    GPU_BATCH,
    add_cluster_arguments,
    add_json_argument,
    cluster_from_args,
    emit,
)
from dsbench.errors import DsbenchError
from dsbench.job import result as job_result
from dsbench.job.predict import predict
from dsbench.model.cluster import DEFAULT_SCALING, DEFAULT_STEPS, extrapolate
from dsbench.model.costs import LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.report.extrapolation import render
from dsbench.report.job import render_job_check
from dsbench.results.document import read_result

HELP = ("predict a synchronous multi-GPU job's step time, GPU utilization, timeline and tail "
        "from a bench result (or a stated CPU per sample)")

_D = ClusterSpec()  # dsbench's defaults, shown in --help


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("result", nargs="?", help="bench result JSON written by `dsbench bench`, or a "
                   "job result written by `dsbench job` (the model beside its measurement)")
    src = p.add_argument_group("loader cost without a result file")
    src.add_argument("--cpu-per-sample", type=float, metavar="S",
                     help="CPU seconds per sample of one loader worker (instead of RESULT)")
    src.add_argument("--cpu-cv", type=float, metavar="CV",
                     help="coefficient of variation of that per-sample CPU (default 0)")
    src.add_argument("--files-per-sample", type=float, metavar="F",
                     help="files opened per sample (default: measured, or 0)")
    src.add_argument("--bytes-per-sample", type=float, metavar="B",
                     help="bytes read per sample (default: measured, or 0)")
    add_cluster_arguments(p, _D, "the job (unset options are assumed and marked 'default')")
    vocabulary.refuse(p, "--batch-size", GPU_BATCH)
    st = p.add_argument_group("an object store's load and bill (with a store profile, or a "
                              "result measured in a store)")
    st.add_argument("--prefixes", type=int, default=1, metavar="N",
                    help="key prefixes the export's objects spread over, each with the "
                         "store's request limit (default 1)")
    st.add_argument("--epoch-samples", type=int, default=None, metavar="N",
                    help="samples in one epoch, for its requests and cost (default: the "
                         "measured export's)")
    m = p.add_argument_group("the simulation")
    m.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"steps of the job: simulated (default {DEFAULT_STEPS})")
    m.add_argument("--seed", type=int, default=0, help="random seed: of the simulation (default 0)")
    m.add_argument("--scaling", default=",".join(map(str, DEFAULT_SCALING)),
                   help="rank counts for the scaling table (default %(default)s)")
    add_json_argument(m, "the extrapolation document")


def _scaling(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DsbenchError(f"--scaling {text!r}: expected rank counts like 8,16,32") from None
    if not out or min(out) < 1:
        raise DsbenchError(f"--scaling {text!r}: rank counts must be integers >= 1")
    return out


def _loader(args: argparse.Namespace) -> LoaderCost:
    if (args.result is None) == (args.cpu_per_sample is None):
        raise DsbenchError("give either RESULT.json or --cpu-per-sample, not both or neither")
    if args.result is not None:
        if args.cpu_cv is not None:
            raise DsbenchError("--cpu-cv goes with --cpu-per-sample; a result has measured "
                               "batches")
        cost = LoaderCost.from_result(read_result(args.result), args.result)
    else:
        cost = LoaderCost.stated(args.cpu_per_sample, args.cpu_cv or 0.0)
    changes: dict[str, Any] = {}
    for name in ("files_per_sample", "bytes_per_sample"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if changes:
        cost = dataclasses.replace(cost, **changes,
                                   stated_fields=cost.stated_fields | set(changes))
    return cost


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:  # numpy's generator takes non-negative seeds only
        raise DsbenchError(f"--seed must be an integer >= 0, got {args.seed}")
    if args.result is not None and job_result.is_job(args.result):
        return _job(args)
    cost = _loader(args)
    cluster, sources = cluster_from_args(
        args, _D, measured_batch=cost.measured_batch if cost.origin == "measured" else None)
    doc = extrapolate(cost, cluster, np.random.default_rng(args.seed), steps=args.steps,
                      scaling=_scaling(args.scaling), sources=sources,
                      prefixes=args.prefixes, epoch_samples=args.epoch_samples)
    doc["seed"] = args.seed
    emit(args, doc, lambda: render(doc))
    return 0


def _job(args: argparse.Namespace) -> int:
    """A measured job's result: the model again on the job's own configuration and measured
    costs (with this run's --steps and --seed), beside what the job measured."""
    stated = [flag for name, (flag, _) in _CLUSTER_OPTIONS.items()
              if getattr(args, f"cluster_{name}") is not None]
    stated += [f"--{n.replace('_', '-')}" for n in ("cpu_per_sample", "cpu_cv",
                                                     "files_per_sample", "bytes_per_sample")
               if getattr(args, n) is not None]
    if stated:
        raise DsbenchError(f"{', '.join(stated)}: a job result carries its own configuration "
                           "and measured costs")
    doc = job_result.read(args.result)
    doc["model"] = predict(doc, seed=args.seed, steps=args.steps)
    emit(args, doc, lambda: render_job_check(doc))
    return 0
