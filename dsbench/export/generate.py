"""Write an export from a definition: in parallel, resumable, never half-written.

The export is cut into write units (a shard, or a directory of per-sample files). Each unit is
written by one process under temporary names and renamed when complete, so a unit is either
absent or whole. A re-run skips the whole units and writes the rest; a manifest `_dsbench.json`
records the definition, seed and sample count, and marks the export complete at the end.
export.reexport writes through the same preparation, write units and worker pool.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsbench import atomic
from dsbench.adapters.base import MANIFEST
from dsbench.errors import DsbenchError
from dsbench.export import parts
from dsbench.export.libraries import UNITS
from dsbench.export.parts import Part
from dsbench.export.pool import remove_temporaries, worker_pool
from dsbench.export.spec import ExportSpec
from dsbench.export.synth import GENERATOR, make_samples, warm
from dsbench.export.write import is_whole, writer_of
from dsbench.fmt import Progress


@dataclass(frozen=True)
class GenerateReport:
    """What one run of generate wrote (or found complete), and what it cost."""

    out_dir: Path
    samples: int
    samples_written: int
    units_written: int
    units_skipped: int
    wall_s: float
    cpu_s: float
    # A part's run (export.parts): which, and whether the export is whole now.
    part: Part | None = field(default=None, kw_only=True)
    complete: bool = field(default=True, kw_only=True)


def unit_size(spec: ExportSpec) -> int:
    return spec.files_per_dir if spec.layout == "files" else spec.shard_samples


def unit_ranges(spec: ExportSpec, samples: int) -> list[tuple[int, int, int]]:
    """(unit, first sample, one past the last sample) for every write unit."""
    per = unit_size(spec)
    return [(u, u * per, min(samples, (u + 1) * per)) for u in range(math.ceil(samples / per))]


# What a re-run must agree on with the manifest to complete the export rather than refuse it.
RESUME_KEYS = ("definition", "samples", "seed", "source", "generator")


def manifest(spec: ExportSpec, samples: int, seed: int, complete: bool,
             source: dict[str, Any] | None = None, generator: int | None = None
             ) -> dict[str, Any]:
    """The manifest's content; `source` is a re-export's provenance (export.reexport),
    `generator` the synthetic samples' (export.synth)."""
    spec_dict = spec.to_dict()
    spec_dict.pop("source")
    data = {"dsbench_export": 1, "definition": spec_dict, "samples": samples, "seed": seed,
            "complete": complete}
    if source is not None:
        data["source"] = source
    if generator is not None:
        data["generator"] = generator
    # As JSON holds it (tuples become lists), so that a re-run compares equal to the manifest.
    loaded: dict[str, Any] = json.loads(json.dumps(data))
    return loaded


def _check_target(out_dir: Path, want: dict[str, Any]) -> None:
    path = out_dir / MANIFEST
    if path.exists():
        try:
            have = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise DsbenchError(f"unreadable manifest ({exc}); delete the directory", path=path
                               ) from None
        if "source" not in have and "generator" not in have:
            have["generator"] = 1  # written before there was a generator 2
        differ = [k for k in RESUME_KEYS if have.get(k) != want.get(k)]
        if differ == ["generator"]:
            raise DsbenchError(f"holds an export of generator {have['generator']}; add "
                               f"--generator {have['generator']} to complete it, or choose "
                               "another directory", path=out_dir)
        if differ:
            what = ("definition, seed, sample count or source" if "source" in want
                    or "source" in have else "definition, seed or sample count")
            raise DsbenchError(f"holds a different export ({what}); choose another directory "
                               "or delete this one", path=out_dir)
    elif out_dir.exists() and any(not p.name.startswith(".") for p in out_dir.iterdir()):
        raise DsbenchError("directory is not empty and holds no dsbench export; refusing to "
                           "write into it", path=out_dir)


def write_manifest(out_dir: Path, data: dict[str, Any]) -> None:
    atomic.write_text(out_dir / MANIFEST, json.dumps(data, indent=1, sort_keys=True) + "\n")


def prepare(out: Path, started: dict[str, Any], sweep: bool = True) -> None:
    """Make `out` ready to write (or to complete) the export whose manifest is `started`:
    refuse a directory holding anything else, remove a killed run's temporaries (unless
    `sweep` is False: other parts' may be in flight)."""
    if out.exists() and not out.is_dir():
        raise DsbenchError("not a directory: the export is written into a directory", path=out)
    _check_target(out, started)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if sweep:
            remove_temporaries(out)
        if not (out / MANIFEST).exists():
            write_manifest(out, started)
    except OSError as exc:
        raise DsbenchError(f"cannot create the export here: {exc.strerror or exc}",
                           path=out) from None


def missing_units(spec: ExportSpec, out: Path, samples: int) -> list[tuple[int, int, int]]:
    """unit_ranges of the units not yet whole in `out`: what a (re-)run writes."""
    writer = writer_of(spec)
    ranges = unit_ranges(spec, samples)
    if writer.finished is not None and (out / writer.finished).is_file() and \
            not (out / UNITS).exists():
        return []  # joined: the units are gone into the whole
    if writer.rows_done is not None:
        rows = writer.rows_done(spec, out)
        return [r for r in ranges if r[2] > rows]
    return [r for r in ranges
            if not all(is_whole(p) and _holds(spec, p, r[2] - r[1])
                       for p in writer.unit_paths(spec, out, r[0]))]


def _holds(spec: ExportSpec, path: Path, samples: int) -> bool:
    """A JSON Lines unit cut at a line's end still ends as a whole one does: its lines are
    counted (a read of the unit, at a re-run's start only)."""
    if spec.layout != "jsonl":
        return True
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) == samples


def finish(spec: ExportSpec, out: Path, samples: int) -> None:
    """What the format needs once every unit is whole (a merged index, the units joined)."""
    writer = writer_of(spec)
    if writer.finish is not None and not (writer.finished and (out / writer.finished).is_file()
                                          and not (out / UNITS).exists()):
        with library_errors(spec, "joining the units"):
            writer.finish(spec, out, len(unit_ranges(spec, samples)))


def pool_jobs(spec: ExportSpec, jobs: int | None, todo: int) -> int:
    """Writers: one, this process (export.pool.InlinePool), for a format whose units go in one
    after another."""
    if writer_of(spec).sequential:
        return 1
    return max(1, min(jobs or len(os.sched_getaffinity(0)), todo))


def _write_unit(job: tuple[ExportSpec, Path, int, int, int, int, int]) -> int:
    spec, out_dir, seed, generator, unit, start, stop = job
    with library_errors(spec, f"unit {unit}"):
        writer_of(spec).write_unit(spec, out_dir, unit,
                                   make_samples(spec, seed, start, stop, generator))
    return stop - start


@contextmanager
def library_errors(spec: ExportSpec, what: str) -> Iterator[None]:
    """A format library's own error while writing, as one line naming the layout and unit."""
    try:
        yield
    except (DsbenchError, OSError):
        raise
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise DsbenchError(f"the {spec.layout} writer failed on {what}: {type(exc).__name__}: "
                           f"{text[0] if text else ''}") from None


def generate(spec: ExportSpec, out_dir: str | Path, samples: int | None = None, seed: int = 0,
             jobs: int | None = None, generator: int = GENERATOR, part: Part | None = None
             ) -> GenerateReport:
    """Generate (or complete) the export of `spec` in `out_dir`; with `part`, only that part's
    units, and the export is finished by the part that finds every unit whole (export.parts)."""
    out = Path(out_dir)
    n = spec.samples if samples is None else samples
    if n < 1:
        raise DsbenchError(f"--samples must be at least 1, got {n}")
    if seed < 0:
        raise DsbenchError(f"--seed must be non-negative, got {seed}")
    if part is not None and (writer_of(spec).sequential or writer_of(spec).rows_done):
        raise DsbenchError(f"--part: a {spec.layout} export takes its units one after another "
                           "in one process; write it without --part")
    done_manifest = manifest(spec, n, seed, complete=True, generator=generator)
    prepare(out, manifest(spec, n, seed, complete=False, generator=generator),
            sweep=part is None)
    if part is not None and parts.is_finishing(out):
        # Its joining removes units that a part would then take for missing and rewrite.
        raise DsbenchError(f"another part is finishing the export ({parts.LOCK} is there); "
                           "run this part when it is done, or, if that part was killed, run "
                           "once without --part to complete the export", path=out)
    ranges = missing_units(spec, out, n)
    only = None
    if part is not None:
        ranges = [r for r in ranges if part.owns(r[0])]
        only = {p for r in ranges for p in writer_of(spec).unit_paths(spec, out, r[0])}
        remove_temporaries(out, only)
    else:
        parts.clear_lock(out)
    todo = [(spec, out, seed, generator, u, a, b) for u, a, b in ranges]
    workers = pool_jobs(spec, jobs, len(todo))
    bar = Progress(f"generate {spec.name}" + (f" part {part}" if part else ""),
                   sum(j[6] - j[5] for j in todo), "samples")
    t0, cpu0 = time.perf_counter(), cpu_with_children()
    complete = True
    try:
        if todo:
            warm(generator)
            with worker_pool(out, workers, only=only) as pool:
                # In order: a sequential format's units must be written one after another.
                for done in pool.imap(_write_unit, todo):
                    bar.advance(done)
        if part is None:
            finish(spec, out, n)
            write_manifest(out, done_manifest)
        else:
            complete = _finish_part(spec, out, n, done_manifest)
    finally:
        bar.close()
    return GenerateReport(out, n, bar.total, len(todo), len(unit_ranges(spec, n)) - len(todo),
                          time.perf_counter() - t0, cpu_with_children() - cpu0, part=part,
                          complete=complete)


def is_complete(out: Path) -> bool:
    """Whether `out` holds a complete export (its manifest says so)."""
    try:
        return bool(json.loads((out / MANIFEST).read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def _finish_part(spec: ExportSpec, out: Path, n: int, done_manifest: dict[str, Any]) -> bool:
    """After a part's units: finish the export if every unit is whole and no other part is
    finishing it (or has). Whether the export is complete, or being completed by another part."""
    if not missing_units(spec, out, n):
        with parts.finishing(out) as mine:
            if not mine:
                return True  # another part holds the lock: it is finishing the export now
            if not is_complete(out):
                finish(spec, out, n)
                write_manifest(out, done_manifest)
    return is_complete(out)


def cpu_with_children() -> float:
    """CPU seconds of this process and its reaped children: getrusage's, finer than os.times'
    clock ticks (a one-writer run of a few milliseconds is in this process)."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
