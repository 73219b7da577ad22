"""The two sides of `compare` and `gate`: export paths (or result files) measured in one run,
rounds interleaved, each side read by its own backend.

In: the parsed command line. Out: each side's BenchOptions.
"""

from __future__ import annotations

import argparse
import dataclasses

from dsbench.commands.options import (
    COMPARE_WINDOW,
    add_native_option_argument,
    add_window_arguments,
    window_options,
)
from dsbench.errors import DsbenchError
from dsbench.loader import exact
from dsbench.loader.native import options as native_options
from dsbench.loader.options import BACKENDS, BenchOptions


def add_side_arguments(p: argparse.ArgumentParser, exact_rounds: int | None = None) -> None:
    p.add_argument("base", help="the current export: a result .json or an export path")
    p.add_argument("cand", help="the candidate export: a result .json or an export path")
    m = p.add_argument_group("measuring export paths (both in one run, rounds interleaved)")
    add_window_arguments(m, COMPARE_WINDOW, exact_rounds)
    m.add_argument("--backend", choices=BACKENDS, default=COMPARE_WINDOW.backend,
                   help="the loader that reads the export: dsbench's own, torch's DataLoader "
                        "around dsbench's reader, or each format's own library (native), "
                        "for both sides")
    m.add_argument("--cand-backend", choices=BACKENDS, default=None, metavar="BACKEND",
                   help="read the candidate otherwise: `compare EXPORT EXPORT --cand-backend "
                        "native` puts dsbench's reader and the format's library side by side")
    add_native_option_argument(m)
    m.add_argument("--save", nargs=2, metavar=("BASE_JSON", "CAND_JSON"),
                   help="write both sides' result documents")
    p.add_argument("--any-order", action="store_true",
                   help="compare results read in different orders (--order): by default "
                        "they are not comparable, as a shuffled read costs what a sequential "
                        "one does not")


def side_options(args: argparse.Namespace, exact_rounds: int | None = None
                 ) -> tuple[BenchOptions, BenchOptions | None]:
    """The base's options and, with --cand-backend, the candidate's. `exact_rounds`: the
    rounds where --rounds was not given and both sides' CPU is counted exactly."""
    given = args.rounds
    if given is None:
        args.rounds = COMPARE_WINDOW.rounds
    native = native_options.parse(args.native_option)
    # The library's options go to the side (or sides) read through it.
    backends = (args.backend, args.cand_backend or args.backend)
    if native and "native" not in backends:
        raise DsbenchError("--native-option configures the format's own library: it needs "
                           "--backend native or --cand-backend native")
    opts = window_options(args, backend=args.backend,
                          native_options=native if args.backend == "native" else ())
    cand = dataclasses.replace(opts, backend=args.cand_backend,
                               native_options=native if args.cand_backend == "native" else ()
                               ) if args.cand_backend else None
    sides = [o for o in (opts, cand) if o is not None]
    if given is None and exact_rounds and all(exact.why_not(o) is None for o in sides):
        opts = dataclasses.replace(opts, rounds=exact_rounds)
        cand = cand and dataclasses.replace(cand, rounds=exact_rounds)
    return opts, cand
