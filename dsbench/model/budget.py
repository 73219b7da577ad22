"""Back-of-envelope throughput arithmetic: what a job needs, and what an observed job implies.

No result file and no simulation: closed-form arithmetic on the figures given, the kind an on-call
does on a napkin, written down so that every step can be checked. `capacity` compares the samples
per second a node's GPUs consume with what its free cores can prepare; `implications` turns the
figures of an observed job (mean and p99 step, GPU utilization, host CPU, slowdown) into what they
imply. Both return plain dicts; `dsbench budget` prints them. The output is a model, not a
measurement: it holds exactly as far as its inputs and stated assumptions do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from dsbench.errors import DsbenchError

TARGET_UTIL = 0.9
TAIL_QUANTILE = 0.99


def _check(name: str, value: float | None, *, low: float = 0.0, strict: bool = True,
           high: float | None = None) -> None:
    if value is None:
        return
    bad = not math.isfinite(value) or value < low or (strict and value == low)
    if high is not None and value > high:
        bad = True
    if bad:
        rng = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high else "")
        raise DsbenchError(f"--{name} must be {rng}, not {value:g}")


@dataclass(frozen=True)
class Job:
    """The figures fed in; None where not given."""

    gpus: int
    gpus_per_node: int = 8
    trainer_cores_per_gpu: float = 1.0
    batch_size: int | None = None
    compute_s: float | None = None
    cores_per_node: float | None = None
    cpu_s_per_sample: float | None = None
    mean_step_s: float | None = None
    p99_step_s: float | None = None
    gpu_util: float | None = None
    host_cpu: float | None = None
    slowdown: float | None = None

    def __post_init__(self) -> None:
        for name in ("gpus", "gpus_per_node", "batch_size"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise DsbenchError(f"--{name.replace('_', '-')} must be an integer >= 1, not {v}")
        _check("trainer-cores-per-gpu", self.trainer_cores_per_gpu, strict=False)
        _check("compute", self.compute_s)
        _check("cores-per-node", self.cores_per_node)
        _check("cpu-per-sample", self.cpu_s_per_sample)
        _check("mean-step", self.mean_step_s)
        _check("p99-step", self.p99_step_s)
        _check("gpu-util", self.gpu_util, high=1.0)
        _check("host-cpu", self.host_cpu, strict=False, high=1.0)
        _check("slowdown", self.slowdown)
        if self.p99_step_s is not None:
            if self.mean_step_s is None:
                raise DsbenchError("--p99-step needs --mean-step")
            if self.p99_step_s < self.mean_step_s:
                raise DsbenchError(f"--p99-step {self.p99_step_s:g} s is below --mean-step "
                                   f"{self.mean_step_s:g} s")
        if self.cores_per_node is not None and self.free_cores <= 0:
            raise DsbenchError(f"no cores left for the loader: {self.cores_per_node:g} cores - "
                               f"{self.gpus_per_node} GPUs x {self.trainer_cores_per_gpu:g}")

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    @property
    def free_cores(self) -> float:
        assert self.cores_per_node is not None
        return self.cores_per_node - self.gpus_per_node * self.trainer_cores_per_gpu


CAPACITY_NEEDS = ("batch_size", "compute_s", "cores_per_node", "cpu_s_per_sample")
# The option that states each (the field names are the model's, not the command line's).
CAPACITY_OPTIONS = {"batch_size": "--gpu-batch", "compute_s": "--compute",
                    "cores_per_node": "--cores-per-node", "cpu_s_per_sample": "--cpu-per-sample"}
OBSERVED_NEEDS = ("mean_step_s", "gpu_util")


def capacity(job: Job) -> dict[str, float]:
    """Samples/s per node the GPUs consume and the free cores can prepare; cores needed."""
    missing = [n for n in CAPACITY_NEEDS if getattr(job, n) is None]
    if missing:
        raise DsbenchError("capacity arithmetic needs " + ", ".join(
            CAPACITY_OPTIONS[n] for n in missing))
    assert job.batch_size and job.compute_s and job.cpu_s_per_sample
    needed = job.gpus_per_node * job.batch_size / job.compute_s
    available = job.free_cores / job.cpu_s_per_sample
    return {
        "nodes": job.nodes, "free_cores_per_node": job.free_cores,
        "needed_samples_per_s_per_node": needed,
        "available_samples_per_s_per_node": available,
        "headroom": available / needed,
        "cores_needed_per_node": needed * job.cpu_s_per_sample
        + job.gpus_per_node * job.trainer_cores_per_gpu,
        "gpu_util_bound": min(1.0, available / needed),
        "needed_samples_per_s_job": needed * job.gpus / job.gpus_per_node,
    }


def implications(job: Job) -> dict[str, float | bool | None]:
    """What the observed mean step, utilization, host CPU, p99 and slowdown imply."""
    missing = [n for n in OBSERVED_NEEDS if getattr(job, n) is None]
    if missing:
        raise DsbenchError("reading an observed job needs --mean-step and --gpu-util")
    mean, util = job.mean_step_s, job.gpu_util
    assert mean is not None and util is not None
    out: dict[str, float | bool | None] = {
        "gpu_busy_s_per_step": util * mean,
        "gpu_idle_s_per_step": (1 - util) * mean,
        "gpu_idle_share": 1 - util,
        "step_for_target_s": util * mean / TARGET_UTIL,
        "speedup_for_target": max(1.0, mean / (util * mean / TARGET_UTIL)),
    }
    if job.slowdown is not None:
        before = mean / job.slowdown
        out |= {"previous_step_s": before, "added_s_per_step": mean - before,
                "util_bound_if_compute_unchanged": min(1.0, before / mean),
                "util_consistent_with_slowdown": util * mean <= before * (1 + 1e-9)}
    if job.batch_size is not None:
        out["samples_per_s_per_node"] = job.gpus_per_node * job.batch_size / mean
    if job.host_cpu is not None and job.cores_per_node is not None:
        busy = job.host_cpu * job.cores_per_node
        loader = max(0.0, busy - job.gpus_per_node * job.trainer_cores_per_gpu)
        out |= {"busy_cores_per_node": busy, "loader_busy_cores_per_node": loader,
                "loader_cpu_s_per_gpu_batch": loader * mean / job.gpus_per_node,
                "cores_for_target_per_node": loader * out["speedup_for_target"]  # type: ignore
                + job.gpus_per_node * job.trainer_cores_per_gpu}
        if job.batch_size is not None:
            out["cpu_s_per_sample_consistent"] = loader * mean / (job.gpus_per_node
                                                                   * job.batch_size)
    if job.host_cpu is not None:
        out["cpu_saturated"] = job.host_cpu >= 0.9
        if job.slowdown is not None:
            # Same cores and batch: CPU per sample now / then = (host now / host then) x slowdown,
            # and host then <= 100%, so it grew at least this much.
            out["cpu_per_sample_growth_at_least"] = job.slowdown * job.host_cpu
    if job.p99_step_s is not None:
        n = job.gpus
        q = 1 - TAIL_QUANTILE ** (1 / n)  # per-rank stall rate that makes 1% of steps slow
        out |= {"tail_ratio": job.p99_step_s / mean, "tail_excess_s": job.p99_step_s - mean,
                "ranks": n, "per_rank_stall_rate_for_p99": q,
                "slow_share_at_half_ranks": 1 - (1 - q) ** (n // 2) if n >= 2 else None}
    return out


def budget(job: Job) -> dict[str, object]:
    """Both parts where their inputs were given; at least one must be."""
    # --gpu-batch and --cores-per-node serve both parts; --compute and --cpu-per-sample ask for
    # the capacity part, the observed figures for the other.
    wants_cap = job.compute_s is not None or job.cpu_s_per_sample is not None
    has_obs = any(getattr(job, n) is not None for n in
                  ("mean_step_s", "p99_step_s", "gpu_util", "host_cpu", "slowdown"))
    if not wants_cap and not has_obs:
        raise DsbenchError("nothing to compute: give --gpu-batch, --compute, --cores-per-node "
                           "and --cpu-per-sample, or an observed job's --mean-step and --gpu-util")
    return {
        "kind": "dsbench-budget", "schema_version": 1,
        "model_note": "a model, not a measurement: arithmetic on the figures fed in",
        "inputs": {k: v for k, v in asdict(job).items() if v is not None},
        "capacity": capacity(job) if wants_cap else None,
        "observed": implications(job) if has_obs else None,
    }
