"""dsbench config [COMMAND]: the settings in force, and where each value comes from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.commands import settings
from dsbench.errors import DsbenchError

HELP = ("show the settings in force: the file they come from (a dsbench.toml or pyproject.toml's "
        "[tool.dsbench]), and for a command each option's value and its origin")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default=None, metavar="COMMAND",
                   help="the command whose options to list (default: what the file sets, "
                        "command by command)")


def shown(value: Any) -> str:
    """A value as the command line or a settings file would spell it."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return str(value)


def run(args: argparse.Namespace) -> int:
    from dsbench.commands.parser import COMMANDS, build_parser

    found = settings.settings_for(["--config", str(args.config)] if args.config else [])
    if args.name is not None and args.name not in COMMANDS:
        raise DsbenchError(f"{args.name}: not a dsbench command (the commands: "
                           f"{', '.join(COMMANDS)})")
    parser = build_parser()
    commands = dict(settings.subparsers(parser))
    lines = []
    if found.path is None:
        lines.append(f"settings: none (no {settings.FILE}, nor a pyproject.toml with "
                     f"[tool.dsbench], at or above {Path.cwd()}): every option at its default")
    else:
        settings.check_tables(found, COMMANDS)
    every = settings.every_option(parser)
    names = [args.name] if args.name else [c for c in COMMANDS if c != "config"]
    # Every command's values resolved before a line is printed: a bad key is the one line.
    resolved = {name: settings.resolve(commands[name], name, found, lambda: every)
                if found.path is not None else settings.Applied() for name in names}
    if found.path is not None:
        lines.append(f"settings: {found.where()}")
    for name, applied in resolved.items():
        sub = commands[name]
        if args.name is None:
            if applied.values:
                # The name a file uses for each option: the first of its long names.
                named: dict[str, str] = {}
                for option, action in settings.long_options(sub).items():
                    named.setdefault(action.dest, option)
                lines += [f"\ndsbench {name}:", fmt.table(["option", "value", "from"], [
                    [f"--{named[dest]}", shown(v), where]
                    for dest, (v, where) in applied.values.items()])]
            continue
        rows, seen = [], set()
        for option, action in sorted(settings.long_options(sub).items()):
            if action.help == argparse.SUPPRESS or action.dest in seen:
                continue  # an old spelling, refused; or a second name of one option
            seen.add(action.dest)
            value, where = applied.values.get(action.dest, (action.default, "default"))
            rows.append([f"--{option}", shown(value), where])
        lines += [f"\ndsbench {name}: every option's value unless given on the command line",
                  fmt.table(["option", "value", "from"], rows)]
    if args.name is None and found.path is not None:
        lines.append("\nEvery other option is at its default; the command line wins over the "
                     "file (dsbench config COMMAND lists a command's options).")
    fmt.out("\n".join(lines))  # one write, which a reader that went away does not break
    return 0

