"""The model's object store: the job's requests per second at the target scale against the
store's limit per prefix, a job past it held to it (throttle-bound), and an epoch's bill, from
the profile's stated figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from layouts import assert_one_line_error

from dsbench.cli import main
from dsbench.model.cluster import extrapolate
from dsbench.model.costs import LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.model.profiles import PROFILES
from dsbench.results import schema

S3 = ClusterSpec(storage=PROFILES["s3"])


def _model(cost: LoaderCost, cluster: ClusterSpec = S3, **kw: int) -> dict:
    return extrapolate(cost, cluster, np.random.default_rng(0), steps=400, scaling=(8,), **kw)


def per_sample_files(cpu: float = 2e-3) -> LoaderCost:
    """The incident's after: two files (a JPEG and a JSON) per sample."""
    return LoaderCost.stated(cpu, files_per_sample=2.0, bytes_per_sample=110e3)


def test_a_per_sample_layout_at_128_gpus_is_past_s3s_limit_and_held_to_it() -> None:
    doc = _model(per_sample_files())
    schema.validate(doc, "extrapolation")
    store = doc["store"]
    job = 128 * S3.batch_size / doc["step_time_s"]["mean"]
    assert store["job_samples_per_s"] == pytest.approx(job)
    assert store["requests_per_s"] == pytest.approx(2 * job)
    assert store["requests_per_s"] > 5500 and store["throttle_bound"]
    # Held to 5,500 GETs/s at 2 per sample: 2,750 samples/s, so each step of 128 x batch
    # samples takes at least that long, and the GPUs are busy that much less.
    assert store["job_samples_per_s_at_limit"] == pytest.approx(2750)
    assert store["step_floor_s"] == pytest.approx(128 * S3.batch_size / 2750)
    assert store["gpu_util_at_limit"] < doc["gpu_util"]


def test_shards_stay_within_the_limit_and_more_prefixes_lift_it() -> None:
    shards = LoaderCost.stated(2e-3, files_per_sample=1 / 250, bytes_per_sample=95e3)
    assert not _model(shards)["store"]["throttle_bound"]
    spread = _model(per_sample_files(), prefixes=8)["store"]
    assert spread["requests_per_s_per_prefix"] == pytest.approx(spread["requests_per_s"] / 8)
    assert not spread["throttle_bound"]


def test_an_epochs_bill_is_its_requests_and_bytes_at_the_profiles_prices() -> None:
    bill = _model(per_sample_files(), epoch_samples=10_000_000)["store"]["epoch"]
    assert bill["requests"] == pytest.approx(20_000_000)
    assert bill["gib_read"] == pytest.approx(1100e9 / 2**30)
    # $0.0004 per 1,000 GETs; reads inside the Region move bytes for nothing.
    assert bill["usd"] == pytest.approx(8.0)
    priced = dataclasses.replace(PROFILES["s3"], usd_per_gb_read=0.09)
    bill = _model(per_sample_files(), ClusterSpec(storage=priced),
                  epoch_samples=10_000_000)["store"]["epoch"]
    assert bill["usd"] == pytest.approx(8.0 + 1100e9 / 2**30 * 0.09)


def test_local_disk_makes_no_requests_and_a_store_result_brings_its_own() -> None:
    assert _model(per_sample_files(), ClusterSpec())["store"] is None
    measured = dataclasses.replace(per_sample_files(), requests_per_sample=3.0)
    store = _model(measured)["store"]
    assert store["requests_per_sample"] == 3.0
    assert store["requests_basis"] == "measured in the object store"


def test_extrapolate_prints_the_stores_load_and_bill(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    out = tmp_path / "x.json"
    assert main(["extrapolate", "--cpu-per-sample", "0.002", "--files-per-sample", "2",
                 "--bytes-per-sample", "110000", "--storage", "s3", "--steps", "300",
                 "--epoch-samples", "1000000", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "THROTTLE-BOUND" in text and "requests/s per prefix" in text
    assert "one epoch of 1,000,000 samples" in text and "$0.80" in text
    assert json.loads(out.read_text())["store"]["throttle_bound"]


@pytest.mark.parametrize(("argv", "needle"), [(["--prefixes", "0"], "--prefixes"),
                                              (["--epoch-samples", "0"], "--epoch-samples")])
def test_bad_store_options_are_one_line(argv: list[str], needle: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extrapolate", "--cpu-per-sample", "0.002", "--storage", "s3", *argv]) == 2
    assert_one_line_error(capsys.readouterr().err, "extrapolate", needle)
