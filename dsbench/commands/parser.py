"""The command line's parser: one subcommand per module in dsbench.commands, and the settings
file's values (commands/settings.py) made the named command's defaults.

In: the command line. Out: an argparse parser whose namespace names the command's `run`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsbench import __version__
from dsbench.errors import DsbenchError

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
    named = None if argv is None else command_in(argv)
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


def apply_settings(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Any:
    """The settings file's values become the named command's defaults, so that its command
    line still wins over them (commands/settings.py); what was applied (settings.Applied), or
    None."""
    from dsbench.commands import settings

    command = command_in(argv)
    if command is None:
        return None
    found = settings.settings_for(argv)
    if found.path is None:
        return None
    settings.check_tables(found, COMMANDS)
    sub = dict(settings.subparsers(parser))[command]
    # Every command's options, for a top key this command lacks (another command's, or
    # misspelt?): only then are the other commands imported, once.
    every = functools.cache(lambda: settings.every_option(build_parser()))
    return settings.apply(sub, command, found, every)


def settled(args: argparse.Namespace, argv: Sequence[str], applied: Any) -> None:
    """After parsing: `args.settings_origin`, where each value the file set came from, for
    the values the command line left as the file set them (a bad value is then blamed on the
    file, and otherwise on the option). An abbreviated --config is refused: the file was
    read, for its defaults, before argparse expanded it."""
    from dsbench.commands import settings

    if getattr(args, "config", None) is not None and settings.config_path(argv) is None:
        raise DsbenchError("--config: write the option in full (its file is read before "
                           "the command line is parsed)")
    values = applied.values if applied is not None else {}
    args.settings_origin = {dest: where for dest, (value, where) in values.items()
                            if getattr(args, dest, None) == value}


def command_in(argv: Sequence[str]) -> str | None:
    """The command the line names: its first word that is not an option (dsbench's own
    options take no value)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


