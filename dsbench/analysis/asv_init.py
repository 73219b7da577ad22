"""`dsbench asv init`: write an asv configuration and suite into a user's own git repository, so
that asv tracks what reading the repository's export costs per sample, commit by commit.

Everything is checked before anything is written, and every file is written whole
(dsbench.atomic) or not at all. asv.conf.json and the suite are never written over without
`force`; benchmarks/__init__.py and .asv/.gitignore are written only where missing.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

from dsbench import __version__, atomic
from dsbench.errors import DsbenchError
from dsbench.export.spec import MAX_SAMPLES, load_spec

CONFIG = "asv.conf.json"
BENCHMARK_DIR = "benchmarks"
SUITE = f"{BENCHMARK_DIR}/dsbench_export.py"
# The benchmarks whose figures are counted, not timed: the same on every run, so that a tight
# factor holds them (the timed CPU varied 10% between two runs of one commit here).
COUNTS = "track_(files|bytes|instructions)"
PLUGIN = ".dsbench.analysis.asv_env"  # the leading dot: asv imports it as a module by name
ENVIRONMENT = "dsbench"  # asv_env.TOOL_NAME; not imported here, as that imports asv
TIMEOUT_S = 600


@dataclass(frozen=True)
class InitOptions:
    repo: Path
    definition: str | None = None  # relative to the repository's top level, '/'-separated
    command: str | None = None
    samples: int = 200
    branch: str | None = None  # None: the repository's current branch
    force: bool = False


@dataclass(frozen=True)
class Written:
    root: Path
    branch: str
    written: list[str]  # paths relative to root, in the order written
    kept: list[str]  # files that were there already and are left as they are


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                              check=False)
    except FileNotFoundError:
        raise DsbenchError("git is not installed (asv measures the commits of a git "
                           "repository)") from None


def repository(path: Path) -> Path:
    """The top level of the git repository holding `path`."""
    if not path.is_dir():
        raise DsbenchError("no such directory", path=path)
    done = _git(path, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise DsbenchError("not a git repository (asv measures commits: run `git init` and "
                           "commit the export's definition or code first)", path=path)
    return Path(done.stdout.strip())


def current_branch(root: Path) -> str:
    done = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    if done.returncode != 0:
        raise DsbenchError("HEAD is not on a branch (detached): name the branch asv follows "
                           "with --branch", path=root)
    return done.stdout.strip()


def definition_path(root: Path, definition: str) -> str:
    """The definition's path relative to the repository, checked to be a valid definition
    inside it; relative paths are taken from the repository's top level."""
    given = Path(definition)
    path = (given if given.is_absolute() else root / given).resolve()
    try:
        rel = path.relative_to(root.resolve())
    except ValueError:
        raise DsbenchError("the definition must be inside the repository, which asv reads at "
                           "each commit", path=definition) from None
    if not path.exists():
        raise DsbenchError("no such definition file (paths are relative to the repository's "
                           f"top level, {root})", path=definition)
    load_spec(path)  # a bad definition is said now, not at the first asv run
    return rel.as_posix()


def check(opts: InitOptions) -> tuple[Path, str, str | None]:
    """The repository, the branch and the definition's relative path, every option checked."""
    if (opts.definition is None) == (opts.command is None):
        raise DsbenchError("give either --definition PATH or --command CMD, not both or "
                           "neither")
    if isinstance(opts.samples, bool) or not 1 <= opts.samples <= MAX_SAMPLES:
        raise DsbenchError(f"--samples must be between 1 and {MAX_SAMPLES}, got {opts.samples}")
    if opts.command is not None:
        if not opts.command.strip():
            raise DsbenchError("--command is empty")
        if "{out}" not in opts.command:
            raise DsbenchError("--command must say where to write the export with {out} (the "
                               f"directory the benchmark gives it): {opts.command!r}")
    root = repository(opts.repo)
    branch = current_branch(root) if opts.branch is None else opts.branch
    if not branch.strip():
        raise DsbenchError("--branch is empty")
    if opts.branch is not None and _git(root, "rev-parse", "--verify", "--quiet",
                                        f"{branch}^{{commit}}").returncode != 0:
        # asv would say "Unknown branch" at every run; a branch with no commit yet is only
        # the current one of a new repository.
        done = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD")
        if done.returncode != 0 or done.stdout.strip() != branch:
            raise DsbenchError(f"--branch {branch}: no such branch or commit", path=root)
    definition = definition_path(root, opts.definition) if opts.definition else None
    return root, branch, definition


def render_config(project: str, branch: str) -> str:
    """asv.conf.json: plain JSON plus the // comments asv's configuration allows."""
    def j(value: object) -> str:
        return json.dumps(value)
    return f"""\
// asv's configuration, written by `dsbench asv init` (dsbench {__version__}): asv measures
// what reading this repository's export costs per sample at each commit
// ({SUITE}). Edit freely.
{{
    "version": 1,
    "project": {j(project)},
    "project_url": "",
    "repo": ".",
    "dvcs": "git",
    // The branch `asv run` measures and `asv publish` graphs.
    "branches": [{j(branch)}],
    // The dsbench environment (dsbench/analysis/asv_env.py, which asv imports as a plugin):
    // the benchmarks run on the Python that runs asv, where dsbench is installed. asv checks
    // each commit out, and builds and installs nothing: the suite reads the commit's files.
    "plugins": [{j(PLUGIN)}],
    "environment_type": {j(ENVIRONMENT)},
    "build_command": [],
    "install_command": [],
    "uninstall_command": [],
    "benchmark_dir": {j(BENCHMARK_DIR)},
    // Environments (commit checkouts), results and HTML: .asv/.gitignore keeps them out of git.
    "env_dir": ".asv/env",
    "results_dir": ".asv/results",
    "html_dir": ".asv/html",
    "default_benchmark_timeout": {TIMEOUT_S}
}}
"""


def render_suite(definition: str | None, command: str | None, samples: int,
                 branch: str) -> str:
    """benchmarks/dsbench_export.py: the settings as constants, the work in dsbench."""
    if definition is not None:
        what = (f"dsbench generates SAMPLES samples from the definition {definition} as the "
                "measured commit has it.")
    else:
        what = ("COMMAND runs, by the shell, in the measured commit's files, with {out} "
                "replaced by an empty directory to write the export into and {samples} by "
                "SAMPLES (also in the environment as DSBENCH_OUT and DSBENCH_SAMPLES).")
    about = textwrap.fill(
        f"Written by `dsbench asv init` (dsbench {__version__}); edit freely. setup_cache makes "
        f"the export once per commit, in a temporary directory of asv's: {what} Each track_* "
        "benchmark then reads it as a training job's loader does (dsbench's loader benchmark, "
        "one worker process, whole passes over the export) and returns one figure, lower is "
        "better, three significant digits:", width=96)
    steps = [("asv machine --yes", "once per machine"),
             ("asv run --quick", f"the head of {branch}"),
             (f"asv continuous --factor 1.1 {branch} HEAD",
              "on another branch: exit 1 when a figure got worse"),
             (f"asv continuous --factor 1.02 -b '{COUNTS}' {branch} HEAD",
              "the counts alone, exact: a 2% step is real")]
    width = max(len(cmd) for cmd, _ in steps) + 2
    usage = "\n".join(f"    {cmd.ljust(width)}# {why}" for cmd, why in steps)
    return f'''\
"""What reading this repository's export costs per sample, tracked commit by commit with asv.

{about}

    track_cpu_ms_per_sample        ms/sample            CPU of the loader (main process, worker)
    track_bytes_per_sample         bytes/sample         bytes read, over whole shards or samples
    track_files_per_sample         files/sample         files opened, counted the same way
    track_instructions_per_sample  instructions/sample  CPU instructions, counted under valgrind

{usage}
"""

from pathlib import Path

from dsbench.analysis import asv_suite

ROOT = Path(__file__).resolve().parents[1]  # the repository: this file is in {BENCHMARK_DIR}/
DEFINITION = {definition!r}  # the export's definition, relative to ROOT
COMMAND = {command!r}  # or the command that writes the export
SAMPLES = {samples!r}


def make_export(self):
    """Both classes' setup_cache: asv makes the export once per commit for the two."""
    return asv_suite.make_export(ROOT, DEFINITION, COMMAND, SAMPLES)


make_export.timeout = {TIMEOUT_S}  # seconds, for making the export


class ExportCost:
    """Per-sample cost of loading the export, as a training job's loader does."""

    timeout = {TIMEOUT_S}  # seconds, for each measurement
    setup_cache = make_export

    def track_cpu_ms_per_sample(self, export):
        return asv_suite.cpu_ms_per_sample(export)

    track_cpu_ms_per_sample.unit = "ms/sample"

    def track_bytes_per_sample(self, export):
        return asv_suite.bytes_per_sample(export)

    track_bytes_per_sample.unit = "bytes/sample"

    def track_files_per_sample(self, export):
        return asv_suite.files_per_sample(export)

    track_files_per_sample.unit = "files/sample"


class ExactCost:
    """CPU instructions per sample: counted, so one process and one value are exact."""

    timeout = {TIMEOUT_S}
    setup_cache = make_export

    def setup(self, export):
        asv_suite.exact_available()  # asv skips the benchmark where valgrind is missing

    def track_instructions_per_sample(self, export):
        return asv_suite.instructions_per_sample(export)

    track_instructions_per_sample.unit = "instructions/sample"
    track_instructions_per_sample.processes = 1
'''


def init(opts: InitOptions) -> Written:
    """Check everything, then write the files; nothing is written when a check fails."""
    root, branch, definition = check(opts)
    files = {
        CONFIG: (render_config(root.name, branch), True),
        SUITE: (render_suite(definition, opts.command, opts.samples, branch), True),
        f"{BENCHMARK_DIR}/__init__.py": ("", False),
        # Everything under .asv is asv's (environments with commit checkouts, results, HTML).
        ".asv/.gitignore": ("# asv's environments, results and HTML (dsbench asv init)\n*\n",
                            False),
    }
    for rel in (BENCHMARK_DIR, ".asv"):
        if (root / rel).exists() and not (root / rel).is_dir():
            raise DsbenchError("is in the way: a directory goes here", path=root / rel)
    taken = [rel for rel, (_, owned) in files.items() if owned and (root / rel).exists()]
    if taken and not opts.force:
        raise DsbenchError(f"{', '.join(taken)} already there: --force writes over "
                           f"{'it' if len(taken) == 1 else 'them'}", path=root)
    for rel in files:
        if (root / rel).parent.is_dir():  # a directory still to be made is checked by making it
            atomic.check_output(root / rel)
    written, kept = [], []
    for rel, (text, owned) in files.items():
        path = root / rel
        if path.exists() and not owned:
            kept.append(rel)
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(path, text)
        except OSError as exc:  # a full disk, say: the files written so far are whole
            raise DsbenchError(f"cannot write: {exc.strerror or exc}", path=path) from None
        written.append(rel)
    return Written(root, branch, written, kept)
