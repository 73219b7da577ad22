"""Retries of object-store requests: one stated policy, and every retry counted.

The client library's own retries are turned off (remote.py makes its store with none), because
a retry it makes is invisible: the request just takes longer. dsbench retries instead, so each
retry, each throttle answer (503 SlowDown, 429) and the time they added are counted with the
request (storage/accounting.py) and reach the result per sample.

What is retried: an answer 500-599 or 429, a connection that failed or was reset, a body that
ended early, a read that timed out. What is not: any other 4xx (no such object, access denied),
which a retry cannot mend. The wait before retry n is `backoff_s x 2^(n-1)`, capped at
`max_backoff_s`, half of it fixed and half drawn at random ("equal jitter", so readers that
were throttled together do not all return together). A request that still fails after
`retries` retries, or that would wait past `deadline_s` from its first attempt, is the sample's
error, naming the object and the last answer.

The policy travels to worker processes in the environment (DSBENCH_STORE_RETRY), as the
store's address does (AWS_ENDPOINT_URL).
"""

from __future__ import annotations

import functools
import os
import random
import re
from dataclasses import asdict, dataclass

from dsbench.errors import DsbenchError

ENV = "DSBENCH_STORE_RETRY"
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>(\w+)</Code>")
# obstore's words for a request that never got a whole answer (reqwest and hyper underneath).
# Not the bare word "timeout": every obstore error names its retry_timeout setting.
_NETWORK = ("error sending request", "body error", "connection reset", "connectionreset",
            "connection refused", "connectionrefused", "timed out", "timedout",
            "incompletebody", "unexpectedeof", "broken pipe")
_CONNECT = re.compile(r"kind: Connect\b,|ConnectError|Connection refused")


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 4
    backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    deadline_s: float = 30.0

    def __post_init__(self) -> None:
        if not (isinstance(self.retries, int) and 0 <= self.retries <= 100):
            raise DsbenchError(f"--retries must be an integer from 0 to 100, not {self.retries}")
        for name, flag in (("backoff_s", "--backoff"), ("max_backoff_s", "--backoff"),
                           ("deadline_s", "--request-deadline")):
            value = getattr(self, name)
            if not (value >= 0 and value < float("inf")):
                raise DsbenchError(f"{flag} must be a finite number of seconds >= 0, not {value}")
        if self.deadline_s <= 0:
            raise DsbenchError(f"--request-deadline must be > 0 s, not {self.deadline_s}")

    def wait_s(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number `retry` (1, 2, ...)."""
        full = min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1))
        return full / 2 + rng.uniform(0, full / 2)

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    def describe(self) -> str:
        return (f"up to {self.retries} retries, waits from {self.backoff_s:g} s doubling to "
                f"{self.max_backoff_s:g} s, {self.deadline_s:g} s per request in all")


def use(policy: RetryPolicy) -> None:
    """Make `policy` this process's and its future children's (the default: no variable)."""
    if policy == RetryPolicy():
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = ",".join(f"{k}={v}" for k, v in asdict(policy).items())


def policy() -> RetryPolicy:
    return _parse(os.environ.get(ENV, ""))


@functools.cache
def _parse(text: str) -> RetryPolicy:
    if not text:
        return RetryPolicy()
    try:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return RetryPolicy(retries=int(fields.pop("retries")),
                           **{k: float(v) for k, v in fields.items()})
    except (ValueError, KeyError, TypeError):
        raise DsbenchError(f"{ENV}={text!r}: expected retries=N,backoff_s=S,max_backoff_s=S,"
                           "deadline_s=S") from None


def transient(exc: BaseException) -> str | None:
    """'throttled', 'server' or 'network' when a retry may succeed; None when it cannot."""
    if isinstance(exc, (FileNotFoundError, PermissionError, DsbenchError)):
        return None
    text = str(exc)
    status = _STATUS.search(text)
    code = _CODE.search(text)
    if (code and code.group(1) in ("SlowDown", "Throttling", "RequestLimitExceeded")) or \
            (status and status.group(1) in ("429", "503")):
        return "throttled"
    if status:
        return "server" if status.group(1).startswith("5") else None
    lowered = text.lower()
    return "network" if any(word in lowered for word in _NETWORK) else None


def cannot_connect(text: str) -> bool:
    """Whether an obstore error says no connection was made (not one that broke)."""
    return _CONNECT.search(text) is not None


def answer(exc: BaseException) -> str:
    """The last answer of a request that failed after its retries, in a few words."""
    text = str(exc)
    status, code = _STATUS.search(text), _CODE.search(text)
    if status:
        return f"the store answered HTTP {status.group(1)}" + (f" {code.group(1)}" if code
                                                               else "")
    if "timed out" in text.lower() or "TimedOut" in text:
        return "the request timed out"
    return "the connection broke (reset, or the body cut short)"
