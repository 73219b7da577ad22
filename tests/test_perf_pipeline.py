"""pytest-benchmark suite: each loader stage on its own, on small inputs made on the fly.

* decode: four 500 x 375 quality-90 JPEGs (the typical ImageNet size) to pixels with Pillow;
* fields: parsing the re-export's per-sample JSON (label, caption, 768-d embedding as a JSON list,
  boxes), read back from a small `formats/after.toml` export;
* transform: random-resized-crop to 224 and flip of the decoded images;
* collate: the parsed fields of a batch of 16 stacked (collate_fields), and the loader's whole
  batch path (BatchBuilder.build: decode, fields, each sample copied into its row, collate).

`extra_info` carries the samples per call and, when timing is enabled, the median in µs per
sample. Under the default `--benchmark-disable` each body runs once; measure with
`python -m pytest tests/test_perf_pipeline.py --benchmark-enable`.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from layouts import record_per_sample
from PIL import Image
from pytest_benchmark.fixture import BenchmarkFixture

import dsbench
from dsbench.adapters import open_export
from dsbench.adapters.base import RawSample
from dsbench.export.generate import generate
from dsbench.export.images import make_image
from dsbench.export.spec import ImageSpec, load_spec
from dsbench.loader.pipeline import (
    BatchBuilder,
    Pipeline,
    StageTimes,
    TrainTransform,
    collate_fields,
    make_decoder,
    parse_fields,
)

AFTER = Path(dsbench.__file__).parent / "export" / "formats" / "after.toml"
WIDTH, HEIGHT = 500, 375
IMAGES = 4
FIELD_SAMPLES = 8
BATCH = 16
EMBED_DIM = 768


@pytest.fixture(scope="module")
def jpegs() -> list[RawSample]:
    spec = ImageSpec(sizes="fixed", width=WIDTH, height=HEIGHT, quality=90)
    return [RawSample(key=f"{i:08d}", source="memory", codec="jpeg", fields={}, encodings={},
                      image=make_image(spec, np.random.default_rng([0, i])))
            for i in range(IMAGES)]


@pytest.fixture(scope="module")
def decoded(jpegs: list[RawSample]) -> list[Image.Image]:
    decode = make_decoder("pillow")
    return [decode(raw) for raw in jpegs]  # type: ignore[misc]


@pytest.fixture(scope="module")
def after_raws(tmp_path_factory: pytest.TempPathFactory) -> list[RawSample]:
    """Samples of a small after-style export (per-sample JPEG + JSON), as its reader yields them."""
    spec = dataclasses.replace(load_spec(AFTER), files_per_dir=FIELD_SAMPLES,
                               image=ImageSpec(sizes="fixed", width=64, height=48))
    out = tmp_path_factory.mktemp("perf-after") / "after"
    generate(spec, out, samples=FIELD_SAMPLES, jobs=1)
    return list(open_export(out).read())


def test_decode_jpeg(benchmark: BenchmarkFixture, jpegs: list[RawSample]) -> None:
    decode = make_decoder("pillow")
    pixels = benchmark(lambda: [decode(raw) for raw in jpegs])
    record_per_sample(benchmark, len(jpegs))
    assert [(im.size, im.mode) for im in pixels] == [((WIDTH, HEIGHT), "RGB")] * IMAGES
    # Decoded, not just opened: the pixel data is there and is not flat.
    assert all(np.asarray(im).std() > 1.0 for im in pixels)


def test_parse_after_json_fields(benchmark: BenchmarkFixture, after_raws: list[RawSample]
                                 ) -> None:
    assert [list(raw.fields) for raw in after_raws] == [["json"]] * FIELD_SAMPLES
    parsed = benchmark(lambda: [parse_fields(raw) for raw in after_raws])
    record_per_sample(benchmark, len(after_raws))
    for fields in parsed:
        assert set(fields) == {"label", "caption", "embedding", "boxes"}
        assert fields["embedding"].shape == (EMBED_DIM,)
        assert fields["embedding"].dtype == np.float32
        assert isinstance(fields["label"], int) and 0 <= fields["label"] < 1000
        assert isinstance(fields["caption"], str) and fields["caption"]
        assert all(set(box) == {"x", "y", "w", "h", "cls"} for box in fields["boxes"])
    assert any(fields["boxes"] for fields in parsed)


def test_transform(benchmark: BenchmarkFixture, decoded: list[Image.Image]) -> None:
    transform = TrainTransform()
    rng = np.random.default_rng(0)
    out = benchmark(lambda: [transform(im, rng) for im in decoded])
    record_per_sample(benchmark, len(decoded))
    assert [(a.shape, a.dtype) for a in out] == [((224, 224, 3), np.dtype(np.uint8))] * IMAGES


def test_collate(benchmark: BenchmarkFixture, after_raws: list[RawSample]) -> None:
    fields = [parse_fields(after_raws[i % len(after_raws)]) for i in range(BATCH)]
    batch = benchmark(lambda: collate_fields(fields))
    record_per_sample(benchmark, BATCH)
    assert batch["embedding"].shape == (BATCH, EMBED_DIM)
    assert batch["label"].shape == (BATCH,) and batch["label"].dtype == np.int64
    # Row i of the batch is sample i's fields, in order.
    for i, f in enumerate(fields):
        assert np.array_equal(batch["embedding"][i], f["embedding"])
    assert batch["label"].tolist() == [f["label"] for f in fields]
    assert batch["caption"] == [f["caption"] for f in fields]
    assert batch["boxes"] == [f["boxes"] for f in fields]


class AsArray:
    """The decoded image as an array, unchanged: the rows can then be checked pixel for pixel."""

    out_shape = (48, 64, 3)
    out_dtype = "uint8"

    def __call__(self, pixels: Any, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(pixels)


def test_batch_builder_copies_each_sample_into_its_row(benchmark: BenchmarkFixture,
                                                       after_raws: list[RawSample]) -> None:
    # The loader's batch path: every transformed sample copied into its row of the batch
    # buffer, the fields collated in the same order.
    def build() -> tuple[list[str], dict[str, Any], np.ndarray]:
        stream = itertools.cycle(after_raws)
        builder = BatchBuilder(Pipeline(transform=AsArray()), lambda _skip: stream,
                               np.random.default_rng(0))
        images = np.zeros((BATCH, *AsArray.out_shape), np.uint8)
        keys, fields = builder.build(images, StageTimes())
        return keys, fields, images

    keys, fields, images = benchmark(build)
    record_per_sample(benchmark, BATCH)
    raws = [after_raws[i % len(after_raws)] for i in range(BATCH)]
    assert keys == [raw.key for raw in raws]
    decode = make_decoder("pillow")
    for row, raw in zip(images, raws, strict=True):
        assert np.array_equal(row, np.asarray(decode(raw)))
    assert fields["label"].tolist() == [parse_fields(raw)["label"] for raw in raws]
    assert fields["embedding"].shape == (BATCH, EMBED_DIM)
