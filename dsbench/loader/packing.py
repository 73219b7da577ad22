"""Sequence packing (`--pack`): token documents laid end to end and cut into training sequences.

A pretraining loader rarely gives each document a sequence of its own: a document shorter than
the sequence would be mostly padding, and one longer would lose everything past its window. It
packs: the documents it reads, in its order, are laid end to end and cut into sequences of
`seq_len` ids, so that every id stored is trained on once per epoch and no sequence holds
padding. A document's ids that do not fit are the start of the next sequence, in the same batch
or the next one.

The per-document work is `TokenPack` (the transform stage): the document's ids widened to int64,
the index type an embedding lookup takes, as `TokenCrop` widens its window. Cutting sequences is
the collate stage's copy into the batch, as a cropped sequence's copy is: `Packer` holds the ids
read but not yet in a sequence. Ids are laid as stored, without a separator: an end-of-document
id is the export's to hold (Megatron's preprocessing appends it with `--append-eod`; litdata's
TokensLoader lays documents end to end the same way).

A sample is still a document (what the export stores, and what files, bytes and instructions
per sample are counted over); a batch holds `batch_size` sequences and as many documents as
filled them, so a run's samples/s are documents/s and its sequences/s are batches x batch_size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.errors import DsbenchError
from dsbench.loader.transforms import TokenCrop

# Documents in a row with no id: past this the stream is taken to hold none (the loader would
# read forever for the sequence it cannot fill).
MAX_EMPTY = 10_000


@dataclass(frozen=True)
class TokenPack(TokenCrop):
    """A document's ids as int64, whole, to be laid end to end with the others into
    sequences of `seq_len` ids (`Packer`): a crop that crops nothing and pads nothing."""

    def __call__(self, tokens: Any, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(tokens, dtype=np.int64)


class Packer:
    """The ids read and not yet cut into a sequence, in reading order."""

    def __init__(self, seq_len: int) -> None:
        self.seq_len = seq_len
        self.clear()

    def clear(self) -> None:
        self.parts: deque[np.ndarray] = deque()
        self.at = 0  # ids of parts[0] already in a sequence
        self.held = 0  # ids held in all
        self.empty = 0  # documents in a row that held no id

    def add(self, ids: np.ndarray) -> None:
        if len(ids):
            self.parts.append(ids)
            self.held += len(ids)
            self.empty = 0
            return
        self.empty += 1
        if self.empty >= MAX_EMPTY:
            raise DsbenchError(f"--pack: {MAX_EMPTY:,} documents in a row hold no token id; "
                               "there is nothing to pack into sequences")

    @property
    def full(self) -> bool:
        """Whether a whole sequence is held."""
        return self.held >= self.seq_len

    def cut(self, row: np.ndarray) -> None:
        """Fill `row` (seq_len ids) with the next ids held; `full` must be true."""
        filled = 0
        while filled < self.seq_len:
            part = self.parts[0]
            n = min(self.seq_len - filled, len(part) - self.at)
            row[filled:filled + n] = part[self.at:self.at + n]
            filled += n
            self.at += n
            if self.at == len(part):
                self.parts.popleft()
                self.at = 0
        self.held -= self.seq_len


def documents_per_sequence(run: Mapping[str, Any]) -> float | None:
    """A packed run's documents per sequence, measured: the documents its rounds read over the
    sequences they delivered (batches x batch size); None where its rounds do not say."""
    rounds = run.get("rounds")
    batch = run.get("batch_size")
    if not isinstance(rounds, list) or not isinstance(batch, int) or batch < 1:
        return None
    documents = sum(r.get("samples") or 0 for r in rounds if isinstance(r, Mapping))
    sequences = sum(r.get("batches") or 0 for r in rounds if isinstance(r, Mapping)) * batch
    return documents / sequences if documents and sequences else None


def packed(doc: Mapping[str, Any]) -> bool:
    """Whether a bench result was measured with --pack."""
    return (doc.get("config") or {}).get("pack") is True


def unlike_samples(base: Mapping[str, Any], cand: Mapping[str, Any]) -> str | None:
    """Why two packed results' samples are not alike (a token stream's block of seq_len ids
    against a document), for compare; None where they are."""
    def stream(doc: Mapping[str, Any]) -> bool:
        return bool((doc["export"].get("tokens") or {}).get("stream"))

    if packed(base) and stream(base) != stream(cand):
        return ("packed, one side's sample is a token stream's block and the other's a "
                "document (dsbench advise --pack weighs the two per sequence)")
    return None
