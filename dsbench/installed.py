"""The optional libraries a command needs, at the versions it can work with.

dsbench's extras give lower bounds only: a training environment keeps the torch it has. What an
installed version cannot do is said here, in one line, when a command first needs it, rather
than as an AttributeError deep in a run.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from typing import Any

from dsbench.errors import DsbenchError

# The oldest release of each that dsbench works with, and the extra that installs it. torch 2.4:
# litdata's floor, and DataLoader's in_order and the launcher's API as dsbench calls them;
# torchdata 0.11: its StatefulDataLoader.
MINIMUM: dict[str, tuple[str, str]] = {
    "torch": ("2.4", "torch"),
    "torchdata": ("0.11", "torch"),
}


def release(version: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0): the leading numbers, for comparing against a minimum."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in numbers.group().split(".")) if numbers else ()


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(module: str, purpose: str) -> Any:
    """Import `module` (a key of MINIMUM) for `purpose` ("--backend torch"), or say in one line
    why it cannot serve: absent, or older than dsbench's minimum."""
    minimum, extra = MINIMUM[module]
    try:
        lib = importlib.import_module(module)
    except ImportError as exc:
        raise DsbenchError(f"{purpose} needs {module} >= {minimum}, which is not installed "
                           f"({exc}): pip install 'dsbench[{extra}]'") from None
    found = str(version_of(module) or getattr(lib, "__version__", ""))
    if release(found) < release(minimum):
        raise DsbenchError(f"{purpose} needs {module} >= {minimum}; this environment has "
                           f"{module} {found}: upgrade it (pip install '{module}>={minimum}')")
    return lib
