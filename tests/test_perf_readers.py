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
import json
from pathlib import Path
from typing import Any

import pytest
from layouts import record_per_sample
from pytest_benchmark.fixture import BenchmarkFixture

import dsbench
from dsbench.adapters import open_export
from dsbench.export import spec
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, ImageSpec, load_spec, member_ext
from dsbench.export.synth import sample_key

FORMATS_DIR = Path(dsbench.__file__).parent / "export" / "formats"
SAMPLES = 48
UNIT = 16
# The layouts dsbench writes (a Megatron dataset is read, not written: tests/test_tokens.py).
LAYOUTS = sorted(spec.LAYOUTS)
JPEG_SOI = b"\xff\xd8"


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, ExportSpec]]:
    """Layout -> a small export of the shipped definition with that layout, and the definition."""
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
        out[layout] = (root / spec.name, small)
    return out


def carried_fields(spec: ExportSpec, fields: dict[str, Any]) -> set[str]:
    """The definition's fields a sample carries: as members named by their extensions, as the
    keys of one JSON document (binary values stay members), or by name (columns, MDS columns,
    litdata leaves, tf.train.Example features; dsbench's TFRecord writer adds image/format,
    as TensorFlow's converters do)."""
    if spec.layout not in ("wds", "files"):
        return set(fields) - {"image/format"}
    names = {f.name for f in spec.fields if member_ext(spec, f) in fields}
    if spec.fields_as == "json" and "json" in fields:
        names |= set(json.loads(fields["json"]))
    return names


@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_all_samples(benchmark: BenchmarkFixture,
                          exports: dict[str, tuple[Path, ExportSpec]], layout: str) -> None:
    path, spec = exports[layout]

    def read_all() -> list[tuple[str, bytes, dict[str, Any]]]:
        return [(raw.key, raw.image[:2], raw.fields) for raw in open_export(path).read()]

    got = benchmark(read_all)
    record_per_sample(benchmark, SAMPLES)
    assert open_export(path).layout == layout
    # Per-sample files are keyed by their path under the export ("000000/00000000").
    assert [key.rsplit("/", 1)[-1] for key, _, _ in got] == [sample_key(i) for i in range(SAMPLES)]
    assert all(head == JPEG_SOI for _, head, _ in got)
    # Every sample carries the definition's fields (as members, a JSON document or columns).
    want = {f.name for f in spec.fields}
    assert want and all(carried_fields(spec, fields) == want for _, _, fields in got)
