"""`dsbench budget`: the arithmetic, what the incident's figures imply, and its refusals
(the CLI's one-line errors: tests/test_cli_errors.py)."""

from __future__ import annotations

import json

import pytest

from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.model.budget import Job, budget, capacity, implications

INCIDENT = ["--gpus", "128", "--gpus-per-node", "8", "--mean-step", "1.4", "--p99-step", "6.8",
            "--gpu-util", "61%", "--host-cpu", "95%", "--slowdown", "2.1x"]


def test_capacity_arithmetic() -> None:
    cap = capacity(Job(gpus=16, batch_size=32, compute_s=0.25, cores_per_node=96,
                       cpu_s_per_sample=0.1))
    assert cap["nodes"] == 2
    assert cap["needed_samples_per_s_per_node"] == pytest.approx(8 * 32 / 0.25)
    assert cap["available_samples_per_s_per_node"] == pytest.approx((96 - 8) / 0.1)
    assert cap["headroom"] == pytest.approx(880 / 1024)
    assert cap["gpu_util_bound"] == pytest.approx(880 / 1024)
    assert cap["cores_needed_per_node"] == pytest.approx(1024 * 0.1 + 8)
    assert cap["needed_samples_per_s_job"] == pytest.approx(2 * 1024)


def test_what_the_incident_figures_imply() -> None:
    o = implications(Job(gpus=128, mean_step_s=1.4, p99_step_s=6.8, gpu_util=0.61,
                         host_cpu=0.95, slowdown=2.1))
    assert o["gpu_busy_s_per_step"] == pytest.approx(0.61 * 1.4)
    assert o["gpu_idle_share"] == pytest.approx(0.39)
    assert o["previous_step_s"] == pytest.approx(1.4 / 2.1)
    # 0.854 s of GPU work cannot fit in last month's 0.667 s step: the figures disagree.
    assert o["util_consistent_with_slowdown"] is False
    assert o["util_bound_if_compute_unchanged"] == pytest.approx(1 / 2.1)
    assert o["cpu_saturated"] is True
    assert o["cpu_per_sample_growth_at_least"] == pytest.approx(2.1 * 0.95)
    assert o["tail_ratio"] == pytest.approx(6.8 / 1.4)
    q = o["per_rank_stall_rate_for_p99"]
    assert 1 - (1 - q) ** 128 == pytest.approx(0.01)  # type: ignore[operator]
    assert o["slow_share_at_half_ranks"] == pytest.approx(1 - (1 - q) ** 64)  # type: ignore
    assert o["speedup_for_target"] == pytest.approx(1.4 / (0.854 / 0.9))


def test_cores_and_batch_turn_host_cpu_into_cpu_per_sample() -> None:
    o = implications(Job(gpus=128, mean_step_s=1.4, gpu_util=0.61, host_cpu=0.95,
                         cores_per_node=96, batch_size=32))
    loader_cores = 0.95 * 96 - 8
    assert o["loader_busy_cores_per_node"] == pytest.approx(loader_cores)
    assert o["cpu_s_per_sample_consistent"] == pytest.approx(loader_cores * 1.4 / (8 * 32))
    assert o["samples_per_s_per_node"] == pytest.approx(8 * 32 / 1.4)


def test_consistent_figures_are_not_flagged() -> None:
    o = implications(Job(gpus=8, mean_step_s=1.0, gpu_util=0.4, slowdown=2.0))
    assert o["util_consistent_with_slowdown"] is True
    assert o["added_s_per_step"] == pytest.approx(0.5)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"gpu_util": 1.2, "mean_step_s": 1.0}, "--gpu-util"),
    ({"gpu_util": 0.0, "mean_step_s": 1.0}, "--gpu-util"),
    ({"mean_step_s": -1.0, "gpu_util": 0.5}, "--mean-step"),
    ({"mean_step_s": 2.0, "p99_step_s": 1.0, "gpu_util": 0.5}, "below --mean-step"),
    ({"p99_step_s": 1.0}, "needs --mean-step"),
    ({"host_cpu": 1.5, "mean_step_s": 1.0, "gpu_util": 0.5}, "--host-cpu"),
    ({"slowdown": 0.0, "mean_step_s": 1.0, "gpu_util": 0.5}, "--slowdown"),
    ({"compute_s": 0.0}, "--compute"),
    ({"cores_per_node": 8.0}, "no cores left"),
    ({"gpus_per_node": 0}, "--gpus-per-node"),
])
def test_impossible_figures_are_refused(kw: dict[str, float], needle: str) -> None:
    with pytest.raises(DsbenchError, match=needle):
        Job(gpus=128, **kw)  # type: ignore[arg-type]


def test_partial_inputs_say_what_is_missing() -> None:
    with pytest.raises(DsbenchError, match="--cores-per-node"):
        budget(Job(gpus=8, batch_size=32, compute_s=0.25, cpu_s_per_sample=0.01))
    with pytest.raises(DsbenchError, match="nothing to compute"):
        budget(Job(gpus=8, batch_size=32))
    with pytest.raises(DsbenchError, match="--mean-step and --gpu-util"):
        budget(Job(gpus=8, host_cpu=0.9))


def test_cli_prints_every_figure_it_was_fed_and_calls_itself_a_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", *INCIDENT]) == 0
    out = capsys.readouterr().out
    for fed in ("128 (16 nodes of 8)", "1.40 s", "6.80 s", "61.0%", "95.0%",
                "2.10x slower than before"):
        assert fed in out, fed
    assert "a model, not a measurement" in out
    assert "inconsistent" in out and "fan-out" in out


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", *INCIDENT, "--gpu-batch", "32", "--cores-per-node", "96",
                 "--compute", "0.6", "--cpu-per-sample", "0.4", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["gpu_util"] == pytest.approx(0.61)
    assert doc["capacity"]["headroom"] == pytest.approx((88 / 0.4) / (8 * 32 / 0.6))
    assert doc["observed"]["gpu_idle_share"] == pytest.approx(0.39)


@pytest.mark.parametrize("util", ["61", "sixty", "150%"])
def test_cli_refuses_a_utilization_it_would_have_to_guess(
        util: str, capsys: pytest.CaptureFixture[str]) -> None:
    if util == "150%":  # parses, then fails validation in the model
        assert main(["budget", "--gpus", "8", "--mean-step", "1", "--gpu-util", util]) == 2
    else:
        with pytest.raises(SystemExit) as exc:
            main(["budget", "--gpus", "8", "--mean-step", "1", "--gpu-util", util])
        assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
