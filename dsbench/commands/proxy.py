"""dsbench proxy: a store that pushes back, in front of an S3-compatible endpoint, to rehearse a
reader against throttling, errors, resets, cut bodies and latency (dsbench.storage.faults).

Runs in the foreground until Ctrl-C; prints the endpoint to point a client at.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from dsbench.errors import DsbenchError
from dsbench.storage.faults import Faults, serve
from dsbench.storage.server import LocalS3, free_port

HELP = ("serve an S3-compatible endpoint through a proxy that throttles (503 SlowDown), fails "
        "(500), resets and cuts reads short, and adds latency: a store that pushes back")


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--upstream", metavar="URL",
                       help="the endpoint to stand in front of (default: AWS_ENDPOINT_URL)")
    where.add_argument("--local", action="store_true",
                       help="start a local S3 server (moto) to stand in front of")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--throttle", type=float, default=None, metavar="N",
                   help="reads per second per prefix beyond which reads get 503 SlowDown "
                        "(default: no limit)")
    p.add_argument("--errors", type=float, default=0.0, metavar="F",
                   help="fraction of reads answered 500 InternalError (default 0)")
    p.add_argument("--resets", type=float, default=0.0, metavar="F",
                   help="fraction of reads whose connection is reset (default 0)")
    p.add_argument("--cuts", type=float, default=0.0, metavar="F",
                   help="fraction of reads whose body stops half-way (default 0)")
    p.add_argument("--latency", default=None, metavar="MEAN[,SD]",
                   help="seconds added to each read, lognormal when SD is given (default 0)")
    p.add_argument("--bucket", default="", metavar="NAME",
                   help="only this bucket's reads (default: every bucket's)")
    p.add_argument("--seed", type=int, default=0, help="random seed: of the faults (default 0)")


def run(args: argparse.Namespace) -> int:
    latency, sd = Faults.parse_latency(args.latency) if args.latency else (0.0, 0.0)
    faults = Faults(throttle_per_s=float("inf") if args.throttle is None else args.throttle,
                    error_rate=args.errors,
                    reset_rate=args.resets, cut_rate=args.cuts, latency_s=latency,
                    latency_sd_s=sd, bucket=args.bucket, seed=args.seed)
    if not 0 <= args.port < 65536:
        raise DsbenchError(f"--port must be from 0 to 65535, not {args.port}")
    port = args.port or free_port()
    with contextlib.ExitStack() as stack:
        if args.local:
            upstream = stack.enter_context(LocalS3()).endpoint
        else:
            upstream = args.upstream or os.environ.get("AWS_ENDPOINT_URL_S3") or \
                os.environ.get("AWS_ENDPOINT_URL") or ""
            if not upstream.startswith("http://"):
                raise DsbenchError("give --upstream http://HOST:PORT (a plain-http S3 endpoint) "
                                   "or --local")
        print(f"AWS_ENDPOINT_URL=http://127.0.0.1:{port}  (in front of {upstream}: "
              f"{faults.describe()}); Ctrl-C stops it", file=sys.stderr, flush=True)
        try:
            serve(port, upstream, faults)
        except OSError as exc:
            raise DsbenchError(f"cannot serve on 127.0.0.1:{port}: {exc.strerror}") from None
    return 0
