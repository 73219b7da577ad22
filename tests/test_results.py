"""The result document: round trip, schema versions, validation errors, atomic writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dsbench import atomic
from dsbench.adapters.survey import new_survey, summarize
from dsbench.errors import DsbenchError
from dsbench.loader.counts import Counts
from dsbench.loader.options import BenchOptions
from dsbench.loader.summary import summarize_run
from dsbench.results import document as results
from dsbench.results import machine
from dsbench.results.document import STAGES


def _round(samples: int, wall: float, cpu: float) -> dict[str, Any]:
    return {"samples": samples, "batches": samples // 4, "wall_s": wall, "cpu_s": cpu,
            "main_cpu_s": 0.1 * cpu, "workers_cpu_s": 0.9 * cpu, "workers_cpu_s_reaped": cpu,
            "samples_per_s": samples / wall, "cpu_s_per_sample": cpu / samples,
            "accelerator_util": None, "warmup_batches": 2, "warmup_s": 0.5,
            "peak_pss_bytes": 1e8, "stages_s": {s: cpu / 10 for s in STAGES},
            "window_files": 2 * samples, "window_bytes": 1000 * samples,
            "skipped_samples": 0, "skipped": [], "batch_cpu_s": [0.01] * (samples // 4)}


COUNTS = Counts(samples=800, skipped=0, units_read=800, units=800, files=1600,
                read_bytes=800_000, mapped_bytes=0)


def _doc() -> dict[str, Any]:
    opts = BenchOptions(batch_size=4)
    run = summarize_run(1, opts, [_round(400, 1.0, 2.0), _round(420, 1.0, 2.1)], COUNTS)
    run["scaling_efficiency"] = 1.0
    summary = summarize(new_survey("files"), "/x")
    return results.new_document(machine.collect(), summary, opts.config("/x"), [run],
                                counts=COUNTS.to_json())


def test_round_trip(tmp_path: Path) -> None:
    doc = _doc()
    out = results.write_result(tmp_path / "r.json", doc)
    back = results.read_result(out)
    assert back == json.loads(json.dumps(doc))
    assert back["schema_version"] == results.SCHEMA_VERSION
    assert back["runs"][0]["files_per_sample"] == 2.0
    assert back["runs"][0]["bytes_per_sample"] == 1000.0
    assert list(tmp_path.iterdir()) == [out]  # no temporary left behind


def test_a_newer_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    doc = _doc()
    doc["schema_version"] = results.SCHEMA_VERSION + 1
    p = tmp_path / "new.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DsbenchError) as exc:
        results.read_result(p)
    msg = str(exc.value)
    assert "newer dsbench" in msg and "upgrade dsbench" in msg and str(p) in msg
    assert "\n" not in msg


def test_an_older_schema_is_upgraded_step_by_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend the current schema is 3: version 1 documents must pass through 1->2 and 2->3.
    seen: list[int] = []

    def step(version: int, rename: tuple[str, str] | None = None):
        def up(d: dict[str, Any]) -> dict[str, Any]:
            seen.append(version)
            if rename:
                d[rename[1]] = d.pop(rename[0])
            return d
        return up

    doc = {"schema_version": 1, "runs_v1": [{"workers": 1}]}  # a key that version 2 renamed
    monkeypatch.setattr(results, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(results, "UPGRADES", {1: step(1, ("runs_v1", "runs")), 2: step(2)})
    back = results.upgrade(doc, "old.json")
    assert seen == [1, 2]
    assert back["schema_version"] == 3
    assert back["runs"][0]["workers"] == 1


def test_a_schema_1_result_is_read_with_its_counts_marked_as_window_estimates(
        tmp_path: Path) -> None:
    doc = _doc()
    doc["schema_version"] = 1
    for key in ("counts", "statistics", "run_id"):
        del doc[key]
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(doc))
    back = results.read_result(p)
    assert back["schema_version"] == results.SCHEMA_VERSION
    assert back["counts"] == {"method": "window", "exact": False, "files_per_sample": 2.0,
                              "bytes_per_sample": 1000.0}
    assert back["statistics"]["center"] == "median of rounds" and back["run_id"] is None


def test_an_older_schema_without_an_upgrade_is_refused(tmp_path: Path) -> None:
    doc = _doc()
    doc["schema_version"] = 0
    p = tmp_path / "old.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DsbenchError, match="schema_version 0"):
        results.read_result(p)


@pytest.mark.parametrize("path,want", [
    (("runs", 0, "samples_per_s"), "runs[0]: 'samples_per_s' is a required property"),
    (("runs", 0, "stages", "decode"), "runs[0].stages: 'decode' is a required property"),
    (("config", "batch_size"), "config: 'batch_size' is a required property"),
    (("machine",), "document: 'machine' is a required property"),
    (("runs", 0, "rounds", 0, "wall_s"), "runs[0].rounds[0]: 'wall_s' is a required property"),
])
def test_missing_keys_are_named(tmp_path: Path, path: tuple[Any, ...], want: str) -> None:
    doc = _doc()
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DsbenchError) as exc:
        results.read_result(p)
    assert want in str(exc.value) and str(p) in str(exc.value)


def test_wrong_values_are_named(tmp_path: Path) -> None:
    doc = _doc()
    doc["runs"][0]["cpu_s_per_sample"] = "fast"
    doc["runs"][0]["samples_per_s_ci95"] = [3.0, 1.0]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DsbenchError, match=r"runs\[0\]\.cpu_s_per_sample"):
        results.read_result(p)
    doc["runs"][0]["cpu_s_per_sample"] = 0.002
    p.write_text(json.dumps(doc))
    with pytest.raises(DsbenchError, match=r"runs\[0\]\.samples_per_s_ci95"):
        results.read_result(p)


@pytest.mark.parametrize("text,want", [("{oops", "not valid JSON"),
                                       ('{"kind": "asv"}', "not a bench result"),
                                       ("[1, 2]", "schema_version")])
def test_not_a_result(tmp_path: Path, text: str, want: str) -> None:
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(DsbenchError, match=want):
        results.read_result(p)
    with pytest.raises(DsbenchError, match="no such result file"):
        results.read_result(tmp_path / "absent.json")


def test_write_is_atomic_and_refuses_invalid_documents(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "r.json"
    results.write_result(p, _doc())
    before = p.read_bytes()
    bad = _doc()
    bad["runs"][0]["samples_per_s"] = math.nan
    with pytest.raises(DsbenchError, match="samples_per_s"):
        results.write_result(p, bad)
    # A failure while writing leaves the old file whole and no temporary behind.
    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")
    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(DsbenchError, match="disk full"):
        results.write_result(p, _doc())
    assert p.read_bytes() == before
    assert [x.name for x in tmp_path.iterdir()] == ["r.json"]


def test_machine_block_has_the_facts_that_make_results_comparable() -> None:
    m = machine.collect()
    assert m["cpu_model"] and m["logical_cores"] >= m["usable_cores"] >= 1
    assert m["memory_bytes"] > 0
    assert m["python"]["version"].count(".") == 2
    assert m["libraries"]["numpy"] and m["libraries"]["pyarrow"]
    # The tests live inside the project's work tree, which is a git repository.
    git = machine.git_info(Path(__file__).parent)
    assert git is not None and isinstance(git["dirty"], bool)
    assert git["commit"] is None or len(git["commit"]) == 40
