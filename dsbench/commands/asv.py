"""dsbench asv init [REPO]: an asv configuration and suite for your own repository, tracking what
reading its export costs per sample at each commit (docs/asv.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dsbench import fmt
from dsbench.analysis.asv_init import CONFIG, COUNTS, SUITE, InitOptions, init

HELP = ("track your own export over your repository's commits with asv: `dsbench asv init` "
        "writes asv.conf.json and a suite (CPU ms, bytes and files per sample)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    d = InitOptions(repo=Path("."))
    q = sub.add_parser("init", help=HELP, description=HELP)
    q.add_argument("repo", nargs="?", default=".",
                   help="the git repository (default: the current directory's)")
    # One of the two, checked by init(), which says it as every other bad option.
    q.add_argument("--definition", metavar="PATH",
                   help="the export definition to read: a TOML file in the repository, "
                        "relative to its top level, e.g. formats/train.toml, read from each "
                        "commit")
    # dest: `command` is the subcommand's name, which the one-line errors start with.
    q.add_argument("--command", dest="export_command", metavar="CMD",
                   help="or your export command, run by the shell in each commit's files: "
                        "{out} is replaced by the directory to write a sample export into, "
                        "{samples} by --samples")
    q.add_argument("--samples", type=int, default=d.samples,
                   help=f"samples in each export made: the suite's (default {d.samples})")
    q.add_argument("--branch", default=None,
                   help="the branch asv follows (default: the repository's current branch)")
    q.add_argument("--force", action="store_true",
                   help=f"write over an existing {CONFIG} and {SUITE}")


def run(args: argparse.Namespace) -> int:
    done = init(InitOptions(repo=Path(args.repo), definition=args.definition,
                            command=args.export_command, samples=args.samples, branch=args.branch,
                            force=args.force))
    lines = [f"dsbench asv: wrote {', '.join(done.written)} in {done.root}"
             + (f" (kept the existing {', '.join(done.kept)})" if done.kept else "")]
    steps = [(f"git add {CONFIG} benchmarks && git commit -m 'Track the export with asv'", ""),
             ("asv machine --yes", "once per machine"),
             ("asv run --quick", f"{done.branch}'s head: 4 figures, lower is better"),
             (f"asv continuous --factor 1.1 {done.branch} HEAD",
              "on another branch: exit 1 when one got worse"),
             (f"asv continuous --factor 1.02 -b '{COUNTS}' {done.branch} HEAD",
              "the counts alone, exact: a 2% step is real")]
    width = max(len(cmd) for cmd, why in steps if why) + 2
    lines += ["next, in the repository:"]
    lines += [f"  {cmd.ljust(width)}# {why}" if why else f"  {cmd}" for cmd, why in steps]
    fmt.out("\n".join(lines))
    return 0
