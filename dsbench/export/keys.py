"""Reading a definition's keys: each error names the file and the key, because a definition is
usually edited by hand."""

from __future__ import annotations

from typing import Any

from dsbench.errors import DsbenchError


def fail(src: str, key: str, message: str) -> DsbenchError:
    return DsbenchError(f"{key}: {message}", path=src)


def take_int(src: str, key: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(src, key, f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise fail(src, key, f"{value} is out of range [{lo}, {hi}]")
    return value


def take_choice(src: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise fail(src, key, f"{value!r} is not one of {', '.join(choices)}")
    return str(value)


def number(src: str, key: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise fail(src, key, f"expected a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def unknown(src: str, prefix: str, table: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise fail(src, prefix + extra[0], f"unknown key (allowed: {', '.join(sorted(allowed))})")
