"""Each layout read in each order it allows: docs/access-patterns.md's tables.

    python benchmarks/access_patterns.py OUT_DIR [SAMPLES [EXPORT ...]]

Writes the incident's exports (formats/before.toml: WebDataset shards; after.toml: a file per
sample; arrow.toml; parquet.toml, row groups of 1000 rows) and the candidates written by their
own libraries (mds.toml, litdata.toml, lance.toml) with SAMPLES samples (default 2000)
under OUT_DIR, then measures each export in every order it allows in one interleaved run:
`sequential`, `shuffle`, and where dsbench reads the layout by random access `random` and
`block` (blocks of 1000 samples) (1 worker, batches of 64, 6 rounds of 1 s). Prints a markdown
table: throughput, CPU, bytes and files per sample, peak anonymous memory, and how random the
batches were; then each order's CPU per sample against sequential's, with its 95% interval.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from dsbench import fmt
from dsbench.analysis.compare import compare
from dsbench.export.generate import generate
from dsbench.export.spec import FORMATS_DIR, load_spec
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_benches

EXPORTS = ("before", "after", "arrow", "parquet", "mds", "litdata", "lance")
# The exports whose layouts dsbench reads by random access.
RANDOM_ACCESS = ("after", "arrow", "parquet", "mds", "litdata", "lance")
ORDERS = ("sequential", "shuffle", "random", "block")
OPTS = BenchOptions(workers=(1,), batch_size=64, seconds=1.0, rounds=6)


def main(out_dir: str, samples: int, exports: tuple[str, ...] = EXPORTS) -> None:
    out = Path(out_dir)
    print("| export (layout) | order | samples/s | CPU/sample | bytes/sample | files/sample "
          "| peak anonymous memory | units/batch | label entropy per batch / of all labels read "
          "| apart in the source order |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for name in exports:
        path = out / name
        generate(load_spec(FORMATS_DIR / f"{name}.toml"), path, samples=samples)
        orders = ORDERS if name in RANDOM_ACCESS else ORDERS[:2]
        sides = [dataclasses.replace(OPTS, order=order) for order in orders]
        docs = run_benches([path] * len(sides), OPTS, each=sides)
        for doc in docs:
            r = doc["runs"][0]
            q = r["order_figures"]
            bits = "-" if q["label_entropy_bits"] is None else \
                f"{q['label_entropy_bits']:.2f} / {q['label_entropy_all_bits']:.2f} bits"
            apart = "-" if q["source_distance"] is None else f"{q['source_distance']:.3g}"
            print(f"| {name} ({doc['export']['layout']}) | {doc['config']['order']} | "
                  f"{fmt.rate(r['samples_per_s'])} | {fmt.seconds(r['cpu_s_per_sample'])} | "
                  f"{fmt.nbytes(r['bytes_per_sample'])} | {r['files_per_sample']:.4g} | "
                  f"{fmt.nbytes(r.get('peak_pss_anon_bytes', r['peak_pss_bytes']))} | "
                  f"{q['units_per_batch']:.3g} | {bits} | {apart} samples |")
        for doc in docs[1:]:
            cpu = next(m for m in compare(docs[0], doc, any_order=True)["runs"][0]["metrics"]
                       if m["metric"] == "cpu_s_per_sample")
            ratios.append(f"- {name}: {doc['config']['order']} / sequential CPU per sample "
                          f"{cpu['ratio']:.3f}x (95% interval {cpu['ratio_ci95'][0]:.3f}x to "
                          f"{cpu['ratio_ci95'][1]:.3f}x): {cpu['change']}")
    print()
    print("\n".join(ratios))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000,
         tuple(sys.argv[3:]) or EXPORTS)
