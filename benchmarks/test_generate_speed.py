"""Speed of `generate`: formats/before.toml, 2000 samples, one writing process, at >= 300
samples/s per core with generator 2 (the default); generator 1's rate is recorded beside it.

    python -m pytest -n 0 benchmarks/test_generate_speed.py -s [--benchmark-enable]

Samples per CPU second of the command and its writing process together (the OS's accounting,
so a neighbour slows the wall clock, not the figure much). Not part of the default test run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from dsbench.export.generate import GenerateReport, generate
from dsbench.export.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = 2000
FLOOR = 300.0  # samples/s per core, generator 2


@pytest.mark.parametrize("generator", [2, 1])
def test_generate_before_at_300_samples_per_core(benchmark: BenchmarkFixture, tmp_path: Path,
                                                 generator: int) -> None:
    spec = load_spec(ROOT / "formats" / "before.toml")
    reports: list[GenerateReport] = []

    def run() -> None:
        out = tmp_path / f"before-{len(reports)}"
        reports.append(generate(spec, out, samples=SAMPLES, jobs=1, generator=generator))

    benchmark.pedantic(run, rounds=1 if generator == 1 else 3, iterations=1)
    rates = sorted(r.samples_written / r.cpu_s for r in reports)
    median = rates[len(rates) // 2]
    benchmark.extra_info.update({"generator": generator, "samples_per_s_per_core": median,
                                 "load_avg_1m": os.getloadavg()[0]})
    print(f"\ngenerator {generator}: {median:.0f} samples/s per core ({rates})")
    assert all(r.samples_written == SAMPLES for r in reports)
    if generator == 2:
        assert median >= FLOOR, f"{median:.0f} samples/s per core, floor {FLOOR:.0f}"
