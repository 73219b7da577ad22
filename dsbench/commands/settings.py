"""Options kept in a file: a dsbench.toml, or the `[tool.dsbench]` table of a pyproject.toml.

A key is an option's long name without its dashes (`workers`, `max-bytes-ratio` or
`max_bytes_ratio`), its value what the command line would take (`workers = "1,2"` or
`workers = [1, 2]`, `cold = true`). Keys at the top apply to every command that has the option;
a table named for a command (`[tool.dsbench.gate]`, or `[gate]` in a dsbench.toml) applies to
that command alone. Precedence, lowest first: dsbench's defaults, the top keys, the command's
table, the command line. A key that no command has, a table that names no command, or a value
the option would refuse is one line naming the file and the key, exit 2: a setting that is
silently ignored is a gate that silently changed.

The file is `--config FILE`, or else the nearest directory at or above the current one that has
a dsbench.toml (which wins) or a pyproject.toml with a `[tool.dsbench]` table: the directory a
team runs its CI from, or any below it. `dsbench config [COMMAND]` prints what is in force.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsbench.commands.vocabulary import Refused
from dsbench.errors import DsbenchError, did_you_mean

FILE = "dsbench.toml"
# Options no file may set: they say where the settings are, or are not options at all.
NOT_SETTINGS = frozenset({"help", "config", "version"})
_FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)


@dataclass(frozen=True)
class Settings:
    """One file's settings: `shared` for every command, `tables` by command name."""
    path: Path | None = None
    table: str = ""  # how the file names its top: "[tool.dsbench]", or "" for a dsbench.toml
    shared: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def where(self, command: str | None = None) -> str:
        """'FILE [table]', as a message names the origin of a value."""
        name = self.table.strip("[]")
        if command is not None:
            name = f"{name}.{command}" if name else command
        return f"{self.path} [{name}]" if name else str(self.path)


def find(start: Path) -> Path | None:
    """The settings file that applies in `start`: the nearest dsbench.toml, or pyproject.toml
    with a [tool.dsbench] table (a project's pyproject without one is passed over)."""
    for d in (start, *start.parents):
        if (d / FILE).is_file():
            return d / FILE
        pyproject = d / "pyproject.toml"
        if pyproject.is_file():
            try:
                tool = _read(pyproject).get("tool", {})
            except DsbenchError:
                # Another project's broken pyproject is not dsbench's to refuse; one that
                # means to hold dsbench's settings is, lest they be silently ignored.
                if "tool.dsbench" in pyproject.read_text(encoding="utf-8", errors="replace"):
                    raise
                continue
            if isinstance(tool, dict) and "dsbench" in tool:
                return pyproject
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DsbenchError(f"cannot read settings: {exc}", path=path) from None


def load(path: Path | None) -> Settings:
    if path is None:
        return Settings()
    data: Any = _read(path)
    table = ""
    # A pyproject.toml, or a file given with --config that is shaped like one: [tool.dsbench]
    if path.name == "pyproject.toml" or (path.name != FILE and "tool" in data):
        table = "[tool.dsbench]"
        for depth, name in enumerate(("tool", "dsbench"), 1):
            data = data.get(name, {})
            if not isinstance(data, dict):
                dotted = ".".join(("tool", "dsbench")[:depth])
                raise DsbenchError(f"[{dotted}] must be a table, not {data!r}", path=path)
    shared = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    return Settings(path, table, shared, tables)


def config_path(argv: Sequence[str]) -> Path | None:
    """--config's value on a command line, before it is parsed: it decides the defaults."""
    for i, word in enumerate(argv):
        if word == "--":
            break
        if word == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if word.startswith("--config="):
            return Path(word.split("=", 1)[1])
    return None


def settings_for(argv: Sequence[str]) -> Settings:
    given = config_path(argv)
    if given is not None and not given.is_file():
        raise DsbenchError("no such settings file", path=given)
    return load(given if given is not None else find(Path.cwd()))


# --- from a file's keys to a command's defaults ------------------------------------------------

def long_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The options a file may set in this command, by long name without dashes."""
    found = {}
    for action in parser._actions:
        for opt in action.option_strings:
            name = opt[2:]
            negative = isinstance(action, argparse.BooleanOptionalAction) and \
                opt != action.option_strings[0]  # --no-exact: the same option as --exact
            if opt.startswith("--") and name not in NOT_SETTINGS and not negative:
                found[name] = action
    return found


def _scalar(action: argparse.Action, name: str, value: Any, where: str,
            written: Any = None) -> Any:
    """One value through the option's type and choices; `written`: as the file has it, when
    that is not `value` (a list joined by commas)."""
    if isinstance(value, bool | dict | list):
        raise DsbenchError(f"{name} = {value!r}: takes one value, as --{name} does "
                           "on the command line", path=where)
    text = str(value)
    value = value if written is None else written
    try:
        converted = action.type(text) if callable(action.type) else text
    except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
        raise DsbenchError(f"{name} = {value!r}: not a value --{name} takes ({exc})",
                           path=where) from None
    if action.choices is not None and converted not in action.choices:
        raise DsbenchError(f"{name} = {value!r}: not one of "
                           f"{', '.join(map(str, action.choices))}", path=where)
    return converted


def convert(action: argparse.Action, name: str, value: Any, where: str) -> Any:
    """A file's value as the option's own parsing would give it, or one line naming the key."""
    if isinstance(action, Refused):  # an old spelling: the line names the option to use
        raise DsbenchError(f"{name}: {action.const}", path=where)
    if isinstance(action, _FLAGS):
        if not isinstance(value, bool):
            raise DsbenchError(f"{name} = {value!r}: must be true or false", path=where)
        if isinstance(action, argparse._StoreFalseAction):
            return not value
        return value
    if isinstance(action, argparse._AppendAction):  # repeatable: a list of its values
        values = value if isinstance(value, list) else [value]
        return [_scalar(action, name, v, where) for v in values]
    if action.nargs in (None, "?"):
        if isinstance(value, list):  # the command line's lists are comma-separated
            return _scalar(action, name, ",".join(str(v) for v in value), where, value)
        return _scalar(action, name, value, where)
    if not isinstance(value, list) or (isinstance(action.nargs, int)
                                       and len(value) != action.nargs):
        count = action.nargs if isinstance(action.nargs, int) else "one or more"
        raise DsbenchError(f"{name} = {value!r}: takes a list of {count} values", path=where)
    return [_scalar(action, name, v, where) for v in value]


@dataclass
class Applied:
    """What a file set in one command: dest -> (value, origin), and the file's keys that no
    option of this command takes (known to other commands)."""
    values: dict[str, tuple[Any, str]] = field(default_factory=dict)
    elsewhere: list[str] = field(default_factory=list)


def resolve(parser: argparse.ArgumentParser, command: str, settings: Settings,
            every_option: Callable[[], frozenset[str]]) -> Applied:
    """The defaults `settings` gives `command` (whose parser is `parser`). `every_option`: the
    long names of all commands' options, for telling a top key meant for another command from
    a misspelt one; called only for a top key this command lacks (it imports every command)."""
    options = long_options(parser)
    applied = Applied()
    layers = [(settings.shared, settings.where(), False),
              (settings.tables.get(command, {}), settings.where(command), True)]
    for keys, where, own in layers:
        for key, value in keys.items():
            name = key.replace("_", "-")
            action = options.get(name)
            if action is not None and isinstance(action, Refused) and not own:
                action = None  # an old spelling here: this command lacks the option
            if action is None:
                if own:
                    raise DsbenchError(f"{key}: not an option of dsbench {command}"
                                       f"{did_you_mean(name, options)}", path=where)
                if name not in every_option():
                    raise DsbenchError(f"{key}: not an option of any dsbench command"
                                       f"{did_you_mean(name, every_option())}", path=where)
                applied.elsewhere.append(name)
                continue
            try:
                applied.values[action.dest] = (convert(action, name, value, where), where)
            except DsbenchError as exc:
                if own:
                    raise
                # A top key meets every command with the option, and one may take it in
                # another shape (bench's --workers is a list, job's one count).
                table = settings.table.strip("[]")
                example = f"[{table}.bench]" if table else "[bench]"
                raise DsbenchError(f"{exc} in dsbench {command}: set it in the tables of the "
                                   f"commands it fits instead, as {example}") from None
    return applied


def check_tables(settings: Settings, commands: Sequence[str]) -> None:
    for name in settings.tables:
        if name not in commands:
            raise DsbenchError(f"[{name}]: not a dsbench command (the commands: "
                               f"{', '.join(commands)})", path=settings.where())


def apply(parser: argparse.ArgumentParser, command: str, settings: Settings,
          every_option: Callable[[], frozenset[str]]) -> Applied:
    """Set `parser`'s defaults from `settings`: the command line still wins over them. An
    option the file sets is no longer required on the command line, and a flag the file turns
    on can be turned off there (`--no-cold` where the file says `cold = true`)."""
    applied = resolve(parser, command, settings, every_option)
    parser.set_defaults(**{dest: v for dest, (v, _) in applied.values.items()})
    taken = {opt for action in parser._actions for opt in action.option_strings}
    for action in parser._actions:
        if action.dest not in applied.values:
            continue
        action.required = False
        flag = isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction)
        negative = "--no-" + next(o for o in action.option_strings if o.startswith("--"))[2:]
        if flag and negative not in taken:
            parser.add_argument(negative, dest=action.dest, action="store_const",
                                const=action.const is not True, help=argparse.SUPPRESS)
    return applied


def every_option(parser: argparse.ArgumentParser) -> frozenset[str]:
    """Long option names across every command of the full parser."""
    names: set[str] = set()
    for sub in subparsers(parser):
        names.update(long_options(sub[1]))
    return frozenset(names)


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()
