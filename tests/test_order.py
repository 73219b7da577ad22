"""`bench --order`: what each worker reads, epoch after epoch, sequentially or shuffled; results
say which order they were read in, and two orders are not compared unless asked."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import resultdocs as rd
from conftest import write_export

from dsbench import adapters
from dsbench.analysis import compare
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.loader.batch_order import batch_where, order_figures
from dsbench.loader.options import BenchOptions
from dsbench.loader.order import BLOCK, RANDOM, SEQUENTIAL, SHUFFLE, Order, WorkerSamples
from dsbench.loader.pipeline import collate_fields, parse_fields
from dsbench.loader.runner import run_bench
from dsbench.results.document import write_result
from dsbench.results.types import OrderFigures

SHARD = 6


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 10 shards of 6 samples, written by webdataset's own writer
    return write_export(tmp_path_factory.mktemp("order"), "wds", 60, shard_samples=SHARD)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_export(tmp_path_factory.mktemp("order"), "files", 20)


def _epochs(path: Path, order: Order, worker: int, workers: int, epochs: int
            ) -> list[list[tuple[str, str]]]:
    """(key, source file) of each sample a worker reads, epoch by epoch."""
    export = adapters.open_export(path)
    share = sum(export.unit_samples(u) for u in export.units()[worker::workers])
    stream = WorkerSamples(export, order, worker, workers)
    return [[(s.key, s.source) for s in itertools.islice(stream, share)] for _ in range(epochs)]


def test_sequential_reads_each_workers_units_in_order_every_epoch(shards: Path) -> None:
    export = adapters.open_export(shards)
    want = [s.key for s in export.read_units(export.units()[1::2])]
    for epoch in _epochs(shards, Order(SEQUENTIAL), 1, 2, 2):
        assert [k for k, _ in epoch] == want


@pytest.mark.parametrize("buffer", [0, 12])
def test_shuffle_reads_every_sample_once_per_epoch_in_a_new_order(shards: Path,
                                                                 buffer: int) -> None:
    order = Order(SHUFFLE, buffer=buffer, seed=3)
    per_worker = [_epochs(shards, order, w, 2, 3) for w in range(2)]
    everything = sorted(s.key for s in adapters.open_export(shards).read())
    for e in range(3):
        keys = [k for w in range(2) for k, _ in per_worker[w][e]]
        assert sorted(keys) == everything  # each sample once across the workers
    sequential = _epochs(shards, Order(SEQUENTIAL), 0, 2, 1)[0]
    first, second, third = per_worker[0]
    assert first != sequential and first != second != third
    # The same seed gives the same epochs: the order is a function of (seed, epoch, worker).
    assert _epochs(shards, order, 0, 2, 3) == per_worker[0]


def test_without_a_buffer_a_shard_is_read_whole_and_with_one_shards_mix(shards: Path) -> None:
    def runs(epoch: list[tuple[str, str]]) -> int:
        """How many stretches of consecutive samples from one shard the epoch holds."""
        return sum(1 for _ in itertools.groupby(src for _, src in epoch))

    alone = _epochs(shards, Order(SHUFFLE, buffer=0), 0, 1, 1)[0]
    assert runs(alone) == 10  # shards permuted, each read front to back
    mixed = _epochs(shards, Order(SHUFFLE, buffer=12), 0, 1, 1)[0]
    assert runs(mixed) > 20


def test_per_sample_files_are_permuted_sample_by_sample(files: Path) -> None:
    export = adapters.open_export(files)
    epochs = _epochs(files, Order(SHUFFLE, buffer=1000, seed=1), 0, 1, 2)
    assert sorted(k for k, _ in epochs[0]) == sorted(export.units())
    assert epochs[0] != epochs[1] != sorted(epochs[0])


def test_bench_says_its_order_and_compare_refuses_two_orders_unless_asked(
        shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    window = ["--workers", "1", "--seconds", "0.2", "--rounds", "1", "--batch-size", "4"]
    paths = {}
    for order in (SEQUENTIAL, SHUFFLE):
        paths[order] = tmp_path / f"{order}.json"
        assert main(["bench", str(shards), *window, "--order", order, "--shuffle-buffer", "12",
                     "--json", str(paths[order])]) == 0
        out = capsys.readouterr().out
        doc = json.loads(paths[order].read_text())
        assert doc["config"]["order"] == order
        if order == SHUFFLE:
            assert doc["config"]["shuffle_buffer"] == 12
            assert "read in order: shuffle (buffer 12 samples)" in out
        else:
            assert doc["config"]["shuffle_buffer"] is None
            assert "read in order: sequential" in out
    # A shuffled read opens the same shards as a sequential one: the counts are the export's.
    docs = {o: json.loads(p.read_text()) for o, p in paths.items()}
    assert docs[SHUFFLE]["counts"] == docs[SEQUENTIAL]["counts"]

    assert main(["compare", str(paths[SEQUENTIAL]), str(paths[SHUFFLE]), "--no-cluster"]) == 2
    err = capsys.readouterr().err
    assert "read in different orders: sequential vs shuffle (buffer 12 samples)" in err
    assert err.count("\n") == 1
    assert main(["compare", str(paths[SEQUENTIAL]), str(paths[SHUFFLE]), "--no-cluster",
                 "--any-order"]) == 0
    assert "read in different orders: base sequential, candidate shuffle (buffer 12 samples)" \
        in capsys.readouterr().out


def test_a_result_from_before_orders_existed_reads_as_sequential(tmp_path: Path) -> None:
    old = rd.document([rd.run(1)])
    assert "order" not in old["config"]
    shuffled = rd.document([rd.run(1)], order=SHUFFLE, shuffle_buffer=1000)
    write_result(tmp_path / "old.json", old)
    assert compare.order_of(old) == SEQUENTIAL
    assert compare.not_comparable(old, rd.document([rd.run(1)], order=SEQUENTIAL,
                                                   shuffle_buffer=None)) == []
    assert compare.not_comparable(old, shuffled) == [
        "read in different orders: sequential vs shuffle (buffer 1000 samples) (--any-order "
        "compares them)"]
    assert compare.not_comparable(old, shuffled, any_order=True) == []


@pytest.mark.parametrize(("extra", "needle"), [
    ({"order": "zigzag"}, "--order must be sequential or shuffle or random or block"),
    ({"order": "block", "block": 0}, "--block must be an integer >= 1"),
    ({"order": "random", "backend": "native"}, "with its own shuffle"),
    ({"order": "block", "backend": "native"}, "with its own shuffle"),
    ({"order": SHUFFLE, "shuffle_buffer": -1}, "--shuffle-buffer must be an integer >= 0"),
    ({"order": SHUFFLE, "dataset": "m:f"}, "a --dataset reads in its own order"),
    ({"order": SHUFFLE, "backend": "native", "shuffle_buffer": 0},
     "--shuffle-buffer must be an integer >= 1 with --backend native --order shuffle"),
])
def test_bad_order_options_are_refused_before_anything_runs(extra: dict[str, object],
                                                            needle: str) -> None:
    with pytest.raises(DsbenchError, match=needle):
        BenchOptions(**extra)  # type: ignore[arg-type]


def _expected(path: Path, order: Order, batch: int, skip: int, take: int) -> OrderFigures:
    """The order figures of batches skip..skip+take of one worker's stream, replayed here."""
    export = adapters.open_export(path)
    stream = WorkerSamples(export, order, 0, 1)
    wheres = []
    for i in range(skip + take):
        raws = list(itertools.islice(stream, batch))
        where = batch_where(stream, [r.key for r in raws],
                            collate_fields([parse_fields(r) for r in raws]))
        if i >= skip:
            assert where is not None
            wheres.append(where)
    return order_figures(export, wheres)


@pytest.mark.parametrize(("layout", "order"), [
    ("wds", Order(SEQUENTIAL)), ("wds", Order(SHUFFLE, buffer=12, seed=0)),
    ("files", Order(SEQUENTIAL)), ("files", Order(SHUFFLE, seed=0)),
    ("files", Order(RANDOM, seed=0)), ("files", Order(BLOCK, seed=0, block=5))])
def test_the_order_figures_are_those_of_the_order_the_workers_read(
        layout: str, order: Order, shards: Path, files: Path) -> None:
    path = shards if layout == "wds" else files
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=7, warmup_batches=1,
                        order=order.name, shuffle_buffer=order.buffer, block=order.block)
    got = run_bench(path, opts)["runs"][0]["order_figures"]
    # One worker: the warm-up batch, then the 7 measured ones, in the stream's own order.
    want = _expected(path, order, 4, 1, 7)
    assert got == pytest.approx(want)
    assert got["batches"] == 7 and got["label_entropy_bits"] is not None
    if order.name == SEQUENTIAL:
        assert got["source_distance"] == 1.0  # front to back, 60 and 20 samples: no wrap yet
    else:
        assert got["source_distance"] > 1.0


def test_order_figures_count_units_labels_and_distances(shards: Path) -> None:
    export = adapters.open_export(shards)
    # shard 0 samples 0-2 and shard 1 sample 0 (source positions 0, 1, 2, 6); then shard 3
    # sample 5 and shard 0 sample 0 (positions 23 and 0)
    figures = order_figures(export, [([0, 0, 0, 1], [0, 1, 2, 0], [3, 3, 7, 7]),
                                     ([3, 0], [5, 0], [3, 9])])
    assert figures["units_per_batch"] == pytest.approx((2 + 2) / 2)
    # Each batch holds two labels equally often: 1 bit. All six: label 3 three times, 7 twice,
    # 9 once.
    assert figures["label_entropy_bits"] == pytest.approx(1.0)
    assert figures["label_entropy_all_bits"] == pytest.approx(
        -sum(p * math.log2(p) for p in (3 / 6, 2 / 6, 1 / 6)))
    assert figures["source_distance"] == pytest.approx((1 + 1 + 4 + 23) / 4)


def test_extrapolate_says_which_order_its_measurement_was_read_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, extra in (("old", {}), ("shuffled", {"order": SHUFFLE, "shuffle_buffer": 500})):
        path = tmp_path / f"{name}.json"
        write_result(path, rd.document([rd.run(1)], **extra))
        assert main(["extrapolate", str(path), "--steps", "200", "--json", "-"]) == 0
        doc = json.loads(capsys.readouterr().out)
        want = "shuffle (buffer 500 samples)" if extra else SEQUENTIAL
        assert doc["loader"]["order"] == want
        cpu = next(r for r in doc["inputs"] if r["name"] == "cpu_s_per_sample")
        assert cpu["note"].endswith(f"read in order: {want}")


def test_the_ceiling_is_the_loader_handing_over_built_batches(
        shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ceiling.json"
    assert main(["bench", str(shards), "--workers", "1", "--seconds", "0.2", "--rounds", "2",
                 "--batch-size", "4", "--ceiling", "--json", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    c = run["ceiling"]
    # Nothing read or decoded: the same loader is many times faster than reading.
    assert c["samples_per_s"] > run["samples_per_s"]
    lo, hi = c["fraction_ci95"]
    assert 0 < lo <= c["fraction"] <= hi and c["fraction"] < 1
    assert "of the loader's ceiling" in capsys.readouterr().out


def test_the_ceiling_is_refused_where_dsbench_does_not_build_the_batches() -> None:
    with pytest.raises(DsbenchError, match="--ceiling replays built batches"):
        BenchOptions(ceiling=True, backend="torch")


@pytest.mark.parametrize("order", [Order(SEQUENTIAL), Order(SHUFFLE, buffer=12, seed=5)])
def test_each_sample_is_located_in_its_own_unit_at_its_own_offset(shards: Path,
                                                                  order: Order) -> None:
    export = adapters.open_export(shards)
    units = export.units()
    content = {u: [s.key for s in export.read_units([u])] for u in units}
    stream = WorkerSamples(export, order, 1, 2)
    for raw in itertools.islice(stream, 45):  # past the worker's first epoch of 30
        where = stream.where(raw.key)
        assert where is not None
        unit, offset = where
        assert content[units[unit]][offset] == raw.key
        assert Path(raw.source).name == Path(units[unit]).name
