"""Encoded audio through libsndfile (the `soundfile` package, which bundles it): a header's
frames, rate and channels for the survey, and the frames themselves for the decode stage.

libsndfile reads WAV, FLAC and Ogg (Vorbis, Opus) from memory, with no FFmpeg: what a speech
team's loader most often calls. It reads MP3 too, but not whole: an MP3 clip is checked frame by
frame and decoded by FFmpeg through torchcodec instead (adapters/mp3.py). A sample is `Clip`:
float32 frames (frames x channels, as libsndfile returns them) and their rate.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.adapters import mp3
from dsbench.errors import DsbenchError

# libsndfile's container names, as dsbench's codecs name them.
_FORMATS = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "OGG": "ogg", "MPEG": "mp3",
            "MP3": "mp3"}


@dataclass(frozen=True)
class Clip:
    """Decoded audio: float32 frames (frames x channels) and their sample rate in Hz."""

    frames: np.ndarray
    rate: int


def soundfile() -> Any:
    try:
        import soundfile as sf
    except (ImportError, OSError):  # OSError: the package without its libsndfile
        raise DsbenchError("this export's samples are audio, which dsbench decodes with "
                           "soundfile: pip install 'dsbench[audio]'") from None
    return sf


# libsndfile's frame count where a stream does not declare one (a FLAC written as a stream):
# SF_COUNT_MAX, or anything near it.
_UNKNOWN = 1 << 62
_BLOCK = 1 << 16  # frames decoded at a time: memory follows the data, not a declared count
# More frames per stored byte than any codec reaches (FLAC's longest block of silence, 65,535
# frames, takes over a dozen bytes): a header declaring more is corrupt.
_MOST_FRAMES_PER_BYTE = 1 << 14


def info(data: bytes | memoryview) -> tuple[str, int, int, int]:
    """(codec, frames, sample rate, channels) from an encoded clip's header (a stream that
    declares no length is decoded to count them); ValueError where libsndfile cannot read it,
    or a WAV's data or an Ogg stream is shorter than its header says."""
    raw = bytes(data)
    if is_mp3(raw):  # decoded whole to count its frames, as a stream without a length is
        frames_mp3, rate = mp3.decode(raw)
        return "mp3", len(frames_mp3), rate, frames_mp3.shape[1]
    sf = soundfile()
    try:
        found = sf.info(io.BytesIO(raw))
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise ValueError(f"not audio libsndfile reads: {said(exc)}") from None
    codec = _FORMATS.get(found.format, found.format.lower())
    _whole(codec, raw)
    if found.samplerate <= 0 or found.channels <= 0:
        raise ValueError(f"audio of {found.channels} channels at {found.samplerate} Hz")
    frames = int(found.frames) if 0 < found.frames < _UNKNOWN else len(read(raw).frames)
    if frames > len(raw) * _MOST_FRAMES_PER_BYTE:
        raise ValueError(f"its header declares {frames} frames in {len(raw)} bytes")
    return codec, frames, int(found.samplerate), int(found.channels)


def read(data: bytes | memoryview) -> Clip:
    """The clip's frames as float32, decoded a block at a time; ValueError on bad data, and
    on a clip with fewer frames than its header declares (libsndfile reads a truncated one up
    to where it ends)."""
    raw = bytes(data)
    if is_mp3(raw):
        return Clip(*mp3.decode(raw))
    sf = soundfile()
    try:
        with sf.SoundFile(io.BytesIO(raw)) as f:
            declared, rate = int(f.frames), int(f.samplerate)
            _whole(_FORMATS.get(f.format, f.format.lower()), raw)
            blocks = list(f.blocks(blocksize=_BLOCK, dtype="float32", always_2d=True))
    except (RuntimeError, sf.LibsndfileError, MemoryError) as exc:
        raise ValueError(f"cannot decode audio: {said(exc)}") from None
    frames = np.concatenate(blocks) if len(blocks) > 1 else (blocks[0] if blocks else None)
    got = 0 if frames is None else len(frames)
    if frames is None or got == 0 or (declared < _UNKNOWN and got < declared):
        raise ValueError(f"truncated audio: {got} of the {declared} frames its header "
                         "declares")
    return Clip(frames, rate)


def is_mp3(raw: bytes) -> bool:
    """Whether `raw` is MP3 (an ID3 tag, or a frame's sync bits where no other container's
    magic is), which libsndfile must not open: it reads an MP3 only in part, and its MP3
    decoder prints on stderr as it opens."""
    if raw[:3] == b"ID3":  # a tag, which FLAC may carry too: what follows it decides
        return not raw[mp3.after_id3(raw):].startswith((b"fLaC", b"RIFF", b"OggS"))
    return (not raw.startswith((b"RIFF", b"fLaC", b"OggS")) and len(raw) > 1
            and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0)


def _whole(codec: str, raw: bytes) -> None:
    """What libsndfile does not check itself: a WAV's data chunk holds the bytes its header
    declares, an Ogg stream ends with its end-of-stream page (MP3 never reaches libsndfile)."""
    if codec == "mp3":
        raise ValueError("MP3 that is not sniffed as MP3: not read by libsndfile")
    if codec == "wav":
        _whole_wav(raw)
    elif codec == "ogg":
        last = raw.rfind(b"OggS")
        # The page header's type byte: bit 2 marks the stream's last page.
        if last < 0 or len(raw) < last + 27 or not raw[last + 5] & 4:
            raise ValueError("truncated Ogg: its last page does not end the stream")


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


def said(exc: BaseException) -> str:
    """libsndfile's message without the in-memory file's repr it names."""
    text = str(exc) or type(exc).__name__
    return re.sub(r"^Error opening <[^>]*>: ", "", text).strip()
