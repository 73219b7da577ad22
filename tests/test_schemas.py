"""The documents' contract: every document dsbench writes validates against its JSON Schema,
the schemas refuse what they should, and docs/results.md shows exactly the schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import resultdocs as rd

from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.model.budget import Job, budget
from dsbench.model.cluster import extrapolate
from dsbench.model.costs import LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.results import schema
from dsbench.results.document import read_result, write_result

DOC = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def test_results_md_shows_the_schemas_as_they_are() -> None:
    text = DOC.read_text(encoding="utf-8")
    shown = dict(re.findall(r"<!-- schema: ([\w-]+) -->\n(.*?)<!-- end schema: \1 -->", text,
                            re.S))
    assert sorted(shown) == sorted(schema.NAMES)
    for name, block in shown.items():
        assert block == schema.markdown(name), f"regenerate docs/results.md's {name} tables"


def test_every_schema_is_a_valid_json_schema() -> None:
    import jsonschema

    for name in schema.NAMES:
        jsonschema.Draft202012Validator.check_schema(schema.load(name))


def test_a_measured_bench_result_validates_and_reads_back(tiny_exports: dict[str, Path],
                                                          tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["bench", str(tiny_exports["before"]), "--seconds", "0.2", "--rounds", "2",
                 "--batch-size", "8", "--json", str(out)]) == 0
    doc = read_result(out)
    schema.validate(doc, "bench")
    schema.validate(doc["export"], "summary")


def test_comparison_and_gate_documents_validate(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (write_result(tmp_path / f"{n}.json", rd.document([rd.run(sps=s)]))
            for n, s in (("a", [400, 405, 395]), ("b", [300, 310, 305])))
    assert main(["gate", str(a), str(b), "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    schema.validate(out["gate"], "gate")
    schema.validate(out["comparison"], "comparison")
    assert main(["compare", str(a), str(b), "--nodes", "1", "--json", "-"]) == 0
    schema.validate(json.loads(capsys.readouterr().out), "comparison")


def test_model_documents_validate() -> None:
    doc = extrapolate(LoaderCost.stated(0.004, 0.2), ClusterSpec(nodes=1),
                      np.random.default_rng(0), steps=300, scaling=(2, 4))
    schema.validate(doc, "extrapolation")
    schema.validate(budget(Job(gpus=8, mean_step_s=1.0, gpu_util=0.5)), "budget")


@pytest.mark.parametrize(("change", "where"), [
    (lambda d: d["runs"][0].pop("cpu_s_per_sample"), "runs[0]: 'cpu_s_per_sample' is a required"),
    (lambda d: d["runs"][0]["rounds"][1].update(wall_s=-1.0), "runs[0].rounds[1].wall_s: -1.0"),
    (lambda d: d["counts"].update(method="guess"), "counts.method: 'guess' is not one of"),
    (lambda d: d["runs"][0].update(samples_per_s=float("nan")), "runs[0].samples_per_s: nan is"),
    (lambda d: d.update(schema_version=1), "schema_version: 2 was expected"),
])
def test_the_bench_schema_names_the_key_at_fault(change: Any, where: str) -> None:
    doc = rd.document([rd.run()])
    change(doc)
    with pytest.raises(DsbenchError) as exc:
        schema.validate(doc, "bench", "r.json")
    assert str(exc.value).startswith(f"r.json: {where}") and "\n" not in str(exc.value)


@pytest.mark.parametrize(("typed", "where"), [
    ("BenchResult", None), ("Machine", "machine"), ("Counts", "counts"), ("Config", "config"),
    ("Statistics", "statistics"), ("Run", "run"), ("Round", "round")])
def test_the_typed_document_mirrors_the_schema(typed: str, where: str | None) -> None:
    from typing import get_type_hints

    from dsbench.results import types

    cls = getattr(types, typed)
    bench = schema.load("bench")
    obj = bench if where is None else bench["$defs"][where]
    assert set(get_type_hints(cls)) == set(obj["properties"])
    assert set(cls.__required_keys__) == set(obj["required"])
