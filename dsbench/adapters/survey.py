"""The survey of an export: layout facts from `Export.survey()`, and the summary made of it.
from dsbench.storage.files import Loc

Every adapter's `survey()` returns one dict of the same shape (see `new_survey`); this module
holds the helpers that the adapters share to fill it (percentiles, byte apportioning, which
samples to check, image header probing) and `summarize`, which turns it into the summary
document that `dsbench inspect` prints and every bench result carries as its `export` block.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from dsbench import fmt, stats
from dsbench.adapters import audio
from dsbench.adapters.base import (
    AUDIO,
    AUDIO_CODECS,
    TEXT,
    TOKENS,
    npy_array,
    text_of,
    token_ids,
)
from dsbench.storage.files import Loc

# At most this many images (and JSON documents) are opened to learn codecs, sizes and field
# types; everything else comes from file sizes, tar headers and columnar footers.
CHECK_LIMIT = 200
# How many unit names and problems the summary lists (the counts are always complete).
LIST_LIMIT = 20

# Pillow's MAX_IMAGE_PIXELS (1024 x 1024 x 1024 // 4 // 3): bench's default --max-pixels, and
# what inspect holds every image header to, so that the two agree on what a bad sample is.
MAX_PIXELS = 89_478_485

UNIT_NAMES = {"wds": "shards", "arrow": "shards", "parquet": "files", "files": "sample groups",
              "mds": "shards", "litdata": "chunks", "hf": "shards", "lance": "fragments",
              "tfrecord": "files", "megatron": "sequence ranges", "jsonl": "files"}
_PIL_CODECS = {"JPEG": "jpeg", "PNG": "png", "WEBP": "webp", "PPM": "ppm", "GIF": "gif"}
_NPY_MAGIC = b"\x93NUMPY"


def new_survey(layout: str) -> dict[str, Any]:
    """An empty survey of the shape every adapter returns (documented in docs/architecture.md)."""
    return {
        "layout": layout, "samples": 0, "units": 0, "files": 0, "bytes": 0, "sample_bytes": [],
        "files_per_sample": 0.0, "members_per_sample": None, "fields": {},
        "image": {"codec": "", "count_checked": 0, "width": [], "height": []},
        "problems": [], "bad_samples": 0,
        # Optional: {"name": "directories", "count": n} when fields' `missing_in` names
        # containers other than the units (per-sample files are grouped in directories).
        "containers": None,
        # Optional, for layouts read by random access in blocks (columnar.Blocks): what a
        # sample read alone reads, {name, count, shards, rows_p50, bytes_p50}.
        "blocks": None,
    }


def problem(file: str | Loc, key: str | None, error: str) -> dict[str, Any]:
    return {"file": str(file), "key": key, "error": error}


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` bytes in proportion to `weights` as integers that sum exactly to `total`.

    Used for bytes that belong to a unit but not to one sample (tar end blocks, columnar
    footers and headers): the remainder after flooring goes to the largest fractions.
    """
    n = len(weights)
    if n == 0:
        return []
    w = np.asarray(weights, dtype=np.float64)
    share = w / w.sum() * total if w.sum() > 0 else np.full(n, total / n)
    out = np.floor(share).astype(np.int64)
    rest = int(total - out.sum())
    if rest > 0:
        out[np.argsort(-(share - out), kind="stable")[:rest]] += 1
    return [int(x) for x in out]


def spread(n: int, k: int = CHECK_LIMIT) -> list[int]:
    """At most `k` indices spread evenly over range(n), so that checks see old and new units."""
    if n <= k:
        return list(range(n))
    return sorted({int(i) for i in np.linspace(0, n - 1, k)})


UNIDENTIFIED = "not an image Pillow can identify (an unknown format, or a corrupt header)"


def open_image(data: bytes | IO[bytes]) -> Image.Image:
    """Pillow's lazy open (the header only); its "cannot identify image file" names the
    in-memory buffer's repr, which means nothing to a person: said in words instead."""
    f = io.BytesIO(data) if isinstance(data, bytes | bytearray | memoryview) else data
    try:
        return Image.open(f)
    except UnidentifiedImageError:
        raise ValueError(UNIDENTIFIED) from None


def probe_image(data: bytes | IO[bytes]) -> tuple[str, int, int]:
    """(codec, width, height) from an encoded image's header; ValueError when it is not one.

    PIL reads only the header. A JPEG or PNG whose last bytes are not its end marker is
    reported as truncated: a copy cut short keeps a valid header, so the header alone
    would not show it.
    """
    f: IO[bytes] = io.BytesIO(data) if isinstance(data, bytes | bytearray | memoryview) else data
    head = f.read(len(_NPY_MAGIC))
    f.seek(0)
    if head == _NPY_MAGIC:
        try:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, _ = read_header(f)
        except ValueError as exc:
            raise ValueError(f"not a valid .npy image: {exc}") from None
        if len(shape) < 2:
            raise ValueError(f".npy image has shape {shape}, expected (height, width[, channels])")
        return "raw", int(shape[1]), int(shape[0])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = open_image(f)
            codec = _PIL_CODECS.get(im.format or "", (im.format or "unknown").lower())
            width, height = im.size
    except Exception as exc:  # PIL raises many types for bad headers; all mean "not an image"
        raise ValueError(UNIDENTIFIED if str(exc) == UNIDENTIFIED else
                         f"not a readable image ({type(exc).__name__}: {exc})") from None
    if width * height > MAX_PIXELS:
        raise ValueError(f"image of {width} x {height} px ({fmt.sig(width * height / 1e6)} MP) "
                         f"is over bench's default limit of {fmt.sig(MAX_PIXELS / 1e6)} MP "
                         "(--max-pixels)")
    f.seek(-12, io.SEEK_END)
    tail = f.read(12)
    if codec == "jpeg" and not tail.endswith(b"\xff\xd9"):
        raise ValueError("JPEG does not end with its end-of-image marker (truncated?)")
    if codec == "png" and tail[4:8] != b"IEND":
        raise ValueError("PNG does not end with its IEND chunk (truncated?)")
    return codec, int(width), int(height)


def pil_raw_header(data: bytes, limit: int = MAX_PIXELS) -> tuple[str, int, int, int]:
    """(mode, width, height, offset of the pixels) of a raw PIL image as MDS's and litdata's
    `pil` encodings store it: uint32 width, height and mode length, the mode, the pixels.
    ValueError when the header or the pixels' length does not hold."""
    if len(data) < 12:
        raise ValueError(f"raw PIL image of {len(data)} bytes: shorter than its header")
    width, height, n = (int(x) for x in np.frombuffer(data, "<u4", 3))
    try:
        mode = bytes(data[12:12 + n]).decode("ascii")
        bands = len(Image.new(mode, (1, 1)).getbands())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"raw PIL image with a bad mode header: {exc}") from None
    bits = 1 if mode == "1" else 16 if mode.startswith("I;16") else 32 if mode in ("I", "F") \
        else 8
    want = -(-width * bits // 8) * height if bands == 1 else width * height * bands
    if len(data) - 12 - n != want:
        raise ValueError(f"raw PIL image of {width} x {height} px ({mode}) holds "
                         f"{len(data) - 12 - n} bytes of pixels, not {want} (truncated?)")
    if width * height > limit:
        raise ValueError(f"image of {width} x {height} px ({fmt.sig(width * height / 1e6)} MP) "
                         f"is over the limit of {fmt.sig(limit / 1e6)} MP (--max-pixels)")
    return mode, width, height, 12 + n


def add_image(survey: dict[str, Any], codec: str, width: int, height: int) -> None:
    image = survey["image"]
    image["count_checked"] += 1
    image.setdefault("codecs", Counter())[codec] += 1
    image["width"].append(width)
    image["height"].append(height)


def add_tokens(survey: dict[str, Any], dtype: str, length: int) -> None:
    """A checked token sample: its ids' dtype and how many."""
    tokens = survey.setdefault("tokens", {"count_checked": 0, "dtypes": Counter(),
                                          "lengths": []})
    tokens["count_checked"] += 1
    tokens["dtypes"][dtype] += 1
    tokens["lengths"].append(length)


def add_text(survey: dict[str, Any], chars: int) -> None:
    """A checked text sample: its length in characters."""
    text = survey.setdefault("text", {"count_checked": 0, "chars": []})
    text["count_checked"] += 1
    text["chars"].append(chars)


def add_audio(survey: dict[str, Any], codec: str, frames: int, rate: int,
              channels: int) -> None:
    """A checked audio sample, from its header: codec, length, rate and channels."""
    found = survey.setdefault("audio", {"count_checked": 0, "codecs": Counter(),
                                        "rates": Counter(), "channels": Counter(),
                                        "seconds": []})
    found["count_checked"] += 1
    found["codecs"][codec] += 1
    found["rates"][rate] += 1
    found["channels"][channels] += 1
    found["seconds"].append(frames / rate)


def add_payload(survey: dict[str, Any], codec: str, payload: Any) -> None:
    """A checked sample's payload, by its codec (a RawSample's, or a sample kind): its image's
    codec and size from the header, its audio's length and rate from its header, its token
    ids' dtype and length, or its text's length; ValueError where it is none of them."""
    if codec in AUDIO_CODECS or codec == AUDIO:
        add_audio(survey, *audio.info(payload))
    elif codec == TOKENS:
        ids = token_ids(payload)
        add_tokens(survey, str(ids.dtype), len(ids))
    elif codec == TEXT:
        add_text(survey, len(text_of(payload)))
    elif codec == "pil":
        _, width, height, _ = pil_raw_header(payload)
        add_image(survey, "pil", width, height)
    else:
        add_image(survey, *probe_image(payload))


def add_stored(survey: dict[str, Any], codec: str, f: IO[bytes]) -> None:
    """A checked member's payload, from its file: an audio clip's header (libsndfile reads it
    from the whole clip), token ids (an .npy member) or text whole, an image's header alone."""
    if codec in AUDIO_CODECS or codec == TEXT:
        add_payload(survey, codec, f.read())
    elif codec == TOKENS:
        add_payload(survey, codec, npy_array(f.read()))
    else:
        add_image(survey, *probe_image(f))


def finish_image(survey: dict[str, Any]) -> None:
    """Name the image codec from the checked images: the common one, or 'mixed: a, b'."""
    image = survey["image"]
    codecs: Counter[str] = image.pop("codecs", Counter())
    if codecs:
        image["codec"] = _named(codecs)


def summarize(survey: dict[str, Any], path: str | Loc = "", ignored: Sequence[str] = (),
              export: object = None) -> dict[str, Any]:
    """The inspect summary: per-sample figures, field types, what the samples carry (image
    sizes, token counts), bad samples, and the files under the export that its layout does
    not read."""
    samples = int(survey["samples"])
    fields = {}
    for name, info in sorted(survey["fields"].items()):
        missing = list(info.get("missing_in", []))
        fields[name] = {"type": info["type"], "missing_in": missing[:LIST_LIMIT],
                        "missing_in_count": len(missing)}
    image = survey["image"]
    tokens, text, found_audio = survey.get("tokens"), survey.get("text"), survey.get("audio")
    widths, heights = image.get("width", []), image.get("height", [])
    sizes = Counter(f"{w}x{h}" for w, h in zip(widths, heights, strict=True))
    problems = survey["problems"]
    by_file = Counter(p["file"] for p in problems)
    return {
        "path": str(path),
        "layout": survey["layout"],
        "samples": samples,
        "units": int(survey["units"]),
        "unit_name": UNIT_NAMES.get(survey["layout"], "units"),
        "containers": survey.get("containers"),
        "blocks": survey.get("blocks"),
        "files": int(survey["files"]),
        "bytes": int(survey["bytes"]),
        "bytes_per_sample": stats.distribution(survey["sample_bytes"]),
        "files_per_sample": float(survey["files_per_sample"]),
        "members_per_sample": survey.get("members_per_sample"),
        "fields": fields,
        "image": {
            "codec": image.get("codec", ""),
            "count_checked": int(image.get("count_checked", 0)),
            "width": _range(widths),
            "height": _range(heights),
            "common_sizes": [{"size": s, "count": c} for s, c in sizes.most_common(5)],
        },
        "sample": {"kind": getattr(export, "kind", None) or (
                       AUDIO if found_audio and not image.get("count_checked") else "image"),
                   "field": getattr(export, "payload_field", None)},
        "audio": None if not found_audio else {
            "codec": _named(found_audio["codecs"]),
            "count_checked": int(found_audio["count_checked"]),
            # One rate (the one a clip is cut at), or the most common where they differ.
            "sample_rate": int(found_audio["rates"].most_common(1)[0][0]),
            "sample_rates": sorted(int(r) for r in found_audio["rates"]),
            "channels": sorted(int(c) for c in found_audio["channels"]),
            "seconds_per_sample": _range(found_audio["seconds"], float),
            "mean_seconds_per_sample": float(np.mean(found_audio["seconds"])),
        },
        "tokens": None if not tokens else {
            "dtype": ", ".join(d for d, _ in tokens["dtypes"].most_common()),
            "count_checked": int(tokens["count_checked"]),
            "per_sample": _range(tokens["lengths"]),
            "mean_per_sample": float(np.mean(tokens["lengths"])),
            "stream": survey.get("stream"),
        },
        "text": None if not text else {
            "count_checked": int(text["count_checked"]),
            "chars_per_sample": _range(text["chars"]),
            "mean_chars_per_sample": float(np.mean(text["chars"])),
        },
        "bad_samples": int(survey["bad_samples"]),
        "problems_count": len(problems),
        "problems_by_file": dict(by_file.most_common(LIST_LIMIT)),
        "problems": problems[:LIST_LIMIT],
        "ignored_files": {"count": len(ignored), "examples": list(ignored[:LIST_LIMIT])},
        **({"dataset": survey["dataset"]} if survey.get("dataset") else {}),
    }


def audio_rate(export: Any, path: str | Loc) -> int | None:
    """The rate an audio export's clips are cut at: its survey's common one (what bench finds
    and cuts at), for commands that do not run bench's survey (job, resume)."""
    found = summarize(export.survey(), path, export.ignored, export).get("audio") or {}
    return found.get("sample_rate")


def _named(counts: Counter[str]) -> str:
    """The common codec, or 'mixed: a, b' where the checked samples differ."""
    if len(counts) == 1:
        return next(iter(counts))
    return "mixed: " + ", ".join(c for c, _ in counts.most_common())


def _range(values: Sequence[float], end: Callable[[float], float] = int) -> dict[str, float]:
    """min, p50 and max; the ends as `end` makes them (counts: int; seconds: float)."""
    if not values:
        return {"min": 0, "p50": 0.0, "max": 0}
    return {"min": end(min(values)), "p50": stats.percentile(values, 50),
            "max": end(max(values))}
