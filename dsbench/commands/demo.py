"""dsbench demo: the incident in one command, measured here and carried to a 16 x 8 GPU job."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from dsbench import fmt
from dsbench.commands.advise import parse_budget
from dsbench.commands.options import (
    add_cluster_arguments,
    add_json_argument,
    add_window_arguments,
    cluster_from_args,
    emit,
    window_options,
)
from dsbench.errors import DsbenchError
from dsbench.model.cluster import check_steps
from dsbench.report import demo, html, verdict

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
                   help=f"samples in each export made (default {_D.samples}: 2 shards, so 2 "
                        "workers)")
    add_window_arguments(m, _B)
    m.add_argument("--no-object-store", dest="object_store", action="store_false",
                   help="skip measuring before and after on a local S3 server (moto)")
    p.add_argument("--network-latency", metavar="SECONDS", type=float,
                   default=_D.network_latency_s,
                   help="round trip per request added to the probed local S3 server's latency "
                        "in the cluster model (default "
                        f"{_D.network_latency_s:g} s; a stated figure, not measured); "
                        "--storage replaces both")
    m.add_argument("--no-job", dest="job", action="store_false",
                   help="skip checking the model against a measured 2-rank job (dsbench job)")
    m.add_argument("--no-resume", dest="resume", action="store_false",
                   help="skip restarting after's loader by each policy (dsbench resume)")
    m.add_argument("--no-advice", dest="advise", action="store_false",
                   help="skip the search for the export to roll out (dsbench advise on after)")
    m.add_argument("--advice-budget", default=f"{demo.ADVISE.budget_s:g}s", metavar="DURATION",
                   help="about how long the advice's measuring may take (default "
                        f"{demo.ADVISE.budget_s:g}s; 10s, 1m)")
    add_cluster_arguments(p, _C, "the predicted cluster (a model; the demo's stated "
                          "assumptions)", measured_batch=False)
    p.add_argument("--steps", type=int, default=_D.steps,
                   help=f"steps of the job: simulated (default {_D.steps})")
    add_json_argument(p, "the demo document")


def options(args: argparse.Namespace) -> demo.DemoOptions:
    """The demo's options, every one checked before anything is generated or measured."""
    cluster, sources = cluster_from_args(args, _C)
    if not (math.isfinite(args.network_latency) and args.network_latency >= 0):
        raise DsbenchError(f"--network-latency must be a number of seconds >= 0, got "
                           f"{args.network_latency}")
    check_steps(cluster, args.steps, (1, cluster.ranks, *demo.TAIL_RANKS))
    if args.samples < 1:
        raise DsbenchError(f"--samples must be at least 1, got {args.samples}")
    bench = window_options(args)
    demo.check_workers(bench.workers, args.samples)
    cache = Path(args.cache) if args.cache else _D.cache
    if cache.exists() and not cache.is_dir():
        raise DsbenchError("--cache must be a directory", path=cache)
    return demo.DemoOptions(cache=cache, samples=args.samples, bench=bench, cluster=cluster,
                            steps=args.steps, object_store=args.object_store,
                            network_latency_s=args.network_latency,
                            storage_stated=sources["storage"] == "stated", job=args.job,
                            resume=args.resume, advise=args.advise,
                            advice_budget_s=parse_budget(args.advice_budget, "--advice-budget"))


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    out = Path(args.out) if args.out else None
    if out is not None:
        html.check_out_dir(out)  # before the minutes of work, not after
    t0 = time.perf_counter()
    doc = demo.run_demo(opts, fmt.progress)
    written = html.write_all(doc, out, fmt.progress) if out is not None else []
    emit(args, doc, lambda: verdict.report(doc, out, written))
    fmt.progress(f"demo: done in {fmt.seconds(time.perf_counter() - t0)}")
    return 0
