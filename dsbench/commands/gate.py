"""dsbench gate BASE CAND: exit 0 when the candidate holds, 1 when it regresses, 2 on bad input."""

from __future__ import annotations

import argparse
from pathlib import Path

from dsbench import fmt
from dsbench.analysis import gate
from dsbench.analysis.measure import compare_sides
from dsbench.commands.options import add_json_argument, emit
from dsbench.commands.sides import add_side_arguments, side_options
from dsbench.errors import DsbenchError
from dsbench.report.comparison import render, render_gate

HELP = ("CI throughput gate: hard limits on bytes, files, CPU instructions (exact) and CPU time "
        "per sample and on peak memory per loader worker, a soft one on samples/s; thresholds "
        "from options or [tool.dsbench.gate] in pyproject.toml or dsbench.toml")


# Where CPU is counted exactly, the count decides it and the timed rounds only estimate what
# the change costs in time: two pairs of rounds fewer pay for the exact pass, so that the gate
# takes about as long with it as without (two 500-sample exports: about 50 s here).
EXACT_ROUNDS = 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_side_arguments(p, EXACT_ROUNDS)
    t = p.add_argument_group("thresholds (also from [tool.dsbench.gate]: docs/settings.md)")
    d = gate.Thresholds()
    t.add_argument("--max-bytes-ratio", type=float, default=d.max_bytes_ratio,
                   help=f"bytes read per sample, candidate over base (default "
                        f"{d.max_bytes_ratio:g})")
    t.add_argument("--max-files-ratio", type=float, default=d.max_files_ratio,
                   help=f"files opened per sample, candidate over base (default "
                        f"{d.max_files_ratio:g})")
    t.add_argument("--max-instructions-ratio", type=float, default=d.max_instructions_ratio,
                   help="CPU instructions per sample, counted exactly where valgrind is "
                        f"installed (default {d.max_instructions_ratio:g})")
    t.add_argument("--max-cpu-ratio", type=float, default=d.max_cpu_ratio,
                   help=f"timed CPU per sample: fails only when significant too (default "
                        f"{d.max_cpu_ratio:g})")
    t.add_argument("--max-memory-ratio", type=float, default=d.max_memory_ratio,
                   help="peak anonymous memory per loader worker (PSS for results without "
                        "the kernel's split); fails only when significant too "
                        f"(default {d.max_memory_ratio:g})")
    t.add_argument("--memory-allowance-mb", type=float, default=d.memory_allowance_mb,
                   help="memory per worker past its ratio passes when it grew by at most this "
                        f"many MB (default {d.memory_allowance_mb:g})")
    t.add_argument("--min-throughput-ratio", type=float, default=d.min_throughput_ratio,
                   help=f"soft: warns (default {d.min_throughput_ratio:g})")
    t.add_argument("--strict-throughput", action="store_true", default=d.strict_throughput,
                   help="make the samples/s limit hard too")
    t.add_argument("--gate-workers", type=int, default=None,
                   help="worker count to gate on (default: the largest measured)")
    o = p.add_argument_group("output")
    o.add_argument("--markdown", action="store_true", help="print GitHub markdown instead of text")
    o.add_argument("--summary", type=Path, metavar="FILE",
                   help="append the markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    add_json_argument(o, "{\"gate\": the checks, \"comparison\": the comparison}")


def run(args: argparse.Namespace) -> int:
    # The options' values, [tool.dsbench.gate]'s among them (commands/settings.py); a bad one
    # names the file it came from, or the option.
    thresholds = gate.load_thresholds(vars(args), getattr(args, "settings_origin", {}))
    opts, cand_opts = side_options(args, EXACT_ROUNDS)
    comparison = compare_sides([args.base, args.cand], opts, save=args.save,
                               progress=fmt.progress, cand_opts=cand_opts,
                               any_order=args.any_order)
    result = gate.evaluate(comparison, thresholds, args.gate_workers)
    markdown = render_gate(result, markdown=True) + "\n\n" + render(comparison, markdown=True)
    if args.summary:
        try:
            with open(args.summary, "a", encoding="utf-8") as f:
                f.write(markdown + "\n")
        except OSError as exc:
            raise DsbenchError(f"cannot write the summary: {exc}", path=args.summary) from None
    emit(args, {"gate": result, "comparison": comparison},
         lambda: markdown if args.markdown else render_gate(result) + "\n\n" + render(comparison))
    return int(result["exit_code"])
