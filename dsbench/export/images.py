"""Synthetic photographs whose JPEG size and decode cost are close to natural photos (generator 1;
export.texture is generator 2, the default, made from the same kind of fields).

Natural images have an amplitude spectrum that falls roughly as 1/f (power as 1/f^2), strongly
correlated colour channels and sharp occlusion edges. Noise has none of that (it compresses
badly and decodes slowly) and flat images have none of it either (they compress to almost
nothing). We build each image from:

* a luminance field with a 1/f^ALPHA amplitude spectrum and random phases (texture at all scales),
* two smoother chroma fields (colour varies slowly in photos),
* a few filled ellipses and rectangles (objects with edges), blended into the field.

ALPHA was calibrated so that a 500x375 image at JPEG quality 90 encodes to about 4 bits per pixel
(~95 KB), as photos of that size do; docs/formats.md records what was measured.
"""

from __future__ import annotations

import functools
import io

import numpy as np
from PIL import Image

from dsbench.export.spec import ImageSpec

ALPHA = 1.1
CHROMA_ALPHA = 1.6

# ImageNet-like sizes: most training images have a long side of 500 px with the common photo
# aspect ratios; the rest spread out log-normally. (aspect w/h, weight)
_ASPECTS = np.array([4 / 3, 3 / 4, 3 / 2, 2 / 3, 1.0, 16 / 9])
_ASPECT_WEIGHTS = np.array([0.48, 0.14, 0.16, 0.06, 0.10, 0.06])


def image_size(spec: ImageSpec, rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) of the next image, drawn from the definition's size distribution."""
    if spec.sizes == "fixed":
        return spec.width, spec.height
    aspect = float(rng.choice(_ASPECTS, p=_ASPECT_WEIGHTS))
    if rng.random() < 0.75:
        long_side = 500.0
    else:
        long_side = float(np.clip(rng.lognormal(np.log(420.0), 0.35), 160.0, 1024.0))
    if aspect >= 1.0:
        w, h = long_side, long_side / aspect
    else:
        w, h = long_side * aspect, long_side
    return max(8, round(w)), max(8, round(h))


@functools.lru_cache(maxsize=64)
def _amplitude(h: int, w: int, alpha: float) -> np.ndarray:
    """1/f^alpha amplitudes on the rfft2 grid of an h x w field (no DC term)."""
    fy = np.fft.fftfreq(h).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(w).astype(np.float32)[None, :]
    f2 = fx * fx + fy * fy
    f2[0, 0] = 1.0
    amp = f2 ** np.float32(-alpha / 2.0)
    amp[0, 0] = 0.0
    return amp


def spectral_field(rng: np.random.Generator, h: int, w: int, alpha: float) -> np.ndarray:
    """A real h x w field with a 1/f^alpha amplitude spectrum and random phases, unit std.

    White complex noise shaped in the frequency domain: one inverse real FFT, no forward one.
    """
    amp = _amplitude(h, w, alpha)
    noise = rng.standard_normal((2, *amp.shape), dtype=np.float32)
    field = np.fft.irfft2((noise[0] + 1j * noise[1]) * amp, s=(h, w)).astype(np.float32)
    return field / max(float(field.std()), 1e-12)


def _smooth_field(rng: np.random.Generator, h: int, w: int, alpha: float) -> np.ndarray:
    """A smooth field made at a quarter of the resolution and upsampled.

    Colour in photos varies slowly (and JPEG halves chroma resolution anyway), so the detail
    lost is detail a photo would not have; it makes generation several times cheaper.
    """
    small = spectral_field(rng, max(2, h // 4), max(2, w // 4), alpha)
    return np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.Resampling.BILINEAR))


def render(spec: ImageSpec, rng: np.random.Generator) -> np.ndarray:
    """An HxWx3 uint8 photo-like image."""
    w, h = image_size(spec, rng)
    lum = spectral_field(rng, h, w, ALPHA) * np.float32(42.0)
    chroma_a = _smooth_field(rng, h, w, CHROMA_ALPHA)
    chroma_b = _smooth_field(rng, h, w, CHROMA_ALPHA)
    base = rng.uniform(70.0, 170.0, size=3).astype(np.float32)
    img = np.empty((h, w, 3), dtype=np.float32)
    img[..., 0] = lum + 22.0 * chroma_a + base[0]
    img[..., 1] = lum + 14.0 * chroma_b + base[1]
    img[..., 2] = lum - 22.0 * chroma_a + base[2]
    for _ in range(int(rng.integers(2, 7))):
        # Objects: an ellipse or a rectangle, shifted in colour, with a hard edge.
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(0.05, 0.35) * w, rng.uniform(0.05, 0.35) * h
        ellipse = rng.random() < 0.5
        shift = rng.uniform(-60.0, 60.0, size=3).astype(np.float32)
        x0, x1 = max(0, int(cx - rx)), min(w, int(cx + rx) + 1)
        y0, y1 = max(0, int(cy - ry)), min(h, int(cy + ry) + 1)
        if x0 >= x1 or y0 >= y1:
            continue
        region = img[y0:y1, x0:x1]
        if ellipse:
            yy = ((np.arange(y0, y1, dtype=np.float32) - cy) / ry) ** 2
            xx = ((np.arange(x0, x1, dtype=np.float32) - cx) / rx) ** 2
            region[yy[:, None] + xx[None, :] <= 1.0] += shift
        else:
            region += shift
    return np.clip(img, 0.0, 255.0).astype(np.uint8)


def encode(pixels: np.ndarray | Image.Image, spec: ImageSpec) -> bytes:
    """Encode an image (HxWx3 uint8 RGB, or a PIL image: generator 2's YCbCr goes into a JPEG as
    it is) with the definition's codec. Deterministic: same pixels, same bytes."""
    if spec.codec == "raw":
        buf = io.BytesIO()
        rgb = np.asarray(pixels.convert("RGB")) if isinstance(pixels, Image.Image) else pixels
        np.save(buf, rgb, allow_pickle=False)
        return buf.getvalue()
    im = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels, mode="RGB")
    buf = io.BytesIO()
    if spec.codec == "jpeg":
        im.save(buf, format="JPEG", quality=spec.quality, subsampling="4:2:0",
                progressive=spec.progressive)
    else:
        (im if im.mode == "RGB" else im.convert("RGB")).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def make_image(spec: ImageSpec, rng: np.random.Generator) -> bytes:
    """Generator 1's image (export.synth picks the generator)."""
    return encode(render(spec, rng), spec)
