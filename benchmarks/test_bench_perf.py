"""Performance checks of the loader benchmark itself (not part of the default test run).

    pytest -n 0 benchmarks/test_bench_perf.py -s [--benchmark-enable]

Every figure is a ratio measured within one test, on CPU time where the question allows, because
wall time on a shared machine is noise. Each test records its figures in `benchmark.extra_info`
(and prints them) along with the 1-minute load average before it ran.

* harness overhead: CPU per sample of the runner with 1 worker <= 1.05x a bare loop in this
  process doing the same read, decode, fields, transform and collate on the same samples;
* scaling: 2 workers >= 1.8x the samples/s of 1 on a CPU-bound export (run on a quiet machine);
* repeatability: two runs agree within 5% on CPU per sample;
* with torch installed: the runner >= 0.95x torch DataLoader's samples/s, same export and workers.

Exports: 2000 samples of formats/before.toml (WebDataset shards, JPEG + label), generated once
per session, or taken from $DSBENCH_PERF_DIR/before if that holds one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dsbench.adapters import open_export
from dsbench.export.generate import generate
from dsbench.export.spec import load_spec
from dsbench.loader.pipeline import TrainTransform, collate_fields, make_decoder, parse_fields
from dsbench.loader.runner import BenchOptions, run_bench

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = 2000
BATCH = 50  # 40 batches are exactly one epoch of 2000 samples


@pytest.fixture(scope="session")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("DSBENCH_PERF_DIR")
    if given and (Path(given) / "before").is_dir():
        return Path(given) / "before"
    out = tmp_path_factory.mktemp("perf") / "before"
    generate(load_spec(ROOT / "formats" / "before.toml"), out, samples=SAMPLES)
    return out


def _record(benchmark: Any, figures: dict[str, Any]) -> None:
    figures["load_avg_1m_before"] = figures.get("load_avg_1m_before", os.getloadavg()[0])
    benchmark.extra_info.update(figures)
    print("\n" + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in figures.items()))


def bare_loop(path: Path, samples: int, seed: int = 0) -> float:
    """CPU s per sample of one process doing the pipeline's work and nothing else."""
    export = open_export(path)
    decode = make_decoder("pillow")
    transform = TrainTransform()
    rng = np.random.default_rng([seed, 0])
    batch = np.empty((BATCH, *transform.out_shape), np.uint8)

    def stream() -> Any:
        while True:
            yield from export.read(0, 1)

    it = stream()
    for _ in range(2 * BATCH):  # warm-up, as the runner's warm-up batches
        raw = next(it)
        transform(decode(raw), rng)
    c0 = time.process_time()
    done = 0
    while done < samples:
        fields = []
        for row in range(BATCH):
            raw = next(it)
            batch[row] = transform(decode(raw), rng)
            fields.append(parse_fields(raw))
        collate_fields(fields)
        done += BATCH
    return (time.process_time() - c0) / done


def test_harness_overhead_is_at_most_5_percent(benchmark: Any, before: Path) -> None:
    load = os.getloadavg()[0]
    opts = BenchOptions(workers=(1,), batch_size=BATCH, rounds=2, batches=SAMPLES // BATCH)

    def measure() -> dict[str, Any]:
        bare = [bare_loop(before, SAMPLES)]
        doc = run_bench(before, opts)
        bare.append(bare_loop(before, SAMPLES))
        run = doc["runs"][0]
        return {"bare_cpu_ms_per_sample": 1e3 * float(np.median(bare)),
                "bench_cpu_ms_per_sample": 1e3 * run["cpu_s_per_sample"],
                "bench_main_cpu_ms_per_sample": 1e3 * np.median(
                    [r["main_cpu_s"] / r["samples"] for r in run["rounds"]]),
                "ratio": run["cpu_s_per_sample"] / float(np.median(bare))}

    figures = benchmark.pedantic(measure, rounds=1, iterations=1)
    _record(benchmark, {"load_avg_1m_before": load, **figures})
    assert figures["ratio"] <= 1.05


def test_two_workers_give_at_least_1_8x_one(benchmark: Any, before: Path) -> None:
    load = os.getloadavg()[0]
    opts = BenchOptions(workers=(1, 2), batch_size=BATCH, seconds=10.0, rounds=3)
    doc = benchmark.pedantic(run_bench, args=(before, opts), rounds=1, iterations=1)
    one, two = doc["runs"]
    figures = {"load_avg_1m_before": load,
               "samples_per_s_1": one["samples_per_s"], "samples_per_s_2": two["samples_per_s"],
               "speedup": two["samples_per_s"] / one["samples_per_s"],
               "scaling_efficiency_2": two["scaling_efficiency"],
               "cpu_ms_per_sample_1": 1e3 * one["cpu_s_per_sample"],
               "cpu_ms_per_sample_2": 1e3 * two["cpu_s_per_sample"],
               "load_avg_1m_after": os.getloadavg()[0]}
    _record(benchmark, figures)
    assert figures["speedup"] >= 1.8


def test_two_runs_agree_within_5_percent_on_cpu_per_sample(benchmark: Any, before: Path
                                                           ) -> None:
    load = os.getloadavg()[0]
    opts = BenchOptions(workers=(1,), batch_size=BATCH, rounds=1, batches=SAMPLES // BATCH)

    def measure() -> tuple[float, float]:
        a = run_bench(before, opts)["runs"][0]["cpu_s_per_sample"]
        b = run_bench(before, opts)["runs"][0]["cpu_s_per_sample"]
        return a, b

    a, b = benchmark.pedantic(measure, rounds=1, iterations=1)
    _record(benchmark, {"load_avg_1m_before": load, "cpu_ms_per_sample_a": 1e3 * a,
                        "cpu_ms_per_sample_b": 1e3 * b, "difference": abs(a / b - 1)})
    assert abs(a / b - 1) <= 0.05


@pytest.mark.parametrize("workers", [1, 2])
def test_runner_keeps_up_with_torch_dataloader(benchmark: Any, before: Path, workers: int
                                               ) -> None:
    pytest.importorskip("torch")
    load = os.getloadavg()[0]

    def measure() -> dict[str, Any]:
        out: dict[str, list[float]] = {"dsbench": [], "torch": []}
        cpu: dict[str, list[float]] = {"dsbench": [], "torch": []}
        for _ in range(3):  # interleaved, so that a change in machine load hits both
            for backend in ("dsbench", "torch"):
                opts = BenchOptions(workers=(workers,), batch_size=BATCH, seconds=8.0, rounds=1,
                                    backend=backend)
                run = run_bench(before, opts)["runs"][0]
                out[backend].append(run["samples_per_s"])
                cpu[backend].append(run["cpu_s_per_sample"])
        d, t = float(np.median(out["dsbench"])), float(np.median(out["torch"]))
        return {"dsbench_samples_per_s": d, "torch_samples_per_s": t, "ratio": d / t,
                "dsbench_cpu_ms_per_sample": 1e3 * float(np.median(cpu["dsbench"])),
                "torch_cpu_ms_per_sample": 1e3 * float(np.median(cpu["torch"]))}

    figures = benchmark.pedantic(measure, rounds=1, iterations=1)
    _record(benchmark, {"load_avg_1m_before": load, "workers": workers, **figures})
    assert figures["ratio"] >= 0.95
