"""The demo: its verdict follows the measurements, made-up and real, and it reuses its cache.

Its refusals of bad options: tests/test_cli_errors.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import resultdocs as rd

from dsbench import fmt
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.generate import generate
from dsbench.export.spec import load_spec
from dsbench.model.costs import Distribution
from dsbench.report import demo, verdict
from dsbench.report.headline import headline

QUICK = demo.DemoOptions(steps=400, cluster=demo.DEMO_CLUSTER.replace(nodes=2))


ROUNDS = (0.98, 1.0, 1.02)


def docs(after_cpu: float = 0.0023, after_files: float = 2.0,
         after_rounds: tuple[float, ...] = ROUNDS) -> dict[str, dict[str, Any]]:
    """Made-up results of the demo's three exports; `after_rounds` scales after's rounds' CPU
    (and inversely their samples/s) around `after_cpu`."""
    def side(name: str, layout: str, cpu: float, files: float, fields: float,
             rounds: tuple[float, ...] = ROUNDS) -> dict[str, Any]:
        stages = {"read": 1e-4, "decode": 1.2e-3, "fields": fields, "transform": 6e-4,
                  "collate": 1e-4}
        runs = [rd.run(w, sps=[s * w / cpu * 5e-3 / f for s, f in zip((400.0, 405.0, 395.0),
                                                                      rounds, strict=True)],
                       cpu=[cpu * f for f in rounds], files_per_sample=files,
                       stages=stages) for w in (1, 2)]
        return rd.document(runs, layout=layout, path=f"/x/{name}", run_id="one-run")
    return {"before": side("before", "wds", 0.0021, 0.001, 1e-4),
            "after": side("after", "files", after_cpu, after_files, 3e-4, after_rounds),
            "arrow": side("arrow", "arrow", 0.0020, 0.001, 1e-4)}


def modelled(**kw: float) -> dict[str, Any]:
    d = docs(**kw)
    return demo.model(d, {n: f"/x/{n}" for n in d}, QUICK, lambda _m: None)


def test_verdict_names_the_slower_export_and_where_the_cpu_went() -> None:
    doc = modelled()
    text = "\n".join(verdict.verdict_lines(doc))
    assert "after is 1.10x slower than before" in text  # 2.3 / 2.1 ms CPU per sample
    # Counts lead, as exact; then CPU with its interval.
    assert text.index("after opens 2.00 files/sample (before: 0.00100 files/sample, 2000x "
                      "more)") < text.index("CPU per sample:") < text.index("throughput:")
    assert "[exact: counted over every unit of both exports]" in text
    assert "CPU per sample: after 2.30 ms/sample vs before 2.10 ms/sample" in text
    assert "fields +200 µs/sample (interval +" in text
    assert "arrow is 1.05x faster than before" in text
    # The cluster: per-sample files on EFS pay two round trips per sample and run short.
    assert doc["cluster"]["after"]["verdict"] == "input-bound"
    assert doc["cluster"]["before"]["verdict"] == "compute-bound"
    assert "roll out the arrow candidate" in text
    assert "do not add GPUs" in text
    assert "a model, not a measurement" in text


def test_the_verdict_opens_with_three_lines_of_what_changed_costs_and_to_do() -> None:
    doc = modelled()
    lines = verdict.verdict_lines(doc)
    util = {n: fmt.percent(doc["cluster"][n]["gpu_util"]) for n in ("after", "before")}
    assert lines[:5] == [
        "In short",
        "  what changed: after opens 2000x more files and takes 1.10x more CPU time per sample",
        f"  what it costs: 16 GPUs would run at {util['after']} GPU utilization against "
        f"before's {util['before']} (a model)",
        "  what to do: roll out the arrow candidate instead of after (details below)", ""]
    assert all(len(line) <= 100 for line in lines[:4]), lines[:4]
    # Where nothing changed beyond noise, nothing is invented.
    same = verdict.verdict_lines(modelled(after_cpu=0.0021, after_files=0.001))
    assert same[1] == ("  what changed: after opens as many files per sample; its CPU time is "
                       "not distinguishable")
    assert same[3] == "  what to do: nothing: after holds up against before (details below)"
    # Before opened no file: there is no ratio, and "as many" would not be true.
    doc = modelled()
    run = doc["comparisons"]["after"]["runs"][0]
    next(m for m in run["metrics"] if m["metric"] == "files_per_sample")["base"] = 0.0
    assert headline(doc, [])[1].startswith("  what changed: after opens files where before "
                                           "opened none and takes 1.10x more CPU time")


def stalled_share(tail: dict[str, Any]) -> float:
    """The share of steps of at least 1 s, read off the tail curve: one minus the highest level
    whose step is shorter (an over-estimate by at most the grid's spacing, about 11%)."""
    level, step = np.asarray(tail["level"]), np.asarray(tail["step_s"])
    return float(1.0 - level[step < 1.0].max())


def test_tail_curves_hold_the_p99_and_it_grows_from_64_to_128_ranks() -> None:
    # Enough steps to tell a 0.64% share from a 1.27% one (4 standard errors apart).
    steps = 3000
    d = docs()
    doc = demo.model(d, {n: n for n in d}, demo.DemoOptions(steps=steps, cluster=QUICK.cluster),
                     lambda _m: None)
    q = QUICK.cluster.stall_prob
    for name in ("before", "after"):
        for ranks, tail in doc["tails"][name].items():
            assert np.all(np.diff(tail["step_s"]) >= 0), (name, ranks)
            # Every step waits for the slowest rank: 1 s stalls hold up 1-(1-q)^ranks of steps.
            want = 1 - (1 - q) ** int(ranks)
            se = math.sqrt(want * (1 - want) / steps)
            assert stalled_share(tail) == pytest.approx(want, abs=4 * se + 0.12 * want), ranks
        t64, t128 = doc["tails"][name]["64"], doc["tails"][name]["128"]
        # 0.64% of steps stall at 64 ranks, 1.27% at 128: only at 128 does the stall reach the
        # p99, which becomes a stalled step (the 1 s stall and 150 ms of compute).
        assert t64["p99_s"] < 1.0
        assert t128["p99_s"] == pytest.approx(1.15, abs=0.01)
    said = verdict.tail_text(doc, "after")
    assert "0.638% of steps at 64 GPUs and 1.27% at 128" in said
    assert "past 1% of steps it sets the p99" in said


def test_a_tail_that_does_not_grow_is_not_said_to() -> None:
    # Input-bound bursts already make the p99 2.2 s; a 1 s stall on a 0.4 s step cannot set it.
    tails = {"after": {"64": {"p99_s": 2.17, "mean_s": 0.395},
                       "128": {"p99_s": 2.16, "mean_s": 0.396}}}
    doc = {"tails": tails, "cluster_spec": {"stall_prob": 1e-4, "stall_s": 1.0}}
    said = verdict.tail_text(doc, "after")
    assert "sets the p99" not in said
    assert "a stalled step (395 ms + 1.00 s) is shorter than the p99" in said
    assert "the tail hardly moves with ranks" in said


@pytest.mark.parametrize(("compute", "regime", "after_files", "after_rounds"), [
    (0.15, "compute-bound", 0.001, ROUNDS),
    (0.03, "input-bound", 0.001, ROUNDS),
    # Equal but noisy: after's rounds differ from before's within the noise, one more file
    # per hundred thousand samples.
    (0.15, "compute-bound", 0.00101, (1.03, 0.97, 1.01)),
    (0.03, "input-bound", 0.00101, (1.03, 0.97, 1.01)),
])
def test_without_a_regression_the_advice_does_not_invent_one(
        compute: float, regime: str, after_files: float, after_rounds: tuple[float, ...]) -> None:
    d = docs(after_cpu=0.0021, after_files=after_files, after_rounds=after_rounds)
    opts = QUICK.__class__(steps=400, cluster=QUICK.cluster.replace(
        compute=Distribution("const", compute)))
    doc = demo.model(d, {n: n for n in d}, opts, lambda _m: None)
    assert doc["cluster"]["before"]["verdict"] == regime
    assert doc["cluster"]["after"]["verdict"] == regime
    assert verdict.advice(doc) == []
    assert "nothing: after holds up" in "\n".join(verdict.verdict_lines(doc))


COUNTER = {"name": "valgrind cachegrind", "version": "3.19.0", "kind": "simulated",
           "event": "instructions", "options": "--tool=cachegrind --cache-sim=no"}


def counted(read: float, fields: float) -> dict[str, Any]:
    """An exact pass's section: instructions per sample by stage (decode and transform alike)."""
    stages = {"read": read, "decode": 11e6, "fields": fields, "transform": 10.4e6,
              "collate": 1.6e5}
    return {"counted": True, "why_not": None, "counter": COUNTER, "samples": 64,
            "read_samples": 1000, "units_read": 1, "whole_units": True,
            "instructions_per_sample": sum(stages.values()), "stages": stages}


def test_the_verdict_gives_the_counted_cpu_first_where_it_has_one() -> None:
    d = docs()
    for name, read, fields in (("before", 8.35e5, 3e4), ("after", 3.3e5, 2.7e6),
                               ("arrow", 1.3e5, 9e4)):
        d[name]["exact"] = counted(read, fields)
    text = "\n".join(verdict.verdict_lines(
        demo.model(d, {n: n for n in d}, QUICK, lambda _m: None)))
    # after: 24.59 M against 22.43 M instructions, fields +2.67 M and read -505 k: counted,
    # so said before the timed CPU, without an interval.
    said = ("CPU instructions per sample: after 24.6 M instructions/sample vs before 22.4 M "
            "instructions/sample: 1.10x more [exact: counted by valgrind cachegrind 3.19.0, the "
            "same on every run]; by stage: fields +2.67 M instructions/sample, read -505 k "
            "instructions/sample")
    assert said in text
    assert text.index(said) < text.index("CPU per sample: after")
    assert ("CPU instructions per sample: arrow 21.8 M instructions/sample vs before 22.4 M "
            "instructions/sample: 1.03x fewer [exact") in text
    # Where the instructions were not counted, the verdict says why in one line.
    for doc in d.values():
        doc["exact"] = {"counted": False, "why_not": "valgrind is not installed"}
    text = "\n".join(verdict.verdict_lines(
        demo.model(d, {n: n for n in d}, QUICK, lambda _m: None)))
    assert ("CPU instructions per sample: not counted exactly: the base's instructions were "
            "not counted: valgrind is not installed") in text


def test_one_round_gives_no_verdict_on_speed() -> None:
    d = docs()
    for doc in d.values():
        for r in doc["runs"]:
            r["rounds"] = r["rounds"][:1]
    doc = demo.model(d, {n: n for n in d}, QUICK, lambda _m: None)
    text = verdict.speed_text(doc["comparisons"]["arrow"], "before", "arrow")
    assert text.startswith("can't tell whether arrow is slower or faster than before")
    assert "no interval: one round per side" in text and "run longer" in text


def test_exports_measured_differently_are_not_given_a_ratio() -> None:
    d = docs()
    d["after"]["config"]["decoder"] = "simplejpeg"
    doc = demo.model(d, {n: n for n in d}, QUICK, lambda _m: None)
    lines = "\n".join(verdict.verdict_lines(doc))
    assert "after and before were not measured alike, so no ratio" in lines
    assert "decoder" in lines


# ---- documents the real runner measured (tests/conftest.py's `measured`) ----

@pytest.fixture(scope="module")
def measured_demo(measured: dict[str, Any]) -> dict[str, Any]:
    docs = {name: measured[name] for name in demo.EXPORTS}
    return demo.model(docs, {n: f"/x/{n}" for n in docs}, QUICK, lambda _m: None)


def test_the_verdict_on_measured_exports_states_the_measured_figures(
        measured_demo: dict[str, Any], measured: dict[str, Any]) -> None:
    text = "\n".join(verdict.verdict_lines(measured_demo))
    # Shards of 100 against a .jpg and a .json per sample: exact counts, stated first.
    assert "after opens 2.00 files/sample (before: 0.0100 files/sample, 200x more)" in text
    assert "[exact: counted over every unit of both exports]" in text
    assert text.index("files/sample") < text.index("CPU per sample:")
    # The figures the comparison states: the rounds' means, or those of the undisturbed
    # rounds where a neighbour's load was left out (a busy machine), as compare prints them.
    run = measured_demo["comparisons"]["after"]["runs"][0]
    cpu, speed = (next(m for m in run["metrics"] if m["metric"] == k)
                  for k in ("cpu_s_per_sample", "samples_per_s"))
    assert (f"CPU per sample: after {fmt.seconds(cpu['cand'], 'sample')} vs "
            f"before {fmt.seconds(cpu['base'], 'sample')}") in text
    assert fmt.rate(speed["cand"]) in text
    assert "a model, not a measurement" in text


def test_per_sample_files_feed_the_modelled_cluster_less(measured_demo: dict[str, Any]) -> None:
    cl = measured_demo["cluster"]
    # Two round trips to EFS per sample cost after's workers more than before's shards, on any
    # machine; utilization can only be as high, and is equal only when both are compute-bound.
    assert (cl["after"]["supply_samples_per_s_per_node"]
            < cl["before"]["supply_samples_per_s_per_node"])
    # Both compute-bound, the two utilizations are the same figure summed in another order:
    # seen 1 ulp apart (0.9829351535836183 against 0.982935153583618).
    assert cl["after"]["gpu_util"] <= cl["before"]["gpu_util"] * (1 + 1e-12)
    assert cl["before"]["verdict"] == "compute-bound"


def run_demo_cli(tmp_path: Path, *extra: str) -> list[str]:
    # Batches of 16: a warm-up batch of 64 would read the 40 samples over and over.
    return ["demo", "--cache", str(tmp_path / "cache"), "--samples", "40", "--workers", "1",
            "--batch-size", "16", "--seconds", "0.3", "--rounds", "1", "--steps", "300",
            "--nodes", "16", "--network-latency", "0.004", "--json", str(tmp_path / "demo.json"),
            *extra]


@pytest.mark.slow  # tens of seconds: `python -m pytest -m slow` (CI runs it)
def test_demo_end_to_end_reuses_its_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    # The advice within 7 s rather than 25: its pick lifts the modelled utilization well past
    # after's (1.3x to 2x in the README's runs), an interval that a shorter search still clears.
    assert main(run_demo_cli(tmp_path, "--out", str(tmp_path / "out"),
                             "--advice-budget", "7s")) == 0
    first = capsys.readouterr()
    # No line of the verdict past 100 characters, but a word longer than that (a path) alone.
    assert [line for line in first.out.splitlines()
            if len(line) > fmt.WIDTH and len(line.split()) > 1] == []
    said = " ".join(first.out.split())  # the verdict's words in order, its lines unwrapped
    assert "measured within 7.00 s (dsbench advise)" in first.err
    assert "generating before" in first.err and "Verdict (measured on this machine" in said
    assert "On 16 nodes x 8 GPUs" in said and "What to do" in said
    # The object-store section: a local S3 server started, measured, and stopped.
    assert "On object storage (measured: before's first shard" in said
    assert "makes 2.00 requests/sample" in said and "host CPU per sample" in said
    # The model reads from the server as probed, plus the stated round trip, and says so.
    doc = json.loads((tmp_path / "demo.json").read_text())
    probed = doc["object_store"]["probe"]["latency"]["p50_s"]
    storage = doc["cluster"]["after"]["storage"]
    assert storage["origin"] == "measured + stated"
    assert storage["per_file_s"] == pytest.approx(probed + 0.004)
    assert "measured (p50 first byte of the local S3 server, dsbench probe) + 4.00 ms stated" \
        in said
    # Through a store that pushes back at each loader worker's share of S3's 5,500 GETs/s per
    # prefix (1,024 workers: 5.4 GETs/s), after's 2 GETs per sample are throttled and
    # before's one GET per shard is not; the model says the same of the job.
    pushed = doc["object_store"]["throttled"]
    assert pushed["limit_per_s"] == pytest.approx(5500 / (16 * 8 * 8))
    assert pushed["counts"]["after"]["throttled_per_sample"] > 0
    assert pushed["counts"]["after"]["retry_s_per_sample"] > 0
    assert pushed["counts"]["before"]["throttled_per_sample"] == 0
    assert "through a store that pushes back (503 SlowDown past 5.4 GETs/s" in said
    assert "before never throttled" in said
    assert doc["cluster"]["after"]["store"]["limit_per_prefix_s"] == 5500
    assert "the store: after asks" in said
    # The model checked against a 2-rank job the demo measured: each figure within its
    # tolerance or missed by how much, and a miss said in the heading of the model's figures.
    checked = re.search(r"the model against a measured job: (within its tolerances|missed on "
                        r"[^:]+): the model behind step time, GPU utilization and p99 above, "
                        r"run on a 2-rank job measured here .*: mean step (?:within|missed by) "
                        r".*model/measured (\d+\.\d+).* GPU utilization (?:within|missed by) "
                        r".*p99 step (?:within|missed by) ", said)
    assert checked and float(checked[2]) > 0
    assert (checked[1] != "within its tolerances") == ("rough: its check against a measured "
                                                       "job missed on" in said)
    # It ends with dsbench advise's pick for after: Arrow shards, whose one file per shard
    # lifts the modelled utilization past after's two requests per sample by an interval.
    advice = doc["advice"]
    assert advice["kind"] == "dsbench-advice" and advice["sample"]["samples"] == 40
    assert advice["recommendation"]["winner"] == "arrow-64MB"
    row = next(r for r in advice["table"] if r["name"] == "arrow-64MB")
    assert row["vs_baseline"]["gpu_util"]["interval"][0] > 1.0
    assert "Which export to roll out (dsbench advise on after's first 40 samples" in said
    assert "\n  roll out arrow-64MB: " in first.out
    # --out keeps the advice, the winner's definition (named where it is) and its page section.
    out = tmp_path / "out"
    assert advice["definition_path"] == str(out / "advised.toml")
    assert load_spec(out / "advised.toml").layout == "arrow"
    assert f"dsbench generate {out / 'advised.toml'} OUT --from" in said
    assert json.loads((out / "results" / "advice.json").read_text()) == advice
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<h2>Which export to roll out" in page and 'alt="Pareto front' in page
    assert main(run_demo_cli(tmp_path, "--no-object-store", "--no-job", "--no-advice",
                             "--no-resume")) == 0
    second = capsys.readouterr()
    said = " ".join(second.out.split())
    assert "generating" not in second.err and second.err.count("reusing") == 3
    assert "On object storage" not in said
    assert "the model against a measured job: none run (--no-job)" in said
    assert "Which export to roll out" not in said and "After a restart" not in said
    # Without the server there is nothing probed: the model falls back to its stated profile.
    doc = json.loads((tmp_path / "demo.json").read_text())
    assert "advice" not in doc
    assert doc["cluster"]["after"]["storage"]["name"] == demo.DEMO_CLUSTER.storage.name
    assert "per file assumed by the efs profile" in said


def test_a_cache_holding_another_export_is_refused(tmp_path: Path) -> None:
    generate(demo.definition("after"), demo.export_dir(tmp_path, "before", 40), samples=40)
    with pytest.raises(DsbenchError, match="holds a different export"):
        demo.prepare_exports(tmp_path, 40, lambda _m: None)


def test_without_moto_the_object_store_section_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsbench.report import demo_store, verdict

    monkeypatch.setattr(demo_store, "available", lambda: "moto is not installed (pip x)")
    said: list[str] = []
    skipped = demo_store.measure({}, demo.DEMO_BENCH, said.append, demo.DEMO_CLUSTER)
    assert skipped == {"skipped": "moto is not installed (pip x)"}
    assert said == ["demo: object storage skipped: moto is not installed (pip x)"]
    assert verdict.store_lines(skipped) == [
        "", "On object storage: not measured (moto is not installed (pip x))"]
