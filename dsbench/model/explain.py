"""Words for the cluster model's numbers: the verdict, where each input came from, mechanisms.

Kept apart from dsbench.cluster so that the arithmetic stays short; every sentence here is built
from figures the model computed, never from fixed claims.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dsbench import fmt

if TYPE_CHECKING:
    from dsbench.model.costs import LoaderCost
    from dsbench.model.node import ClusterSpec, NodeRates
    from dsbench.model.simulate import SimResult

BALANCED = (0.97, 1.10)  # supply / demand inside this band: neither side has real slack


def verdict(rates: NodeRates) -> tuple[str, str]:
    """('input-bound' | 'compute-bound' | 'balanced', a sentence saying by how much)."""
    r = rates.ratio
    if r < BALANCED[0]:
        return "input-bound", (
            f"input-bound: the loaders supply {fmt.ratio(r)} of the samples/s the GPUs consume "
            f"({fmt.ratio(1 / r)} short); limit: {rates.limit}")
    if r > BALANCED[1]:
        return "compute-bound", (
            f"compute-bound: the loaders could supply {fmt.ratio(r)} the samples/s the GPUs "
            f"consume ({fmt.percent(r - 1)} headroom)")
    return "balanced", (
        f"balanced: supply is {fmt.ratio(r)} of demand, so any hiccup in the loader becomes a "
        f"wait; limit: {rates.limit}")


def _row(name: str, value: Any, text: str, source: str, note: str = "") -> dict[str, Any]:
    return {"name": name, "value": value, "text": text, "source": source, "note": note}


def inputs(cost: LoaderCost, cluster: ClusterSpec,
           sources: dict[str, str]) -> list[dict[str, Any]]:
    """Every input of the model with its value and source: measured, stated, default, profile
    (storage also "measured + stated" or "profile + stated": a stated latency added)."""
    where = f"{cost.path}: " if cost.path else ""
    base = (f"{where}{len(cost.batch_cpu_s)} batches of {cost.measured_batch} samples, "
            f"{cost.base_workers} worker(s)"
            + (f", read in order: {cost.order}" if cost.order else "")) \
        if cost.origin == "measured" else ""
    rows = [_row("cpu_s_per_sample", cost.cpu_s_per_sample,
                 fmt.seconds(cost.cpu_s_per_sample, "sample"), cost.source_of("cpu_s_per_sample"),
                 base)]
    if cost.documents_per_sample is not None:
        rows.append(_row("documents_per_sample", cost.documents_per_sample,
                         f"{fmt.sig(cost.documents_per_sample)} documents/sequence", "measured",
                         "bench --pack: a sample here is a packed sequence of "
                         f"{cost.seq_len} ids; files, bytes and requests per document are "
                         "scaled by it"))
    if cost.epoch_start_s is not None:
        rows.append(_row("epoch_start_s", cost.epoch_start_s, fmt.seconds(cost.epoch_start_s),
                         "measured", "the data wait at each epoch's start per rank (bench "
                         "--epochs: fresh workers to their first batch, the median epoch); "
                         "not in the step figures, which are of steps within an epoch"))
    if cost.origin == "stated":
        rows.append(_row("cpu_cv", cost.cpu_cv, fmt.sig(cost.cpu_cv), "stated",
                         "per-sample coefficient of variation; batches are lognormal"))
    if cost.origin == "measured":
        pts = ", ".join(f"{fmt.ratio(f)} at load {fmt.percent(a)}" for a, f in cost.contention
                        if a > 0)
        rows.append(_row("contention", cost.contention_at(1.0), pts or "no sweep", "measured",
                         "CPU per sample at W workers over the base run; load = W / cores"))
    rows += [
        _row("files_per_sample", cost.files_per_sample, fmt.sig(cost.files_per_sample),
             cost.source_of("files_per_sample")),
        _row("bytes_per_sample", cost.bytes_per_sample, fmt.nbytes(cost.bytes_per_sample),
             cost.source_of("bytes_per_sample")),
    ]
    units = {"allreduce_s": fmt.seconds(cluster.allreduce_s),
             "stall_s": fmt.seconds(cluster.stall_s),
             "stall_prob": fmt.percent(cluster.stall_prob),
             "compute": cluster.compute.describe()}
    for name in ("nodes", "gpus_per_node", "cores_per_node", "trainer_cores_per_gpu",
                 "workers_per_gpu", "prefetch", "batch_size", "compute", "allreduce_s",
                 "stall_prob", "stall_s"):
        value = getattr(cluster, name)
        if name in units:
            text = units[name]
        else:
            text = str(value) if isinstance(value, int) else fmt.sig(float(value))
        rows.append(_row(name, value.to_json() if name == "compute" else value, text,
                         sources.get(name, "stated")))
    st = cluster.storage
    text = "measured (adds nothing)" if st.is_local else (
        f"{st.name}: {fmt.seconds(st.per_file_s)}/file, {fmt.nbytes(st.node_bytes_per_s)}/s "
        "per node")
    # A probe's profile says "measured", and "measured + stated" with a round trip added.
    rows.append(_row("storage", st.name, text, st.origin, st.source))
    if cost.units is not None:
        rows.append(_units_row(cost, cluster))
    return rows


def _units_row(cost: LoaderCost, cluster: ClusterSpec) -> dict[str, Any]:
    """The measured export's units against the job's loader workers: a loader that splits an
    export by unit (WebDataset, MDS, litdata, TFRecord and columnar shards) gives each worker
    whole units, and a worker without one sits idle."""
    assert cost.units is not None
    workers = cluster.ranks * cluster.workers_per_gpu
    text = fmt.plural(cost.units, cost.unit_name.removesuffix("s"), cost.unit_name)
    if cost.units >= workers:
        note = (f"enough for the job's {workers} loader workers ({cluster.ranks} ranks x "
                f"{cluster.workers_per_gpu}) to have one each")
    else:
        note = (f"fewer than the job's {workers} loader workers ({cluster.ranks} ranks x "
                f"{cluster.workers_per_gpu}): with this export, {workers - cost.units} would "
                f"sit idle, and the supply above would not be reached; the figures assume an "
                f"export with at least {workers} {cost.unit_name}")
    return _row("units", cost.units, text, "measured", note)


# The shapes the timeline's note may name, each earned by the share of timeline buckets it
# describes (docs/verdicts.md): "back to back (~100%)" needs BURST_SHARE of buckets at >= 90%
# busy, "waits (~0%)" as many at <= 10%; "seldom wait" a mean utilization of at least SELDOM.
BURST_SHARE = 0.10
SELDOM = 0.90


def timeline_note(rates: NodeRates, cluster: ClusterSpec, result: SimResult) -> str:
    """Why the GPU timeline looks the way it does, from the per-batch time and the bursts; a
    shape is named only when the timeline's buckets show it."""
    tl = result.timeline
    batch_s = rates.per_sample_s * cluster.batch_size
    w = cluster.workers_per_gpu
    if tl.size == 0:
        return "no timeline"
    high, low = float(np.mean(tl >= 0.9)), float(np.mean(tl <= 0.1))
    shares = (f"{fmt.percent(high)} of seconds at >= 90% busy, {fmt.percent(low)} at <= 10%")
    lo, hi = np.percentile(tl[tl.size // 10:], [10, 90])  # past the start-up
    swing = (f"the utilization swings between about {fmt.percent(lo)} and {fmt.percent(hi)} "
             "(10th and 90th percentiles of the buckets)")
    if rates.ratio >= BALANCED[0]:
        mean = float(np.mean(tl))
        if mean >= SELDOM:
            return (f"{shares}. The loaders keep ahead: the prefetch queues ({w} workers x "
                    f"{cluster.prefetch} batches per GPU) stay full and the GPUs seldom wait.")
        return (f"{shares}. The loaders supply enough on average, yet the GPUs are busy "
                f"{fmt.percent(mean)} of the time: {swing}.")
    if batch_s >= 2 * result.timeline_bucket_s and high >= BURST_SHARE and low >= BURST_SHARE:
        return (f"{shares}. Each of the {w} workers of a GPU needs {fmt.seconds(batch_s)} per "
                f"batch and they started together, so batches arrive in bursts of about {w}: "
                f"the GPU computes them back to back (~100%), drains the queue, then waits for "
                f"the next burst (~0%), a cycle of about {fmt.seconds(batch_s)}.")
    bucket = fmt.seconds(result.timeline_bucket_s)
    if batch_s >= 2 * result.timeline_bucket_s:
        return (f"{shares}. Each of the {w} workers of a GPU needs {fmt.seconds(batch_s)} per "
                f"batch; seen in {bucket} buckets (the mean of the GPUs), {swing}.")
    return (f"{shares}. Batches take {fmt.seconds(batch_s)} each, under two {bucket} buckets, "
            f"so each bucket holds part of a burst and part of a wait: {swing}.")


def scaling_mechanism(rows: list[dict[str, Any]], reference_s: float, alone: float) -> str:
    """The fan-out in words: a step waits for the slowest rank."""
    if not rows:
        return ""
    last, first = rows[-1], rows[0]
    base = ("Every step waits for the slowest rank at the all-reduce, so a job of N ranks is "
            "slow whenever any one rank is.")
    if alone == 0 and last["slow_step_fraction"] == 0:
        shared = first["p99_s"] > 1.5 * first["p50_s"]
        return (f"{base} Here no step, of one rank or of {last['ranks']}, exceeds one rank's p99 "
                f"({fmt.seconds(reference_s)}): "
                + ("the long steps are a rhythm every rank shares (its workers started together "
                   "and run at the same pace), not independent hiccups," if shared else
                   "the steps do not vary,")
                + " so adding ranks changes nothing. Per-rank jitter (--stall-prob, a --compute "
                  "distribution, a loader that is barely ahead) is what a larger job pays for.")
    # One rank count in the table (--scaling 64) is said once, not as its own range.
    counts = (f"at {last['ranks']} ranks {fmt.percent(last['slow_step_fraction'])} of steps do"
              if first is last else
              f"at {first['ranks']} ranks {fmt.percent(first['slow_step_fraction'])} of steps "
              f"do, at {last['ranks']} ranks {fmt.percent(last['slow_step_fraction'])}")
    text = (f"{base} A rank alone exceeds {fmt.seconds(reference_s)} "
            f"(its own p99) in {fmt.percent(alone)} of steps; {counts} (independent ranks "
            f"would give {fmt.percent(last['independent_fraction'])}).")
    # Growth is against the smallest job in the table, or one rank when the table has one row.
    smaller = alone if first is last else max(first["slow_step_fraction"], alone)
    if last["slow_step_fraction"] >= 1.5 * smaller:
        text += " The tail grows with the number of ranks, not with the work per rank."
        if last["slow_step_fraction"] < 0.8 * last["independent_fraction"]:
            text += (" It grows less than for independent ranks because the barrier couples "
                     "them: while all wait for the slowest, the others' workers refill their "
                     "queues.")
    else:
        text += " Here the tail hardly grows with the number of ranks"
        text += (": the long steps come from a rhythm every rank shares (its workers started "
                 "together and run at the same pace), so the job follows its most-delayed rank "
                 "rather than adding up independent hiccups." if first["p99_s"] > 1.5
                 * first["p50_s"] else ".")
        low = min(rows, key=lambda r: r["p99_s"])
        if last["p99_s"] >= 1.3 * low["p99_s"]:
            text += (f" The p99 still rises, from {fmt.seconds(low['p99_s'])} at {low['ranks']} "
                     f"ranks to {fmt.seconds(last['p99_s'])} at {last['ranks']}: a rare per-rank "
                     "delay holds up more steps the more ranks there are, and past 1% of steps "
                     "it sets the p99.")
    return text
