"""`bench --order random` and `block`: samples read where they lie, through each layout's
random-access path, in a seeded permutation of samples or of blocks of them."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import formatlibs
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_export

from dsbench import adapters
from dsbench.adapters.base import RawSample, reads_at
from dsbench.errors import DsbenchError
from dsbench.loader.counts import count_pass
from dsbench.loader.options import BenchOptions
from dsbench.loader.order import BLOCK, RANDOM, Order, WorkerSamples
from dsbench.loader.runner import run_bench
from dsbench.loader.worker import read_chars

SAMPLES, GROUP = 240, 60  # four shards of one 60-row row group (record batch) each


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("random")
    out = {layout: write_export(root, layout, SAMPLES, shard_samples=GROUP)
           for layout in ("parquet", "arrow", "files", "wds")}
    # An Arrow IPC *stream* (no footer): its batches are found by reading its message headers.
    table = pa.ipc.open_file(pa.memory_map(str(next(out["arrow"].glob("*.arrow"))))).read_all()
    stream = root / "stream" / "part.arrows"
    stream.parent.mkdir()
    with pa.OSFile(str(stream), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        for batch in table.to_batches(max_chunksize=25):
            w.write_batch(batch)
    out["stream"] = stream.parent
    out["hf"] = formatlibs.write_hf(root / "hf")  # save_to_disk: Arrow streams, by `datasets`
    # Record shards, by their own libraries: MDS plain and compressed whole, litdata chunks.
    out["mds"] = formatlibs.write("mds", root)
    out["mds-zstd"] = formatlibs.write("mds-zstd", root)
    out["litdata"] = formatlibs.write("litdata", root)
    out["lance"] = formatlibs.write("lance", root)
    # Rows removed by a deletion file are not samples: offsets count the rows that remain.
    import lance

    shutil.copytree(out["lance"], root / "lance-deleted")
    lance.dataset(str(root / "lance-deleted")).delete("label % 3 = 0")
    assert lance.dataset(str(root / "lance-deleted")).count_rows() < formatlibs.SAMPLES
    out["lance-deleted"] = root / "lance-deleted"
    return out


def _as_read(s: RawSample) -> tuple[str, bytes, dict[str, object]]:
    return s.key, s.image, {k: v.tolist() if isinstance(v, np.ndarray) else v
                            for k, v in s.fields.items()}


def _front_to_back(path: Path) -> list[tuple[str, bytes, dict[str, object]]]:
    export = adapters.open_export(path)
    return [_as_read(s) for s in export.read_units(export.units())]


@pytest.mark.parametrize("layout", ["parquet", "arrow", "stream", "hf", "files", "mds",
                                    "mds-zstd", "litdata", "lance",
                                    "lance-deleted"])
def test_a_sample_read_where_it_lies_is_the_one_read_front_to_back(
        layout: str, exports: dict[str, Path]) -> None:
    path = exports[layout]
    want = _front_to_back(path)
    export = adapters.open_export(path)
    assert reads_at(export)
    located = [(u, off) for u in export.units() for off in range(export.unit_samples(u))]
    assert len(located) == len(want)
    # Backwards and skipping about, so that no read is helped by the one before it.
    for i in [*range(len(located) - 1, -1, -7), *range(0, len(located), 5)]:
        got = export.read_at(*located[i])
        assert got is not None and _as_read(got) == want[i]


def _share(order: Order, worker: int, workers: int, epoch: int) -> int:
    """Samples worker `worker` reads in `epoch`: the sizes of its permuted blocks."""
    size = order.block_size
    perm = np.random.default_rng([order.seed, epoch]).permutation(-(-SAMPLES // size))
    return sum(min(size, SAMPLES - int(b) * size) for b in perm[worker::workers])


def _epoch(path: Path, order: Order, worker: int, workers: int, epoch: int) -> list[str]:
    """The keys a worker's stream gives in `epoch` (the epochs before it read and dropped)."""
    stream = WorkerSamples(adapters.open_export(path), order, worker, workers)
    before = sum(_share(order, worker, workers, e) for e in range(epoch))
    list(itertools.islice(stream, before))
    return [s.key for s in itertools.islice(stream, _share(order, worker, workers, epoch))]


@pytest.mark.parametrize("order", [Order(RANDOM, seed=3), Order(BLOCK, seed=3, block=25)])
@pytest.mark.parametrize("layout", ["parquet", "files"])
def test_each_epoch_deals_a_seeded_permutation_of_blocks_to_the_workers(
        order: Order, layout: str, exports: dict[str, Path]) -> None:
    path = exports[layout]
    keys = [k for k, _, _ in _front_to_back(path)]
    size = order.block_size
    epochs = []
    for epoch in range(2):
        perm = np.random.default_rng([order.seed, epoch]).permutation(-(-SAMPLES // size))
        seen = []
        for worker in range(2):
            want = [keys[i] for b in perm[worker::2]
                    for i in range(b * size, min((b + 1) * size, SAMPLES))]
            got = _epoch(path, order, worker, 2, epoch)
            assert got == want
            seen += got
        assert sorted(seen) == sorted(keys)  # every sample once per epoch, across the workers
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # a new permutation each epoch


def test_parquet_read_at_random_reads_a_row_group_per_sample_and_blocks_recover_it(
        exports: dict[str, Path]) -> None:
    path = exports["parquet"]
    export = adapters.open_export(path)
    sequential = count_pass(export, 0)
    rand = count_pass(export, 0, order=Order(RANDOM, seed=1))
    block = count_pass(export, 0, order=Order(BLOCK, seed=1, block=GROUP))
    assert sequential.exact and rand.exact and block.exact
    assert rand.samples == block.samples == sequential.samples == SAMPLES
    # One reader, the last row group read kept: a row group is read again whenever the next
    # sample lies in another one (three times in four with four groups), and each read costs
    # what reading that group front to back costs.
    # Blocks of a row group read each group once, as front to back does.
    groups = np.random.default_rng([1, 0]).permutation(SAMPLES) // GROUP
    reads = 1 + int(np.count_nonzero(groups[1:] != groups[:-1]))
    group_bytes = []
    for p in sorted(path.glob("*.parquet")):
        pf = pq.ParquetFile(str(p))
        before = read_chars()
        pf.read_row_group(0, use_threads=False)
        group_bytes.append(read_chars() - before)
    assert rand.read_bytes - block.read_bytes == pytest.approx(
        (reads - 4) * np.mean(group_bytes), rel=0.05)
    assert rand.files == block.files == sequential.files == 4  # each shard opened once
    seq_bytes = sequential.per_sample(sequential.read_bytes)
    assert block.per_sample(block.read_bytes) < 1.1 * seq_bytes
    # Exact: the same counts again, with fresh readers.
    again = count_pass(adapters.open_export(path), 0, order=Order(RANDOM, seed=1))
    assert (again.read_bytes, again.files, again.samples) == (rand.read_bytes, rand.files,
                                                             rand.samples)


@pytest.mark.parametrize("layout", ["mds", "litdata"])
def test_a_record_shard_read_at_random_reads_each_sample_and_its_offsets_alone(
        layout: str, exports: dict[str, Path]) -> None:
    path = exports[layout]
    export = adapters.open_export(path)
    sequential = count_pass(export, 0)
    rand = count_pass(export, 0, order=Order(RANDOM, seed=1))
    assert rand.exact and rand.samples == sequential.samples == formatlibs.SAMPLES
    # Unbuffered reads where the samples lie: every sample's bytes, its two offsets (8 bytes),
    # and each shard's sample count the first time it is opened.
    units = export.units()
    entries = [export._by_unit[u] for u in units]  # type: ignore[attr-defined]
    stored = 0
    for unit, e in zip(units, entries, strict=True):
        data = Path(unit).read_bytes()
        table = np.frombuffer(data, np.uint32, e.samples + 1, 4).astype(np.int64)
        stored += int((table[1:] - table[:-1]).sum())
    assert rand.read_bytes == stored + 8 * formatlibs.SAMPLES + 4 * len(entries)
    assert rand.mapped_bytes == 0
    # Opens as each library's reader opens: MDS's for every sample, litdata's when the sample
    # lies in another chunk than the last one read.
    starts = np.cumsum([0] + [e.samples for e in entries])
    shard_of = np.searchsorted(starts, np.random.default_rng([1, 0]).permutation(
        formatlibs.SAMPLES), side="right") - 1
    changes = 1 + int(np.count_nonzero(shard_of[1:] != shard_of[:-1]))
    assert rand.files == (formatlibs.SAMPLES if layout == "mds" else changes)
    # Read front to back, the same shards are mapped whole instead.
    assert sequential.mapped_bytes >= stored


def test_a_record_shard_in_an_object_store_is_fetched_whole_once_for_its_random_reads(
        exports: dict[str, Path], s3_env: Any) -> None:
    url = s3_env.create_bucket("random-mds")
    s3_env.upload_tree(exports["mds"], f"{url}/export")
    export = adapters.open_export(f"{url}/export")
    rand = count_pass(export, 0, order=Order(RANDOM, seed=1))
    assert rand.exact and rand.requests is not None
    # As the libraries download a shard into their cache before reading from it: one GET per
    # shard, its whole bytes, however the samples are permuted (fewer shards than are kept).
    shards = export.units()
    assert rand.requests.count["GET"] == len(shards) and rand.requests.count["RANGE"] == 0
    assert rand.requests.body_bytes == sum(Path(exports["mds"], Path(u).name).stat().st_size
                                           for u in shards)


def test_a_shard_compressed_whole_is_decompressed_once_for_its_random_reads(
        exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports["mds-zstd"])
    sequential = count_pass(export, 0)
    rand = count_pass(export, 0, order=Order(RANDOM, seed=1))
    # Each shard read whole once and kept (three shards, fewer than are kept open): the same
    # bytes as front to back, however the samples are permuted.
    assert (rand.read_bytes, rand.files) == (sequential.read_bytes, sequential.files)


def test_arrow_random_access_touches_only_the_rows_it_takes(exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports["arrow"])
    sequential = count_pass(export, 0)
    rand = count_pass(export, 0, order=Order(RANDOM, seed=1))
    # Memory-mapped and uncompressed: a row is taken in place, its own bytes touched.
    assert rand.mapped_bytes <= sequential.mapped_bytes
    assert rand.mapped_bytes > 0.5 * sequential.mapped_bytes


def test_bench_reports_the_order_the_row_groups_and_counts_the_same_at_any_workers(
        exports: dict[str, Path]) -> None:
    path = exports["parquet"]
    docs = [run_bench(path, BenchOptions(workers=(w,), batch_size=8, rounds=1, batches=3,
                                         warmup_batches=1, order=RANDOM))
            for w in (1, 3)]
    assert docs[0]["counts"] == docs[1]["counts"]
    doc = docs[0]
    assert doc["config"]["order"] == RANDOM and doc["config"]["block"] is None
    blocks = doc["export"]["blocks"]
    assert blocks["name"] == "row group" and blocks["whole"] and blocks["rows_p50"] == GROUP
    from dsbench.report.bench import render
    text = render(doc)
    assert "read in order: random" in text
    assert "each sample is read with its whole row group (p50 60 rows" in text
    figures = doc["runs"][0]["order_figures"]
    assert figures is not None and figures["units_per_batch"] > 1.5


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsbench", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_layout_without_random_access_is_refused_in_one_line(
        exports: dict[str, Path]) -> None:
    proc = _cli("bench", str(exports["wds"]), "--order", "random", "--seconds", "0.2")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert str(exports["wds"]) in proc.stderr and "--order shuffle" in proc.stderr
    with pytest.raises(DsbenchError, match="--block must be an integer >= 1"):
        BenchOptions(order=BLOCK, block=0)


def test_a_damaged_shard_read_at_random_is_one_line_naming_it(
        exports: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "pq"
    copy.mkdir()
    for p in sorted(exports["parquet"].glob("*.parquet")):
        (copy / p.name).write_bytes(p.read_bytes())
    damaged = sorted(copy.glob("*.parquet"))[2]
    damaged.write_bytes(damaged.read_bytes()[:40])
    out = tmp_path / "r.json"
    proc = _cli("bench", str(copy), "--order", "random", "--seconds", "0.2", "--rounds", "1",
                "--json", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert damaged.name in proc.stderr and not out.exists()
    # Skipped and counted, the others are read at random.
    proc = _cli("bench", str(copy), "--order", "random", "--seconds", "0.2", "--rounds", "1",
                "--on-error", "skip", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["counts"]["samples"] == SAMPLES - GROUP


def test_an_mds_shard_whose_header_disagrees_is_one_line_and_skipped_whole_at_random(
        exports: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "mds"
    shutil.copytree(exports["mds"], copy)
    damaged = sorted(copy.glob("*.mds"))[1]
    data = bytearray(damaged.read_bytes())
    data[0:4] = (1 + int.from_bytes(data[0:4], "little")).to_bytes(4, "little")
    damaged.write_bytes(bytes(data))  # the same size: only its sample count is wrong
    out = tmp_path / "r.json"
    proc = _cli("bench", str(copy), "--order", "random", "--seconds", "0.2", "--rounds", "1",
                "--json", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert damaged.name in proc.stderr and "by its header" in proc.stderr
    assert not out.exists()
    # Skipped, its samples are left out and the others read at random; the shard is opened
    # once, not again for each of its samples.
    export = adapters.open_export(copy)
    skipped: list[str] = []
    bad = export._by_unit[str(damaged)].samples  # type: ignore[attr-defined]
    counts = count_pass(export, 0, order=Order(RANDOM, seed=1),
                        skip=lambda err: skipped.append(str(err)))
    assert counts.samples == formatlibs.SAMPLES - bad
    assert len(skipped) == bad and all(damaged.name in e for e in skipped)
    assert counts.files == formatlibs.SAMPLES - bad + 1
