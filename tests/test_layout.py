"""The package's layout as dsbench/__init__.py states it: stages import only backwards, no import
cycles, short modules, and a docstring on every package saying what enters and what leaves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dsbench"
# The stages in the order data flows; the foundation modules (errors, fmt, atomic, stats,
# procs, installed) come before all of them, the command line after.
STAGES = ["storage", "adapters", "export", "results", "loader", "resume", "model", "job",
          "analysis", "advise", "report", "commands"]
FOUNDATION = {"dsbench", "dsbench.errors", "dsbench.fmt", "dsbench.atomic", "dsbench.stats",
              "dsbench.procs", "dsbench.installed"}
TOP = {"dsbench.cli", "dsbench.__main__"}
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def rank(module: str) -> int:
    if module in FOUNDATION:
        return 0
    if module in TOP:
        return len(STAGES) + 1
    stage = module.split(".")[1]
    assert stage in STAGES, f"{module}: a package that is not a stage of the flow"
    return STAGES.index(stage) + 1


def imports(module: str) -> set[str]:
    """Every dsbench module `module` imports, at the top or inside functions; `from pkg import
    sub` counts as importing the submodule, not the package's __init__."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dsbench")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dsbench"):
            assert node.level == 0, f"{module}: relative import"
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else str(node.module))
    return found - {module}


def test_every_stage_imports_only_from_the_stages_before_it() -> None:
    backwards = [f"{m} imports {i}" for m in MODULES for i in imports(m) if rank(i) > rank(m)]
    assert backwards == []


def test_there_is_no_import_cycle() -> None:
    graph = {m: imports(m) for m in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path, m, n]
            if n not in state and (cycle := visit(n, [*path, m])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            assert visit(m, []) is None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_are_short(module: str) -> None:
    assert len(MODULES[module].read_text(encoding="utf-8").splitlines()) <= MAX_LINES


@pytest.mark.parametrize("package", [m for m, p in MODULES.items() if p.name == "__init__.py"])
def test_each_package_says_what_enters_and_leaves(package: str) -> None:
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8"))) or ""
    assert len(doc.split()) >= 15, f"{package}: the docstring should describe the stage"
    if package not in ("dsbench", "dsbench.commands"):
        assert "In:" in doc and "Out:" in doc and "May import" in doc
