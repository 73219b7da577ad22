"""Result documents made in tests, valid by dsbench.results.validate, with chosen figures."""

from __future__ import annotations

import copy
from typing import Any

from dsbench.results import document as results
from dsbench.results.document import STAGES

MACHINE = {"cpu_model": "Test CPU @ 2.0GHz", "usable_cores": 2, "logical_cores": 2,
           "memory_bytes": 24 * 2**30, "python": {"version": "3.11.7"}}


def run(workers: int = 1, *, sps: list[float] | None = None, cpu: list[float] | None = None,
        bytes_per_sample: float = 95_000.0, files_per_sample: float = 0.001,
        stages: dict[str, float] | None = None, batch_size: int = 32,
        pss: float = 500e6) -> dict[str, Any]:
    sps = sps or [400.0, 405.0, 395.0]
    cpu = cpu or [0.0049, 0.0050, 0.0051]
    st = stages or {s: 0.0 for s in STAGES} | {"decode": 0.0030, "transform": 0.0015,
                                                "read": 0.0003, "fields": 0.0001,
                                                "collate": 0.0001}
    rounds = [{"samples": 1000, "batches": 1000 // batch_size, "wall_s": 1000 / s,
               "cpu_s": 1000 * c, "samples_per_s": s, "cpu_s_per_sample": c,
               "peak_pss_bytes": pss} for s, c in zip(sps, cpu, strict=True)]
    med = sorted(sps)[len(sps) // 2]
    cmed = sorted(cpu)[len(cpu) // 2]
    return {"workers": workers, "batch_size": batch_size, "samples_per_s": med,
            "samples_per_s_iqr": [min(sps), max(sps)], "samples_per_s_ci95": [min(sps), max(sps)],
            "cpu_s_per_sample": cmed, "cpu_s_per_sample_iqr": [min(cpu), max(cpu)],
            "cpu_s_per_sample_ci95": [min(cpu), max(cpu)], "stages": st,
            "bytes_per_sample": bytes_per_sample, "files_per_sample": files_per_sample,
            "peak_pss_bytes": pss, "samples": 1000 * len(sps), "skipped_samples": 0,
            "skipped": [], "accelerator_util": None, "scaling_efficiency": 1.0,
            "batch_cpu_s": [cmed * batch_size] * 30, "rounds": rounds}


def document(runs: list[dict[str, Any]], *, layout: str = "wds", path: str = "/data/x",
             machine: dict[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    cfg = {"path": path, "batch_size": runs[0]["batch_size"], "seconds": 5.0, "rounds": 3,
           "warmup_batches": 2, "step_time_s": 0.0, "cold": False, "decoder": "pillow",
           "normalize": False, "on_error": "raise", "backend": "dsbench", "prefetch": 2}
    cfg.update(config)
    doc = results.new_document(copy.deepcopy(machine or MACHINE),
                               {"layout": layout, "samples": 2000,
                                "files_per_sample": runs[0]["files_per_sample"]},
                               cfg, runs)
    return results.validate(doc)
