"""The cluster extrapolator: from one node's measured loader costs to a synchronous job's steps.

API: `simulate(cost, cluster, rng, steps=...)` (the Monte-Carlo of dsbench.model.simulate, fed by
the closed-form node rates of dsbench.model.node) and `extrapolate(result_or_cost, cluster, rng)`,
which returns the JSON-ready document that `dsbench extrapolate --json` prints. All are pure: the
only randomness is the Generator passed in.

Assumptions (docs/model.md gives the equations and limits):
1. One rank per GPU, each with its own DataLoader of `workers_per_gpu` processes; the loader
   workers of a node share its free cores: cores_per_node - gpus_per_node x trainer_cores_per_gpu.
2. A worker's batch costs CPU resampled from the measured batches of the run with fewest workers,
   times the contention factor of the worker sweep (CPU per sample at W workers over the base
   run), interpolated at the node's load = min(1, workers / free cores); past the measured loads
   the last factor holds.
3. More workers than free cores time-share them: each batch takes workers / free cores as long.
   This is taken as always true (exact when input-bound, pessimistic on latency otherwise).
4. A batch of another size scales the mean linearly and the spread as its square root.
5. A network storage profile adds, per sample, files x latency per file plus the transfer of its
   bytes over the node's link, which the node's workers share (a closed queueing network solved
   exactly by mean-value analysis: a transfer is slower the busier the link), on top of what was
   measured locally; inside a worker reads and CPU work do not overlap.
6. GPU compute per step is drawn independently per rank and step; a stall (probability q, length
   T) is independent per rank and step; the all-reduce is a fixed time after the slowest rank
   (for a measured job, dsbench.job.predict draws it, the hand-over, the ranks' departures and
   the batches' build times from the job's own steps instead).
7. All workers start together, as at every epoch start without persistent workers.
8. Demand per node = gpus_per_node x batch / (mean compute + all-reduce): what GPUs that never
   wait for data consume.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dsbench.errors import DsbenchError
from dsbench.model import explain
from dsbench.model import simulate as sim
from dsbench.model.costs import LoaderCost
from dsbench.model.node import MAX_RANKS, ClusterSpec, node_rates, supplies
from dsbench.model.store import epoch_size, store_load

DEFAULT_SCALING = (8, 16, 32, 64, 128, 256)
DEFAULT_STEPS = 10_000
TARGET_UTIL = 0.9
MAX_RANK_STEPS = 200_000_000  # steps x ranks of the largest job: bounds the time (about 30 s)
MAX_STEPS = 1_000_000  # the step loop's own time, whatever the ranks
WHAT_IF_STEPS = 3_000
_REFINE_TRIES = 8


def check_steps(cluster: ClusterSpec, steps: int, jobs: Sequence[int]) -> None:
    """Refuse a simulation that is too short to count or too large to run."""
    if any(n < 1 or n > MAX_RANKS for n in jobs):
        raise DsbenchError(f"rank counts must be between 1 and {MAX_RANKS}")
    warmup = cluster.workers_per_gpu * cluster.prefetch
    if steps <= 2 * warmup or steps < 100:
        raise DsbenchError(f"--steps {steps}: need at least 100 and more than twice workers x "
                           f"prefetch ({2 * warmup})")
    if steps > MAX_STEPS:
        raise DsbenchError(f"--steps {steps}: the model runs at most {MAX_STEPS:,} steps "
                           "(about 10 s of its step loop here)")
    if steps * max(jobs) > MAX_RANK_STEPS:
        raise DsbenchError(f"{steps} steps x {max(jobs)} ranks is more than the model runs "
                           f"({MAX_RANK_STEPS:.0e}); lower --steps")


def simulate(cost: LoaderCost, cluster: ClusterSpec, rng: np.random.Generator, *,
             steps: int = DEFAULT_STEPS, ranks: Sequence[int] | None = None,
             loader: bool = True, timeline_bucket_s: float = 1.0,
             allreduce: sim.Sampler | None = None, handover: sim.Sampler | None = None,
             departure: sim.Sampler | None = None, batches: sim.Sampler | None = None
             ) -> sim.SimResult:
    """Monte-Carlo of the job (and of the same job at other rank counts, `ranks`).

    `loader=False` replaces the loader with one that is never late: the utilization ceiling that
    compute jitter, stalls and the all-reduce leave. `allreduce` draws each step's all-reduce in
    place of the cluster's fixed `allreduce_s` (a measured job's own, per step); `handover` the
    time a rank takes to have a batch that is ready and `departure` how much later than the
    first a rank leaves each all-reduce (a measured job's own; else none);
    `batches` the wall time a worker takes per batch, in place of CPU x time-sharing (a
    measured job's own, taken at the load the simulated job puts on the node).
    """
    jobs = tuple(ranks) if ranks else (cluster.ranks,)
    check_steps(cluster, steps, jobs)
    rates = node_rates(cost, cluster)
    batch, factor = cluster.batch_size, rates.contention * rates.oversubscription
    io_s = (rates.latency_s + rates.transfer_s) * batch

    def batch_wall(g: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        if batches is not None:
            return batches(g, shape)
        return cost.sample_batch_cpu(g, shape, batch) * factor + io_s

    return sim.run(batch_wall if loader else None, cluster.compute.sample,
                   workers=cluster.workers_per_gpu, prefetch=cluster.prefetch, jobs=jobs,
                   steps=steps, rng=rng,
                   allreduce_s=cluster.allreduce_s if allreduce is None else allreduce,
                   handover=handover, departure=departure, stall_prob=cluster.stall_prob,
                   stall_s=cluster.stall_s,
                   timeline_job=cluster.ranks, timeline_bucket_s=timeline_bucket_s)


def _in_units(name: str, per_sample: float | None, cluster: ClusterSpec, supply: float,
              demand: float, delivered: float) -> dict[str, Any] | None:
    """The rates in the units a job of this kind states them: token ids for token samples
    (each a sequence of `seq_len` ids, padding included: what the GPU computes on), seconds of
    audio for audio samples (each a clip of `clip_seconds`); None for images."""
    if per_sample is None:
        return None
    return {name: per_sample, "per_step_per_gpu": per_sample * cluster.batch_size,
            "supply_per_s_per_node": supply * per_sample,
            "demand_per_s_per_node": demand * per_sample, "per_s_per_node": delivered * per_sample}


def extrapolate(source: Mapping[str, Any] | LoaderCost, cluster: ClusterSpec,
                rng: np.random.Generator, *, steps: int = DEFAULT_STEPS,
                scaling: Sequence[int] = DEFAULT_SCALING, path: str | None = None,
                sources: Mapping[str, str] | None = None, prefixes: int = 1,
                epoch_samples: int | None = None) -> dict[str, Any]:
    """Everything `dsbench extrapolate` reports, as plain data.

    `source` is a bench result document (dsbench.results.read_result) or a LoaderCost.
    `prefixes` and `epoch_samples` are for an object store's load and bill (model/store.py).
    `sources` maps ClusterSpec fields to where their value came from when it was not stated by
    the caller: "default" (dsbench's assumption) or "measured" (taken from the result), so the
    output can say which inputs were assumed; unnamed fields count as "stated".
    """
    cost = source if isinstance(source, LoaderCost) else LoaderCost.from_result(source, path)
    if not scaling or any(n < 1 for n in scaling):
        raise DsbenchError("--scaling needs rank counts >= 1")
    main_rng, ceiling_rng, what_if_rng = rng.spawn(3)
    rates = node_rates(cost, cluster)
    jobs = sorted({1, cluster.ranks, *scaling})
    result = simulate(cost, cluster, main_rng, steps=steps, ranks=jobs)
    main = result.column(cluster.ranks)
    ceiling = simulate(cost, cluster, ceiling_rng, steps=min(steps, WHAT_IF_STEPS),
                       loader=False)
    ceiling_util = float(ceiling.gpu_util[0])
    what_if_seed = int(what_if_rng.integers(2**62))

    verdict, verdict_text = explain.verdict(rates)
    scaling_rows = _scaling_rows(result, sorted(set(scaling)))
    step = result.stats(cluster.ranks)
    util = float(result.gpu_util[main])
    return {
        "kind": "dsbench-extrapolation", "schema_version": 1,
        "model_note": "a model, not a measurement: every figure follows from the inputs listed",
        "inputs": explain.inputs(cost, cluster, dict(sources or {})),
        "loader": cost.to_json(), "cluster": cluster.to_json(),
        "storage": cluster.storage.to_json(), "node": rates.to_json(),
        "supply_samples_per_s_per_node": rates.supply,
        "demand_samples_per_s_per_node": rates.demand,
        "supply_over_demand": rates.ratio, "verdict": verdict, "verdict_text": verdict_text,
        "ranks": cluster.ranks, "steps": steps, "warmup_steps": result.warmup,
        "step_time_s": step, "gpu_util": util,
        "store": store_load(cost, cluster, step["mean"], util, prefixes=prefixes,
                            epoch_samples=epoch_samples),
        "data_wait_share": float(result.data_wait_share[main]),
        "samples_per_s_per_node": cluster.gpus_per_node * cluster.batch_size
        / result.stats(cluster.ranks)["mean"],
        **{kind: _in_units(name, per_sample, cluster, rates.supply, rates.demand,
                           cluster.gpus_per_node * cluster.batch_size / step["mean"])
           for kind, name, per_sample in (("tokens", "seq_len", cost.seq_len),
                                          ("audio", "clip_seconds", cost.clip_s))},
        "timeline": {"ranks": result.timeline_ranks, "bucket_s": result.timeline_bucket_s,
                     "gpu_util": [round(float(u), 4) for u in result.timeline],
                     "note": explain.timeline_note(rates, cluster, result)},
        "what_if": _what_if(cost, cluster, steps, what_if_seed, ceiling_util),
        "memory": loader_memory(cost, cluster),
        "epoch_start": epoch_starts(cost, cluster, step["mean"], util, epoch_samples),
        "scaling": scaling_rows,
        "scaling_reference_p99_s": result.stats(1)["p99"],
        "mechanism": explain.scaling_mechanism(scaling_rows, result.stats(1)["p99"],
                                               _alone(result)),
    }


def epoch_starts(cost: LoaderCost, cluster: ClusterSpec, step_mean_s: float, gpu_util: float,
                 epoch_samples: int | None) -> dict[str, Any] | None:
    """What the measured wait at each epoch's start (bench --epochs) costs an epoch of the job:
    its steps at the simulated mean step time, plus that wait once, as every rank's fresh
    workers start together. The measured median stands for every rank's wait: a synchronous
    job waits for its slowest rank, so this is the least it loses. None without an --epochs
    result or an epoch's size (the export's samples, or --epoch-samples)."""
    samples, samples_from = epoch_size(cost, epoch_samples)
    if cost.epoch_start_s is None or samples is None:
        return None
    steps = max(1, math.ceil(samples / (cluster.ranks * cluster.batch_size)))
    within = steps * step_mean_s
    epoch = within + cost.epoch_start_s
    return {"wait_s": cost.epoch_start_s, "samples": samples, "samples_from": samples_from,
            "steps": steps, "epoch_s": epoch,
            "lost_share": cost.epoch_start_s / epoch, "gpu_util": gpu_util * within / epoch}


MEMORY_TIGHT = 0.5  # loaders taking more than this share of a node leave little for training


def loader_memory(cost: LoaderCost, cluster: ClusterSpec) -> dict[str, Any] | None:
    """What a node's loader workers take of its memory: the measured peak memory per worker
    (anonymous + shared, or PSS for results without the split; costs._memory) times
    workers per GPU times GPUs per node (None when the result recorded no memory)."""
    per = cost.memory_per_worker_bytes
    if per is None:
        return None
    workers = cluster.workers_per_node
    total = per * workers
    share = total / cluster.node_memory_bytes
    return {"per_worker_bytes": per, "measured_workers": cost.memory_workers,
            "kind": cost.memory_kind,
            "workers_per_node": workers, "loaders_bytes": total,
            # A node filled exactly fits; so does one over it by less than the share printed
            # with 6 digits can show (100.000%): a thousandth of a percent of a node.
            "node_bytes": cluster.node_memory_bytes, "share": share,
            "fits": share <= 1.0 + 1e-5, "tight": share > MEMORY_TIGHT * (1 + 1e-5)}


def _alone(result: sim.SimResult) -> float:
    """Share of a single rank's steps above its own p99 (1%, or less where steps tie)."""
    return float(np.mean(result.step_s[:, result.column(1)] > result.stats(1)["p99"]))


def _scaling_rows(result: sim.SimResult, scaling: Sequence[int]) -> list[dict[str, float]]:
    reference, alone = result.stats(1)["p99"], _alone(result)
    rows = []
    for n in scaling:
        x = result.step_s[:, result.column(n)]
        st = result.stats(n)
        rows.append({"ranks": n, "mean_s": st["mean"], "p50_s": st["p50"], "p99_s": st["p99"],
                     "max_s": st["max"], "slow_step_fraction": float(np.mean(x > reference)),
                     "independent_fraction": 1.0 - (1.0 - alone) ** n,
                     "gpu_util": float(result.gpu_util[result.column(n)])})
    return rows


def _sim_util(cost: LoaderCost, cluster: ClusterSpec, steps: int, seed: int) -> float:
    # The same seed for every candidate: candidates differ by their settings, not by noise.
    res = simulate(cost, cluster, np.random.default_rng(seed), steps=steps)
    return float(res.gpu_util[0])


def _what_if(cost: LoaderCost, cluster: ClusterSpec, steps: int, seed: int,
             ceiling_util: float) -> dict[str, Any]:
    """Workers per GPU, and cores per node, that bring utilization to TARGET_UTIL."""
    need = cluster.gpus_per_node * cluster.batch_size * TARGET_UTIL / cluster.compute.mean
    out: dict[str, Any] = {"target_util": TARGET_UTIL, "ceiling_util": ceiling_util,
                           "supply_needed_samples_per_s_per_node": need,
                           "workers_per_gpu": None, "cores_per_node": None, "reason": None}
    cap = (cluster.storage.node_bytes_per_s / cost.bytes_per_sample
           if cost.bytes_per_sample > 0 else math.inf)
    out["storage_cap_samples_per_s_per_node"] = None if math.isinf(cap) else cap
    if ceiling_util < TARGET_UTIL or cap < need:
        out["reason"] = "ceiling" if ceiling_util < TARGET_UTIL else "storage"
        return out
    sim_steps = min(steps, WHAT_IF_STEPS)
    max_workers = 256

    def try_workers(w: int) -> tuple[ClusterSpec, float] | None:
        for _ in range(_REFINE_TRIES):
            if w > max_workers:
                return None
            spec = cluster.replace(workers_per_gpu=w)
            if 2 * w * spec.prefetch >= sim_steps:
                return None
            u = _sim_util(cost, spec, sim_steps, seed)
            if u >= TARGET_UTIL:
                return spec, u
            w += 1
        return None

    w = next((w for w in range(1, max_workers + 1)
              if supplies(cost, cluster.replace(workers_per_gpu=w), need)), None)
    found = try_workers(w) if w is not None else None
    if found:
        out["workers_per_gpu"] = {"workers_per_gpu": found[0].workers_per_gpu,
                                  "simulated_util": found[1]}

    def with_cores(c: int) -> ClusterSpec:
        free = c - cluster.gpus_per_node * cluster.trainer_cores_per_gpu
        w = max(cluster.workers_per_gpu, math.ceil(free / cluster.gpus_per_node))
        return cluster.replace(cores_per_node=c, workers_per_gpu=min(w, max_workers))

    lowest = math.floor(cluster.gpus_per_node * cluster.trainer_cores_per_gpu) + 1
    c = next((c for c in range(lowest, 16_385) if supplies(cost, with_cores(c), need)), None)
    for _ in range(_REFINE_TRIES):
        if c is None:
            break
        spec = with_cores(c)
        if 2 * spec.workers_per_gpu * spec.prefetch >= sim_steps:
            break
        u = _sim_util(cost, spec, sim_steps, seed)
        if u >= TARGET_UTIL:
            out["cores_per_node"] = {"cores_per_node": c, "workers_per_gpu": spec.workers_per_gpu,
                                     "simulated_util": u}
            break
        c = math.ceil(c * 1.05)
    if out["workers_per_gpu"] is None:
        out["reason"] = "cores" if out["cores_per_node"] else "search"
    return out
