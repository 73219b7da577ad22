"""Start a job's ranks on this machine through torch's elastic launcher, and say how it ended.

The same agent torchrun runs, in this process: a c10d rendezvous on a free local port (what
`torchrun --standalone` does), no restarts, each rank `python -m dsbench.job.rank CFG` in its own
process group with its output in a log file. Rank 0 writes the result document into a private
temporary directory, which goes when the job does, however it ends (a launcher killed outright
leaves it; the next launch removes it).

A failed job is one line naming the rank at fault. When a rank dies, its peers' collectives fail
at once (the dead process's connections close) and they exit PEER_LOST; the agent notices the
dead rank at its next poll and stops the rest. The root cause is the first failure that is not
PEER_LOST, in the order the agent saw them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from dsbench import atomic
from dsbench.adapters.tokenizer import TokenizerSpec
from dsbench.errors import DsbenchError, Interrupted
from dsbench.job.options import JobOptions
from dsbench.job.rank import PEER_LOST, RANK_ERROR

RENDEZVOUS_TIMEOUT_S = 120  # every rank imports torch first: seconds each on a busy machine
MONITOR_INTERVAL_S = 0.1
TMP_PREFIX = "dsbench-job-"


def quiet_torch_cpp() -> None:
    """torch's C++ side logs warnings only from ERROR up: a node that lost the rendezvous's host
    would print the store's warning with a stack trace of C++ frames, before dsbench's one line
    says what happened. c10 reads the level once, when torch is first imported: this must come
    before anything imports torch (installed.require does, to check its version). A level the
    user set stays."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def _quiet_torch_logging() -> None:
    """The agent logs every start and stop; dsbench prints one line of its own instead.

    torch's loggers take their level from LOGLEVEL when created, and each sets its own, so the
    variable is set around the import and the ones that exist already are silenced too.
    """
    before = os.environ.get("LOGLEVEL")
    os.environ["LOGLEVEL"] = "CRITICAL"
    quiet_torch_cpp()
    try:
        import torch.distributed.launcher.api  # noqa: F401
    finally:
        if before is None:
            os.environ.pop("LOGLEVEL", None)
        else:
            os.environ["LOGLEVEL"] = before
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith(("torch.distributed", "torchelastic")) and \
                isinstance(logger, logging.Logger):
            logger.setLevel(logging.CRITICAL)


def _last_line(path: Path) -> str | None:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1].strip() if lines else None


def _rank_log(failure: Any, rank: int, logs: Path | None, per_node: int) -> Path | None:
    """The rank's stderr log: beside the error file torch assigned it, or, when the rank died
    before torch's error handling was set up (an import that failed), found under `logs`
    (LOGS/RUN/attempt_N/LOCAL_RANK/stderr.log; a node's ranks are consecutive, `per_node` of
    them, so the local rank is the rank modulo that)."""
    if failure.error_file and Path(failure.error_file).parent.is_dir():
        return Path(failure.error_file).parent / "stderr.log"
    if logs is None:
        return None
    return next(iter(sorted(logs.glob(f"*/attempt_*/{rank % per_node}/stderr.log"))), None)


def describe(failures: Mapping[int, Any], ranks: int, logs: Path | None = None,
             nodes: int = 1) -> str:
    """One line: which rank failed first and how, and how many others were stopped; in a job
    of several nodes whose ranks here only lost their peers, that another node went."""
    items = list(failures.items())
    if nodes > 1 and all(f.exitcode == PEER_LOST for _, f in items):
        here = ("ranks " if len(items) > 1 else "rank ") + ", ".join(str(r) for r, _ in items)
        first = _rank_log(items[0][1], items[0][0], logs, ranks)
        said = _last_line(first) if first else None
        return (f"{_node_lost(nodes)}: this node's {here} lost the job's other ranks "
                f"({_peer_error(said)})")
    root_rank, root = next(((r, f) for r, f in items if f.exitcode != PEER_LOST), items[0])
    log = _rank_log(root, root_rank, logs, ranks)
    said = _last_line(log) if log else None
    if root.exitcode < 0:
        how = f"was killed by {root.signal_name()}"
    elif root.exitcode == RANK_ERROR:
        prefix = f"dsbench job: error: rank {root_rank}: "
        how = f"failed: {said.removeprefix(prefix)}" if said and said.startswith(prefix) \
            else f"exited with code {root.exitcode}"
    else:
        how = f"exited with code {root.exitcode}" + (f" ({said[:200]})" if said else "")
    others = ranks - 1
    where = " on this node" if nodes > 1 else ""
    stopped = (f"; the other {others} rank{'s' if others != 1 else ''}{where} stopped"
               if others else "")
    return f"rank {root_rank} (pid {root.pid}) {how}{stopped}"


def _node_lost(nodes: int) -> str:
    return (f"{'the other node' if nodes == 2 else 'another node'} of the job stopped or "
            "became unreachable")


def _peer_error(said: str | None) -> str:
    """What a rank said when it lost its peers, as gloo put it, without the source path of the
    line that raised it and the advice after the first sentence."""
    if not said:
        return "a connection closed"
    text = said.split("lost a peer: ", 1)[-1]
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)
    return text.split(". ")[0][:160]


def _remove_stale() -> None:
    """Remove the directories of launchers that were killed outright (SIGKILL runs no cleanup);
    the launcher's pid is in the name."""
    for d in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        pid = d.name.removeprefix(TMP_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


def launch(path: str, opts: JobOptions, nodes: int = 1, rdzv: str | None = None,
           found_layout: str | None = None, tokenizer: TokenizerSpec | None = None
           ) -> dict[str, Any] | None:
    """Run this machine's share of the job (`opts.ranks` ranks over `nodes` machines, each
    launching as this one does, meeting at `rdzv`); rank 0's result document on the node that
    holds rank 0, None on the others. The ranks open the export as `found_layout` when given
    (share.check's), rather than each detecting it again."""
    _quiet_torch_logging()
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousError,
        RendezvousTimeoutError,
    )
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _remove_stale()
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
    try:
        out = tmp / "result.json"
        cfg = tmp / "job.json"
        # A text export's tokenizer (share.check's) travels whole: every rank encodes with it.
        atomic.write_text(cfg, json.dumps({"path": str(path), "options": opts.to_json(),
                                           "layout": found_layout, "out": str(out),
                                           "tokenizer": dataclasses.asdict(tokenizer)
                                           if tokenizer is not None else None}))
        per_node = opts.ranks // nodes
        # Every node's launcher names the same run: the rendezvous's address does.
        run_id = f"dsbench-{rdzv}" if rdzv else f"dsbench-{uuid.uuid4().hex[:12]}"
        config = LaunchConfig(
            min_nodes=nodes, max_nodes=nodes, nproc_per_node=per_node,
            run_id=run_id.replace(":", "-"), rdzv_backend="c10d",
            rdzv_endpoint=rdzv or "localhost:0", rdzv_configs={"timeout": RENDEZVOUS_TIMEOUT_S},
            max_restarts=0, monitor_interval=MONITOR_INTERVAL_S, start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=str(tmp / "logs"), redirects=Std.ALL),
            shutdown_timeout=2)
        # The agent sets its own SIGINT and SIGTERM handlers (they raise its SignalException)
        # and leaves them: put dsbench's back, or a Ctrl-C after a job (in the demo) would end
        # in the agent's exception.
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            # -P: the working directory does not go first on sys.path, so a folder named
            # dsbench there (a user's data, such as /tmp/dsbench) cannot stand in for the package.
            done = elastic_launch(config, sys.executable)("-P", "-u", "-m", "dsbench.job.rank",
                                                         str(cfg))
        except ChildFailedError as exc:
            raise DsbenchError(describe(exc.failures, per_node, tmp / "logs", nodes)) from None
        except SignalException as exc:
            raise Interrupted(int(exc.sigval), "every rank stopped") from None
        except RendezvousTimeoutError:
            raise DsbenchError(f"the job's {nodes} nodes did not all join the rendezvous at "
                               f"{rdzv or 'localhost'} within {RENDEZVOUS_TIMEOUT_S} s (is "
                               "the same command running on every node?)") from None
        except RendezvousError as exc:
            # The first node's launcher holds the rendezvous: it stopped, or is unreachable.
            raise DsbenchError(f"{_node_lost(nodes)}: lost the job's rendezvous at "
                               f"{rdzv or 'localhost'}, which the first node's launcher held "
                               f"({type(exc).__name__})") from None
        finally:
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
        if nodes > 1 and 0 not in done:
            return None  # rank 0 is another node's: it reports
        try:
            doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise DsbenchError("rank 0 finished without writing the job's result") from None
        return doc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
