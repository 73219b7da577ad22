"""The `dsbench` command: one subcommand per module in dsbench.commands.

Bad input and bad options raise DsbenchError anywhere below; it is caught here, once, and
printed as a single line with exit code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from dsbench.commands.parser import COMMANDS, apply_settings, build_parser, command_in, settled
from dsbench.errors import DsbenchError, Interrupted

__all__ = ["COMMANDS", "apply_settings", "build_parser", "entry", "main", "settled"]


class Terminated(BaseException):
    """SIGTERM: unwinds like Ctrl-C, so every worker, segment and temporary is cleaned up.

    Not an Exception, as KeyboardInterrupt is not: code that turns a library's errors into a
    bad sample or a one-line error (`except Exception` around PIL's header probe, a format
    writer) must not take the signal for one. Seen: a SIGTERM during compare's survey was
    counted as an unreadable image header, and the run went on to exit 0."""


REDELIVER_S = 0.01


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _redeliver(default: Callable[[Any], object]) -> Callable[[Any], object]:
    """An unraisablehook that delivers again a SIGTERM or Ctrl-C whose exception was raised
    inside a finalizer (a `__del__`), where Python prints it and carries on: seen, a SIGTERM
    during a library's resume lost so, and the run went on to the end. Sent to this process
    once more, from a thread a moment later (sent at once, its handler would run inside the
    finalizer again), it unwinds from wherever the program then is."""
    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, Terminated | KeyboardInterrupt):
            again = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
            threading.Timer(REDELIVER_S, os.kill, (os.getpid(), again)).start()
            return
        default(unraisable)
    return hook


def main(argv: Sequence[str] | None = None) -> int:
    in_main_thread = threading.current_thread() is threading.main_thread()
    old = signal.getsignal(signal.SIGTERM) if in_main_thread else None
    name = "dsbench"
    # Everything from the handler on is inside the try, the imports of the commands' modules
    # too (about a second): a Ctrl-C or SIGTERM meanwhile gives the same one line and exit code
    # as later, not a traceback. (The handler, first, also tells the Ctrl-C test that this
    # process has got here: SigCgt in /proc/PID/status.)
    unraisable = sys.unraisablehook
    try:
        if in_main_thread:
            signal.signal(signal.SIGTERM, _terminate)
            sys.unraisablehook = _redeliver(unraisable)
        from dsbench import procs

        # A Ctrl-C inside an import can surface as another error (numpy's C set-up turns it
        # into an ImportError) or, handled, still end the interpreter by SIGINT at its exit
        # (a KeyboardInterrupt raised in the source that dataclasses and namedtuple exec): held
        # until the imports are done, it is acted on after them.
        with procs.uninterrupted():
            from dsbench.commands.options import check_outputs

            line = sys.argv[1:] if argv is None else list(argv)
            named = command_in(line)
            name = f"dsbench {named}" if named else name  # for a bad settings file's line
            parser = build_parser(line)
            applied = apply_settings(parser, line)
        args = parser.parse_args(line)
        name = f"dsbench {args.command}"
        settled(args, line, applied)
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
        sys.unraisablehook = unraisable
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
