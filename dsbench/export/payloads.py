"""What a sample carries in place of an image, in a definition: token ids (`[tokens]`) or an
encoded audio clip (`[audio]`), each with the layouts whose writers store it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.export.keys import fail, number, take_choice, take_int, unknown

# Token exports: the layouts whose writers store token ids (an integer array per sample), the
# dtypes they store them as, and the payload's name in every layout (a member or per-sample
# file `input_ids.npy`).
TOKEN_LAYOUTS = ("wds", "files", "arrow", "parquet", "mds", "litdata", "hf")
TOKEN_DTYPES = ("uint16", "uint32", "int32", "int64")
TOKENS_NAME = "input_ids"
# Audio exports: the layouts whose writers store an encoded clip (bytes, or Hugging Face's Audio
# feature), the codecs written (lossless 16-bit PCM, through libsndfile), and the clip's name in
# every layout (a column or leaf `audio`; a WebDataset member `.flac` or `.wav`).
AUDIO_LAYOUTS = ("wds", "files", "arrow", "parquet", "mds", "litdata", "hf", "lance",
                 "tfrecord")
AUDIO_CODECS = ("flac", "wav")
AUDIO_NAME = "audio"
MAX_SECONDS = 120.0
# Text exports: every layout holds a string per sample (a WebDataset `.txt` member, a string
# column, leaf or feature named `text`), and JSON Lines, which holds nothing else.
TEXT_LAYOUTS = ("jsonl", "wds", "files", "arrow", "parquet", "mds", "litdata", "hf", "lance",
                "tfrecord")
TEXT_NAME = "text"
MAX_WORDS = 100_000


@dataclass(frozen=True)
class TokensSpec:
    """Token ids in place of an image: each sample one document of `vocab` ids drawn by Zipf's
    law (p(rank k) ~ 1 / k^zipf, as words in text), its length log-normal around
    `median_length` ids (spread `sigma`, as web documents' lengths are) within [min_length,
    max_length], stored as `dtype`."""

    vocab: int = 50_000
    dtype: str = "uint16"
    zipf: float = 1.1
    median_length: int = 400
    sigma: float = 1.0
    min_length: int = 16
    max_length: int = 8192
    # Laid end to end in litdata chunks that litdata's TokensLoader reads (`stream = true`):
    # the reader cuts them into training sequences; no document stays a sample, and no
    # per-document field is kept (the chunk holds ids alone).
    stream: bool = False


@dataclass(frozen=True)
class AudioSpec:
    """An encoded clip in place of an image: speech-like mono audio (a voiced tone whose pitch
    glides within each syllable, about four syllables a second, over a quiet noise floor),
    16-bit PCM at `sample_rate`, its length log-normal around `seconds` (spread `sigma`) within
    [min_seconds, max_seconds], stored as `codec` (FLAC or WAV, by libsndfile)."""

    codec: str = "flac"
    sample_rate: int = 16_000
    seconds: float = 4.0
    sigma: float = 0.3
    min_seconds: float = 0.5
    max_seconds: float = 30.0

    @property
    def ext(self) -> str:
        return self.codec


@dataclass(frozen=True)
class TextSpec:
    """Raw text in place of an image: each sample one document of made-up words (a fixed
    vocabulary of syllable words, drawn by Zipf's law as words in text), in sentences of 8 to
    20 words, its length log-normal around `median_words` (spread `sigma`) within [min_words,
    max_words]. The loader tokenizes it in its workers (docs/tokens.md)."""

    median_words: int = 300
    sigma: float = 0.8
    min_words: int = 8
    max_words: int = 20_000


_TEXT_KEYS = {"median_words", "sigma", "min_words", "max_words"}
_TOKENS_KEYS = {"vocab", "dtype", "zipf", "median_length", "sigma", "min_length",
                "max_length", "stream"}
_AUDIO_KEYS = {"codec", "sample_rate", "seconds", "sigma", "min_seconds", "max_seconds"}


def _table(src: str, name: str, raw: Any, keys: set[str], layout: str,
           layouts: tuple[str, ...], what: str) -> None:
    """A payload table's shape: a table of known keys, in a layout that holds its kind."""
    if not isinstance(raw, dict):
        raise fail(src, name, "expected a table")
    unknown(src, f"{name}.", raw, keys)
    if layout not in layouts:
        raise fail(src, name, f"dsbench writes {what} in {', '.join(layouts)}, not {layout}")


def tokens(src: str, raw: Any, layout: str) -> TokensSpec:
    _table(src, "tokens", raw, _TOKENS_KEYS, layout, TOKEN_LAYOUTS, "token ids")
    d = TokensSpec()
    dtype = take_choice(src, "tokens.dtype", raw.get("dtype", d.dtype), TOKEN_DTYPES)
    vocab = take_int(src, "tokens.vocab", raw.get("vocab", d.vocab), 2,
                     int(min(np.iinfo(dtype).max, 2**31 - 1)) + 1)
    lo = take_int(src, "tokens.min_length", raw.get("min_length", d.min_length), 1, 10**7)
    hi = take_int(src, "tokens.max_length", raw.get("max_length", d.max_length), lo, 10**7)
    stream = raw.get("stream", False)
    if not isinstance(stream, bool):
        raise fail(src, "tokens.stream", f"expected true or false, got {stream!r}")
    if stream and layout != "litdata":
        raise fail(src, "tokens.stream", "a token stream is litdata's TokensLoader layout: "
                   f"set layout = \"litdata\", not {layout!r}")
    return TokensSpec(vocab=vocab, dtype=dtype,
                      zipf=number(src, "tokens.zipf", raw.get("zipf", d.zipf), 0.0, 5.0),
                      median_length=take_int(src, "tokens.median_length",
                                             raw.get("median_length", d.median_length), lo, hi),
                      sigma=number(src, "tokens.sigma", raw.get("sigma", d.sigma), 0.0, 5.0),
                      min_length=lo, max_length=hi, stream=stream)


def audio(src: str, raw: Any, layout: str) -> AudioSpec:
    _table(src, "audio", raw, _AUDIO_KEYS, layout, AUDIO_LAYOUTS, "audio clips")
    d = AudioSpec()
    # A clip is made whole in memory (about 75 bytes a frame): a few minutes at most.
    lo = number(src, "audio.min_seconds", raw.get("min_seconds", d.min_seconds), 0.01,
                MAX_SECONDS)
    hi = number(src, "audio.max_seconds", raw.get("max_seconds", d.max_seconds), lo,
                MAX_SECONDS)
    return AudioSpec(
        codec=take_choice(src, "audio.codec", raw.get("codec", d.codec), AUDIO_CODECS),
        sample_rate=take_int(src, "audio.sample_rate", raw.get("sample_rate", d.sample_rate),
                             8000, 48_000),
        # Left out, the median is the default's within the range given.
        seconds=number(src, "audio.seconds", raw.get("seconds", min(max(d.seconds, lo), hi)),
                       lo, hi),
        sigma=number(src, "audio.sigma", raw.get("sigma", d.sigma), 0.0, 5.0),
        min_seconds=lo, max_seconds=hi)


def text(src: str, raw: Any, layout: str) -> TextSpec:
    _table(src, "text", raw, _TEXT_KEYS, layout, TEXT_LAYOUTS, "text")
    d = TextSpec()
    # A unit's documents are made whole in memory (about 6 bytes a word): a book at most.
    lo = take_int(src, "text.min_words", raw.get("min_words", d.min_words), 1, MAX_WORDS)
    hi = take_int(src, "text.max_words", raw.get("max_words", d.max_words), lo, MAX_WORDS)
    return TextSpec(median_words=take_int(src, "text.median_words",
                                          raw.get("median_words", d.median_words), lo, hi),
                    sigma=number(src, "text.sigma", raw.get("sigma", d.sigma), 0.0, 5.0),
                    min_words=lo, max_words=hi)
