"""dsbench inspect PATH: what an export holds and what its layout costs per sample.

Reads indexes, tar headers, directory listings and columnar footers, plus the headers of a few
hundred images, never every payload. Exit status 0 when nothing is wrong with the export, 2 when
it holds bad samples or structural problems (the report is printed either way, and one line on
stderr names the first problem), as for any other bad input.
"""

from __future__ import annotations

import argparse

from dsbench import adapters
from dsbench.adapters import FORMATS
from dsbench.adapters.survey import summarize
from dsbench.commands.options import (
    add_image_field_argument,
    add_json_argument,
    emit,
)
from dsbench.commands.sample_options import add_seq_len_argument
from dsbench.errors import DsbenchError
from dsbench.report.survey import counted, render

HELP = ("describe an export: layout, samples, bytes and files per sample, fields, images, "
        "bad samples (exit 2 when there are any)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="an export: a directory, a shard or a columnar file")
    add_json_argument(p, "the export summary")
    p.add_argument("--layout", choices=sorted(FORMATS), default=None,
                   help="read as this layout instead of detecting it")
    add_image_field_argument(p)
    add_seq_len_argument(p)


def run(args: argparse.Namespace) -> int:
    if args.seq_len < 1:
        raise DsbenchError(f"--seq-len {args.seq_len}: a sequence holds at least 1 id")
    export = adapters.open_export(args.path, args.layout, args.image_field, args.seq_len)
    summary = summarize(export.survey(), args.path, export.ignored, export)
    emit(args, summary, lambda: render(summary))
    if summary["samples"] == 0 and not summary["problems"]:
        raise DsbenchError("the export holds no samples", path=args.path)
    if summary["problems"]:
        first = summary["problems"][0]
        raise DsbenchError(f"{first['error']} ({counted(summary['bad_samples'], 'bad samples')}"
                           f", {counted(summary['problems_count'], 'problems')} in all: see the "
                           "report)",
                           path=first["file"], key=first["key"])
    return 0
