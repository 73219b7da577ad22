"""The transform stage: what a training job does to each sample before collating it.

`TrainTransform` is an ImageNet-style training transform on uint8 pixels (random-resized-crop
with torchvision's sampling rule and a horizontal flip, from a seeded numpy Generator, optionally
normalised to float32); `TokenCrop` makes a token sample one training sequence; `AudioCrop` makes
an audio sample one mono clip of fixed length. The runner sizes its batch buffers from a
transform's `out_shape` and `out_dtype`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from PIL import Image

from dsbench.adapters.audio import Clip
from dsbench.adapters.base import SEQ_LEN
from dsbench.errors import DsbenchError
from dsbench.loader.decode import Pixels

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def resized_crop_params(width: int, height: int, rng: np.random.Generator,
                        scale: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width) drawn as torchvision's RandomResizedCrop draws them.

    Ten tries at an area fraction uniform in `scale` and a log-uniform aspect ratio in `ratio`;
    when none fits, a centre crop clamped to the ratio range.
    """
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class Transform(Protocol):
    """A per-sample transform; the runner sizes its batch buffers from `out_shape`/`out_dtype`."""

    @property
    def out_shape(self) -> tuple[int, ...]: ...

    @property
    def out_dtype(self) -> str: ...

    # Positional: an image's pixels, or a token sample's ids.
    def __call__(self, payload: Any, rng: np.random.Generator, /) -> np.ndarray: ...


@dataclass(frozen=True)
class TrainTransform:
    """Random-resized-crop to `size` and a random horizontal flip; float32 mean/std optional."""

    size: int = 224
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    normalize: bool = False
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.size, self.size, 3)

    @property
    def out_dtype(self) -> str:
        return "float32" if self.normalize else "uint8"

    def __call__(self, pixels: Pixels, rng: np.random.Generator) -> np.ndarray:
        im = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
        top, left, h, w = resized_crop_params(im.width, im.height, rng, self.scale, self.ratio)
        # resize(box=...) resamples straight from the crop box: torchvision's crop-then-resize
        # without the intermediate copy.
        out = im.resize((self.size, self.size), Image.Resampling.BILINEAR,
                        box=(left, top, left + w, top + h))
        if rng.random() < self.flip_p:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        arr = np.asarray(out)
        if not self.normalize:
            return arr
        # (x / 255 - mean) / std as one multiply into a new float32 array and one subtract.
        gain, offset = _normalization(self.mean, self.std)
        norm = np.multiply(arr, gain, dtype=np.float32)
        norm -= offset
        return norm


@dataclass(frozen=True)
class TokenCrop:
    """A token sample to a training sequence of `seq_len` ids: a window at a random offset of a
    longer document (as a language-model loader crops one), the whole of a shorter one padded
    with `pad_id`, widened to int64 (the index type an embedding lookup takes)."""

    seq_len: int = SEQ_LEN
    pad_id: int = 0

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.seq_len,)

    @property
    def out_dtype(self) -> str:
        return "int64"

    def __call__(self, tokens: Any, rng: np.random.Generator) -> np.ndarray:
        n = len(tokens)
        start = int(rng.integers(0, n - self.seq_len + 1)) if n > self.seq_len else 0
        window = tokens[start:start + self.seq_len]
        out = np.full(self.seq_len, self.pad_id, dtype=np.int64)
        out[:len(window)] = window
        return out


class BadSample(ValueError):
    """A sample its transform cannot take (an audio clip at another rate): a bad sample, which
    the pipeline names by file and key."""


@dataclass(frozen=True)
class AudioCrop:
    """An audio sample to a training clip: its channels averaged to mono, a window of
    `seconds` at a random offset of a longer clip (as a speech loader crops one), a shorter one
    padded with silence, float32 at `rate` Hz. Without `resample`, `rate` is the export's and a
    clip at another rate is a bad sample; with it (--sample-rate), a clip at another rate is
    cut at its own rate first, then resampled by soxr (its default quality, as librosa and
    torchaudio's soxr backend use it): only the window kept is resampled, as a loader that
    crops first would."""

    seconds: float = 4.0
    rate: int = 16_000
    resample: bool = False

    @property
    def frames(self) -> int:
        return max(1, round(self.seconds * self.rate))

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.frames,)

    @property
    def out_dtype(self) -> str:
        return "float32"

    def __call__(self, clip: Clip, rng: np.random.Generator) -> np.ndarray:
        if clip.rate != self.rate and not self.resample:
            raise BadSample(f"audio at {clip.rate} Hz, where the export's clips are at "
                             f"{self.rate} Hz (--sample-rate resamples them)")
        if clip.rate > MAX_RATE:  # a header's rate the resampler's buffers would follow
            raise BadSample(f"audio at {clip.rate} Hz, past the {MAX_RATE} Hz resampled")
        # The window, at the clip's own rate: `frames` where that is the model's.
        n, want = len(clip.frames), max(1, round(self.seconds * clip.rate))
        start = int(rng.integers(0, n - want + 1)) if n > want else 0
        window = clip.frames[start:start + want]
        if clip.rate == self.rate:
            out = np.zeros(want, dtype=np.float32)
            # The mean over channels, written into the clip's buffer: no second array.
            np.mean(window, axis=1, out=out[:len(window)])
            return out
        # Only the clip's own frames are resampled, then padded with silence at the model's
        # rate: soxr's output is their count times the ratio, rounded, fitted to the clip.
        again = soxr().resample(np.mean(window, axis=1, dtype=np.float32), clip.rate, self.rate)
        out = np.zeros(self.frames, dtype=np.float32)
        out[:min(len(again), self.frames)] = again[:self.frames]
        return out


MAX_RATE = 384_000  # the highest rate audio interfaces record at (Hz)


def soxr() -> Any:
    """The soxr module (python-soxr), which resamples audio with libsoxr."""
    try:
        import soxr as module
    except ImportError:
        raise DsbenchError("--sample-rate resamples with soxr, which does not import: "
                           "pip install 'dsbench[audio]'") from None
    return module


@functools.lru_cache(maxsize=8)
def _normalization(mean: tuple[float, ...], std: tuple[float, ...]
                   ) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(std, dtype=np.float32)
    return (1.0 / (255.0 * s)).astype(np.float32), np.asarray(mean, dtype=np.float32) / s
