"""Re-export: the samples of an existing export re-laid in a definition's layout.

`dsbench generate DEFINITION OUT --from EXPORT` tests a candidate layout on a team's own data:
the source (any layout the adapters read, a local path or a URL) is read and every sample is
written as the definition lays it out.

* Images are copied byte for byte, as stored; the definition's image settings (codec, quality,
  sizes) are not applied. The export is written with the source's codec (the member extension
  and column metadata follow it), so an export holds one codec: a source sample whose codec
  differs from the first sample's is an error. With `reencode = true` in the definition's image
  table, each image is decoded instead and encoded with its codec (JPEG or PNG) and quality:
  that changes the data, and is only done when asked (PIL, 4:2:0 chroma for JPEG, the same
  bytes every run).
* Fields: export.carry matches the definition's fields with the source's, converts the carried
  values and names the rest; a definition field the source lacks is synthesised from the seed
  (synth.synthesised_field: the same values whatever else is carried or made).
* Subset: `--samples N` takes the first N samples in the source's unit order (the order of
  `units()`: sorted shards, or sorted keys); without it, every sample. Only the units holding
  them are read. Keys are renumbered 00000000, 00000001, ... as `generate` names samples.
* Determinism, resumption, parallelism: as generate's (the same preparation, manifest checks,
  write units and worker pool). The parent counts the samples of the source units it needs
  (Export.unit_samples: headers and footers where the layout has them) and gives each job a run
  of consecutive output units and the source units they come from; the worker opens the source
  itself and reads that share. The output depends on none of that, so it is byte-identical
  however many jobs wrote it and however often the run was resumed.
* Provenance: the manifest's `source` records the path, layout, subset, image codec and which
  fields were carried, synthesised and dropped; a re-run must agree with it to resume.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import io
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import adapters
from dsbench.adapters import base
from dsbench.adapters.tokenizer import TRAIN_SAMPLES, TokenizerSpec, encoder, texts_of, trained
from dsbench.errors import DsbenchError, SampleError
from dsbench.export import payload_copy
from dsbench.export.carry import FieldPlan, carried_values, plan_fields, source_fields
from dsbench.export.generate import (
    GenerateReport,
    cpu_with_children,
    finish,
    library_errors,
    manifest,
    missing_units,
    pool_jobs,
    prepare,
    unit_ranges,
    write_manifest,
)
from dsbench.export.payloads import AUDIO_NAME, TEXT_NAME, TOKENS_NAME
from dsbench.export.pool import worker_pool
from dsbench.export.spec import IMAGE_EXT, ExportSpec, ImageSpec
from dsbench.export.synth import sample_key, synthesised_field
from dsbench.export.write import writer_of
from dsbench.fmt import Progress
from dsbench.storage import files as store

Range = tuple[int, int, int]  # an output unit: (unit, first sample, one past the last)


@dataclass(frozen=True)
class ReexportReport(GenerateReport):
    """A re-export's run, and where its samples came from."""

    source: str
    layout: str  # the source's
    codec: str  # the images', as stored in the source
    subset: str
    fields: FieldPlan
    ignored: tuple[str, ...] = ()  # files under the source its layout does not read
    reencoded: tuple[str, int] | None = None  # (codec, quality) the images were re-encoded as
    # Token ids or clips in place of images: how they were copied (payload_copy.copied)
    payload: dict[str, str] | None = None


@dataclass(frozen=True)
class _Job:
    """Consecutive output units and where their samples are: from the `skip`-th sample of
    `units[0]` on, read in order."""

    spec: ExportSpec
    out: Path
    seed: int
    fields: FieldPlan
    units: tuple[str, ...]
    skip: int
    writes: tuple[Range, ...]
    first_codec: str | None = None  # audio: the source's first clip's (payload_copy.clip)
    tokenizer: str | None = None  # a text source re-laid as token ids: the tokenizer's JSON


# The source as a worker opened it (set by _open_source in each worker of the pool), or why
# it could not be opened.
_SOURCE: base.Export | Exception | None = None


# The tokenizer a worker of the pool encodes with, built once from its JSON, as a loader's is.
_encoder = functools.lru_cache(maxsize=2)(encoder)


def _open_source(path: str, layout: str) -> None:
    global _SOURCE
    try:
        _SOURCE = adapters.open_export(path, layout)
    except Exception as exc:
        # Kept for the worker's first job to raise, where the job's error becomes one line.
        _SOURCE = exc


def _close_source() -> None:
    """Forget the source a one-writer pool opened in this process (a pool's workers end)."""
    global _SOURCE
    _SOURCE = None


def reencoded(data: bytes, image: ImageSpec, source: str, key: str) -> bytes:
    """`data` decoded and encoded as `image` says: JPEG at its quality, or PNG (lossless). The
    colour profile and EXIF (orientation) go along; a mode the codec cannot hold (CMYK, LAB,
    YCbCr; alpha or a palette for JPEG) is converted to RGB."""
    from PIL import Image

    holds = ("L", "RGB") if image.codec == "jpeg" else ("1", "L", "LA", "P", "RGB", "RGBA",
                                                        "I", "I;16")
    out = io.BytesIO()
    try:
        with Image.open(io.BytesIO(data)) as img:
            keep = {k: img.info[k] for k in ("icc_profile", "exif") if img.info.get(k)}
            pixels = img if img.mode in holds else img.convert("RGB")
            if image.codec == "jpeg":
                pixels.save(out, format="JPEG", quality=image.quality, **keep)
            else:
                pixels.save(out, format="PNG", **keep)
    except Exception as exc:  # PIL's errors for a truncated, unknown or unwritable image
        raise SampleError(f"cannot re-encode the image as {image.codec}: {exc}", path=source,
                          key=key) from None
    return out.getvalue()


def _reencoded_as(image: ImageSpec) -> str:
    return ("re-encoded, quality " + str(image.quality) if image.codec == "jpeg"
            else "re-encoded, lossless png")


def _sample(job: _Job, index: int, raw: base.RawSample) -> dict[str, Any]:
    if job.spec.tokens:
        ids = (payload_copy.tokenized(job.spec, raw, _encoder(job.tokenizer)) if job.tokenizer
               else payload_copy.ids(job.spec, raw))
        sample: dict[str, Any] = {"__key__": sample_key(index), TOKENS_NAME: ids}
    elif job.spec.audio:
        clip = payload_copy.clip(job.spec.audio, raw, job.first_codec)
        sample = {"__key__": sample_key(index), AUDIO_NAME: clip}
    elif job.spec.text:
        sample = {"__key__": sample_key(index), TEXT_NAME: payload_copy.text(raw)}
    elif job.spec.image.reencode:
        image = reencoded(raw.image, job.spec.image, raw.source, raw.key)
    elif raw.codec != job.spec.image.codec:
        raise SampleError(f"the image is {raw.codec}, but {job.spec.image.codec} in the "
                          "source's first sample: a re-export holds one codec, as stored",
                          path=raw.source, key=raw.key)
    else:
        image = raw.image
    if job.spec.kind == "image":
        sample = {"__key__": sample_key(index), "image": image}
    sample.update(carried_values(job.spec, job.fields, raw))
    for name in job.fields.synthesised:
        sample[name] = synthesised_field(job.spec.field(name), job.seed, index)
    # The writers take fields in the definition's order; the dict's order does not matter.
    return sample


def _write_job(job: _Job) -> int:
    if _SOURCE is None or isinstance(_SOURCE, Exception):
        raise _SOURCE or RuntimeError("the worker's source was not opened")
    reader = iter(_SOURCE.read_units(job.units))
    read = 0

    def take() -> base.RawSample:
        nonlocal read
        raw = next(reader, None)
        if raw is None:
            counted = job.skip + job.writes[-1][2] - job.writes[0][1]
            raise DsbenchError(f"ended early: {read} of the {counted} samples counted up to "
                               "here were read; did the source change during the run?",
                               path=job.units[-1])
        read += 1
        return raw

    written = 0
    try:
        for _ in range(job.skip):
            take()
        writer = writer_of(job.spec)
        for unit, first, stop in job.writes:
            samples = [_sample(job, index, take()) for index in range(first, stop)]
            with library_errors(job.spec, f"unit {unit}"):
                writer.write_unit(job.spec, job.out, unit, samples)
            written += stop - first
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()  # the reader's open shard, now rather than when collected
    return written


def _unit_of(starts: list[int], sample: int) -> int:
    """The source unit holding sample number `sample`, given each unit's first sample number
    (a unit without samples shares its start with the next one, which holds it)."""
    return bisect.bisect_right(starts, sample) - 1


def _jobs(todo: list[Range], starts: list[int], workers: int) -> list[list[Range]]:
    """Output units grouped so that each source unit is read by about one job: a run of
    consecutive output units starting in the same source unit is one job. Runs are halved
    while there are fewer jobs than workers, trading reading for parallelism."""
    groups: list[list[Range]] = []
    for r in todo:
        last = groups[-1][-1] if groups else None
        if (last is not None and last[0] + 1 == r[0]
                and _unit_of(starts, groups[-1][0][1]) == _unit_of(starts, r[1])):
            groups[-1].append(r)
        else:
            groups.append([r])
    while len(groups) < workers:
        big = max(range(len(groups)), key=lambda i: len(groups[i]), default=None)
        if big is None or len(groups[big]) < 2:
            break
        g = groups[big]
        groups[big:big + 1] = [g[:len(g) // 2], g[len(g) // 2:]]
    return groups


def first_samples(export: base.Export, n: int, where: str) -> list[base.RawSample]:
    """The export's first `n` samples in its unit order (fewer if it holds fewer)."""
    reader = iter(export.read_units(export.units()))
    try:
        raws = list(itertools.islice(reader, n))
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()
    if not raws:
        raise DsbenchError("the export holds no samples", path=where)
    return raws


def count_units(export: base.Export, units: list[str], want: int | None) -> list[int]:
    """Samples per source unit, from the first, until `want` are counted (all without it)."""
    counts: list[int] = []
    total = 0
    for unit in units:
        if want is not None and total >= want:
            break
        counts.append(export.unit_samples(unit))
        total += counts[-1]
    return counts


def _where(source: str) -> str:
    """The source as the manifest records it: an absolute path, or the URL."""
    loc = store.location(source)
    return str(loc.resolve()) if isinstance(loc, Path) else str(loc)


def reexport(spec: ExportSpec, out_dir: str | Path, source: str, samples: int | None = None,
             seed: int = 0, jobs: int | None = None, layout: str | None = None,
             tokenizer: TokenizerSpec | None = None) -> ReexportReport:
    """Write (or complete) in `out_dir` the samples of the export at `source`, laid out as
    `spec` says (the module docstring has the rules); `layout` reads the source as that
    layout instead of detecting it. A text source re-laid by a token definition is tokenized
    by `tokenizer`, else by a byte-level BPE trained on its first texts, as bench's is."""
    out = Path(out_dir)
    if samples is not None and samples < 1:
        raise DsbenchError(f"--samples must be at least 1, got {samples}")
    if seed < 0:
        raise DsbenchError(f"--seed must be non-negative, got {seed}")
    where = _where(source)
    remote = store.is_remote(store.location(source))
    if not remote and Path(out).resolve().is_relative_to(where):
        raise DsbenchError("the output directory is inside the source export; choose one "
                           "outside it", path=out)
    export = adapters.open_export(source, layout)
    first = first_samples(export, 1, source)[0]
    tokenizing = spec.tokens is not None and base.kind_of(export) == base.TEXT
    if tokenizing and tokenizer is None:
        tokenizer = trained(texts_of(first_samples(export, TRAIN_SAMPLES, source)),
                            where=where)
    elif tokenizer is not None and not tokenizing:
        raise DsbenchError("--tokenizer tokenizes a text source for a definition with "
                           "[tokens]", path=source)
    spec = payload_copy.kind_spec(spec, export, first, source,
                                  tokenizer.vocab_size if tokenizer else None)
    if spec.kind == "image" and first.codec not in IMAGE_EXT:
        raise DsbenchError(f"the images are {first.codec}: a re-export copies them as stored "
                           f"and can write {', '.join(IMAGE_EXT)} images",
                           path=first.source, key=first.key)
    fields = plan_fields(spec, source_fields(first, export.layout))
    # A field that does not convert (another type, another dim) is said before anything is
    # written, from the first sample.
    carried_values(spec, fields, first)
    if spec.tokens:
        pass  # ids copied as stored in the source's dtype, or a text's ids (kind_spec said)
    elif spec.audio:
        payload_copy.clip(spec.audio, first)  # one that does not transcode: said before writing
    elif spec.image.reencode:
        # Said before anything is written, from the first sample.
        reencoded(first.image, spec.image, first.source, first.key)
    else:
        # The images are the source's: the export is written (and described) with their codec.
        spec = dataclasses.replace(spec, image=dataclasses.replace(spec.image,
                                                                   codec=first.codec))

    units = export.units()
    counts = count_units(export, units, samples)
    total = sum(counts)
    if samples is not None and samples > total:
        raise DsbenchError(f"--samples {samples} is more than the {total} samples the source "
                           "holds", path=source)
    n = samples if samples is not None else total
    starts = [0]
    for c in counts[:-1]:
        starts.append(starts[-1] + c)
    subset = (f"the first {n} samples in its unit order" if samples is not None
              else f"all {n} samples")
    copied = payload_copy.copied(spec, first.codec, tokenizer.source if tokenizer else None) \
        if spec.kind != "image" else None
    provenance = {"path": where, "layout": export.layout, "samples": n, "subset": subset,
                  "units": len(counts), "images": copied or {
                      "codec": spec.image.codec,
                      "copied": (_reencoded_as(spec.image) if spec.image.reencode
                                 else "byte for byte, as stored")},
                  "fields": fields.provenance()}
    prepare(out, manifest(spec, n, seed, complete=False, source=provenance))

    todo = missing_units(spec, out, n)
    workers = pool_jobs(spec, jobs, len(todo))
    tasks = []
    for group in _jobs(todo, starts, workers):
        j0, j1 = _unit_of(starts, group[0][1]), _unit_of(starts, group[-1][2] - 1)
        tasks.append(_Job(spec, out, seed, fields, tuple(units[j0:j1 + 1]),
                          group[0][1] - starts[j0], tuple(group),
                          first.codec if spec.audio else None,
                          tokenizer.json if tokenizer else None))
    bar = Progress(f"generate {spec.name} from {source}", sum(r[2] - r[1] for r in todo),
                   "samples")
    t0, cpu0 = time.perf_counter(), cpu_with_children()
    try:
        # A process that has used an object store's client must not fork (see worker_pool);
        # spawned workers start slower, so none is started when nothing is left to write.
        if tasks:
            with worker_pool(out, workers, "spawn" if remote else "fork",
                             _open_source,
                             (source, export.layout)) as pool:
                for done in pool.imap(_write_job, tasks):
                    bar.advance(done)
        finish(spec, out, n)
    finally:
        bar.close()
        _close_source()
    write_manifest(out, manifest(spec, n, seed, complete=True, source=provenance))
    return ReexportReport(out, n, bar.total, len(todo), len(unit_ranges(spec, n)) - len(todo),
                          time.perf_counter() - t0, cpu_with_children() - cpu0, source=where,
                          layout=export.layout, codec=first.codec, subset=subset,
                          fields=fields, ignored=tuple(export.ignored),
                          reencoded=((spec.image.codec, spec.image.quality)
                                     if spec.image.reencode else None),
                          payload=copied)
