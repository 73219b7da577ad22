"""A native reader's round: where the library's temporaries go, and how its workers start.

The libraries write temporaries and caches where the environment says (TMPDIR; the Hugging
Face cache under HF_HOME): a directory private to the run, `dsbench-native-<owner>-...` under
the system's temporary directory, takes them, and is removed when the run ends; a round's own
files (a cache of decompressed shards) go in a subdirectory removed with the round,
as is the shared memory the library made (`Reader.close`).

Workers are forked from a server process that imported the library once (forks.py): MosaicML
Streaming takes 7 s to import here. Started by a native round, the server takes the private
directory's environment; Lance, not fork-safe once imported, is imported by each worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import fmt, procs
from dsbench.adapters import base
from dsbench.loader import forks, orphans
from dsbench.loader.native import READERS, NativeOpener, Shuffle, get, view_of

# Environment variables a library's caches and temporaries follow.
_CACHE_ENV = ("TMPDIR", "HF_HOME", "HF_DATASETS_CACHE")
# The module each reader imports, preloaded into the server its workers are forked from.
_PRELOAD = {"mds": "streaming", "litdata": "litdata", "hf": "datasets", "tfrecord": "tfrecord",
            "wds": "webdataset", "megatron": "megatron.core.datasets.indexed_dataset"}
_private: Path | None = None


def private_dir() -> Path:
    """The run's private temporary directory, made by its first native round."""
    global _private
    if _private is None or not _private.is_dir():
        orphans.clear_once(fmt.progress)  # a killed run's directory names its process
        _private = Path(tempfile.mkdtemp(prefix=f"dsbench-native-{orphans.owner()}-"))
    return _private


@contextlib.contextmanager
def removed_after() -> Iterator[None]:
    """Remove the private directory when the run ends (after its server has stopped)."""
    global _private
    try:
        yield
    finally:
        if _private is not None:
            shutil.rmtree(_private, ignore_errors=True)
            _private = None


@contextlib.contextmanager
def environment(root: Path) -> Iterator[None]:
    """TMPDIR and the caches pointed into `root` (and tempfile's own idea of it), restored
    after. torch's compiler cache is pinned where it would be without this: torch remembers
    the temporary directory it first saw."""
    values = dict.fromkeys(_CACHE_ENV, str(root))
    values["TORCHINDUCTOR_CACHE_DIR"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), f"torchinductor_{_user()}")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "S3_ENDPOINT_URL" not in os.environ:
        # MosaicML Streaming's S3 client takes its endpoint from S3_ENDPOINT_URL only.
        values["S3_ENDPOINT_URL"] = endpoint
    if endpoint and endpoint.startswith("http://") and "AWS_ALLOW_HTTP" not in os.environ:
        # litdata's client (obstore) refuses a plain-http endpoint (a local server) unless
        # told, as dsbench's own client is.
        values["AWS_ALLOW_HTTP"] = "true"
    saved_tempdir = tempfile.tempdir
    with procs.environ(values):
        tempfile.tempdir = str(root)
        try:
            yield
        finally:
            tempfile.tempdir = saved_tempdir


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def reader_context(layout: str) -> Any:
    # torch, which every DataLoader worker needs; the library, where it is fork-safe.
    preload = ["torch", "dsbench.loader.torch_source", READERS[layout]]
    if layout in _PRELOAD:
        preload.append(_PRELOAD[layout])
    return forks.context(preload)


@dataclass(frozen=True)
class Session:
    opener: NativeOpener
    context: Any  # the multiprocessing context the DataLoader's workers start from


@contextlib.contextmanager
def session(export: base.Export, batch_size: int, options: dict[str, Any],
            shuffle: Shuffle | None = None) -> Iterator[Session]:
    """A round's native reader: the library's dataset built in the main process (as a job
    builds it), released at the end however the round ends."""
    reader = get(export.layout)
    root = private_dir()
    prepared: Any = None
    # multiprocessing's own temporary directory (the server's socket) in the usual place, made
    # before TMPDIR points into ours, which is removed at exit before multiprocessing's is.
    multiprocessing.util.get_temp_dir()
    with environment(root):
        # Started here, the server (and its workers) take the private directory's
        # environment.
        context = reader_context(export.layout)
        tmp = Path(tempfile.mkdtemp(prefix="round-", dir=root))
        try:
            prepared = reader.prepare(export, batch_size, tmp, options, shuffle)
            yield Session(NativeOpener(str(export.path), export.layout, prepared,
                                       view_of(export), batch_size), context)
        finally:
            try:
                if prepared is not None:
                    reader.close(prepared)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
