"""`dsbench advise EXPORT`: re-lay a sample of the export into candidates, measure them against
the export as it is, carry them to the cluster and say which to roll out (docs/advise.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import adapters, atomic, fmt
from dsbench.adapters.survey import audio_rate
from dsbench.advise import advice, definition, grid, kinds, staging
from dsbench.advise.fields import found_fields
from dsbench.advise.search import level_for, search
from dsbench.advise.sequences import exact_in_sequences
from dsbench.errors import DsbenchError
from dsbench.export.payloads import AudioSpec, TextSpec, TokensSpec
from dsbench.export.reexport import count_units, first_samples, reexport
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.loader import exact, orphans, summary, tokenize, worker
from dsbench.loader.options import BenchOptions, check_kind
from dsbench.loader.sampling import RANDOM_ACCESS, RANDOM_ACCESS_LAYOUTS, check_random_access
from dsbench.model.node import ClusterSpec
from dsbench.results.document import now_utc
from dsbench.results.machine import collect
from dsbench.results.types import BenchResult
from dsbench.storage import files as store
from dsbench.storage.remote import RemotePath

KIND = "dsbench-advice"
PROBE_SAMPLES = 100  # the first samples, for the fields' types and a sample's size
MANIFEST = "_dsbench.json"


DEFAULT_SAMPLES = 1000


@dataclass(frozen=True)
class AdviseOptions:
    samples: int | None = None  # None: DEFAULT_SAMPLES, or every sample of a smaller export
    budget_s: float = 600.0
    layouts: tuple[str, ...] = grid.DEFAULT_LAYOUTS
    shard_sizes: tuple[int, ...] = grid.DEFAULT_SHARD_BYTES
    compressions: tuple[str, ...] = grid.COMPRESSIONS
    reencode: tuple[int, ...] = ()  # JPEG qualities to also try the images at (changes data)
    work_dir: Path | None = None  # None: a temporary directory, removed at the end
    layout: str | None = None  # read the source as this layout
    # The samples of the export the job trains on, where EXPORT is a part of it (None: EXPORT's)
    export_samples: int | None = None
    stage_url: str | None = None  # an export in a store: where its candidates go (staging)


@contextlib.contextmanager
def work_dir(given: Path | None) -> Iterator[Path]:
    """Where the candidates are written: the user's directory (kept), or a temporary one named
    for this process, removed however the run ends (a killed run's goes at the next run)."""
    if given is not None:
        try:
            given.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DsbenchError(f"--work-dir: cannot make it a directory: "
                               f"{exc.strerror or exc}", path=given) from None
        yield given
        return
    orphans.clear_once(fmt.progress)
    tmp = Path(tempfile.mkdtemp(prefix=f"dsbench-advise-{orphans.owner()}-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def in_advise_terms(progress: Callable[[str], None]) -> Callable[[str], None]:
    """`progress`, with bench's advice about its windows said in advise's options (advise
    chooses the rounds and windows itself)."""
    def say(line: str) -> None:
        progress(line.replace(summary.NOISY_ADVICE, "a longer --budget or a quieter machine")
                 .replace(summary.SHORT_ADVICE, "a smaller --batch-size"))
    return say


def disk_bytes(path: Path) -> int:
    """The bytes of an export's files, its manifest aside."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != MANIFEST)


def _source_bytes(doc: BenchResult) -> float:
    e = doc["export"]
    return float(e.get("bytes") or 0) / max(1, int(e.get("samples") or 1))


def advise(source: str, opts: AdviseOptions, bench: BenchOptions, cluster: ClusterSpec,
           progress: Callable[[str], None] = fmt.progress) -> dict[str, Any]:
    """The advice document (schemas/advice.schema.json); the module docstring says what."""
    t0 = time.perf_counter()
    loc = store.location(source)
    in_store = loc if isinstance(loc, RemotePath) else None
    staging.check(in_store, opts.stage_url)
    export = adapters.open_export(source, opts.layout, seq_len=bench.seq_len)
    kind = adapters.base.kind_of(export)
    if kind not in (adapters.base.TOKENS, adapters.base.AUDIO, adapters.base.TEXT):
        adapters.base.images_only(export, "advise re-lays an export's images, token ids, text "
                                  "or audio clips in the candidate layouts")
    check_kind(kind, source, pack=bench.pack, sample_rate=bench.sample_rate, given=bench.given)
    # Text: one tokenizer for the source's loader, its text candidates' and the ids its token
    # candidates store: the job's (--tokenizer), or a BPE trained on the source's first texts.
    tokenizer = tokenize.settled(source, dataclasses.replace(
        bench, found_kind=kind, layout=opts.layout), worker.open_export).tokenizer_spec
    total = sum(count_units(export, export.units(), opts.samples or DEFAULT_SAMPLES))
    if opts.samples is None:
        opts = dataclasses.replace(opts, samples=min(DEFAULT_SAMPLES, total))
    elif opts.samples > total:
        raise DsbenchError(f"--samples {opts.samples} is more than the {total} samples the "
                           "export holds", path=source)
    assert opts.samples is not None
    raws = first_samples(export, min(PROBE_SAMPLES, opts.samples), source)
    found = found_fields(raws[0], export.layout)
    # A job that reads by index reads the current export so, and can only move to a layout
    # read the same way.
    check_random_access(export, bench.order)
    cands, skipped = kinds.candidates(found, raws, export.layout, opts.samples, opts.layouts,
                                     opts.shard_sizes, opts.compressions, opts.reencode,
                                     tokenizer, bench.seq_len if bench.pack else None)
    if bench.order in RANDOM_ACCESS:
        skipped += [grid.Skipped(layout, f"--order {bench.order} reads single samples where "
                                         f"they lie, and {layout} is read front to back")
                    for layout in dict.fromkeys(c.spec.layout for c in cands)
                    if layout not in RANDOM_ACCESS_LAYOUTS]
        cands = [c for c in cands if c.spec.layout in RANDOM_ACCESS_LAYOUTS]
    for s in skipped:
        progress(f"not tried: {s.layout}: {s.why}")
    if not cands and bench.order in RANDOM_ACCESS:
        raise DsbenchError(f"--order {bench.order}: no layout of --layouts that can hold this "
                           "export's fields is read by random access (dsbench reads "
                           f"{', '.join(RANDOM_ACCESS_LAYOUTS)} so)", path=source)
    if not cands:
        raise DsbenchError("no layout of --layouts can hold this export's fields", path=source)
    # The passes time the candidates; the exact pass counts those of the last one, after.
    # The exact pass is run here, outside the benchmark that sets each side for what its
    # samples carry: token ids are cropped to --seq-len, clips at their rate, not decoded as
    # images.
    given = bench.tokenizer
    bench = dataclasses.replace(bench, found_kind=kind, found_rate=audio_rate(export, source)
                                if kind == adapters.base.AUDIO else None, tokenizer=None,
                                tokenizer_spec=tokenizer, given=())  # checked on the source
    base_opts = dataclasses.replace(bench, layout=opts.layout, exact=False)
    cand_opts = dataclasses.replace(bench, layout=None, exact=False)
    with work_dir(opts.work_dir) as root, \
            staging.stage(in_store, opts.stage_url, progress) as prefix:
        paths, written = [source], []
        for c in cands:
            out = root / c.name
            reexport(c.spec, out, source, samples=opts.samples, layout=export.layout,
                     tokenizer=tokenizer if c.spec.tokens and tokenizer else None)
            # Read from where the export is read (advise.staging says why).
            written.append(disk_bytes(out))
            paths.append(str(out) if prefix is None else str(staging.put_candidate(out, prefix)))
        progress(f"{len(cands)} candidates written in {fmt.seconds(time.perf_counter() - t0)}; "
                 "measuring")
        left = opts.budget_s - (time.perf_counter() - t0)

        def rank(doc: BenchResult) -> tuple[float, float]:
            return (round(advice.predict(doc, cluster)["gpu_util"], 3),
                    -doc["runs"][0]["cpu_s_per_sample"])

        passes = search(paths, cand_opts, base_opts, left, rank, in_advise_terms(progress))
        last = passes[-1]
        counted = exact.count([paths[i + 1] for i in last.sides],
                              [dataclasses.replace(o, exact=bench.exact) for o in
                               [base_opts] + [cand_opts] * (len(last.sides) - 1)], progress)
        for doc, x in zip(last.docs, counted, strict=True):
            doc["exact"] = exact_in_sequences(doc, x)
    final = [cands[i] for i in last.sides[1:]]
    docs = last.docs
    # A packed side's samples are its sequences; the export's own are documents still.
    e: Any = docs[0]["export"]
    own = int(e.get("documents") or e.get("samples") or total)
    export_samples = opts.export_samples or own
    # On disk per sample: of the samples a candidate holds as read (a stream's, its blocks).
    disk = [_source_bytes(docs[0])] + [written[i] / int(d["export"].get("samples") or 1)
                                       for i, d in zip(last.sides[1:], docs[1:], strict=True)]
    table = advice.rows(final, docs, disk, cluster, export_samples)
    verdict = advice.recommend(table, "sequence" if bench.pack else "sample")
    won = next((c for c in final if c.name == verdict["winner"]), None)
    if won is not None and won.spec.image.reencode:
        verdict["text"] += (f"; its images are re-encoded as JPEG quality "
                            f"{won.spec.image.quality}, which changes the data: check the "
                            "model's accuracy on it before rolling it out")
    names = [c.name for c in cands]
    return {
        "kind": KIND, "schema_version": 1, "created_utc": now_utc(),
        "machine": collect(), "source": {"path": source, "layout": export.layout,
                                         "samples": own, "job_samples": export_samples,
                                         "fields": found.stored},
        "sample": {"samples": opts.samples,
                   "which": f"the first {opts.samples} samples in the export's unit order"},
        "settings": {"budget_s": opts.budget_s, "layouts": list(opts.layouts),
                     "shard_sizes_bytes": list(opts.shard_sizes),
                     "compressions": list(opts.compressions),
                     "reencode_qualities": list(opts.reencode),
                     "workers": bench.workers[0], "batch_size": bench.batch_size,
                     "pack": bench.pack, "tokenizer": None if tokenizer is None else {
                         **tokenizer.describe(),
                         "file": None if given is None else os.path.abspath(given)},
                     "order": bench.order, "block": bench.block if bench.order == "block"
                     else None, "read_as": opts.layout,
                     "family_level": level_for(1),
                     "level_each": level_for(len(final)),
                     "correction": f"Bonferroni over the {len(final)} candidates of the last "
                                   "pass"},
        "candidates_tried": [{"name": c.name, "what": c.spec.description,
                              "layout": c.spec.layout} for c in cands],
        "not_tried": [{"layout": s.layout, "why": s.why} for s in skipped],
        "passes": [p.to_json(names) for p in passes],
        "cluster": cluster.to_json(), "table": table, "recommendation": verdict,
        "wall_s": time.perf_counter() - t0,
        "work_dir": None if opts.work_dir is None else os.fspath(opts.work_dir),
        "staged_in": None if prefix is None else str(prefix),
    }


def write_definition(doc: dict[str, Any], path: Path, final: Path | None = None
                     ) -> Path | None:
    """The winner's definition as TOML at `path`; None (nothing written) without a winner.
    `final`: where the file will be once its directory is moved into place (the text names
    it)."""
    winner = doc["recommendation"]["winner"]
    if winner is None:
        return None
    row = next(r for r in doc["table"] if r["name"] == winner)
    spec = dataclasses.replace(definition_of(row), samples=doc["source"]["job_samples"])
    warning = doc["recommendation"]["warning"]
    layout = doc["settings"].get("read_as")
    tokenizer = doc["settings"].get("tokenizer") or {}
    # A token winner from text: generate tokenizes with the same tokenizer (a trained one is
    # trained again on the same first texts).
    tokenize_with = f" --tokenizer {tokenizer['file']}" \
        if spec.tokens and tokenizer.get("file") else ""
    header = (f"Advised by `dsbench advise {doc['source']['path']}`: "
              f"{doc['recommendation']['text']}.\n"
              + (f"Warning: {warning}.\n" if warning else "") +
              f"Re-lay the whole export: dsbench generate {final or path} OUT --from "
              f"{doc['source']['path']}" + (f" --layout {layout}" if layout else "")
              + tokenize_with)
    text = definition.to_toml(spec, header)
    # Checked before it is written: a file that loads as another layout, or not at all, would
    # hand the user something else than what was measured.
    definition.check_text(spec, text, str(path))
    atomic.write_output(path, text.encode())
    return path


def definition_of(row: dict[str, Any]) -> ExportSpec:
    """A table row's definition, back from its plain data."""
    d = dict(row["definition"])
    d["image"] = ImageSpec(**d["image"])
    d["tokens"] = TokensSpec(**d["tokens"]) if d.get("tokens") else None
    d["audio"] = AudioSpec(**d["audio"]) if d.get("audio") else None
    d["text"] = TextSpec(**d["text"]) if d.get("text") else None
    d["fields"] = tuple(FieldSpec(**{**f, "words": tuple(f["words"])}) for f in d["fields"])
    return ExportSpec(**d)
