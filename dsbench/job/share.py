"""A rank's share of an export: units[rank::world], which its own loader's workers split again.

`RankShare` is an opener (picklable, as spawned loader workers need it) that opens the export
through the adapters and hands each worker the rank's units only, as a DistributedSampler gives
each rank its own part of the data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dsbench import adapters
from dsbench.adapters.base import Export, RawSample, SkipHandler, worker_share
from dsbench.adapters.tokenizer import TokenizerSpec


@dataclass(frozen=True)
class RankShare:
    """Opens the export as rank `rank` of `world` sees it (a token stream cut into blocks of
    `seq_len`)."""

    rank: int
    world: int
    layout: str | None = None
    seq_len: int | None = None

    def __call__(self, path: str) -> Export:
        return SharedExport(adapters.open_export(path, layout=self.layout,
                                                 seq_len=self.seq_len), self.rank, self.world)


class SharedExport:
    """An export seen through one rank's share of its units."""

    def __init__(self, inner: Export, rank: int, world: int) -> None:
        self.inner = inner
        self.path, self.layout, self.ignored = inner.path, inner.layout, inner.ignored
        self._units = list(worker_share(inner.units(), rank, world))

    def units(self) -> list[str]:
        return list(self._units)

    def read(self, worker: int = 0, n_workers: int = 1, skip: SkipHandler = None,
             ) -> Iterator[RawSample]:
        yield from self.inner.read_units(worker_share(self._units, worker, n_workers), skip)

    def read_units(self, units: Sequence[str], skip: SkipHandler = None) -> Iterator[RawSample]:
        return self.inner.read_units(units, skip)

    def unit_samples(self, unit: str) -> int:
        return self.inner.unit_samples(unit)

    def survey(self) -> dict[str, Any]:
        return self.inner.survey()


@dataclass(frozen=True)
class Found:
    """What check() found: the layout the ranks open the export as, what its samples carry,
    and, for audio, the rate its clips are cut at."""

    layout: str
    kind: str
    rate: int | None = None
    tokenizer: TokenizerSpec | None = None  # text: what every rank's workers encode with


def check(path: str, opts_workers: int, world: int, layout: str | None,
          seq_len: int | None = None, tokenizer: str | None = None) -> Found:
    """Refuse, before any rank starts, an export whose units cannot give every loader worker of
    every rank its own; what the ranks need to know of it otherwise: for text, the tokenizer
    (`tokenizer`'s file, or a BPE trained on the export's first texts, as bench trains one),
    made once by the launcher and carried to every rank."""
    from dsbench.adapters.base import AUDIO, kind_of
    from dsbench.adapters.survey import audio_rate
    from dsbench.errors import DsbenchError
    from dsbench.loader import tokenize, worker
    from dsbench.loader.options import BenchOptions

    export = adapters.open_export(path, layout=layout, seq_len=seq_len)
    kind = kind_of(export)
    spec = tokenize.settled(path, BenchOptions(found_kind=kind, tokenizer=tokenizer,
                                                      layout=layout),
                            worker.open_export).tokenizer_spec
    units = len(export.units())
    if units < world * opts_workers:
        raise DsbenchError(f"{units} units (shards or samples) cannot give {world} ranks x "
                           f"{opts_workers} workers one each: use fewer --ranks or --workers",
                           path=path)
    rate = None
    if kind == AUDIO:  # clips are cut at the rate the survey finds, as bench cuts them
        rate = audio_rate(export, path)
    return Found(export.layout, kind, rate, spec)  # settled gives text alone a tokenizer
