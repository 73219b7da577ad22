"""pytest-benchmark suite: reading every sample of a small export, once per layout.

Each shipped definition in formats/ (one per layout) is written small on the fly: 48 samples of
64 x 48 JPEGs in shards (or directories) of 16, its fields as defined. A call opens the export
with `open_export` and reads all of it, as a loader worker does once per epoch; decoding is not
included (see test_perf_pipeline.py). `extra_info` carries the samples per call and, when timing
is enabled, the median in µs per sample.

Under the default `--benchmark-disable` each body runs once; measure with
`python -m pytest tests/test_perf_readers.py --benchmark-enable`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

import dsbench
from dsbench.adapters import FORMATS, open_export
from dsbench.export.generate import generate
from dsbench.export.spec import ImageSpec, load_spec
from dsbench.export.synth import sample_key

FORMATS_DIR = Path(dsbench.__file__).parent / "export" / "formats"
SAMPLES = 48
UNIT = 16
LAYOUTS = sorted(FORMATS)
JPEG_SOI = b"\xff\xd8"


def record_per_sample(benchmark: BenchmarkFixture, samples: int) -> None:
    benchmark.extra_info["samples_per_call"] = samples
    if benchmark.enabled and benchmark.stats is not None:
        median_s = benchmark.stats.stats.median
        benchmark.extra_info["median_us_per_sample"] = 1e6 * median_s / samples


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Layout -> a small export of the shipped definition with that layout."""
    specs = {}
    for toml in sorted(FORMATS_DIR.glob("*.toml")):
        spec = load_spec(toml)
        specs.setdefault(spec.layout, spec)
    missing = set(LAYOUTS) - specs.keys()
    assert not missing, f"no shipped definition for layouts {sorted(missing)}"
    root = tmp_path_factory.mktemp("perf-readers")
    out = {}
    for layout, spec in specs.items():
        small = dataclasses.replace(spec, image=ImageSpec(sizes="fixed", width=64, height=48),
                                    shard_samples=UNIT, files_per_dir=UNIT)
        generate(small, root / spec.name, samples=SAMPLES, jobs=1)
        out[layout] = root / spec.name
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_all_samples(benchmark: BenchmarkFixture, exports: dict[str, Path],
                          layout: str) -> None:
    path = exports[layout]

    def read_all() -> list[tuple[str, bytes, int]]:
        return [(raw.key, raw.image[:2], len(raw.fields)) for raw in open_export(path).read()]

    got = benchmark(read_all)
    record_per_sample(benchmark, SAMPLES)
    assert open_export(path).layout == layout
    # Per-sample files are keyed by their path under the export ("000000/00000000").
    assert [key.rsplit("/", 1)[-1] for key, _, _ in got] == [sample_key(i) for i in range(SAMPLES)]
    assert all(head == JPEG_SOI for _, head, _ in got)
    # Every sample carries the definition's fields (as members, a JSON document or columns).
    assert {n for _, _, n in got} == {got[0][2]} and got[0][2] >= 1
