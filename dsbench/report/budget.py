"""`dsbench budget`'s report for people: every figure fed in, then what it implies."""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.model.budget import TARGET_UTIL, Job


def _fed(job: Job) -> list[list[str]]:
    s = fmt.seconds
    rows = [["GPUs", f"{job.gpus} ({job.nodes} nodes of {job.gpus_per_node})"],
            ["trainer cores per GPU", fmt.sig(job.trainer_cores_per_gpu)]]
    optional: list[tuple[str, Any, Any]] = [
        ("batch per GPU", job.batch_size, lambda v: f"{v} samples"),
        ("cores per node", job.cores_per_node, fmt.sig),
        ("compute per step", job.compute_s, s),
        ("CPU per sample", job.cpu_s_per_sample, lambda v: s(v, "sample")),
        ("mean step", job.mean_step_s, s), ("p99 step", job.p99_step_s, s),
        ("GPU utilization", job.gpu_util, fmt.percent), ("host CPU", job.host_cpu, fmt.percent),
        ("slowdown", job.slowdown, lambda v: f"{fmt.ratio(v)} slower than before")]
    return rows + [[name, show(v)] for name, v, show in optional if v is not None]


def render(job: Job, doc: dict[str, Any]) -> str:
    fed = doc["inputs"]  # the figures given: in the capacity part and the observed part, all set
    s, rate, pct = fmt.seconds, fmt.rate, fmt.percent
    lines = [f"dsbench budget: {doc['model_note']}", "", "Fed"]
    lines += ["  " + ln for ln in fmt.table(["figure", "value"], _fed(job)).splitlines()]
    cap = doc["capacity"]
    if cap:
        lines += ["", "Capacity per node",
                  f"  GPUs consume       {fed['gpus_per_node']} x {fed['batch_size']} samples / "
                  f"{s(fed['compute_s'])} = {rate(cap['needed_samples_per_s_per_node'])}",
                  f"  free cores supply  {fmt.sig(cap['free_cores_per_node'])} cores / "
                  f"{s(fed['cpu_s_per_sample'], 'sample')} = "
                  f"{rate(cap['available_samples_per_s_per_node'])}",
                  f"  headroom           {fmt.ratio(cap['headroom'])}"
                  + ("" if cap["headroom"] >= 1 else
                     f" (short: GPU utilization at most {pct(cap['gpu_util_bound'])})"),
                  f"  cores needed       {fmt.sig(cap['cores_needed_per_node'])} per node "
                  f"(samples/s needed x CPU per sample + trainer cores)",
                  f"  whole job needs    {rate(cap['needed_samples_per_s_job'])}"]
    obs = doc["observed"]
    if obs:
        lines += ["", "What the observed job implies"] + ["  " + ln for ln in _observed(fed, obs)]
    lines += ["", "This is arithmetic on the figures above: a model, not a measurement."]
    return "\n".join(lines)


def _observed(fed: dict[str, Any], o: dict[str, Any]) -> list[str]:
    s, pct, x = fmt.seconds, fmt.percent, fmt.ratio
    mean = fed['mean_step_s']
    out = [f"GPU busy {s(o['gpu_busy_s_per_step'])} of each {s(mean)} step, idle "
           f"{s(o['gpu_idle_s_per_step'])} ({pct(o['gpu_idle_share'])}): at most that much is "
           "data wait (it also holds any exposed all-reduce)"]
    if "previous_step_s" in o:
        out.append(f"before: {s(mean)} / {fmt.sig(fed['slowdown'])} = {s(o['previous_step_s'])} "
                   f"per step; {s(o['added_s_per_step'])} per step was added since")
        if not o["util_consistent_with_slowdown"]:
            out.append(f"inconsistent: {s(o['gpu_busy_s_per_step'])} busy per step exceeds the "
                       f"whole previous step ({s(o['previous_step_s'])}). If the model and GPUs "
                       f"did not change, compute <= {s(o['previous_step_s'])} and utilization <= "
                       f"{pct(o['util_bound_if_compute_unchanged'])}: the reported utilization "
                       "counts time that is not useful compute (a GPU counts as busy while any "
                       "kernel runs, including all-reduce kernels waiting for the slowest rank)")
    if "samples_per_s_per_node" in o:
        out.append(f"throughput: {fmt.rate(o['samples_per_s_per_node'])} per node")
    if "busy_cores_per_node" in o:
        line = (f"CPU: {fmt.sig(o['busy_cores_per_node'])} busy cores per node, "
                f"{fmt.sig(o['loader_busy_cores_per_node'])} after the trainers' = "
                f"{s(o['loader_cpu_s_per_gpu_batch'])} CPU per GPU batch")
        if "cpu_s_per_sample_consistent" in o:
            line += f" = {s(o['cpu_s_per_sample_consistent'], 'sample')}"
        out.append(line + " (if all of it is loading work)")
    if o.get("cpu_saturated"):
        out.append(f"host CPU {pct(fed['host_cpu'])}: saturated, the loaders cannot go faster on "
                   "these cores; the CPU sets the step time (more GPUs would add nodes with the "
                   "same shortfall, and more ranks to wait for)")
    if "cpu_per_sample_growth_at_least" in o:
        out.append(f"CPU per sample grew at least {x(o['cpu_per_sample_growth_at_least'])} "
                   f"({x(fed['slowdown'])} slower x {pct(fed['host_cpu'])} host CPU now, with the "
                   "previous host CPU at most 100%, same cores and batch)")
    target = pct(TARGET_UTIL)
    line = (f"for {target} GPU utilization at this compute the step must take "
            f"{s(o['step_for_target_s'])}: {x(o['speedup_for_target'])} the samples/s, "
            f"i.e. {x(o['speedup_for_target'])} less CPU per sample or that many more cores")
    if "cores_for_target_per_node" in o:
        line += f" (about {fmt.sig(o['cores_for_target_per_node'])} per node)"
    out.append(line)
    if "tail_ratio" in o:
        q = o["per_rank_stall_rate_for_p99"]
        half = o["slow_share_at_half_ranks"]
        out.append(f"tail: p99 is {x(o['tail_ratio'])} the mean ({s(o['tail_excess_s'])} above "
                   "it on at least 1% of steps)")
        line = (f"fan-out: every step waits for the slowest of {o['ranks']} ranks, so a rank "
                f"stalling in just 1 of {fmt.sig(1 / q)} steps ({pct(q)}) makes 1% of steps "
                "slow and sets the p99")
        if half is not None:
            line += (f"; at {o['ranks'] // 2} ranks the same stalls slow only {pct(half)} of "
                     "steps, under the p99: rare per-rank hiccups reach the p99 as the job grows")
        out.append(line)
    return out
