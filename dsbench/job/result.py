"""The job result document (kind `dsbench-job`): rank 0 turns every rank's records into figures.

Per step the job's step time is the mean over ranks of each rank's step (they differ only by
when each left the same collective). Over the counted steps (the first workers x prefetch are
the loader's start, left out as the model leaves them out):

* accelerator utilization (MLPerf Storage's AU) = compute time / (ranks x step time), compute
  as measured (the sleep's real length, overshoot included; stalls are not compute);
* data-wait share = step time lost to data / step time, where a step loses
  step - (the slowest rank's compute and stall) - the collective's own cost in the step, when
  positive: the model's own definition. The collective's own cost in a step is the time the
  rank that reached it last spent there (it waited for nobody); on an idle step (nothing else
  running) it is measured apart, before the steps;
* the slowest rank of a step is the one that waited least at the collective (it arrived last);
  no clock is compared across ranks, so this holds across machines too;
* a slow step is longer than `predict.slow_threshold` of the typical step.
"""

from __future__ import annotations

import collections
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dsbench import __version__, atomic, stats
from dsbench.errors import DsbenchError
from dsbench.job import predict
from dsbench.job.options import JobOptions
from dsbench.model.simulate import busy_timeline
from dsbench.results import machine
from dsbench.results.document import load_json, now_utc
from dsbench.results.schema import validate

KIND = "dsbench-job"
SCHEMA_VERSION = 1
TIMELINE_BUCKETS = 60


def _per_step(records: Sequence[dict[str, Any]], key: str) -> np.ndarray:
    """(steps, ranks) array of one per-step record."""
    return np.asarray([r[key] for r in records], dtype=np.float64).T


def _rounded(values: Sequence[float]) -> list[float]:
    return [round(float(v), 7) for v in values]


def cores_per_node(records: Sequence[dict[str, Any]], nodes: int) -> int:
    """This machine's cores shared by the 'nodes' on it (several on one host share it)."""
    hosts = len({r["host"] for r in records})
    return max(1, round(machine.usable_cores() * hosts / nodes))


def build(path: str, opts: JobOptions, records: Sequence[dict[str, Any]], device: str,
          ) -> dict[str, Any]:
    """The document, with the model's prediction for the same job."""
    records = sorted(records, key=lambda r: r["rank"])
    ranks, w = len(records), opts.warmup_steps
    step_all = _per_step(records, "step_s").mean(axis=1)
    step = step_all[w:]
    wait, busy = _per_step(records, "wait_s")[w:], _per_step(records, "busy_s")[w:]
    stall, coll = _per_step(records, "stall_s")[w:], _per_step(records, "collective_s")[w:]
    compute = np.maximum(busy - stall, 0.0)
    idle = np.concatenate([r["idle_collective_s"] for r in records])
    # The rank that reached the collective last waited for nobody: its time there is the
    # collective's own cost in that step, under the step's load.
    own = coll.min(axis=1)
    lost = np.maximum(step - busy.max(axis=1) - own, 0.0)
    clock = predict.on_one_clock(records)
    if clock is not None:
        # On one clock, as the model counts it: a step's length (first departure to first
        # departure) less what it would be had every batch been there when its rank came for
        # it, from when the rank left the previous all-reduce.
        reduce, out, later = clock
        came = later[:, w - 1:-1].T
        lost = np.maximum(np.diff(out)[w - 1:] - (came + busy).max(axis=1) - reduce[w:], 0.0)
    st = stats.distribution(step)
    slowest = coll.argmin(axis=1) if ranks > 1 else np.zeros(len(step), dtype=int)
    late = collections.Counter(int(i) for i in slowest)
    stalled = (stall > 0).any(axis=1)
    typical = float(np.median(step[~stalled])) if (~stalled).any() else st["p50"]
    threshold = predict.slow_threshold(typical, opts.stall_s)
    batches = [b for r in records for b in r["batch_cpu_s"]]
    samples = sum(r["samples"] for r in records)
    if not samples:  # --pack: every sequence cut from ids read before the counted steps
        raise DsbenchError(f"the job's {len(step)} counted steps read no sample (--pack: ids "
                           "read before them filled every sequence): give more --steps")
    nodes = records[0]["nodes"]
    # The timeline: every rank's compute intervals from its first step, all steps included
    # (as the model's timeline starts at its t = 0).
    total = float(step_all.sum())
    bucket = float(f"{max(total / TIMELINE_BUCKETS, 1e-3):.1g}")
    begin = _per_step(records, "start_s") + _per_step(records, "wait_s")
    busy_all = np.maximum(_per_step(records, "busy_s") - _per_step(records, "stall_s"), 0.0)
    bucket, timeline = busy_timeline(begin, busy_all, total, bucket_s=bucket)
    cores = machine.usable_cores()
    # Cores other programs kept busy during the job, per host: the host's busy CPU less what
    # the job's own ranks and loader workers there used (their windows overlap: the mean).
    others = []
    for host in {r["host"] for r in records}:
        mine = [r for r in records if r["host"] == host]
        span = float(np.mean([r["window_s"] for r in mine]))
        host_busy = float(np.mean([r["host_busy_s"] for r in mine]))
        job_cpu = sum(r["rank_cpu_s"] + r["workers_cpu_s"] for r in mine)
        others.append(max(0.0, host_busy - job_cpu) / span)
    doc: dict[str, Any] = {
        "kind": KIND, "schema_version": SCHEMA_VERSION, "created_utc": now_utc(),
        "dsbench_version": __version__, "run_id": uuid.uuid4().hex,
        "machine": machine.collect(),
        "config": {"path": str(path), "options": opts.to_json()},
        "launch": {"launcher": records[0]["launcher"], "backend": records[0]["backend"],
                   "device": device, "nodes": nodes, "ranks_per_node": records[0]["local_world"],
                   "hosts": sorted({r["host"] for r in records}),
                   "cores_per_node": cores_per_node(records, nodes)},
        "ranks": ranks, "steps": len(step), "warmup_steps": w,
        "step_time_s": st, "gpu_util": float(compute.sum() / (ranks * step.sum())),
        "data_wait_share": float(lost.sum() / step.sum()),
        "wait_for_data_s": stats.distribution(wait.ravel()),
        "handover_s": stats.distribution(_per_step(records, "handover_s")[w:].ravel()),
        "compute_s": stats.distribution(compute.ravel()),
        "compute_overshoot_s": float(compute.mean() - np.mean(
            [r["compute_drawn_s"][w:] for r in records])),
        "collective": {"idle_s": stats.distribution(idle),
                       "in_step_s": stats.distribution(coll.ravel()),
                       "last_arrival_s": stats.distribution(own)},
        "slow_steps": {"threshold_s": threshold,
                       "fraction": float(np.mean(step > threshold)),
                       "stalled_fraction": float(np.mean(stalled)),
                       "rule": "longer than the median step without a stall plus half a "
                               "stall (without stalls: 1.5 x the median step)"},
        "lateness": [{"rank": r["rank"], "node": r["node"], "host": r["host"],
                      "slowest_steps": late.get(i, 0),
                      "slowest_share": late.get(i, 0) / len(step),
                      "mean_wait_for_data_s": float(wait[:, i].mean()),
                      "mean_collective_s": float(coll[:, i].mean())}
                     for i, r in enumerate(records)],
        "timeline": {"bucket_s": bucket, "gpu_util": [round(float(u), 4) for u in timeline]},
        "loader": {"backend": opts.backend, "workers_per_rank": opts.workers,
                   "samples_per_s": samples / float(step.sum()),
                   "cpu_s_per_sample": sum(batches) / samples,
                   "batch_cpu_s": _rounded(batches),
                   "batch_wall_s": _rounded([b for r in records for b in r["batch_wall_s"]]),
                   "rank_cpu_share": float(np.mean([r["rank_cpu_s"] / r["window_s"]
                                                    for r in records]))},
        "other_cores": float(np.mean(others)),
        "load": {"runnable": ranks // len({r["host"] for r in records}) * (1 + opts.workers),
                 "cores": cores},
        "per_rank": [{"rank": r["rank"], "node": r["node"], "local_rank": r["local_rank"],
                      "host": r["host"], "pid": r["pid"], "wait_s": _rounded(r["wait_s"]),
                      "handover_s": _rounded(r["handover_s"]), "origin_s": r["origin_s"],
                      "compute_s": _rounded(r["busy_s"]), "stall_s": _rounded(r["stall_s"]),
                      "collective_s": _rounded(r["collective_s"]),
                      "step_s": _rounded(r["step_s"])} for r in records],
        "warnings": [],
    }
    if doc["load"]["runnable"] > cores:
        doc["warnings"].append(
            f"{doc['load']['runnable']} ranks and loader workers share {cores} cores on a node: "
            "the collective's wait and the compute's overshoot include waiting for a core")
    doc["model"] = predict.predict(doc, seed=opts.seed)
    validate(doc, "job", "the job's own document")
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Validate and write a job document atomically."""
    validate(doc, "job", path)
    try:
        return atomic.write_text(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    except OSError as exc:
        raise DsbenchError(f"cannot write: {exc.strerror or exc}", path=path) from None


def is_job(path: str | Path) -> bool:
    """Whether the JSON file at `path` says it is a job document (it is read in full later)."""
    doc = load_json(Path(path), "result")
    return isinstance(doc, dict) and doc.get("kind") == KIND


def read(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    doc = load_json(p, "job result")
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise DsbenchError("not a job result (kind dsbench-job)", path=p)
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise DsbenchError(f"job result schema_version {doc.get('schema_version')!r}; this "
                           f"dsbench reads {SCHEMA_VERSION}", path=p)
    validate(doc, "job", p)
    _check_lengths(doc, p)
    return doc


def _check_lengths(doc: dict[str, Any], path: Path) -> None:
    """What the schema cannot say: every rank's records cover the same steps, and the loader's
    per-batch lists are as long as each other and split evenly over the ranks."""
    steps = doc["warmup_steps"] + doc["steps"]
    if len(doc["per_rank"]) != doc["ranks"]:
        raise DsbenchError(f"per_rank holds {len(doc['per_rank'])} ranks, not {doc['ranks']}",
                           path=path)
    for i, r in enumerate(doc["per_rank"]):
        for key in ("wait_s", "handover_s", "compute_s", "stall_s", "collective_s", "step_s"):
            if key in r and len(r[key]) != steps:
                raise DsbenchError(f"per_rank[{i}].{key} holds {len(r[key])} steps, not "
                                   f"{steps} (warmup_steps + steps)", path=path)
    loader = doc["loader"]
    cpu, wall = loader["batch_cpu_s"], loader.get("batch_wall_s")
    if wall is not None and (len(wall) != len(cpu) or len(wall) % doc["ranks"]):
        raise DsbenchError(f"loader.batch_wall_s holds {len(wall)} batches: as many as "
                           f"batch_cpu_s ({len(cpu)}), the same for each of {doc['ranks']} "
                           "ranks", path=path)
