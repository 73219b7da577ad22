"""`dsbench inspect`'s report for people: the export summary, one fact a line, with units."""

from __future__ import annotations

from typing import Any

from dsbench import fmt


def counted(n: int, plural: str) -> str:
    """'1 shard', '2 shards', '1 directory'."""
    if n != 1:
        return f"{n} {plural}"
    words = plural.split(" ")
    last = words[-1]
    words[-1] = last[:-3] + "y" if last.endswith("ies") else last.removesuffix("s")
    return f"1 {' '.join(words)}"


def _form(dataset: dict[str, Any] | None) -> str:
    """A Hugging Face dataset's form and split, after its layout's name."""
    if not dataset:
        return ""
    splits = dataset.get("splits") or []
    split = f", split {dataset['split']}" if dataset.get("split") else ""
    more = f" of {', '.join(splits)}" if len(splits) > 1 else ""
    return f" ({dataset['form']}{split}{more})"


def _feeds(s: dict[str, Any]) -> str:
    """How many loader workers the units can feed: loaders that split an export by unit give
    each worker whole units (per-sample files split by sample, and never run short)."""
    if s["layout"] in ("files", "dataset") or not s["units"]:
        return ""
    return (f" (feeds at most {counted(s['units'], 'loader workers')} in all ranks together; "
            "more would sit idle)")


def render(s: dict[str, Any]) -> str:
    """The summary as text for a terminal: one fact a line, every figure with its unit."""
    bps = s["bytes_per_sample"]
    lines = [
        f"path:               {s['path']}",
        f"layout:             {s['layout']}{_form(s.get('dataset'))}",
        f"samples:            {counted(s['samples'], 'samples')}",
        f"{s['unit_name'] + ':':<20}{counted(s['units'], s['unit_name'])}{_feeds(s)}",
        *([f"{c['name'] + ':':<20}{counted(c['count'], c['name'])}"]
          if (c := s["containers"]) and c["name"] != s["unit_name"] else []),
        f"data files:         {counted(s['files'], 'files')}, {fmt.nbytes(s['bytes'])}",
        f"bytes per sample:   mean {fmt.nbytes(bps['mean'], 'sample')}, "
        f"p50 {fmt.nbytes(bps['p50'], 'sample')}, p99 {fmt.nbytes(bps['p99'], 'sample')}",
        f"files per sample:   {fmt.sig(s['files_per_sample'])} files opened/sample",
    ]
    if s["members_per_sample"] is not None:
        lines.append(f"tar members:        {fmt.sig(s['members_per_sample'])} members/sample")
    if b := s.get("blocks"):
        many = b["name"] + ("es" if b["name"].endswith("ch") else "s")
        lines.append(f"{many + ':':<20}{counted(b['count'], many)} in "
                     f"{counted(b['shards'], 'files')}, p50 {fmt.plural(b['rows_p50'], 'row')} and "
                     f"{fmt.nbytes(b['bytes_p50'])} each; "
                     + (f"a sample read alone (--order random) reads its whole {b['name']}"
                        if b.get("whole") else
                        f"a sample read alone (--order random) is taken from its {b['name']} "
                        "in place (memory-mapped), not read whole"))
    lines.append("fields:")
    if not s["fields"]:
        payload = {"tokens": "token ids", "text": "text", "audio": "audio"}.get(
            (s.get("sample") or {}).get("kind", "image"), "image")
        lines.append(f"  (none besides the {payload})")
    width = max((len(n) for n in s["fields"]), default=0)
    where_name = s["containers"]["name"] if s["containers"] else s["unit_name"]
    for name, info in s["fields"].items():
        where = f"in all {where_name}"
        if info["missing_in_count"]:
            shown = ", ".join(info["missing_in"][:3])
            more = info["missing_in_count"] - min(3, len(info["missing_in"]))
            where = (f"missing in {counted(info['missing_in_count'], where_name)}: {shown}"
                     + (f" and {more} more" if more > 0 else ""))
        lines.append(f"  {name:<{width}}  {info['type']}  ({where})")
    im, tokens = s["image"], s.get("tokens")
    sample = s.get("sample") or {"kind": "image", "field": None}
    if sample["kind"] != "image":
        what = {"tokens": "token ids", "text": "text, tokenized by the loader",
                "audio": "audio, decoded by the loader"}.get(sample["kind"], sample["kind"])
        lines.append(f"samples carry:      {what}"
                     + (f" ({sample['field']})" if sample["field"] else ""))
    text, clips = s.get("text"), s.get("audio")
    if clips:
        n = clips["seconds_per_sample"]
        rates = ", ".join(f"{r:,} Hz" for r in clips["sample_rates"])
        lines += [
            f"audio:              {clips['codec']} ({clips['count_checked']} samples checked)",
            f"  per sample:       {fmt.sig(n['min'])}-{fmt.sig(n['max'])} s, p50 "
            f"{fmt.sig(n['p50'])} s, mean {fmt.sig(clips['mean_seconds_per_sample'])} s",
            f"  rate, channels:   {rates}; {'/'.join(map(str, clips['channels']))} channel(s)"
            + ("" if len(clips["sample_rates"]) == 1 else
               f" (clips are cut at {clips['sample_rate']:,} Hz, the common rate: a "
               "clip at another is a bad sample, resampling is not built)"),
        ]
    if text:
        n = text["chars_per_sample"]
        lines += [
            f"text:               {text['count_checked']} samples checked",
            f"  per sample:       {n['min']}-{n['max']} characters, p50 {fmt.sig(n['p50'])}, "
            f"mean {fmt.sig(text['mean_chars_per_sample'])} characters",
        ]
    if tokens:
        n = tokens["per_sample"]
        lines += [
            f"tokens:             {tokens['dtype']} ({tokens['count_checked']} samples checked)",
            f"  per sample:       {n['min']}-{n['max']} ids, p50 {fmt.sig(n['p50'])} ids, "
            f"mean {fmt.sig(tokens['mean_per_sample'])} ids",
        ]
        stream = tokens.get("stream")
        if stream:
            lines += [
                f"  a token stream:   {stream['ids']:,} ids of {stream['documents']:,} documents "
                f"laid end to end, cut into blocks of {stream['block']:,} ids (--seq-len, the "
                "reader's block size) that run across documents",
                f"  never read:       {stream['unread_ids']:,} ids "
                f"({fmt.percent(stream['unread_ids'] / stream['ids'])} of those stored): each "
                "chunk's last ids, fewer than a block",
            ]
    elif im["count_checked"]:
        w, h = im["width"], im["height"]
        common = ", ".join(f"{c['size']} px ({fmt.percent(c['count'] / im['count_checked'])})"
                           for c in im["common_sizes"][:3])
        lines += [
            f"image:              {im['codec']} ({im['count_checked']} images checked)",
            f"  width:            {w['min']}-{w['max']} px, p50 {fmt.sig(w['p50'])} px",
            f"  height:           {h['min']}-{h['max']} px, p50 {fmt.sig(h['p50'])} px",
            f"  common sizes:     {common}",
        ]
    elif sample["kind"] == "image":
        lines.append("image:              none checked")
    ign = s["ignored_files"]
    if ign["count"]:
        shown = ", ".join(ign["examples"][:3]) + (", ..." if ign["count"] > 3 else "")
        lines.append(f"not read:           {counted(ign['count'], 'files')} that are not "
                     f"{s['layout']} data ({shown})")
    lines.append(f"bad samples:        {counted(s['bad_samples'], 'samples')} "
                 f"({counted(s['problems_count'], 'problems')} found)")
    for p in s["problems"][:10]:
        key = f" [sample {p['key']}]" if p["key"] is not None else ""
        lines.append(f"  {p['file']}{key}: {p['error']}")
    if s["problems_count"] > 10:
        lines.append(f"  ... and {s['problems_count'] - 10} more problems")
    return "\n".join(lines)
