"""Storage profiles for the cluster model: what reading an export from a network filesystem adds.

A bench result is measured on one machine, usually from local disk or the page cache: that is the
`local` profile, which adds nothing. A network profile adds, per sample,

    files_per_sample x per_file_s        (the round trips of opening each file)
  + bytes_per_sample / (node_bytes_per_s x (1 - link utilisation))
                                         (moving the bytes over the link the node's workers share)

so a per-sample layout (2 files per sample) pays its latency on every sample while a sharded layout
(0.001 files per sample) pays it once per shard. `per_file_s` is `ops_per_file x op_latency_s`.

The figures are public ones, cited in `source`; where a figure is a modelling choice rather than a
published number, `note` says so. docs/model.md lists them with their limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsbench.errors import DsbenchError

MIB = 1024 * 1024


@dataclass(frozen=True)
class StorageProfile:
    """Latency per file opened and bandwidth per node, with where each figure comes from."""

    name: str
    op_latency_s: float
    ops_per_file: int
    node_bytes_per_s: float  # math.inf: the link is not a limit (local: measured costs already)
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.op_latency_s) and self.op_latency_s >= 0):
            raise DsbenchError(f"storage {self.name!r}: latency must be a finite number >= 0")
        if self.ops_per_file < 0:
            raise DsbenchError(f"storage {self.name!r}: ops per file must be >= 0")
        if not self.node_bytes_per_s > 0:
            raise DsbenchError(f"storage {self.name!r}: bandwidth must be > 0 bytes/s")

    @property
    def per_file_s(self) -> float:
        return self.op_latency_s * self.ops_per_file

    @property
    def is_local(self) -> bool:
        return self.per_file_s == 0 and math.isinf(self.node_bytes_per_s)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "op_latency_s": self.op_latency_s,
                "ops_per_file": self.ops_per_file, "per_file_s": self.per_file_s,
                "node_bytes_per_s": None if math.isinf(self.node_bytes_per_s)
                else self.node_bytes_per_s,
                "source": self.source, "note": self.note}


LOCAL = StorageProfile(
    "local", 0.0, 0, math.inf,
    source="measured: the bench result's own read stage (local disk or page cache)",
    note="adds nothing to what was measured")

PROFILES: dict[str, StorageProfile] = {
    "local": LOCAL,
    "efs": StorageProfile(
        "efs", 1e-3, 2, 1500 * MIB,
        source="Amazon EFS User Guide, 'Amazon EFS performance specifications' "
               "(https://docs.aws.amazon.com/efs/latest/ug/performance.html): General Purpose "
               "mode, Regional, Elastic throughput: read latency about 1 ms in earlier editions, "
               "'as low as 250 µs' in the current one; 1,500 MiB/s read/write per client",
        note="1 ms per operation (a typical figure, not the best case); 2 operations per file "
             "(open, first read) is a modelling choice"),
    "s3": StorageProfile(
        "s3", 0.100, 1, 6269e6,
        source="S3 Standard first-byte latency 100-200 ms, the baseline figure AWS training "
               "material quotes for S3; consistent with the Amazon S3 User Guide calling S3 "
               "Express One Zone ('single-digit millisecond') 'up to 10x faster than S3 "
               "Standard'. Bandwidth: 6,269 MB/s, the maximum S3 download "
               "throughput measured on p3dn.24xlarge (8 V100 GPUs) by dvassallo/s3-benchmark "
               "(README, 2019)",
        note="the low end (100 ms) of the latency range; one GET per file (a FUSE mount may "
             "add a HEAD per open)"),
    "s3-express": StorageProfile(
        "s3-express", 5e-3, 1, 6269e6,
        source="Amazon S3 User Guide, 'Optimizing S3 Express One Zone performance': "
               "'consistent single-digit millisecond first-byte read and write request latencies'",
        note="5 ms (the middle of 'single-digit'); per-node bandwidth assumed equal to the s3 "
             "profile's, as no per-client figure is published"),
}


def parse_storage(text: str) -> StorageProfile:
    """A profile name from PROFILES, or `custom:LATENCY_S,BYTES_PER_S` (one operation per file)."""
    name = text.strip().lower()
    if name in PROFILES:
        return PROFILES[name]
    if name.startswith("custom:"):
        parts = name[len("custom:"):].split(",")
        try:
            latency, bandwidth = (float(p) for p in parts)
        except ValueError:
            raise DsbenchError(f"--storage {text!r}: expected custom:LATENCY_S,BYTES_PER_S, "
                               "e.g. custom:0.002,1.5e9") from None
        return StorageProfile("custom", latency, 1, bandwidth,
                              source=f"given: {latency} s per file, {bandwidth:g} bytes/s per node")
    raise DsbenchError(f"--storage {text!r}: unknown profile; choose one of "
                       f"{', '.join(PROFILES)} or custom:LATENCY_S,BYTES_PER_S")
