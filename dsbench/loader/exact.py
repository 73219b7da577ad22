"""Exact CPU per sample: instructions counted in the pipeline's own stages, beside the times.

A timed CPU per sample is as sharp as the machine is quiet. The exact pass counts instead: it
runs the stages a loader worker runs (read, decode, fields, transform or the user's step,
collate) on a fixed set of samples, the export's first ones, in one process under an
instruction counter (counter.py), and reports instructions per sample by stage; the stages add
up to the total. The same export gives the same figures whatever the window, rounds, workers
or neighbours, as files and bytes per sample (counts.py). How the pass runs, and why read is
counted over whole units, is in exact_pass.py.

Beside it, the same pass run directly counts what the kernel counts for the process: read and
write system calls and page faults per sample, by stage.

Start-up and imports do not count: the pass warms every stage up on a few samples first, and
counts from a snapshot taken after that. Library thread pools are held at one thread and hash
randomisation off (PYTHONHASHSEED), so that the count does not depend on scheduling.

What instructions miss (docs/exact-cpu.md): the kernel's work, cache misses, waits for I/O
and for a core, and how many instructions a core retires per cycle (an inflate loop and an
entropy decoder differ). The timed CPU is the estimate of what a change costs in time; the
count is what tells a change from noise.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from dsbench import fmt, procs
from dsbench.errors import DsbenchError
from dsbench.loader import counter, orphans
from dsbench.loader.exact_pass import UNCOUNTED, Plan
from dsbench.loader.options import BenchOptions
from dsbench.results import machine
from dsbench.results.stages import STAGES
from dsbench.results.types import Exact
from dsbench.storage.files import Loc
from dsbench.storage.remote import is_url

# Thread pools at one thread, the system allocator (jemalloc's and mimalloc's background threads
# run when they like), and str hashes the same in every run: the count then repeats.
ENVIRONMENT = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "ARROW_DEFAULT_MEMORY_POOL": "system",
               "RAYON_NUM_THREADS": "1", "TOKIO_WORKER_THREADS": "1"}
# The environment's strings sit at the top of the process's stack and are copied onto its heap:
# their length moves where each starts, and with it the alignment of buffers, which copying
# code takes other paths by (a variable of 1 character or of 17 moved a count by up to 0.05%).
# What changes from one run of the same command to the next is left out (the shell's and
# pytest's own), and the rest padded with PAD to a whole number of pages: a variable of 17
# characters then moved it by 0.015%, and the same variables give the same count.
VOLATILE = ("PYTEST_CURRENT_TEST", "PWD", "OLDPWD", "SHLVL", "_")
PAD = "DSBENCH_EXACT_PAD"
PAGE = 4096
KERNEL = ("read_calls", "write_calls", "minor_faults")
SLOW_START = ("arrow", "parquet", "hf", "lance")  # their readers load pyarrow
POLL_S = 0.05
# The default of --exact/--no-exact: a developer's quick runs, or a test suite measuring other
# things, can leave the pass out without passing --no-exact to every command.
ENV = "DSBENCH_EXACT"
ON, OFF = ("1", "on", "yes", "true"), ("0", "off", "no", "false")


def asked(opts: BenchOptions) -> bool | None:
    """Whether the exact pass was asked for (True), refused (False) or left to whether
    valgrind is installed (None): `--exact`/`--no-exact`, else DSBENCH_EXACT (1 or 0)."""
    if opts.exact is not None:
        return opts.exact
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in ON + OFF:
        raise DsbenchError(f"{ENV}={value}: expected 1 (count CPU exactly), 0 (do not) or auto")
    return value in ON


def why_not(opts: BenchOptions) -> str | None:
    """Why a run's CPU is not counted exactly, or None when it is. `--exact` asked for and
    impossible is an error, before anything runs."""
    want = asked(opts)
    if want is False:
        return f"not asked for (--no-exact, or {ENV}=0)"
    reason = None
    if opts.dataset is not None:
        reason = "a --dataset is a black box: the exact pass runs dsbench's reader"
    elif opts.backend == "native":
        reason = ("--backend native reads through the format's library in its own loader: "
                  "the exact pass runs dsbench's reader")
    elif counter.version() is None:
        reason = counter.INSTALL
    if reason is not None and want:
        raise DsbenchError(f"--exact: {reason}")
    return reason


@dataclass
class _Pass:
    """One export's two processes: the counted one and the one the kernel's counts come from."""

    path: str | Loc
    root: Path
    procs: list[subprocess.Popen[bytes]]
    started: float

    def ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)


def child_environment(argv: list[str]) -> dict[str, str]:
    """The caller's environment less what varies between runs (VOLATILE), held still
    (ENVIRONMENT) and padded (PAD) so that it and the arguments fill a whole number of pages,
    as the process's stack holds them."""
    env = {k: v for k, v in os.environ.items()
           if k != PAD and k not in VOLATILE} | ENVIRONMENT
    used = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())
    used += sum(len(os.fsencode(a)) + 1 for a in argv) + len(PAD) + 2
    env[PAD] = "x" * (-used % PAGE)
    return env


class Passes:
    """The exact passes of a run's exports, run before its timed rounds (they must not run
    beside them), one per usable core at a time. Every process and file of theirs is gone when
    the block ends, however it ends."""

    def __init__(self, paths: Sequence[str | Loc], opts: Sequence[BenchOptions]) -> None:
        self.paths, self.opts = list(paths), list(opts)
        self.reasons = [why_not(o) for o in self.opts]
        self.launched: list[_Pass] = []
        self.tmp: Path | None = None

    def __enter__(self) -> Passes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, path: str | Loc, opts: BenchOptions) -> _Pass:
        if self.tmp is None:
            orphans.clear_once(fmt.progress)
            self.tmp = Path(tempfile.mkdtemp(prefix=f"dsbench-exact-{orphans.owner()}-"))
        root = Path(tempfile.mkdtemp(dir=self.tmp))
        (root / "logs").mkdir()
        started = _Pass(path, root, [], time.perf_counter())
        self.launched.append(started)
        # Run in its own directory with the same relative arguments every time: their length,
        # as the environment's, moves where the process's stack starts, and so the alignment
        # of buffers on it, which some copying code takes other paths by.
        where = str(path) if is_url(str(path)) else os.path.abspath(str(path))
        for mode in ("instructions", "kernel"):
            plan = Plan(where, opts.export_opener(), opts.pipeline(), opts.exact_samples,
                        opts.batch_size, opts.seed, mode, tuple(sys.path))
            (root / f"{mode}.plan").write_bytes(pickle.dumps(plan))
            argv = [sys.executable, "-m", "dsbench.loader.exact_pass", f"{mode}.plan",
                    f"{mode}.json"]
            if mode == "instructions":
                argv = counter.command(argv, Path("logs"))
            with open(root / f"{mode}.err", "wb") as err, procs.spawning():
                started.procs.append(subprocess.Popen(
                    argv, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=err, env=child_environment(argv)))
        return started

    def results(self) -> list[Exact]:
        """Each export's `exact` section: its figures, or why there are none. A pass takes a
        core for its seconds under the counter: as many run at once as there are cores."""
        out: dict[int, dict[str, Any]] = {i: not_counted(r) for i, r in enumerate(self.reasons)
                                          if r is not None}
        # The passes whose reader loads pyarrow first: its libraries take seconds to load under
        # the counter, and the others then share the cores with them.
        todo = sorted((i for i, r in enumerate(self.reasons) if r is None),
                      key=lambda i: self.opts[i].found_layout not in SLOW_START)
        started: list[tuple[int, _Pass]] = []
        while todo or started:
            while todo and len(started) < machine.usable_cores():
                i = todo.pop(0)
                started.append((i, self._start(self.paths[i], self.opts[i])))
            done = next((k for k, (_, p) in enumerate(started) if p.ended()), None)
            if done is None:
                time.sleep(POLL_S)  # between passes, before the timed rounds: not measured
                continue
            i, p = started.pop(done)
            out[i] = _collect(p)
        return [cast(Exact, out[i]) for i in range(len(self.reasons))]

    def close(self) -> None:
        for p in self.launched:
            for proc in p.procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def not_counted(why: str | None) -> dict[str, Any]:
    return {"counted": False, "why_not": why}


def _collect(p: _Pass) -> dict[str, Any]:
    for proc, mode in zip(p.procs, ("instructions", "kernel"), strict=True):
        if proc.wait() != 0 or not (p.root / f"{mode}.json").is_file():
            err = (p.root / f"{mode}.err").read_text(errors="replace").strip().splitlines()
            raise DsbenchError(f"the exact pass ({mode}) failed: "
                               f"{err[-1] if err else f'exit code {proc.returncode}'}",
                               path=p.path)
    wall = time.perf_counter() - p.started
    counted = json.loads((p.root / "instructions.json").read_text())
    kernel = json.loads((p.root / "kernel.json").read_text())
    for doc in (counted, kernel):
        if "error" in doc:
            raise DsbenchError(doc["error"])
    totals = counter.totals(p.root / "logs")
    missing = [pid for _, pid in counted["snapshots"] if pid not in totals]
    if missing:
        raise DsbenchError(f"the exact pass's counter wrote no total for snapshot {missing[0]}",
                           path=p.path)
    instructions = per_stage([(s, {"instructions": totals[pid]})
                              for s, pid in counted["snapshots"]], ("instructions",))
    kernels = per_stage(kernel["snapshots"], KERNEL)
    samples, read = counted["samples"], counted["read_samples"]

    def per_sample(stage: str, value: float) -> float:
        n = read if stage == "read" else samples
        return value / n if n else 0.0

    stages = {s: per_sample(s, instructions[s]["instructions"]) for s in STAGES}
    by_stage = {s: {k: per_sample(s, kernels[s][k]) for k in KERNEL} for s in STAGES}
    return {"counted": True, "why_not": None, "counter": counter.describe(),
            "samples": samples, "read_samples": read, "units_read": counted["units_read"],
            "whole_units": counted["whole_units"],
            "instructions_per_sample": sum(stages.values()), "stages": stages,
            **{f"{k}_per_sample": sum(by_stage[s][k] for s in STAGES) for k in KERNEL},
            "kernel_stages": by_stage, "wall_s": wall,
            # --pack: the mean ids of the documents counted in the read stage and in the
            # others, by which advise states a count per sequence (advise.sequences); not
            # counted by the counter, told by the pass.
            **({"ids_per_sample": counted["packed_ids"] / samples,
                "read_ids_per_sample": counted["read_ids"] / read}
               if counted.get("packed_ids") is not None and samples and read else {})}


def per_stage(snaps: Sequence[tuple[str, dict[str, int]]], keys: Sequence[str]
              ) -> dict[str, dict[str, int]]:
    """Each stage's counts from the pass's snapshots: the change since the snapshot before,
    less what a snapshot costs (the second snapshot's change over the first)."""
    (_, first), (_, second), *rest = snaps
    cost = {k: second[k] - first[k] for k in keys}
    out = {s: dict.fromkeys(keys, 0) for s in STAGES}
    before = second
    for stage, now in rest:
        if stage == UNCOUNTED:  # what ran since the last snapshot is no stage's
            before = now
            continue
        for k in keys:
            out[stage][k] += now[k] - before[k] - cost[k]
        before = now
    return out


def count(paths: Sequence[str | Loc], opts: Sequence[BenchOptions],
          say: Callable[[str], None]) -> list[Exact]:
    """The exact passes of a run's exports (one per usable core at a time), before any timed
    round."""
    started = time.perf_counter()
    with Passes(paths, opts) as passes:
        out = passes.results()
    counted = sum(why is None for why in passes.reasons)
    if counted:
        # Said when done, as rounds are: a bad sample it met is then the run's one line.
        say(f"exact pass: the instructions of {fmt.plural(counted, 'export')} counted under "
            f"{counter.TOOL} in {fmt.seconds(time.perf_counter() - started)}")
    return out
