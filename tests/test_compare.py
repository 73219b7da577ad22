"""compare: significance from the rounds, exact counts, attribution, and not-comparable metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from layouts import write_result
from resultdocs import MACHINE, document, run

from dsbench import fmt
from dsbench.analysis import compare
from dsbench.cli import main
from dsbench.report import comparison as tables


def _metric(cmp: dict, key: str, workers: int = 1) -> dict:
    r = next(r for r in cmp["runs"] if r["workers"] == workers)
    return next(m for m in r["metrics"] if m["metric"] == key)


def test_identical_results_show_no_change() -> None:
    doc = document([run()])
    cmp = compare.compare(doc, doc)
    assert cmp["comparable"] and cmp["paired"]  # one document: the same run, paired rounds
    for m in cmp["runs"][0]["metrics"]:
        assert m["ratio"] == pytest.approx(1.0)
        assert m["change"] == compare.SAME and not m["significant"], m
    assert cmp["runs"][0]["moved"].startswith("nothing distinguishable from noise")


def test_clear_slowdown_is_significant_and_worse() -> None:
    base = document([run(sps=[400, 405, 395], cpu=[0.0049, 0.0050, 0.0051])])
    cand = document([run(sps=[190, 195, 200], cpu=[0.0104, 0.0105, 0.0106])])
    cmp = compare.compare(base, cand)
    assert not cmp["paired"] and "Welch" in cmp["method"]  # two runs
    sps, cpu = _metric(cmp, "samples_per_s"), _metric(cmp, "cpu_s_per_sample")
    assert sps["significant"] and sps["change"] == "worse"
    assert sps["ratio"] == pytest.approx((190 * 195 * 200 / (400 * 405 * 395)) ** (1 / 3))
    assert cpu["significant"] and cpu["change"] == "worse"
    lo, hi = cpu["ratio_ci95"]
    assert 1.9 < lo <= cpu["ratio"] <= hi < 2.3


def test_rounds_of_one_run_are_paired() -> None:
    # Both sides swing together round by round (a busy neighbour in rounds 2 and 4): paired,
    # the 5% slowdown is clear; the same figures from two runs are not distinguishable.
    a = [400.0, 300.0, 410.0, 310.0]
    b = [x * 0.95 for x in a]
    base, cand = document([run(sps=a, cpu=[0.005] * 4)], run_id="r1"), document(
        [run(sps=b, cpu=[0.005] * 4)], run_id="r1")
    m = _metric(compare.compare(base, cand), "samples_per_s")
    assert m["change"] == "worse" and m["ratio"] == pytest.approx(0.95)
    apart = dict(cand, run_id="r2")
    assert _metric(compare.compare(base, apart), "samples_per_s")["change"] == compare.SAME


def test_overlapping_noise_is_not_significant() -> None:
    base = document([run(sps=[400, 440, 360])])
    cand = document([run(sps=[390, 430, 370])])
    m = _metric(compare.compare(base, cand), "samples_per_s")
    assert not m["significant"] and m["change"] == compare.SAME


def test_one_round_per_side_cannot_be_significant() -> None:
    base = document([run(sps=[400], cpu=[0.005])])
    cand = document([run(sps=[200], cpu=[0.010])])
    m = _metric(compare.compare(base, cand), "samples_per_s")
    assert m["ratio_ci95"] is None and not m["significant"] and m["change"] == compare.UNKNOWN


@pytest.mark.parametrize(("key", "base_value", "cand_value"), [
    ("files_per_sample", 0.001, 0.0011), ("files_per_sample", 0.001, 2.0),
    ("files_per_sample", 0.500, 0.501), ("bytes_per_sample", 95_000, 95_001)])
def test_counts_differ_by_any_amount(key: str, base_value: float, cand_value: float) -> None:
    figures = {"files_per_sample": 0.001, "bytes_per_sample": 95_000.0}
    base = document([run(**{**figures, key: base_value})])
    cand = document([run(**{**figures, key: cand_value})])
    cmp = compare.compare(base, cand)
    moved = _metric(cmp, key)
    assert moved["significant"] and moved["change"] == "worse" and moved["exact"]
    assert moved["ratio"] == pytest.approx(cand_value / base_value)
    other = "bytes_per_sample" if key == "files_per_sample" else "files_per_sample"
    assert _metric(cmp, other)["change"] == compare.SAME


@pytest.mark.parametrize("key", ["files_per_sample", "bytes_per_sample"])
def test_counts_equal_but_for_rounding_are_the_same(key: str) -> None:
    # A count over the same units computed in another order may differ in the last bits.
    value = {"files_per_sample": 1 / 3, "bytes_per_sample": 95_000 / 7}[key]
    cmp = compare.compare(document([run(**{key: value})]),
                          document([run(**{key: value * (1 + 1e-12)})]))
    m = _metric(cmp, key)
    assert not m["significant"] and m["change"] == compare.SAME


def test_a_cost_from_nothing_has_no_ratio_and_is_worse() -> None:
    cmp = compare.compare(document([run(files_per_sample=0.0)]),
                          document([run(files_per_sample=1.0)]))
    files = _metric(cmp, "files_per_sample")
    assert files["ratio"] is None and files["change"] == "worse"
    assert "new cost" in tables.render(cmp)


def test_attribution_leads_with_what_changed_and_names_the_noise() -> None:
    stages_b = {"read": 0.0003, "decode": 0.003, "fields": 0.0001, "transform": 0.0015,
                "collate": 0.0001}
    stages_c = dict(stages_b, fields=0.0005, read=0.0012)
    base = document([run(stages=stages_b)])
    cand = document([run(stages=stages_c, files_per_sample=2.0, bytes_per_sample=600_000)])
    r = compare.compare(base, cand)["runs"][0]
    att = r["attribution"]
    # Counts first (never crowded out by stages), then the stages that moved, largest first.
    assert [a["what"] for a in att[:4]] == ["files opened", "bytes read", "read", "fields"]
    assert att[0]["text"] == "files opened +2.00 per sample (exact)"
    assert att[2]["text"].startswith("read +900 µs/sample (interval +")
    assert all(not a["distinguishable"] for a in att[4:])
    assert r["moved"].endswith("not distinguishable: decode, transform, collate")


def test_a_change_too_small_for_three_digits_gets_the_digits_it_needs() -> None:
    base = document([run(sps=[400, 401, 402, 403], cpu=[0.005] * 4, pss=500e6)], run_id="r")
    cand = document([run(sps=[400, 401, 402, 403], cpu=[0.005] * 4, pss=501e6)], run_id="r")
    row = next(ln for ln in tables.render(compare.compare(base, cand)).splitlines()
               if "peak memory" in ln)
    assert "1.002x more" in row and "1.00x" not in row


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
    assert "2.00 files/sample" in md and "intervals: 95%" in md


def test_compare_cli_on_result_files_json(tmp_path: Path, capsys) -> None:
    a = write_result(tmp_path, "a.json", document([run()]))
    b = write_result(tmp_path, "b.json", document([run(sps=[190, 195, 200])]))
    assert main(["compare", a, b, "--json", "-", "--no-cluster"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "dsbench-comparison"
    assert out["runs"][0]["metrics"][0]["change"] == "worse"


def test_compare_cli_refuses_results_of_other_machines_in_one_line_with_exit_2(
        tmp_path: Path, capsys) -> None:
    a = write_result(tmp_path, "a.json", document([run()]))
    b = write_result(tmp_path, "b.json",
                     document([run()], machine=dict(MACHINE, cpu_model="Other CPU")))
    assert main(["compare", a, b, "--json", "-", "--no-cluster"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no comparison to be taken for one that found nothing
    assert captured.err.count("\n") == 1
    assert "not comparable" in captured.err and "cpu_model" in captured.err and a in captured.err


def test_an_export_measured_twice_has_the_same_counts(measured: dict[str, Any]) -> None:
    cmp = compare.compare(measured["before"], measured["before_again"])
    assert cmp["comparable"] and cmp["paired"]  # one interleaved run: paired rounds
    for key in ("files_per_sample", "bytes_per_sample"):
        m = _metric(cmp, key)
        assert m["exact"] and m["ratio"] == pytest.approx(1.0, rel=1e-12), m
        assert not m["significant"] and m["change"] == compare.SAME, m
    assert "files opened" not in cmp["runs"][0]["moved"]


def test_before_against_after_opens_many_more_files(measured: dict[str, Any]) -> None:
    before, after = measured["before"], measured["after"]
    cmp = compare.compare(before, after)
    files = _metric(cmp, "files_per_sample")
    # Shards of 100 against a .jpg and a .json per sample: 2 / (1/100).
    assert files["significant"] and files["change"] == "worse" and files["exact"]
    assert files["ratio"] > 100 and files["ratio"] == pytest.approx(200)
    assert cmp["runs"][0]["attribution"][0]["what"] == "files opened"
    text = tables.render(cmp)
    assert "2.00 files/sample" in text and "0.0100 files/sample" in text
    # The figure the comparison states (the undisturbed rounds' on a busy machine).
    assert fmt.rate(_metric(cmp, "samples_per_s")["cand"]) in text
