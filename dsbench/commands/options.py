"""Options more than one command takes, defined once: the measuring window, the two sides of a
comparison, the predicted cluster, and machine output (`--json OUT`).

Machine output: every command that makes a document takes `--json OUT` and writes it there
whole (`-` writes it to standard output instead of the report for people). The bare `--json`
of earlier versions still prints to standard output, with a deprecation note on standard error.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsbench import atomic, fmt
from dsbench.adapters import FORMATS
from dsbench.commands import vocabulary
from dsbench.commands.sample_options import (
    add_clip_argument,
    add_pack_argument,
    add_seq_len_argument,
    add_tokenizer_argument,
    given,
)
from dsbench.errors import DsbenchError
from dsbench.loader import exact
from dsbench.loader.counts import DEFAULT_MAX_SAMPLES, REMOTE_MAX_SAMPLES
from dsbench.loader.decode import DECODERS
from dsbench.loader.options import BenchOptions
from dsbench.loader.order import ORDERS
from dsbench.model.costs import DIST_SYNTAX, Distribution
from dsbench.model.node import ClusterSpec
from dsbench.model.profiles import PROFILES, parse_storage
from dsbench.storage import remote, retry
from dsbench.storage.remote import is_url
from dsbench.storage.retry import RetryPolicy

STDOUT = "-"
# Comparing wants more rounds than describing one export: 10 paired rounds of 2 s detect a 10%
# change at 5% noise per round 96% of the time (docs/statistics.md).
COMPARE_WINDOW = BenchOptions(rounds=10, seconds=2.0)
_BARE = "\0bare"  # what a bare --json stands for: standard output, deprecated spelling


# --- machine output -----------------------------------------------------------------------------

def add_json_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    p.add_argument("--json", nargs="?", const=_BARE, default=None, metavar="OUT",
                   help=f"write the command's document to OUT as JSON: {what} ('-': to "
                        "standard output, instead of the report)")


def json_target(args: argparse.Namespace) -> str | None:
    """Where --json goes: None (not asked), STDOUT, or a file path."""
    target: str | None = getattr(args, "json", None)
    if target == _BARE:
        fmt.progress(f"dsbench {args.command}: note: a bare --json is deprecated; write "
                     "--json - for standard output or --json FILE")
        return STDOUT
    return target


def check_outputs(args: argparse.Namespace) -> None:
    """Every file the command will write (--json OUT, --save, --summary), checked before any
    work, so that a measurement is never lost to an unwritable path nor half its output written;
    naming one file twice is refused, since the second write would replace the first."""
    target = getattr(args, "json", None)
    paths = [target] if target not in (None, STDOUT, _BARE) else []
    paths += list(getattr(args, "save", None) or ())
    if getattr(args, "summary", None):
        paths.append(args.summary)
    # An output inside an export being read would replace one of its files (a shard with JSON).
    inputs = [os.path.realpath(p) for p in (getattr(args, name, None) for name in
                                             ("path", "base", "cand"))
              if isinstance(p, str) and p and not is_url(p) and os.path.exists(p)]
    seen: dict[str, str] = {}
    for path in map(str, paths):
        atomic.check_output(Path(path))
        real = os.path.realpath(path)
        if real in seen and not atomic.is_stream(Path(real)):
            raise DsbenchError(f"named twice as an output (also as {seen[real]})", path=path)
        if any(real == i or real.startswith(i + os.sep) for i in inputs):
            raise DsbenchError("cannot write: it is an input of this command, or inside one",
                               path=path)
        seen[real] = path


def emit(args: argparse.Namespace, doc: Any, report: Callable[[], str],
         write: Callable[[Path, Any], object] | None = None) -> None:
    """The document to --json's target and, unless that is standard output, the report."""
    target = json_target(args)
    if target == STDOUT:
        fmt.out(json.dumps(doc))
        return
    if target is not None:
        path = Path(target)
        if write is not None:
            write(path, doc)
        else:
            try:
                atomic.write_output(path, (json.dumps(doc, indent=1) + "\n").encode())
            except OSError as exc:
                raise DsbenchError(f"cannot write: {exc.strerror or exc}", path=path) from None
    fmt.out(report())
    if target is not None:
        fmt.progress(f"wrote {target}")


# --- the measuring window -----------------------------------------------------------------------

def parse_workers(text: str, option: str = "--workers") -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(c < 1 for c in counts):
        raise DsbenchError(f"{option} expects positive integers separated by commas, like "
                           f"1,2,4; got {text!r}")
    return counts


def add_window_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup,
                         d: BenchOptions | None = None, exact_rounds: int | None = None) -> None:
    """What to measure and for how long: shared by `bench`, `compare`, `gate` and `demo`.
    `exact_rounds`: the rounds by default where CPU is counted exactly (--rounds is then None
    until `side_options` settles it)."""
    d = d or BenchOptions()
    p.add_argument("--workers", default=",".join(map(str, d.workers)),
                   help=f"loader workers: the counts to run, comma-separated, e.g. 1,2,4 "
                        f"(default {','.join(map(str, d.workers))})")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help=f"samples per loader batch (default {d.batch_size})")
    p.add_argument("--seconds", type=float, default=d.seconds,
                   help=f"length of each measured window in s (default {d.seconds:g})")
    p.add_argument("--rounds", type=int, default=None if exact_rounds else d.rounds,
                   help=f"rounds per worker count, each with fresh workers (default {d.rounds}"
                        + (f"; {exact_rounds} where CPU is counted exactly, which then decides "
                           "CPU, the rounds estimating its time)" if exact_rounds else ")"))
    p.add_argument("--sweep-rounds", type=int, default=d.sweep_rounds, metavar="N",
                   help="rounds of each worker count after the first, which verdicts do not "
                        f"use (default {d.sweep_rounds or 'as --rounds'})")
    p.add_argument("--cold", action="store_true",
                   help="evict the export's files from the page cache before each round")
    p.add_argument("--decoder", choices=DECODERS, default=d.decoder,
                   help="JPEG decoder (simplejpeg: pip install 'dsbench[fast]')")
    p.add_argument("--layout", choices=sorted(FORMATS), default=None,
                   help="read as this layout instead of detecting it (in a directory that "
                        "mixes layouts, the files of the others are listed as not read)")
    add_image_field_argument(p)
    p.add_argument("--pipeline", default=None, metavar="MODULE:CALLABLE",
                   help="your own per-sample step in place of dsbench's decode, fields and "
                        "transform: it gets the stored sample (a dict: image bytes and fields) "
                        "and returns what your job collates (docs/pipeline.md)")
    p.add_argument("--max-pixels", type=int, default=d.max_pixels, metavar="N",
                   help="an image of more pixels is a bad sample, refused from its header "
                        f"before decoding (default {d.max_pixels})")
    add_seq_len_argument(p)
    add_pack_argument(p)
    add_clip_argument(p)
    add_tokenizer_argument(p)
    p.add_argument("--order", choices=ORDERS, default=d.order,
                   help="how the workers read the export: sequential (each its units in "
                        "order, epoch after epoch), shuffle (units permuted each epoch and, on "
                        "shard layouts, samples drawn from a shuffle buffer, as webdataset "
                        "and streaming loaders read), random (samples permuted each epoch and "
                        "each read where it lies, as a map-style Dataset with a RandomSampler "
                        "reads; arrow, parquet, hf, mds, litdata, lance and per-sample "
                        "files) or block (permuted blocks of --block consecutive samples); "
                        "with --backend native, shuffle is the library's own shuffle "
                        f"(docs/formats.md); default {d.order}; "
                        "docs/access-patterns.md")
    p.add_argument("--shuffle-buffer", type=int, default=d.shuffle_buffer, metavar="N",
                   help="with --order shuffle on a shard layout: samples each worker holds "
                        "to draw from (webdataset's and a streaming Hugging Face dataset's "
                        f"own buffer with --backend native; default {d.shuffle_buffer})")
    p.add_argument("--epochs", type=int, default=None, metavar="E",
                   help="each round reads E whole epochs instead of a timed window, each "
                        "from fresh workers as torch's DataLoader without persistent_workers "
                        "does, and reports each epoch's time to its first batch and the wait "
                        "at its boundary (docs/access-patterns.md)")
    p.add_argument("--block", type=int, default=d.block, metavar="N",
                   help="with --order block: consecutive samples per block, read together "
                        f"(default {d.block})")
    p.add_argument("--inflight", type=int, default=d.inflight, metavar="K",
                   help="units each worker keeps requested ahead in an object store: the "
                        "next K per-sample objects, or WebDataset and TFRecord shards, while "
                        "it works, as a loader that prefetches does (default "
                        f"{d.inflight}: one request at a time)")
    r = RetryPolicy()
    p.add_argument("--retries", type=int, default=r.retries, metavar="N",
                   help="retries of an object store's request answered 5xx or 429 or cut "
                        f"off, each counted in the result (default {r.retries})")
    p.add_argument("--backoff", type=float, default=r.backoff_s, metavar="S",
                   help="the wait before an object store's first retry, doubling after "
                        f"each up to {r.max_backoff_s:g} s (default {r.backoff_s:g})")
    p.add_argument("--request-deadline", type=float, default=r.deadline_s, metavar="S",
                   help="an object store request's time, all attempts together, after "
                        f"which it is an error (default {r.deadline_s:g})")
    add_exact_arguments(p, d, "count CPU instructions per sample by stage, exactly: beside "
                              "the timed CPU")
    p.add_argument("--count-samples", type=int, default=None, metavar="N",
                   help="files, bytes and requests per sample are counted over whole units up "
                        f"to N samples; 0 counts every unit (default {DEFAULT_MAX_SAMPLES}, "
                        f"{REMOTE_MAX_SAMPLES} in an object store)")


def add_exact_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, d: BenchOptions,
                        what: str) -> None:
    """--exact/--no-exact and --exact-samples: the exact pass (loader/exact.py)."""
    p.add_argument("--exact", action=argparse.BooleanOptionalAction, default=None,
                   help=f"{what} (under valgrind; default: where valgrind is installed, or as "
                        f"{exact.ENV} says; --exact fails without it, --no-exact skips it; "
                        "docs/exact-cpu.md)")
    p.add_argument("--exact-samples", type=int, default=d.exact_samples, metavar="N",
                   help="the exact pass counts decode, fields, transform and collate over the "
                        f"export's first N samples, read over whole units (default "
                        f"{d.exact_samples})")


def add_native_option_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--native-option, where a --backend can name native (bench, compare, gate)."""
    p.add_argument("--native-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword of the format library's dataset with --backend native "
                        "(repeatable: --native-option shuffle_algo=py1e --native-option "
                        "predownload=8; a key given again replaces it), checked against its "
                        "signature and recorded in the result")


def add_image_field_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--image-field", default=None, metavar="NAME",
                   help="the column, feature, leaf or member extension holding the image "
                        "or the token ids, where the format's schema leaves a choice "
                        "(default: the one the format marks as an image, else by name or "
                        "content, else the integer-list column)")


def window_options(args: argparse.Namespace, **more: Any) -> BenchOptions:
    # The retry policy reaches every process that reads, workers included, as the store's
    # address does: through the environment.
    retry.use(RetryPolicy(retries=args.retries, backoff_s=args.backoff,
                          max_backoff_s=max(RetryPolicy().max_backoff_s, args.backoff),
                          deadline_s=args.request_deadline))
    options = BenchOptions(workers=parse_workers(args.workers), batch_size=args.batch_size,
                           seconds=args.seconds, rounds=args.rounds,
                           sweep_rounds=args.sweep_rounds, decoder=args.decoder,
                           cold=args.cold, layout=args.layout,
                           count_samples=args.count_samples, max_pixels=args.max_pixels,
                           image_field=args.image_field, step=args.pipeline, order=args.order,
                           shuffle_buffer=args.shuffle_buffer, block=args.block,
                           epochs=args.epochs, inflight=args.inflight, exact=args.exact,
                           exact_samples=args.exact_samples, seq_len=args.seq_len, pack=args.pack,
                           clip_s=args.clip_seconds, sample_rate=args.sample_rate,
                           tokenizer=args.tokenizer, given=given(args), **more)
    remote.use_inflight(options.inflight)
    return options


# --- the predicted cluster ------------------------------------------------------------------------

# ClusterSpec's field -> (option, help); ClusterSpec names its fields in errors.
_CLUSTER_OPTIONS: dict[str, tuple[str, str]] = {
    "nodes": ("--nodes", "nodes in the job"),
    "gpus_per_node": ("--gpus-per-node", "GPUs per node"),
    "cores_per_node": ("--cores-per-node", "CPU cores per node"),
    "trainer_cores_per_gpu": ("--trainer-cores-per-gpu",
                              "cores each training process itself keeps busy"),
    "workers_per_gpu": ("--workers-per-gpu", "DataLoader workers per GPU"),
    "prefetch": ("--job-prefetch", "batches in flight per DataLoader worker in the job"),
    "batch_size": ("--gpu-batch", "samples per GPU per step"),
    "compute": ("--compute", f"GPU seconds per step: {DIST_SYNTAX}"),
    "allreduce_s": ("--allreduce", "all-reduce seconds after the slowest rank"),
    "stall_prob": ("--stall-prob", "chance that a rank stalls in a step"),
    "stall_s": ("--stall-time", "seconds of such a stall"),
    "storage": ("--storage", f"{', '.join(PROFILES)}, custom:LATENCY_S,BYTES_PER_S, a profile "
                "written by dsbench probe (FILE.json), or one with a stated round trip added "
                "per request (FILE.json+SECONDS)"),
    "node_memory_bytes": ("--node-memory", "a node's memory, for what its loaders take "
                          "(2TB, 512GiB)"),
}
_TYPES: dict[str, Callable[[str], Any]] = {"trainer_cores_per_gpu": float, "allreduce_s": float,
                                           "stall_prob": float, "stall_s": float,
                                           "compute": str, "storage": str,
                                           "node_memory_bytes": str}


_METAVARS = {"node_memory_bytes": "SIZE"}


def _metavar(name: str, flag: str) -> str:
    """What --help shows for the option's value: its name, not its cluster_ destination."""
    return _METAVARS.get(name) or flag.lstrip("-").replace("-", "_").upper()


def _default_text(name: str, d: ClusterSpec, measured_batch: bool) -> str:
    if name == "batch_size" and measured_batch:
        return "the measured loader batch"
    value = getattr(d, name)
    if name == "compute":
        return d.compute.describe()
    if name == "storage":
        return d.storage.name
    if name == "node_memory_bytes":
        return fmt.nbytes(d.node_memory_bytes)
    return f"{value:g}" if isinstance(value, float) else str(value)


# What the renamed options meant, said where they are refused (vocabulary.refuse).
GPU_BATCH = ("--batch-size is the loader's batch; the GPU's batch per step is --gpu-batch")
JOB_PREFETCH = ("--prefetch is the measured loader's (dsbench bench); the job's batches in "
                "flight per DataLoader worker are --job-prefetch")


def add_cluster_arguments(p: argparse.ArgumentParser, d: ClusterSpec, title: str, *,
                          measured_batch: bool = True) -> None:
    """The cluster's options, each defaulting to `d`'s value (unset options stay None, so a
    caller can tell an assumption from a stated figure)."""
    g = p.add_argument_group(title)
    for name, (flag, text) in _CLUSTER_OPTIONS.items():
        g.add_argument(flag, dest=f"cluster_{name}", type=_TYPES.get(name, int), default=None,
                       metavar=_metavar(name, flag),
                       help=f"{text} (default {_default_text(name, d, measured_batch)})")
    vocabulary.refuse(g, "--prefetch", JOB_PREFETCH)


def add_cluster_subset(g: argparse.ArgumentParser | argparse._ArgumentGroup, d: ClusterSpec,
                       names: tuple[str, ...]) -> None:
    """Some of the cluster's options, spelled and explained as `extrapolate` has them, for a
    command that measures what the model assumes (`dsbench job`)."""
    for name in names:
        flag, text = _CLUSTER_OPTIONS[name]
        g.add_argument(flag, dest=f"cluster_{name}", type=_TYPES.get(name, int),
                       default=None, metavar=_metavar(name, flag),
                       help=f"{text} (default {_default_text(name, d, False)})")
    if "prefetch" in names:
        vocabulary.refuse(g, "--prefetch", JOB_PREFETCH)


def cluster_from_args(args: argparse.Namespace, d: ClusterSpec, measured_batch: int | None = None
                      ) -> tuple[ClusterSpec, dict[str, str]]:
    """The cluster the options describe, and where each field came from: 'stated' (given),
    'measured' (the batch a result was measured at) or 'default' (d's assumption)."""
    given = {name: getattr(args, f"cluster_{name}") for name in _CLUSTER_OPTIONS}
    sources = {name: ("stated" if v is not None else "default") for name, v in given.items()}
    values = {name: v for name, v in given.items() if v is not None}
    if "batch_size" not in values and measured_batch is not None:
        values["batch_size"], sources["batch_size"] = measured_batch, "measured"
    if "compute" in values:
        try:
            values["compute"] = Distribution.parse(values["compute"])
        except DsbenchError as exc:
            raise DsbenchError(f"--compute {exc}") from None
    if "storage" in values:
        values["storage"] = parse_storage(values["storage"])
    if "node_memory_bytes" in values:
        try:
            values["node_memory_bytes"] = fmt.parse_nbytes(values["node_memory_bytes"])
        except DsbenchError as exc:
            raise DsbenchError(f"--node-memory {exc}") from None
    return build_cluster(d, **values), sources


def build_cluster(d: ClusterSpec, **fields: Any) -> ClusterSpec:
    """`d` with `fields` replaced; an error names the option, not ClusterSpec's field."""
    try:
        return d.replace(**fields)
    except DsbenchError as exc:
        text = str(exc)
        for name, (flag, _) in _CLUSTER_OPTIONS.items():
            spelled = name.replace("_", "-")
            if text.startswith(spelled + " "):
                text = flag + text[len(spelled):]
                break
        raise DsbenchError(text) from None
