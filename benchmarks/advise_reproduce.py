"""Does advise's win hold when measured again? The A/A-style check for advice.

    python benchmarks/advise_reproduce.py OUT_DIR [RUNS] [DEFINITION]

Writes the incident's before export (formats/before.toml: WebDataset shards of JPEG + label,
2000 samples; or DEFINITION) under OUT_DIR, then RUNS times (default 1): `dsbench advise` with
its default options, the candidates kept; where it recommends one, the same candidate is
measured against the export again with `dsbench compare` over twice the last pass's rounds, and
the win counts as reproduced when that comparison's CPU per sample is also better (its 95%
interval below 1x). Prints one line per run and the count. Takes about 5 minutes a run on 2
cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dsbench.export.generate import generate, is_complete
from dsbench.export.spec import FORMATS_DIR, load_spec


def dsbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dsbench", *args], check=True,
                   stdout=subprocess.DEVNULL)


def main(out_dir: str, runs: int, definition: str) -> None:
    out = Path(out_dir)
    source = out / Path(definition).stem
    if not is_complete(source):
        generate(load_spec(definition), source)
    claimed = reproduced = 0
    for i in range(runs):
        work, advice = out / f"work-{i}", out / f"advice-{i}.json"
        dsbench("advise", str(source), "--work-dir", str(work), "--json", str(advice),
                "--definition", str(out / f"advised-{i}.toml"))
        doc = json.loads(advice.read_text())
        winner = doc["recommendation"]["winner"]
        if winner is None:
            print(f"run {i}: no win claimed ({doc['recommendation']['text']})")
            continue
        rounds = 2 * doc["passes"][-1]["rounds"]
        again = out / f"compare-{i}.json"
        dsbench("compare", str(source), str(work / winner), "--rounds", str(rounds),
                "--seconds", "1", "--batch-size", str(doc["settings"]["batch_size"]),
                "--no-cluster", "--json", str(again))
        cpu = next(m for m in json.loads(again.read_text())["runs"][0]["metrics"]
                   if m["metric"] == "cpu_s_per_sample")
        row = next(r for r in doc["table"] if r["name"] == winner)
        # A win on predicted utilization alone is not re-measured here: it is not counted.
        if row["vs_baseline"]["cpu_s_per_sample"]["change"] != "better":
            print(f"run {i}: advise: {doc['recommendation']['text']}; a win on predicted "
                  "utilization alone, not re-measured")
            continue
        claimed += 1
        held = cpu["change"] == "better"
        reproduced += held
        print(f"run {i}: advise: {doc['recommendation']['text']}; again over {rounds} rounds: "
              f"CPU per sample {cpu['ratio']:.3f}x (95% interval {cpu['ratio_ci95'][0]:.3f}x "
              f"to {cpu['ratio_ci95'][1]:.3f}x): {'reproduced' if held else 'NOT reproduced'}")
    print(f"{claimed} of {runs} runs claimed a win in CPU per sample; {reproduced} of them "
          "reproduced")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1,
         sys.argv[3] if len(sys.argv) > 3 else str(FORMATS_DIR / "before.toml"))
