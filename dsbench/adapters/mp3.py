"""MP3 clips: checked whole by dsbench, decoded whole by FFmpeg through torchcodec.

libsndfile reads an MP3 only to its own estimate of the clip's length where the file has no Xing
or Info header (measured: 79,992 frames of a 10 s clip at 16 kHz), and FFmpeg, which reads every
frame, reads a clip cut short as a shorter clip without a word. So dsbench walks the MPEG audio
frames itself first: every frame whole (a last frame cut off is a truncated clip), nothing but a
tag after the last one, and as many frames as a Xing or Info header declares (a clip cut at a
frame's end). Then torchcodec's AudioDecoder (FFmpeg's decoder) decodes all of them, as a speech
loader that reads MP3 with torchaudio or torchcodec does. torchcodec imports torch: the first MP3
a worker decodes costs that import, in its warm-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.errors import Missing

# Bitrates in kbit/s by (MPEG-1?, layer), index 1..14 (0 is free format, 15 is invalid).
_BITRATES = {
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
# Sample rates by the header's version bits (0: MPEG-2.5, 2: MPEG-2, 3: MPEG-1).
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
# What may follow the last frame: an ID3v1 tag, an APE tag (its header; a tag without one is
# found by its footer), an ID3v2.4 tag appended with its footer. (FFmpeg does not skip a Lyrics3
# tag: it fails on it, so one is not taken for a tag here either.)
_TRAILERS = (b"TAG", b"APETAGEX", b"ID3")
_APE_FOOTER = 32  # bytes: "APETAGEX", then the version, size, items and flags


@dataclass(frozen=True)
class Frames:
    """What the walk found: frames, the rate and channels of the first, and the frame count a
    Xing or Info header declares (None without one)."""

    count: int
    rate: int
    channels: int
    declared: int | None


def _header(raw: bytes, at: int) -> tuple[int, int, int] | None:
    """(frame length in bytes, sample rate, channels) of the frame header at `at`; None where
    there is none (no sync, a reserved or free-format field)."""
    if at + 4 > len(raw) or raw[at] != 0xFF or raw[at + 1] & 0xE0 != 0xE0:
        return None
    version, layer_bits = (raw[at + 1] >> 3) & 3, (raw[at + 1] >> 1) & 3
    bitrate_index, rate_index = raw[at + 2] >> 4, (raw[at + 2] >> 2) & 3
    if version == 1 or layer_bits == 0 or bitrate_index == 15 or rate_index == 3:
        return None
    if bitrate_index == 0:
        raise ValueError("free-format MP3 (no bitrate in its frame headers) is not read")
    layer, mpeg1 = 4 - layer_bits, version == 3
    bitrate = _BITRATES[(mpeg1, layer)][bitrate_index - 1] * 1000
    rate, padding = _RATES[version][rate_index], (raw[at + 2] >> 1) & 1
    if layer == 1:
        length = (12 * bitrate // rate + padding) * 4
    else:
        length = (144 if mpeg1 or layer == 2 else 72) * bitrate // rate + padding
    return length, rate, 1 if raw[at + 3] >> 6 == 3 else 2


def _id3_end(raw: bytes, at: int) -> int:
    """Where an ID3v2 tag at `at` ends (its size is 4 bytes of 7 bits each, a footer where its
    flags say so); `at` where none starts there."""
    if raw[at:at + 3] != b"ID3" or len(raw) < at + 10:
        return at
    size = 0
    for b in raw[at + 6:at + 10]:
        size = size << 7 | (b & 0x7F)
    return at + 10 + size + (10 if raw[at + 5] & 0x10 else 0)


def after_id3(raw: bytes) -> int:
    """Where the audio starts: past the ID3v2 tags that open the file. (Zero padding after
    them is not skipped: FFmpeg then decodes the Info frame as audio, a clip that is not the
    one stored, so it is said as no frame where the first should be.)"""
    at = 0
    while (end := _id3_end(raw, at)) != at:
        at = end
    return at


def _trailer(raw: bytes, at: int) -> bool:
    """Whether what follows the last frame, from `at`, is tags alone (FFmpeg fails on zero
    padding there, as on a Lyrics3 tag: neither is taken for a tag)."""
    return raw.startswith(_TRAILERS, at) or raw[-_APE_FOOTER:].startswith(b"APETAGEX") or \
        raw[-10:-7] == b"3DI"


def _xing_frames(frame: bytes) -> int | None:
    """The frame count a Xing or Info header in the first frame declares, where it does."""
    for magic in (b"Xing", b"Info"):
        at = frame.find(magic)
        if at >= 0 and len(frame) >= at + 12 and frame[at + 7] & 1:
            return int.from_bytes(frame[at + 8:at + 12], "big")
    return None


def looks_like(raw: bytes) -> bool:
    """Whether `raw` opens as MP3 without an ID3 tag to say so: two frame headers in a row, the
    second where the first one's length ends (AAC's ADTS frames have no MPEG layer, and text
    in UTF-16 does not chain so)."""
    try:
        first = _header(raw, 0)
        return first is not None and _header(raw, first[0]) is not None
    except ValueError:  # a free-format frame: MP3, though not one dsbench reads
        return True


def walk(raw: bytes) -> Frames:
    """Every frame of an MP3 clip, checked whole; ValueError naming what is wrong."""
    at = after_id3(raw)
    first = _header(raw, at)
    if first is None:
        raise ValueError("not MP3: no MPEG audio frame where its first should be")
    _, rate, channels = first
    declared = _xing_frames(raw[at:at + first[0]])
    count = 0
    while at < len(raw):
        found = _header(raw, at)
        if found is None:
            if _trailer(raw, at):
                break
            raise ValueError(f"corrupt MP3: byte {at} is neither a frame nor a tag")
        if at + found[0] > len(raw):
            raise ValueError(f"truncated MP3: its last frame holds {len(raw) - at} of its "
                             f"{found[0]} bytes")
        at += found[0]
        count += 1
    audio_frames = count - (declared is not None)  # the Xing or Info frame holds no audio
    if declared is not None and audio_frames < declared:
        raise ValueError(f"truncated MP3: {audio_frames} of the {declared} frames its header "
                         "declares")
    return Frames(count, rate, channels, declared)


def _decoder_class() -> Any:
    try:
        from torchcodec.decoders import AudioDecoder
    except (ImportError, OSError, RuntimeError):  # torchcodec without FFmpeg's libraries
        raise Missing("this export's clips are MP3, which dsbench decodes with "
                           "torchcodec (FFmpeg): pip install 'dsbench[mp3]' and FFmpeg's "
                           "libraries (apt-get install ffmpeg)") from None
    return AudioDecoder


def decode(raw: bytes) -> tuple[np.ndarray, int]:
    """The clip's frames (frames x channels, float32) and rate, every frame checked first."""
    found = walk(raw)
    try:
        samples = _decoder_class()(raw).get_all_samples()
    except RuntimeError as exc:  # FFmpeg's word on data it cannot decode
        said = str(exc).splitlines()[0] if str(exc) else ""
        # torchcodec names its own source file and line before FFmpeg's words.
        raise ValueError(f"cannot decode MP3: {re.sub(r'^.*[.]cpp:[0-9]+, ', '', said)}"
                         ) from None
    frames = np.ascontiguousarray(samples.data.numpy().T, dtype=np.float32)
    if len(frames) == 0:
        raise ValueError(f"cannot decode MP3: no audio in its {found.count} frames")
    return frames, int(samples.sample_rate)
