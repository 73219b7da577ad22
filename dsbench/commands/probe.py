"""dsbench probe PATH_OR_URL: what the cluster model assumes about storage, measured where an
export lives: first-byte latency per file and streaming bandwidth with 1..N concurrent readers.

The measuring is dsbench.storage.probe; this parses, adds the machine block, checks the
document against its schema (it is what `--storage FILE.json` will read) and prints.
"""

from __future__ import annotations

import argparse

from dsbench import fmt
from dsbench.commands.options import add_json_argument, emit, parse_workers
from dsbench.report.probe import render
from dsbench.results import machine, schema
from dsbench.storage.probe import MIN_FOR_P99, ProbeOptions, probe

HELP = ("measure first-byte latency and streaming bandwidth of the files under a path or an "
        "object-store URL: a storage profile for --storage FILE.json")

_D = ProbeOptions()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a directory or file, or an object-store URL (s3://BUCKET/PREFIX, "
                                "gs://, az://, http(s)://); any files")
    p.add_argument("--objects", type=int, default=_D.objects, metavar="N",
                   help=f"first-byte timings, one file after another (default {_D.objects}; a "
                        f"p99 needs at least {MIN_FOR_P99})")
    p.add_argument("--readers", default=",".join(map(str, _D.readers)),
                   help="concurrent readers to measure bandwidth with, comma-separated "
                        "(default %(default)s)")
    p.add_argument("--seconds", type=float, default=_D.seconds,
                   help=f"length of each measured window in s (one per reader count; "
                        f"default {_D.seconds:g})")
    p.add_argument("--find-limit", action="store_true",
                   help="an object store: also raise the request rate step by step (each "
                        "--seconds long) until the store throttles, and record the rate it "
                        "sustains as the profile's limit per prefix")
    add_json_argument(p, "the storage profile")


def run(args: argparse.Namespace) -> int:
    opts = ProbeOptions(objects=args.objects, readers=parse_workers(args.readers, "--readers"),
                        seconds=args.seconds, find_limit=args.find_limit)
    doc = probe(args.path, opts, fmt.progress)
    doc["machine"] = machine.collect()
    schema.validate(doc, "probe", "the probe's own document")  # what --storage will read
    emit(args, doc, lambda: render(doc))
    return 0
