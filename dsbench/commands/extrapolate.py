"""dsbench extrapolate RESULT.json: a bench result's loader costs -> a synchronous job's steps.

Argument parsing and printing only; the model is dsbench.cluster. Options left unset take
dsbench's defaults, and the output marks them as assumed ("default") rather than given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import numpy as np

from dsbench import fmt
from dsbench.cluster import DEFAULT_SCALING, DEFAULT_STEPS, ClusterSpec, extrapolate
from dsbench.errors import DsbenchError
from dsbench.loadcost import DIST_SYNTAX, Distribution, LoaderCost
from dsbench.results import read_result
from dsbench.storage import PROFILES, parse_storage

HELP = ("predict a synchronous multi-GPU job's step time, GPU utilization, timeline and tail "
        "from a bench result (or a stated CPU per sample)")

_D = ClusterSpec()  # dsbench's defaults, shown in --help
_SPARK = " ▁▂▃▄▅▆▇█"
_SPARK_WIDTH = 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("result", nargs="?", help="bench result JSON written by `dsbench bench`")
    src = p.add_argument_group("loader cost without a result file")
    src.add_argument("--cpu-per-sample", type=float, metavar="S",
                     help="CPU seconds per sample of one loader worker (instead of RESULT)")
    src.add_argument("--cpu-cv", type=float, metavar="CV",
                     help="coefficient of variation of that per-sample CPU (default 0)")
    src.add_argument("--files-per-sample", type=float, metavar="F",
                     help="files opened per sample (default: measured, or 0)")
    src.add_argument("--bytes-per-sample", type=float, metavar="B",
                     help="bytes read per sample (default: measured, or 0)")
    c = p.add_argument_group("the job (unset options are assumed and marked 'default')")
    c.add_argument("--nodes", type=int, help=f"nodes (default {_D.nodes})")
    c.add_argument("--gpus-per-node", type=int, help=f"GPUs per node (default {_D.gpus_per_node})")
    c.add_argument("--cores-per-node", type=int,
                   help=f"CPU cores per node (default {_D.cores_per_node})")
    c.add_argument("--trainer-cores-per-gpu", type=float,
                   help="cores each training process itself keeps busy "
                        f"(default {_D.trainer_cores_per_gpu:g})")
    c.add_argument("--workers-per-gpu", type=int,
                   help=f"DataLoader workers per GPU (default {_D.workers_per_gpu})")
    c.add_argument("--prefetch", type=int,
                   help=f"batches in flight per worker (default {_D.prefetch})")
    c.add_argument("--batch-size", type=int,
                   help="samples per GPU per step (default: the measured batch, or 32)")
    c.add_argument("--compute", help=f"GPU seconds per step: {DIST_SYNTAX} "
                                     f"(default {_D.compute.mean:g})")
    c.add_argument("--allreduce", type=float, metavar="S",
                   help=f"all-reduce seconds after the slowest rank (default {_D.allreduce_s:g})")
    c.add_argument("--stall-prob", type=float, metavar="Q",
                   help="chance that a rank stalls in a step (default 0)")
    c.add_argument("--stall-time", type=float, metavar="T", help="seconds of such a stall")
    c.add_argument("--storage", default="local",
                   help=f"{', '.join(PROFILES)} or custom:LATENCY_S,BYTES_PER_S (default local)")
    m = p.add_argument_group("the simulation")
    m.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"steps to simulate (default {DEFAULT_STEPS})")
    m.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    m.add_argument("--scaling", default=",".join(map(str, DEFAULT_SCALING)),
                   help="rank counts for the scaling table (default %(default)s)")
    m.add_argument("--json", action="store_true", help="print one JSON object instead")


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


def _cluster(args: argparse.Namespace, cost: LoaderCost) -> tuple[ClusterSpec, dict[str, str]]:
    given: dict[str, Any] = {
        "nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
        "cores_per_node": args.cores_per_node,
        "trainer_cores_per_gpu": args.trainer_cores_per_gpu,
        "workers_per_gpu": args.workers_per_gpu, "prefetch": args.prefetch,
        "batch_size": args.batch_size,
        "compute": None if args.compute is None else Distribution.parse(args.compute),
        "allreduce_s": args.allreduce, "stall_prob": args.stall_prob, "stall_s": args.stall_time,
    }
    sources = {k: "default" for k, v in given.items() if v is None}
    values = {k: v for k, v in given.items() if v is not None}
    if "batch_size" not in values and cost.origin == "measured":
        values["batch_size"] = cost.measured_batch
        sources["batch_size"] = "measured"  # the batch the result was measured at
    return ClusterSpec(**values, storage=parse_storage(args.storage)), sources


def run(args: argparse.Namespace) -> int:
    cost = _loader(args)
    cluster, sources = _cluster(args, cost)
    doc = extrapolate(cost, cluster, np.random.default_rng(args.seed), steps=args.steps,
                      scaling=_scaling(args.scaling), sources=sources)
    doc["seed"] = args.seed
    if args.json:
        print(json.dumps(doc))
    else:
        print(render(doc))
    return 0


def sparkline(values: list[float]) -> str:
    """One character per value in [0, 1]: ' ' for idle up to '█' for busy."""
    top = len(_SPARK) - 1
    return "".join(_SPARK[min(top, max(0, round(v * top)))] for v in values)


def render(doc: dict[str, Any]) -> str:
    """The human-readable report of an extrapolation document."""
    node, st = doc["node"], doc["step_time_s"]
    cl = doc["cluster"]
    lines = [f"dsbench extrapolate: {doc['model_note']}", "", "Inputs"]
    rows = [[r["name"], r["text"], r["source"]] for r in doc["inputs"]]
    lines += ["  " + ln for ln in fmt.table(["input", "value", "source"], rows).splitlines()]
    notes = [r for r in doc["inputs"] if r["note"] and r["source"] in ("measured", "profile")]
    lines += [f"  {r['name']}: {r['note']}" for r in notes]
    per = (f"{cl['gpus_per_node']} GPUs x {cl['batch_size']} samples / "
           f"({fmt.seconds(cl['compute']['mean_s'])} compute + "
           f"{fmt.seconds(cl['allreduce_s'])} all-reduce)")
    lines += ["", "Per node",
              f"  supply   {fmt.rate(doc['supply_samples_per_s_per_node'])}: "
              f"{node['workers']} workers on {fmt.sig(node['free_cores'])} free cores, "
              f"{fmt.seconds(node['per_sample_s'], 'sample')} per worker (CPU "
              f"{fmt.seconds(node['cpu_s'])} incl. contention {fmt.ratio(node['contention'])} "
              f"and time-sharing {fmt.ratio(node['oversubscription'])}, file latency "
              f"{fmt.seconds(node['latency_s'])}, transfer {fmt.seconds(node['transfer_s'])})",
              f"  demand   {fmt.rate(doc['demand_samples_per_s_per_node'])}: {per}",
              f"  verdict  {doc['verdict_text']}", ""]
    lines += [f"Step time ({doc['ranks']} ranks, {doc['steps']} steps simulated, the first "
              f"{doc['warmup_steps']} not counted)",
              f"  mean {fmt.seconds(st['mean'])}  p50 {fmt.seconds(st['p50'])}  "
              f"p99 {fmt.seconds(st['p99'])}  max {fmt.seconds(st['max'])}",
              f"  GPU utilization {fmt.percent(doc['gpu_util'])} (compute / step time); "
              f"waiting for data {fmt.percent(doc['data_wait_share'])} of a step; "
              f"{fmt.rate(doc['samples_per_s_per_node'])} per node", ""]
    tl = doc["timeline"]
    shown = tl["gpu_util"][:_SPARK_WIDTH]
    lines += [f"GPU utilization timeline (mean of {tl['ranks']} GPUs, one character per "
              f"{fmt.seconds(tl['bucket_s'])}, first {len(shown)} of {len(tl['gpu_util'])}; "
              "' ' idle .. '█' busy)", f"  |{sparkline(shown)}|", f"  {tl['note']}", ""]
    lines += _what_if_lines(doc)
    lines += ["", f"Scaling (per-rank work fixed; 'slow' = slower than one rank's own p99, "
                  f"{fmt.seconds(doc['scaling_reference_p99_s'])})"]
    rows = [[str(r["ranks"]), fmt.seconds(r["mean_s"]), fmt.seconds(r["p50_s"]),
             fmt.seconds(r["p99_s"]), fmt.percent(r["slow_step_fraction"]),
             fmt.percent(r["independent_fraction"]), fmt.percent(r["gpu_util"])]
            for r in doc["scaling"]]
    heads = ["ranks", "mean", "p50", "p99", "slow steps", "if independent", "GPU util"]
    lines += ["  " + ln for ln in fmt.table(heads, rows).splitlines()]
    lines += [f"  {doc['mechanism']}"]
    return "\n".join(lines)


def _what_if_lines(doc: dict[str, Any]) -> list[str]:
    w = doc["what_if"]
    target = fmt.percent(w["target_util"])
    lines = [f"What if (for {target} GPU utilization the nodes must supply "
             f"{fmt.rate(w['supply_needed_samples_per_s_per_node'])} each)"]
    if w["reason"] == "ceiling":
        return [*lines, "  not reachable through the input pipeline: with a loader that is "
                f"never late, compute jitter, stalls and the all-reduce leave "
                f"{fmt.percent(w['ceiling_util'])}"]
    if w["reason"] == "storage":
        return [*lines, "  not reachable at this storage: its bandwidth caps a node at "
                f"{fmt.rate(w['storage_cap_samples_per_s_per_node'])}"]
    if w["workers_per_gpu"]:
        x = w["workers_per_gpu"]
        lines.append(f"  workers per GPU needed: {x['workers_per_gpu']} at "
                     f"{doc['cluster']['cores_per_node']} cores per node "
                     f"(simulated {fmt.percent(x['simulated_util'])})")
    else:
        lines.append(f"  more workers per GPU alone do not reach {target}: the free cores are "
                     "the limit")
    if w["cores_per_node"]:
        x = w["cores_per_node"]
        lines.append(f"  cores per node needed: {x['cores_per_node']} with "
                     f"{x['workers_per_gpu']} workers per GPU "
                     f"(simulated {fmt.percent(x['simulated_util'])})")
    else:
        lines.append(f"  no core count up to 16384 reaches {target} in the simulation")
    lines.append(f"  ceiling with a loader that is never late: {fmt.percent(w['ceiling_util'])}")
    return lines
