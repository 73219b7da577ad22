"""What a worker does to each sample it delivers, the same for both backends: decode the image,
parse the fields, apply the training transform, and keep the key, the label and the unit.

The pixels are built as a job builds them (so the timings carry the real per-sample cost) but
only the key, label and unit leave the worker: the order is what `dsbench resume` measures.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.adapters.base import RawSample
from dsbench.loader.pipeline import Pipeline, make_decoder, parse_fields


@dataclass(frozen=True)
class Item:
    key: str
    label: int | None  # None when the sample has no integer field of that name
    unit: str


# The label field when none is named: the first of these names the samples have (WebDataset's
# `.cls` member is `cls`; dsbench's definitions call it `label`).
LABEL_NAMES = ("label", "cls", "class", "target")


def _label(fields: dict[str, Any], name: str | None) -> int | None:
    names = (name,) if name else LABEL_NAMES
    for n in names:
        value = fields.get(n)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
    return None


class SampleWork:
    def __init__(self, pipeline: Pipeline, label: str | None, rng: np.random.Generator
                 ) -> None:
        self.decode = make_decoder(pipeline.decoder, pipeline.max_pixels, pipeline.tokenizer)
        self.transform = pipeline.transform
        self.label, self.rng = label, rng

    def __call__(self, raw: RawSample, unit: str) -> tuple[Item, np.ndarray]:
        pixels = self.transform(self.decode(raw), self.rng)
        return Item(raw.key, _label(parse_fields(raw), self.label), unit), pixels


def collate(pixels: list[np.ndarray]) -> np.ndarray:
    """The batch's images in one contiguous array, as a job's collate makes them."""
    return np.stack(pixels)
