"""The table of docs/formats.md: the same samples in every format, each read by dsbench's reader
and by its own library, and counted in an object store.

    python -P benchmarks/formats_table.py SOURCE OUT [--rounds 6] [--seconds 2]

SOURCE is an export dsbench reads (the table in the docs: `dsbench generate before
/tmp/dsbench/before`, 2000 samples). Every definition in dsbench/export/formats/ that has a
library writer, and the Arrow and Parquet candidates, is re-laid from SOURCE into OUT with
`generate --from`; each export is measured with one loader worker by both readers, the two
interleaved in one run (`compare EXPORT EXPORT --cand-backend native`, paired rounds), and its
files, bytes and requests per sample are counted from a local S3 server (moto). The table is
printed as Markdown, with the per-stage CPU of each reader, and every result is kept in OUT.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.cli import main
from dsbench.loader.counts import count_pass
from dsbench.results.stages import STAGES
from dsbench.storage.server import LocalS3

DEFINITIONS = ("mds", "litdata", "hf", "hf-hub", "lance", "tfrecord", "arrow", "parquet")
NATIVE = {"mds", "litdata", "hf", "hf-hub", "lance", "tfrecord", "before"}


def _run(argv: list[str]) -> None:
    code = main(argv)
    if code != 0:
        sys.exit(f"dsbench {' '.join(argv)}: exit {code}")


def _requests(server: LocalS3, path: Path, name: str) -> dict[str, float]:
    """Files, bytes and requests per sample, counted over the whole export in a bucket."""
    from dsbench import adapters
    from dsbench.storage import remote

    url = server.create_bucket(f"table-{name.replace('_', '-')}")
    server.upload_tree(path, f"{url}/export")
    remote.clear_caches()
    export = adapters.open_export(f"{url}/export")
    counts = count_pass(export, 0)
    per = counts.samples or 1
    # Lance reads through its own client, whose requests dsbench does not see.
    requests = counts.requests.data_requests / per if counts.requests else None
    return {"files": counts.files / per, "bytes": (counts.read_bytes + counts.mapped_bytes) / per,
            "requests": requests}


def main_(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source")
    p.add_argument("out", type=Path)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--table-only", action="store_true",
                   help="print the table of the results already in OUT")
    args = p.parse_args(argv)
    if args.table_only:
        print(render(json.loads((args.out / "rows.json").read_text())))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    exports = {"before": Path(args.source)}
    formats = Path(__file__).resolve().parents[1] / "formats"
    for name in DEFINITIONS:
        exports[name] = args.out / name
        _run(["generate", str(formats / f"{name}.toml"), str(exports[name]), "--from",
              args.source])
    rows: list[dict[str, Any]] = []
    with LocalS3() as server:
        for k, v in server.env.items():
            import os

            os.environ[k] = v
        for name, path in exports.items():
            base, cand = args.out / f"{name}-dsbench.json", args.out / f"{name}-native.json"
            window = ["--workers", "1", "--rounds", str(args.rounds), "--seconds",
                      str(args.seconds), "--batch-size", "32", "--no-cluster"]
            if name in NATIVE:
                _run(["compare", str(path), str(path), "--cand-backend", "native", *window,
                      "--save", str(base), str(cand), "--json", str(args.out / f"{name}.json")])
            else:
                _run(["bench", str(path), *window[:-1], "--json", str(base)])
            docs = {"dsbench": json.loads(base.read_text())}
            if name in NATIVE:
                docs["native"] = json.loads(cand.read_text())
            rows.append({"name": name, "layout": docs["dsbench"]["export"]["layout"],
                         "docs": docs, "store": _requests(server, path, name)})
    (args.out / "rows.json").write_text(json.dumps(rows))
    print(render(rows))


def render(rows: list[dict[str, Any]]) -> str:
    head = ["export", "reader", "CPU", *STAGES, "files", "bytes", "requests (S3)"]
    body = []
    for r in rows:
        for reader, doc in r["docs"].items():
            run = doc["runs"][0]
            who = (f"{doc['reader']['library']} {doc['reader']['version']}"
                   if reader == "native" else "dsbench")
            body.append([f"{r['name']} ({r['layout']})", who,
                         fmt.seconds(run["cpu_s_per_sample"], "sample"),
                         *(fmt.seconds(run["stages"][s], "sample") for s in STAGES),
                         f"{fmt.sig(run['files_per_sample'])}/sample",
                         fmt.nbytes(run["bytes_per_sample"], "sample"),
                         "not counted" if r["store"]["requests"] is None
                         else f"{fmt.sig(r['store']['requests'])}/sample"])
    return fmt.table(head, body, markdown=True)


if __name__ == "__main__":
    main_()
