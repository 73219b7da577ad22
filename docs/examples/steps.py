"""A team's per-sample step, for `dsbench bench --pipeline docs/examples/steps.py:train_step`.

It is what a torchvision training script does to each sample: decode the stored JPEG with
Pillow, random-resized-crop to 224 x 224 and flip with torchvision's transforms, make a float
tensor normalised with ImageNet's mean and deviation, and keep the label. It receives the
sample as the export stores it: `image` holds the JPEG's bytes, and the label is a `label`
column or a WebDataset `.cls` member (ASCII digits).
"""

from __future__ import annotations

import io
from typing import Any

import torch
from PIL import Image
from torchvision.transforms import v2

TRANSFORM = v2.Compose([
    v2.PILToTensor(),
    v2.RandomResizedCrop(224, antialias=True),
    v2.RandomHorizontalFlip(),
    v2.ToDtype(torch.float32, scale=True),
    v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])


def train_step(sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
    image = Image.open(io.BytesIO(sample["image"])).convert("RGB")
    label = sample["label"] if "label" in sample else sample["cls"]
    return TRANSFORM(image), int(label)
