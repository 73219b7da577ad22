"""The demo: its verdict follows the measurements, it reuses its cache, and bad options exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import resultdocs as rd

from dsbench import demo
from dsbench.cli import main

QUICK = demo.DemoOptions(steps=400, cluster=demo.DEMO_CLUSTER.replace(nodes=2))


def docs(after_cpu: float = 0.0023, after_files: float = 2.0) -> dict[str, dict[str, Any]]:
    def side(name: str, layout: str, cpu: float, files: float, fields: float) -> dict[str, Any]:
        stages = {"read": 1e-4, "decode": 1.2e-3, "fields": fields, "transform": 6e-4,
                  "collate": 1e-4}
        runs = [rd.run(w, sps=[s * w / cpu * 5e-3 for s in (400.0, 405.0, 395.0)],
                       cpu=[cpu * f for f in (0.98, 1.0, 1.02)], files_per_sample=files,
                       stages=stages) for w in (1, 2)]
        return rd.document(runs, layout=layout, path=f"/x/{name}")
    return {"before": side("before", "wds", 0.0021, 0.001, 1e-4),
            "after": side("after", "files", after_cpu, after_files, 3e-4),
            "arrow": side("arrow", "arrow", 0.0020, 0.001, 1e-4)}


def modelled(**kw: float) -> dict[str, Any]:
    d = docs(**kw)
    return demo.model(d, {n: f"/x/{n}" for n in d}, QUICK, lambda _m: None)


def test_verdict_names_the_slower_export_and_where_the_cpu_went() -> None:
    doc = modelled()
    text = "\n".join(demo.verdict_lines(doc))
    assert "after is 1.10x slower than before" in text  # 2.3 / 2.1 ms CPU per sample
    assert "files opened 0.00100 files/sample -> 2.00 files/sample (2000x)" in text
    assert "fields +200 µs/sample" in text
    assert "arrow is 1.05x faster than before" in text
    # The cluster: per-sample files on EFS pay two round trips per sample and run short.
    assert doc["cluster"]["after"]["verdict"] == "input-bound"
    assert doc["cluster"]["before"]["verdict"] == "compute-bound"
    assert "roll out the arrow candidate" in text
    assert "do not add GPUs" in text
    assert "a model, not a measurement" in text


def test_tail_curves_are_quantiles_and_the_p99_grows_from_64_to_128_ranks() -> None:
    doc = modelled()
    for name in ("before", "after"):
        t64, t128 = doc["tails"][name]["64"], doc["tails"][name]["128"]
        assert t64["step_s"] == sorted(t64["step_s"])
        assert t128["p99_s"] > t64["p99_s"]  # stalls in 1.28% vs 0.64% of steps


def test_without_a_regression_the_advice_does_not_invent_one() -> None:
    doc = modelled(after_cpu=0.0021, after_files=0.001)
    advice = " ".join(demo.advice(doc))
    assert "roll out" not in advice and "do not add GPUs" not in advice
    assert doc["cluster"]["after"]["verdict"] == "compute-bound"


def run_demo_cli(tmp_path: Path, *extra: str) -> list[str]:
    return ["demo", "--cache", str(tmp_path / "cache"), "--samples", "40", "--workers", "1",
            "--seconds", "0.3", "--rounds", "1", "--steps", "300", "--nodes", "2", *extra]


def test_demo_end_to_end_reuses_its_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    assert main(run_demo_cli(tmp_path)) == 0
    first = capsys.readouterr()
    assert "generating before" in first.err and "Verdict (measured on this machine)" in first.out
    assert "On 2 nodes x 8 GPUs" in first.out and "What to do" in first.out
    assert main(run_demo_cli(tmp_path)) == 0
    second = capsys.readouterr()
    assert "generating" not in second.err and second.err.count("reusing") == 3


@pytest.mark.parametrize(("argv", "needle"), [
    (["--samples", "0"], "--samples must be at least 1"),
    (["--storage", "floppy"], "floppy"),
    (["--rounds", "0"], "--rounds"),
    (["--compute", "normal:x"], "compute"),
])
def test_bad_options_exit_2_with_one_line(argv: list[str], needle: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run_demo_cli(tmp_path, *argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert not (tmp_path / "cache").exists()  # refused before anything was written
