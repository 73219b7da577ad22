"""gate: exit codes, hard and soft limits, thresholds from pyproject.toml and options."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from layouts import write_result
from resultdocs import MACHINE, document, run

from dsbench.analysis import compare, gate
from dsbench.cli import main
from dsbench.errors import DsbenchError


def _gate(base: dict, cand: dict, **t: object) -> dict:
    return gate.evaluate(compare.compare(base, cand), gate.Thresholds(**t))  # type: ignore[arg-type]


def _status(g: dict, metric: str) -> str:
    return next(c["status"] for c in g["checks"] if c["metric"] == metric)


def test_a_result_against_itself_passes() -> None:
    doc = document([run()])
    g = _gate(doc, doc)
    assert g["passed"] and g["exit_code"] == 0
    assert {c["status"] for c in g["checks"]} == {"pass"}


@pytest.mark.parametrize(("cand_files", "status"), [(0.00104, "pass"), (0.00106, "fail"),
                                                    (2.0, "fail")])
def test_more_files_per_sample_fails_hard_past_the_limit(cand_files: float, status: str) -> None:
    # The default limit is 1.05x: 4% more files passes, 6% more fails, 2000x more fails.
    g = _gate(document([run(files_per_sample=0.001)]), document([run(files_per_sample=cand_files)]))
    assert _status(g, "files_per_sample") == status
    assert g["exit_code"] == (1 if status == "fail" else 0)


def test_bytes_limit_is_a_ratio_threshold() -> None:
    base = document([run(bytes_per_sample=100_000)])
    assert _status(_gate(base, document([run(bytes_per_sample=104_000)])),
                   "bytes_per_sample") == "pass"
    assert _status(_gate(base, document([run(bytes_per_sample=106_000)])),
                   "bytes_per_sample") == "fail"
    assert _status(_gate(base, document([run(bytes_per_sample=106_000)]), max_bytes_ratio=1.1),
                   "bytes_per_sample") == "pass"


def test_cpu_over_the_limit_only_by_noise_warns_and_does_not_fail() -> None:
    base = document([run(cpu=[0.0040, 0.0050, 0.0060])])
    noisy = document([run(cpu=[0.0045, 0.0058, 0.0068])])  # ratio 1.15, intervals overlap
    g = _gate(base, noisy)
    check = next(c for c in g["checks"] if c["metric"] == "cpu_s_per_sample")
    assert check["status"] == "warn" and g["exit_code"] == 0
    assert check["ratio_ci95"][0] < 1.10 < check["ratio"] and "more rounds" in check["why"]
    quiet = document([run(cpu=[0.0049, 0.0050, 0.0051])])
    clear = document([run(cpu=[0.0070, 0.0071, 0.0072])])
    assert _status(_gate(quiet, clear), "cpu_s_per_sample") == "fail"


def test_timings_measured_apart_under_different_load_only_warn_and_counts_still_fail() -> None:
    def side(cpu: list[float], files: float, load: float) -> dict[str, Any]:
        return document([run(cpu=cpu, files_per_sample=files)],
                        machine=dict(MACHINE, load_avg_1m=load))

    quiet, slower = [0.0049, 0.0050, 0.0051], [0.0070, 0.0071, 0.0072]
    # 2 cores: a load average of 0.3 against 2.5 is more than half a process per core apart.
    comparison = compare.compare(side(quiet, 0.001, 0.3), side(slower, 0.002, 2.5))
    g = gate.evaluate(comparison, gate.Thresholds())
    cpu = next(c for c in g["checks"] if c["metric"] == "cpu_s_per_sample")
    assert cpu["status"] == "warn" and "different load" in cpu["why"]
    assert _status(g, "files_per_sample") == "fail"  # a count: the machine's load is no excuse
    from dsbench.report.comparison import render
    assert "warning: measured apart under different load" in render(comparison)
    # The same figures at the same load: the CPU's rise is the export's, and fails.
    same = gate.evaluate(compare.compare(side(quiet, 0.001, 0.3), side(slower, 0.001, 0.5)),
                         gate.Thresholds())
    assert _status(same, "cpu_s_per_sample") == "fail"


def test_throughput_is_soft_unless_strict() -> None:
    base = document([run(sps=[400, 405, 395])])
    slow = document([run(sps=[300, 305, 295])])
    g = _gate(base, slow)
    assert _status(g, "samples_per_s") == "warn" and g["exit_code"] == 0
    g = _gate(base, slow, strict_throughput=True)
    assert _status(g, "samples_per_s") == "fail" and g["exit_code"] == 1


def test_not_comparable_results_are_an_input_error() -> None:
    other = document([run()], machine=dict(MACHINE, usable_cores=64))
    with pytest.raises(DsbenchError, match="not comparable"):
        _gate(document([run()]), other)


def test_thresholds_are_the_defaults_with_the_values_set_over_them() -> None:
    t = gate.load_thresholds({"max_cpu_ratio": 1.2, "max_files_ratio": None,
                              "strict_throughput": True, "workers": "1"})
    assert (t.max_cpu_ratio, t.strict_throughput) == (1.2, True)
    assert t.max_files_ratio == gate.Thresholds().max_files_ratio
    with pytest.raises(DsbenchError, match=r"^--max-bytes-ratio must be a positive number"):
        gate.load_thresholds({"max_bytes_ratio": -1.0})
    with pytest.raises(DsbenchError, match=r"^/x/pyproject.toml \[tool.dsbench.gate\]: "
                                            r"max-bytes-ratio must be a positive number"):
        gate.load_thresholds({"max_bytes_ratio": -1.0},
                             {"max_bytes_ratio": "/x/pyproject.toml [tool.dsbench.gate]"})


def test_gate_cli_exit_codes_and_markdown_summary(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no pyproject.toml above: defaults apply
    a = write_result(tmp_path, "a.json", document([run()]))
    b = write_result(tmp_path, "b.json", document([run(files_per_sample=2.0)]))
    summary = tmp_path / "summary.md"
    assert main(["gate", a, a]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["gate", a, b, "--summary", str(summary)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "files opened per sample" in out
    md = summary.read_text()
    assert md.startswith("### dsbench gate FAILED") and "| FAIL | files opened per sample" in md
    assert main(["gate", a, str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.json" in err
    assert main(["gate", a, b, "--max-files-ratio", "0"]) == 2


# ---- documents the real runner measured (tests/conftest.py's `measured`) ----

def test_an_export_measured_twice_passes_in_both_orders(measured: dict[str, Any]) -> None:
    a, b = measured["before"], measured["before_again"]
    for base, cand in ((a, b), (b, a)):
        g = _gate(base, cand)
        assert g["passed"] and g["exit_code"] == 0, g["checks"]
        assert _status(g, "files_per_sample") == _status(g, "bytes_per_sample") == "pass"


def test_before_against_after_fails_on_files(measured: dict[str, Any], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    g = _gate(measured["before"], measured["after"])
    assert _status(g, "files_per_sample") == "fail" and g["exit_code"] == 1
    a = write_result(tmp_path, "before.json", measured["before"])
    b = write_result(tmp_path, "after.json", measured["after"])
    assert main(["gate", a, b]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL +files opened per sample", out) and "2.00 files/sample" in out


def test_memory_past_its_limit_fails_the_gate_with_the_figure_and_the_limit() -> None:
    base = document([run(1, pss=100e6), run(2, pss=180e6)], run_id="r")
    cand = document([run(1, pss=800e6), run(2, pss=1.5e9)], run_id="r")
    g = gate.evaluate(compare.compare(base, cand), gate.Thresholds())
    mem = next(c for c in g["checks"] if c["metric"] == "peak_pss_bytes")
    assert not g["passed"] and mem["status"] == gate.FAIL
    assert mem["limit"] == "ratio <= 1.50 or +100 MB"
    # per loader worker, at the gated worker count (2)
    assert (mem["base"], mem["cand"]) == (pytest.approx(90e6), pytest.approx(750e6))
    looser = gate.evaluate(compare.compare(base, cand), gate.Thresholds(max_memory_ratio=10))
    assert looser["passed"]


def test_memory_grown_within_the_allowance_passes_and_says_why() -> None:
    base = document([run(1, pss=40e6)], run_id="r")
    cand = document([run(1, pss=70e6)], run_id="r")  # 1.75x, but 30 MB more per worker
    g = gate.evaluate(compare.compare(base, cand), gate.Thresholds())
    mem = next(c for c in g["checks"] if c["metric"] == "peak_pss_bytes")
    assert g["passed"] and mem["status"] == gate.PASS and "30.0 MB more" in mem["why"]
    strict = gate.evaluate(compare.compare(base, cand),
                           gate.Thresholds(memory_allowance_mb=10))
    assert not strict["passed"]


def test_memory_is_gated_on_its_anonymous_part_where_the_kernel_split_it() -> None:
    """Page cache of mapped shards (file-backed) is not memory the job must hold."""
    def split(anon: float, file: float) -> dict[str, Any]:
        r = run(1, pss=anon + file)
        for x in (r, *r["rounds"]):
            x |= {"peak_pss_anon_bytes": anon, "peak_pss_file_bytes": file,
                  "peak_pss_shmem_bytes": 0.0}
        return r

    base = document([split(50e6, 20e6)], run_id="r")
    cand = document([split(55e6, 600e6)], run_id="r")  # 9x the PSS, all of it page cache
    g = gate.evaluate(compare.compare(base, cand), gate.Thresholds(memory_allowance_mb=1))
    mem = next(c for c in g["checks"] if c["label"].startswith("peak"))
    assert g["passed"] and mem["metric"] == "peak_pss_anon_bytes"
    assert mem["label"] == "peak anonymous memory per loader worker"
    shown = {m["metric"] for m in compare.compare(base, cand)["runs"][0]["metrics"]}
    assert {"peak_pss_bytes", "peak_pss_anon_bytes", "peak_pss_file_bytes"} <= shown


def test_memory_of_an_export_against_itself_never_fails() -> None:
    doc = document([run(1, pss=500e6)], run_id="r")
    g = gate.evaluate(compare.compare(doc, doc), gate.Thresholds())
    assert g["passed"] and all(c["status"] == gate.PASS for c in g["checks"])


def test_the_guides_parquet_candidate_fails_the_gate_on_memory(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    """docs/candidate.md's pair, with its own script: per-sample files against 1,000-row
    Parquet shards that read fewer files and less CPU, and take a row group into memory."""
    import subprocess
    import sys

    from test_docs import commands

    from dsbench.export.generate import generate
    from dsbench.export.spec import load_spec

    repo = Path(__file__).resolve().parents[1]
    generate(load_spec(repo / "formats" / "after.toml"), tmp_path / "dsbench" / "after",
             samples=200)
    script = next(t for k, t in commands(repo / "docs" / "candidate.md") if k == "python")
    subprocess.run([sys.executable, "-P", "-c", script.replace("/tmp/", f"{tmp_path}/")],
                   check=True, timeout=300)
    saved = [str(tmp_path / "current.json"), str(tmp_path / "candidate.json")]
    assert main(["compare", str(tmp_path / "dsbench" / "after"),
                 str(tmp_path / "dsbench" / "candidate"), "--workers", "1", "--rounds", "3",
                 "--seconds", "0.3", "--save", *saved]) == 0
    capsys.readouterr()
    assert main(["gate", *saved]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "memory per loader worker" in ln)
    assert line.startswith("FAIL") and "ratio <= 1.50 or +100 MB" in line and " MB" in line
    assert re.search(r"pass +files opened per sample", out)  # fewer files: not what failed


def test_memory_figures_and_ratio_are_one_statistic_and_the_allowance_applies_to_it() -> None:
    """A run's peak is its rounds' largest; the ratio is of the rounds' geometric means. The
    figures the gate shows and its allowance take the ratio's statistic: figures whose quotient
    is the ratio printed beside them."""
    base = document([run(1, pss=[45e6, 50e6, 55e6])], run_id="r")
    cand = document([run(1, pss=[140e6, 141e6, 142e6])], run_id="r")
    g = gate.evaluate(compare.compare(base, cand), gate.Thresholds())
    mem = next(c for c in g["checks"] if c["metric"] == "peak_pss_bytes")
    assert mem["cand"] / mem["base"] == pytest.approx(mem["ratio"])
    assert mem["base"] == pytest.approx((45e6 * 50e6 * 55e6) ** (1 / 3))
    # 141 MB - 49.8 MB: 91.2 MB more per worker, within the 100 MB allowance (the runs'
    # largest peaks, 55 and 142 MB, would have said 87.0 MB).
    assert mem["status"] == gate.PASS and "91.2 MB more" in mem["why"]
    assert not gate.evaluate(compare.compare(base, cand),
                             gate.Thresholds(memory_allowance_mb=0))["passed"]


def test_an_allowance_of_zero_is_allowed_and_a_negative_one_is_refused() -> None:
    assert gate.Thresholds(memory_allowance_mb=0).memory_allowance_mb == 0
    with pytest.raises(DsbenchError, match="memory_allowance_mb must be a number >= 0"):
        gate.Thresholds(memory_allowance_mb=-1)
    with pytest.raises(DsbenchError, match="max_memory_ratio must be a positive number"):
        gate.Thresholds(max_memory_ratio=0)


def test_memory_fails_even_when_the_sides_were_measured_under_different_load() -> None:
    """Load changes how fast a loader runs, not what it holds: memory stays a hard check."""
    def side(pss: float, load: float) -> dict[str, Any]:
        return document([run(pss=[pss, pss * 1.01, pss * 0.99])],
                        machine=dict(MACHINE, load_avg_1m=load))

    g = gate.evaluate(compare.compare(side(100e6, 0.3), side(900e6, 2.5)), gate.Thresholds())
    assert _status(g, "cpu_s_per_sample") == "pass"
    mem = next(c for c in g["checks"] if c["metric"] == "peak_pss_bytes")
    assert mem["status"] == gate.FAIL and "different load" not in mem["why"]


def test_a_limit_prints_with_its_digits_and_a_ratio_on_its_side_of_it() -> None:
    from dsbench.report.comparison import render_gate

    base = document([run(cpu=[0.00500, 0.00500, 0.00500])], run_id="r")
    cand = document([run(cpu=[0.005515, 0.005516, 0.005517])], run_id="r")  # 1.103x
    g = gate.evaluate(compare.compare(base, cand), gate.Thresholds(max_cpu_ratio=1.105))
    text = render_gate(g)
    line = next(ln for ln in text.splitlines() if "CPU per sample" in ln)
    assert "ratio <= 1.105" in line and line.startswith("pass")
    at_110 = render_gate(gate.evaluate(compare.compare(base, cand), gate.Thresholds()))
    line = next(ln for ln in at_110.splitlines() if "CPU per sample" in ln)
    assert line.startswith("FAIL") and "1.103x" in line and "ratio <= 1.10 " in line
