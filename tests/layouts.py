"""Shared helpers for the adapter, inspect and CLI tests: small export definitions per layout,
JPEG and tar makers, what each layout is expected to do, and result-file and CLI-error helpers.

Tests import it as a top-level module (tests/conftest.py puts this directory on sys.path).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pytest_benchmark.fixture import BenchmarkFixture

from dsbench import adapters
from dsbench.adapters import base
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample
from dsbench.results import document as results

LAYOUTS = ("wds", "files", "arrow", "parquet")
SHARDED = ("wds", "arrow", "parquet")
COLUMNAR = ("arrow", "parquet")
IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
# The file each sharded layout writes per unit.
SUFFIX = {"wds": ".tar", "arrow": ".arrow", "parquet": ".parquet"}
# Files one unit costs to read: a shard is one open (a tar, a memory map, a Parquet file); a
# per-sample unit is its .jpg and its .json.
OPENS_PER_UNIT = {"wds": 1, "files": 2, "arrow": 1, "parquet": 1}
# What `open` says for an empty directory, per adapter.
EMPTY_MESSAGE = {"wds": "shards here", "files": "no sample files", "arrow": "no Arrow IPC files",
                 "parquet": "no Parquet files"}


def make_spec(layout: str, fields: tuple[FieldSpec, ...] = (), *, unit: int = 3,
              samples: int = 7, fields_as: str | None = None,
              image: ImageSpec = IMAGE) -> ExportSpec:
    """A small definition of `layout`: units (shards or directories) of `unit` samples."""
    return ExportSpec(name="t", layout=layout, samples=samples, shard_samples=unit,
                      files_per_dir=unit,
                      fields_as=fields_as or ("json" if layout == "files" else "members"),
                      image=image, fields=fields)


def write(root: Path, spec: ExportSpec, samples: int | None = None, seed: int = 0) -> Path:
    generate(spec, root, samples=samples, seed=seed, jobs=1)
    return root


def written_back(spec: ExportSpec, out: Path, seed: int = 3
                 ) -> tuple[base.Export, list[base.RawSample]]:
    """`spec` written by generate (one writer) and read back by dsbench: the export and every
    sample, as many as the definition holds."""
    generate(spec, out, seed=seed, jobs=1)
    export = adapters.open_export(out)
    samples = list(export.read())
    assert len(samples) == spec.samples
    return export, samples


def jpegs(n: int, seed: int = 7) -> list[bytes]:
    """n distinct small JPEGs."""
    spec = ExportSpec(name="j", layout="wds", image=IMAGE)
    return [make_sample(spec, seed, i)["image"] for i in range(n)]


def jpeg(i: int = 0) -> bytes:
    return jpegs(i + 1, seed=0)[i]


def write_tar(path: Path, entries: list[tuple[str, bytes]],
              fmt: int = tarfile.USTAR_FORMAT) -> Path:
    """A tar of regular members, plain USTAR headers unless `fmt` says otherwise."""
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def write_columnar(path: Path, table: pa.Table, chunk: int | None = None) -> Path:
    """One Arrow IPC file or Parquet file, by `path`'s suffix; `chunk` rows per record batch or
    row group."""
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=chunk)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=chunk)
    return path


def unit_of(layout: str, raw: base.RawSample) -> str:
    """The unit a sample was read from, as `Export.units()` names it."""
    return raw.key if layout == "files" else raw.source


def write_result(root: Path, name: str, doc: dict[str, Any]) -> str:
    path = root / name
    results.write_result(path, doc)
    return str(path)


def record_per_sample(benchmark: BenchmarkFixture, samples: int) -> None:
    benchmark.extra_info["samples_per_call"] = samples
    if benchmark.enabled and benchmark.stats is not None:
        median_s = benchmark.stats.stats.median
        benchmark.extra_info["median_us_per_sample"] = 1e6 * median_s / samples


def assert_one_line_error(err: str, command: str, *needles: str) -> None:
    """A command's refusal: one line on stderr, prefixed with the command, naming `needles`."""
    assert err.count("\n") == 1, err
    assert err.startswith(f"dsbench {command}: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)

