"""The tokenizer of text samples: Hugging Face `tokenizers`, as a language-model loader that
reads raw text tokenizes it in its workers, and as a re-export that stores the ids
(export.reexport) tokenizes it once.

It is the job's own (`from_file`: a tokenizers JSON, as `Tokenizer.save` writes it and a Hub
model ships its tokenizer.json), or a byte-level BPE of VOCAB ids trained on an export's first
TRAIN_SAMPLES texts (`trained`), so that nothing is downloaded. It travels as its JSON text;
`encoder` builds it once and encodes one text at a time (single threaded, as a loader worker
that owns one core). Where a run takes which one: loader/tokenize.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters.base import RawSample, text_of
from dsbench.errors import DsbenchError, SampleError

VOCAB = 8192
TRAIN_SAMPLES = 1000


@dataclass(frozen=True)
class TokenizerSpec:
    """The tokenizer a run encodes with: its JSON, and what the result says of it."""

    json: str
    source: str  # the file given, or how it was trained
    vocab_size: int  # one past its largest id: what a dtype that stores its ids must hold

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
    return TokenizerSpec(text, f"--tokenizer {path}", _id_range(tok))


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
                         f"texts of {where}", _id_range(tok))


def _id_range(tok: Any) -> int:
    """One past the tokenizer's largest id: its vocabulary's size, unless its ids leave gaps
    (a vocabulary file may number its tokens as it likes)."""
    ids = tok.get_vocab(with_added_tokens=True).values()
    return max(int(tok.get_vocab_size()), max(ids, default=-1) + 1)


def texts_of(raws: Iterable[RawSample]) -> Iterator[str]:
    """Each text sample's text, to train on; one that UTF-8 cannot hold (a lone surrogate, as
    JSON's "\\ud800" reads) is one line naming its file and sample, as the loader says it."""
    for raw in raws:
        text = text_of(raw.image)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SampleError(f"cannot read its text: {exc}", path=raw.source,
                              key=raw.key) from None
        yield text


def encoder(spec_json: str) -> Callable[[str], np.ndarray]:
    """Text -> its ids (uint32), with the tokenizer built once."""
    tokenizers = _library()
    tok = tokenizers.Tokenizer.from_str(spec_json)  # type: ignore[attr-defined]

    def encode(text: str) -> np.ndarray:
        return np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    return encode
