"""The `dsbench` command: one subcommand per module in dsbench.commands.

Bad input and bad options raise DsbenchError anywhere below; it is caught here, once, and
printed as a single line with exit code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence

from dsbench import __version__
from dsbench.commands.options import check_outputs
from dsbench.errors import DsbenchError

# Module names under dsbench.commands; each has HELP, add_arguments(parser) and run(args) -> int.
COMMANDS = ["demo", "generate", "inspect", "bench", "compare", "gate", "extrapolate", "budget",
            "probe", "job", "resume", "asv"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse already exits 2 on usage errors; keep it to one line plus the usage hint.
        sys.stderr.write(f"dsbench: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dsbench", description="Measure what a dataset's on-disk format costs "
                     "a training job's input pipeline.")
    parser.add_argument("--version", action="version", version=f"dsbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"dsbench.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


class Terminated(Exception):
    """SIGTERM: unwinds like Ctrl-C, so every worker, segment and temporary is cleaned up."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        check_outputs(args)
        return int(args.run(args))
    except DsbenchError as exc:
        print(f"dsbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dsbench {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"dsbench {args.command}: terminated", file=sys.stderr)
        return 143
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
