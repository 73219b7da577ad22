"""dsbench budget: throughput arithmetic with no result file; it prints every number it was fed."""

from __future__ import annotations

import argparse

from dsbench.commands import vocabulary
from dsbench.commands.options import GPU_BATCH, add_json_argument, emit
from dsbench.model.budget import Job, budget
from dsbench.report.budget import render

HELP = ("back-of-envelope throughput arithmetic: samples/s needed and available per node, and "
        "what an observed job's step times, utilization and host CPU imply (a model)")


def _fraction(text: str) -> float:
    """'0.61' or '61%'; a bare number above 1 is refused rather than guessed at."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction (0.61) or a percentage "
                                         "(61%)") from None
    if not t.endswith("%") and value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} is above 1: give a fraction (0.61) or a "
                                         "percentage (61%)")
    return value


def _times(text: str) -> float:
    t = text.strip().lower().removesuffix("x")
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a factor like 2.1 or 2.1x") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, required=True, help="GPUs in the job (one rank each)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--trainer-cores-per-gpu", type=float, default=1.0,
                   help="cores each training process itself keeps busy (default 1)")
    p.add_argument("--gpu-batch", type=int, dest="batch_size", help="samples per GPU per step")
    vocabulary.refuse(p, "--batch-size", GPU_BATCH)
    p.add_argument("--cores-per-node", type=float, help="CPU cores per node")
    cap = p.add_argument_group("capacity")
    cap.add_argument("--compute", type=float, metavar="S", help="GPU seconds per step")
    cap.add_argument("--cpu-per-sample", type=float, metavar="S",
                     help="CPU seconds per sample of one loader worker")
    obs = p.add_argument_group("an observed job")
    obs.add_argument("--mean-step", type=float, metavar="S", help="mean step time, seconds")
    obs.add_argument("--p99-step", type=float, metavar="S", help="p99 step time, seconds")
    obs.add_argument("--gpu-util", type=_fraction, help="mean GPU utilization (0.61 or 61%%)")
    obs.add_argument("--host-cpu", type=_fraction, help="host CPU utilization (0.95 or 95%%)")
    obs.add_argument("--slowdown", type=_times,
                     help="how many times slower than before (2.1 or 2.1x)")
    add_json_argument(p, "the budget document")


def run(args: argparse.Namespace) -> int:
    job = Job(gpus=args.gpus, gpus_per_node=args.gpus_per_node,
              trainer_cores_per_gpu=args.trainer_cores_per_gpu, batch_size=args.batch_size,
              compute_s=args.compute, cores_per_node=args.cores_per_node,
              cpu_s_per_sample=args.cpu_per_sample, mean_step_s=args.mean_step,
              p99_step_s=args.p99_step, gpu_util=args.gpu_util, host_cpu=args.host_cpu,
              slowdown=args.slowdown)
    doc = budget(job)
    emit(args, doc, lambda: render(job, doc))
    return 0
