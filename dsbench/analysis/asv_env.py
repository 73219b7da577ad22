"""An asv environment that runs a repository's commits on the Python asv itself runs on.

`dsbench asv init` names this module in the asv.conf.json it writes (`"plugins":
[".dsbench.analysis.asv_env"]`, `"environment_type": "dsbench"`); asv imports it, in its own
process, before it makes any environment. Why an environment of our own:

- asv's `existing` environment (`--python=same`, `-E existing`) takes no commit range, so
  `asv continuous BASE HEAD` refuses to run in it ("No range spec may be specified if
  benchmarking in an existing environment").
- a `virtualenv` environment pip-installs asv_runner, pympler and build from the package index
  when asv creates it, and dsbench with numpy, pyarrow and pillow would have to be installed
  there as well: a network and minutes before the first figure, for a repository that is not
  a Python package and installs nothing.

This environment creates nothing and installs nothing: its benchmarks run on the interpreter
asv runs on, which has dsbench (pip install 'dsbench[bench]' puts asv beside it). Each commit is
still checked out by asv, as for any environment, into `<env_dir>/<hash>/project`, and the
build, install and uninstall commands of asv.conf.json (empty in what init writes) run there.
Unlike asv's own environments, it says where that checkout is every time (`ASV_BUILD_DIR`), also
when the commit was already checked out, so that a benchmark can read the commit's own files.

It uses asv's Environment class, which is asv's own and not a published interface: it is
written for, and checked with, asv 0.6.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from asv import environment  # type: ignore[import-untyped]
from asv.console import log  # type: ignore[import-untyped]

TOOL_NAME = "dsbench"


def _version() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


class DsbenchEnvironment(environment.Environment):
    """The interpreter running asv, with each commit checked out beside it."""

    tool_name = TOOL_NAME

    def __init__(self, conf: Any, python: str, requirements: dict[str, str],
                 tagged_env_vars: dict[tuple[str, str], str]) -> None:
        if python not in ("same", _version(), sys.executable):
            raise environment.EnvironmentUnavailable(
                f"the dsbench environment runs on the Python asv runs on ({_version()}), "
                f"not {python}")
        if requirements:
            raise environment.EnvironmentUnavailable(
                "the dsbench environment installs nothing: asv.conf.json's matrix must be empty")
        self._executable = sys.executable
        self._python = _version()
        self._requirements: dict[str, str] = {}
        super().__init__(conf, self._python, {}, tagged_env_vars)

    @classmethod
    def matches(cls, python: str) -> bool:
        return python in ("same", _version(), sys.executable)

    def check_presence(self) -> bool:
        # Nothing to be present but the directory the checkouts go into.
        return bool(os.path.isdir(self._path))

    def _setup(self) -> None:
        os.makedirs(self._path, exist_ok=True)

    def find_executable(self, executable: str) -> str:
        if executable in ("python", "python3", os.path.basename(self._executable)):
            return str(self._executable)
        found = shutil.which(executable)
        if found is None:
            raise OSError(f"{executable} not found on PATH")
        return found

    def run(self, args: list[str], **kwargs: Any) -> Any:
        log.debug(f"Running '{' '.join(args)}' in {self.name}")
        # run_executable adds ASV_COMMIT, ASV_BUILD_DIR and the rest of asv's variables.
        return self.run_executable("python", args, **kwargs)

    def install_project(self, conf: Any, repo: Any, commit_hash: str) -> None:
        super().install_project(conf, repo, commit_hash)
        # asv leaves ASV_BUILD_DIR unset when the commit is already checked out (a second round,
        # a second run); the checkout is still that commit's, and the suite reads it.
        build_dir = self._build_root
        if self._repo_subdir:
            build_dir = os.path.join(build_dir, self._repo_subdir)
        self._set_build_dirs(build_dir, None)
