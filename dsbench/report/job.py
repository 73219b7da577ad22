"""`dsbench job`'s report for people: the measured job, the model beside it, who was late,
the utilization timeline, the loaders' figures and, for a rank sweep, the tail per rank count."""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.report import claims
from dsbench.report.extrapolation import sparkline

_WIDTH = 100


def _pct_or_dash(x: float | None) -> str:
    return "-" if x is None else fmt.percent(x)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _mean_p99(d: dict[str, float]) -> str:
    return f"mean {fmt.seconds(d['mean'])}, p99 {fmt.seconds(d['p99'])}"


def _check(key: str, model: float, measured: float) -> str:
    tol = claims.TOLERANCE.get(key)
    if tol is None or not measured:
        return ""
    return claims.Check(claims.LABEL[key], model, measured, tol).words().split(" (")[0]


def model_table(doc: dict[str, Any]) -> list[str]:
    """Measured, modelled, model / measured, and whether the model met its tolerance."""
    m, pred = doc["model"], doc["model"]["prediction"]
    st, mst = doc["step_time_s"], pred["step_time_s"]
    rows = [[f"{k} step", fmt.seconds(st[k]), fmt.seconds(mst[k]), _ratio(m["ratios"][k]),
             _check(k, mst[k], st[k])] for k in ("mean", "p50", "p99", "max")]
    rows.append(["utilization", fmt.percent(doc["gpu_util"]), fmt.percent(pred["gpu_util"]),
                 _ratio(m["ratios"]["gpu_util"]),
                 _check("gpu_util", pred["gpu_util"], doc["gpu_util"])])
    rows.append(["data-wait share", fmt.percent(doc["data_wait_share"]),
                 fmt.percent(pred["data_wait_share"]), "", ""])
    rows.append(["slow steps", fmt.percent(doc["slow_steps"]["fraction"]),
                 fmt.percent(pred["slow_step_fraction"]), "", ""])
    if pred["independent_fraction"] is not None:
        rows.append(["1 - (1 - q)^N", "", fmt.percent(pred["independent_fraction"]), "", ""])
    inputs = m["inputs"]
    lines = [f"Model beside measurement ({m['steps']} steps simulated, seed {m['seed']}; "
             f"{m['note']})"]
    lines += ["  " + ln for ln in fmt.table(["figure", "measured", "model", "model/measured",
                                             "check"], rows).splitlines()]
    lines.append("  check: the model's tolerance, " + ", ".join(
        f"{claims.LABEL[k]} {fmt.percent(t)}" for k, t in claims.TOLERANCE.items()))
    cpu = inputs["loader"]["cpu_s_per_sample"]
    per_step, hand, walls, leave = (inputs.get(k) for k in (
        "allreduce_per_step_s", "handover_s", "batch_wall_s", "departure_s"))
    parts = [f"a batch's build {_mean_p99(walls)}, of CPU {fmt.seconds(cpu, 'sample')}" if walls
             else f"loader CPU {fmt.seconds(cpu, 'sample')}"]
    if hand:
        parts.append(f"hand-over {_mean_p99(hand)}")
    parts.append(f"all-reduce {_mean_p99(per_step)}" if per_step
                 else f"all-reduce {fmt.seconds(inputs['allreduce_s'])}")
    if leave:
        parts.append(f"leaving it after the first rank {_mean_p99(leave)}")
    parts.append(f"sleep overshoot {fmt.seconds(inputs['compute_overshoot_s'])}")
    lines.append("  model inputs, measured" + (" (drawn from its batches and steps)" if per_step
                                                else "") + ": " + "; ".join(parts))
    lines.append(f"  cores the loaders do not get: {fmt.sig(inputs['trainer_cores_per_rank'])} "
                 f"per rank (its own process {fmt.sig(doc['loader']['rank_cpu_share'])}, other "
                 f"programs {fmt.sig(doc['other_cores'])} cores in all), of "
                 f"{inputs['cluster']['cores_per_node']} cores per node")
    shared = m.get("time_sharing", {})
    if shared.get("measured") is not None:
        ts = claims.job_checks({}, {}, shared)[0]
        lines.append(f"  time-sharing: a batch took {shared['measured']:.2f}x its CPU "
                     f"(wall / CPU, measured); the model, extrapolating from CPU, "
                     f"{shared['model']:.2f}x (contention x workers / free cores): "
                     f"{ts.words()}")
        via = m.get("from_cpu")
        if via:
            r = via["ratios"]
            lines.append(f"  the model from CPU instead of the build times: mean step "
                         f"{fmt.seconds(via['step_time_s']['mean'])} ({_ratio(r['mean'])}), "
                         f"p99 {fmt.seconds(via['step_time_s']['p99'])} ({_ratio(r['p99'])}), "
                         f"utilization {fmt.percent(via['gpu_util'])} "
                         f"({_ratio(r['gpu_util'])}) of the measured")
    return lines


def render(doc: dict[str, Any]) -> str:
    cfg, launch = doc["config"]["options"], doc["launch"]
    st, coll = doc["step_time_s"], doc["collective"]
    c = cfg["compute"]
    compute = fmt.seconds(c["mean_s"]) if c["kind"] == "const" or not c["sd_s"] else \
        f"{c['kind']}(mean {fmt.seconds(c['mean_s'])}, sd {fmt.seconds(c['sd_s'])})"
    stall = (f", stalls {fmt.percent(cfg['stall_prob'])} of steps x "
             f"{fmt.seconds(cfg['stall_s'])} per rank" if cfg["stall_prob"] else "")
    lines = [f"dsbench job: {doc['ranks']} ranks ({launch['nodes']} node"
             f"{'s' if launch['nodes'] != 1 else ''} x {launch['ranks_per_node']}, "
             f"{launch['backend']} on {launch['device']}, launched by {launch['launcher']}) "
             f"reading {doc['config']['path']}",
             f"  each rank: {cfg['workers']} {cfg['backend']} loader worker"
             f"{'s' if cfg['workers'] != 1 else ''}, batch {cfg['batch_size']}, compute "
             f"{compute}{stall}; {doc['steps']} steps counted after {doc['warmup_steps']}", "",
             "Step time (measured)",
             f"  mean {fmt.seconds(st['mean'])}  p50 {fmt.seconds(st['p50'])}  "
             f"p99 {fmt.seconds(st['p99'])}  max {fmt.seconds(st['max'])}",
             f"  accelerator utilization {fmt.percent(doc['gpu_util'])} (compute / step time); "
             f"step time lost to data {fmt.percent(doc['data_wait_share'])}",
             f"  wait for data: mean {fmt.seconds(doc['wait_for_data_s']['mean'])}, p99 "
             f"{fmt.seconds(doc['wait_for_data_s']['p99'])}; compute as slept: mean "
             f"{fmt.seconds(doc['compute_s']['mean'])} "
             f"({fmt.seconds(doc['compute_overshoot_s'])} over the drawn)",
             f"  collective: mean {fmt.seconds(coll['idle_s']['mean'])} on an idle step "
             f"(p99 {fmt.seconds(coll['idle_s']['p99'])}), "
             f"{fmt.seconds(coll['last_arrival_s']['mean'])} in the steps for the last rank "
             f"to arrive (its own cost there), {fmt.seconds(coll['in_step_s']['mean'])} "
             "for all ranks (waiting for the slowest included)", ""]
    lines += [*model_table(doc), ""]
    rows = [[str(r["rank"]), str(r["node"]), f"{r['slowest_steps']}",
             fmt.percent(r["slowest_share"]), fmt.seconds(r["mean_wait_for_data_s"]),
             fmt.seconds(r["mean_collective_s"])] for r in doc["lateness"]]
    lines.append("Lateness (the slowest rank of a step reached the collective last)")
    lines += ["  " + ln for ln in fmt.table(["rank", "node", "slowest in", "share",
                                             "wait for data", "at collective"],
                                            rows).splitlines()]
    tl = doc["timeline"]
    shown = tl["gpu_util"][:_WIDTH]
    modelled = doc["model"]["prediction"].get("timeline", [])[:len(shown)]
    lines += ["", f"Utilization timeline (mean of {doc['ranks']} ranks, one character per "
                  f"{fmt.seconds(tl['bucket_s'])}; ' ' idle .. '█' busy)",
              f"  measured |{sparkline(shown)}|",
              f"  model    |{sparkline(modelled)}|",
              ""]
    ld = doc["loader"]
    packed = " (documents, packed into sequences)" if doc["config"]["options"].get("pack") \
        else ""
    lines.append(f"Loaders: {fmt.rate(ld['samples_per_s'])}{packed} for the job, "
                 f"{fmt.seconds(ld['cpu_s_per_sample'], 'sample')} of worker CPU; each rank's own "
                 f"process kept {fmt.sig(ld['rank_cpu_share'])} of a core busy; "
                 f"{doc['load']['runnable']} ranks and workers on {doc['load']['cores']} cores")
    if doc.get("sweep"):
        lines += ["", "Tail by rank count ('slow': " + doc["slow_steps"]["rule"] + ")"]
        rows = [[str(r["ranks"]), fmt.seconds(r["mean_s"]), fmt.seconds(r["model_mean_s"]),
                 fmt.seconds(r["p99_s"]), fmt.seconds(r["model_p99_s"]),
                 fmt.percent(r["slow_step_fraction"]),
                 fmt.percent(r["model_slow_step_fraction"]),
                 _pct_or_dash(r["independent_fraction"])] for r in doc["sweep"]]
        lines += ["  " + ln for ln in fmt.table(
            ["ranks", "mean", "model mean", "p99", "model p99", "slow steps", "model slow",
             "1-(1-q)^N"], rows).splitlines()]
    for w in doc["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def render_job_check(doc: dict[str, Any]) -> str:
    """`dsbench extrapolate JOB.json`: the model beside a saved job's measurement."""
    cfg = doc["config"]["options"]
    head = (f"dsbench extrapolate: the job of {doc['created_utc']} "
            f"({fmt.plural(doc['ranks'], 'rank')} x {fmt.plural(cfg['workers'], 'worker')}, "
            f"batch {cfg['batch_size']}, {doc['steps']} steps "
            f"measured on {doc['machine'].get('hostname', 'its machine')})")
    return "\n".join([head, "", *model_table(doc)])
