"""The bench result document: versioned JSON, written atomically, validated when read.

Layout and units: docs/results.md. `schema_version` counts incompatible changes. A reader
refuses a document from a newer dsbench (it cannot know what changed) and upgrades an older one
step by step through `UPGRADES`; then every key the rest of dsbench relies on is checked, so a
hand-edited or truncated file fails with one line naming the file and the key, not a KeyError
three modules later.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from dsbench import __version__
from dsbench.errors import DsbenchError

SCHEMA_VERSION = 1
# The loader's stages, in pipeline order: every run reports CPU seconds per sample in each.
STAGES = ("read", "decode", "fields", "transform", "collate")
KIND = "dsbench-bench"

# UPGRADES[v] turns a version-v document into a version-(v + 1) one. Version 1 is the first.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

TOP_KEYS = ("schema_version", "kind", "created_utc", "dsbench_version", "machine", "export",
            "config", "runs")
CONFIG_KEYS = ("path", "batch_size", "seconds", "rounds", "warmup_batches", "step_time_s", "cold",
               "decoder", "normalize", "on_error", "backend", "prefetch")
RUN_NUMBERS = ("workers", "batch_size", "samples_per_s", "cpu_s_per_sample", "bytes_per_sample",
               "files_per_sample", "peak_pss_bytes", "samples", "skipped_samples")
RUN_PAIRS = ("samples_per_s_iqr", "samples_per_s_ci95", "cpu_s_per_sample_iqr",
             "cpu_s_per_sample_ci95")
RUN_OPTIONAL_NUMBERS = ("accelerator_util", "scaling_efficiency")
ROUND_NUMBERS = ("samples", "wall_s", "cpu_s", "samples_per_s", "cpu_s_per_sample")


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_document(machine: dict[str, Any], export: dict[str, Any], config: dict[str, Any],
                 runs: list[dict[str, Any]], warnings: list[str] | None = None) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "created_utc": now_utc(),
            "dsbench_version": __version__, "machine": machine, "export": export,
            "config": config, "runs": runs, "warnings": list(warnings or [])}


def _is_number(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


class _Checker:
    def __init__(self, source: object) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> DsbenchError:
        return DsbenchError(f"{where}: {message}", path=self.source)

    def table(self, obj: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object, got {type(obj).__name__}")
        for k in keys:
            if k not in obj:
                raise self.fail(where, f"missing key {k!r}")
        return obj

    def number(self, obj: dict[str, Any], where: str, key: str, optional: bool = False) -> None:
        value = obj.get(key)
        if optional and value is None:
            return
        if not (_is_number(value) and value >= 0):
            raise self.fail(f"{where}.{key}", f"expected a finite non-negative number, "
                                              f"got {value!r}")

    def pair(self, obj: dict[str, Any], where: str, key: str) -> None:
        value = obj[key]
        if not (isinstance(value, list) and len(value) == 2 and all(map(_is_number, value))
                and value[0] <= value[1]):
            raise self.fail(f"{where}.{key}", f"expected [low, high] numbers, got {value!r}")


def validate(doc: Any, source: object = "result") -> dict[str, Any]:
    """Check a current-version document; a DsbenchError naming `source` and the bad key."""
    c = _Checker(source)
    doc = c.table(doc, "document", TOP_KEYS)
    if doc["kind"] != KIND:
        raise c.fail("kind", f"expected {KIND!r}, got {doc['kind']!r}")
    for block in ("machine", "export"):
        c.table(doc[block], block, ())
    c.table(doc["config"], "config", CONFIG_KEYS)
    runs = doc["runs"]
    if not isinstance(runs, list) or not runs:
        raise c.fail("runs", "expected a non-empty list of runs")
    for i, run in enumerate(runs):
        where = f"runs[{i}]"
        c.table(run, where, RUN_NUMBERS + RUN_PAIRS + RUN_OPTIONAL_NUMBERS
                + ("stages", "skipped", "batch_cpu_s", "rounds"))
        for key in RUN_NUMBERS:
            c.number(run, where, key)
        for key in RUN_OPTIONAL_NUMBERS:
            c.number(run, where, key, optional=True)
        for key in RUN_PAIRS:
            c.pair(run, where, key)
        stages = c.table(run["stages"], f"{where}.stages", STAGES)
        for stage in STAGES:
            c.number(stages, f"{where}.stages", stage)
        if not isinstance(run["skipped"], list):
            raise c.fail(f"{where}.skipped", "expected a list")
        batch_cpu = run["batch_cpu_s"]
        if not isinstance(batch_cpu, list) or not all(_is_number(x) for x in batch_cpu):
            raise c.fail(f"{where}.batch_cpu_s", "expected a list of numbers")
        rounds = run["rounds"]
        if not isinstance(rounds, list) or not rounds:
            raise c.fail(f"{where}.rounds", "expected a non-empty list of rounds")
        for j, rnd in enumerate(rounds):
            c.table(rnd, f"{where}.rounds[{j}]", ROUND_NUMBERS)
            for key in ROUND_NUMBERS:
                c.number(rnd, f"{where}.rounds[{j}]", key)
    return doc


def upgrade(doc: dict[str, Any], source: object = "result") -> dict[str, Any]:
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
    return doc


def read_result(path: str | Path) -> dict[str, Any]:
    """Load, upgrade and validate a result file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DsbenchError("no such result file", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DsbenchError(f"cannot read result: {exc}", path=p) from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DsbenchError(f"not valid JSON: {exc}", path=p) from None
    if isinstance(doc, dict) and "kind" in doc and doc["kind"] != KIND:
        raise DsbenchError(f"not a bench result (kind {doc['kind']!r})", path=p)
    return validate(upgrade(doc, p), p)


def write_result(path: str | Path, doc: dict[str, Any]) -> Path:
    """Validate and write `doc` atomically: a reader sees the old file or the whole new one."""
    p = Path(path)
    validate(doc, p)
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DsbenchError(f"cannot write result: {exc}", path=p) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p
