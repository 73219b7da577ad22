"""Synthetic photographs, 3.5 times faster (generator 2): crops of a few precomputed fields.

Generator 1 (export.images.render) draws a fresh 1/f field for every image: about 11 ms of a
core per ImageNet-sized JPEG, most of it random numbers and an inverse FFT, so a million-sample
candidate export took three hours of a core. Generator 2 draws such fields once per process, from
a fixed seed: a bank of luminance fields (1/f^ALPHA, 1024 x 1024) and of smoother chroma fields
(1/f^CHROMA_ALPHA, 512 x 512). Each image is then

* the mix of two random crops of the luminance bank with random weights whose squares sum to 1
  (a sum of independent 1/f fields is a 1/f field of the same variance), flipped or not;
* chroma from two crops of the chroma bank, at half resolution: JPEG's 4:2:0 keeps no more;
* its own base colour and 2 to 6 objects (ellipses and rectangles with hard edges),

built in YCbCr, as JPEG stores it, with the weights of generator 1's RGB composition. Every draw
comes from the sample's own generator, so sample i still depends only on (seed, i). The images
are as large and as slow to decode as generator 1's (docs/formats.md: what was measured), and
no two are the same picture. The fields repeat every 1024 (512) pixels, so an image larger than
that (a `fixed` size above 1024) tiles them: seamless, as an inverse FFT's output is periodic.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image

from dsbench.export.images import ALPHA, CHROMA_ALPHA, image_size, spectral_field
from dsbench.export.spec import ImageSpec

BANK_SEED = 20261205
LUMA_SIDE, LUMA_FIELDS = 1024, 4
CHROMA_SIDE, CHROMA_FIELDS = 512, 2
# JFIF's RGB -> YCbCr.
_YCC = np.array([[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]])
# Generator 1's image: R, G, B = lum + 22 a + base_r, lum + 14 b + base_g, lum - 22 a + base_b,
# with lum of std 42 and a, b unit chroma fields. Their weights in Cb and Cr:
_CHROMA_A = _YCC @ (22.0, 0.0, -22.0)
_CHROMA_B = _YCC @ (0.0, 14.0, 0.0)
# Generator 1 scales each fresh field to a std of 42. A crop holds less of its field's lowest
# frequencies than a whole field does, so the same scale gave 4% fewer JPEG bits per pixel; 47
# matched generator 1's (4.14 against 4.13 bits per pixel over the same 500 ImageNet-sized q90
# images, docs/formats.md).
LUMA_STD = 47.0


@functools.lru_cache(maxsize=1)
def bank() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The luminance and chroma fields, made once per process (about 0.1 s)."""
    rng = np.random.default_rng(BANK_SEED)
    luma = [spectral_field(rng, LUMA_SIDE, LUMA_SIDE, ALPHA) for _ in range(LUMA_FIELDS)]
    chroma = [spectral_field(rng, CHROMA_SIDE, CHROMA_SIDE, CHROMA_ALPHA)
              for _ in range(CHROMA_FIELDS)]
    return luma, chroma


def _crop(fields: list[np.ndarray], rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    field = fields[int(rng.integers(0, len(fields)))]
    side = field.shape[0]
    if h <= side and w <= side:
        y, x = int(rng.integers(0, side - h + 1)), int(rng.integers(0, side - w + 1))
        view = field[y:y + h, x:x + w]
    else:
        y, x = int(rng.integers(0, side)), int(rng.integers(0, side))
        view = field[np.ix_((y + np.arange(h)) % side, (x + np.arange(w)) % side)]
    # Upside down or not: a flip of rows costs nothing (a view); columns would slow every pass.
    return view[::-1] if rng.random() < 0.5 else view


def _add_objects(y: np.ndarray, chroma: np.ndarray, rng: np.random.Generator) -> None:
    """2 to 6 objects, an ellipse or a rectangle each, shifted in colour with a hard edge; in
    the chroma planes (stacked: Cb, Cr) at their half resolution."""
    h, w = y.shape
    count = int(rng.integers(2, 7))
    # Per object: centre, radii (5% to 35% of the side), ellipse or not, an RGB shift.
    u = rng.random((count, 8))
    shifts = ((u[:, 5:] * 120.0 - 60.0) @ _YCC.T).astype(np.float32)
    for (cx, cy, rx, ry, kind), shift in zip(u[:, :5], shifts, strict=True):
        cx, cy, rx, ry = cx * w, cy * h, (0.05 + 0.3 * rx) * w, (0.05 + 0.3 * ry) * h
        for plane, scale, s in ((y, 1.0, shift[0]), (chroma, 0.5, shift[1:, None, None])):
            px, py, prx, pry = cx * scale, cy * scale, rx * scale, ry * scale
            ph, pw = plane.shape[-2:]
            x0, x1 = max(0, int(px - prx)), min(pw, int(px + prx) + 1)
            y0, y1 = max(0, int(py - pry)), min(ph, int(py + pry) + 1)
            if x0 >= x1 or y0 >= y1:
                continue
            region = plane[..., y0:y1, x0:x1]
            if kind < 0.5:
                region += s
                continue
            # An ellipse: each row's half-width, then one comparison per pixel.
            dy = (np.arange(y0, y1) - py) / pry
            half = prx * np.sqrt(np.maximum(1.0 - dy * dy, 0.0))
            inside = np.abs(np.arange(x0, x1) - px)[None, :] <= half[:, None]
            np.add(region, s, out=region, where=inside)


def render(spec: ImageSpec, rng: np.random.Generator) -> Image.Image:
    """A photo-like image in YCbCr (PIL mode "YCbCr", chroma upsampled from half resolution)."""
    luma, chroma = bank()
    w, h = image_size(spec, rng)
    hc, wc = (h + 1) // 2, (w + 1) // 2
    angle, *rgb = rng.random(4)
    base = _YCC @ (70.0 + 100.0 * np.asarray(rgb)) + (0.0, 128.0, 128.0)
    angle *= np.pi / 2
    y = np.multiply(_crop(luma, rng, h, w), np.float32(LUMA_STD * np.cos(angle)))
    y += _crop(luma, rng, h, w) * np.float32(LUMA_STD * np.sin(angle))
    y += np.float32(base[0])
    a, b = _crop(chroma, rng, hc, wc), _crop(chroma, rng, hc, wc)
    cbcr = a * _CHROMA_A[1:, None, None].astype(np.float32)
    cbcr += b * _CHROMA_B[1:, None, None].astype(np.float32)
    cbcr += base[1:, None, None].astype(np.float32)
    _add_objects(y, cbcr, rng)
    np.clip(y, 0.0, 255.0, out=y)
    np.clip(cbcr, 0.0, 255.0, out=cbcr)
    y8, cbcr8 = y.astype(np.uint8), cbcr.astype(np.uint8)
    planes = [Image.fromarray(y8, mode="L")]
    for plane in cbcr8:
        im = Image.fromarray(plane, mode="L")
        planes.append(im if im.size == (w, h) else im.resize((w, h), Image.Resampling.NEAREST))
    return Image.merge("YCbCr", planes)
