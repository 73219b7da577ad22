"""`bench --epochs E`: whole epochs, each from fresh workers, each epoch's start measured."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_export

from dsbench import adapters
from dsbench.adapters.base import RawSample, SkipHandler
from dsbench.errors import DsbenchError
from dsbench.loader.epochs import worker_share
from dsbench.loader.options import BenchOptions
from dsbench.loader.order import Order
from dsbench.loader.runner import run_bench
from dsbench.model.cluster import extrapolate
from dsbench.model.node import ClusterSpec
from dsbench.report.bench import render
from dsbench.report.extrapolation import render as render_extrapolation
from dsbench.results import schema

SLOW_S = 0.8  # a slow start: what the first read of each worker process waits


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 4 shards of 24 samples, written by webdataset's own writer
    return write_export(tmp_path_factory.mktemp("epochs"), "wds", 96, shard_samples=24)


class SlowStart:
    """The export, opened by each worker, whose first read in a process waits SLOW_S: a slow
    start (a cold store, a large index to load) on every epoch's fresh workers."""

    started = False

    def __init__(self, path: str) -> None:
        self.export = adapters.open_export(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.export, name)

    def read_units(self, units: Sequence[str], skip: SkipHandler = None) -> Iterator[RawSample]:
        if not SlowStart.started:
            SlowStart.started = True
            time.sleep(SLOW_S)
        return self.export.read_units(units, skip)


def _opts(rounds: int = 1, epochs: int = 2, **extra: Any) -> BenchOptions:
    # Every epoch starts its workers afresh (a second of CPU each): few rounds and epochs.
    return BenchOptions(workers=(2,), batch_size=8, rounds=rounds, epochs=epochs, **extra)


@pytest.fixture(scope="module")
def shuffled(shards: Path) -> dict[str, Any]:
    """Two rounds of three shuffled epochs by dsbench's loader: checked epoch by epoch below,
    and what the epochs of torch's DataLoader are held against (its first two)."""
    return run_bench(shards, _opts(rounds=2, epochs=3, order="shuffle", shuffle_buffer=12))


@pytest.mark.parametrize("order", ["sequential", "shuffle"])
def test_each_epoch_reads_its_share_from_fresh_workers_and_says_when_it_started(
        shards: Path, order: str, request: pytest.FixtureRequest) -> None:
    doc = (request.getfixturevalue("shuffled") if order == "shuffle"
           else run_bench(shards, _opts(epochs=3, order=order, shuffle_buffer=12)))
    run = doc["runs"][0]
    export = adapters.open_export(shards)
    assert doc["config"]["epochs"] == 3
    for rnd in run["rounds"]:
        epochs = rnd["epochs"]
        assert [e["epoch"] for e in epochs] == [0, 1, 2]
        for e in epochs:
            # Each worker gives as many full batches as the smallest share holds.
            shares = [worker_share(export, Order(order, 12), e["epoch"], w, 2) for w in (0, 1)]
            assert e["samples"] == 2 * (min(shares) // 8) * 8 == 8 * e["batches"]
            assert 0 < e["time_to_first_batch_s"] <= e["wall_s"]
            assert e["boundary_wait_s"] >= e["time_to_first_batch_s"]
        assert rnd["samples"] == sum(e["samples"] for e in epochs)
        # The round's time holds every epoch's start.
        assert rnd["wall_s"] >= sum(e["wall_s"] for e in epochs)
    assert [e["epoch"] for e in run["epochs"]] == [0, 1, 2]
    text = render(doc)
    rounds = "rounds" if len(run["rounds"]) > 1 else "round"
    assert f"{len(run['rounds'])} {rounds} of 3 epochs, each from fresh workers" in text
    assert "time to first batch" in text and "wait at the boundary" in text


def test_torchs_dataloader_reads_the_same_epochs_from_its_own_fresh_workers(
        shards: Path, shuffled: dict[str, Any]) -> None:
    # dsbench's loader's first round, its first two epochs (an epoch's shares and order do not
    # depend on how many follow it).
    ours = shuffled["runs"][0]["rounds"][0]["epochs"][:2]
    # torch's workers import torch (seconds each): one round of two epochs.
    doc = run_bench(shards, _opts(order="shuffle", shuffle_buffer=12, backend="torch"))
    theirs = doc["runs"][0]["rounds"][0]["epochs"]
    assert doc["config"]["backend"] == "torch"
    assert [e["epoch"] for e in theirs] == [0, 1]
    # The same order and shares: the same samples per epoch, in the same full batches.
    assert [(e["samples"], e["batches"]) for e in theirs] == \
        [(e["samples"], e["batches"]) for e in ours]
    for e in theirs:
        assert 0 < e["time_to_first_batch_s"] <= e["wall_s"]
        assert e["boundary_wait_s"] >= e["time_to_first_batch_s"]


@pytest.fixture(scope="module")
def fast_and_slow(shards: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return run_bench(shards, _opts()), run_bench(shards, _opts(opener=SlowStart))


def test_a_slow_worker_start_shows_at_every_epoch_boundary(
        fast_and_slow: tuple[dict[str, Any], dict[str, Any]]) -> None:
    fast, slow = (doc["runs"][0]["epochs"] for doc in fast_and_slow)
    for f, s in zip(fast, slow, strict=True):
        assert s["time_to_first_batch_s"] >= SLOW_S
        assert s["boundary_wait_s"] - f["boundary_wait_s"] > SLOW_S / 2


def test_the_model_charges_each_epoch_the_measured_wait_at_its_start(
        fast_and_slow: tuple[dict[str, Any], dict[str, Any]]) -> None:
    cluster = ClusterSpec(nodes=2, gpus_per_node=2, batch_size=8)
    out = []
    for doc in fast_and_slow:
        waits = [e["boundary_wait_s"] for e in doc["runs"][0]["epochs"]]
        got = extrapolate(doc, cluster, np.random.default_rng(0), steps=500, scaling=(4,))
        epoch = got["epoch_start"]
        assert epoch["wait_s"] == pytest.approx(statistics.median(waits))
        # The export's 96 samples at 4 ranks x 8: three steps, then the wait once.
        assert epoch["samples"] == 96 and epoch["steps"] == 3
        within = 3 * got["step_time_s"]["mean"]
        assert epoch["epoch_s"] == pytest.approx(within + epoch["wait_s"])
        assert epoch["gpu_util"] == pytest.approx(got["gpu_util"] * within / epoch["epoch_s"])
        schema.validate(got, "extrapolation")
        out.append(got)
    fast, slow = (o["epoch_start"] for o in out)
    assert slow["wait_s"] - fast["wait_s"] > SLOW_S / 2
    assert slow["gpu_util"] < fast["gpu_util"]
    assert "Epoch starts" in render_extrapolation(out[1])
    # A result without epochs has no measured start to charge.
    plain = copy.deepcopy(fast_and_slow[0])
    for run in plain["runs"]:
        run.pop("epochs")
    got = extrapolate(plain, cluster, np.random.default_rng(0), steps=500, scaling=(4,))
    assert got["epoch_start"] is None and "Epoch starts" not in render_extrapolation(got)


def test_epochs_with_a_step_time_give_the_data_wait_before_every_step(shards: Path) -> None:
    rnd = run_bench(shards, _opts(step_time_s=0.001))["runs"][0]["rounds"][0]
    for e in rnd["epochs"]:
        waits = e["step_waits_s"]
        assert len(waits) == e["batches"]
        # The first wait is the end of the epoch's start (its workers were started before it);
        # the steps' waits and sleeps fit in the epoch.
        assert 0 < waits[0] <= e["time_to_first_batch_s"]
        assert sum(waits) + 0.001 * len(waits) <= e["wall_s"]


@pytest.mark.parametrize(("extra", "needle"), [
    ({"epochs": 0}, "--epochs must be an integer >= 1"),
    ({"epochs": 2, "ceiling": True}, "not with --ceiling"),
])
def test_bad_epoch_options_are_refused(extra: dict[str, Any], needle: str) -> None:
    with pytest.raises(DsbenchError, match=needle):
        BenchOptions(**extra)


def test_an_epoch_too_small_for_a_batch_is_refused_in_one_line(shards: Path) -> None:
    with pytest.raises(DsbenchError, match="fewer than a batch of 64"):
        run_bench(shards, BenchOptions(workers=(2,), batch_size=64, rounds=1, epochs=1))
