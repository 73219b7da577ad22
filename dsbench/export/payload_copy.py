"""What a re-export (export.reexport) writes in place of an image: token ids copied id for id
in their stored dtype, and audio clips copied byte for byte where the definition's codec is the
source's, else decoded and encoded as the definition's codec without loss (FLAC and WAV hold
the same PCM samples at the same bit depth). A clip keeps its rate, channels and length: the
`[audio]` table's rate and lengths shape synthetic clips only; nothing is resampled."""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from dsbench.adapters import audio, base
from dsbench.errors import DsbenchError, SampleError
from dsbench.export.payloads import TOKEN_DTYPES, AudioSpec
from dsbench.export.spec import ExportSpec

# The PCM depths both FLAC and WAV hold: a clip of one of these is transcoded sample for sample;
# a lossy or float source (MP3, Ogg, float WAV) is written as 16-bit PCM.
LOSSLESS = ("PCM_16", "PCM_24", "PCM_S8")
_KIND_TABLE = {base.TOKENS: "tokens", base.AUDIO: "audio"}


def kind_spec(spec: ExportSpec, export: base.Export, first: base.RawSample,
              where: str) -> ExportSpec:
    """`spec` for what the source's samples carry: a token definition for token ids (their
    dtype the source's), an audio one for clips, an image one for images; text, or a
    definition of another kind, one line before anything is written."""
    kind = base.kind_of(export)
    if kind not in ("image", base.TOKENS, base.AUDIO):
        base.images_only(export, "a re-export writes the source's images, token ids or audio "
                         "clips in the definition's layout")
    if kind != spec.kind:
        table = _KIND_TABLE.get(kind)
        raise DsbenchError(f"the source's samples carry {_what(kind)}, and the definition "
                           f"{spec.name!r} makes {_what(spec.kind)}: use a definition "
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


def _what(kind: str) -> str:
    return {base.TOKENS: "token ids", base.AUDIO: "audio clips", "image": "images"}.get(kind,
                                                                                       kind)


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


def clip(spec: ExportSpec | AudioSpec, raw: base.RawSample) -> bytes:
    """An audio sample's clip as the definition's codec: as stored where it already is."""
    want = spec.audio if isinstance(spec, ExportSpec) else spec
    assert want is not None
    if raw.codec == want.codec:
        return raw.image
    if raw.codec not in base.AUDIO_CODECS:
        raise SampleError(f"{raw.codec}, not an audio clip", path=raw.source, key=raw.key)
    sf = audio.soundfile()
    try:
        with sf.SoundFile(io.BytesIO(raw.image)) as f:
            subtype = f.subtype if f.subtype in LOSSLESS else "PCM_16"
            frames = f.read(dtype="int32" if subtype == "PCM_24" else "int16", always_2d=True)
            rate = f.samplerate
        out = io.BytesIO()
        sf.write(out, frames, rate, format=want.codec.upper(), subtype=subtype)
    except (RuntimeError, ValueError, TypeError) as exc:  # libsndfile's errors
        raise SampleError(f"cannot transcode the {raw.codec} clip to {want.codec}: "
                          f"{exc}", path=raw.source, key=raw.key) from None
    return out.getvalue()


def copied(spec: ExportSpec, source_codec: str) -> dict[str, str]:
    """The manifest's word on the payload: its codec and how it was copied."""
    if spec.tokens:
        return {"codec": f"token ids ({spec.tokens.dtype})", "copied": "id for id, as stored"}
    assert spec.audio is not None
    return {"codec": f"{spec.audio.codec} audio clips",
            "copied": "byte for byte, as stored" if source_codec == spec.audio.codec else
            f"decoded from {source_codec} and encoded as {spec.audio.codec} "
            f"({'without loss' if source_codec in ('flac', 'wav') else '16-bit PCM'})"}
