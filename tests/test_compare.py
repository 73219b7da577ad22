"""compare: significance from the rounds, exact counts, attribution, and not-comparable metadata."""

from __future__ import annotations

import json
from pathlib import Path

from dsbench.analysis import compare
from dsbench.cli import main
from dsbench.report import comparison as tables
from dsbench.results import document as results
from tests.resultdocs import MACHINE, document, run


def _metric(cmp: dict, key: str, workers: int = 1) -> dict:
    r = next(r for r in cmp["runs"] if r["workers"] == workers)
    return next(m for m in r["metrics"] if m["metric"] == key)


def test_identical_results_show_no_significant_change() -> None:
    doc = document([run()])
    cmp = compare.compare(doc, doc)
    assert cmp["comparable"]
    for m in cmp["runs"][0]["metrics"]:
        assert m["ratio"] == 1.0
        assert m["change"] == "same", m


def test_clear_slowdown_is_significant_and_worse() -> None:
    base = document([run(sps=[400, 405, 395], cpu=[0.0049, 0.0050, 0.0051])])
    cand = document([run(sps=[190, 195, 200], cpu=[0.0104, 0.0105, 0.0106])])
    cmp = compare.compare(base, cand)
    sps, cpu = _metric(cmp, "samples_per_s"), _metric(cmp, "cpu_s_per_sample")
    assert sps["significant"] and sps["change"] == "worse"
    assert abs(sps["ratio"] - 195 / 400) < 1e-12
    assert cpu["significant"] and cpu["change"] == "worse"
    lo, hi = cpu["ratio_ci95"]
    assert 1.9 < lo <= cpu["ratio"] <= hi < 2.3


def test_overlapping_noise_is_not_significant() -> None:
    base = document([run(sps=[400, 440, 360])])
    cand = document([run(sps=[390, 430, 370])])
    assert not _metric(compare.compare(base, cand), "samples_per_s")["significant"]


def test_one_round_per_side_cannot_be_significant() -> None:
    base = document([run(sps=[400], cpu=[0.005])])
    cand = document([run(sps=[200], cpu=[0.010])])
    m = _metric(compare.compare(base, cand), "samples_per_s")
    assert m["ratio_ci95"] is None and not m["significant"]


def test_exact_counts_differ_significantly_by_any_amount() -> None:
    base = document([run(files_per_sample=0.001, bytes_per_sample=95_000)])
    cand = document([run(files_per_sample=2.0, bytes_per_sample=95_000)])
    cmp = compare.compare(base, cand)
    files = _metric(cmp, "files_per_sample")
    assert files["significant"] and files["change"] == "worse"
    assert files["ratio"] == 2000.0
    assert _metric(cmp, "bytes_per_sample")["change"] == "same"


def test_attribution_names_the_stages_that_moved_largest_first() -> None:
    stages_b = {"read": 0.0003, "decode": 0.003, "fields": 0.0001, "transform": 0.0015,
                "collate": 0.0001}
    stages_c = dict(stages_b, fields=0.0005, read=0.0012)
    base = document([run(stages=stages_b)])
    cand = document([run(stages=stages_c, files_per_sample=2.0)])
    att = compare.compare(base, cand)["runs"][0]["attribution"]
    assert [a["what"] for a in att[:2]] == ["read", "fields"]
    assert att[0]["text"] == "read +900 µs/sample"
    assert att[1]["text"] == "fields +400 µs/sample"
    files = next(a for a in att if a["what"] == "files opened")
    assert files["text"] == "files opened +2.00 per sample"


def test_different_machines_are_not_comparable() -> None:
    base = document([run()])
    cand = document([run()], machine=dict(MACHINE, cpu_model="Other CPU"))
    cmp = compare.compare(base, cand)
    assert not cmp["comparable"]
    assert "cpu_model" in cmp["not_comparable_reasons"][0]
    assert cmp["runs"] == []
    assert "NOT COMPARABLE" in tables.render(cmp)


def test_different_loader_options_are_not_comparable() -> None:
    cmp = compare.compare(document([run()]), document([run()], decoder="simplejpeg"))
    assert not cmp["comparable"]
    assert any("decoder" in r for r in cmp["not_comparable_reasons"])


def test_only_common_worker_counts_are_compared() -> None:
    base = document([run(1), run(2)])
    cand = document([run(2), run(4)])
    assert [r["workers"] for r in compare.compare(base, cand)["runs"]] == [2]
    assert not compare.compare(document([run(1)]), document([run(4)]))["comparable"]


def test_markdown_table_is_github_flavoured() -> None:
    md = tables.render(compare.compare(document([run()]), document([run(files_per_sample=2)])),
                       markdown=True)
    lines = md.splitlines()
    assert any(line.startswith("|  | metric | base |") for line in lines)
    assert any(set(line) <= set("|-") and line for line in lines)
    assert "2.00 files/sample" in md


def _write(tmp_path: Path, name: str, doc: dict) -> str:
    p = tmp_path / name
    results.write_result(p, doc)
    return str(p)


def test_compare_cli_on_result_files_json(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path, "a.json", document([run()]))
    b = _write(tmp_path, "b.json", document([run(sps=[190, 195, 200])]))
    assert main(["compare", a, b, "--json", "-", "--no-cluster"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "dsbench-comparison"
    assert out["runs"][0]["metrics"][0]["change"] == "worse"


def test_compare_cli_missing_file_exits_2(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path, "a.json", document([run()]))
    assert main(["compare", a, str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope.json" in err


def test_compare_cli_bad_cluster_options_name_the_option(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path, "a.json", document([run()]))
    for argv, needle in ((["--gpu-batch", "0"], "--gpu-batch must be an integer >= 1"),
                         (["--compute", "normal:x"], "--compute 'normal:x'")):
        assert main(["compare", a, a, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
