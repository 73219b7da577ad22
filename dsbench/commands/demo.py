"""dsbench demo: the incident in one command, measured here and carried to a 16 x 8 GPU job."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dsbench import demo, fmt, verdict
from dsbench.cluster import check_steps
from dsbench.commands.bench import parse_workers
from dsbench.commands.sides import build_cluster
from dsbench.errors import DsbenchError
from dsbench.loadcost import DIST_SYNTAX
from dsbench.runner import BenchOptions
from dsbench.storage import PROFILES, parse_storage

HELP = ("regenerate the incident's before and after exports and an Arrow candidate, measure "
        "them, compare them and predict the 128-GPU job: the verdict in one command")

_D, _C, _B = demo.DemoOptions(), demo.DEMO_CLUSTER, demo.DEMO_BENCH


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR",
                   help="keep the result files, the plots and an HTML report in DIR")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help=f"where the generated exports are kept and reused (default {_D.cache})")
    m = p.add_argument_group("measuring (smaller is quicker and rougher)")
    m.add_argument("--samples", type=int, default=_D.samples,
                   help=f"samples per export (default {_D.samples}: 2 shards, so 2 workers)")
    m.add_argument("--workers", default=",".join(map(str, _B.workers)),
                   help=f"loader worker counts (default {','.join(map(str, _B.workers))})")
    m.add_argument("--seconds", type=float, default=_B.seconds,
                   help=f"measured window per round in s (default {_B.seconds:g})")
    m.add_argument("--rounds", type=int, default=_B.rounds,
                   help=f"interleaved rounds per worker count (default {_B.rounds})")
    c = p.add_argument_group("the predicted cluster (a model; the demo's stated assumptions)")
    c.add_argument("--nodes", type=int, default=_C.nodes, help=f"(default {_C.nodes})")
    c.add_argument("--gpus-per-node", type=int, default=_C.gpus_per_node,
                   help=f"(default {_C.gpus_per_node})")
    c.add_argument("--cores-per-node", type=int, default=_C.cores_per_node,
                   help=f"(default {_C.cores_per_node})")
    c.add_argument("--workers-per-gpu", type=int, default=_C.workers_per_gpu,
                   help=f"(default {_C.workers_per_gpu})")
    c.add_argument("--gpu-batch", type=int, default=_C.batch_size,
                   help=f"samples per GPU per step (default {_C.batch_size})")
    c.add_argument("--compute", default=None,
                   help=f"GPU seconds per step: {DIST_SYNTAX} (default {_C.compute.mean:g})")
    c.add_argument("--storage", default=_C.storage.name,
                   help=f"{', '.join(PROFILES)} (default {_C.storage.name}: per-sample files on "
                        "a network filesystem pay a round trip per open)")
    c.add_argument("--stall-prob", type=float, default=_C.stall_prob,
                   help=f"probability of a rank stalling in a step (default {_C.stall_prob:g})")
    c.add_argument("--stall-time", type=float, default=_C.stall_s,
                   help=f"length of such a stall in s (default {_C.stall_s:g})")
    c.add_argument("--steps", type=int, default=_D.steps,
                   help=f"simulated steps (default {_D.steps})")
    p.add_argument("--json", action="store_true", help="print the demo document as JSON")


def options(args: argparse.Namespace) -> demo.DemoOptions:
    """The demo's options, every one checked before anything is generated or measured."""
    cluster = build_cluster(_C, args.compute, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                            cores_per_node=args.cores_per_node,
                            workers_per_gpu=args.workers_per_gpu, batch_size=args.gpu_batch,
                            storage=parse_storage(args.storage), stall_prob=args.stall_prob,
                            stall_s=args.stall_time)
    check_steps(cluster, args.steps, (1, cluster.ranks, *demo.TAIL_RANKS))
    if args.samples < 1:
        raise DsbenchError(f"--samples must be at least 1, got {args.samples}")
    bench = BenchOptions(workers=parse_workers(args.workers), seconds=args.seconds,
                         rounds=args.rounds)
    demo.check_workers(bench.workers, args.samples)
    cache = Path(args.cache) if args.cache else _D.cache
    if cache.exists() and not cache.is_dir():
        raise DsbenchError("--cache must be a directory", path=cache)
    return demo.DemoOptions(cache=cache, samples=args.samples, bench=bench, cluster=cluster,
                            steps=args.steps)


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    out = Path(args.out) if args.out else None
    if out is not None:
        from dsbench import report
        report.check_out_dir(out)  # before the minutes of work, not after
    t0 = time.perf_counter()
    doc = demo.run_demo(opts, fmt.progress)
    written: list[Path] = []
    if out is not None:
        written = report.write_all(doc, out, fmt.progress)
    if args.json:
        print(json.dumps(doc))
        return 0
    res = doc["results"]["before"]
    m = res["machine"]
    print(f"dsbench demo: the incident's exports ({opts.samples} samples each), measured on "
          f"this machine ({m['usable_cores']} cores, {m['cpu_model']}) and carried to "
          f"{opts.cluster.ranks} GPUs")
    print()
    print(fmt.table(verdict.MEASURED_HEADERS, verdict.measured_rows(doc)))
    print()
    print("\n".join(verdict.verdict_lines(doc)))
    print()
    if out is None:
        print("Add --out DIR to keep the result files, the plots and an HTML report.")
    else:
        print(f"Wrote {len(written)} files to {out}; open {out / 'report.html'}")
    fmt.progress(f"demo: done in {fmt.seconds(time.perf_counter() - t0)}")
    return 0
