"""The candidates advise tries: layouts, shard sizes in bytes and field encodings.

Every candidate carries every field of the source (advise.fields) and its images byte for byte
(unless re-encoding is asked for, below); what differs is how they are laid out:

* the layout: WebDataset shards, Arrow IPC, Parquet, and the formats written through their own
  libraries (MDS, litdata, Hugging Face datasets, Lance, TFRecord) where installed and able to
  hold the fields (litdata and TFRecord have no type for boxes);
* the field encoding: for member layouts (WebDataset, per-sample files), an embedding as raw
  float32 bytes in its own member, or the fields in one JSON document per sample (the JSON
  variant is tried only where the source keeps one, to tell the layout's effect from the
  encoding's); columnar layouts hold an embedding as a native float32 list column;
* the shard size, stated in bytes: each size becomes the samples a shard holds, from the mean
  size of a sample as the candidate encodes it (the first samples of the source, encoded as the
  member layouts store them, before any compression). Per-sample files have no shards;
* re-encoded images, only when asked (`--reencode quality=85`): each sharded candidate again
  with its images decoded and encoded as JPEG at that quality. That changes the data (what the
  model trains on), which is why it is never tried unasked and why the advice says so;
* for raw text, each layout with the texts as stored and again with the ids the job's
  tokenizer gives them (named -tokens): whether to tokenize once, before the export, or in
  every epoch's loader workers;
* for a packed job's token ids (`--pack`, ids stored or a text's), litdata chunks of the
  documents laid end to end, read by litdata's TokensLoader in blocks of the sequence length
  (named litdata-stream): packing done once, at the export, instead of in every epoch's
  workers. Its sample is a sequence, not a document, so advise then states every figure per
  sequence (advise.sequences). Tried only for documents that carry nothing but their ids: a
  chunk of such a stream holds the ids alone;
* compression (`--compressions`, none and zstd): Arrow IPC buffers, MDS and litdata shards
  compressed with zstd or not. JPEG and PNG bytes barely compress; a document's text, labels
  and embeddings may, and every read then decompresses. Parquet keeps its own rule (zstd for
  every column but an encoded image's, export.write).

Two candidates that would lay the sample out alike (every shard size past the sample's size
makes one shard of it) are one candidate: the larger shard's definition, since it is the same
bytes on the sample and fewer requests at full size.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dsbench import fmt
from dsbench.adapters import base
from dsbench.advise.fields import BINARY, JSON, LIST, Found
from dsbench.errors import DsbenchError
from dsbench.export import carry
from dsbench.export.encode import sample_members
from dsbench.export.payloads import (
    AUDIO_LAYOUTS,
    TEXT_LAYOUTS,
    TOKEN_LAYOUTS,
    TOKENS_NAME,
    AudioSpec,
    TextSpec,
    TokensSpec,
)
from dsbench.export.spec import LAYOUTS, ExportSpec, ImageSpec

DEFAULT_SHARD_BYTES = (64_000_000, 256_000_000, 1_000_000_000)
# The formats written through their own libraries, by the module each needs.
LIBRARY = {"mds": "streaming", "litdata": "litdata", "hf": "datasets", "lance": "lance",
           "tfrecord": "tfrecord"}
DEFAULT_LAYOUTS = ("wds", "arrow", "parquet", "mds", "litdata")
NO_BOXES = ("litdata", "tfrecord")  # no list-of-records type (export.spec)
COMPRESSIBLE = ("arrow", "mds", "litdata")  # the layouts --compressions applies to
COMPRESSIONS = ("none", "zstd")
COLUMNAR_JSON_REFUSED = ("litdata", "hf", "tfrecord")


@dataclass(frozen=True)
class Candidate:
    """One way to lay the sample out: its definition, and what it changes, in words."""

    name: str
    spec: ExportSpec
    shard_bytes: int | None  # the size asked for; None for per-sample files
    encoding: str  # how the embedding is stored (or "-": the source has none)
    what: str
    baseline: bool = False


@dataclass(frozen=True)
class Skipped:
    layout: str
    why: str


def parse_layouts(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise DsbenchError("--layouts needs at least one layout")
    for n in names:
        if n not in LAYOUTS:
            raise DsbenchError(f"--layouts: {n!r} is not one of {', '.join(LAYOUTS)}")
    return names


def parse_shard_sizes(text: str) -> tuple[int, ...]:
    parsed = [fmt.parse_nbytes(t.strip()) for t in text.split(",") if t.strip()]
    if not all(math.isfinite(x) for x in parsed):
        raise DsbenchError(f"--shard-sizes {text!r}: sizes must be finite, e.g. 64MB,256MB")
    sizes = tuple(sorted({int(x) for x in parsed}))
    if not sizes or sizes[0] < 1_000:
        raise DsbenchError(f"--shard-sizes {text!r}: give sizes of 1kB or more, e.g. 64MB,256MB")
    return sizes


def parse_compressions(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [n for n in names if n not in COMPRESSIONS]
    if not names or bad:
        raise DsbenchError(f"--compressions {text!r}: give one or both of "
                           f"{', '.join(COMPRESSIONS)}, comma-separated")
    return names


def size_name(size: int) -> str:
    """256000000 -> '256MB': a shard size as a candidate's name holds it."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.4g}{unit}"
    return f"{size}B"


def sample_bytes(spec: ExportSpec, raws: Sequence[base.RawSample], layout: str) -> float:
    """Mean bytes of a sample of `raws` (the source's first samples) as `spec` would store it
    in members: image plus each field's encoded bytes."""
    plan = carry.plan_fields(spec, carry.source_fields(raws[0], layout))
    sizes = []
    for raw in raws:
        payload = {TOKENS_NAME: base.token_ids(raw.image)} if spec.tokens else \
            {spec.payload: base.text_of(raw.image)} if spec.text else {spec.payload: raw.image}
        sample = {**payload, **carry.carried_values(spec, plan, raw)}
        sizes.append(sum(len(b) for _, b in sample_members(spec, sample)))
    return sum(sizes) / len(sizes)


def candidate_spec(name: str, layout: str, found: Found, samples: int, image: ImageSpec, *,
                   shard_samples: int = 1000, fields_as: str = "members", encoding: str = LIST,
                   what: str = "", compression: str | None = None,
                   tokens: TokensSpec | None = None, audio: AudioSpec | None = None,
                   text: TextSpec | None = None) -> ExportSpec:
    fields = tuple(dataclasses.replace(f, encoding=encoding) if f.type == "embedding" else f
                   for f in found.fields)
    return ExportSpec(name=name, layout=layout, description=what, samples=samples,
                      shard_samples=shard_samples, fields_as=fields_as,
                      image=image, fields=fields, compression=compression, tokens=tokens,
                      audio=audio, text=text)


def installed(layout: str) -> bool:
    module = LIBRARY.get(layout)
    return module is None or importlib.util.find_spec(module) is not None


def _encodings(layout: str, source_layout: str, found: Found, compressions: Sequence[str]
               ) -> list[tuple[str, str, str, str | None]]:
    """(name suffix, fields_as, embedding encoding, compression) of the encodings tried in
    `layout`."""
    if layout in ("wds", "files"):
        out: list[tuple[str, str, str, str | None]] = [("", "members", BINARY, None)]
        if found.in_document and source_layout in ("wds", "files"):
            # the source's own encoding, in this layout
            out.append(("-json", "json", JSON, None))
        return out
    if layout == "jsonl":  # a JSON document per line: an embedding is a JSON list there
        return [("", "members", JSON, None)]
    if layout not in COMPRESSIBLE:
        return [("", "members", LIST, None)]
    return [("" if c == "none" else f"-{c}", "members", LIST, None if c == "none" else c)
            for c in compressions]


def _describe(layout: str, fields_as: str, encoding: str, found: Found,
              compression: str | None = None) -> str:
    text = _describe_fields(layout, fields_as, encoding, found)
    if compression is None:
        return text
    return text + (f", {compression}-compressed buffers" if layout == "arrow"
                   else f", {compression}-compressed shards")


def _describe_fields(layout: str, fields_as: str, encoding: str, found: Found) -> str:
    names = {"wds": "WebDataset shards", "files": "a file per member per sample",
             "arrow": "Arrow IPC shards", "parquet": "Parquet shards", "mds": "MDS shards",
             "litdata": "litdata chunks", "hf": "a Hugging Face dataset",
             "lance": "a Lance dataset", "tfrecord": "TFRecord shards",
             "jsonl": "JSON Lines files"}
    text = names[layout]
    if found.embedding_encoding is None:
        return text
    if fields_as == "json":
        return text + ", fields in a JSON document, embedding as a JSON list"
    return text + (", embedding as raw float32" if encoding == BINARY
                   else ", embedding as a float32 list column")


def parse_reencode(text: str) -> tuple[int, ...]:
    """'quality=85,quality=75' -> (85, 75): the JPEG qualities to re-encode the images at."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        key, _, value = item.partition("=")
        if key.strip() != "quality" or not value.strip().isdigit() or \
                not 1 <= int(value) <= 100:
            raise DsbenchError(f"--reencode {text!r}: give JPEG qualities from 1 to 100, e.g. "
                               "quality=85 or quality=85,quality=75")
        out.append(int(value))
    if not out:
        raise DsbenchError("--reencode needs a quality, e.g. quality=85")
    return tuple(dict.fromkeys(out))


def layout_grid(found: Found, raws: Sequence[base.RawSample], source_layout: str, samples: int,
                layouts: Sequence[str], shard_sizes: Sequence[int], compressions: Sequence[str],
                image: ImageSpec, tokens: TokensSpec | None = None, audio: AudioSpec | None = None,
                transcoded_from: str | None = None, text: TextSpec | None = None,
                tokenized_by: str | None = None) -> tuple[list[Candidate], list[Skipped]]:
    tag = f"-q{image.quality}" if image.reencode else ""
    images = (f", images re-encoded as JPEG quality {image.quality} (changes the data)"
              if image.reencode else "")
    if tokens is not None and tokenized_by is not None:
        tag, images = "-tokens", f", the texts as {tokens.dtype} token ids ({tokenized_by})"
    if audio is not None and transcoded_from is not None:
        tag = f"-{audio.codec}"
        images = (f", clips as {audio.codec.upper()} (decoded from "
                  f"{transcoded_from.upper()}; 16- and 24-bit PCM without loss)")
    out: list[Candidate] = []
    skipped: list[Skipped] = []
    wanted = list(layouts)
    if source_layout == "files" and "files" not in wanted:
        wanted.insert(0, "files")  # the source's own layout with another encoding
    seen: set[tuple[str, str, str, str | None, int]] = set()
    sizes: dict[tuple[str, str], float] = {}  # a sample's bytes, by encoding: alike in layouts
    for layout in wanted:
        if not installed(layout):
            skipped.append(Skipped(layout, f"needs {LIBRARY[layout]}: pip install "
                                           f"'dsbench[{layout}]'"))
            continue
        if tokens and layout not in TOKEN_LAYOUTS:
            skipped.append(Skipped(layout, f"dsbench does not write token ids in {layout}"))
            continue
        if audio and layout not in AUDIO_LAYOUTS:
            skipped.append(Skipped(layout, f"dsbench does not write audio clips in {layout}"))
            continue
        if text and layout not in TEXT_LAYOUTS:
            skipped.append(Skipped(layout, f"dsbench does not write text in {layout}"))
            continue
        if layout in NO_BOXES and found.has("boxes"):
            skipped.append(Skipped(layout, f"{layout} has no type for a list of records "
                                           "(boxes)"))
            continue
        for suffix, fields_as, encoding, compression in _encodings(layout, source_layout, found,
                                                                   compressions):
            enc = encoding if found.embedding_encoding else "-"
            what = _describe(layout, fields_as, encoding, found, compression) + images
            as_members = (fields_as, BINARY if encoding == LIST else encoding)
            if as_members not in sizes:
                probe = candidate_spec("probe", "wds", found, samples, image,
                                       fields_as=fields_as, encoding=as_members[1],
                                       tokens=tokens, audio=audio, text=text)
                sizes[as_members] = sample_bytes(probe, raws, source_layout)
            per_sample = sizes[as_members]
            if layout == "files":
                name = f"files{suffix or '-binary'}{tag}"
                out.append(Candidate(name, candidate_spec(name, layout, found, samples, image,
                                                          fields_as=fields_as, encoding=encoding,
                                                          what=what, tokens=tokens, audio=audio,
                                                          text=text),
                                     None, enc, what))
                continue
            for size in sorted(shard_sizes, reverse=True):
                per_shard = max(1, round(size / per_sample))
                # Shards past the sample's size lay it out alike: one shard.
                key = (layout, fields_as, encoding, compression, min(per_shard, samples))
                if key in seen:
                    continue
                name = f"{layout}{suffix}-{size_name(size)}{tag}"
                seen.add(key)
                spec = candidate_spec(name, layout, found, samples, image,
                                      shard_samples=per_shard, fields_as=fields_as,
                                      encoding=encoding, compression=compression, tokens=tokens,
                                      audio=audio, text=text,
                                      what=f"{what}, about {fmt.nbytes(size)} "
                                           f"({fmt.plural(per_shard, 'sample')}) a shard")
                out.append(Candidate(name, spec, size, enc, what))
    return out, skipped
