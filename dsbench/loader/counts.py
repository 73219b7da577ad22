"""Exact counts: files opened and bytes read per sample, over whole units of the export.

A timed window ends where the clock says, usually inside a shard: counted over a window, a
shard layout's files per sample depends on how much of its last shard the window read (one
300-sample shard shows 1/160 files per sample in a window of 160 samples, 1/300 over a whole
pass). So these figures come from one pass over whole units (shards, or per-sample groups),
read through the adapter exactly as a loader worker reads them but without decoding, in the
main process before the timed rounds. What a window reads depends on its length; what a whole
unit reads does not, so the same export gives the same counts whatever the window, rounds,
workers or warm-up.

The pass reads every unit unless that is more than `max_samples` samples; then it reads whole
units in an order spread evenly over the export (bit-reversed indices) until it has that many,
and the counts say `exact: false` and how many units they cover. The order depends on the
export alone, so the figures are still the same from run to run.

An export in an object store is counted the same way, and its requests too (storage/accounting.py):
GETs, range GETs, HEADs and LIST pages per sample, first-byte latency and client CPU per request.
By default fewer samples are counted there (REMOTE_MAX_SAMPLES): a sequential pass of one
request per object at tens of milliseconds each would take longer than the benchmark.

With a random-access order (`--order random` or `block`) the pattern sets the cost (a Parquet
row group decompressed for one row), so the pass reads one epoch in the run's order, as one
reader with its own open files and last block: whole blocks of the order (a sample is a block
of one with `random`), up to `max_samples` or RANDOM_MAX_BYTES read, from cold (nothing open).
The order depends on the seed, so the figures are the same from run to run; several workers
reuse a block read last by chance, as one reader does.

Bytes are the process's read_chars (every byte a read system call returned, page-cache hits
included, so they repeat) plus bytes touched through memory maps, as the adapters count them;
files are the opens the adapters count. Opening the export (headers, footers) is set-up, done
once per worker, and not counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dsbench.adapters import base
from dsbench.adapters.base import Export
from dsbench.loader.order import Order
from dsbench.loader.sampling import RANDOM_ACCESS, SampleIndex, random_blocks, read_block
from dsbench.loader.worker import read_chars
from dsbench.results import types
from dsbench.storage import accounting

DEFAULT_MAX_SAMPLES = 20_000
# With a random-access order a sample can cost its whole block (a Parquet row group of 1000
# images is ~100 MB): the pass also stops, after a whole block, once it has read this much.
RANDOM_MAX_BYTES = 2 << 30
REMOTE_MAX_SAMPLES = 2_000
METHOD = "whole units"
NOT_COUNTED = "not counted"  # a --dataset: a black box, whose files dsbench does not see


@dataclass(frozen=True)
class Counts:
    samples: int  # samples delivered by the units read (bad ones skipped are not in it)
    skipped: int
    units_read: int
    units: int
    files: int
    read_bytes: int
    mapped_bytes: int
    requests: accounting.Requests | None = None  # an export in an object store: its requests
    method: str = METHOD  # "not counted" for a --dataset, a black box

    @property
    def exact(self) -> bool:
        """Whether every unit of the export was read."""
        return self.units_read == self.units

    def per_sample(self, count: int) -> float:
        return count / self.samples if self.samples else 0.0

    def to_json(self) -> types.Counts:
        return {"method": self.method, "exact": self.exact and self.method == METHOD,
                "units": self.units,
                "units_read": self.units_read, "samples": self.samples,
                "skipped_samples": self.skipped, "files": self.files,
                "bytes": self.read_bytes + self.mapped_bytes, "mapped_bytes": self.mapped_bytes,
                "files_per_sample": self.per_sample(self.files),
                "bytes_per_sample": self.per_sample(self.read_bytes + self.mapped_bytes),
                "mapped_bytes_per_sample": self.per_sample(self.mapped_bytes)}


def spread(n: int) -> list[int]:
    """range(n) in bit-reversed order: every prefix is spread evenly over the range."""
    bits = max(1, (n - 1).bit_length())
    return sorted(range(n), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))


class _Skips:
    """The bad samples a pass skipped, counted and handed on to `skip`."""

    def __init__(self, skip: base.SkipHandler) -> None:
        self.n, self.skip = 0, skip
        self.handler: base.SkipHandler = self._skipped if skip is not None else None

    def _skipped(self, err: Any) -> None:
        self.n += 1
        if self.skip is not None:
            self.skip(err)


def count_pass(export: Export, max_samples: int = DEFAULT_MAX_SAMPLES,
               skip: base.SkipHandler = None, order: Order | None = None) -> Counts:
    """Read whole units as a worker does (no decoding) and count what reading them took; with
    a random-access `order`, whole blocks of one epoch in that order.

    `max_samples` 0 reads every unit. Bad samples raise (the default policy) or go to `skip`.
    """
    skips = _Skips(skip)
    units = export.units()
    random_access = order is not None and order.name in RANDOM_ACCESS
    if order is not None and random_access:
        index = SampleIndex(export, skips.handler)  # footers and headers: set-up
        blocks = list(random_blocks(index, order.block_size, order.seed, 0, 0, 1))
        parts: list[Callable[[], Iterator[Any]]] = [
            functools.partial(read_block, export, units, index, b, skips.handler)
            for b in blocks]
        budget = RANDOM_MAX_BYTES
    else:
        parts = [functools.partial(export.read_units, [units[i]], skips.handler)
                 for i in spread(len(units))]
        budget = 0
    # Python modules an adapter imports on first use read files too: read one sample first,
    # outside the counts; then nothing a random reader keeps is open.
    if parts:
        first = parts[0]()
        try:
            next(first, None)
        finally:
            getattr(first, "close", lambda: None)()  # a generator closes its file here
    forget = getattr(export, "forget", None) if random_access else None
    if forget is not None:
        forget()
    skips.n = 0
    opens0, mapped0 = base.io_counters()
    chars0 = read_chars()
    requests0 = accounting.totals()
    samples = read = 0
    for part in parts:
        samples += sum(1 for _ in part())
        read += 1
        spent = read_chars() - chars0 + base.io_counters()[1] - mapped0
        if max_samples and (samples >= max_samples or 0 < budget <= spent):
            break
    opens1, mapped1 = base.io_counters()
    requests = accounting.totals().since(requests0)
    if forget is not None:
        forget()
    return Counts(samples, skips.n, read, len(parts), opens1 - opens0, read_chars() - chars0,
                  mapped1 - mapped0, requests if sum(requests.count.values()) else None)
