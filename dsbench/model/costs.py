"""What the input pipeline costs, as the cluster model consumes it: measured or stated.

`LoaderCost.from_result` takes a bench result document (as dsbench.results.read_result returns
it, or built in-process) and checks every figure it uses;
`LoaderCost.stated` takes a per-sample CPU figure and its coefficient of variation, so the model
can be explored before anything is measured. Both give the per-batch CPU of one uncontended worker
(`sample_batch_cpu`) and the contention factor seen when more workers share the machine.
`Distribution` parses the GPU compute time per step (`--compute`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.errors import DsbenchError
from dsbench.loader.order import order_label
from dsbench.loader.packing import documents_per_sequence

DIST_SYNTAX = "SECONDS, normal:MEAN,SD or lognormal:MEAN,SD (seconds), e.g. normal:0.25,0.01"


# A coefficient of variation past this is no distribution of CPU times anyone measured.
MAX_CV = 1000.0

@dataclass(frozen=True)
class Distribution:
    """A positive duration: constant, normal (clipped at 0) or lognormal, by mean and sd."""

    kind: str
    mean: float
    sd: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("const", "normal", "lognormal"):
            raise DsbenchError(f"unknown distribution {self.kind!r}; expected {DIST_SYNTAX}")
        if not (math.isfinite(self.mean) and self.mean > 0):
            raise DsbenchError(f"distribution mean must be a finite number > 0, not {self.mean}")
        if not (math.isfinite(self.sd) and self.sd >= 0):
            raise DsbenchError(f"distribution sd must be a finite number >= 0, not {self.sd}")

    @classmethod
    def parse(cls, text: str) -> Distribution:
        head, sep, tail = text.strip().partition(":")
        try:
            if not sep:
                return cls("const", float(head))
            mean, sd = (float(v) for v in tail.split(","))
        except ValueError:
            raise DsbenchError(f"{text!r}: expected {DIST_SYNTAX}") from None
        return cls(head.lower(), mean, sd)

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self.kind == "const" or self.sd == 0:
            return np.full(shape, self.mean)
        if self.kind == "normal":
            return np.maximum(rng.normal(self.mean, self.sd, shape), 0.0)
        sigma2 = math.log1p((self.sd / self.mean) ** 2)
        return rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), shape)

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "mean_s": self.mean, "sd_s": self.sd}

    def describe(self) -> str:
        from dsbench import fmt
        if self.kind == "const" or self.sd == 0:
            return fmt.seconds(self.mean)
        return f"{self.kind}(mean {fmt.seconds(self.mean)}, sd {fmt.seconds(self.sd)})"


@dataclass(frozen=True)
class LoaderCost:
    """Per-sample CPU of one worker, how it grows with more workers, and what a sample reads."""

    origin: str  # "measured" or "stated"
    cpu_s_per_sample: float  # mean CPU of one uncontended worker per sample
    measured_batch: int  # the batch size the per-batch figures were measured at
    batch_cpu_s: tuple[float, ...] = ()  # measured per-batch CPU of the base run; () when stated
    cpu_cv: float = 0.0  # stated: per-sample coefficient of variation
    contention: tuple[tuple[float, float], ...] = ((0.0, 1.0),)  # (load, CPU factor) points
    files_per_sample: float = 0.0
    bytes_per_sample: float = 0.0
    base_workers: int = 1
    path: str | None = None
    stages: tuple[tuple[str, float], ...] = ()
    stated_fields: frozenset[str] = frozenset()  # figures given by hand over a measured result
    # The measured export's units (shards) and what they are called: loaders that split an
    # export by unit give each worker whole units. None when unknown (stated, or samples).
    units: int | None = None
    unit_name: str = "units"
    # Peak memory per loader worker (anonymous + shared, or PSS: memory_kind) and the worker
    # count it was measured at; None when stated or not recorded.
    memory_per_worker_bytes: float | None = None
    memory_workers: int | None = None
    memory_kind: str = "PSS"  # or "anonymous + shared": the kernel's split without page cache
    order: str | None = None  # the order the measured export was read in (bench --order)
    # bench --epochs: the wait at an epoch's start (fresh workers to their first batch), s
    epoch_start_s: float | None = None
    # Measured in an object store: data requests per sample (GET and range GET); None on disk
    requests_per_sample: float | None = None
    export_samples: int | None = None  # the measured export's samples: one epoch's, by default
    # Token samples: ids per training sequence (bench --seq-len), so that rates can be said in
    # tokens as language-model jobs state them; None for images.
    seq_len: int | None = None
    # Audio samples: seconds per training clip (bench --clip-seconds); None otherwise.
    clip_s: float | None = None
    # bench --pack: documents per packed sequence, measured. A sample of the model is then a
    # sequence: the export's per-document figures are scaled by it. None otherwise.
    documents_per_sample: float | None = None

    def __post_init__(self) -> None:
        for name in ("cpu_s_per_sample", "cpu_cv", "files_per_sample", "bytes_per_sample"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise DsbenchError(f"{name} must be a finite number >= 0, not {v}", path=self.path)
        if self.cpu_cv > MAX_CV:  # squared in the lognormal's parameters, it would overflow
            raise DsbenchError(f"the CPU coefficient of variation must be at most {MAX_CV:g}, "
                               f"not {self.cpu_cv:g}", path=self.path)
        if self.cpu_s_per_sample <= 0:
            raise DsbenchError("CPU per sample must be > 0", path=self.path)
        if self.measured_batch < 1:
            raise DsbenchError("batch size must be >= 1", path=self.path)

    @classmethod
    def stated(cls, cpu_s_per_sample: float, cv: float = 0.0, *, files_per_sample: float = 0.0,
               bytes_per_sample: float = 0.0, batch_size: int = 32) -> LoaderCost:
        return cls("stated", cpu_s_per_sample, batch_size, cpu_cv=cv,
                   files_per_sample=files_per_sample, bytes_per_sample=bytes_per_sample)

    @classmethod
    def from_result(cls, doc: Mapping[str, Any], path: str | None = None) -> LoaderCost:
        return _from_result(doc, path)

    def contention_at(self, load: float) -> float:
        """CPU-per-sample factor at `load` (busy workers / free cores, at most 1), interpolated."""
        loads, factors = zip(*self.contention, strict=True)
        return float(np.interp(min(load, 1.0), loads, factors))

    def sample_batch_cpu(self, rng: np.random.Generator, shape: tuple[int, int],
                         batch: int) -> np.ndarray:
        """CPU seconds of one uncontended worker building batches of `batch` samples."""
        if self.batch_cpu_s:
            measured = np.asarray(self.batch_cpu_s)
            x = measured[rng.integers(0, measured.size, shape)]
            r = batch / self.measured_batch
            if r == 1:
                return x
            # A batch r times as large: mean scales by r, spread around it by sqrt(r), as for a
            # sum of independent batches; never below r times the cheapest measured batch.
            mean = measured.mean()
            return np.maximum(r * mean + math.sqrt(r) * (x - mean), r * measured.min())
        mean = batch * self.cpu_s_per_sample
        if self.cpu_cv == 0:
            return np.full(shape, mean)
        sd = self.cpu_s_per_sample * self.cpu_cv * math.sqrt(batch)
        sigma2 = math.log1p((sd / mean) ** 2)
        return rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), shape)

    def to_json(self) -> dict[str, object]:
        return {"origin": self.origin, "path": self.path,
                "cpu_s_per_sample": self.cpu_s_per_sample, "cpu_cv": self.cpu_cv,
                "measured_batch": self.measured_batch, "base_workers": self.base_workers,
                "measured_batches": len(self.batch_cpu_s),
                "contention": [{"load": a, "factor": b} for a, b in self.contention],
                "files_per_sample": self.files_per_sample,
                "bytes_per_sample": self.bytes_per_sample, "stages": dict(self.stages),
                "stated_fields": sorted(self.stated_fields), "units": self.units,
                "memory_per_worker_bytes": self.memory_per_worker_bytes,
                "memory_workers": self.memory_workers, "memory_kind": self.memory_kind,
                "order": self.order, "epoch_start_s": self.epoch_start_s,
                "requests_per_sample": self.requests_per_sample,
                "export_samples": self.export_samples, "seq_len": self.seq_len,
                "clip_s": self.clip_s, "documents_per_sample": self.documents_per_sample}

    def source_of(self, name: str) -> str:
        """'measured' or 'stated', for one of this cost's figures."""
        return "stated" if self.origin == "stated" or name in self.stated_fields else "measured"


def _get(doc: Mapping[str, Any], key: str, path: str | None, where: str = "") -> Any:
    if not isinstance(doc, Mapping) or key not in doc:
        raise DsbenchError(f"missing key '{where}{key}'", path=path)
    return doc[key]


def _number(value: Any, name: str, path: str | None, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0 or (positive and value <= 0):
        need = "> 0" if positive else ">= 0"
        raise DsbenchError(f"'{name}' must be a finite number {need}, not {value!r}", path=path)
    return float(value)


def _from_result(doc: Mapping[str, Any], path: str | None) -> LoaderCost:
    runs = _get(doc, "runs", path)
    if not isinstance(runs, Sequence) or isinstance(runs, str) or not runs:
        raise DsbenchError("'runs' must be a non-empty list", path=path)
    machine = _get(doc, "machine", path)
    key = "cores_usable" if isinstance(machine, Mapping) and "cores_usable" in machine \
        else "usable_cores"  # the name dsbench.machine writes
    cores = _number(_get(machine, key, path, "machine."), f"machine.{key}", path, positive=True)
    parsed = []
    for i, run in enumerate(runs):
        where = f"runs[{i}]."
        workers = _get(run, "workers", path, where)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise DsbenchError(f"'{where}workers' must be an integer >= 1", path=path)
        cpu = _number(_get(run, "cpu_s_per_sample", path, where), where + "cpu_s_per_sample",
                      path, positive=True)
        parsed.append((workers, cpu, i, run))
    parsed.sort(key=lambda t: t[0])
    base_workers, base_cpu, i, base = parsed[0]
    where = f"runs[{i}]."
    batch = _get(base, "batch_size", path, where)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise DsbenchError(f"'{where}batch_size' must be an integer >= 1", path=path)
    batches = _get(base, "batch_cpu_s", path, where)
    if not isinstance(batches, Sequence) or isinstance(batches, str) or not batches:
        raise DsbenchError(f"'{where}batch_cpu_s' must be a non-empty list", path=path)
    per_batch = tuple(_number(b, where + "batch_cpu_s", path) for b in batches)
    if sum(per_batch) <= 0:
        raise DsbenchError(f"'{where}batch_cpu_s' is all zero", path=path)
    # Contention: CPU per sample at W workers over the base run, placed at load W / cores.
    by_load = {0.0: 1.0} | {w / cores: cpu / base_cpu for w, cpu, _, _ in parsed if w <= cores}
    points = sorted(by_load.items())
    config = doc.get("config")
    raw_export = doc.get("export")
    export: Mapping[str, Any] = raw_export if isinstance(raw_export, Mapping) else {}
    # --pack: the job's sample is a sequence; what bench counted per document, each sequence
    # costs `docs` times (its CPU is per batch of sequences already).
    docs = documents_per_sequence(base) \
        if isinstance(config, Mapping) and config.get("pack") is True else None
    per = docs or 1.0
    files = per * _read_per_sample(base, export, "files_per_sample", where, path)
    nbytes = per * _read_per_sample(base, export, "bytes_per_sample", where, path)
    stages = base.get("stages") if isinstance(base.get("stages"), Mapping) else {}
    stage_items = tuple((str(k), per * float(v)) for k, v in stages.items()
                        if isinstance(v, int | float) and not isinstance(v, bool))
    requests = _requests(doc)
    samples = _count(export.get("samples"))
    units = export.get("units")
    # Per-sample files are split by sample: their "units" never run short of workers.
    sharded = isinstance(units, int) and not isinstance(units, bool) and \
        export.get("layout") not in ("files", "dataset")
    return LoaderCost("measured", sum(per_batch) / len(per_batch) / batch, batch, per_batch,
                      contention=tuple(points), files_per_sample=files, bytes_per_sample=nbytes,
                      base_workers=base_workers, path=None if path is None else str(path),
                      stages=stage_items, units=units if sharded else None,
                      unit_name=str(export.get("unit_name") or "units"),
                      order=order_label(config if isinstance(config, Mapping) else {}),
                      epoch_start_s=_epoch_start(base),
                      requests_per_sample=None if requests is None else per * requests,
                      export_samples=None if samples is None else max(1, round(samples / per)),
                      documents_per_sample=docs,
                      seq_len=_count(config.get("seq_len")) if isinstance(config, Mapping)
                      else None, clip_s=_positive(config.get("clip_seconds"))
                      if isinstance(config, Mapping) else None, **_memory(parsed))


def _positive(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and value > 0 else None


def _requests(doc: Mapping[str, Any]) -> float | None:
    """Data requests per sample where the export was read from an object store."""
    requests = doc.get("requests")
    value = requests.get("requests_per_sample") if isinstance(requests, Mapping) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and \
            math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def _epoch_start(run: Mapping[str, Any]) -> float | None:
    """The median wait at an epoch's start over a --epochs run's epochs; None without them."""
    epochs = run.get("epochs")
    raw = [e.get("boundary_wait_s") for e in epochs if isinstance(e, Mapping)] \
        if isinstance(epochs, Sequence) and not isinstance(epochs, str) else []
    waits = [float(w) for w in raw
             if isinstance(w, int | float) and not isinstance(w, bool) and w >= 0]
    return float(statistics.median(waits)) if waits and len(waits) == len(raw) else None


def _memory(parsed: list[tuple[int, float, int, Any]]) -> dict[str, Any]:
    """Peak memory per worker, from the run with the most workers: there the main process's
    share (the ring, batches in flight) is spread as a job with several workers per GPU spreads
    it. The memory a node must hold: anonymous and shared, without the mapped files' page cache
    the kernel can drop; the whole PSS for results without the kernel's split."""
    workers, _, _, run = parsed[-1]
    split = [run.get(k) for k in ("peak_pss_anon_bytes", "peak_pss_shmem_bytes")]
    values = split if all(_is_size(v) for v in split) else [run.get("peak_pss_bytes")]
    if not all(_is_size(v) for v in values) or not sum(values) > 0:
        return {}
    return {"memory_per_worker_bytes": float(sum(values)) / workers, "memory_workers": workers,
            "memory_kind": "anonymous + shared" if len(values) == 2 else "PSS"}


def _is_size(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def _read_per_sample(run: Mapping[str, Any], export: Mapping[str, Any], key: str, where: str,
                     path: str | None) -> float:
    """The base run's own figure (what its workers read), else the export's."""
    value = run.get(key, export.get(key))
    if isinstance(value, Mapping):  # export.bytes_per_sample is {mean, p50, p99}
        value = value.get("mean")
    if value is None:
        raise DsbenchError(f"missing key '{where}{key}' (nor 'export.{key}')", path=path)
    return _number(value, where + key, path)
