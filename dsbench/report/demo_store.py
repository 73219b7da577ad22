"""The demo on object storage: before and after served by a local S3 server, measured there.

The incident's exports lived in an object store, where a per-sample layout pays requests per
sample and each request costs the client CPU. With no account and no network, the demo starts
moto's S3 server on 127.0.0.1 (storage/server.py), uploads part of before (its first shard) and
of after (its first STORE_SAMPLES samples: uploading every object to a Python server would take
longer than measuring), and benchmarks both there in one interleaved run through the same
client, adapters and loader as on disk. What it measures: requests per sample, CPU per sample
(the client's share included) and host CPU per sample, which includes the local server's own
CPU, so it is an upper bound for what the client side of a remote store would cost. Then it
probes the server (storage/probe.py): the cluster model's latency per request and bandwidth
come from that probe, plus a stated network round trip that loopback does not have.

Last, a store that pushes back: the same objects read through the fault proxy
(storage/faults.py), which answers 503 SlowDown past a read rate scaled to this machine. S3
holds a prefix to 5,500 GETs per second; the modelled job's loader workers, all reading one
prefix, get that divided among them, and the proxy holds this machine's one reader to that
share. One count pass of each export through it (THROTTLED_SAMPLES of after: a few seconds)
says how often each was throttled and what the retries cost per sample.

Without moto installed (`pip install 'dsbench[demo]'`) the section is skipped and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from dsbench import fmt, procs
from dsbench.adapters import open_export
from dsbench.adapters.base import Export
from dsbench.analysis.compare import compare
from dsbench.loader.counts import count_pass
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches
from dsbench.model.node import ClusterSpec
from dsbench.model.profiles import PROFILES
from dsbench.storage import accounting, remote
from dsbench.storage import files as store
from dsbench.storage.faults import FaultProxy, Faults
from dsbench.storage.probe import ProbeOptions, probe
from dsbench.storage.server import LocalS3

STORE_SAMPLES = 300  # of after, uploaded as 2 objects each
STORE_ROUNDS = 4  # paired rounds of before and after: enough for their 1.7x and 4x gaps
COUNT_SAMPLES = 100  # after's requests counted over this many samples: 200 GETs
THROTTLED_SAMPLES = 10  # of after read through the throttling proxy: 20 GETs at a few per s
BUCKET = "dsbench-demo"
STORE_BATCH, STORE_SECONDS = 16, 2.0
# The server probed for the cluster model: 100 first bytes (mostly after's small objects, as
# the files are sampled by a hash of their names) and streaming with 1 and 4 readers, ~2 s.
PROBE = ProbeOptions(objects=100, readers=(1, 4), seconds=0.5)

Progress = Callable[[str], None]


def available() -> str | None:
    """Why the object-store section cannot run here, or None when it can."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return "moto is not installed (pip install 'dsbench[demo]')"
    return None


def _first_samples(root: Path, n: int) -> Callable[[Path], bool]:
    """Files of the first `n` sample keys of a per-sample export, and its manifest."""
    keys = sorted({rel.rsplit(".", 1)[0] for rel, _ in store.walk(root)})[:n]
    chosen = set(keys)
    return lambda p: (p.name.startswith(("_", "."))
                      or p.relative_to(root).as_posix().rsplit(".", 1)[0] in chosen)


def _first_shard(root: Path) -> Callable[[Path], bool]:
    first = min(rel for rel, _ in store.walk(root))
    return lambda p: p.name.startswith(("_", ".")) or p.relative_to(root).as_posix() == first


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """The client's environment for the duration, inherited by the spawned loader workers."""
    with procs.environ(values):
        remote.clear_caches()
        try:
            yield
        finally:
            remote.clear_caches()


def worker_share(cluster: ClusterSpec) -> float:
    """GETs per second each of the job's loader workers gets of one prefix's limit."""
    limit = PROFILES["s3"].read_limit_per_prefix_s
    assert limit is not None
    return limit / (cluster.ranks * cluster.workers_per_gpu)


def throttled_counts(exports: dict[str, Export]) -> dict[str, Any]:
    """One count pass of each export (through the throttling proxy the environment points
    at): its requests, retries and throttle answers per sample."""
    out: dict[str, Any] = {}
    for name, export in exports.items():
        counts = count_pass(export, THROTTLED_SAMPLES)
        requests = counts.requests or accounting.Requests()
        out[name] = accounting.summary(requests, counts.samples, remote.client_info())
        out[name]["samples"] = counts.samples
    return out


def measure(paths: dict[str, Path], bench: BenchOptions, progress: Progress,
            cluster: ClusterSpec) -> dict[str, Any]:
    """before and after from the local S3 server: results and their comparison, or why not."""
    why = available()
    if why is not None:
        progress(f"demo: object storage skipped: {why}")
        return {"skipped": why}
    # Fewer rounds than on disk, to keep the demo short; never more than the user asked for.
    # Smaller batches and longer windows: after's objects come at about 100 samples/s from a
    # server sharing the cores, so a window must hold several batches per worker to be more
    # than its edges, and seconds, not one, to average the server's hiccups (1 s rounds of 16
    # varied 17.7% here).
    opts = dataclasses.replace(bench, workers=(1,), rounds=min(bench.rounds, STORE_ROUNDS),
                               sweep_rounds=None, batch_size=min(bench.batch_size, STORE_BATCH),
                               seconds=max(bench.seconds, STORE_SECONDS),
                               count_samples=min(bench.samples_to_count(""), COUNT_SAMPLES),
                               # The exports' instructions are counted on local disk already.
                               exact=False)
    with LocalS3() as server:
        url = server.create_bucket(BUCKET)
        chosen = {"before": _first_shard(paths["before"]),
                  "after": _first_samples(paths["after"], STORE_SAMPLES)}
        # Named so that the runner's warnings about these runs ("before-on-s3: samples/s ...
        # varies") are not read as about the exports on disk.
        where = {name: f"{url}/{name}-on-s3" for name in chosen}
        uploaded = {}
        for name, keep in chosen.items():
            progress(f"demo: uploading {name} to the local S3 server")
            uploaded[name] = server.upload_tree(paths[name], where[name], keep=keep)
        progress(f"demo: measuring before and after on the local S3 server with 1 loader "
                 f"worker, batches of {opts.batch_size}, {opts.rounds} interleaved rounds of "
                 f"{fmt.seconds(opts.seconds)}")
        with _environment(server.env):
            before, after = run_benches([where["before"], where["after"]], opts, progress)
            # After the benches, so that the probe's connections do not warm theirs.
            profile = probe(url, PROBE, progress)
            # Opened (listed, their layout told) here: the proxy sees only the reads.
            opened = {name: open_export(where[name]) for name in chosen}
        share = worker_share(cluster)
        progress(f"demo: reading before and after through a proxy that throttles past "
                 f"{share:.1f} GETs/s, each loader worker's share of S3's limit")
        with FaultProxy(server.endpoint, Faults(throttle_per_s=share)) as proxy, \
                _environment({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint}):
            pushed = throttled_counts(opened)
    return {"server": f"moto {_version('moto')} (S3 API) on 127.0.0.1",
            "uploaded_bytes": uploaded, "probe": profile,
            "results": {"before": before, "after": after},
            "comparison": compare(before, after),
            "throttled": {"limit_per_s": share, "workers": cluster.ranks *
                          cluster.workers_per_gpu, "counts": pushed}}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "?"
