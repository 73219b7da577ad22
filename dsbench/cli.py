"""The `dsbench` command: one subcommand per module in dsbench.commands.

Bad input and bad options raise DsbenchError anywhere below; it is caught here, once, and
printed as a single line with exit code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from dsbench import __version__
from dsbench.errors import DsbenchError, Interrupted

# Module names under dsbench.commands; each has HELP, add_arguments(parser) and run(args) -> int.
COMMANDS = ["demo", "generate", "inspect", "bench", "compare", "gate", "advise", "extrapolate",
            "budget", "probe", "proxy", "job", "resume", "asv", "config"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse already exits 2 on usage errors; keep it to one line plus the usage hint.
        sys.stderr.write(f"dsbench: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the command line, only the command it names is imported (a command's
    modules take up to half a second to import, `extrapolate` needs a tenth of that), and the
    others are known by name. Without a command line, or one that names none (`dsbench
    --help`), every command is."""
    parser = _Parser(prog="dsbench", description="Measure what a dataset's on-disk format costs "
                     "a training job's input pipeline.")
    parser.add_argument("--version", action="version", version=f"dsbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    named = None if argv is None else _command_in(argv)
    for name in COMMANDS:
        if named is not None and name != named:
            sub.add_parser(name)
            continue
        module = importlib.import_module(f"dsbench.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.add_argument("--config", type=Path, default=None, metavar="FILE",
                       help="settings file to take options from: a dsbench.toml or a "
                            "pyproject.toml's [tool.dsbench] (default: the nearest at or above "
                            "the current directory; docs/settings.md)")
        p.set_defaults(run=module.run)
    return parser


def apply_settings(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """The settings file's values become the named command's defaults, so that its command
    line still wins over them (commands/settings.py)."""
    from dsbench.commands import settings

    command = _command_in(argv)
    if command is None:
        return
    found = settings.settings_for(argv)
    if found.path is None:
        return
    settings.check_tables(found, COMMANDS)
    sub = dict(settings.subparsers(parser))[command]
    applied = settings.apply(sub, command, found, None)
    if applied.elsewhere:  # keys this command lacks: another command's, or misspelt?
        settings.resolve(sub, command, found, settings.every_option(build_parser()))
    sub.set_defaults(settings_origin={d: where for d, (_, where) in applied.values.items()})


def _command_in(argv: Sequence[str]) -> str | None:
    """The command the line names: its first word that is not an option (dsbench's own
    options take no value)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


class Terminated(BaseException):
    """SIGTERM: unwinds like Ctrl-C, so every worker, segment and temporary is cleaned up.

    Not an Exception, as KeyboardInterrupt is not: code that turns a library's errors into a
    bad sample or a one-line error (`except Exception` around PIL's header probe, a format
    writer) must not take the signal for one. Seen: a SIGTERM during compare's survey was
    counted as an unreadable image header, and the run went on to exit 0."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    in_main_thread = threading.current_thread() is threading.main_thread()
    old = signal.getsignal(signal.SIGTERM) if in_main_thread else None
    name = "dsbench"
    # Everything from the handler on is inside the try, the imports of the commands' modules
    # too (about a second): a Ctrl-C or SIGTERM meanwhile gives the same one line and exit code
    # as later, not a traceback. (The handler, first, also tells the Ctrl-C test that this
    # process has got here: SigCgt in /proc/PID/status.)
    try:
        if in_main_thread:
            signal.signal(signal.SIGTERM, _terminate)
        from dsbench import procs

        # A Ctrl-C inside an import can surface as another error (numpy's C set-up turns it
        # into an ImportError) or, handled, still end the interpreter by SIGINT at its exit
        # (a KeyboardInterrupt raised in the source that dataclasses and namedtuple exec): held
        # until the imports are done, it is acted on after them.
        with procs.uninterrupted():
            from dsbench.commands.options import check_outputs

            line = sys.argv[1:] if argv is None else list(argv)
            named = _command_in(line)
            name = f"dsbench {named}" if named else name  # for a bad settings file's line
            parser = build_parser(line)
            apply_settings(parser, line)
        args = parser.parse_args(line)
        name = f"dsbench {args.command}"
        check_outputs(args)
        return int(args.run(args))
    except DsbenchError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Interrupted as exc:
        print(f"{name}: interrupted by {signal.Signals(exc.signum).name}; {exc.stopped}",
              file=sys.stderr)
        return 128 + exc.signum
    except Terminated:
        print(f"{name}: terminated", file=sys.stderr)
        return 143
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def entry() -> None:
    """The `dsbench` command and `python -m dsbench`: main(), then the interpreter's exit.

    After main() the work is done and said. A Ctrl-C that comes now meets the interpreter's own
    shutdown (atexit joins thread pools' threads), where Python prints a KeyboardInterrupt
    traceback; the signal's default action ends the process instead, silently, as the run was
    ending anyway. Not where SIGINT was ignored from the start (a background job's), nor for
    callers of main() in their own process.
    """
    code = main()
    # Said before the signal's action could end the process: output still buffered (a pipe's)
    # would be lost with it.
    # A stream is None where its descriptor was closed before the interpreter started.
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise SystemExit(code)
