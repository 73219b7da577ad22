"""`dsbench extrapolate`: bad result files, the --json object and the text report.

Bad options: tests/test_cli_errors.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.spec import parse_spec
from dsbench.loader.runner import BenchOptions, run_bench
from dsbench.results import document as results


@pytest.fixture(scope="module")
def bench_doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A real bench result: 12 per-sample files of 64 x 48 JPEGs, swept over 1 and 2 workers."""
    out = tmp_path_factory.mktemp("cli") / "export"
    spec = parse_spec({"name": "tiny-files", "layout": "files", "fields_as": "json",
                       "image": {"sizes": "fixed", "width": 64, "height": 48},
                       "fields": {"label": {"type": "int"}}}, "test")
    generate(spec, out, samples=12, jobs=1)
    return run_bench(out, BenchOptions(workers=(1, 2), batch_size=2, rounds=1, batches=4,
                                       warmup_batches=1))


FAST = ["--steps", "300", "--scaling", "2,4", "--nodes", "1"]
REQUIRED_KEYS = {"step_time_s", "gpu_util", "supply_samples_per_s_per_node",
                 "demand_samples_per_s_per_node", "verdict", "scaling", "timeline"}


@pytest.fixture
def result(tmp_path: Path, bench_doc: dict[str, object]) -> Path:
    return results.write_result(tmp_path / "result.json", bench_doc)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["extrapolate", *argv, "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one object on one line
    return json.loads(out)


def test_json_object_from_a_result_file(result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, str(result), *FAST, "--compute", "normal:0.25,0.01")
    assert doc.keys() >= REQUIRED_KEYS
    assert set(doc["step_time_s"]) >= {"mean", "p50", "p99", "max"}  # type: ignore[arg-type]
    st = doc["step_time_s"]
    # A few ms of loader CPU per batch against 250 ms of GPU compute: the GPUs set the step,
    # and every step waits for the slowest of the node's 8 ranks. The mean of the largest of 8
    # standard normals is 1.4236, so a step takes 0.25 + 1.4236 x 0.01 s on average, and is
    # shorter than 0.25 s only when all 8 are (1 step in 256).
    assert doc["verdict"] == "compute-bound"
    assert st["mean"] == pytest.approx(0.25 + 1.4236 * 0.01, abs=0.002)  # type: ignore[index]
    assert st["p50"] > 0.25  # type: ignore[index]
    # A GPU computes for 0.25 s of each step on average and waits for the rest.
    assert doc["gpu_util"] == pytest.approx(0.25 / st["mean"], rel=0.01)  # type: ignore
    rows = doc["scaling"]
    assert [r["ranks"] for r in rows] == [2, 4]  # type: ignore[union-attr]
    for r in rows:  # type: ignore[union-attr]
        assert {"ranks", "mean_s", "p50_s", "p99_s", "slow_step_fraction"} <= r.keys()
    assert isinstance(doc["timeline"]["gpu_util"], list)  # type: ignore[index]
    sources = {r["name"]: r["source"] for r in doc["inputs"]}  # type: ignore[union-attr]
    assert sources["cpu_s_per_sample"] == "measured"
    assert sources["batch_size"] == "measured"
    assert sources["compute"] == "stated"
    assert sources["cores_per_node"] == "default"


def test_stated_cost_instead_of_a_result(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "--cpu-per-sample", "0.004", "--cpu-cv", "0.5", *FAST,
                   "--storage", "efs", "--files-per-sample", "2", "--bytes-per-sample", "1e5")
    sources = {r["name"]: r["source"] for r in doc["inputs"]}  # type: ignore[union-attr]
    assert sources["cpu_s_per_sample"] == "stated"
    assert sources["files_per_sample"] == "stated"
    assert sources["storage"] == "profile"
    assert doc["node"]["latency_s"] == pytest.approx(2 * 2e-3)  # type: ignore[index]


def test_one_rank_count_in_the_table_is_said_once_and_grows_from_one_rank(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extrapolate", "--cpu-per-sample", "0.0001", "--compute", "normal:0.25,0.01",
                 "--stall-prob", "0.01", "--stall-time", "1", "--scaling", "8", "--nodes", "1",
                 "--steps", "2000"]) == 0
    text = capsys.readouterr().out
    tail = next(line for line in text.splitlines() if "waits for the slowest rank" in line)
    assert tail.count("at 8 ranks") == 1
    # A 1 s stall in 1% of one rank's steps holds up about 8% of a 8-rank job's steps: that
    # is growth from one rank, not a tail that "hardly grows".
    assert "The tail grows with the number of ranks" in tail and "hardly" not in tail


def test_override_of_a_measured_figure_is_marked_stated(
        result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, str(result), *FAST, "--files-per-sample", "0.001")
    sources = {r["name"]: r["source"] for r in doc["inputs"]}  # type: ignore[union-attr]
    assert sources["files_per_sample"] == "stated"
    assert sources["bytes_per_sample"] == "measured"


def test_same_seed_same_json(result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(result), *FAST, "--stall-prob", "0.02", "--stall-time", "0.5", "--seed", "4"]
    assert run_json(capsys, *argv) == run_json(capsys, *argv)


def test_text_report(result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["extrapolate", str(result), *FAST, "--storage", "s3", "--cores-per-node", "24",
            "--gpu-batch", "32"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for part in ("a model, not a measurement", "Inputs", "Per node", "verdict  input-bound",
                 "Step time", "GPU utilization timeline", "What if", "Scaling",
                 "Every step waits for the slowest rank", "ms/sample"):
        assert part in out, part
    assert "█" in out


def test_bad_result_files_exit_2_naming_file_and_key(
        tmp_path: Path, bench_doc: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "runs": [')
    assert main(["extrapolate", str(broken), *FAST]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and err.count("\n") == 1
    doc = json.loads(json.dumps(bench_doc))
    del doc["runs"][0]["batch_cpu_s"]
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps(doc))
    assert main(["extrapolate", str(missing), *FAST]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "batch_cpu_s" in err and err.count("\n") == 1
    assert main(["extrapolate", str(tmp_path / "nope.json"), *FAST]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["extrapolate", "--cpu-per-sample", "x"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_memory_of_a_nodes_loaders_from_the_measured_peak(
        result: Path, bench_doc: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    """Peak memory per worker that the node must hold (anonymous and shared: the kernel's
    split, page cache left out), at the most workers measured, x workers per GPU x GPUs per
    node, against the node's memory; a node too small is said not to fit."""
    runs = bench_doc["runs"]
    assert isinstance(runs, list)
    widest = max(runs, key=lambda r: r["workers"])
    held = widest["peak_pss_anon_bytes"] + widest["peak_pss_shmem_bytes"]
    assert 0 < held <= widest["peak_pss_bytes"]
    per = held / widest["workers"]
    assert main(["extrapolate", str(result), *FAST, "--workers-per-gpu", "4", "--json", "-"]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert mem["per_worker_bytes"] == pytest.approx(per) and mem["measured_workers"] == 2
    assert mem["kind"] == "anonymous + shared"
    assert mem["workers_per_node"] == 32 and mem["loaders_bytes"] == pytest.approx(32 * per)
    assert mem["node_bytes"] == 2e12 and mem["fits"]
    small = f"{int(16 * per)}"  # room for 16 workers' peaks, not 32
    assert main(["extrapolate", str(result), *FAST, "--workers-per-gpu", "4",
                 "--node-memory", small]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("  memory"))
    assert "32 workers x" in line and "(200%)" in line and "would not fit" in out
    assert "anonymous and shared memory (page cache left out) per worker" in line


def test_a_bad_node_memory_is_one_line_and_exit_2(result: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("lots", "2XB", "0", "-1GB"):
        assert main(["extrapolate", str(result), *FAST, f"--node-memory={bad}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--node-memory" in err, err
