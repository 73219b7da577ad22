"""A user's own code in the loader: their per-sample step (`bench --pipeline MODULE:CALLABLE`)
and their whole Dataset (`bench --dataset MODULE:FACTORY`).

`MODULE` is a module importable from the current directory or the Python path (`mypkg.data`),
or a file (`./train/data.py`, imported by its name with its directory on the path, as a script's
modules are); `CALLABLE` a name in it. The current directory is put on the path first, as
`python -m` does, so that loader workers import the same module.

The per-sample step receives the stored sample as the export holds it: a dict with `__key__`,
`image` (the encoded image's bytes), `codec` (jpeg, png, ...) and every other field as the
reader yields it (bytes or text where the export stores bytes or text, numbers and arrays where
it stores those), and returns what the job would collate: an array or tensor, a number, or a
dict, tuple or list of them. A batch is collated as torch's default_collate does it (arrays of
one shape stacked, numbers made an array, containers collated field by field), in NumPy.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters.base import RawSample
from dsbench.errors import DsbenchError, SampleError

_loaded: dict[str, Callable[..., Any]] = {}


def load(spec: str, option: str) -> Callable[..., Any]:
    """The callable `MODULE:NAME` names; a one-line DsbenchError when it cannot be had."""
    if spec in _loaded:
        return _loaded[spec]
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise DsbenchError(f"{option} {spec}: expected MODULE:CALLABLE, such as "
                           "mypkg.data:transform or ./data.py:transform")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does; spawned workers inherit it
    try:
        if module_name.endswith(".py") or "/" in module_name:
            # A file is imported as a script's modules are: its directory on the path, its
            # name its stem, so that the workers (and pickle) find it, and what it imports
            # from beside it, by the same name.
            path = Path(module_name).resolve()
            if not path.is_file():
                raise DsbenchError(f"{option} {spec}: no such file {path}")
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            module = importlib.import_module(path.stem)
        else:
            module = importlib.import_module(module_name)
    except DsbenchError:
        raise
    except Exception as exc:  # the user's module failing to import, whatever it raised
        raise DsbenchError(f"{option} {spec}: importing {module_name} failed: "
                           f"{type(exc).__name__}: {_first_line(exc)}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise DsbenchError(f"{option} {spec}: {module_name} has no callable {name!r}")
    _loaded[spec] = fn
    return fn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


def stored_sample(raw: RawSample) -> dict[str, Any]:
    """What a --pipeline step receives: the sample as the export stores it."""
    return {"__key__": raw.key, "image": raw.image, "codec": raw.codec, **raw.fields}


@dataclass(frozen=True)
class UserStep:
    """`bench --pipeline`: the user's per-sample step, in place of decode, fields and the
    transform. Plain data (the spec), so it travels to spawned workers; loaded there."""

    spec: str
    # Bytes of one sample's output (probed on the export's first sample): the ring's slots
    # are sized for a batch of them, so that batches travel in shared memory, not the pipe.
    sample_bytes: int = 0
    out_shape: tuple[int, ...] = (0,)  # nothing in the image slot: the output is collated apart
    out_dtype: str = "uint8"

    def __call__(self, pixels: Any, rng: np.random.Generator) -> np.ndarray:
        raise TypeError("a --pipeline step runs on the stored sample, not on pixels")

    def run(self, raw: RawSample) -> Any:
        if self.spec not in _loaded:
            fn = load(self.spec, "--pipeline")
            torch = sys.modules.get("torch")
            if torch is not None:
                # As torch's DataLoader does in each of its workers: one intra-op thread,
                # since the workers are the parallelism.
                torch.set_num_threads(1)
        fn = _loaded[self.spec]
        try:
            return fn(stored_sample(raw))
        except Exception as exc:  # the user's code, whatever it raised: one line, named
            raise SampleError(f"--pipeline {self.spec} raised {type(exc).__name__}: "
                              f"{_first_line(exc)}", path=raw.source, key=raw.key) from None


def _plain(value: Any) -> Any:
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy() if hasattr(value, "detach") else value
    return value


def collate(items: Sequence[Any]) -> Any:
    """A batch of a step's outputs, as torch's default_collate makes one, in NumPy."""
    first = _plain(items[0])
    if isinstance(first, np.ndarray):
        arrays = [np.asarray(_plain(x)) for x in items]
        if all(a.shape == first.shape and a.dtype == first.dtype for a in arrays):
            return np.stack(arrays)
        return arrays
    if isinstance(first, bool | int | float | np.number):
        return np.asarray(items)
    if isinstance(first, Mapping):
        return {k: collate([x[k] for x in items]) for k in first}
    if isinstance(first, tuple | list) and all(len(x) == len(first) for x in items):
        return type(first)(collate(list(column)) for column in zip(*items, strict=True))
    return list(items)


def nbytes(value: Any) -> int:
    """Bytes of a step's output (its arrays), for sizing the batch's shared memory."""
    value = _plain(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, tuple | list):
        return sum(nbytes(v) for v in value)
    return 16
