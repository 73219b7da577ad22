"""What a re-export (export.reexport) writes in place of an image: token ids copied id for id
in their stored dtype (or text tokenized into the definition's dtype, for a token definition
from a text source), text as stored, and audio clips copied byte for byte where the
definition's codec is the source's, else decoded and encoded as the definition's codec (16- and
24-bit PCM without loss; LOSSLESS says the rest). A clip keeps its rate,
channels and length: the `[audio]` table's rate and lengths shape synthetic clips only; nothing
is resampled. The `[text]` table's lengths likewise shape synthetic documents only."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable

import numpy as np

from dsbench.adapters import audio, base
from dsbench.errors import DsbenchError, SampleError
from dsbench.export.payloads import TOKEN_DTYPES, AudioSpec
from dsbench.export.spec import ExportSpec

# The depths FLAC and WAV both store as they are, and the dtype that reads them whole: a clip of
# one is transcoded sample for sample; any other (8- or 32-bit or float PCM, a lossy Ogg) is
# written as 16-bit PCM, clipped to full scale.
LOSSLESS = {"PCM_16": "int16", "PCM_24": "int32"}
_KIND_TABLE = {base.TOKENS: "tokens", base.AUDIO: "audio", base.TEXT: "text"}


def kind_spec(spec: ExportSpec, export: base.Export, first: base.RawSample,
              where: str, vocab: int | None = None) -> ExportSpec:
    """`spec` for what the source's samples carry: a token definition for token ids (their
    dtype the source's), or for text that a tokenizer of `vocab` ids encodes (the definition's
    dtype, which must hold them), an audio one for clips, an image one for images; a
    definition of another kind is one line before anything is written."""
    kind = base.kind_of(export)
    if kind not in ("image", base.TOKENS, base.AUDIO, base.TEXT):
        base.images_only(export, "a re-export writes the source's images, token ids, audio "
                         "clips or text in the definition's layout")
    if kind == base.TEXT and spec.tokens is not None and vocab is not None:
        if vocab - 1 > np.iinfo(spec.tokens.dtype).max:
            raise DsbenchError(f"the tokenizer's {vocab:,} ids do not fit {spec.tokens.dtype}: "
                               f"give the definition's [tokens] dtype = \"uint32\"",
                               path=where)
        return spec
    if kind != spec.kind:
        table = _KIND_TABLE.get(kind)
        raise DsbenchError(f"the source's samples carry {what(kind)}, and the definition "
                           f"{spec.name!r} makes {what(spec.kind)}: use a definition "
                           f"{f'with [{table}]' if table else 'of images'}", path=where)
    if spec.tokens is None:
        return spec
    try:
        dtype = str(base.token_ids(first.image).dtype)
    except ValueError as exc:
        raise DsbenchError(f"cannot read its token ids: {exc}", path=first.source,
                           key=first.key) from None
    if dtype not in TOKEN_DTYPES:
        raise DsbenchError(f"token ids of {dtype}: a re-export writes "
                           f"{', '.join(TOKEN_DTYPES)}", path=first.source, key=first.key)
    return dataclasses.replace(spec, tokens=dataclasses.replace(spec.tokens, dtype=dtype))


def what(kind: str) -> str:
    return {base.TOKENS: "token ids", base.AUDIO: "audio clips", base.TEXT: "text",
            "image": "images"}.get(kind, kind)


def ids(spec: ExportSpec, raw: base.RawSample) -> np.ndarray:
    """A token sample's ids, copied as stored; a sample of another kind or dtype is one line."""
    assert spec.tokens is not None
    try:
        found = base.token_ids(raw.image) if raw.codec == base.TOKENS else None
    except ValueError as exc:
        raise SampleError(f"cannot read its token ids: {exc}", path=raw.source,
                          key=raw.key) from None
    if found is None or found.dtype != np.dtype(spec.tokens.dtype):
        raise SampleError(f"{'ids of ' + str(found.dtype) if found is not None else raw.codec}"
                          f", but {spec.tokens.dtype} token ids in the source's first sample: "
                          "a re-export copies them as stored", path=raw.source, key=raw.key)
    return np.array(found)


def tokenized(spec: ExportSpec, raw: base.RawSample, encode: Callable[[str], np.ndarray]
              ) -> np.ndarray:
    """A text sample's ids, as `encode` (the tokenizer) gives them, in the definition's dtype
    (kind_spec checked that it holds every id of the tokenizer)."""
    assert spec.tokens is not None
    return encode(text(raw)).astype(spec.tokens.dtype)


def clip(want: AudioSpec, raw: base.RawSample, first_codec: str | None = None) -> bytes:
    """An audio sample's clip as the definition's codec: as stored where it already is, else
    transcoded (LOSSLESS says how). A clip in another codec than the source's first
    (`first_codec`) is one line, as an image of another codec is: the manifest describes the
    copy by the first."""
    if first_codec is not None and raw.codec != first_codec:
        raise SampleError(f"the clip is {raw.codec}, but {first_codec} in the source's first "
                          "sample: a re-export copies one codec", path=raw.source, key=raw.key)
    if raw.codec == want.codec:
        return raw.image
    if raw.codec not in base.AUDIO_CODECS:
        raise SampleError(f"{raw.codec}, not an audio clip", path=raw.source, key=raw.key)
    sf = audio.soundfile()
    try:
        if audio.is_mp3(bytes(raw.image)):  # checked frame by frame, decoded whole by FFmpeg
            clip_read = audio.read(raw.image)
            dtype, rate, subtype, frames = None, clip_read.rate, "PCM_16", clip_read.frames
        else:
            audio.info(raw.image)  # the reader's checks: a cut WAV or Ogg said
            with sf.SoundFile(io.BytesIO(raw.image)) as f:
                dtype, rate = LOSSLESS.get(f.subtype), f.samplerate
                subtype = f.subtype if dtype else "PCM_16"
                frames = f.read(dtype=dtype or "float32", always_2d=True)
        if dtype is None:  # float samples past full scale would wrap around as integers
            frames = np.clip(frames, -1.0, 1.0)
        out = io.BytesIO()
        sf.write(out, frames, rate, format=want.codec.upper(), subtype=subtype)
    except ValueError as exc:  # audio.info's word on a clip the reader refuses
        raise SampleError(f"cannot transcode the {raw.codec} clip to {want.codec}: {exc}",
                          path=raw.source, key=raw.key) from None
    except (RuntimeError, TypeError, sf.LibsndfileError) as exc:  # libsndfile's own errors
        raise SampleError(f"cannot transcode the {raw.codec} clip to {want.codec}: "
                          f"{audio.said(exc)}", path=raw.source, key=raw.key) from None
    return out.getvalue()


def text(raw: base.RawSample) -> str:
    """A text sample's text, as stored; a sample of another kind is one line."""
    if raw.codec != base.TEXT:
        raise SampleError(f"{raw.codec}, but text in the source's first sample", path=raw.source,
                          key=raw.key)
    try:
        text = base.text_of(raw.image)
        text.encode("utf-8")  # a lone surrogate (JSON's "\ud800") no writer can store
    except ValueError as exc:  # UnicodeError is one
        raise SampleError(f"cannot read its text: {exc}", path=raw.source, key=raw.key) from None
    return text


def copied(spec: ExportSpec, source_codec: str, tokenizer: str | None = None
           ) -> dict[str, str]:
    """The manifest's word on the payload: its codec and how it was copied (`tokenizer`: what
    tokenized a text source)."""
    if spec.tokens:
        codec = f"token ids ({spec.tokens.dtype})" + (
            ", each document's laid end to end in a TokensLoader stream" if spec.tokens.stream
            else "")
        return {"codec": codec, "copied": f"tokenized by {tokenizer}" if tokenizer else
                "id for id, as stored"}
    if spec.text:
        return {"codec": "text (UTF-8)", "copied": "character for character, as stored"}
    assert spec.audio is not None
    return {"codec": f"{spec.audio.codec} audio clips",
            "copied": "byte for byte, as stored" if source_codec == spec.audio.codec else
            f"decoded from {source_codec} and encoded as {spec.audio.codec} (16- and 24-bit "
            "PCM without loss, other samples as 16-bit PCM)"}
