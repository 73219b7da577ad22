"""The storage probe: what the cluster model assumes about storage, measured on real files.

The model charges each file a first-byte latency and each node's bytes a share of a link
(dsbench.model.profiles). This measures both where an export lives, on whatever files are
under the path (an export directory or an object-store prefix):

* first-byte latency: one file after another, a local file opened and its first 4 KiB read
  (each file evicted from the page cache just before, outside the timing, so a read goes to
  the device or the network filesystem), a remote object's first 4 KiB fetched with one range
  GET (the time to its first body byte, as storage.accounting records it). A small range
  rather than the whole object: a shard's body would be timed too, and a stream dropped half
  way would close the connection that the next request then has to open again;
* streaming bandwidth: R readers (threads: reads release the GIL, obstore's I/O runs in Rust)
  each read whole files front to back in 1 MiB reads, largest files first, for a window of
  `seconds`; bandwidth is every byte received over the window's wall time. Remote readers go
  round the files again until the window ends (the client keeps no cache). Local files are
  evicted before each pass and read at most once in it, since a second read would come from
  the page cache; the pass ends early when they run out, and says so.

Files are sampled deterministically (ordered by a hash of their name, so a smaller sample is a
prefix of a larger one, and directories are mixed). Empty files are skipped: they have no first
byte. Nothing here sleeps or logs inside a timed region.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import hashlib
import itertools
import mmap
import os
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dsbench import __version__, stats
from dsbench.errors import DsbenchError
from dsbench.storage import accounting, files, remote
from dsbench.storage.files import Loc, evict
from dsbench.storage.limit import find_limit

KIND = "dsbench-storage-profile"
SCHEMA_VERSION = 1
FIRST_READ_BYTES = 4096
CHUNK_BYTES = 1 << 20
MIN_FOR_P99 = 100  # below this many timings a p99 is one or two values: the max is shown instead
BANDWIDTH_FILES = 20_000  # the largest files read for bandwidth: bounds eviction before a pass


@dataclass(frozen=True)
class ProbeOptions:
    objects: int = 100
    readers: tuple[int, ...] = (1, 2, 4, 8, 16)
    seconds: float = 2.0
    find_limit: bool = False  # also find the request rate the store throttles past (limit.py)

    def __post_init__(self) -> None:
        if self.objects < 1:
            raise DsbenchError(f"--objects must be at least 1, got {self.objects}")
        if not self.readers or min(self.readers) < 1:
            raise DsbenchError("--readers needs reader counts >= 1")
        if not self.seconds > 0:
            raise DsbenchError(f"--seconds must be a positive number, got {self.seconds}")


def public_location(loc: Loc) -> str:
    """Where the files are, as a result may record it: an absolute path, or the URL without
    user information or query (a presigned URL's token is a credential)."""
    if isinstance(loc, Path):
        return str(loc.resolve())
    parts = urlsplit(loc.url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def sample(listed: Sequence[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    """`n` timings' worth of files: in hash order, going round again when there are fewer."""
    ordered = sorted(listed, key=lambda f: hashlib.sha256(f[0].encode()).digest())
    return [ordered[i % len(ordered)] for i in range(n)] if ordered else []


# --- the page cache (local files only) ------------------------------------------------------------

def resident_share(paths: Sequence[Path]) -> float | None:
    """Share of these files' pages in the page cache (mincore(2)); None where it can't be asked.

    tmpfs, or a filesystem that ignores POSIX_FADV_DONTNEED, keeps files resident after an
    eviction: this is how the probe knows, rather than assumes, what it measured.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    page = mmap.PAGESIZE
    resident = total = 0
    for p in dict.fromkeys(paths):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0) if size else None
            if addr is None or addr == ctypes.c_void_p(-1).value:
                continue
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            ok = libc.mincore(addr, size, vec) == 0
            libc.munmap(addr, size)
            if ok:
                resident += sum(b & 1 for b in bytes(vec))
                total += pages
        finally:
            os.close(fd)
    return resident / total if total else None


# --- first-byte latency ---------------------------------------------------------------------------

def _first_read(path: Path) -> float:
    evict(path)  # outside the timing
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, FIRST_READ_BYTES, 0)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def first_byte_latency(root: Loc, timed: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """Time each of `timed` (relative path, size), one after another."""
    if isinstance(root, Path):
        paths = [root / rel for rel, _ in timed]
        before = resident_share(paths)
        for p in paths:
            evict(p)
        after = resident_share(paths)
        try:
            seconds = [_first_read(p) for p in paths]
        except OSError as exc:
            raise DsbenchError(f"cannot read: {exc.strerror or exc}", path=exc.filename) from None
        cache: dict[str, Any] | None = {"resident_before": before, "resident_after_evict": after}
        what = (f"open and read the first {FIRST_READ_BYTES} bytes, each file evicted from the "
                "page cache just before")
    else:
        mark = accounting.totals()
        for rel, size in timed:
            remote.get(root / rel, 0, min(size, FIRST_READ_BYTES))
        seconds = accounting.totals().since(mark).first_byte_s
        cache = None
        what = (f"one range GET of the first {FIRST_READ_BYTES} bytes: the time to its first "
                "body byte")
    d = stats.distribution(seconds)
    return {"what": what, "timed": len(seconds), "distinct_files": len({r for r, _ in timed}),
            "min_s": min(seconds), "p50_s": d["p50"], "mean_s": d["mean"],
            "p99_s": d["p99"] if len(seconds) >= MIN_FOR_P99 else None, "max_s": d["max"],
            "page_cache": cache}


# --- streaming bandwidth --------------------------------------------------------------------------

@dataclass
class _Reader:
    nbytes: int = 0
    files: int = 0
    end: float = 0.0
    error: BaseException | None = None


def _chunks(loc: Loc, buf: bytearray) -> Generator[int, None, None]:
    """Sizes of the chunks a whole-file read receives."""
    if isinstance(loc, Path):
        with open(loc, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                yield n
        return
    chunks = remote.stream(loc, CHUNK_BYTES)
    try:
        for chunk in chunks:
            yield len(chunk)
    finally:
        chunks.close()  # type: ignore[attr-defined]  # a generator: ends (and counts) the GET


def bandwidth_pass(root: Loc, order: Sequence[tuple[str, int]], readers: int,
                   seconds: float) -> dict[str, Any]:
    """`readers` threads reading whole files from `order` for `seconds`: bytes over wall time."""
    local = isinstance(root, Path)
    if isinstance(root, Path):
        for rel, _ in order:
            evict(root / rel)  # before the window: every byte read in it is a cold one
    take = itertools.count()
    lock = threading.Lock()
    stop = threading.Event()
    mark = accounting.totals()
    start = threading.Barrier(readers + 1)
    window = {"deadline": 0.0}
    state = [_Reader() for _ in range(readers)]

    def work(me: _Reader) -> None:
        buf = bytearray(CHUNK_BYTES)
        start.wait()
        deadline = window["deadline"]
        try:
            while not stop.is_set() and time.perf_counter() < deadline:
                with lock:
                    i = next(take)
                if local and i >= len(order):
                    break
                me.files += 1
                with contextlib.closing(_chunks(root / order[i % len(order)][0], buf)) as it:
                    for n in it:
                        me.nbytes += n
                        if time.perf_counter() >= deadline:
                            break
        except BaseException as exc:  # re-raised by the caller, in the main thread
            me.error = exc
            stop.set()
        me.end = time.perf_counter()

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in state]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    window["deadline"] = t0 + seconds
    start.wait()
    for t in threads:
        t.join()
    for s in state:
        if s.error is not None:
            if isinstance(s.error, OSError):
                raise DsbenchError(f"cannot read: {s.error.strerror or s.error}",
                                   path=s.error.filename) from None
            raise s.error
    elapsed = max(s.end for s in state) - t0
    nbytes = sum(s.nbytes for s in state)
    opened = sum(s.files for s in state)
    # Remote: how long a request waited for its first byte with this many in flight.
    waits = accounting.totals().since(mark).first_byte_s
    return {"readers": readers, "bytes": nbytes, "files": opened, "seconds": elapsed,
            "first_byte_p50_s": stats.distribution(waits)["p50"] if waits else None,
            "bytes_per_s": nbytes / elapsed if elapsed > 0 else 0.0,
            "ended": "files" if local and opened >= len(order) and elapsed < seconds
            else "time"}


# --- the whole probe ------------------------------------------------------------------------------

@dataclass
class Listing:
    root: Loc  # the directory or prefix the files are relative to
    files: list[tuple[str, int]] = field(default_factory=list)


def list_files(text: str) -> Listing:
    """Every file under `text` (a directory, prefix, file or object), with its size."""
    loc = files.location(text)
    if isinstance(loc, Path):
        try:
            if loc.is_file():
                return Listing(loc.parent, [(loc.name, loc.stat().st_size)])
            if not loc.is_dir():
                raise DsbenchError("no such file or directory", path=loc)
            return Listing(loc, list(files.walk(loc)))
        except OSError as exc:  # a directory it may not list
            raise DsbenchError(f"cannot list: {exc.strerror or exc}",
                               path=exc.filename or loc) from None
    found = list(files.walk(loc))
    if found:
        return Listing(loc, found)
    size = remote.head_size(loc)
    if size is None:
        raise DsbenchError("no objects under this prefix", path=loc)
    return Listing(loc.parent, [(loc.name, size)])


def probe(text: str, opts: ProbeOptions,
          progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The storage-profile document (without its `machine` block, which the command adds)."""
    loc = files.location(text)
    if opts.find_limit and not files.is_remote(loc):  # before anything is measured
        raise DsbenchError("--find-limit is for an object store: a local filesystem has no "
                           "request limit to find", path=loc)
    listing = list_files(text)
    nonempty = [f for f in listing.files if f[1] > 0]
    if not nonempty:
        raise DsbenchError("no non-empty files to probe (an empty file has no first byte)",
                           path=loc)
    timed = sample(nonempty, opts.objects)
    progress(f"probe: timing the first byte of {len(timed)} reads over "
             f"{len({r for r, _ in timed})} file(s)")
    latency = first_byte_latency(listing.root, timed)
    order = sorted(nonempty, key=lambda f: (-f[1], f[0]))[:BANDWIDTH_FILES]
    runs = []
    for r in opts.readers:
        progress(f"probe: streaming with {r} reader(s) for {opts.seconds:g} s")
        run = bandwidth_pass(listing.root, order, r, opts.seconds)
        # How much of the readers' time first bytes alone account for, at the p50 measured
        # one request at a time (a lower bound: a busier store answers later).
        run["latency_share"] = min(1.0, run["files"] * latency["p50_s"]
                                   / (r * run["seconds"])) if run["seconds"] > 0 else 0.0
        runs.append(run)
    best = max(runs, key=lambda run: run["bytes_per_s"])
    limit = find_limit(listing.root, timed, opts.seconds, progress) if opts.find_limit \
        else None
    return {
        "schema_version": SCHEMA_VERSION, "kind": KIND,
        "created_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dsbench_version": __version__, "location": public_location(loc),
        "remote": files.is_remote(loc),
        "client": remote.client_info() if files.is_remote(loc) else None, "machine": None,
        "files": {"listed": len(listing.files), "bytes": sum(s for _, s in listing.files),
                  "empty": len(listing.files) - len(nonempty)},
        "latency": latency,
        "bandwidth": {
            "what": ("whole files in 1 MiB reads, largest first, by concurrent readers; every "
                     "byte received over the window's wall time"
                     + ("; files evicted from the page cache before each pass and read at most "
                        "once in it" if isinstance(listing.root, Path) else
                        "; readers go round the files until the window ends")),
            "chunk_bytes": CHUNK_BYTES, "files": len(order), "window_s": opts.seconds,
            "runs": runs, "best": {"readers": best["readers"],
                                   "bytes_per_s": best["bytes_per_s"]}},
        "limit": limit, "notes": notes(latency, runs, opts),
    }


def notes(latency: dict[str, Any], runs: Sequence[dict[str, Any]], opts: ProbeOptions
          ) -> list[str]:
    """What a reader of the figures should know about this run in particular."""
    out = []
    if latency["p99_s"] is None:
        out.append(f"only {latency['timed']} timings: no p99 (it needs {MIN_FOR_P99}); the "
                   "max is the tail shown")
    cache = latency["page_cache"]
    if cache and (cache["resident_after_evict"] or 0) > 0.5:
        out.append("the files stayed in the page cache after eviction (tmpfs, or a filesystem "
                   "that ignores the advice): the local figures are of memory, not storage")
    short = [r for r in runs if r["ended"] == "files"]
    if short:
        out.append("the files ran out before the window ended with "
                   f"{', '.join(str(r['readers']) for r in short)} reader(s): those figures "
                   "cover less time than --seconds asked for, so they are rougher (probe more "
                   "files for a full window)")
    best = max(runs, key=lambda r: r["bytes_per_s"])
    if best["latency_share"] > 0.5:
        out.append(f"at the best reader count first-byte latency alone takes "
                   f"{100 * best['latency_share']:.0f}% of the readers' time: the files are "
                   "small, so this bandwidth is bounded by requests, not by the link (probe "
                   "larger files, such as shards, for the link)")
    rate = {r["readers"]: r["files"] / r["seconds"] for r in runs if r["seconds"] > 0}
    levelled = False
    if len(rate) >= 3:
        peak = max(rate.values())
        first = min(n for n, x in rate.items() if x >= 0.85 * peak)
        levelled = first < max(rate) / 2
        if levelled:
            out.append(f"requests level off at about {peak:.0f} files/s from {first} "
                       f"reader{'s' if first > 1 else ''} on: the store, or this machine and "
                       "its client, serves no faster, and more readers only wait longer")
    top = max(runs, key=lambda r: r["readers"])
    if best is top and len(runs) > 1 and top["readers"] > 1 and not levelled:
        below = max((r for r in runs if r is not top), key=lambda r: r["bytes_per_s"])
        # 20%: on a busy machine two windows differ by 10% with nothing changed.
        if top["bytes_per_s"] > 1.2 * below["bytes_per_s"]:
            out.append(f"bandwidth still rising at {top['readers']} readers: more --readers "
                       "may find more")
    return out
