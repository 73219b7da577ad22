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


def count_pass(export: Export, max_samples: int = DEFAULT_MAX_SAMPLES,
               skip: base.SkipHandler = None, order: Order | None = None) -> Counts:
    """Read whole units as a worker does (no decoding) and count what reading them took; with
    a random-access `order`, whole blocks of one epoch in that order.

    `max_samples` 0 reads every unit. Bad samples raise (the default policy) or go to `skip`.
    """
    if order is not None and order.name in RANDOM_ACCESS:
        return _count_random(export, order, max_samples, skip)
    units = export.units()
    skipped = 0

    def counting(err: Any) -> None:
        nonlocal skipped
        skipped += 1
        if skip is not None:
            skip(err)

    handler: base.SkipHandler = counting if skip is not None else None
    # Python modules an adapter imports on first use read files too: read one sample first,
    # outside the counts.
    if units:
        first = export.read_units(units[:1], handler)
        try:
            next(first, None)
        finally:
            getattr(first, "close", lambda: None)()  # a generator closes its file here
        skipped = 0
    opens0, mapped0 = base.io_counters()
    chars0 = read_chars()
    requests0 = accounting.totals()
    samples = read = 0
    for i in spread(len(units)):
        samples += sum(1 for _ in export.read_units([units[i]], handler))
        read += 1
        if max_samples and samples >= max_samples:
            break
    opens1, mapped1 = base.io_counters()
    requests = accounting.totals().since(requests0)
    return Counts(samples, skipped, read, len(units), opens1 - opens0, read_chars() - chars0,
                  mapped1 - mapped0, requests if sum(requests.count.values()) else None)


def _count_random(export: Export, order: Order, max_samples: int,
                  skip: base.SkipHandler) -> Counts:
    skipped = 0

    def counting(err: Any) -> None:
        nonlocal skipped
        skipped += 1
        if skip is not None:
            skip(err)

    handler: base.SkipHandler = counting if skip is not None else None
    index = SampleIndex(export, handler)  # footers and headers: set-up, as for a worker
    units = export.units()
    blocks = list(random_blocks(index, order.block_size, order.seed, 0, 0, 1))
    # A first read imports what the adapter needs (outside the counts); then nothing is open.
    if blocks:
        next(read_block(export, units, index, blocks[0], handler), None)
    export.forget()  # type: ignore[attr-defined]
    skipped = 0
    opens0, mapped0 = base.io_counters()
    chars0 = read_chars()
    requests0 = accounting.totals()
    samples = read = 0
    for block in blocks:
        samples += sum(1 for _ in read_block(export, units, index, block, handler))
        read += 1
        if max_samples and (samples >= max_samples or read_chars() - chars0
                            + base.io_counters()[1] - mapped0 >= RANDOM_MAX_BYTES):
            break
    opens1, mapped1 = base.io_counters()
    requests = accounting.totals().since(requests0)
    export.forget()  # type: ignore[attr-defined]
    return Counts(samples, skipped, read, len(blocks), opens1 - opens0, read_chars() - chars0,
                  mapped1 - mapped0, requests if sum(requests.count.values()) else None)
