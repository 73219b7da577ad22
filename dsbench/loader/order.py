"""The order a training job reads an export in, one epoch at a time, and the state that fixes it:
one module for `bench --order`, `resume` and the job.

An epoch's order is a pure function of (seed, epoch, rank, ranks, worker, workers):

* the units (`Export.units()`: shards, or sample keys for per-sample files) are permuted by
  (seed, epoch), the same permutation on every rank and worker;
* rank r takes `order[r::ranks]` and its worker w takes `[w::workers]` of that (rank first, so
  that ranks stay balanced whenever the units divide between them);
* a worker reads its units in that order; with shards, samples pass through a shuffle buffer of
  `buffer` samples from which a seeded generator picks one at random (swap with the last, pop),
  and which is drained at the end. Per-sample files need no buffer: permuting the units is
  permuting the samples.

`SampleStream` is one worker's stream. Its `state()` is everything needed to continue exactly
where it stands: the epoch, the read cursor (unit position, samples taken from that unit), the
buffer as locators (unit position, offset) in buffer order, the generator's state, whether it
ran dry. Restoring re-reads the buffered samples by locator, so no sample bytes are saved.

`bench` reads in one of ORDERS: `sequential`, each worker its units `[w::workers]` in sorted
order, epoch after epoch (what the loader did before orders existed; results without an order
read as it); `shuffle`, the streams above for one rank, a fresh permutation each epoch; `random`,
a map-style Dataset's order: the export's samples numbered front to back (each unit's samples
after the previous unit's), a seeded permutation of those numbers each epoch, each sample read
alone through the layout's random-access path (`Export.read_at`); or `block`, the same for
permuted blocks of `block` consecutive samples, each block read front to back (sampling.py).
How random the batches were is batch_order.py's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsbench.adapters.base import Export, RawSample, SkipHandler
from dsbench.errors import DsbenchError
from dsbench.loader.read_ahead import ReadAhead
from dsbench.loader.sampling import (
    BLOCK,
    RANDOM,
    RANDOM_ACCESS,
    SampleIndex,
    check_random_access,
    random_epoch,
)

SHUFFLE_SAMPLE = "sample"  # the units are samples: a permutation of the units shuffles samples
SHUFFLE_SHARD = "shard+buffer"  # the units are shards: their order, then a shuffle buffer

SEQUENTIAL, SHUFFLE = "sequential", "shuffle"
ORDERS = (SEQUENTIAL, SHUFFLE, RANDOM, BLOCK)


class EmptyShare(Exception):
    """A loader worker's share of the export is empty (fewer units than workers): it delivers
    nothing, as a torch DataLoader worker given no shard ends at once, and the loader goes on
    with the others. The runner reports such workers (summary.py)."""


# Samples a shuffling worker holds to draw from, as webdataset's `.shuffle(1000)` in its examples
DEFAULT_BUFFER = 1000
# Consecutive samples per block with --order block: as many as a worker's shuffle buffer holds
# by default, so the two compromises keep about as many samples in play.
DEFAULT_BLOCK = 1000


def shuffle_of(layout: str) -> str:
    """The shuffling a layout allows without random access to single samples."""
    return SHUFFLE_SAMPLE if layout == "files" else SHUFFLE_SHARD


@dataclass(frozen=True)
class Plan:
    """What fixes the order of an epoch, apart from the epoch itself."""

    units: tuple[str, ...]
    seed: int
    ranks: int
    workers: int
    batch_size: int
    buffer: int  # shuffle-buffer samples per worker; 0 with per-sample shuffling
    shuffle: str
    # The export's layout, as found once: a worker opening the export does not detect it
    # again (detection imports the signed formats' adapters: 0.13 s of CPU per worker here).
    layout: str | None = None

    def slot(self, epoch: int, rank: int, worker: int) -> list[str]:
        """The units worker `worker` of rank `rank` reads in `epoch`, in reading order."""
        return [self.units[i] for i in self.slot_indices(epoch, rank, worker)]

    def slot_indices(self, epoch: int, rank: int, worker: int) -> list[int]:
        """`slot`'s units as indexes into `units`."""
        if not (0 <= rank < self.ranks and 0 <= worker < self.workers):
            raise DsbenchError(f"rank {rank} worker {worker} is not in {self.ranks} x "
                               f"{self.workers}")
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.units))
        return [int(i) for i in perm[rank::self.ranks][worker::self.workers]]

    def fill_steps(self) -> int:
        """Steps, from an epoch's start, until every worker's buffer has been full once."""
        return self.workers * math.ceil(self.buffer / self.batch_size) if self.buffer else 0


def batches_per_rank(plan: Plan, export: Export, epoch: int) -> list[int]:
    """Batches each rank delivers in `epoch` (every worker ends with its own partial batch),
    from the units' sample counts (tar headers, footers, listings), before anything runs."""
    sizes: dict[str, int] = {}
    out = []
    for rank in range(plan.ranks):
        steps = 0
        for worker in range(plan.workers):
            n = 0
            for unit in plan.slot(epoch, rank, worker):
                if unit not in sizes:
                    sizes[unit] = export.unit_samples(unit)
                n += sizes[unit]
            steps += math.ceil(n / plan.batch_size)
        out.append(steps)
    return out


def fresh_state(plan: Plan, epoch: int, rank: int, worker: int) -> dict[str, Any]:
    rng = np.random.default_rng([plan.seed, epoch, rank, worker])
    return {"epoch": epoch, "pos": 0, "offset": 0, "buffer": [], "done": False, "emitted": 0,
            "rng": rng.bit_generator.state}


class SampleStream:
    """One worker's samples of one epoch, in order; `state()` continues it exactly."""

    def __init__(self, export: Export, plan: Plan, rank: int, worker: int, epoch: int,
                 state: dict[str, Any] | None = None, skip: SkipHandler = None) -> None:
        st = dict(state) if state is not None else fresh_state(plan, epoch, rank, worker)
        self.export, self.plan, self.skip = export, plan, skip
        self.epoch: int = st["epoch"]
        self.units = plan.slot(self.epoch, rank, worker)
        self.pos: int = st["pos"]
        self.offset: int = st["offset"]
        self.done: bool = st["done"]
        self.emitted: int = st["emitted"]
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = st["rng"]
        # (locator, sample): the locator is what the state keeps of a buffered sample.
        self.buffer: list[tuple[tuple[int, int], RawSample]] = self._reread(st["buffer"])
        self.reader: Iterator[RawSample] | None = None
        self.last_pos, self.last_offset = 0, 0
        self.ahead = ReadAhead.of(export, self.units, skip)

    def _reread(self, locators: list[list[int]]) -> list[tuple[tuple[int, int], RawSample]]:
        """The buffered samples again, read by locator: their units, in buffer order."""
        wanted: dict[int, set[int]] = {}
        for pos, off in locators:
            wanted.setdefault(pos, set()).add(off)
        found: dict[tuple[int, int], RawSample] = {}
        for pos in sorted(wanted):
            for off, raw in enumerate(self.export.read_units([self.units[pos]])):
                if off in wanted[pos]:
                    found[(pos, off)] = raw
        try:
            return [((p, o), found[(p, o)]) for p, o in locators]
        except KeyError:
            raise DsbenchError("the saved loader state names a sample the export no longer "
                               "holds") from None

    def _next_raw(self) -> tuple[tuple[int, int], RawSample] | None:
        """The next sample from the units, advancing the cursor; None past the last unit."""
        while self.pos < len(self.units):
            if self.reader is None:
                self.reader = self.ahead.read(self.pos)
                for _ in range(self.offset):  # resume inside a unit: skip what was taken
                    next(self.reader, None)
            raw = next(self.reader, None)
            if raw is not None:
                loc = (self.pos, self.offset)
                self.offset += 1
                return loc, raw
            self.reader, self.pos, self.offset = None, self.pos + 1, 0
        return None

    def next(self) -> tuple[RawSample, str] | None:
        """The next sample and its unit; None once this worker's epoch is over."""
        if self.done:
            return None
        while len(self.buffer) < max(self.plan.buffer, 1):
            got = self._next_raw()
            if got is None:
                break
            self.buffer.append(got)
        if not self.buffer:
            self.done = True
            self.ahead.close()
            return None
        if self.plan.buffer:
            i = int(self.rng.integers(len(self.buffer)))
            self.buffer[i], self.buffer[-1] = self.buffer[-1], self.buffer[i]
        (pos, off), raw = self.buffer.pop() if self.plan.buffer else self.buffer.pop(0)
        self.emitted += 1
        self.last_pos, self.last_offset = pos, off  # where it was (bench's order figures)
        return raw, self.units[pos]

    def state(self) -> dict[str, Any]:
        """Plain data (JSON-able): where this stream stands now."""
        return {"epoch": self.epoch, "pos": self.pos, "offset": self.offset,
                "buffer": [list(loc) for loc, _ in self.buffer], "done": self.done,
                "emitted": self.emitted, "rng": self.rng.bit_generator.state}


@dataclass(frozen=True)
class Order:
    """How `bench` orders what its workers read: one of ORDERS, and for `shuffle` the buffer
    (samples per worker, for shard layouts) and the seed of the epochs' permutations."""

    name: str = SEQUENTIAL
    buffer: int = DEFAULT_BUFFER
    seed: int = 0
    block: int = DEFAULT_BLOCK
    epoch: int = 0  # the first epoch read (bench --epochs starts fresh workers at each)

    @property
    def block_size(self) -> int:
        """Consecutive samples read together with a random-access order."""
        return 1 if self.name == RANDOM else self.block

    def describe(self, layout: str) -> str:
        """The order in words, as reports print it."""
        if self.name == SEQUENTIAL:
            return "sequential (each worker's units in order, epoch after epoch)"
        if self.name == RANDOM:
            return "random (samples permuted each epoch, each read where it lies)"
        if self.name == BLOCK:
            return f"block (blocks of {self.block} consecutive samples permuted each epoch)"
        if shuffle_of(layout) == SHUFFLE_SAMPLE:
            return "shuffle (samples permuted each epoch)"
        return f"shuffle (shards permuted each epoch, a buffer of {self.buffer} samples " \
               "per worker)"


IN_ORDER = Order()


def order_label(config: Mapping[str, Any]) -> str:
    """The order a result's config says it was read in, in words; results from before orders
    existed were read sequentially."""
    order = str(config.get("order", SEQUENTIAL))
    if order == BLOCK and config.get("block") is not None:
        return f"block ({config['block']} samples)"
    if order == SHUFFLE and config.get("backend") == "native":
        return f"{order} (the library's own)"
    buffer = config.get("shuffle_buffer")
    return f"{order} (buffer {buffer} samples)" if order == SHUFFLE and buffer is not None \
        else order


class WorkerSamples:
    """One bench worker's samples, epoch after epoch, in `order`, remembering where each came
    from: `where(key)` is (the unit's index in `export.units()`, the sample's offset in it),
    once, for the order figures. A DsbenchError when an epoch gives the worker no sample (an
    empty slice, or every sample skipped), which would otherwise spin."""

    def __init__(self, export: Export, order: Order, worker: int, n_workers: int,
                 skip: SkipHandler = None, once: bool = False) -> None:
        self.export, self.order, self.worker, self.n_workers = export, order, worker, n_workers
        # One epoch (`order.epoch`) and no more: a loader that starts its workers' epochs
        # together, as a format's own library expects (torch_source.py).
        self.once = once
        # A format's own reader (--backend native) yields its share with no units to name.
        self.units: list[str] = export.units() if hasattr(export, "units") else []
        # (key, unit index, offset) of each sample read, in reading order: batches are built
        # in that order, so a key is matched to the first entry that has it (keys can repeat
        # across shards, and an epoch's end and the next one's start can share a batch);
        # entries before it are samples the builder skipped.
        self._where: deque[tuple[str, int, int]] = deque()
        check_random_access(export, order.name)
        self._samples = self._epochs(skip)

    def __iter__(self) -> Iterator[RawSample]:
        return self

    def __next__(self) -> RawSample:
        return next(self._samples)

    def where(self, key: str) -> tuple[int, int] | None:
        while self._where:
            k, unit, offset = self._where.popleft()
            if k == key:
                return unit, offset
        return None

    def _share_is_empty(self, numbered: SampleIndex | None) -> bool:
        """No unit (or block) falls to this worker; a format's own reader (no units) that gave
        the worker nothing in its first epoch split the export so."""
        if numbered is not None:
            return self.worker >= numbered.blocks(self.order.block_size)
        return not self.units or self.worker >= len(self.units)

    def _epochs(self, skip: SkipHandler) -> Iterator[RawSample]:
        plan = None
        if self.order.name == SHUFFLE:
            layout = shuffle_of(self.export.layout)
            plan = Plan(tuple(self.units), self.order.seed, 1, self.n_workers, 1,
                        self.order.buffer if layout == SHUFFLE_SHARD else 0, layout)
        numbered = SampleIndex(self.export, skip) if self.order.name in RANDOM_ACCESS else None
        epoch = self.order.epoch
        while True:
            n = 0
            if numbered is not None:
                for raw, u, off in random_epoch(self.export, numbered, self.order.block_size,
                                                self.order.seed, epoch, self.worker,
                                                self.n_workers, skip):
                    n += 1
                    self._where.append((raw.key, u, off))
                    yield raw
            elif not self.units:
                for raw in self.export.read(self.worker, self.n_workers, skip):
                    n += 1
                    # Where the library told where the sample lies (native/__init__.py).
                    at = getattr(self.export, "position", None)
                    if at is not None:
                        self._where.append((raw.key, *at))
                    yield raw
            elif plan is None:
                share = self.units[self.worker::self.n_workers]
                ahead = ReadAhead.of(self.export, share, skip)
                try:
                    for i in range(len(share)):
                        index = self.worker + i * self.n_workers  # in export.units()
                        for off, raw in enumerate(ahead.read(i)):
                            n += 1
                            self._where.append((raw.key, index, off))
                            yield raw
                finally:
                    ahead.close()
            else:
                stream = SampleStream(self.export, plan, 0, self.worker, epoch, skip=skip)
                indices = plan.slot_indices(epoch, 0, self.worker)
                while (got := stream.next()) is not None:
                    n += 1
                    self._where.append((got[0].key, indices[stream.last_pos],
                                        stream.last_offset))
                    yield got[0]
            if n == 0:
                if epoch == self.order.epoch and self._share_is_empty(numbered):
                    raise EmptyShare(self.worker)
                raise DsbenchError(f"worker {self.worker} of {self.n_workers} read no samples "
                                   "from its slice (empty, or every sample was skipped)",
                                   path=self.export.path)
            if self.once:
                return
            epoch += 1
