"""A map-style Dataset's order: the export's samples numbered front to back (each unit's after
the previous unit's), a seeded permutation of them, or of blocks of consecutive ones, each epoch,
each sample read where it lies through the layout's random-access path (`Export.read_at`).

`bench --order random` is blocks of one sample, `--order block` blocks of `--block N`. Worker w
takes the permuted blocks `[w::workers]`, as torch's DataLoader deals whole batches to its
workers: a block is read by one worker, so what it costs does not depend on how many there are.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from dsbench.adapters.base import Export, RawSample, SkipHandler, reads_at
from dsbench.errors import DsbenchError, SampleError

RANDOM, BLOCK = "random", "block"
RANDOM_ACCESS = (RANDOM, BLOCK)  # orders that read single samples where they lie


def check_random_access(export: Export, order: str) -> None:
    """A DsbenchError, in one line, where `order` reads single samples and the export's layout
    has no random-access path here."""
    if order in RANDOM_ACCESS and not reads_at(export):
        raise DsbenchError(f"--order {order} reads single samples where they lie, and "
                           f"dsbench reads {export.layout} exports front to back only "
                           f"(random access: {', '.join(RANDOM_ACCESS_LAYOUTS)}); "
                           "--order shuffle reads it as streaming loaders do",
                           path=export.path)


# The layouts whose exports dsbench reads by random access (their adapters' read_at).
RANDOM_ACCESS_LAYOUTS = ("arrow", "parquet", "hf", "files", "mds", "litdata",
                         "lance")


class SampleIndex:
    """The export's samples numbered front to back: sample i is (unit index, offset in it).
    Counted from indexes, headers and footers (`unit_samples`); a unit that cannot be read
    raises, or with `skip` is reported and holds no sample."""

    def __init__(self, export: Export, skip: SkipHandler = None) -> None:
        counts = []
        for unit in export.units():
            try:
                counts.append(export.unit_samples(unit))
            except SampleError as err:
                if skip is None:
                    raise
                skip(err)
                counts.append(0)
        self.starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self.total = int(self.starts[-1])

    def blocks(self, block: int) -> int:
        return -(-self.total // block)

    def locate(self, i: int) -> tuple[int, int]:
        unit = int(np.searchsorted(self.starts, i, side="right")) - 1
        return unit, i - int(self.starts[unit])


def random_epoch(export: Export, index: SampleIndex, size: int, seed: int, epoch: int,
                 worker: int, n_workers: int, skip: SkipHandler = None
                 ) -> Iterator[tuple[RawSample, int, int]]:
    """Worker `worker`'s samples of one epoch: its blocks of `size` samples, each sample with
    its unit's index and its offset in that unit."""
    units = export.units()
    for block in random_blocks(index, size, seed, epoch, worker, n_workers):
        yield from read_block(export, units, index, block, skip)


def random_blocks(index: SampleIndex, size: int, seed: int, epoch: int, worker: int,
                  n_workers: int) -> Iterator[range]:
    """The sample numbers of worker `worker`'s blocks of one epoch, block by block: the blocks
    of `size` consecutive samples permuted by (seed, epoch), every `n_workers`-th from
    `worker`."""
    perm = np.random.default_rng([seed, epoch]).permutation(index.blocks(size))
    for b in perm[worker::n_workers]:
        yield range(int(b) * size, min((int(b) + 1) * size, index.total))


def read_block(export: Export, units: Sequence[str], index: SampleIndex, block: range,
               skip: SkipHandler = None) -> Iterator[tuple[RawSample, int, int]]:
    """The samples of one block, front to back, each read where it lies (bad ones that `skip`
    took are left out), with its unit's index and offset."""
    read_at = export.read_at  # type: ignore[attr-defined]
    for i in block:
        unit, offset = index.locate(i)
        raw = read_at(units[unit], offset, skip)
        if raw is not None:
            yield raw, unit, offset
