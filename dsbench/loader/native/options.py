"""`--native-option KEY=VALUE`: a native reader's library configured as a job configures it.

Each value goes to the constructor the reader builds its dataset with (`Reader.options_targets`:
MosaicML's StreamingDataset, litdata's StreamingDataset, `datasets.load_from_disk` or
`load_dataset`, webdataset's WebDataset, Lance's LanceDataset), as a keyword. Before any
round, each key is checked against that constructor's signature in the installed version:
a key it does not take is one line naming the constructor and the nearest key it does take,
and a value of the wrong type for a parameter annotated int, float, bool or str is one line
too. Keys that dsbench itself sets (where the export is, the batch, the worker split) are
refused with the dsbench option that sets them. The result records the options given.

A VALUE is read as TOML reads a value (`4`, `0.5`, `true`, `"text"`, `[1, 2]`), `none` as None,
and anything else as a string (`shuffle_algo=py1e`).
"""

from __future__ import annotations

import inspect
import tomllib
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from dsbench.errors import DsbenchError, did_you_mean

Options = tuple[tuple[str, Any], ...]  # (key, value) in the order given: hashable, picklable
_SIMPLE = (bool, int, float, str)


def parse(pairs: Sequence[str]) -> Options:
    """`KEY=VALUE` strings as (key, value) pairs; a key given again replaces the earlier value
    (a settings file's come first, the command line's after them)."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise DsbenchError(f"--native-option {pair!r}: expected KEY=VALUE, KEY a keyword "
                               "of the library's dataset (shuffle_algo=py1e)")
        found[key] = value_of(text.strip())
    return tuple(found.items())


def value_of(text: str) -> Any:
    if text.lower() == "none":
        return None
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


Target = tuple[Callable[..., Any], str]  # a constructor (or method) and its name for people


def keywords(target: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(target).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"]


def check(targets: Sequence[Target], options: Options, reserved: dict[str, str]) -> None:
    """Each option a keyword of one of `targets` (the first that takes it gets it), with a
    value of its annotated type; `reserved`: keys dsbench sets itself, with what sets them."""
    names = " or ".join(name for _, name in targets)
    for key, value in options:
        if key in reserved:
            raise DsbenchError(f"--native-option {key}: dsbench sets {key} of {names} itself "
                               f"({reserved[key]})")
        owner = next(((t, n) for t, n in targets if key in keywords(t)), None)
        if owner is None:
            known = [k for t, _ in targets for k in keywords(t) if k not in reserved]
            raise DsbenchError(f"--native-option {key}: {names} takes no such keyword"
                               f"{did_you_mean(key, known)}")
        target, name = owner
        want = _simple(_hints(target).get(key))
        if want is not None and not _fits(value, want):
            allowed = " or ".join("none" if t is type(None) else t.__name__ for t in want)
            raise DsbenchError(f"--native-option {key}={value!r}: {name} takes {allowed} for "
                               f"{key}, not {type(value).__name__}")


def split(targets: Sequence[Callable[..., Any]], options: dict[str, Any]
          ) -> list[dict[str, Any]]:
    """`options` divided among `targets`: each key to the first that takes it (check() has
    refused any that none takes)."""
    parts: list[dict[str, Any]] = [{} for _ in targets]
    for key, value in options.items():
        i = next(i for i, t in enumerate(targets) if key in keywords(t))
        parts[i][key] = value
    return parts


def _hints(target: Callable[..., Any]) -> dict[str, Any]:
    """The parameters' annotations, resolved where the library's module allows (some name
    types only imported for type checkers: those parameters are not type-checked)."""
    func = target.__init__ if isinstance(target, type) else target  # type: ignore[misc]
    try:
        return typing.get_type_hints(func)
    except Exception:  # an annotation that does not resolve at run time
        return {}


def _simple(hint: Any) -> tuple[type, ...] | None:
    """The types a hint allows, where all of them are simple (int, float, bool, str, None)."""
    if hint is None:
        return None
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union,
                                                                types.UnionType) else (hint,)
    if all(a in _SIMPLE or a is type(None) for a in args):
        return tuple(args)
    return None


def _fits(value: Any, want: tuple[type, ...]) -> bool:
    if value is None:
        return type(None) in want
    if isinstance(value, bool):  # a bool is an int to Python, not to a library's option
        return bool in want
    if isinstance(value, int) and float in want:
        return True
    return isinstance(value, tuple(t for t in want if t is not type(None)))
