"""A packed job's sides in sequences (`advise --pack`).

With `--pack` the job's sample is a sequence of `seq_len` ids, whatever the export stores: a
document per sample (packed in the loader's workers, loader.packing) or a token stream already
laid end to end (litdata's TokensLoader, whose sample is a block of `seq_len` ids). Per sample,
those sides would compare a document with a sequence. So advise states every figure of a packed
side per sequence, before it compares, ranks or carries anything to the cluster:

* timed: each round's CPU and rate over the sequences it delivered (batches x batch size), the
  run's summarised again from those rounds;
* counted per sample (bytes, files, requests, stage times): times the documents per sequence;
* exact: each stage's instructions per document times seq_len over the mean ids of the
  documents the exact pass counted it over (exact.read_ids_per_sample for the read stage,
  counted over whole units; exact.ids_per_sample for the others): a count of a fixed set of
  documents, so as repeatable as the count per document;
* the export's samples: its sequences (the documents it holds are kept as `documents`).

A token stream's block is one sequence, so its figures are the same either way. The cluster
model reads a restated side as it reads a packed one (model.costs): its documents per sequence
are then 1.
"""

from __future__ import annotations

import copy
from collections.abc import MutableMapping
from typing import Any

from dsbench import stats
from dsbench.errors import DsbenchError
from dsbench.loader.packing import documents_per_sequence, packed
from dsbench.results.types import BenchResult

PER_SAMPLE = ("cpu_s_per_sample", "host_cpu_s_per_sample", "bytes_per_sample",
              "mapped_bytes_per_sample", "files_per_sample", "requests_per_sample")


def _scale(where: MutableMapping[str, Any], keys: tuple[str, ...], by: float) -> None:
    for key in keys:
        value = where.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            where[key] = value * by
        elif isinstance(value, list) and all(isinstance(v, int | float) for v in value):
            where[key] = [v * by for v in value]
        elif isinstance(value, dict) and all(isinstance(v, int | float)
                                             for v in value.values()):
            where[key] = {k: v * by for k, v in value.items()}


def in_sequences(doc: BenchResult) -> BenchResult:
    """`doc` with each figure per sequence (the module docstring); `doc` itself when it was
    not packed."""
    if not packed(doc):
        return doc
    out: Any = copy.deepcopy(doc)
    run = out["runs"][0]
    docs = documents_per_sequence(run)
    if not docs:
        raise DsbenchError("--pack: a side's rounds delivered no sequence, so nothing can be "
                           "stated per sequence; try a longer --budget",
                           path=out["export"].get("path"))
    batch = run["batch_size"]
    for r in run["rounds"]:
        sequences = r["batches"] * batch
        per = r["samples"] / sequences if sequences else docs
        _scale(r, ("cpu_s_per_sample", "host_cpu_s_per_sample", "stages"), per)
        _scale(r, ("samples_per_s",), 1 / per if per else 1.0)
        r["samples"] = sequences
    _scale(run, (*PER_SAMPLE, "stages"), docs)
    # The timed figures summarised again from the restated rounds, as bench summarises them
    # (loader.summary), so that they and the rounds' ratios agree.
    for key in ("samples_per_s", "cpu_s_per_sample"):
        got = stats.summarize([r[key] for r in run["rounds"]])
        run[key], run[f"{key}_iqr"], run[f"{key}_ci95"] = got.center, list(got.iqr), \
            list(got.ci95)
        run[f"{key}_spread"] = got.relative_spread
    run["samples"] = round(run["samples"] / docs)
    export = out["export"]
    export["documents"] = export.get("samples")
    if isinstance(export.get("samples"), int):
        export["samples"] = max(1, round(export["samples"] / docs))
    _scale(export, ("files_per_sample",), docs)
    if isinstance(export.get("bytes_per_sample"), dict):
        _scale(export, ("bytes_per_sample",), docs)
    for section in ("counts", "requests"):
        if isinstance(out.get(section), dict):
            _scale(out[section], PER_SAMPLE, docs)
    return out


def exact_in_sequences(doc: BenchResult, exact: Any) -> Any:
    """The exact pass's section of a packed `doc`, per sequence (the module docstring); as it
    is for a side not packed, or not counted."""
    seq_len = (doc.get("config") or {}).get("seq_len")
    if not packed(doc) or not exact.get("counted") or not seq_len:
        return exact
    ids, read_ids = exact.get("ids_per_sample"), exact.get("read_ids_per_sample")
    if not ids or not read_ids:
        return {"counted": False, "why_not": "the exact pass packed no token id, so its "
                                             "count cannot be stated per sequence"}
    out = copy.deepcopy(exact)
    # The read stage is counted over whole units' documents, the others over the first ones:
    # each by its own documents' ids.
    per = {stage: seq_len / (read_ids if stage == "read" else ids) for stage in out["stages"]}
    out["stages"] = {stage: v * per[stage] for stage, v in out["stages"].items()}
    out["instructions_per_sample"] = sum(out["stages"].values())
    kernel = {stage: {k: v * per.get(stage, seq_len / ids) for k, v in figures.items()}
              for stage, figures in (out.get("kernel_stages") or {}).items()}
    out["kernel_stages"] = kernel
    for key in ("read_calls", "write_calls", "minor_faults"):
        if f"{key}_per_sample" in out:
            out[f"{key}_per_sample"] = sum(f.get(key, 0.0) for f in kernel.values())
    return out
