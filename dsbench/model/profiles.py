"""Storage profiles for the cluster model: what reading an export from a network filesystem adds.

A bench result is measured on one machine, usually from local disk or the page cache: that is the
`local` profile, which adds nothing. A network profile adds, per sample,

    files_per_sample x per_file_s        (the round trips of opening each file)
  + bytes_per_sample / (node_bytes_per_s x (1 - link utilisation))
                                         (moving the bytes over the link the node's workers share)

so a per-sample layout (2 files per sample) pays its latency on every sample while a sharded layout
(0.001 files per sample) pays it once per shard. `per_file_s` is `ops_per_file x op_latency_s`.

The named profiles' figures are public ones, cited in `source`; where a figure is a modelling
choice rather than a published number, `note` says so. docs/model.md lists them with their limits.
A profile can also be measured where the export lives: `dsbench probe` writes a storage-profile
document, and `--storage FILE.json` builds a profile from it (`load_probe`), optionally with a
stated round trip added per request (`FILE.json+SECONDS`, `with_added_latency`). `origin` says
which kind of figure the model was given: "measured", "stated", "profile" (a published figure), or
"measured + stated" (a probe plus a stated latency).
docs/probe.md says what the probe measures.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import atomic, fmt
from dsbench.errors import DsbenchError
from dsbench.results import schema

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
    origin: str = "profile"  # "measured", "stated", "profile", "measured + stated", ...
    # An object store's limits and bill (model/store.py); None where none is published.
    read_limit_per_prefix_s: float | None = None  # GET/HEAD per second per prefix
    usd_per_1000_get: float | None = None
    usd_per_gb_read: float | None = None
    limit_source: str = ""

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
                "source": self.source, "note": self.note, "origin": self.origin,
                "read_limit_per_prefix_s": self.read_limit_per_prefix_s,
                "usd_per_1000_get": self.usd_per_1000_get,
                "usd_per_gb_read": self.usd_per_gb_read, "limit_source": self.limit_source}


LOCAL = StorageProfile(
    "local", 0.0, 0, math.inf,
    source="measured: the bench result's own read stage (local disk or page cache)",
    note="adds nothing to what was measured", origin="measured")

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
             "add a HEAD per open)",
        read_limit_per_prefix_s=5500, usd_per_1000_get=0.0004, usd_per_gb_read=0.0,
        limit_source="Amazon S3 User Guide, 'Best practices design patterns: optimizing Amazon "
                     "S3 performance': at least 5,500 GET/HEAD requests per second per "
                     "partitioned prefix, beyond which S3 answers 503 SlowDown while it "
                     "scales; Amazon S3 pricing, S3 Standard, US East (N. Virginia): $0.0004 "
                     "per 1,000 GET requests, and no charge for data moved to EC2 in the same "
                     "Region"),
    "s3-express": StorageProfile(
        "s3-express", 5e-3, 1, 6269e6,
        source="Amazon S3 User Guide, 'Optimizing S3 Express One Zone performance': "
               "'consistent single-digit millisecond first-byte read and write request latencies'",
        note="5 ms (the middle of 'single-digit'); per-node bandwidth assumed equal to the s3 "
             "profile's, as no per-client figure is published"),
}


def parse_storage(text: str) -> StorageProfile:
    """A profile name from PROFILES, `custom:LATENCY_S,BYTES_PER_S` (one operation per file), a
    storage profile written by `dsbench probe` (`FILE.json`), or one with a stated latency added
    per request (`FILE.json+SECONDS`)."""
    probed = _probe_argument(text.strip())
    if probed is not None:
        path, added = probed
        profile = load_probe(path)
        if added is None:
            return profile
        return with_added_latency(profile, added, f"--storage {text.strip()}")
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
                              source=f"given: {latency} s per file, {bandwidth:g} bytes/s per node",
                              origin="stated")
    raise DsbenchError(f"--storage {text!r}: unknown profile; choose one of "
                       f"{', '.join(PROFILES)}, custom:LATENCY_S,BYTES_PER_S or a profile file "
                       "written by dsbench probe (FILE.json)")


# --- profiles measured by `dsbench probe` ---------------------------------------------------------

PROBE_KIND = "dsbench-storage-profile"  # dsbench.storage.probe.KIND: the document it writes


def _probe_argument(text: str) -> tuple[Path, float | None] | None:
    """(file, added seconds) when `text` names a profile file, else None (a profile name)."""
    if text.lower().endswith(".json"):
        return Path(text), None
    head, plus, tail = text.rpartition("+")
    if not (plus and head.lower().endswith(".json")):
        return None
    try:
        added = float(tail)
    except ValueError:
        added = math.nan
    if not (math.isfinite(added) and added >= 0):
        raise DsbenchError(f"--storage {text!r}: expected FILE.json+SECONDS, the round trip "
                           "to add per request in seconds >= 0, e.g. probe.json+0.02")
    return Path(head), added


def load_probe(path: str | Path) -> StorageProfile:
    """The storage profile `dsbench probe` wrote to `path`, checked against its schema.

    Latency per file is the measured p50 first-byte latency, one request per file; bandwidth is
    the best aggregate bandwidth over the reader counts tried. Why the median and not the mean
    or the p99: the model charges every file the same latency, so the figure stands for a
    typical request, as the published profiles' figures do ("100-200 ms first-byte latency");
    a few hundred timings give a steady median, while their mean moves with the one or two
    slowest (a connection opened, a retry). A slow request delays one worker's batch, which
    the prefetch queue absorbs; the model's stalls (--stall-prob, --stall-time) delay a whole
    rank's step, a different mechanism, so the p99 is not fed to them. The mean and the tail
    are kept in `note`, so the gap is visible.
    """
    path = Path(path)
    atomic.check_input(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not text"
        raise DsbenchError(f"cannot read the storage profile: {reason}", path=path) from None
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        raise DsbenchError(f"not a storage profile: not JSON ({exc})", path=path) from None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind != PROBE_KIND:
        raise DsbenchError(f"not a storage profile (kind {kind!r}, not {PROBE_KIND!r}): "
                           "write one with dsbench probe PATH --json FILE", path=path)
    schema.validate(doc, "probe", f"{path}: not a valid storage profile")
    return from_probe(doc, f"probe:{path.name}", str(path))


def from_probe(doc: dict[str, Any], name: str, where: str) -> StorageProfile:
    """The profile a storage-profile document describes (see load_probe for which figures)."""
    lat, best = doc["latency"], doc["bandwidth"]["best"]
    limit = (doc.get("limit") or {}).get("limit_per_s")
    tail = (f"p99 {fmt.seconds(lat['p99_s'])}" if lat["p99_s"] is not None
            else f"max {fmt.seconds(lat['max_s'])}")
    return StorageProfile(
        name, lat["p50_s"], 1, best["bytes_per_s"],
        source=(f"measured by dsbench probe of {doc['location']} on {doc['created_utc']} "
                f"({where}): p50 first-byte latency of {lat['timed']} requests (mean "
                f"{fmt.seconds(lat['mean_s'])}, {tail}), best aggregate bandwidth with "
                f"{best['readers']} reader{'s' if best['readers'] > 1 else ''} from one "
                "machine"),
        note="latency per file is the p50, one request per file; the tail is not modelled",
        origin="measured", read_limit_per_prefix_s=limit,
        limit_source=f"measured by dsbench probe --find-limit ({where}): the requests per "
                     "second the store answered while saturated, past its burst" if limit
        else "")


def with_added_latency(profile: StorageProfile, seconds: float, why: str) -> StorageProfile:
    """`profile` with `seconds` more latency per request: a network round trip stated on top of
    a measured one (a probe of a local server on loopback, carried to a real network)."""
    if not (math.isfinite(seconds) and seconds >= 0):
        raise DsbenchError(f"added latency must be a finite number of seconds >= 0, not "
                           f"{seconds}")
    if profile.ops_per_file == 0:
        raise DsbenchError(f"storage {profile.name!r} makes no request per file: there is no "
                           "round trip to add latency to")
    base = profile.origin
    origin = base if base == "stated" or base.endswith(" + stated") else f"{base} + stated"
    return dataclasses.replace(
        profile, name=f"{profile.name}+{seconds:g}s", op_latency_s=profile.op_latency_s + seconds,
        source=f"{profile.source}; plus {fmt.seconds(seconds)} per request, stated ({why})",
        origin=origin)
