"""dsbench generate DEFINITION OUT_DIR [--from EXPORT]: write (or complete) an export from a
definition, with synthetic samples or, with --from, the samples of an existing export."""

from __future__ import annotations

import argparse
import os

from dsbench import fmt
from dsbench.adapters import FORMATS
from dsbench.adapters.tokenizer import from_file
from dsbench.errors import DsbenchError
from dsbench.export.generate import GenerateReport, generate
from dsbench.export.parts import parse_part
from dsbench.export.reexport import ReexportReport, reexport
from dsbench.export.spec import FORMATS_DIR, MAX_SAMPLES, find_definition, load_spec, shipped
from dsbench.export.synth import GENERATOR, GENERATORS

HELP = ("write an export from a definition (a shipped one by name, or a TOML file), with "
        "synthetic samples or an existing export's (--from) (resumable: re-run to complete it)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("definition", nargs="?",
                   help="the export definition to read: a shipped one by name (before, after, "
                        "...: see --list) or a TOML file")
    p.add_argument("out_dir", nargs="?", help="directory to write the export into")
    p.add_argument("--list", action="store_true",
                   help="list the shipped definitions, a line each, and exit")
    p.add_argument("--show", action="store_true",
                   help="print DEFINITION's TOML (to start one of your own from it) and exit")
    p.add_argument("--from", dest="source", default=None, metavar="EXPORT",
                   help="re-lay the samples of this export (any layout dsbench reads, a path "
                        "or a URL) as the definition says: images copied byte for byte, the "
                        "fields it has carried, the others synthesised (docs/reexport.md)")
    p.add_argument("--layout", choices=sorted(FORMATS), default=None,
                   help="read as this layout instead of detecting it (with --from: the "
                        "source, in a directory holding two layouts; the export written has "
                        "the definition's)")
    p.add_argument("--tokenizer", default=None, metavar="FILE",
                   help="the job's tokenizer for an export of text samples: with --from "
                        "a text export and a definition with [tokens], a tokenizers JSON that "
                        "turns each text into the ids written (default: a byte-level BPE "
                        "trained on the source's first texts, as bench trains one)")
    p.add_argument("--samples", type=int, default=None,
                   help="samples in each export made (default: the definition's `samples`; "
                        "with --from, all of the source's, and N takes the first N in its unit "
                        "order)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed: of the generator; with --from, of synthesised fields "
                        "(default 0)")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes to use (default: every core this process may run on)")
    p.add_argument("--generator", type=int, choices=GENERATORS, default=None,
                   help=f"how synthetic images are made (default {GENERATOR}): 2 from crops "
                        "of a few precomputed fields, about 3.5x faster; 1 a fresh field per "
                        "image (to complete or remake an export made with it byte for byte)")
    p.add_argument("--part", default=None, metavar="I/N",
                   help="write only part I of N (0 <= I < N) of the export, as one of N "
                        "processes sharing OUT_DIR (Slurm array tasks, torchrun ranks); the "
                        "last part to end finishes the export, byte for byte a single run's. "
                        "`auto` takes I and N from SLURM_ARRAY_TASK_ID/COUNT or RANK/"
                        "WORLD_SIZE")


def _listing() -> list[str]:
    """A line per shipped definition, its name and description; then where they are."""
    specs = [load_spec(name) for name in shipped()]
    width = max(len(s.name) for s in specs)
    return [f"{s.name:<{width}}  {s.description}" for s in specs] + [
        "", f"shipped in {FORMATS_DIR}", "give a name (dsbench generate before OUT_DIR) or a "
        "definition file of your own (docs/formats.md)"]


def _per_core(samples: int, cpu_s: float) -> str:
    return f", {fmt.rate(samples / cpu_s, 'samples/s per core')}" if samples and cpu_s > 0 else ""


def _names(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names) if names else "none"


def _units(written: int, skipped: int) -> str:
    return f"{written} unit{'' if written == 1 else 's'} written, {skipped} already complete"


def _written(name: str, r: GenerateReport) -> str:
    if r.part is not None:
        state = ("the export is complete" if r.complete else "the export is not complete "
                 "yet: the last part to end finishes it (or run once more without --part)")
        return (f"{name} part {r.part}: {fmt.plural(r.units_written, 'unit')} of "
                f"{r.samples_written} samples written into {r.out_dir} in "
                f"{fmt.seconds(r.wall_s)}{_per_core(r.samples_written, r.cpu_s)}; {state}")
    return (f"{name}: {r.samples} samples in {r.out_dir} "
            f"({_units(r.units_written, r.units_skipped)}) in {fmt.seconds(r.wall_s)}"
            f"{_per_core(r.samples_written, r.cpu_s)}")


def _summary(name: str, r: ReexportReport) -> list[str]:
    carried = [f"{n} (from {src.stored_as})" if src.stored_as != n else n
               for n, src in r.fields.carried]
    lines = [_written(name, r),
             f"  source: {r.source} ({r.layout}), {r.subset}",
             (f"  {r.payload['codec']}: {r.payload['copied']}" if r.payload is not None else
              f"  images: copied byte for byte as stored ({r.codec}); the definition's image "
              "settings (codec, quality, sizes) are not applied" if r.reencoded is None else
              f"  images: {r.codec} decoded and re-encoded as {r.reencoded[0]}"
              + (f" quality {r.reencoded[1]}" if r.reencoded[0] == "jpeg" else " (lossless)")
              + " (the definition's reencode = true: this changes the data)"),
             f"  carried: {_names(carried)}",
             f"  synthesised (not in the source): {_names(r.fields.synthesised)}",
             f"  dropped (not in the definition): {_names(r.fields.dropped)}"]
    if r.ignored:
        lines.append(f"  not read: {fmt.plural(len(r.ignored), 'file')} under the source that "
                     f"{r.layout} does not read, e.g. {r.ignored[0]}")
    return lines


def run(args: argparse.Namespace) -> int:
    # The options first: a bad one is said before the definition is read or a file written.
    if args.list:
        fmt.out("\n".join(_listing()))
        return 0
    if args.show:
        if args.definition is None:
            raise DsbenchError("--show needs a DEFINITION: dsbench generate --show before")
        path = find_definition(args.definition)
        load_spec(path)  # a bad one is said, not printed
        fmt.out(path.read_text(encoding="utf-8").rstrip("\n"))
        return 0
    if args.definition is None or args.out_dir is None:
        raise DsbenchError("give a DEFINITION and an OUT_DIR (dsbench generate --list shows "
                           "the shipped definitions)")
    if args.samples is not None and args.samples < 1:
        raise DsbenchError(f"--samples must be at least 1, got {args.samples}")
    if args.samples is not None and args.samples > MAX_SAMPLES:
        raise DsbenchError(f"--samples must be at most {MAX_SAMPLES}, got {args.samples}")
    if args.jobs is not None and args.jobs < 1:
        raise DsbenchError(f"--jobs must be at least 1, got {args.jobs}")
    if args.seed < 0:
        raise DsbenchError(f"--seed must be non-negative, got {args.seed}")
    if args.layout is not None and args.source is None:
        raise DsbenchError("--layout names the layout of a --from source; without --from the "
                           "export written has the definition's layout")
    part = None if args.part is None else parse_part(args.part)
    if args.source is not None and (part is not None or args.generator is not None):
        raise DsbenchError("--part and --generator are for synthetic exports; a re-export "
                           "(--from) copies its source's images")
    if args.tokenizer is not None and args.source is None:
        raise DsbenchError("--tokenizer tokenizes a text source (--from) for a definition "
                           "with [tokens]")
    spec = load_spec(args.definition)
    if args.source is not None:
        tokenizer = None if args.tokenizer is None else from_file(args.tokenizer)
        r = reexport(spec, args.out_dir, args.source, samples=args.samples, seed=args.seed,
                     jobs=args.jobs, layout=args.layout, tokenizer=tokenizer)
        fmt.out("\n".join(_summary(spec.name, r)))
        return 0
    jobs = args.jobs
    if jobs is None and part is not None and os.environ.get("LOCAL_WORLD_SIZE", "").isdigit():
        # torchrun's ranks on one node share its cores: each part takes its own share.
        jobs = max(1, len(os.sched_getaffinity(0)) // max(1, int(os.environ["LOCAL_WORLD_SIZE"])))
    fmt.out(_written(spec.name, generate(
        spec, args.out_dir, samples=args.samples, seed=args.seed, jobs=jobs,
        generator=GENERATOR if args.generator is None else args.generator, part=part)))
    return 0
