"""One meaning per option name across the commands, and one name per meaning.

An option's meaning is the leading clause of its help: the text before the first " (", ": " or
"; ", which says what the option is; what follows may add what it is in that command. `--batch-
size` is the loader's batch wherever it appears; the GPU's batch per step is `--gpu-batch`. An
option that once meant something else in a command is refused there with a line naming the
option that now carries that meaning (`refuse`), never read as the other.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, NoReturn

_CLAUSE_END = re.compile(r" \(|: |; ")


def meaning(help_text: str) -> str:
    """The leading clause of a help text, lower-cased, its whitespace collapsed."""
    clause = _CLAUSE_END.split(help_text, maxsplit=1)[0]
    return " ".join(clause.lower().split())


def options(parser: argparse.ArgumentParser, command: str = "") -> Iterator[
        tuple[str, argparse.Action]]:
    """(command, action) for every option of `parser` and of its subcommands, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, f"{command} {name}".strip())
        elif action.option_strings and action.help not in (None, argparse.SUPPRESS):
            yield command, action


def clashes(parser: argparse.ArgumentParser) -> list[str]:
    """A line for each option name used with two meanings, and each meaning given two names."""
    by_name: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    by_meaning: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, action in options(parser):
        if command == "" or action.dest == "help":
            continue
        said = meaning(str(action.help))
        name = action.option_strings[0]  # --exact's --no-exact is the same option
        by_name[name][said].append(command)
        by_meaning[said][name].append(command)
    found = []
    for name, meanings in sorted(by_name.items()):
        if len(meanings) > 1:
            found.append(f"{name} means " + " but ".join(
                f"{m!r} in {', '.join(cmds)}" for m, cmds in meanings.items()))
    for said, names in sorted(by_meaning.items()):
        if len(names) > 1:
            found.append(f"{said!r} is called " + " and ".join(
                f"{n} in {', '.join(cmds)}" for n, cmds in names.items()))
    return found


class Refused(argparse.Action):
    """An old spelling: using it is an error whose line names the option to use now."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        raise argparse.ArgumentError(self, str(self.const))


def refuse(p: argparse.ArgumentParser | argparse._ArgumentGroup, old: str, now: str) -> None:
    """`old` is not this command's any more: refused (out of --help) with `now`, a line that
    names the option that carries what `old` meant here."""
    p.add_argument(old, action=Refused, nargs="?", const=now, help=argparse.SUPPRESS,
                   dest=f"refused_{old.lstrip('-').replace('-', '_')}")
