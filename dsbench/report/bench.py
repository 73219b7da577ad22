"""`dsbench bench`'s report for people: throughput and cost per worker count, CPU by stage."""

from __future__ import annotations

from typing import Any

from dsbench import fmt
from dsbench.analysis.compare import order_of
from dsbench.loader.packing import documents_per_sequence
from dsbench.loader.summary import uneven
from dsbench.results.document import STAGES
from dsbench.results.types import BenchResult, Run

HOST_NOTE = ("CPU: the loader's processes (getrusage); host CPU: the whole machine over the "
             "window, kernel and neighbours included")


def tokens_text(doc: BenchResult) -> str:
    """Token samples: the sequences' throughput in token ids (padding included: what the GPUs
    compute on), how much of each sequence the export's documents fill, and the cost per id
    the export holds (the mean of the ids checked by the survey)."""
    seq_len = doc["config"].get("seq_len")
    tokens = doc["export"].get("tokens")
    if doc["config"].get("clip_seconds") and doc["export"].get("audio"):
        return _audio_text(doc)
    if seq_len and doc["export"].get("text"):
        return _text_text(doc, seq_len)
    if not seq_len or not tokens:
        return ""
    run, n = doc["runs"][0], tokens["per_sample"]
    mean = tokens["mean_per_sample"]
    if doc["config"].get("pack"):
        return _packed_text(doc, seq_len, n, mean)
    if tokens.get("stream"):
        return _stream_text(doc, tokens["stream"])
    fill = (f"{fmt.percent(mean / seq_len)} of each sequence is the document's, "
            f"{fmt.percent(1 - mean / seq_len)} padding" if n["max"] <= seq_len else
            f"a document longer than {seq_len} ids is cropped")
    per_id = (f"per id stored: {fmt.seconds(run['cpu_s_per_sample'] / mean)} CPU, "
              f"{fmt.nbytes(run['bytes_per_sample'] / mean)} read" if mean else "")
    return (f"\n\nToken samples ({doc['export']['sample']['field']}, {tokens['dtype']}): "
            f"sequences of {seq_len} ids, each document cropped at a random offset or padded: "
            f"{fmt.count(run['samples_per_s'] * seq_len)} tokens/s at "
            f"{fmt.plural(run['workers'], 'worker')}, padding included\n"
            f"the export's documents: {n['min']}-{n['max']} ids, mean {fmt.sig(mean)} ids "
            f"({tokens['count_checked']} checked): {fill}; {per_id}")


def _packed_text(doc: BenchResult, seq_len: int, n: dict[str, Any], mean: float) -> str:
    """--pack: documents laid end to end into sequences; no padding, nothing cropped away.
    A sample is a document: the sequences' rate is the documents' times sequences per
    document, as the rounds measured it."""
    run, tokens = doc["runs"][0], doc["export"]["tokens"]
    packed = _packed_rate(run, seq_len)
    if not packed:
        return ""
    per_id = (f"; per id stored: {fmt.seconds(run['cpu_s_per_sample'] / mean)} CPU, "
              f"{fmt.nbytes(run['bytes_per_sample'] / mean)} read" if mean else "")
    return (f"\n\nToken samples ({doc['export']['sample']['field']}, {tokens['dtype']}): "
            f"{packed}\nthe export's documents: {n['min']}-{n['max']} ids, mean "
            f"{fmt.sig(mean)} ids ({tokens['count_checked']} checked){per_id}")


def _packed_rate(run: Run, seq_len: int) -> str | None:
    """A packed run's sequences and tokens per second, from the documents per sequence its
    rounds measured; None where they do not say."""
    docs = documents_per_sequence(run)
    if not docs:
        return None
    return (f"documents laid end to end and cut into sequences of {seq_len} ids, no padding: "
            f"{fmt.count(run['samples_per_s'] / docs)} sequences/s, "
            f"{fmt.count(run['samples_per_s'] / docs * seq_len)} tokens/s at "
            f"{fmt.plural(run['workers'], 'worker')}; {fmt.sig(docs)} documents per sequence "
            "(measured)")


def _stream_text(doc: BenchResult, stream: dict[str, Any]) -> str:
    """A token stream cut into blocks: every sequence is a whole block, no padding; the ids
    that no block holds are said, and the cost is per id read."""
    run, block = doc["runs"][0], stream["block"]
    return (f"\n\nToken samples ({doc['export']['sample']['field']}, "
            f"{doc['export']['tokens']['dtype']}): blocks of {block} ids, cut from "
            f"{stream['documents']:,} documents laid end to end, as litdata's "
            f"TokensLoader(block_size={block}) cuts them: "
            f"{fmt.count(run['samples_per_s'] * block)} tokens/s at "
            f"{fmt.plural(run['workers'], 'worker')}, no padding\n"
            f"{stream['unread_ids']:,} of the {stream['ids']:,} ids stored are never read (each "
            f"chunk's last, fewer than a block); per id read: "
            f"{fmt.seconds(run['cpu_s_per_sample'] / block)} CPU, "
            f"{fmt.nbytes(run['bytes_per_sample'] / block)} read")


def _audio_text(doc: BenchResult) -> str:
    """Audio samples: the clips' throughput in seconds of audio, and the cost per second the
    export stores (the mean length of the clips the survey checked)."""
    run, found, config = doc["runs"][0], doc["export"]["audio"], doc["config"]
    clip, mean = float(config.get("clip_seconds") or 0), found["mean_seconds_per_sample"]
    n = found["seconds_per_sample"]
    fill = (f"{fmt.percent(mean / clip)} of each clip is the sample's, "
            f"{fmt.percent(1 - mean / clip)} silence padded" if n["max"] <= clip else
            f"a sample longer than {fmt.sig(clip)} s is cropped")
    rate, own = config.get("sample_rate") or 0, found.get("sample_rate")
    rates = f"{rate:,} Hz" if own in (None, rate) else f"{own:,} Hz resampled to {rate:,} Hz"
    return (f"\n\nAudio samples ({found['codec']}, {rates}, "
            f"{'/'.join(map(str, found['channels']))} channel(s)): clips of {fmt.sig(clip)} s, "
            f"mono, each cropped at a random offset or padded: "
            f"{fmt.sig(run['samples_per_s'] * clip)} s of audio/s at "
            f"{fmt.plural(run['workers'], 'worker')}, padding included\n"
            f"the export's samples: {fmt.sig(n['min'])}-{fmt.sig(n['max'])} s, mean "
            f"{fmt.sig(mean)} s ({found['count_checked']} checked): {fill}; per second of audio "
            f"stored: {fmt.seconds(run['cpu_s_per_sample'] / mean)} CPU, "
            f"{fmt.nbytes(run['bytes_per_sample'] / mean)} read")


def _text_text(doc: BenchResult, seq_len: int) -> str:
    """Text samples: the tokenizer that ran in the workers, the sequences' throughput, and the
    cost per character the export stores."""
    run, text = doc["runs"][0], doc["export"]["text"]
    tok = doc["config"].get("tokenizer") or {}
    mean = text["mean_chars_per_sample"]
    per_char = (f"; per character stored: {fmt.seconds(run['cpu_s_per_sample'] / mean)} CPU, "
                f"{fmt.nbytes(run['bytes_per_sample'] / mean)} read" if mean else "")
    how = (doc["config"].get("pack") and _packed_rate(run, seq_len)) or (
        f"sequences of {seq_len} ids, each cropped at a random offset or padded: "
        f"{fmt.count(run['samples_per_s'] * seq_len)} tokens/s at "
        f"{fmt.plural(run['workers'], 'worker')}, padding included")
    return (f"\n\nText samples ({doc['export']['sample']['field']}), tokenized in the workers "
            f"by {tok.get('source', '?')} ({tok.get('vocab_size', '?')} ids; decode is the "
            f"tokenizing): {how}\n"
            f"the export's texts: mean {fmt.sig(mean)} characters "
            f"({text['count_checked']} checked){per_char}")


def requests_text(doc: BenchResult) -> str:
    """An export in an object store: its requests per sample, latency and client CPU."""
    q = doc.get("requests")
    if not q:
        return ""
    text = (f"\nobject store ({q['client']} {q['client_version']}): "
            f"{fmt.sig(q['requests_per_sample'])} requests/sample "
            f"({fmt.sig(q['get_per_sample'])} GET, {fmt.sig(q['range_get_per_sample'])} range "
            f"GET; {fmt.sig(q['head_per_sample'])} HEAD, {fmt.sig(q['list_per_sample'])} LIST "
            f"pages per sample)")
    if "first_byte_s" in q:
        ttfb = q["first_byte_s"]
        text += (f", first byte p50 {fmt.seconds(ttfb['p50'])}, p99 {fmt.seconds(ttfb['p99'])}, "
                 f"client CPU {fmt.seconds(q.get('client_cpu_s_per_request', 0.0))}/request")
    if q.get("retries_per_sample") or q.get("throttled_per_sample") or q.get("failed_requests"):
        text += (f"\nthe store pushed back: {fmt.sig(q['retries_per_sample'])} retries/sample, "
                 f"{fmt.sig(q['throttled_per_sample'])} throttled (503 SlowDown or 429), "
                 f"{fmt.seconds(q['retry_s_per_sample'])}/sample spent in retries (failed "
                 "attempts and backoff)"
                 + (f", {fmt.plural(q['failed_requests'], 'request')} failed after retries"
                    if q.get("failed_requests") else "")
                 + " (counted in the count pass, one reader: the store's load as much as the "
                   "export's)")
    return text


def _runs_with(doc: BenchResult, key: str) -> list[tuple[Run, Any]]:
    """The runs that have `key`, each with its value."""
    return [(r, r[key]) for r in doc["runs"] if r.get(key) is not None]  # type: ignore[literal-required]


def order_text(doc: BenchResult) -> str:
    """How random the measured batches were, per worker count: beside their cost, so that a
    cheaper order and a less random one are seen together."""
    rows = []
    for r, q in _runs_with(doc, "order_figures"):
        bits = q["label_entropy_bits"]
        units = q["units_per_batch"]
        rows.append([str(r["workers"]), "-" if units is None else f"{fmt.sig(units)} units/batch",
                     "-" if bits is None else f"{fmt.sig(bits)} bits",
                     "-" if q["label_entropy_all_bits"] is None
                     else f"{fmt.sig(q['label_entropy_all_bits'])} bits",
                     "-" if q["source_distance"] is None
                     else f"{fmt.sig(q['source_distance'])} samples"])
    if not rows:
        return ""
    return ("\n\nHow random the measured batches were (read in order: "
            f"{order_of(doc)})\n"
            + fmt.table(["workers", "units per batch", "label entropy per batch",
                         "of all labels read", "apart in the source order"], rows)
            + random_access_text(doc))


def workers_text(doc: BenchResult) -> str:
    """Loader workers that delivered nothing, or an uneven split of an epoch: per worker count,
    how many delivered and what each gave (shown only where the warnings say so)."""
    rows = []
    for r in doc["runs"]:
        delivered, shares = r.get("worker_samples"), r.get("worker_shares")
        if not delivered or not (r.get("idle_workers") or uneven(shares)):
            continue
        w = r["workers"]
        rows.append([str(w), f"{w - len(r.get('idle_workers', []))} of {w}",
                     _each(delivered), _each(shares) if shares else "-"])
    if not rows:
        return ""
    return ("\n\nLoader workers (samples each delivered in the windows, and its share of an "
            "epoch: see the warnings)\n"
            + fmt.table(["workers", "delivering", "delivered per worker", "epoch share"],
                        rows))


def _each(counts: list[int]) -> str:
    """Samples per worker: each, for a few workers; else the range."""
    if len(counts) <= 8:
        return f"{', '.join(f'{n:,}' for n in counts)} samples"
    return f"{min(counts):,}-{max(counts):,} samples"


def random_access_text(doc: BenchResult) -> str:
    """Why a random-access order reads more than the samples hold: the block a sample is read
    with (a Parquet row group, a decompressed record batch), from the export's footers."""
    order = doc["config"].get("order")
    blocks = doc["export"].get("blocks")
    stored = doc["export"]["bytes_per_sample"]["mean"]
    read = doc["counts"]["bytes_per_sample"]
    if order not in ("random", "block") or not blocks or not blocks["whole"] or not stored:
        return ""
    what = blocks["name"]
    size = f"p50 {fmt.plural(blocks['rows_p50'], 'row')}, {fmt.nbytes(blocks['bytes_p50'])}"
    figures = (f"{fmt.nbytes(read, 'sample')} read against {fmt.nbytes(stored, 'sample')} "
               f"stored ({fmt.sig(read / stored)}x)")
    if order == "block":
        return (f"\nRead in blocks of {doc['config'].get('block')} samples: {figures}; each "
                f"{what} ({size}) a block touches is read whole, once")
    return (f"\nRead by random access: {figures}, because each sample is read with its whole "
            f"{what} ({size}); --order block reads a {what} once per block of samples, and "
            f"a smaller {what} costs less per sample")


def ceiling_text(doc: BenchResult) -> str:
    """--ceiling: the loader's own limit beside each run's throughput."""
    lines = []
    for r, c in _runs_with(doc, "ceiling"):
        ci = c["fraction_ci95"]
        interval = ("one round: no interval" if ci is None else
                    f"95% interval {fmt.percent(ci[0])} to {fmt.percent(ci[1])}")
        lines.append(f"{fmt.plural(r['workers'], 'worker')}: {fmt.rate(r['samples_per_s'])} is "
                     f"{fmt.percent(c['fraction'])} of the loader's ceiling "
                     f"({fmt.rate(c['samples_per_s'])} handing over batches already built; "
                     f"{interval})")
    if not lines:
        return ""
    return ("\n\nThe loader's ceiling (the same workers, ring and hand-over, nothing read, "
            "decoded or transformed): the rest of the time is the export's and the "
            "pipeline's\n" + "\n".join(lines))


def epochs_text(doc: BenchResult) -> str:
    """--epochs: each epoch's start beside its length, per worker count (medians of rounds)."""
    rows = [[str(r["workers"]), str(e["epoch"]), fmt.seconds(e["time_to_first_batch_s"]),
             fmt.seconds(e["boundary_wait_s"]), fmt.seconds(e["wall_s"]),
             f"{e['samples']} samples"]
            for r, epochs in _runs_with(doc, "epochs") for e in epochs]
    if not rows:
        return ""
    return ("\n\nEpochs, each from fresh workers (medians of the rounds; the figures above "
            "include every start)\n"
            + fmt.table(["workers", "epoch", "time to first batch", "wait at the boundary",
                         "epoch wall time", "samples"], rows))


def exact_text(doc: BenchResult) -> str:
    """The exact pass's figures (loader/exact.py), or why there are none."""
    x = doc.get("exact")
    if x is None:
        return ""
    if not x["counted"]:
        return f"\n\nCPU per sample, exact: not counted: {x['why_not']}"
    c = x.get("counter") or {}
    names = {"transform": "your step"} if doc["config"].get("pipeline") else {}
    # The unit once, after the list: "read 835 k, decode 11.1 M, ... instructions/sample".
    stages = ", ".join(f"{names.get(s, s)} {fmt.count(v)}"
                       for s, v in (x.get("stages") or {}).items()) + " instructions/sample"
    units = fmt.plural(x.get("units_read", 0), "whole unit") if x.get("whole_units") else \
        "part of the first unit"
    kernel = x.get("kernel_stages") or {}
    faults = max(kernel, key=lambda s: kernel[s]["minor_faults"], default=None)
    return (f"\n\nCPU per sample, exact: {fmt.instructions(x.get('instructions_per_sample', 0))}"
            f" ({c.get('name')} {c.get('version')}, a {c.get('kind')} CPU: the same count "
            "whatever the machine's load)\n"
            f"  by stage: {stages}\n"
            f"  over the export's first {fmt.plural(x.get('samples', 0), 'sample')}, read over "
            f"{units} ({fmt.plural(x.get('read_samples', 0), 'sample')})\n"
            f"  the kernel's counts: {fmt.sig(x.get('read_calls_per_sample', 0))} read and "
            f"{fmt.sig(x.get('write_calls_per_sample', 0))} write calls/sample, "
            f"{fmt.sig(x.get('minor_faults_per_sample', 0))} page faults/sample"
            + (f" ({fmt.sig(kernel[faults]['minor_faults'])} in {names.get(faults, faults)})"
               if faults and kernel[faults]["minor_faults"] >= 1 else ""))


def render(doc: BenchResult) -> str:
    """The result as two tables for people: throughput and cost, then CPU per stage."""
    runs = doc["runs"]
    counted = doc["counts"].get("method") != "not counted"
    rows = []
    for r in runs:
        lo, hi = r["samples_per_s_ci95"]
        au = r["accelerator_util"]
        rows.append([
            str(r["workers"]), fmt.rate(r["samples_per_s"]),
            f"{fmt.sig(lo)}-{fmt.sig(hi)} samples/s",
            fmt.seconds(r["cpu_s_per_sample"], "sample"),
            fmt.seconds(r["host_cpu_s_per_sample"], "sample") if "host_cpu_s_per_sample" in r
            else "-",
            fmt.nbytes(r["bytes_per_sample"], "sample"),
            fmt.rate(r["files_per_sample"], "files/sample") if counted else "not counted",
            fmt.nbytes(r["peak_pss_bytes"]),
            fmt.nbytes(r["peak_pss_anon_bytes"]) if "peak_pss_anon_bytes" in r else "-",
            fmt.percent(r["scaling_efficiency"]) if r["scaling_efficiency"] is not None else "-",
            fmt.percent(au) if au is not None else "-",
        ])
    main = fmt.table(["workers", "throughput", "95% CI", "CPU", "host CPU", "bytes read",
                      "files opened",
                      "peak PSS", "of it anon.", "scaling", "accel. util"], rows)
    stage_rows = []
    for r in runs:
        # Stages are pooled over all rounds, so "other" is taken against the pooled CPU too
        # (the headline CPU figure is the median of the rounds).
        pooled = sum(x["cpu_s"] for x in r["rounds"]) / r["samples"]
        other = pooled - sum(r["stages"].values())
        stage_rows.append([str(r["workers"]),
                           *(fmt.seconds(r["stages"][s], "sample") for s in STAGES),
                           fmt.seconds(other, "sample")])
    cfg = doc["config"]
    # With --pipeline the user's step did all the per-sample work: the transform stage.
    names = [("your step" if s == "transform" and cfg.get("pipeline") else s) for s in STAGES]
    stages = fmt.table(["workers", *names, "other"], stage_rows)
    reader = doc.get("reader")
    backend = (f"backend native ({reader['library']} {reader['version']})" if reader
               else f"backend {cfg['backend']}")
    what = (f"{cfg['dataset']}: your dataset through torch's DataLoader"
            if cfg.get("dataset") else
            f"{cfg['path']}: {doc['export'].get('layout', '?')} export, {backend}, "
            + (f"your step {cfg['pipeline']}" if cfg.get("pipeline")
               else f"token ids packed into sequences of {cfg['seq_len']}"
               if cfg.get("seq_len") and cfg.get("pack")
               else f"token ids cropped to {cfg['seq_len']}" if cfg.get("seq_len")
               else f"audio cut to clips of {fmt.sig(cfg.get('clip_seconds') or 0)} s"
               if cfg.get("clip_seconds")
               else f"decoder {cfg['decoder']}"))
    order = "" if cfg.get("dataset") else f", read in order: {order_of(doc)}"
    each = (f"{fmt.plural(cfg.get('epochs') or 0, 'epoch')}, each from fresh workers"
            if cfg.get("epochs")
            else fmt.seconds(cfg["seconds"]))
    head = (f"{what}{order}, batch {cfg['batch_size']}, "
            f"{fmt.plural(cfg['rounds'], 'round')} of {each}"
            + (", cold cache" if cfg["cold"] else ""))
    skipped = sum(r["skipped_samples"] for r in runs)
    tail = f"\nskipped {skipped} bad samples (see 'skipped' in --json)" if skipped else ""
    more = (tokens_text(doc) + exact_text(doc) + requests_text(doc) + workers_text(doc)
            + order_text(doc) + ceiling_text(doc) + epochs_text(doc))
    return (f"{head}\n\n{main}\n{HOST_NOTE}{more}\n\n"
            "CPU per sample by stage (other: main process, hand-over, idle wake-ups)\n"
            f"{stages}{tail}")
