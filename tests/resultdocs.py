"""Result documents made in tests from chosen per-round figures, summarised as the runner does
(dsbench.stats), valid by the bench schema. For behaviour that depends on real noise, tests also
measure small exports with the real runner (tests/conftest.py's `measured` fixtures)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from dsbench import stats
from dsbench.results import document as results
from dsbench.results.document import STAGES

MACHINE = {"cpu_model": "Test CPU @ 2.0GHz", "usable_cores": 2, "logical_cores": 2,
           "memory_bytes": 24 * 2**30, "python": {"version": "3.11.7"}}
BATCHES = 30
# Per-batch CPU varies like a real loader's (decode times differ per image): the cluster model
# then sees jitter, as it does from a measured document.
BATCH_CV = 0.1
STAGE_COST = {"decode": 0.0030, "transform": 0.0015, "read": 0.0003, "fields": 0.0001,
              "collate": 0.0001}


def run(workers: int = 1, *, sps: list[float] | None = None, cpu: list[float] | None = None,
        bytes_per_sample: float = 95_000.0, files_per_sample: float = 0.001,
        stages: dict[str, float] | None = None, batch_size: int = 32,
        pss: float | list[float] = 500e6) -> dict[str, Any]:
    """One worker count's run from its rounds' samples/s and CPU s/sample; each round's stage
    costs are `stages` scaled by that round's CPU over the geometric mean of the rounds'. The
    per-batch CPU is lognormal around the summary's CPU per batch, seeded by `workers`. `pss`
    is every round's peak memory, or each round's; the run's is their largest, as the runner's."""
    sps = sps or [400.0, 405.0, 395.0]
    cpu = cpu or [0.0049, 0.0050, 0.0051]
    peaks = pss if isinstance(pss, list) else [pss] * len(sps)
    st = stages or dict(STAGE_COST)
    speed, cost = stats.summarize(sps), stats.summarize(cpu)
    rounds = [{"samples": 1000, "batches": 1000 // batch_size, "wall_s": 1000 / s,
               "cpu_s": 1000 * c, "samples_per_s": s, "cpu_s_per_sample": c,
               "peak_pss_bytes": p, "stages": {k: v * c / cost.center for k, v in st.items()}}
              for s, c, p in zip(sps, cpu, peaks, strict=True)]
    return {"workers": workers, "batch_size": batch_size, "samples_per_s": speed.center,
            "samples_per_s_iqr": list(speed.iqr), "samples_per_s_ci95": list(speed.ci95),
            "samples_per_s_spread": speed.relative_spread,
            "cpu_s_per_sample": cost.center, "cpu_s_per_sample_iqr": list(cost.iqr),
            "cpu_s_per_sample_ci95": list(cost.ci95),
            "cpu_s_per_sample_spread": cost.relative_spread,
            "stages": {s: sum(r["stages"][s] for r in rounds) / len(rounds) for s in STAGES},
            "bytes_per_sample": bytes_per_sample, "mapped_bytes_per_sample": 0.0,
            "files_per_sample": files_per_sample,
            "peak_pss_bytes": max(peaks), "samples": 1000 * len(sps), "skipped_samples": 0,
            "skipped": [], "accelerator_util": None, "scaling_efficiency": 1.0,
            "batch_cpu_s": batch_cpu(cost.center * batch_size, workers), "rounds": rounds}


def batch_cpu(center: float, seed: int) -> list[float]:
    """BATCHES per-batch CPU times with geometric mean `center` and about BATCH_CV spread."""
    logs = np.random.default_rng(seed).normal(0.0, BATCH_CV, BATCHES)
    return [float(center * np.exp(x - logs.mean())) for x in logs]


def document(runs: list[dict[str, Any]], *, layout: str = "wds", path: str = "/data/x",
             machine: dict[str, Any] | None = None, run_id: str | None = None,
             validate: bool = True, **config: Any) -> dict[str, Any]:
    cfg = {"path": path, "batch_size": runs[0]["batch_size"], "seconds": 5.0, "rounds": 3,
           "warmup_batches": 2, "step_time_s": 0.0, "cold": False, "decoder": "pillow",
           "normalize": False, "on_error": "raise", "backend": "dsbench", "prefetch": 2}
    cfg.update(config)
    first = runs[0]
    counts = {"method": "whole units", "exact": True, "units": 2, "units_read": 2,
              "samples": 2000, "skipped_samples": 0, "files": 2, "bytes": 0, "mapped_bytes": 0,
              "files_per_sample": first["files_per_sample"],
              "bytes_per_sample": first["bytes_per_sample"], "mapped_bytes_per_sample": 0.0}
    summary = {"path": path, "layout": layout, "samples": 2000, "units": 2, "files": 2,
               "bytes": 190_000_000, "bytes_per_sample": {"mean": 95e3, "p50": 95e3, "p99": 96e3},
               "files_per_sample": first["files_per_sample"], "fields": {}, "image": {},
               "bad_samples": 0, "problems": []}
    doc = results.new_document(copy.deepcopy(machine or MACHINE), summary, cfg, runs,
                               counts=counts, run_id=run_id)
    # Validation is most of the cost of a document: tests that make a thousand check some.
    return results.validate(doc) if validate else doc
