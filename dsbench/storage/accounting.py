"""Every request to an object store, counted in the process that made it.

The client layer (remote.py) records each request here: its kind (GET of a whole object, a
RANGE GET, HEAD, LIST), the bytes of its body, the time to its first body byte and the client
CPU it cost (this process's getrusage delta across the call: the client's I/O threads are in
the process, so a thread clock would miss them; exact while nothing else in the process runs,
as in the count pass). The loader reads the totals before and after what it measures.
"""

from __future__ import annotations

import resource
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dsbench import stats

KINDS = ("GET", "RANGE", "HEAD", "LIST")


def process_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Requests:
    """Counts so far; `first_byte_s` and `cpu_s` keep one entry per data request (GET, RANGE)."""

    count: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    body_bytes: int = 0
    first_byte_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    retries: int = 0  # attempts after a request's first (storage/retry.py)
    throttled: int = 0  # attempts answered 503 SlowDown or 429
    failed: int = 0  # requests that failed after their retries
    retry_s: float = 0.0  # time from requests' first attempts to their last ones

    def copy(self) -> Requests:
        return Requests(dict(self.count), self.body_bytes, list(self.first_byte_s),
                        list(self.cpu_s), self.retries, self.throttled, self.failed,
                        self.retry_s)

    def since(self, before: Requests) -> Requests:
        """What was requested after `before` (a copy taken earlier)."""
        return Requests({k: self.count[k] - before.count[k] for k in KINDS},
                        self.body_bytes - before.body_bytes,
                        self.first_byte_s[len(before.first_byte_s):],
                        self.cpu_s[len(before.cpu_s):], self.retries - before.retries,
                        self.throttled - before.throttled, self.failed - before.failed,
                        self.retry_s - before.retry_s)

    @property
    def data_requests(self) -> int:
        return self.count["GET"] + self.count["RANGE"]


_totals = Requests()
# The probe's readers are threads of one process: each record is one update of several fields.
_lock = threading.Lock()


def record(kind: str, nbytes: int, first_byte_s: float | None, cpu_s: float, n: int = 1
           ) -> None:
    """One request (or `n` LIST pages) made by this process."""
    with _lock:
        _totals.count[kind] += n
        _totals.body_bytes += nbytes
        if kind in ("GET", "RANGE"):
            _totals.first_byte_s.append(first_byte_s or 0.0)
            _totals.cpu_s.append(cpu_s)


def retried(retries: int, throttled: int, seconds: float, failed: bool) -> None:
    """What one request's retries cost: its retries, throttle answers and the time from its
    first attempt to its last; `failed` when it never succeeded."""
    with _lock:
        _totals.retries += retries
        _totals.throttled += throttled
        _totals.retry_s += seconds
        _totals.failed += failed


def body_bytes() -> int:
    """Body bytes received so far (cheap: the loader reads it per batch)."""
    return _totals.body_bytes


def totals() -> Requests:
    """A snapshot of the counts so far (a copy: later requests do not change it)."""
    with _lock:
        return _totals.copy()


def summary(requests: Requests, samples: int, client: dict[str, Any]) -> Any:
    """Per-sample request counts and the requests' latency and CPU, for a result document
    (results.types.Requests; this stage comes before results, so it is built as a dict)."""
    per = 1 / samples if samples else 0.0
    out: dict[str, Any] = {**client, "method": "whole units",
        "requests_per_sample": requests.data_requests * per,
        "get_per_sample": requests.count["GET"] * per,
        "range_get_per_sample": requests.count["RANGE"] * per,
        "head_per_sample": requests.count["HEAD"] * per,
        "list_per_sample": requests.count["LIST"] * per,
        "requests": dict(requests.count),
        "body_bytes_per_sample": requests.body_bytes * per,
        "retries_per_sample": requests.retries * per,
        "throttled_per_sample": requests.throttled * per,
        "retry_s_per_sample": requests.retry_s * per,
        "failed_requests": requests.failed,
    }
    if requests.first_byte_s:
        ttfb = stats.distribution(requests.first_byte_s)
        out |= {"first_byte_s": {"p50": ttfb["p50"], "p99": ttfb["p99"]},
                "client_cpu_s_per_request": _mean(requests.cpu_s)}
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
