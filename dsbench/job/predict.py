"""The cluster model's prediction for a measured job, from what the job itself measured.

The model gets the job's configuration (ranks per node, nodes, loader workers, prefetch, batch,
the stated compute and stalls, the cores of the machine) and the measured costs of the parts:
what each batch took its worker to build (wall clock, at the job's own load), the hand-over of
a batch to its rank, the collective's own cost in each step (its all-reduce) and how much
later than the first each rank left it, and the mean overshoot of the sleeps that emulate
compute. The step times, their tail, utilization and data wait follow from the model's
mechanism: workers and prefetch feeding each rank, the slowest rank setting the step. Ratios
are model / measured.

The costs are drawn from the job's own batches and steps, not fixed at their means: on a
host with more runnable processes than cores, a batch whose worker lost its core takes twice
its CPU, a rank pays for the pipe and for waiting to be scheduled when it takes a batch that
is ready (the hand-over: from when the batch was both asked for and built to when the rank had
it), the last rank to reach the all-reduce may wait for its peers to be scheduled, and a rank
woken late from it starts its next step late. Those tails are the job's tail; their means alone
would hide them.

What the model adds when it extrapolates (to other ranks, cores or workers) is how a batch's
CPU becomes its wall time at another load: contention x workers / free cores, from the cores
the loaders do not get (each rank's own process and the other programs, measured). That is
checked on its own: the batches' total wall time over their CPU, beside the model's factor.
Documents written before the wall times were recorded get the CPU route (batch CPU x the
model's time-sharing, the all-reduce per step, no hand-over, departures together).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dsbench import stats
from dsbench.model import cluster as cluster_model
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.node import ClusterSpec, node_rates
from dsbench.model.simulate import Sampler

MODEL_STEPS = 20_000
# A rank's own process may not take so many cores that none are left for loader workers.
MAX_TRAINER_SHARE = 0.9


def slow_threshold(typical_s: float, stall_s: float) -> float:
    """A slow step, for measurement and model alike: half a stall longer than the typical step
    (the median of the steps in which no rank stalled), or, without stalls, half as long again
    as the median."""
    return typical_s + stall_s / 2 if stall_s > 0 else 1.5 * typical_s


def job_inputs(doc: Mapping[str, Any], allreduce_s: float) -> tuple[LoaderCost, ClusterSpec]:
    """The model's loader cost and cluster for the job that `doc` describes, whose all-reduce
    took `allreduce_s` on average (collective_per_step)."""
    opts, launch, loader = doc["config"]["options"], doc["launch"], doc["loader"]
    cpu = tuple(float(b) for b in loader["batch_cpu_s"])
    batch = int(opts["batch_size"])
    cost = LoaderCost("measured", sum(cpu) / len(cpu) / batch, batch, cpu,
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
                       allreduce_s=allreduce_s,
                       stall_prob=float(opts["stall_prob"]), stall_s=float(opts["stall_s"]))
    return cost, spec


def time_sharing(loader: Mapping[str, Any]) -> float | None:
    """The batches' total wall time over their CPU: how much longer a batch took than its CPU
    (None for documents without wall times)."""
    wall = loader.get("batch_wall_s")
    cpu = sum(loader["batch_cpu_s"])
    return sum(wall) / cpu if wall and cpu > 0 else None


def on_one_clock(per_rank: Sequence[Mapping[str, Any]]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """When every rank ran on one host (one clock), per step, all steps: the all-reduce's own
    cost (from the last rank's arrival to the first rank's departure), when the first rank
    left it, and how much later than that each rank left it ((ranks, steps)); else None."""
    if len({r["host"] for r in per_rank}) > 1 or not all("origin_s" in r for r in per_rank):
        return None
    steps = np.array([r["step_s"] for r in per_rank], dtype=float)
    left = np.array([r["origin_s"] for r in per_rank])[:, None] + np.cumsum(steps, axis=1)
    arrived = left - np.array([r["collective_s"] for r in per_rank], dtype=float)
    first_out = left.min(axis=0)
    return np.maximum(first_out - arrived.max(axis=0), 0.0), first_out, left - first_out


def collective_per_step(doc: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """Per counted step, the all-reduce's own cost and, on one clock, how much later than the
    first each rank left it ((ranks, steps); else None).

    On one clock the all-reduce's cost is from the last rank's arrival to the first rank's
    departure; the others leave later, when the scheduler runs them, and start their next
    step that much later. Across hosts, with no common clock, it is the time the last rank
    to arrive spent in it, and the departures are taken as simultaneous."""
    w = int(doc["warmup_steps"])
    per = doc["per_rank"]
    clock = on_one_clock(per)
    if clock is None:
        coll = np.array([r["collective_s"] for r in per], dtype=float)
        return coll[:, w:].min(axis=0), None
    reduce, _, later = clock
    return reduce[w:], later[:, w:]


def row_resampler(per_rank: np.ndarray) -> Sampler:
    """Draws whole measured steps: simulated rank j gets measured rank j mod R's value of a
    step drawn at random, so the ranks of a step keep their measured order."""
    ranks, n = per_rank.shape

    def draw(g: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        steps, cols = shape
        return per_rank[(np.arange(cols) % ranks)[None, :], g.integers(0, n, (steps, 1))]
    return draw


def batch_walls(doc: Mapping[str, Any]) -> np.ndarray | None:
    """Every counted batch's build time, (ranks, batches) in the order each rank took them
    (None for documents without them)."""
    wall = doc["loader"].get("batch_wall_s")
    if not wall:
        return None
    return np.asarray(wall, dtype=float).reshape(len(doc["per_rank"]), -1)


def replayer(per_rank: np.ndarray) -> Sampler:
    """Replays the measured batches in the order they came, every rank its own (simulated rank
    j, measured rank j mod R), all from one random point per draw: a slow spell (a worker short
    of a core for several batches) keeps its length, which a prefetch of two absorbs less than
    one slow batch, and the ranks keep their measured relation to each other. Batches drawn
    independently gave a mean step 5% short at 4 ranks on 2 cores; ranks replayed from
    separate points, up to 6% long at 2 ranks (docs/job.md)."""
    ranks, n = per_rank.shape

    def draw(g: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        steps, cols = shape
        start = int(g.integers(0, n))
        return per_rank[(np.arange(cols) % ranks)[None, :], (start + np.arange(steps)[:, None]) % n]
    return draw


def handover_per_step(doc: Mapping[str, Any]) -> np.ndarray | None:
    """Every rank's hand-over in every counted step (None for documents without it)."""
    w = int(doc["warmup_steps"])
    if not all("handover_s" in r for r in doc["per_rank"]):
        return None
    return np.array([r["handover_s"][w:] for r in doc["per_rank"]], dtype=float).ravel()


def resampler(values: np.ndarray) -> Sampler:
    """Draws from the measured values, with replacement."""
    def draw(g: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return values[g.integers(0, values.size, shape)]
    return draw


def predict(doc: Mapping[str, Any], *, seed: int = 0, steps: int = MODEL_STEPS
            ) -> dict[str, Any]:
    """The model's figures for the job in `doc`, beside the measured ones, with their ratios."""
    (reduce, departures), hand = collective_per_step(doc), handover_per_step(doc)
    cost, spec = job_inputs(doc, float(reduce.mean()))
    bucket = float(doc["timeline"]["bucket_s"])
    walls = batch_walls(doc)
    replay = None if walls is None else replayer(walls)
    # The cluster model with the job's own costs of the hand-over and the collective.
    simulate = functools.partial(
        cluster_model.simulate, allreduce=resampler(reduce),
        handover=None if hand is None else resampler(hand),
        departure=None if departures is None else row_resampler(departures))
    sim = simulate(cost, spec, np.random.default_rng(seed), steps=steps,
                   timeline_bucket_s=bucket, batches=replay)
    x = sim.step_s[:, 0]
    st = stats.distribution(x)
    q = spec.stall_prob
    typical = st["p50"]
    if q > 0:  # the same job without stalls gives the typical step
        calm = simulate(cost, spec.replace(stall_prob=0.0, stall_s=0.0),
                        np.random.default_rng(seed), steps=steps, batches=replay)
        typical = float(np.median(calm.step_s[:, 0]))
    model: dict[str, Any] = {"step_time_s": st, "gpu_util": float(sim.gpu_util[0]),
             "data_wait_share": float(sim.data_wait_share[0]),
             "slow_step_fraction": float(np.mean(x > slow_threshold(typical, spec.stall_s))),
             "independent_fraction": 1.0 - (1.0 - q) ** spec.ranks if q > 0 else None,
             "timeline": [round(float(u), 4) for u in sim.timeline]}
    measured = doc["step_time_s"]
    ratios = {k: _ratio(st[k], measured[k]) for k in ("mean", "p50", "p99", "max")}
    ratios["gpu_util"] = _ratio(float(sim.gpu_util[0]), doc["gpu_util"])
    from_cpu = None
    if walls is not None:
        # The same job with each batch's CPU stretched by the model's time-sharing, as the
        # extrapolator has it at any other load: how far that route is from the measurement.
        via_cpu = simulate(cost, spec, np.random.default_rng(seed), steps=steps)
        cst = stats.distribution(via_cpu.step_s[:, 0])
        from_cpu = {"step_time_s": cst, "gpu_util": float(via_cpu.gpu_util[0]),
                     "ratios": {"mean": _ratio(cst["mean"], measured["mean"]),
                                "p99": _ratio(cst["p99"], measured["p99"]),
                                "gpu_util": _ratio(float(via_cpu.gpu_util[0]),
                                                   doc["gpu_util"])}}
    loader = cost.to_json()
    loader["batch_cpu_s"] = stats.distribution(cost.batch_cpu_s)
    rates = node_rates(cost, spec)
    return {"note": "a model, not a measurement: the cluster model run on the job's own "
                    "configuration and measured loader cost",
            "seed": seed, "steps": steps, "warmup_steps": sim.warmup,
            "inputs": {"loader": loader, "cluster": spec.to_json(),
                       "trainer_cores_per_rank": spec.trainer_cores_per_gpu,
                       "allreduce_s": spec.allreduce_s,
                       "allreduce_per_step_s": stats.distribution(reduce),
                       "handover_s": None if hand is None else stats.distribution(hand),
                       "departure_s": None if departures is None
                       else stats.distribution(departures.ravel()),
                       "batch_wall_s": None if walls is None
                       else stats.distribution(walls.ravel()),
                       "compute_overshoot_s": spec.compute.mean - float(
                           doc["config"]["options"]["compute"]["mean_s"])},
            "node": rates.to_json(),
            # The model's time-sharing (how it extrapolates a batch's CPU to its wall time at
            # another load) beside what the job's batches took.
            "time_sharing": {"model": rates.contention * rates.oversubscription,
                             "measured": time_sharing(doc["loader"])},
            "from_cpu": from_cpu,
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
