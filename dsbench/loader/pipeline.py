"""The loader's per-sample work, as a training job does it: decode, fields, transform, collate.

Stages (their CPU time is what `dsbench bench` reports per sample):

* ``read``: the reader's ``next()``; the adapter's own work (opening, seeking, untarring).
* ``decode``: the image to pixels (decode.py: Pillow or simplejpeg, a pixel limit checked from
  the header first); token ids viewed as a 1-d integer array; text encoded to its ids by the
  run's tokenizer (tokenize.py).
* ``fields``: every non-image field parsed by its stored encoding (``base.ENC_*``). Numeric
  lists become numpy arrays, as a job must before it can stack them; a JSON document holding an
  object is spread into one field per key.
* ``transform``: an ImageNet-style training transform on uint8 pixels: random-resized-crop to
  224 x 224 (scale (0.08, 1), ratio (3/4, 4/3), torchvision's sampling rule) and a horizontal
  flip with p = 0.5, from a seeded numpy Generator; optionally normalised to float32. Token ids
  are cropped to the sequence length at a random offset (or padded), as int64 (transforms.py),
  or with --pack widened to int64 whole (packing.py).
* ``collate``: B transformed images copied into one contiguous (B, 224, 224, 3) array (HWC, the
  layout of the decoded pixels), or B sequences into (B, seq_len) (with --pack, cut from the
  documents laid end to end), and the parsed fields stacked where they are arrays or numbers.

CPU time is taken with `time.process_time` (the OS's per-process CPU clock) so that threads an
adapter starts (pyarrow's) are charged to the stage that caused them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.adapters.audio import Clip
from dsbench.adapters.base import RawSample
from dsbench.errors import DsbenchError, SampleError
from dsbench.loader.decode import _BAD_DATA, DEFAULT_MAX_PIXELS
from dsbench.loader.decode import DECODERS as DECODERS  # the stage's names, re-exported
from dsbench.loader.decode import make_decoder as make_decoder
from dsbench.loader.packing import Packer, TokenPack
from dsbench.loader.transforms import IMAGENET_MEAN as IMAGENET_MEAN  # re-exported
from dsbench.loader.transforms import IMAGENET_STD as IMAGENET_STD
from dsbench.loader.transforms import AudioCrop as AudioCrop
from dsbench.loader.transforms import BadSample, TrainTransform, Transform
from dsbench.loader.transforms import TokenCrop as TokenCrop
from dsbench.loader.transforms import resized_crop_params as resized_crop_params
from dsbench.loader.user import UserStep, collate
from dsbench.results.stages import STAGES


def _numeric(value: Any) -> Any:
    """A list of numbers as a numpy array (float32 for floats, as models take them)."""
    if isinstance(value, list) and value and type(value[0]) in (int, float):
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            return arr.astype(np.float32)
        if arr.dtype.kind in "iu":
            return arr
    return value


def _plain(value: Any) -> Any:
    """A tensor (a native reader's field) as NumPy, a 0-d one as its number."""
    if type(value).__module__.startswith("torch"):
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def _parse(encoding: str | None, value: Any) -> Any:
    if encoding == base.ENC_VALUE:
        return _numeric(_plain(value))
    # Unknown member extensions come back as opaque bytes, passed on as stored.
    return base.decode_stored(encoding, value)


def field_kind(value: Any) -> str | None:
    """What a parsed field holds, broadly; None for a value left out (null, an empty list)."""
    if value is None or (isinstance(value, list) and not value):
        return None
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | float | np.number):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, np.ndarray):
        return "numeric array"
    if isinstance(value, bytes | bytearray | memoryview):
        return "bytes"
    return type(value).__name__  # list (of records), dict


# A key of `kinds` no field has: set once a whole sample was parsed, fixing the set of fields.
_STARTED = "\0"


def field_signature(value: Any) -> str | None:
    """What must not change between samples of one field: its kind and, for an array of floats
    (an embedding), its length. Integer arrays (token ids, multi-labels) may vary in length."""
    kind = field_kind(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return f"float array of {value.size} values"
    return kind


def parse_fields(raw: RawSample, kinds: dict[str, str] | None = None) -> dict[str, Any]:
    """Every non-image field of `raw`, parsed by its encoding.

    With `kinds` (a reader's memory of earlier samples), a field that changes between samples
    is a bad sample: a different kind or embedding length, a field missing (or null) where
    earlier samples had it, or one they lacked. The loader would otherwise collate them
    silently as a list, and a type or shape that changes between samples is what a re-export
    bug looks like. A JSON number that is not finite (1e999, NaN) is bad data too.
    """
    out: dict[str, Any] = {}
    for name, value in raw.fields.items():
        encoding = raw.encodings.get(name)
        try:
            parsed = _parse(encoding, value)
        except _BAD_DATA as exc:
            raise SampleError(f"cannot parse field {name!r} ({encoding}): {exc}",
                              path=raw.source_of(name), key=raw.key) from None
        except RecursionError:
            raise SampleError(f"cannot parse field {name!r} ({encoding}): nested too deep",
                              path=raw.source_of(name), key=raw.key) from None
        if encoding == base.ENC_JSON and isinstance(parsed, dict):
            # One JSON document holding all fields (`<key>.json`): one field per key.
            items = [(k if k not in out else f"{name}.{k}", _numeric(v))
                     for k, v in parsed.items()]
        else:
            items = [(name, _numeric(parsed) if encoding == base.ENC_JSON else parsed)]
        for field_name, parsed_value in items:
            out[field_name] = parsed_value
            if encoding == base.ENC_JSON and isinstance(parsed_value, float) and not \
                    math.isfinite(parsed_value):
                raise SampleError(f"field {field_name!r} is {parsed_value}, not a finite number",
                                  path=raw.source_of(name), key=raw.key)
            if kinds is not None:
                _check_kind(raw, kinds, field_name, parsed_value, raw.source_of(name))
    if kinds is not None:
        missing = [n for n in kinds if n not in out and n != _STARTED]
        if missing and _STARTED in kinds:
            # The file that should have held it: the sample's JSON document, if it has one.
            where = next((raw.source_of(n) for n in raw.fields
                          if raw.encodings.get(n) == base.ENC_JSON), raw.source)
            raise SampleError(f"field {missing[0]!r} is missing here but present in earlier "
                              "samples", path=where, key=raw.key)
        kinds[_STARTED] = ""
    return out


def _check_kind(raw: RawSample, kinds: dict[str, str], name: str, value: Any, source: str
                ) -> None:
    # kinds[name] is "" while the field has held only empty lists, whose kind is unknown.
    kind = field_signature(value)
    if name not in kinds and _STARTED in kinds:
        raise SampleError(f"field {name!r} is here but not in earlier samples", path=source,
                          key=raw.key)
    if value is None and kinds.get(name):
        raise SampleError(f"field {name!r} is null here but a {kinds[name]} in earlier samples",
                          path=source, key=raw.key)
    seen = kinds.setdefault(name, kind or "")
    if kind is not None and not seen:
        kinds[name] = kind
    elif kind is not None and kind != seen:
        raise SampleError(f"field {name!r} is a {kind} here but a {seen} in earlier samples",
                          path=source, key=raw.key)


def collate_fields(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Stack each field across a batch: same-shape arrays and plain numbers become one array."""
    names: dict[str, None] = {}
    for item in items:
        names.update(dict.fromkeys(item))
    out: dict[str, Any] = {}
    for name in names:
        values = [item.get(name) for item in items]
        first = values[0]
        if isinstance(first, np.ndarray) and all(
                isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype
                for v in values):
            out[name] = np.stack([v for v in values if v is not None])
        elif all(type(v) is int for v in values):
            out[name] = np.asarray(values, dtype=np.int64)
        elif all(type(v) is float for v in values):
            out[name] = np.asarray(values, dtype=np.float64)
        else:
            out[name] = values
    return out


@dataclass(frozen=True)
class Pipeline:
    """What every loader worker does to each sample; plain data, so it travels to workers."""

    decoder: str = "pillow"
    transform: Transform = field(default_factory=TrainTransform)
    on_error: str = "raise"
    max_pixels: int = DEFAULT_MAX_PIXELS
    user: UserStep | None = None  # --pipeline: the user's step replaces decode to transform
    tokenizer: str | None = None  # text samples: the tokenizer's JSON (tokenize.py)

    def __post_init__(self) -> None:
        if self.on_error not in base.ON_ERROR:
            raise DsbenchError(f"unknown error policy {self.on_error!r} "
                               f"(known: {', '.join(base.ON_ERROR)})")
        if isinstance(self.max_pixels, bool) or not isinstance(self.max_pixels, int) \
                or self.max_pixels < 1:
            raise DsbenchError(f"--max-pixels must be a positive integer, got "
                               f"{self.max_pixels!r}")
        make_decoder(self.decoder, self.max_pixels)  # fail here, not in every worker


@dataclass
class StageTimes:
    """CPU seconds per stage, accumulated over the samples of one batch."""

    seconds: list[float] = field(default_factory=lambda: [0.0] * len(STAGES))

    def as_dict(self) -> dict[str, float]:
        return dict(zip(STAGES, self.seconds, strict=True))


def transformed(transform: Transform, decoded: Any, rng: np.random.Generator,
                raw: RawSample) -> np.ndarray:
    """`transform` of one decoded sample; SampleError naming its file and key where the
    transform cannot take it: an audio clip among images or token ids (a clip's bytes where an
    image was expected), pixels where clips were, a clip at another rate."""
    if isinstance(transform, TrainTransform | TokenCrop | AudioCrop) and \
            isinstance(decoded, Clip) != isinstance(transform, AudioCrop):
        got = f"{raw.codec} audio" if isinstance(decoded, Clip) else f"a {raw.codec} sample"
        want = "audio" if isinstance(transform, AudioCrop) else \
            "token ids" if isinstance(transform, TokenCrop) else "images"
        raise SampleError(f"{got} where the export's samples are {want}", path=raw.source,
                          key=raw.key)
    try:
        return transform(decoded, rng)
    except BadSample as exc:
        raise SampleError(str(exc), path=raw.source, key=raw.key) from None


class BatchBuilder:
    """Builds whole batches from an endless sample stream, timing every stage on the CPU clock.

    `read(skip)` opens that stream, passing the reader a skip handler under `on_error="skip"`.
    Bad samples either raise (`on_error="raise"`) or are recorded in `skipped` and replaced by
    the next sample, so that every batch holds `batch_size` samples.
    """

    def __init__(self, pipeline: Pipeline,
                 read: Callable[[base.SkipHandler], Iterator[RawSample]],
                 rng: np.random.Generator) -> None:
        self.decode = make_decoder(pipeline.decoder, pipeline.max_pixels, pipeline.tokenizer)
        self.transform = pipeline.transform
        self.user = pipeline.user
        self.skip = pipeline.on_error == "skip"
        self.rng = rng
        self.skipped: list[SampleError] = []
        self.kinds: dict[str, str] = {}  # each field's kind, from the first sample holding it
        self.samples = read(self.skipped.append if self.skip else None)
        # --pack: the ids read and not yet in a sequence, carried from batch to batch.
        self.packer = Packer(self.transform.seq_len) \
            if isinstance(self.transform, TokenPack) else None

    def _bad(self, err: SampleError) -> None:
        if not self.skip:
            raise err
        self.skipped.append(err)

    def next_sample(self, t: list[float]) -> tuple[str, np.ndarray, dict[str, Any]]:
        """The next good sample, transformed: (key, pixels, fields); stage times added to `t`."""
        clock = time.process_time
        while True:
            t0 = clock()
            raw = next(self.samples)
            t1 = clock()
            t[0] += t1 - t0
            if self.user is not None:
                # The user's step is the whole per-sample work; it is the transform stage.
                try:
                    out = self.user.run(raw)
                except SampleError as err:
                    t[3] += clock() - t1
                    self._bad(err)
                    continue
                t[3] += clock() - t1
                return raw.key, out, {}
            try:
                pixels = self.decode(raw)
            except SampleError as err:
                t[1] += clock() - t1
                self._bad(err)
                continue
            t2 = clock()
            t[1] += t2 - t1
            try:
                parsed = parse_fields(raw, self.kinds)
            except SampleError as err:
                t[2] += clock() - t2
                self._bad(err)
                continue
            t3 = clock()
            t[2] += t3 - t2
            try:
                out = transformed(self.transform, pixels, self.rng, raw)
            except SampleError as err:
                t[3] += clock() - t3
                self._bad(err)
                continue
            t[3] += clock() - t3
            return raw.key, out, parsed

    def build(self, images: np.ndarray, times: StageTimes) -> tuple[list[str], dict[str, Any]]:
        """Fill `images` (B rows) with transformed samples; return their keys and fields."""
        clock = time.process_time
        t = times.seconds
        keys: list[str] = []
        fields: list[dict[str, Any]] = []
        outputs: list[Any] = []
        if self.packer is not None:
            return self._packed(self.packer, images, t)
        for row in range(len(images)):
            key, out, parsed = self.next_sample(t)
            t4 = clock()
            if self.user is None:
                images[row] = out
            else:
                outputs.append(out)
            keys.append(key)
            fields.append(parsed)
            t[4] += clock() - t4
        t5 = clock()
        collated = collate_fields(fields) if self.user is None else {"batch": collate(outputs)}
        t[4] += clock() - t5
        return keys, collated

    def next_row(self, packer: Packer, row: np.ndarray, t: list[float]
                 ) -> tuple[list[str], list[dict[str, Any]]]:
        """--pack: fill one sequence `row` with the ids held and those of the documents read
        until it is full (packing.py); their keys and fields (none where the ids held filled
        it). Holding and cutting the ids is collate's time."""
        clock = time.process_time
        keys: list[str] = []
        fields: list[dict[str, Any]] = []
        while not packer.full:
            key, ids, parsed = self.next_sample(t)
            keys.append(key)
            fields.append(parsed)
            t4 = clock()
            packer.add(ids)
            t[4] += clock() - t4
        t4 = clock()
        packer.cut(row)
        t[4] += clock() - t4
        return keys, fields

    def _packed(self, packer: Packer, rows: np.ndarray, t: list[float]
                ) -> tuple[list[str], dict[str, Any]]:
        """--pack: every row of the batch a sequence (next_row); the keys and fields are those
        of the documents read for this batch, however many."""
        keys: list[str] = []
        fields: list[dict[str, Any]] = []
        for row in rows:
            got, parsed = self.next_row(packer, row, t)
            keys += got
            fields += parsed
        t5 = time.process_time()
        collated = collate_fields(fields)
        t[4] += time.process_time() - t5
        return keys, collated
