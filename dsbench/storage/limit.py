"""A store's request limit, found: the read rate past which it answers 503 SlowDown.

`dsbench probe PATH --find-limit` sends small range GETs (the first 4 KiB of the probe's
files) at a paced rate, without retries, so that every throttle answer is seen and counted:

1. The rate starts at START_PER_S and doubles each step of `seconds` while fewer than
   THROTTLED_SHARE of a step's requests are throttled.
2. The first step past that is followed by one more at twice its rate, which keeps the store
   saturated. A store lets a burst through (S3 while a prefix scales; the fault proxy holds
   one second of reads), so the first half of that step spends the allowance; the limit is the
   rate of requests answered in its second half, which is what the store sustains.
3. A step whose requests could not be sent at the asked rate (this machine or its client is
   the limit) ends the search: the store served all that was asked, and the figure says so.

Requests are issued on a schedule (the i-th at start + i / rate) by a pool of threads; a thread
waits for its request's time before sending it. The waits pace the load; the figures are
counts of answers, not timings of the waits.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dsbench.errors import DsbenchError
from dsbench.storage import remote, retry
from dsbench.storage.files import Loc
from dsbench.storage.remote import RemotePath

START_PER_S = 10.0
MAX_PER_S = 10_000.0
THROTTLED_SHARE = 0.01
MAX_THREADS = 64
FIRST_BYTES = 4096


def _attempt(path: RemotePath) -> str:
    """One range GET without retries: 'ok' or 'throttled'; any other failure is an error."""
    try:
        remote.attempt_get(path, {"range": (0, FIRST_BYTES)})
        return "ok"
    except Exception as exc:  # obstore's errors
        if retry.transient(exc) == "throttled":
            return "throttled"
        raise DsbenchError(remote.describe(exc), path=path) from None


def paced_step(paths: Sequence[RemotePath], rate: float, seconds: float,
               send: Callable[[RemotePath], str] = _attempt) -> dict[str, Any]:
    """Requests at `rate` per second for `seconds`: how many went out, how many were throttled,
    and how many were answered in the step's second half."""
    total = max(1, round(rate * seconds))
    threads = min(MAX_THREADS, total)
    take = itertools.count()
    lock = threading.Lock()
    answers: list[tuple[float, str]] = []  # (when it was sent, relative to start; answer)
    errors: list[BaseException] = []
    start = time.perf_counter() + 0.05  # every thread waits for its first slot

    def work() -> None:
        while not errors:
            with lock:
                i = next(take)
            if i >= total:
                return
            due = start + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)  # pacing: the load's schedule, not inside a timing
            sent = time.perf_counter() - start
            try:
                answer = send(paths[i % len(paths)])
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)
                return
            with lock:
                answers.append((sent, answer))

    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    elapsed = max(s for s, _ in answers) if answers else seconds
    late = [a for s, a in answers if s >= seconds / 2]
    return {"asked_per_s": rate, "sent": len(answers),
            "sent_per_s": len(answers) / elapsed if elapsed > 0 else 0.0,
            "throttled": sum(a == "throttled" for _, a in answers),
            "throttled_share": sum(a == "throttled" for _, a in answers) / len(answers),
            "answered_late_per_s": sum(a == "ok" for a in late) / (seconds / 2)}


def find_limit(root: Loc, files: Sequence[tuple[str, int]], seconds: float,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The rate the store sustains before it throttles, found as the module says."""
    assert isinstance(root, RemotePath), "probe refuses --find-limit on a local path"
    paths = [root / rel for rel, _ in files]
    steps: list[dict[str, Any]] = []
    rate = START_PER_S
    while rate <= MAX_PER_S:
        progress(f"probe: {rate:g} requests/s for {seconds:g} s")
        step = paced_step(paths, rate, seconds)
        steps.append(step)
        if step["throttled_share"] >= THROTTLED_SHARE:
            progress(f"probe: throttled at {rate:g}/s; saturating at {2 * rate:g}/s")
            saturated = paced_step(paths, 2 * rate, seconds)
            steps.append(saturated)
            return _found(steps, saturated["answered_late_per_s"], seconds)
        if step["sent_per_s"] < 0.8 * rate:
            return _not_found(steps, f"this machine sent at most {step['sent_per_s']:.0f} "
                                     "requests/s and none was throttled: the store's limit is "
                                     "above what one client here can ask", seconds)
        rate *= 2
    return _not_found(steps, f"no throttling up to {MAX_PER_S:g} requests/s", seconds)


def _found(steps: list[dict[str, Any]], limit: float, seconds: float) -> dict[str, Any]:
    return {"what": _WHAT.format(seconds=seconds), "found": True,
            "limit_per_s": limit, "reason": None, "steps": steps}


def _not_found(steps: list[dict[str, Any]], reason: str, seconds: float) -> dict[str, Any]:
    return {"what": _WHAT.format(seconds=seconds), "found": False,
            "limit_per_s": None, "reason": reason, "steps": steps}


_WHAT = ("range GETs of 4 KiB without retries at a doubling rate, {seconds:g} s per step, until "
         f"{THROTTLED_SHARE:.0%} are throttled; then a step at twice that rate, whose second "
         "half's answered requests per second are the limit the store sustains past its burst")
