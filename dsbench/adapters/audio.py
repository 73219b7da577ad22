"""Encoded audio through libsndfile (the `soundfile` package, which bundles it): a header's
frames, rate and channels for the survey, and the frames themselves for the decode stage.

libsndfile reads WAV, FLAC, Ogg (Vorbis, Opus) and MP3 (from 1.1) from memory, with no FFmpeg:
what a speech team's loader most often calls. A sample is `Clip`: float32 frames (frames x
channels, as libsndfile returns them) and their rate.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.errors import DsbenchError

# libsndfile's container names, as dsbench's codecs name them.
_FORMATS = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "OGG": "ogg", "MPEG": "mp3",
            "MP3": "mp3"}


@dataclass(frozen=True)
class Clip:
    """Decoded audio: float32 frames (frames x channels) and their sample rate in Hz."""

    frames: np.ndarray
    rate: int

    @property
    def seconds(self) -> float:
        return len(self.frames) / self.rate


def soundfile() -> Any:
    try:
        import soundfile as sf
    except (ImportError, OSError):  # OSError: the package without its libsndfile
        raise DsbenchError("this export's samples are audio, which dsbench decodes with "
                           "soundfile: pip install 'dsbench[audio]'") from None
    return sf


def info(data: bytes | memoryview) -> tuple[str, int, int, int]:
    """(codec, frames, sample rate, channels) from an encoded clip's header; ValueError where
    libsndfile cannot read it, or a WAV's data is shorter than its header says."""
    sf = soundfile()
    raw = bytes(data)
    try:
        with _quiet(raw):
            found = sf.info(io.BytesIO(raw))
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise ValueError(f"not audio libsndfile reads: {_said(exc)}") from None
    codec = _FORMATS.get(found.format, found.format.lower())
    if codec == "wav":
        _whole_wav(raw)
    if found.frames <= 0 or found.samplerate <= 0:
        raise ValueError(f"audio of {found.frames} frames at {found.samplerate} Hz: empty")
    return codec, int(found.frames), int(found.samplerate), int(found.channels)


def read(data: bytes | memoryview) -> Clip:
    """The clip's frames as float32; ValueError on bad data, and on a clip with fewer frames
    than its header declares (libsndfile reads a truncated one up to where it ends)."""
    sf = soundfile()
    raw = bytes(data)
    try:
        with _quiet(raw), sf.SoundFile(io.BytesIO(raw)) as f:
            declared, rate = f.frames, f.samplerate
            if f.format in ("WAV", "WAVEX"):
                _whole_wav(raw)
            frames = f.read(dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise ValueError(f"cannot decode audio: {_said(exc)}") from None
    if len(frames) == 0 or len(frames) < declared:
        raise ValueError(f"truncated audio: {len(frames)} of the {declared} frames its header "
                         "declares")
    return Clip(frames, int(rate))


def _whole_wav(raw: bytes) -> None:
    """A RIFF WAV's data chunk holds the bytes its header declares: libsndfile shortens the
    clip to what the file holds instead of failing."""
    at = 12
    while at + 8 <= len(raw):
        chunk, size = raw[at:at + 4], int.from_bytes(raw[at + 4:at + 8], "little")
        if chunk == b"data":
            held = len(raw) - at - 8
            if size != 0xFFFFFFFF and size > held:  # all ones: a stream of unknown length
                raise ValueError(f"truncated WAV: its data chunk declares {size} bytes and "
                                 f"holds {held}")
            return
        at += 8 + size + (size & 1)


def _said(exc: Exception) -> str:
    """libsndfile's message without the in-memory file's repr it names."""
    return re.sub(r"^Error opening <[^>]*>: ", "", str(exc)).strip()


@contextlib.contextmanager
def _quiet(raw: bytes) -> Iterator[None]:
    """libsndfile's MP3 decoder (libmpg123) prints its warnings on the process's stderr, which
    would add lines to dsbench's one-line errors; they are dropped while it reads MP3 (no other
    codec writes there)."""
    if raw[:3] != b"ID3" and not (len(raw) > 1 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0):
        yield
        return
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
