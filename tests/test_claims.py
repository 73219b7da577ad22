"""Every sentence agrees with its figures: verdicts, compare tables, gate tables, the model's
notes and the job checks, rendered from generated documents and read back (tests/sentences.py).
The readers are themselves checked on sentences that once shipped, which they must catch."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import sentences
from resultdocs import document, run

from dsbench.analysis import compare, gate
from dsbench.model import cluster, explain
from dsbench.report import claims, measured, verdict
from dsbench.report import comparison as tables
from dsbench.report.extrapolation import memory_lines

DOCS = 1000


def _pair(rng: np.random.Generator, validate: bool = True
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two results measured in one run: rounds around a random true ratio, with random noise,
    sometimes noisy enough to warn, sometimes in windows of a few batches."""
    rounds = int(rng.integers(2, 8))
    noise = float(rng.choice([0.002, 0.02, 0.08, 0.2]))
    effect = float(rng.choice([1.0, 1.0, np.exp(rng.normal(0, 0.05)), np.exp(rng.normal(0, 0.5))]))
    batch = int(rng.choice([4, 32, 512]))

    def side(scale: float, seed: int) -> dict[str, Any]:
        g = np.random.default_rng(seed)
        sps = list(400 * scale * np.exp(g.normal(0, noise, rounds)))
        cpu = list(0.005 / scale * np.exp(g.normal(0, noise, rounds)))
        # Peak memory varies by round, so that a run's largest peak and the rounds' geometric
        # mean (the ratio's statistic) differ; sometimes past the gate's limit or allowance.
        peak = 5e8 * scale ** float(g.choice([0, 1, 3])) * float(g.choice([1, 1, 1.01, 3]))
        pss = list(peak * np.exp(g.normal(0, noise, rounds)))
        r = run(sps=sps, cpu=cpu, batch_size=batch, pss=pss,
                files_per_sample=float(g.choice([0.001, 0.001, 1.0])))
        return r

    seed = int(rng.integers(2**31))
    base = document([side(1.0, seed)], run_id="r", validate=validate)
    cand = document([side(effect, seed + 1)], run_id="r", validate=validate)
    return base, cand


def _true_ci(row: dict[str, Any]) -> tuple[float, float] | None:
    ci = row["ratio_ci95"]
    return (ci[0], ci[1]) if ci else None


def _comparison_problems(cmp: dict[str, Any]) -> list[str]:
    bad: list[str] = []
    run_ = cmp["runs"][0]
    rows = {m["metric"]: m for m in run_["metrics"]}
    text = tables.render(cmp)
    bad += sentences.changes(text)
    if tables.LEGEND not in text:
        bad.append("the table's marks are not explained")
    lines = text.splitlines()
    for m in run_["metrics"]:
        line = next(ln for ln in lines if f" {m['label']} " in ln)
        cells = tables.metric_rows({"metrics": [m]})[0]
        assert cells[1] in line
        bad += sentences.table_row(cells[0], cells[4], cells[5], cells[6],
                                   m["ratio_ci95"] if not m["counted"] else None,
                                   m["higher_is_better"])
    for key, render in (("cpu_s_per_sample", measured.cpu_text),
                        ("samples_per_s", measured.speed_text)):
        sentence = render(cmp, "base", "cand")
        bad += sentences.changes(sentence)
        bad += sentences.distinguishable_iff(sentence, _true_ci(rows[key]))
        bad += sentences.notes_carried(sentence, rows[key]["notes"])
    counts = measured.counts_text(cmp, "base", "cand")
    if (rows["files_per_sample"]["ratio"] == 1.0) != ("the same" in counts.split("reads")[0]):
        bad.append(f"files said to change or not against their ratio: {counts!r}")
    for t in (gate.Thresholds(), gate.Thresholds(memory_allowance_mb=0)):
        bad += sentences.gate_table(tables.render_gate(gate.evaluate(cmp, t)))
    return bad


def test_sentences_agree_with_their_figures_over_generated_comparisons() -> None:
    rng = np.random.default_rng(20261205)
    problems: list[str] = []
    seen = {"distinguishable": 0, "not": 0, "noisy": 0, "short": 0, "memory fails": 0}
    for i in range(DOCS):
        base, cand = _pair(rng, validate=i % 50 == 0)  # valid documents, checked now and then
        cmp = compare.compare(base, cand)
        problems += _comparison_problems(cmp)
        cpu = next(m for m in cmp["runs"][0]["metrics"] if m["metric"] == "cpu_s_per_sample")
        seen["distinguishable" if cpu["significant"] else "not"] += 1
        seen["noisy"] += any(n.startswith("noisy") for n in cpu["notes"])
        seen["short"] += any(n.startswith("short") for n in cpu["notes"])
        seen["memory fails"] += gate.evaluate(cmp, gate.Thresholds())["checks"][-1]["status"] \
            == gate.FAIL
    assert not problems, "\n".join(problems[:20])
    # The generator reaches every case the sentences distinguish.
    assert min(seen.values()) >= 50, seen


def test_timeline_notes_name_only_the_shapes_their_buckets_show() -> None:
    rng = np.random.default_rng(7)
    problems = []
    for _ in range(DOCS):
        n = int(rng.integers(20, 200))
        kind = rng.integers(4)
        if kind == 0:  # bursts: busy, then idle
            period = int(rng.integers(2, 10))
            tl = (np.arange(n) % period < period // 2).astype(float)
        elif kind == 1:  # mostly partial utilization
            tl = rng.uniform(0.2, 0.8, n)
        elif kind == 2:  # near busy
            tl = np.clip(rng.normal(0.95, 0.05, n), 0, 1)
        else:  # anything
            tl = rng.uniform(0, 1, n)
        rates = SimpleNamespace(ratio=float(rng.uniform(0.2, 1.5)),
                                per_sample_s=float(rng.uniform(1e-4, 0.2)))
        cluster = SimpleNamespace(batch_size=int(rng.choice([8, 32, 256])),
                                  workers_per_gpu=int(rng.integers(1, 9)), prefetch=2)
        result = SimpleNamespace(timeline=tl, timeline_bucket_s=float(rng.choice([0.1, 1.0])))
        note = explain.timeline_note(rates, cluster, result)  # type: ignore[arg-type]
        problems += sentences.timeline(note, float(np.mean(tl)))
    assert not problems, "\n".join(problems[:20])


def test_tail_sentences_agree_with_the_p99s_beside_them() -> None:
    rng = np.random.default_rng(11)
    problems = []
    for _ in range(DOCS):
        mean = float(rng.uniform(0.05, 1.0))
        p99_64 = mean * float(rng.uniform(1.0, 3.0))
        p99_128 = p99_64 * float(rng.choice([1.0, rng.uniform(0.9, 1.1), rng.uniform(1, 2),
                                             1.05 + rng.uniform(-1e-3, 1e-3)]))
        # Stalls in no step, in under 1% of steps at 128 ranks, and in more.
        # (7.85e-5: 0.9998% of steps at 128, which 3 digits would print as 1.00%)
        q = float(rng.choice([0.0, 0.00005, 7.85e-5, 0.001, 0.02]))
        doc = {"tails": {"after": {"64": {"p99_s": p99_64, "mean_s": mean},
                                   "128": {"p99_s": p99_128, "mean_s": mean}}},
               "cluster_spec": {"stall_prob": q, "stall_s": float(rng.uniform(0.01, 1.0))}}
        problems += sentences.tail(verdict.tail_text(doc, "after"))
    assert not problems, "\n".join(problems[:20])


def test_every_job_check_says_within_or_missed_by_and_truly() -> None:
    rng = np.random.default_rng(13)
    problems = []
    misses = 0
    for _ in range(DOCS):
        m = {"mean_s": float(rng.uniform(0.01, 1)), "p99_s": float(rng.uniform(0.02, 2)),
             "gpu_util": float(rng.uniform(0.05, 1))}
        off = {k: float(np.exp(rng.normal(0, 0.15))) for k in m}
        check = {"ranks": 2, "workers_per_rank": 1, "batch_size": 32, "compute_s": 0.04,
                 "steps": 200, "load_avg_1m": 1.0, "measured": m,
                 "model": {k: v * off[k] for k, v in m.items()},
                 "time_sharing": {"measured": float(rng.uniform(1, 2)),
                                  "model": float(rng.uniform(1, 2))}}
        text = verdict.job_check_text(check)
        tols = [claims.TOLERANCE[k] for k in ("mean", "gpu_util", "p99", "time_sharing")]
        problems += sentences.checks(text, tols)
        missed = claims.missed(verdict.demo_checks(check))
        misses += bool(missed)
        if text.startswith("within") == bool(missed):
            problems.append(f"outcome word against the checks: {text!r}")
        heading = verdict.model_confidence({"job_check": check})
        if bool(missed) != ("rough" in heading):
            problems.append(f"a miss not carried into the model's confidence: {heading!r}")
    assert not problems, "\n".join(problems[:20])
    assert 50 <= misses <= DOCS - 50  # both outcomes exercised


def test_memory_lines_say_would_not_fit_exactly_when_it_would_not() -> None:
    rng = np.random.default_rng(17)
    seen = {"fits": 0, "tight": 0, "over": 0}
    for _ in range(DOCS):
        per, node = float(10 ** rng.uniform(7, 11)), float(10 ** rng.uniform(11, 13))
        gpus, workers = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        if rng.random() < 0.1:  # a node exactly full, or half full
            node = per * gpus * workers / float(rng.choice([1.0, 0.5]))
        cost = SimpleNamespace(memory_per_worker_bytes=per, memory_workers=2, memory_kind="anon")
        spec = cluster.ClusterSpec(gpus_per_node=gpus, workers_per_gpu=workers,
                                   node_memory_bytes=node)
        text = " ".join(memory_lines(cluster.loader_memory(cost, spec)))  # type: ignore[arg-type]
        share = per * gpus * workers / node  # exactly full or half full: to float rounding
        kind = "over" if share > 1 + 1e-5 else "tight" if share > 0.5 * (1 + 1e-5) else "fits"
        seen[kind] += 1
        assert ("would not fit" in text) == (kind == "over"), text
        assert ("over half the node" in text) == (kind == "tight"), text
        printed = float(re.search(r"\(([\d.]+)%\)", text)[1])  # type: ignore[index]
        assert (printed > 100) == (kind == "over") and (printed > 50) == (kind != "fits"), text
    assert min(seen.values()) >= 50, seen


# Sentences that shipped (quoted in the issue that made this a property); each reader catches
# its own.
SHIPPED_CHANGES = [
    "arrow is 1.05x faster than before (499 samples/s vs 473 samples/s with 1 loader worker; "
    "95% interval 1.00x to 1.11x)",
    "after is 1.08x slower than before (438 samples/s vs 473 samples/s with 1 loader worker; "
    "95% interval 0.882x to 0.972x)",
]


@pytest.mark.parametrize("sentence", SHIPPED_CHANGES)
def test_the_readers_catch_the_change_sentences_that_shipped(sentence: str) -> None:
    assert sentences.changes(sentence)


def test_the_readers_catch_the_timeline_story_that_shipped() -> None:
    note = ("87.0% of seconds at >= 90% busy, 0.873% at <= 10%. Each of the 8 workers of a GPU "
            "needs 2.40 s per batch and they started together, so batches arrive in bursts of "
            "about 8: the GPU computes them back to back (~100%), drains the queue, then waits "
            "for the next burst (~0%), a cycle of about 2.40 s.")
    assert sentences.timeline(note, 0.9)


def test_the_readers_catch_the_job_check_that_shipped() -> None:
    text = ("the model behind step time, GPU utilization and p99 above, run on a 2-rank job "
            "measured here, gave mean step 1.00x, GPU utilization 1.00x, p99 1.09x of the "
            "measured, its batches taking 1.37x their CPU where the model has 1.01x")
    assert sentences.checks(text, [0.1, 0.1, 0.25, 0.15])


def test_the_readers_catch_a_warning_left_out_of_the_verdict() -> None:
    shipped = ("arrow is 1.05x faster than before (499 samples/s vs 473 samples/s with 1 loader "
               "worker; 95% interval 1.01x to 1.11x faster)")
    assert sentences.notes_carried(shipped, ["noisy: rounds vary 11.6%"])


def test_a_noisy_figure_carries_its_warning_into_the_speed_sentence() -> None:
    base, cand = _noisy_pair()
    cmp = compare.compare(base, cand)
    sps = next(m for m in cmp["runs"][0]["metrics"] if m["metric"] == "samples_per_s")
    assert sps["notes"] and sps["notes"][0].startswith("noisy: rounds vary")
    assert not sentences.notes_carried(measured.speed_text(cmp, "before", "after"), sps["notes"])


def test_the_readers_catch_the_tail_story_told_past_its_figures() -> None:
    shipped = ("after's p99 step is 1.00 s at 64 GPUs and 1.20 s at 128 (1.20x), with the work "
               "per rank unchanged. Every step waits for the slowest rank, so the assumed stall "
               "(1.00 s in 0.00400% of rank-steps) holds up 0.256% of steps at 64 GPUs and "
               "0.511% at 128; past 1% of steps it sets the p99.")
    assert sentences.tail(shipped)
    assert sentences.tail(shipped.replace("(1.20x)", "(1.05x)")
                          .replace("0.511%", "1.51%"))  # 'sets' beside no growth


def test_the_readers_catch_a_gate_row_whose_figures_disagree_with_it() -> None:
    head = ("dsbench gate FAILED (1 loader worker)\n"
            "      check  base  candidate  ratio  95% CI  limit  kind\n"
            "----  -----  ----  ---------  -----  ------  -----  ----\n")
    # The run's largest peaks beside the rounds' geometric-mean ratio (as once shipped).
    row = ("FAIL  peak anonymous memory per loader worker  43.7 MB  604 MB  13.6x  "
           "13.2x to 14.0x  ratio <= 1.50 or +100 MB  hard\n")
    assert sentences.gate_table(head + row + "kind: ...")
    assert not sentences.gate_table(head + row.replace("604 MB", "594 MB") + "kind: ...")
    passed = row.replace("FAIL", "pass")  # past its ratio and its allowance, yet passed
    assert sentences.gate_table(head + passed + "kind: ...")


def _noisy_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    sps, cpu = [400.0, 460.0, 350.0, 420.0], [0.005] * 4
    base = document([run(sps=sps, cpu=cpu)], run_id="r")
    cand = document([run(sps=[s * 1.1 for s in sps], cpu=cpu)], run_id="r")
    return base, cand


def test_a_warning_reaches_the_sentences_of_a_comparison_with_no_interval() -> None:
    """One round per side: no verdict, but a window of 1 batch per worker is still said."""
    def one(sps: float) -> dict[str, Any]:
        r = run(sps=[sps], cpu=[0.005])
        r["rounds"][0]["batches"] = 1
        return document([r], run_id="r")

    cmp = compare.compare(one(400.0), one(420.0))
    sps = next(m for m in cmp["runs"][0]["metrics"] if m["metric"] == "samples_per_s")
    assert sps["change"] == "unknown" and sps["notes"][0].startswith("short window")
    assert not sentences.notes_carried(measured.speed_text(cmp, "before", "after"), sps["notes"])
    row = next(ln for ln in tables.render(cmp).splitlines() if " samples/s " in ln)
    assert "unknown" in row and sps["notes"][0] in row


@pytest.mark.parametrize(("model", "words"), [
    (1.1, "within 10.0%"), (1.1000000002, "within 10.0%"), (1.10001, "missed by 10.001%"),
    (0.9, "within 10.0%"), (1.25, "missed by 25.0%")])
def test_a_check_at_its_tolerance_is_within_and_a_miss_prints_past_it(model: float,
                                                                     words: str) -> None:
    text = claims.Check("mean step", model, 1.0, 0.10).words()
    assert text.startswith(words), text
    assert not sentences.checks(f"mean step {text}", [0.10])
