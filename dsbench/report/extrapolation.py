"""`dsbench extrapolate`'s report for people: inputs and their sources, the node's supply and
demand, step times, the GPU timeline as a sparkline, what would reach 90%, and the scaling table."""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.report import claims

_SPARK = " ▁▂▃▄▅▆▇█"
_SPARK_WIDTH = 100


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
    notes = [r for r in doc["inputs"] if r["note"] and (r["source"] in ("measured", "profile")
                                                         or r["source"].endswith(" + stated"))]
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
              *_token_lines(doc.get("tokens")), *_audio_lines(doc.get("audio")),
              *memory_lines(doc.get("memory")),
              f"  verdict  {doc['verdict_text']}", ""]
    lines += [f"Step time ({doc['ranks']} ranks, {doc['steps']} steps simulated, the first "
              f"{doc['warmup_steps']} not counted)",
              f"  mean {fmt.seconds(st['mean'])}  p50 {fmt.seconds(st['p50'])}  "
              f"p99 {fmt.seconds(st['p99'])}  max {fmt.seconds(st['max'])}",
              f"  GPU utilization {fmt.percent(doc['gpu_util'])} (compute / step time); "
              f"waiting for data {fmt.percent(doc['data_wait_share'])} of a step; "
              f"{fmt.rate(doc['samples_per_s_per_node'])} per node", ""]
    lines += epoch_lines(doc.get("epoch_start"))
    lines += store_lines(doc.get("store"))
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


def epoch_lines(epoch: dict[str, Any] | None) -> list[str]:
    """What the measured wait at every epoch's start costs an epoch."""
    if not epoch:
        return []
    return ["Epoch starts",
            f"  an epoch of {epoch['samples']:,} samples ({epoch['samples_from']}) is "
            f"{fmt.plural(epoch['steps'], 'step')} and {fmt.seconds(epoch['epoch_s'])}, with "
            f"the measured wait of {fmt.seconds(epoch['wait_s'])} at its start (fresh workers "
            f"to their first batch): {fmt.percent(epoch['lost_share'])} of the epoch lost, GPU "
            f"utilization {fmt.percent(epoch['gpu_util'])} over it",
            "  a synchronous job waits for its slowest rank's workers, so it loses at least "
            "this; persistent workers are not restarted at an epoch's start", ""]


def store_lines(store: dict[str, Any] | None) -> list[str]:
    """The object store's load at the target scale, its limit, and an epoch's bill."""
    if not store:
        return []
    limit = store["limit_per_prefix_s"]
    prefixes = fmt.plural(store["prefixes"], "prefix", "prefixes")
    lines = ["Object store",
             f"  the job reads {round(store['requests_per_s']):,} requests/s "
             f"({fmt.sig(store['requests_per_sample'])} requests/sample, "
             f"{store['requests_basis']}; {round(store['job_samples_per_s']):,} samples/s), "
             f"{round(store['requests_per_s_per_prefix']):,} requests/s per prefix over "
             f"{prefixes}"]
    if limit is None:
        lines.append("  the profile states no request limit per prefix")
    elif store["throttle_bound"]:
        lines.append(
            f"  THROTTLE-BOUND: {fmt.ratio(store['requests_per_s_per_prefix'] / limit)} the "
            f"store's limit of {limit:,.0f} requests/s per prefix; held to it, the job "
            f"makes {round(store['job_samples_per_s_at_limit']):,} samples/s: a step takes at "
            f"least {fmt.seconds(store['step_floor_s'])}, GPU utilization at most "
            f"{fmt.percent(store['gpu_util_at_limit'])} (more prefixes: --prefixes)")
    else:
        lines.append(f"  within the store's limit of {limit:,.0f} requests/s per prefix "
                     f"({fmt.percent(store['requests_per_s_per_prefix'] / limit)} of it)")
    epoch = store.get("epoch")
    if epoch:
        bill = (_usd(epoch["usd"]) if epoch["usd"] is not None
                else "no price in the profile")
        lines.append(f"  one epoch of {epoch['samples']:,} samples ({epoch['samples_from']}"
                     f"): {round(epoch['requests']):,} requests, {fmt.sig(epoch['gib_read'])} GiB "
                     f"read, {bill}, {fmt.seconds(epoch['wall_s'])} of the job")
    if store.get("limit_source"):
        lines.append(f"  limit and prices: {store['limit_source']}")
    return [*lines, ""]


KIND = {"PSS": "PSS", "anonymous + shared": "anonymous and shared memory (page cache left out)"}


def memory_lines(mem: dict[str, Any] | None) -> list[str]:
    """What the node's loader workers take of its memory, and whether it fits."""
    if mem is None:  # a stated cost, or a result without peak memory: nothing to say
        return []
    # Digits that keep a share on its side of the node (100%) and of half of it.
    share = mem["share"]
    d = max(claims.side_digits([share], 1.0), claims.side_digits([share], 0.5))
    text = (f"  memory   the loaders take {fmt.nbytes(mem['loaders_bytes'])} of the node's "
            f"{fmt.nbytes(mem['node_bytes'])} ({fmt.sig(100 * share, d)}%): "
            f"{mem['workers_per_node']} workers x {fmt.nbytes(mem['per_worker_bytes'])} peak "
            f"{KIND.get(mem.get('kind', 'PSS'), 'PSS')} per worker (measured at "
            f"{fmt.plural(mem['measured_workers'], 'worker')})")
    if not mem["fits"]:
        return [text, "           would not fit: fewer workers per GPU, or an export that "
                "needs less memory per worker (--node-memory states the node's)"]
    if mem["tight"]:
        return [text, "           over half the node, before the training processes' own "
                "memory"]
    return [text + "; the training processes' own memory comes on top"]


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


def _usd(value: float) -> str:
    if value >= 0.01 or value == 0:
        return f"${value:,.2f}"
    return "$" + f"{value:.8f}".rstrip("0")  # $0.00008, not $8e-05


def _token_lines(tokens: dict[str, Any] | None) -> list[str]:
    """Supply and demand in token ids, for a job of token samples."""
    if not tokens:
        return []
    return [f"  in tokens: supply {fmt.count(tokens['supply_per_s_per_node'])} tokens/s, demand "
            f"{fmt.count(tokens['demand_per_s_per_node'])} tokens/s per node (sequences of "
            f"{tokens['seq_len']} ids: {fmt.count(tokens['per_step_per_gpu'])} tokens per step "
            f"per GPU)"]


def _audio_lines(audio: dict[str, Any] | None) -> list[str]:
    """Supply and demand in seconds of audio, for a job of audio samples."""
    if not audio:
        return []
    return [f"  in audio: supply {fmt.sig(audio['supply_per_s_per_node'])} s of audio/s, demand "
            f"{fmt.sig(audio['demand_per_s_per_node'])} s of audio/s per node (clips of "
            f"{fmt.sig(audio['clip_seconds'])} s: {fmt.sig(audio['per_step_per_gpu'])} s of "
            "audio per step per GPU)"]
