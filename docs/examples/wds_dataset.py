"""A team's whole loader, for `dsbench bench --dataset docs/examples/wds_dataset.py:make`.

A webdataset pipeline as a training script builds it: the shards split over the DataLoader's
workers, images decoded to PIL by webdataset, the label from `.cls`, and the torchvision
transform of steps.py. `make()` reads the shards under $SHARDS (default /tmp/dsbench/before,
where docs/pipeline.md's first command writes them).
"""

from __future__ import annotations

import glob
import os
from typing import Any

import webdataset as wds
from steps import TRANSFORM  # docs/examples/steps.py, beside this file


def make() -> Any:
    root = os.environ.get("SHARDS", "/tmp/dsbench/before")
    shards = sorted(glob.glob(f"{root}/*.tar"))
    return (wds.WebDataset(shards, shardshuffle=False, nodesplitter=None,
                           workersplitter=wds.split_by_worker, empty_check=False)
            .decode("pil").to_tuple("jpg", "cls").map_tuple(TRANSFORM, int))
