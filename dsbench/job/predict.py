"""The cluster model's prediction for a measured job, from what the job itself measured.

The model gets the job's configuration (ranks per node, nodes, loader workers, prefetch, batch,
the stated compute and stalls, the cores of the machine) and four measured inputs: the loader
workers' CPU per batch (at the job's own load, so no further contention factor), the share of a
core each rank's own process kept busy and the cores other programs kept busy meanwhile (the
model's trainer cores, which the loader workers do not get), the collective's own cost in the
steps (its all-reduce: the time the last rank to arrive spent in it) and the mean overshoot of
the sleeps that emulate compute. These are the costs of the parts; the step times, their tail,
utilization and data wait follow from the model's mechanism. Ratios are model / measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dsbench import stats
from dsbench.model import cluster as cluster_model
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.node import ClusterSpec, node_rates

MODEL_STEPS = 20_000
# A rank's own process may not take so many cores that none are left for loader workers.
MAX_TRAINER_SHARE = 0.9


def slow_threshold(typical_s: float, stall_s: float) -> float:
    """A slow step, for measurement and model alike: half a stall longer than the typical step
    (the median of the steps in which no rank stalled), or, without stalls, half as long again
    as the median."""
    return typical_s + stall_s / 2 if stall_s > 0 else 1.5 * typical_s


def job_inputs(doc: Mapping[str, Any]) -> tuple[LoaderCost, ClusterSpec]:
    """The model's loader cost and cluster for the job that `doc` describes."""
    opts, launch, loader = doc["config"]["options"], doc["launch"], doc["loader"]
    batches = tuple(float(b) for b in loader["batch_cpu_s"])
    batch = int(opts["batch_size"])
    cost = LoaderCost("measured", sum(batches) / len(batches) / batch, batch, batches,
                      base_workers=int(opts["workers"]), path=doc["config"]["path"])
    per_node = int(launch["ranks_per_node"])
    cores = int(launch["cores_per_node"])
    # Cores the loader workers do not get: each rank's own process, and what other programs
    # kept busy on the node meanwhile (measured), shared out over its ranks.
    taken = float(loader["rank_cpu_share"]) + float(doc["other_cores"]) / per_node
    trainer = min(taken, MAX_TRAINER_SHARE * cores / per_node)
    c = opts["compute"]
    # The job's compute is a sleep, which wakes late on a busy host: the model gets the stated
    # compute plus the sleeps' measured mean overshoot.
    overshoot = max(0.0, float(doc["compute_overshoot_s"]))
    spec = ClusterSpec(nodes=int(launch["nodes"]), gpus_per_node=per_node, cores_per_node=cores,
                       trainer_cores_per_gpu=trainer, workers_per_gpu=int(opts["workers"]),
                       prefetch=int(opts["prefetch"]), batch_size=batch,
                       compute=Distribution(c["kind"], c["mean_s"] + overshoot, c["sd_s"]),
                       allreduce_s=float(doc["collective"]["last_arrival_s"]["mean"]),
                       stall_prob=float(opts["stall_prob"]), stall_s=float(opts["stall_s"]))
    return cost, spec


def predict(doc: Mapping[str, Any], *, seed: int = 0, steps: int = MODEL_STEPS
            ) -> dict[str, Any]:
    """The model's figures for the job in `doc`, beside the measured ones, with their ratios."""
    cost, spec = job_inputs(doc)
    bucket = float(doc["timeline"]["bucket_s"])
    sim = cluster_model.simulate(cost, spec, np.random.default_rng(seed), steps=steps,
                                 timeline_bucket_s=bucket)
    x = sim.step_s[:, 0]
    st = stats.distribution(x)
    q = spec.stall_prob
    typical = st["p50"]
    if q > 0:  # the same job without stalls gives the typical step
        calm = cluster_model.simulate(cost, spec.replace(stall_prob=0.0, stall_s=0.0),
                                      np.random.default_rng(seed), steps=steps)
        typical = float(np.median(calm.step_s[:, 0]))
    model: dict[str, Any] = {"step_time_s": st, "gpu_util": float(sim.gpu_util[0]),
             "data_wait_share": float(sim.data_wait_share[0]),
             "slow_step_fraction": float(np.mean(x > slow_threshold(typical, spec.stall_s))),
             "independent_fraction": 1.0 - (1.0 - q) ** spec.ranks if q > 0 else None,
             "timeline": [round(float(u), 4) for u in sim.timeline]}
    measured = doc["step_time_s"]
    ratios = {k: _ratio(st[k], measured[k]) for k in ("mean", "p50", "p99", "max")}
    ratios["gpu_util"] = _ratio(float(sim.gpu_util[0]), doc["gpu_util"])
    loader = cost.to_json()
    loader["batch_cpu_s"] = stats.distribution(cost.batch_cpu_s)
    return {"note": "a model, not a measurement: the cluster model run on the job's own "
                    "configuration and measured loader cost",
            "seed": seed, "steps": steps, "warmup_steps": sim.warmup,
            "inputs": {"loader": loader, "cluster": spec.to_json(),
                       "trainer_cores_per_rank": spec.trainer_cores_per_gpu,
                       "allreduce_s": spec.allreduce_s,
                       "compute_overshoot_s": spec.compute.mean - float(
                           doc["config"]["options"]["compute"]["mean_s"])},
            "node": node_rates(cost, spec).to_json(),
            "prediction": model, "ratios": ratios}


def _ratio(model: float, measured: float) -> float | None:
    return model / measured if measured > 0 else None


def tail_rows(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A rank sweep: per rank count, the measured tail beside the model's."""
    rows = []
    for d in docs:
        m = d["model"]["prediction"]
        rows.append({"ranks": d["ranks"], "steps": d["steps"],
                     "mean_s": d["step_time_s"]["mean"], "p99_s": d["step_time_s"]["p99"],
                     "slow_step_fraction": d["slow_steps"]["fraction"],
                     "stalled_step_fraction": d["slow_steps"]["stalled_fraction"],
                     "gpu_util": d["gpu_util"],
                     "model_mean_s": m["step_time_s"]["mean"],
                     "model_p99_s": m["step_time_s"]["p99"],
                     "model_slow_step_fraction": m["slow_step_fraction"],
                     "independent_fraction": m["independent_fraction"],
                     "model_gpu_util": m["gpu_util"]})
    return rows
