"""`dsbench resume`'s report for people, and its figure: label entropy per step around the
restart, uninterrupted against restarted. Every figure carries its unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench import fmt

POLICY_TEXT = {"none": "no loader state: the epoch restarted with the same seed",
               "fast-forward": "epoch and step saved: restarted, K batches fetched and discarded",
               "stateful": "the loader's state saved and restored"}


def _s(x: float | None) -> str:
    return "-" if x is None else fmt.seconds(x)


def _bits(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} bits"


def _n(x: float | None) -> str:
    return "-" if x is None else fmt.sig(x)


def _step(x: int | None) -> str:
    return "none" if x is None else f"step {x}"


def _entropy_gap(t: dict[str, Any]) -> str:
    after, same, steady = (t["entropy_after_bits"], t["entropy_same_steps_bits"],
                           t["entropy_steady_bits"])
    if after is None:
        return "no labels: entropy not measured"
    text = f"{_bits(after)} vs {_bits(same)} at the same steps"
    if steady is None:
        return text + "; no steady state to compare with"
    gap = after - steady
    share = f" ({gap / steady:+.0%})" if steady > 0 else ""
    return text + f", {_bits(steady)} in steady state: {gap:+.2f} bits{share}"


def demo_lines(doc: dict[str, Any] | None) -> list[str]:
    """The demo's paragraph: replayed and skipped per policy after a restart, measured."""
    if doc is None:
        return []
    st = doc["settings"]
    lines = ["", f"After a restart (measured on this machine: {doc['export']['layout']} export, "
                 f"first {doc['export']['units']} units, restart after {st['restart_at']} of "
                 f"{doc['policies'][0]['ranks'][0]['steps_per_epoch']} steps, batch "
                 f"{st['batch_size']})"]
    for p in doc["policies"]:
        t = p["total"]
        extra = (f", fast-forward {_s(t['fast_forward_s'])}" if t["fast_forward_s"] is not None
                 else f", state {fmt.nbytes(t['state_bytes'])}" if t["state_bytes"] is not None
                 else "")
        lines.append(f"  {p['policy']}: {t['replayed']} samples replayed, {t['skipped']} "
                     f"skipped, first batch after {_s(t['first_batch_s'])}{extra}")
    return lines


def _burst(b: dict[str, Any]) -> str:
    if not b["requests"]:  # not counted (torch's workers), or none: local disk
        return ""
    rate = "" if b["requests_per_s"] is None else f", {fmt.rate(b['requests_per_s'], 'requests/s')}"
    return (f"; first {fmt.plural(b['steps'], 'step')}: {fmt.plural(b['requests'], 'request')} "
            f"in {_s(b['seconds'])}{rate}")


def _after(st: dict[str, Any]) -> tuple[int, int] | None:
    """An elastic restart's (ranks, workers), or None for a restart on the job's own."""
    ranks, workers = st.get("ranks_after"), st.get("workers_after")
    if ranks in (None, st["ranks"]) and workers in (None, st["workers"]):
        return None
    return ranks or st["ranks"], workers or st["workers"]


def render(doc: dict[str, Any]) -> str:
    st, ex = doc["settings"], doc["export"]
    backend = ("torch DataLoader / torchdata StatefulDataLoader" if st["backend"] == "torch"
               else "dsbench's loader")
    shuffle = (f"shard order + a {st['buffer']}-sample buffer per worker"
               if st["shuffle"] == "shard+buffer" else "per sample (the layout allows it)")
    after = _after(st)
    lines = [f"dsbench resume: {ex['path']} ({ex['layout']}, {ex['units']} units)",
             f"  {st['ranks']} rank(s) x {st['workers']} worker(s), batch {st['batch_size']}, "
             f"seed {st['seed']}, epoch {st['epoch']}, {backend}; shuffle: {shuffle}",
             f"  restart after K = {st['restart_at']} steps"
             + (f" on {after[0]} rank(s) x {after[1]} worker(s), the ranks together"
                if after else "")
             + f"; diversity over up to {st['window']} steps after it", ""]
    rows = []
    for p in doc["policies"]:
        t = p["total"]
        state = "-" if t["state_bytes"] is None else fmt.nbytes(t["state_bytes"])
        rows.append([p["policy"], f"{t['replayed']} samples", f"{t['skipped']} samples",
                     _step(t["first_divergence"]), _s(t["first_batch_s"]),
                     _s(t["fast_forward_s"]), state, _bits(t["entropy_after_bits"]),
                     _bits(t["entropy_same_steps_bits"]), _bits(t["entropy_steady_bits"])])
    lines.append(fmt.table(["policy", "replayed", "skipped", "diverges at", "to 1st batch",
                            "fast-forward", "state", "H after", "H same steps", "H steady"],
                           rows))
    first = doc["policies"][0]
    lines += ["", f"  K batches of the uninterrupted epoch hold {first['total']['first_k_samples']}"
                  f" samples (all ranks); an epoch holds "
                  f"{first['total']['samples_per_epoch']} samples"]
    if after:
        lines += ["", "Per rank of the job (replayed / skipped, samples, of the samples its "
                      "uninterrupted epoch held)"]
        for p in doc["policies"]:
            parts = [f"rank {r['rank']}: {r['replayed']} / {r['skipped']}" for r in p["ranks"]]
            lines.append(f"  {p['policy']}: " + "; ".join(parts))
        lines += ["", f"The restart on {after[0]} rank(s), started together (samples "
                      "delivered; time to the first batch; the first steps' storage requests)"]
        for p in doc["policies"]:
            parts = [f"rank {r['rank']}: {r['delivered_samples']}, {_s(r['first_batch_s'])}"
                     for r in p["restarted"]]
            lines.append(f"  {p['policy']}: " + "; ".join(parts) + _burst(p["burst"]))
    elif st["ranks"] > 1:
        lines += ["", "Per rank (replayed / skipped, samples; time to the first batch)"]
        for p in doc["policies"]:
            parts = [f"rank {r['rank']}: {r['replayed']} / {r['skipped']}, "
                     f"{_s(r['first_batch_s'])}" for r in p["ranks"]]
            lines.append(f"  {p['policy']}: " + "; ".join(parts))
    lines += ["", "Throughput (samples/s): first steps after the restart (from the restart) "
                  "vs the uninterrupted epoch's steady state"]
    for p in doc["policies"]:
        r = p["ranks"][0]
        first_steps = r["first_steps_samples_per_s"]
        steady = r["steady_samples_per_s"]
        lines.append(f"  {p['policy']}: "
                     f"{'-' if first_steps is None else fmt.rate(first_steps)} vs "
                     f"{'-' if steady is None else fmt.rate(steady)} (rank 0)")
    lines += ["", "Label entropy per batch after the restart (first steps) against the "
                  "uninterrupted epoch"]
    for p in doc["policies"]:
        lines.append(f"  {p['policy']}: {_entropy_gap(p['total'])}")
    t0 = first["total"]
    lines += ["", "Distinct units (shards, or files) per batch: after the restart "
                  + ", ".join(f"{p['policy']} {_n(p['total']['shards_after'])}"
                              for p in doc["policies"])
                  + f"; steady state {_n(t0['shards_steady'])}"]
    text = {**POLICY_TEXT, "stateful": "every rank's loader state saved; what they leave dealt "
                                       "to the new ranks and workers"} if after else POLICY_TEXT
    lines += [""] + [f"  {k}: {v}" for k, v in text.items() if k in st["policies"]]
    lines += [f"  note: {n}" for n in doc["notes"]]
    return "\n".join(lines)


def write_plot(doc: dict[str, Any], path: Path) -> Path:
    """Label entropy per step, rank 0: the uninterrupted epoch and each policy's run, with the
    restart marked (matplotlib, `dsbench[plot]`)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed
    import matplotlib.pyplot as plt

    from dsbench import atomic

    k = doc["settings"]["restart_at"]
    fig, ax = plt.subplots(1, 1, dpi=120, figsize=(8.0, 4.0))
    try:
        ref = doc["policies"][0]["ranks"][0]["series"]["reference_entropy_bits"]
        # Wide and pale under the policies' lines: where a policy restores the order exactly,
        # its line lies on this one.
        ax.plot(range(len(ref)), [float("nan") if v is None else v for v in ref],
                color="#999999", lw=5.0, alpha=0.5, label="uninterrupted")
        for p in doc["policies"]:
            r = p["ranks"][0]
            ys = r["series"]["resumed_entropy_bits"]
            ax.plot(range(len(ys)), [float("nan") if v is None else v for v in ys], lw=1.2,
                    label=f"{p['policy']}: replayed {r['replayed']}, skipped {r['skipped']}")
        ax.axvline(k, color="#d62728", ls="--", lw=1.0)
        ax.text(k, ax.get_ylim()[1], " restart", color="#d62728", va="top")
        ax.set_xlabel("training step (rank 0)")
        ax.set_ylabel("label entropy per batch (bits)")
        ax.set_title("Measured: batch label entropy around a restart")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        with atomic.replacing(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return path


def native_row(case: dict[str, Any]) -> list[str]:
    """One case of `resume --backend native`: shape, and replayed and skipped samples of the
    epoch (or what happened instead), for people and docs/resume.md."""
    if case["outcome"] in ("hang", "failed"):
        return [case["case"], "-", case["outcome"], "-", "-", "-", case["detail"] or "-"]
    (r0, r1), (w0, w1) = case["ranks"], case["workers"]
    shape = f"{r0}x{w0} -> {r1}x{w1}"
    notes = ["the library keeps no state: the restart began the epoch again"
             if case["outcome"] == "no state" else
             "exact" if case["replayed"] == case["skipped"] == 0 else ""]
    other = case.get("shape_epoch")
    if other is not None:  # absent from documents written before it was measured
        notes.append(f"the epoch in {r1}x{w1}: {fmt.plural(other['samples'], 'sample')}"
                     + (f", {fmt.plural(other['differs'], 'delivery', 'deliveries')} unlike "
                        f"{r0}x{w0}'s" if other["differs"] else ", the same samples"))
    note = "; ".join(n for n in notes if n)
    return [case["case"], shape, case["outcome"],
            fmt.plural(case["replayed"], "sample"), fmt.plural(case["skipped"], "sample"),
            _s(case["first_batch_s"]), note or "-"]


NATIVE_HEADERS = ["case", "ranks x workers", "outcome", "replayed", "skipped", "to 1st batch",
                  "note"]


def render_native(doc: dict[str, Any]) -> str:
    r, st = doc["reader"], doc["settings"]
    cases = doc["cases"]
    epoch = next((c["epoch_samples"] for c in cases if c["epoch_samples"] is not None), None)
    lines = [f"{doc['export']['path']}: {doc['export']['layout']} export read by {r['library']} "
             f"{r['version']}, resumed by {r['resume']}",
             f"restart after {fmt.plural(st['restart_at'], 'step')} of batch "
             f"{st['batch_size']} on every rank (second resume: and as many again)"
             + ("" if epoch is None else f"; the epoch: {fmt.plural(epoch, 'sample')}")
             + f"; a hang: no batch within {fmt.seconds(st['hang_after_s'])} of asking",
             f"ranks: {st['ranks_as']}", "",
             fmt.table(NATIVE_HEADERS, [native_row(c) for c in cases]),
             "replayed: deliveries beyond the uninterrupted epoch's count of a sample; skipped: "
             "its samples that never came (compared by content; a restart in another shape "
             "against both shapes' epochs, counting only what neither explains); to 1st batch: "
             "from the restarted loader's creation (its dataset built, its state loaded), "
             "slowest rank"]
    return "\n".join(lines)
