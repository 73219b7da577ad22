"""Text samples' tokenizer: Hugging Face `tokenizers`, as a language-model loader that reads raw
text tokenizes it in its workers.

A run on text takes the job's own tokenizer (`--tokenizer FILE`: a tokenizers JSON, as
`Tokenizer.save` writes it and a Hub model ships its tokenizer.json), or trains a byte-level BPE
of VOCAB ids on the export's first TRAIN_SAMPLES texts in the main process before the rounds,
so that nothing is downloaded; the sides of one run (a comparison) share the first side's, so
that both exports are tokenized alike. The tokenizer travels to the workers as its JSON text
inside the pipeline (no file to clean up); each worker builds it once as it starts, outside the
measured window, and the decode stage encodes each sample's text to its ids, one text at a time
(single threaded, as a loader worker that owns one core).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters.base import TEXT, text_of
from dsbench.errors import DsbenchError

VOCAB = 8192
TRAIN_SAMPLES = 1000


@dataclass(frozen=True)
class TokenizerSpec:
    """The tokenizer a run encodes with: its JSON, and what the result says of it."""

    json: str
    source: str  # the file given, or how it was trained
    vocab_size: int

    def describe(self) -> dict[str, object]:
        return {"source": self.source, "vocab_size": self.vocab_size}


def _library() -> object:
    # One thread: a loader worker's encode is counted and timed as its own core's work.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import tokenizers
    except ImportError:
        raise DsbenchError("text samples are tokenized with Hugging Face tokenizers, which "
                           "does not import: pip install 'dsbench[text]'") from None
    return tokenizers


def from_file(path: str) -> TokenizerSpec:
    """The job's own tokenizer (--tokenizer FILE); one line where it is not one."""
    tokenizers = _library()
    try:
        text = Path(path).read_text(encoding="utf-8")
        tok = tokenizers.Tokenizer.from_str(text)  # type: ignore[attr-defined]
    except Exception as exc:  # a file that is not there, or the library's own parse error
        raise DsbenchError(f"--tokenizer: not a tokenizers JSON file ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''})",
                           path=path) from None
    return TokenizerSpec(text, f"--tokenizer {path}", int(tok.get_vocab_size()))


def trained(texts: Iterable[str], vocab: int = VOCAB, where: str = "the export") -> TokenizerSpec:
    """A byte-level BPE trained on `texts` (the first samples of the export `where`)."""
    tokenizers = _library()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    taken = list(texts)
    tok = tokenizers.Tokenizer(models.BPE())  # type: ignore[attr-defined]
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(taken, trainer=trainer)
    return TokenizerSpec(tok.to_str(), f"a byte-level BPE trained on the first {len(taken)} "
                         f"texts of {where}", int(tok.get_vocab_size()))


def encoder(spec_json: str) -> Callable[[str], np.ndarray]:
    """Text -> its ids (uint32), with the tokenizer built once."""
    tokenizers = _library()
    tok = tokenizers.Tokenizer.from_str(spec_json)  # type: ignore[attr-defined]

    def encode(text: str) -> np.ndarray:
        return np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    return encode


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
    --tokenizer's file, else one trained on the export's first texts (opened as the workers
    open it: `open_export(path, opener)`); a --tokenizer given for another kind is refused."""
    if opts.found_kind != TEXT:
        if opts.tokenizer is not None:
            raise DsbenchError(f"--tokenizer tokenizes text samples, and this export's samples "
                               f"carry {opts.found_kind}", path=path)
        return opts
    if opts.tokenizer is not None:
        return dataclasses.replace(opts, tokenizer_spec=from_file(opts.tokenizer))
    first = itertools.islice(open_export(str(path), opts.export_opener()).read(), TRAIN_SAMPLES)
    return dataclasses.replace(opts, tokenizer_spec=trained(
        (text_of(r.image) for r in first), where=str(path)))
