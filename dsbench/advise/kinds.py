"""Which candidates an export's samples make, by their kind: images (and their re-encodings),
token ids, a packed job's token stream, text and its ids, audio in each codec. The grid itself
(layouts, shard sizes, encodings) and what each dimension means are advise.grid's."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from dsbench import fmt
from dsbench.adapters import base
from dsbench.adapters.tokenizer import TokenizerSpec, encoder
from dsbench.advise.fields import Found
from dsbench.advise.grid import (
    Candidate,
    Skipped,
    candidate_spec,
    installed,
    layout_grid,
    size_name,
)
from dsbench.errors import DsbenchError
from dsbench.export import payload_copy
from dsbench.export.payloads import AUDIO_CODECS, AudioSpec, TextSpec, TokensSpec
from dsbench.export.reexport import reencoded
from dsbench.export.spec import ImageSpec


def candidates(found: Found, raws: Sequence[base.RawSample], source_layout: str,
               samples: int, layouts: Sequence[str], shard_sizes: Sequence[int],
               compressions: Sequence[str] = ("none",), reencode: Sequence[int] = (),
               tokenizer: TokenizerSpec | None = None, pack_len: int | None = None
               ) -> tuple[list[Candidate], list[Skipped]]:
    """The grid (advise.grid's docstring has it), without duplicates, and the layouts left out
    with the reason; with `reencode`, each sharded candidate again with its images re-encoded
    as JPEG at each quality (named -qQ), sized by the re-encoded images. Text is tokenized by
    `tokenizer` for its token candidates. Where the job packs sequences of `pack_len` ids,
    token ids are also tried as a stream."""
    out, skipped = _candidates(found, raws, source_layout, samples, layouts, shard_sizes,
                               compressions, reencode, tokenizer)
    if pack_len is not None and raws[0].codec in (base.TOKENS, base.TEXT):
        more, why = stream_candidates(found, raws, source_layout, samples, layouts,
                                      shard_sizes, tokenizer, pack_len)
        out += more
        skipped += why
    return out, skipped


def _candidates(found: Found, raws: Sequence[base.RawSample], source_layout: str,
                samples: int, layouts: Sequence[str], shard_sizes: Sequence[int],
                compressions: Sequence[str], reencode: Sequence[int],
                tokenizer: TokenizerSpec | None) -> tuple[list[Candidate], list[Skipped]]:
    tokens = None
    codec = raws[0].codec
    kind = base.AUDIO if codec in base.AUDIO_CODECS else codec
    if kind in (base.TOKENS, base.TEXT, base.AUDIO) and reencode:
        raise DsbenchError("--reencode re-encodes images; this export's samples carry "
                           f"{payload_copy.what(kind)}")
    if codec in base.AUDIO_CODECS:
        return audio_candidates(found, raws, source_layout, samples, layouts, shard_sizes,
                                compressions)
    if codec == base.TEXT:
        assert tokenizer is not None
        return text_candidates(found, raws, source_layout, samples, layouts, shard_sizes,
                               compressions, tokenizer)
    if codec == base.TOKENS:  # token ids, copied in their dtype (export.reexport)
        tokens = TokensSpec(dtype=str(base.token_ids(raws[0].image).dtype))
    out, skipped = layout_grid(found, raws, source_layout, samples, layouts, shard_sizes,
                               compressions, ImageSpec(codec="jpeg" if tokens else codec), tokens)
    for q in reencode:
        image = ImageSpec(codec="jpeg", quality=q, reencode=True)
        again = [dataclasses.replace(r, image=reencoded(r.image, image, r.source, r.key),
                                     codec="jpeg") for r in raws]
        more, _ = layout_grid(found, again, source_layout, samples, layouts, shard_sizes,
                              compressions, image)
        out += [c for c in more if c.shard_bytes is not None]
    return out, skipped


def audio_candidates(found: Found, raws: Sequence[base.RawSample], source_layout: str,
                     samples: int, layouts: Sequence[str], shard_sizes: Sequence[int],
                     compressions: Sequence[str]) -> tuple[list[Candidate], list[Skipped]]:
    """An audio export's grid: each layout and shard size with the clips in each codec dsbench
    writes (FLAC, WAV), the source's own first (as stored), the other transcoded without loss
    (named -wav or -flac; sized by the transcoded clips)."""
    source = raws[0].codec
    out: list[Candidate] = []
    skipped: list[Skipped] = []
    for codec in sorted(AUDIO_CODECS, key=lambda c: c != source):
        audio = AudioSpec(codec=codec)
        again = raws if codec == source else [
            dataclasses.replace(r, image=payload_copy.clip(audio, r), codec=codec) for r in raws]
        more, skipped = layout_grid(found, again, source_layout, samples, layouts, shard_sizes,
                                    compressions, ImageSpec(), audio=audio,
                                    transcoded_from=None if codec == source else source)
        out += more
    return out, skipped


def text_candidates(found: Found, raws: Sequence[base.RawSample], source_layout: str,
                    samples: int, layouts: Sequence[str], shard_sizes: Sequence[int],
                    compressions: Sequence[str], tokenizer: TokenizerSpec
                    ) -> tuple[list[Candidate], list[Skipped]]:
    """A text export's grid: each layout and shard size with the texts as stored, and again
    with each text's ids as `tokenizer` encodes them (named -tokens; sized by the ids, in
    uint16 where its ids fit)."""
    out, skipped = layout_grid(found, raws, source_layout, samples, layouts, shard_sizes,
                               compressions, ImageSpec(), text=TextSpec())
    ids, dtype = _tokenized(raws, tokenizer)
    more, also = layout_grid(found, ids, source_layout, samples, layouts, shard_sizes, compressions,
                             ImageSpec(), TokensSpec(dtype=dtype), tokenized_by=tokenizer.source)
    both = {s.layout for s in skipped} & {s.layout for s in also}
    return out + more, [Skipped(s.layout, f"dsbench writes neither text nor token ids in "
                                          f"{s.layout}") if s.layout in both and
                        s.why.startswith("dsbench does not write") else s for s in skipped] + [
        s for s in also if s.layout not in both]


def _tokenized(raws: Sequence[base.RawSample], tokenizer: TokenizerSpec
               ) -> tuple[list[base.RawSample], str]:
    """Texts as `tokenizer`'s ids, in uint16 where its ids fit, and that dtype."""
    encode = encoder(tokenizer.json)
    dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
    return [dataclasses.replace(r, image=encode(base.text_of(r.image)).astype(dtype),
                                codec=base.TOKENS) for r in raws], dtype


STREAM = "litdata (token stream)"


def stream_candidates(found: Found, raws: Sequence[base.RawSample], source_layout: str,
                      samples: int, layouts: Sequence[str], shard_sizes: Sequence[int],
                      tokenizer: TokenizerSpec | None, seq_len: int
                      ) -> tuple[list[Candidate], list[Skipped]]:
    """A packed job's token stream: litdata chunks of about each shard size, the documents'
    ids laid end to end (a text's as `tokenizer` gives them), named litdata-stream-SIZE; a
    size whose chunks would hold no block of `seq_len` ids is not tried."""
    if "litdata" not in layouts:
        return [], []
    if not installed("litdata"):
        return [], [Skipped(STREAM, "needs litdata: pip install 'dsbench[litdata]'")]
    # A JSON Lines document's id is its key, as a shard's sample key is: no stream keeps keys.
    kept = [f for f in found.fields if not (source_layout == "jsonl" and f.name == "id")]
    if kept:
        names = ", ".join(f.name for f in kept)
        return [], [Skipped(STREAM, f"the documents carry {names}, and a TokensLoader chunk "
                                    "holds the ids alone")]
    found = dataclasses.replace(found, fields=())
    tokenized_by = None
    if raws[0].codec == base.TEXT:
        assert tokenizer is not None
        raws, dtype = _tokenized(raws, tokenizer)
        tokenized_by = tokenizer.source
    else:
        dtype = str(base.token_ids(raws[0].image).dtype)
    tokens = TokensSpec(dtype=dtype, stream=True)
    per_sample = sum(base.token_ids(r.image).nbytes for r in raws) / len(raws)
    per_id = np.dtype(dtype).itemsize
    what = ("litdata chunks of the documents laid end to end, read by TokensLoader in blocks "
            "of the sequence length" + (f", the texts as {dtype} token ids ({tokenized_by})"
                                        if tokenized_by else ""))
    out: list[Candidate] = []
    seen: set[int] = set()
    for size in sorted(shard_sizes, reverse=True):
        per_shard = max(1, round(size / max(1.0, per_sample)))
        if min(per_shard, samples) in seen or \
                min(per_shard, samples) * per_sample < seq_len * per_id:
            continue
        seen.add(min(per_shard, samples))
        name = f"litdata-stream-{size_name(size)}"
        out.append(Candidate(name, candidate_spec(name, "litdata", found, samples, ImageSpec(),
                                                  shard_samples=per_shard, tokens=tokens,
                                                  what=f"{what}, about {fmt.nbytes(size)} "
                                                       f"({fmt.plural(per_shard, 'document')}) a "
                                                       "chunk"),
                             size, "-", what))
    if not out:
        return [], [Skipped(STREAM, f"no chunk of --shard-sizes holds a block of {seq_len} ids "
                                    f"(--seq-len) of these {samples} documents")]
    return out, []
