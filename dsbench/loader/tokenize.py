"""Which tokenizer a run on text samples encodes with (the tokenizer itself:
adapters/tokenizer.py).

A run on text takes the job's own tokenizer (`--tokenizer FILE`), or trains a byte-level BPE on
the export's first texts in the main process before the rounds, so that nothing is downloaded;
the sides of one run (a comparison) share the first side's, so that both exports are tokenized
alike. The tokenizer travels to the workers as its JSON text inside the pipeline (no file to
clean up); each worker builds it once as it starts, outside the measured window, and the decode
stage encodes each sample's text to its ids.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

from dsbench.adapters.base import TEXT
from dsbench.adapters.tokenizer import TRAIN_SAMPLES, from_file, texts_of, trained
from dsbench.errors import DsbenchError


def settled_all(paths: list[Any], sides: list[Any],
                open_export: Callable[[str, Any], Any]) -> list[Any]:
    """Every side of a run settled (`settled`), the text sides without a --tokenizer of their
    own sharing the first one's: a comparison tokenizes both exports alike, as one job would."""
    out: list[Any] = []
    shared = None
    for path, opts in zip(paths, sides, strict=True):
        if opts.found_kind == TEXT and opts.tokenizer is None and shared is not None:
            out.append(dataclasses.replace(opts, tokenizer_spec=shared))
            continue
        out.append(settled(path, opts, open_export))
        if opts.found_kind == TEXT and opts.tokenizer is None:
            shared = out[-1].tokenizer_spec
    return out


def settled(path: Any, opts: Any, open_export: Callable[[str, Any], Any]) -> Any:
    """A bench side (BenchOptions) whose export was found to hold text, with its tokenizer:
    the one it was given (`tokenizer_spec`), else --tokenizer's file, else one trained on the
    export's first texts (opened as the workers open it: `open_export(path, opener)`); a
    --tokenizer given for another kind is refused, a tokenizer_spec dropped."""
    if opts.found_kind != TEXT:
        if opts.tokenizer is not None:
            raise DsbenchError(f"--tokenizer tokenizes text samples, and this export's samples "
                               f"carry {opts.found_kind}", path=path)
        return dataclasses.replace(opts, tokenizer_spec=None)
    if opts.tokenizer_spec is not None:
        return opts  # settled already (advise: one tokenizer for the source and its re-exports)
    if opts.tokenizer is not None:
        return dataclasses.replace(opts, tokenizer_spec=from_file(opts.tokenizer))
    first = itertools.islice(open_export(str(path), opts.export_opener()).read(), TRAIN_SAMPLES)
    return dataclasses.replace(opts, tokenizer_spec=trained(texts_of(first), where=str(path)))
