"""The decode stage: an encoded image to pixels, refusing images too large before decoding them;
a token array (codec `tokens`) to a 1-d integer array; a text (codec `text`) to its ids, by the
run's tokenizer (tokenize.py); encoded audio to float32 frames with libsndfile (WAV, FLAC, Ogg)
or FFmpeg through torchcodec (MP3, checked frame by frame first: adapters/mp3.py), or a clip a
format's own library decodes (codec `decoded-audio`) by calling its decoder here.

JPEG with Pillow (default) or simplejpeg when asked for, PNG and other codecs with Pillow, raw
`.npy` with numpy, raw PIL pixels (MDS's and litdata's `pil` encoding) with Pillow; an image a
format's own library decoded (codec `decoded`: PIL, array or tensor) to HWC pixels. Every
decoder reads the image's header first and refuses an image of more than `max_pixels` pixels
as a bad sample, so a JPEG that declares 12000 x 12000 pixels in a few hundred bytes costs a
header read, not 432 MB (Pillow would only warn at that size, simplejpeg not at all). The
default is Pillow's own warning threshold.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image

from dsbench import fmt
from dsbench.adapters import audio
from dsbench.adapters.base import (
    AUDIO,
    AUDIO_CODECS,
    TEXT,
    TOKENS,
    RawSample,
    npy_header,
    text_of,
    token_ids,
)
from dsbench.adapters.survey import MAX_PIXELS, open_image, pil_raw_header
from dsbench.errors import DsbenchError, SampleError

DECODERS = ("pillow", "simplejpeg")
DEFAULT_MAX_PIXELS = MAX_PIXELS  # Pillow's MAX_IMAGE_PIXELS, which inspect applies too
# dsbench checks the size itself, from the header, for every decoder alike; Pillow's own check
# would only warn (twice on stderr) between this and twice this.
Image.MAX_IMAGE_PIXELS = None

Pixels = Image.Image | np.ndarray
Decoded = Pixels | audio.Clip  # what the stage hands the transform: pixels, ids or a clip
# A clip a format's own library hands over undecoded: a torchcodec AudioDecoder (Hugging Face
# datasets' Audio feature), decoded in this stage.
DECODED_AUDIO = "decoded-audio"
# What a decoder or a parser may raise on bad data; anything else is a bug and propagates.
_BAD_DATA = (OSError, ValueError, SyntaxError, EOFError, TypeError, KeyError, IndexError,
             UnicodeDecodeError, Image.DecompressionBombError)


def _check_size(width: int, height: int, limit: int) -> None:
    if width * height > limit:
        raise ValueError(f"image of {width} x {height} px ({fmt.sig(width * height / 1e6)} MP) "
                         f"is over the limit of {fmt.sig(limit / 1e6)} MP (--max-pixels)")


def _pillow_decode(data: bytes, limit: int) -> Image.Image:
    im = open_image(data)  # the header only
    _check_size(*im.size, limit)
    if im.mode != "RGB":
        return im.convert("RGB")
    im.load()
    return im


def _npy_decode(data: bytes, limit: int) -> np.ndarray:
    shape, dtype = npy_header(data)
    if len(shape) != 3 or shape[2] != 3 or dtype != np.uint8:
        raise ValueError(f"expected an HxWx3 uint8 array, got {dtype} {shape}")
    _check_size(shape[1], shape[0], limit)
    return np.load(io.BytesIO(data), allow_pickle=False)


def _pil_raw_decode(data: bytes, limit: int) -> Image.Image:
    """MDS's and litdata's `pil` encoding: a small header, then the pixels as PIL holds them."""
    mode, width, height, start = pil_raw_header(data, limit)
    im = Image.frombuffer(mode, (width, height), data[start:], "raw", mode, 0, 1)
    return im if mode == "RGB" else im.convert("RGB")


def _decoded(image: object, limit: int) -> Pixels:
    """An image a format's own library already decoded (native readers): a PIL image (whose
    lazy decode happens here), or a uint8 array or tensor, HWC or CHW (torch's layout)."""
    if isinstance(image, Image.Image):
        _check_size(*image.size, limit)
        im = image if image.mode == "RGB" else image.convert("RGB")
        im.load()
        return im
    numpy = getattr(image, "numpy", None)
    arr = numpy() if callable(numpy) and not isinstance(image, np.ndarray) else np.asarray(image)
    if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[2] not in (1, 3, 4):
        arr = arr.transpose(1, 2, 0)  # CHW, as torchvision decodes
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {arr.dtype} of shape {arr.shape}")
    _check_size(arr.shape[1], arr.shape[0], limit)
    if arr.shape[2] != 3:
        arr = np.repeat(arr[:, :, :1], 3, axis=2)
    return np.ascontiguousarray(arr)


def _library_audio(decoder: object) -> audio.Clip:
    """A torchcodec AudioDecoder's samples (channels x frames) as a Clip."""
    try:
        got = decoder.get_all_samples()  # type: ignore[attr-defined]
    except RuntimeError as exc:  # torchcodec's error for data FFmpeg cannot decode
        raise ValueError(str(exc).splitlines()[0] if str(exc) else "cannot decode") from None
    frames = got.data.numpy().T
    if frames.dtype != np.float32 or len(frames) == 0:
        raise ValueError(f"expected float32 frames, got {frames.dtype} of shape {frames.shape}")
    return audio.Clip(np.ascontiguousarray(frames), int(got.sample_rate))


def make_decoder(name: str = "pillow", max_pixels: int = DEFAULT_MAX_PIXELS,
                 tokenizer: str | None = None) -> Callable[[RawSample], Decoded]:
    """A function from a raw sample to its pixels; SampleError naming file and key on bad data."""
    if name not in DECODERS:
        raise DsbenchError(f"unknown decoder {name!r} (known: {', '.join(DECODERS)})")

    def jpeg(data: bytes) -> Pixels:
        return _pillow_decode(data, max_pixels)

    if name == "simplejpeg":
        try:
            import simplejpeg
        except ImportError:
            raise DsbenchError("--decoder simplejpeg needs simplejpeg: "
                               "pip install 'dsbench[fast]'") from None

        def jpeg(data: bytes) -> Pixels:
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
            _check_size(width, height, max_pixels)
            return simplejpeg.decode_jpeg(data, colorspace="RGB")

    encode = None
    if tokenizer is not None:  # a text export's: built once, as the worker starts
        from dsbench.adapters.tokenizer import encoder

        encode = encoder(tokenizer)

    def decode(raw: RawSample) -> Decoded:
        try:
            if raw.codec == TOKENS:
                return token_ids(raw.image)
            if raw.codec == TEXT:
                if encode is None:
                    raise DsbenchError("a text sample, and no tokenizer: the run did not find "
                                       "the export's samples to be text")
                return encode(text_of(raw.image))
            if raw.codec in AUDIO_CODECS or raw.codec == AUDIO:
                return audio.read(raw.image)
            if raw.codec == DECODED_AUDIO:
                return _library_audio(raw.image)
            if raw.codec == "jpeg":
                return jpeg(raw.image)
            if raw.codec in ("raw", "npy"):
                return _npy_decode(raw.image, max_pixels)
            if raw.codec == "pil":
                return _pil_raw_decode(raw.image, max_pixels)
            if raw.codec == "decoded":
                return _decoded(raw.image, max_pixels)
            return _pillow_decode(raw.image, max_pixels)
        except _BAD_DATA as exc:
            what = ({TOKENS: "token ids", TEXT: "text", AUDIO: "audio", DECODED_AUDIO: "audio"}
                    .get(raw.codec) or f"{raw.codec} "
                    f"{'audio' if raw.codec in AUDIO_CODECS else 'image'}")
            raise SampleError(f"cannot decode {what}: {exc}", path=raw.source,
                              key=raw.key) from None

    return decode
