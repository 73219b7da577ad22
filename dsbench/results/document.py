"""The bench result document: versioned JSON, written atomically, validated when read.

Its contract is a JSON Schema (schemas/bench.schema.json; docs/results.md shows it as tables).
`schema_version` counts incompatible changes. A reader refuses a document from a newer dsbench
(it cannot know what changed), upgrades an older one step by step through `UPGRADES`, and then
validates it, so a hand-edited or truncated file fails with one line naming the file and the
key, not a KeyError three modules later.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from dsbench import __version__, atomic
from dsbench.errors import DsbenchError
from dsbench.results import schema
from dsbench.results.stages import STAGES
from dsbench.results.types import BenchResult, Config, Counts, Machine, Run, Statistics

SCHEMA_VERSION = 2
KIND = "dsbench-bench"
# How runs summarise their rounds (dsbench.stats): the geometric mean, and a Student t
# interval on the rounds' logarithms.
STATISTICS: Statistics = {"center": "geometric mean of rounds",
                          "interval": "t on log values", "level": 0.95}
__all__ = ["STAGES", "new_document", "read_result", "write_result"]
PAIRS = ("samples_per_s_iqr", "samples_per_s_ci95", "cpu_s_per_sample_iqr",
         "cpu_s_per_sample_ci95")


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_document(machine: Machine, export: dict[str, Any], config: Config, runs: list[Run],
                 warnings: list[str] | None = None, counts: Counts | None = None,
                 run_id: str | None = None) -> BenchResult:
    """`run_id` is shared by the documents of exports measured in one interleaved run, whose
    rounds pair up by position."""
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "created_utc": now_utc(),
            "dsbench_version": __version__, "run_id": run_id or uuid.uuid4().hex,
            "machine": machine, "export": export,
            "counts": counts or {"method": "whole units", "exact": False, "files_per_sample": 0.0,
                                 "bytes_per_sample": 0.0},
            "config": config, "statistics": STATISTICS.copy(), "runs": runs,
            "warnings": list(warnings or [])}


def _from_1(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 counted files and bytes in its windows and summarised rounds by their median:
    its counts become window estimates (not counted over whole units), its runs unpaired."""
    runs = doc.get("runs")
    first = runs[0] if isinstance(runs, list) and runs and isinstance(runs[0], dict) else {}
    doc["counts"] = {"method": "window", "exact": False,
                     "files_per_sample": first.get("files_per_sample"),
                     "bytes_per_sample": first.get("bytes_per_sample")}
    doc["statistics"] = {"center": "median of rounds",
                         "interval": "percentile bootstrap of the median", "level": 0.95}
    doc["run_id"] = None
    return doc


# UPGRADES[v] turns a version-v document into a version-(v + 1) one.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_1}


def validate(doc: Any, source: object = "result") -> BenchResult:
    """Check a current-version document; a DsbenchError naming `source` and the bad key."""
    schema.validate(doc, "bench", source)
    # What a schema cannot say: a confidence level is a fraction below 1, and a worker count
    # is measured once (its rounds are inside its run), so comparisons pair runs unambiguously.
    level = doc["statistics"]["level"]
    if not 0 < level < 1:
        raise DsbenchError(f"statistics.level: {level} is not a confidence level between 0 "
                           "and 1", path=source)
    seen: dict[int, int] = {}
    for i, run in enumerate(doc["runs"]):
        first = seen.setdefault(run["workers"], i)
        if first != i:
            raise DsbenchError(f"runs[{i}]: a second run of {run['workers']} workers (the "
                               f"first is runs[{first}])", path=source)
        for key in PAIRS:
            lo, hi = run[key]
            if lo > hi:
                raise DsbenchError(f"runs[{i}].{key}: low end {lo} above high end {hi}",
                                   path=source)
    return cast(BenchResult, doc)  # the schema checked what the type states


def upgrade(doc: Any, source: object = "result") -> dict[str, Any]:
    """Bring a document to SCHEMA_VERSION; refuse a newer one."""
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if isinstance(version, bool) or not isinstance(version, int):
        raise DsbenchError(f"no integer schema_version (got {version!r}); not a dsbench result",
                           path=source)
    if version > SCHEMA_VERSION:
        raise DsbenchError(f"written by a newer dsbench (schema_version {version}; this dsbench "
                           f"{__version__} reads up to {SCHEMA_VERSION}): upgrade dsbench",
                           path=source)
    while version < SCHEMA_VERSION:
        step = UPGRADES.get(version)
        if step is None:
            raise DsbenchError(f"schema_version {version} is not one this dsbench can upgrade",
                               path=source)
        doc = step(dict(doc))
        version += 1
        doc["schema_version"] = version
    return dict(doc)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(path: Path, what: str) -> Any:
    """A JSON file's content; one-line errors for a missing, unreadable or malformed file."""
    atomic.check_input(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DsbenchError(f"no such {what} file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DsbenchError(f"cannot read {what}: {exc}", path=path) from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise DsbenchError(f"not valid JSON: {exc}", path=path) from None
    except RecursionError:
        raise DsbenchError("not a dsbench document: JSON nested too deep", path=path) from None


def read_result(path: str | Path) -> BenchResult:
    """Load, upgrade and validate a result file."""
    p = Path(path)
    doc = load_json(p, "result")
    if isinstance(doc, dict) and "kind" in doc and doc["kind"] != KIND:
        raise DsbenchError(f"not a bench result (kind {doc['kind']!r})", path=p)
    return validate(upgrade(doc, p), p)


def write_result(path: str | Path, doc: BenchResult) -> Path:
    """Validate and write `doc` atomically: a reader sees the old file or the whole new one."""
    p = Path(path)
    validate(doc, p)
    try:
        return atomic.write_output(p, (json.dumps(doc, indent=1, allow_nan=False) + "\n"
                                       ).encode(), fsync=True)
    except OSError as exc:
        raise DsbenchError(f"cannot write result: {exc.strerror or exc}", path=p) from None
