"""An elastic restart: what an epoch still owes after a checkpoint, dealt to a different number
of ranks or workers (as after a lost node).

Each worker's saved stream state (loader.order.SampleStream.state) says exactly what it has not
delivered: the samples in its shuffle buffer (unit, offset), the rest of the unit it was reading
(from its offset), and the units after it. Taken over every rank and worker of the job, that is
the epoch's remainder, whatever the prefetch depth. `remainder` lists it as pieces; `deal`
permutes them with the epoch's seed and deals them rank first, as Plan.slot deals units, to the
new ranks x workers; `PieceStream` reads one worker's pieces through a fresh shuffle buffer. The
restarted epoch then delivers each remaining sample once: none replayed, none skipped, on any
number of ranks and workers. A piece is (unit, first, offsets): the unit's samples from offset
`first` on, or, when `offsets` is given, those samples alone (a shuffle buffer's).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dsbench.adapters.base import Export, RawSample
from dsbench.loader.order import Plan, SampleStream, fresh_state

Piece = tuple[str, int, list[int] | None]


def remainder(plan: Plan, epoch: int,
              states: Sequence[Sequence[dict[str, Any] | None]]) -> list[Piece]:
    """The samples no worker of the job delivered, from `states[rank][worker]` (each
    worker's stream state at the checkpoint), as pieces in rank, worker, reading order."""
    pieces: list[Piece] = []
    for rank, workers in enumerate(states):
        for worker, saved in enumerate(workers):
            units = plan.slot(epoch, rank, worker)
            # A worker the job took no batch from yet owes its whole share.
            st = saved if saved is not None else fresh_state(plan, epoch, rank, worker)
            if st["done"]:
                continue
            held: dict[int, list[int]] = {}
            for pos, off in st["buffer"]:
                held.setdefault(pos, []).append(off)
            pieces += [(units[pos], 0, sorted(offs)) for pos, offs in sorted(held.items())]
            pos, offset = st["pos"], st["offset"]
            if pos < len(units):
                pieces.append((units[pos], offset, None))
                pieces += [(u, 0, None) for u in units[pos + 1:]]
    return pieces


def deal(pieces: Sequence[Piece], seed: int, epoch: int, ranks: int, workers: int
         ) -> list[list[list[Piece]]]:
    """`pieces` permuted by (seed, epoch) and dealt: new rank r, worker w gets
    permuted[r::ranks][w::workers]. `[rank][worker]` lists of pieces."""
    perm = np.random.default_rng([seed, epoch, ranks, workers]).permutation(len(pieces))
    order = [pieces[int(i)] for i in perm]
    return [[order[r::ranks][w::workers] for w in range(workers)] for r in range(ranks)]


class PieceStream:
    """One worker's pieces, read in order through a shuffle buffer of `buffer` samples (none:
    in order), with the same interface as SampleStream's `next`."""

    def __init__(self, export: Export, pieces: Sequence[Piece], buffer: int,
                 rng: np.random.Generator) -> None:
        self.buffer_size, self.rng = buffer, rng
        self.samples = self._read(export, pieces)
        self.buffer: list[tuple[RawSample, str]] = []
        self.done = False
        self.emitted = 0

    @staticmethod
    def _read(export: Export, pieces: Sequence[Piece]) -> Iterator[tuple[RawSample, str]]:
        for unit, first, offsets in pieces:
            wanted = None if offsets is None else set(offsets)
            for off, raw in enumerate(export.read_units([unit])):
                if off >= first and (wanted is None or off in wanted):
                    yield raw, unit

    def next(self) -> tuple[RawSample, str] | None:
        if self.done:
            return None
        while len(self.buffer) < max(self.buffer_size, 1):
            got = next(self.samples, None)
            if got is None:
                break
            self.buffer.append(got)
        if not self.buffer:
            self.done = True
            return None
        if self.buffer_size:
            i = int(self.rng.integers(len(self.buffer)))
            self.buffer[i], self.buffer[-1] = self.buffer[-1], self.buffer[i]
            got = self.buffer.pop()
        else:
            got = self.buffer.pop(0)
        self.emitted += 1
        return got

    def state(self) -> dict[str, Any]:
        # A resharded epoch is restarted once, not checkpointed again.
        return {"done": self.done, "emitted": self.emitted}


def worker_stream(export: Export, plan: Plan, rank: int, worker: int, epoch: int,
                  state: dict[str, Any] | None = None, pieces: Sequence[Any] | None = None
                  ) -> SampleStream | PieceStream:
    """A loader worker's stream: its share of an elastic restart's `pieces` when given, else
    its slot of the epoch from `state` (fresh when None)."""
    if pieces is not None:
        return PieceStream(export, [tuple(p) for p in pieces], plan.buffer,
                           np.random.default_rng([plan.seed, epoch, rank, worker, 2]))
    return SampleStream(export, plan, rank, worker, epoch, state)
