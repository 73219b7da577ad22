"""Every sentence agrees with its figures: verdicts, compare tables, gate tables, the model's
notes and the job checks, rendered from generated documents and read back (tests/sentences.py).
The readers are themselves checked on sentences that once shipped, which they must catch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import sentences
from resultdocs import document, run

from dsbench.analysis import compare, gate
from dsbench.model import explain
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
        r = run(sps=sps, cpu=cpu, batch_size=batch, pss=float(5e8 * g.choice([1, 1, 1.01, 3])),
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
        bad += [f"warning {n!r} not carried into {sentence!r}" for n in rows[key]["notes"]
                if n not in sentence]
    counts = measured.counts_text(cmp, "base", "cand")
    if (rows["files_per_sample"]["ratio"] == 1.0) != ("the same" in counts.split("reads")[0]):
        bad.append(f"files said to change or not against their ratio: {counts!r}")
    g = gate.evaluate(cmp, gate.Thresholds())
    bad += sentences.changes(tables.render_gate(g))
    return bad


def test_sentences_agree_with_their_figures_over_generated_comparisons() -> None:
    rng = np.random.default_rng(20261205)
    problems: list[str] = []
    seen = {"distinguishable": 0, "not": 0, "noisy": 0, "short": 0}
    for i in range(DOCS):
        base, cand = _pair(rng, validate=i % 50 == 0)  # valid documents, checked now and then
        cmp = compare.compare(base, cand)
        problems += _comparison_problems(cmp)
        cpu = next(m for m in cmp["runs"][0]["metrics"] if m["metric"] == "cpu_s_per_sample")
        seen["distinguishable" if cpu["significant"] else "not"] += 1
        seen["noisy"] += any(n.startswith("noisy") for n in cpu["notes"])
        seen["short"] += any(n.startswith("short") for n in cpu["notes"])
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
        p99_128 = p99_64 * float(rng.choice([1.0, rng.uniform(0.9, 1.1), rng.uniform(1, 2)]))
        q = float(rng.choice([0.0, 0.001, 0.02]))
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
    for _ in range(DOCS):
        per, node = float(10 ** rng.uniform(7, 11)), float(10 ** rng.uniform(11, 13))
        workers = int(rng.integers(1, 129))
        share = per * workers / node
        mem = {"per_worker_bytes": per, "measured_workers": 2, "workers_per_node": workers,
               "loaders_bytes": per * workers, "node_bytes": node, "share": share,
               "fits": share <= 1, "tight": share > 0.5}
        text = " ".join(memory_lines(mem))
        assert ("would not fit" in text) == (share > 1), text
        assert ("over half the node" in text) == (0.5 < share <= 1), text


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
    base, cand = _noisy_pair()
    cmp = compare.compare(base, cand)
    cpu = next(m for m in cmp["runs"][0]["metrics"] if m["metric"] == "samples_per_s")
    assert cpu["notes"] and cpu["notes"][0].startswith("noisy: rounds vary")
    assert cpu["notes"][0] in measured.speed_text(cmp, "before", "after")


def _noisy_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    sps, cpu = [400.0, 460.0, 350.0, 420.0], [0.005] * 4
    base = document([run(sps=sps, cpu=cpu)], run_id="r")
    cand = document([run(sps=[s * 1.1 for s in sps], cpu=cpu)], run_id="r")
    return base, cand
