"""One rank of the measured job: its loader, the emulated step, the all-reduce; rank 0 reports.

Run as `python -m dsbench.job.rank CFG.json` by dsbench's own launch (launch.py), or called by
`dsbench job` when torchrun or srun started it. Per step, on CLOCK_MONOTONIC (perf_counter):

    t0 ─ take the next batch, free the one before ─ t1 ─ compute (+ stall) ─ t2 ─ all-reduce ─ t3

wait for data = t1 - t0, compute = t2 - t1, collective = t3 - t2, step = t3 - t0. Compute is
`time.sleep`: an accelerator's step uses no host core, and on a machine with fewer cores than
ranks and loader workers a busy loop would take CPU from the very loaders being measured. The
only other thing in the window is storing the four times. The draws of compute and stalls are
made before it, per rank from (seed, rank).

This module is `__main__` in every rank, and spawned loader workers import `__main__` again:
torch is imported inside functions only (at module level it would cost each worker seconds and
a few hundred MB).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dsbench import atomic, procs
from dsbench.adapters.tokenizer import TokenizerSpec
from dsbench.errors import DsbenchError
from dsbench.job import result
from dsbench.job.identity import Identity, detect, slurm_rendezvous
from dsbench.job.options import IDLE_COLLECTIVES, JobOptions
from dsbench.job.share import RankShare
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import host_busy_s
from dsbench.loader.sources import ShmSource, check_memory
from dsbench.loader.torch_source import TorchSource
from dsbench.loader.worker import BatchReport
from dsbench.storage.files import location

PEER_LOST = 75  # exit code of a rank whose peer went away: not the root cause of a failure
RANK_ERROR = 2  # exit code of a rank that met bad input; its last stderr line says what


def bench_options(opts: JobOptions, ident: Identity, found_layout: str | None = None,
                  tokenizer: TokenizerSpec | None = None) -> BenchOptions:
    """The rank's loader, as `dsbench bench` would run it, over the rank's share; its workers
    open the export as `found_layout` (share.check's) rather than detect it again, and encode
    text with `tokenizer` (the launcher's, the same in every rank)."""
    return BenchOptions(workers=(opts.workers,), batch_size=opts.batch_size,
                        backend=opts.backend, prefetch=opts.prefetch, seed=opts.seed,
                        decoder=opts.decoder, layout=opts.layout, seq_len=opts.seq_len,
                        pack=opts.pack,
                        clip_s=opts.clip_s, found_kind=opts.kind, found_rate=opts.rate,
                        sample_rate=opts.sample_rate, tokenizer_spec=tokenizer,
                        opener=RankShare(ident.rank, ident.world, opts.layout or found_layout,
                                         opts.seq_len))


def _device(opts: JobOptions, ident: Identity, torch: Any) -> str:
    """'cuda' when asked, or when every rank of this node has a GPU; else 'cpu'."""
    has_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= ident.local_world
    if opts.device == "cuda" and not has_gpus:
        raise DsbenchError(f"--device cuda: {ident.local_world} ranks on this node and "
                           f"{torch.cuda.device_count()} GPUs")
    return "cuda" if opts.device == "cuda" or (opts.device == "auto" and has_gpus) else "cpu"


def run_rank(path: str, opts: JobOptions, ident: Identity, found_layout: str | None = None,
             tokenizer: TokenizerSpec | None = None) -> dict[str, Any] | None:
    """Run this rank; rank 0 returns the job's result document, the others None."""
    # The launcher stops ranks with SIGTERM; a Python handler would only run once a blocking
    # collective returned, so the default action (die at once) is what the job needs.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if ident.launcher in ("dsbench", "torchrun"):
        procs.die_with_parent()  # the agent is gone: so is the job
    if ident.launcher == "slurm":
        os.environ.update(slurm_rendezvous(ident))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # ranks share the host's cores with their loader workers
    device = _device(opts, ident, torch)
    if device == "cuda":
        torch.cuda.set_device(ident.local_rank)
    timeout = datetime.timedelta(seconds=opts.collective_timeout_s)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=timeout)
    bench = bench_options(opts, ident, found_layout, tokenizer)
    check_memory(bench.pipeline(), opts.batch_size, opts.prefetch,
                 opts.workers * ident.local_world)
    source: ShmSource | TorchSource
    if opts.backend == "torch":
        source = TorchSource(location(path), bench.pipeline(), opts.workers, bench)
    else:
        source = ShmSource(location(path), bench.pipeline(), opts.workers, bench)
    try:
        record = _measure(source, opts, ident, device, torch, dist)
    finally:
        source.close()
    record["backend"] = dist.get_backend()
    gathered: list[Any] | None = [None] * ident.world if ident.rank == 0 else None
    dist.gather_object(record, gathered, dst=0)
    # Only after a job that completed: with a peer gone, tearing the group down could wait
    # on it, and the process is about to exit anyway.
    dist.destroy_process_group()
    if gathered is None:
        return None
    return result.build(path, opts, [r for r in gathered if r is not None], device)


def _measure(source: ShmSource | TorchSource, opts: JobOptions, ident: Identity, device: str,
             torch: Any, dist: Any) -> dict[str, Any]:
    rng = np.random.default_rng([opts.seed, ident.rank])
    n = opts.steps
    compute = opts.compute.sample(rng, (n,))
    stall = np.where(rng.random(n) < opts.stall_prob, opts.stall_s, 0.0)
    busy = compute + stall
    buf = torch.zeros(16, device=device)
    timeout = datetime.timedelta(seconds=opts.collective_timeout_s)

    def all_reduce() -> None:
        dist.all_reduce(buf, async_op=True).wait(timeout)
        if device == "cuda":
            torch.cuda.synchronize()

    # Every worker's first batch (its start-up: imports, opening the export) before anything
    # is timed; then the collective alone, on steps with nothing else to do.
    for _ in range(opts.workers):
        source.release(source.next())
    dist.barrier()
    idle = np.empty(IDLE_COLLECTIVES)
    for i in range(IDLE_COLLECTIVES):
        t = time.perf_counter()
        all_reduce()
        idle[i] = time.perf_counter() - t
    dist.barrier()

    times = np.empty((n, 4))  # t0..t3 of every step
    ready = np.empty(n)  # when each step's batch was built
    reports: list[BatchReport] = []
    cpu0, host0 = _self_cpu(), host_busy_s()
    held: BatchReport | None = None
    for s in range(n):
        t0 = time.perf_counter()
        report = source.next()
        # The batch before is done with once the next is taken: its slot goes back to the
        # worker now, as torch's DataLoader asks for the next batch when it hands one out, so
        # the worker builds while the accelerator computes.
        if held is not None:
            source.release(held)
        held = report
        t1 = time.perf_counter()
        time.sleep(busy[s])  # the emulated accelerator step (and its stall)
        t2 = time.perf_counter()
        all_reduce()
        t3 = time.perf_counter()
        times[s] = (t0, t1, t2, t3)
        ready[s] = report.ready_s
        reports.append(report)
    if held is not None:
        source.release(held)
    rank_cpu = _self_cpu() - cpu0
    host_busy = host_busy_s() - host0
    by_worker: dict[int, list[float]] = {}
    for r in reports:
        by_worker.setdefault(r.worker, []).append(r.cpu_s)
    workers_cpu = sum(max(c) - min(c) for c in by_worker.values())
    window = float(times[-1, 3] - times[0, 0])
    counted = reports[opts.warmup_steps:]
    return {
        "rank": ident.rank, "local_rank": ident.local_rank, "node": ident.node,
        "nodes": ident.nodes, "world": ident.world, "local_world": ident.local_world,
        "launcher": ident.launcher, "host": platform.node(), "pid": os.getpid(),
        # Relative to this rank's first step: clocks of different hosts are not comparable,
        # and the steps are already aligned by the collective that ends each of them.
        "start_s": (times[:, 0] - times[0, 0]).tolist(),
        # The first step's start on CLOCK_MONOTONIC: comparable between the ranks of one host
        # only, where it places every step's times on one clock.
        "origin_s": float(times[0, 0]),
        "wait_s": (times[:, 1] - times[:, 0]).tolist(),
        # From when the batch was both asked for and built to when the rank had it: the
        # hand-over's own cost (the pipe, and the rank waiting for a core), not the loader's.
        "handover_s": np.maximum(times[:, 1] - np.maximum(times[:, 0], ready), 0.0).tolist(),
        "busy_s": (times[:, 2] - times[:, 1]).tolist(),
        "stall_s": stall.tolist(), "compute_drawn_s": compute.tolist(),
        "collective_s": (times[:, 3] - times[:, 2]).tolist(),
        "step_s": (times[:, 3] - times[:, 0]).tolist(),
        "idle_collective_s": idle.tolist(),
        "batch_cpu_s": [r.batch_cpu_s for r in counted],
        "batch_wall_s": [r.batch_wall_s for r in counted],
        "samples": sum(len(r.keys) for r in counted),
        "window_s": window, "rank_cpu_s": rank_cpu, "workers_cpu_s": workers_cpu,
        # Everything the host's cores did meanwhile (other ranks, other programs, the kernel).
        "host_busy_s": host_busy,
    }


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_configured(cfg: dict[str, Any]) -> None:
    """The rank of dsbench's own launch: rank 0 writes the document where the launcher reads."""
    ident = detect()
    if ident is None:
        raise DsbenchError("dsbench.job.rank runs under a launcher (RANK and WORLD_SIZE unset)")
    ident = Identity(**{**ident.__dict__, "launcher": "dsbench"})
    tokenizer = TokenizerSpec(**cfg["tokenizer"]) if cfg.get("tokenizer") else None
    doc = run_rank(cfg["path"], JobOptions.from_json(cfg["options"]), ident, cfg.get("layout"),
                   tokenizer)
    if doc is not None:
        atomic.write_text(Path(cfg["out"]), json.dumps(doc) + "\n")


def fail(ident_rank: str, exc: BaseException) -> None:
    """A rank's one line for its log, then an exit code that says whose fault it was."""
    if isinstance(exc, DsbenchError):
        print(f"dsbench job: error: rank {ident_rank}: {exc}", file=sys.stderr, flush=True)
        os._exit(RANK_ERROR)
    text = " ".join(str(exc).split())[:300]
    print(f"dsbench job: rank {ident_rank}: lost a peer: {text}", file=sys.stderr, flush=True)
    # Not a normal exit: the loader's workers die with this process (they asked the kernel
    # to) and its shared memory goes with them; a clean shutdown could wait on dead peers.
    os._exit(PEER_LOST)


def main(argv: list[str]) -> None:
    rank = os.environ.get("RANK", "?")
    try:
        cfg = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
        run_configured(cfg)
    except (DsbenchError, RuntimeError) as exc:
        fail(rank, exc)


if __name__ == "__main__":
    main(sys.argv[1:])
