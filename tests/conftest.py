"""Shared test helpers: tiny export definitions, and exports written from them on the fly."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, parse_spec
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches
from dsbench.results.types import BenchResult
from dsbench.storage.server import LocalS3

# Tests import their helpers (resultdocs) as top-level modules.
sys.path.insert(0, str(Path(__file__).parent))
# The exact pass runs the pipeline under valgrind, seconds per export: the tests of it ask for
# it (--exact, exact=True); the rest measure other things, without it, as this makes the
# default (set here, so that the commands tests start as processes inherit it).
os.environ.setdefault("DSBENCH_EXACT", "0")


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A test that fails before it stops a dsbench run it started would leave the run going,
    and the tests after it in this process would count its processes and memory as theirs: a
    run a test started and left is ended after it, with a warning naming it (the tests of
    cleanup assert their own)."""
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    yield
    deadline = time.monotonic() + 5.0
    while True:
        left = [p for p in me.children() if p.pid not in before and _running(p)
                and not _kept(p)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    killed = []
    for p in left:
        with contextlib.suppress(psutil.Error):
            warnings.warn(f"a test left a process running: {' '.join(p.cmdline())[:200]}",
                          stacklevel=1)
            for q in [*p.children(recursive=True), p]:
                q.kill()
                killed.append(q)
    psutil.wait_procs(killed, timeout=5)


def _running(p: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return p.status() != psutil.STATUS_ZOMBIE
    return False


def _kept(p: psutil.Process) -> bool:
    """Only dsbench's own runs are ended: a session fixture's server may start inside a test."""
    with contextlib.suppress(psutil.Error):
        return " -m dsbench" not in " ".join(p.cmdline())
    return True


TINY_IMAGE = {"codec": "jpeg", "sizes": "fixed", "width": 48, "height": 32, "quality": 80}


def tiny_spec(layout: str, fields: dict[str, Any] | None = None, **extra: Any) -> ExportSpec:
    """A small definition of `layout` with a label (and whatever `fields` adds): fast to write
    and to read, for tests that measure real exports."""
    data: dict[str, Any] = {"name": f"tiny-{layout}", "layout": layout, "image": TINY_IMAGE,
                            "fields": {"label": {"type": "int", "classes": 10}, **(fields or {})}}
    if layout in ("files", "wds"):
        data.setdefault("fields_as", "json" if layout == "files" else "members")
    data.update(extra)
    return parse_spec(data, f"tiny-{layout}")


def write_export(root: Path, layout: str, samples: int, **extra: Any) -> Path:
    out = root / f"{layout}-{samples}"
    generate(tiny_spec(layout, **extra), out, samples=samples, jobs=1)
    return out


def once_per_run(factory: pytest.TempPathFactory, name: str,
                 make: Callable[[Path], None]) -> Path:
    """A directory that `make` fills once per test run. The suite runs in several processes
    (pytest-xdist), each with its own session: the first to ask makes it under a lock in the
    run's shared temporary directory and the others wait for it and reuse it, instead of each
    spending the same seconds again. Run in one process, it is that session's own."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = factory.mktemp(name)
        make(out)
        return out
    root = factory.getbasetemp().parent  # this run's, shared by its workers
    out, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # what a worker that failed making it left
            out.mkdir()
            make(out)
            done.touch()
    return out


TINY = {"before": ("wds", {"shard_samples": 100}),
        "after": ("files", {"fields": {"embedding": {"type": "embedding", "dim": 64,
                                                     "encoding": "json"}}}),
        "arrow": ("arrow", {"shard_samples": 100})}


@pytest.fixture(scope="session")
def tiny_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A before-like WebDataset export (shards of 100), an after-like per-sample one and an
    arrow candidate (shards of 100), as in the demo."""
    def make(root: Path) -> None:
        for layout, extra in TINY.values():
            write_export(root, layout, 200, **extra)

    root = once_per_run(tmp_path_factory, "tiny", make)
    return {name: root / f"{layout}-200" for name, (layout, _) in TINY.items()}


def quick(seconds: float = 0.2, rounds: int = 3, workers: tuple[int, ...] = (1,),
          **extra: Any) -> BenchOptions:
    """Short windows: rough timings, exact counts."""
    return BenchOptions(workers=workers, batch_size=8, seconds=seconds, rounds=rounds,
                        warmup_batches=1, **extra)


@pytest.fixture(scope="session")
def measured(tmp_path_factory: pytest.TempPathFactory,
             tiny_exports: dict[str, Path]) -> dict[str, BenchResult]:
    """Documents the real runner wrote for the tiny exports, measured once per run in one
    interleaved run: before, after, arrow, and before a second time ("before_again"), so that
    compare, gate, the demo's verdict and the report also see real noise and real counts."""
    names = ("before", "after", "arrow", "before_again")

    def make(root: Path) -> None:
        paths = [tiny_exports[n] for n in names[:3]] + [tiny_exports["before"]]
        for name, doc in zip(names, run_benches(paths, quick()), strict=True):
            (root / f"{name}.json").write_text(json.dumps(doc))

    root = once_per_run(tmp_path_factory, "measured", make)
    return {name: json.loads((root / f"{name}.json").read_text()) for name in names}


@pytest.fixture(scope="module")
def s3_server() -> Iterator[LocalS3]:
    """A local S3-compatible server (moto) on a free port for a test module, stopped after it
    (so that other modules' checks for stray child processes see none). Tests make their own
    buckets; `s3_env` points the client at it."""
    with LocalS3() as server:
        yield server


@pytest.fixture
def s3_env(s3_server: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalS3]:
    """The environment that reaches `s3_server`, set for this test (and the workers it spawns);
    the client's per-process caches are cleared so that nothing from another test is reused."""
    from dsbench.storage import remote

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    remote.clear_caches()
    yield s3_server
    remote.clear_caches()


@pytest.fixture()
def forked_writers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers forked whatever else this test process has loaded: a test that plants a fault or
    a setting in this process for the writers to inherit. (Another test may have loaded Lance
    here, which would otherwise have the writers spawned, without the plant; the writers these
    tests start never reach Lance.)"""
    from dsbench import procs

    monkeypatch.setattr(procs, "fork_safe", lambda: True)


@pytest.fixture(scope="module")
def private_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The libraries' temporaries and caches (MDS's file locks, the Hugging Face cache) in a
    directory of this module's, so that nothing of theirs is left behind."""
    from dsbench.loader.native.session import environment

    tmp = tmp_path_factory.mktemp("libtmp")
    with environment(tmp):  # as a native round points them
        yield tmp
