"""A candidate's definition as a TOML file, for `generate DEFINITION OUT --from EXPORT`.

The file says only what the candidate's writer uses (layout, shard size, field types and
encodings, in the order the writers take them); loaded back by export.spec it gives a
definition that writes the same bytes. The image table is written only for a candidate whose
images are re-encoded (`--reencode`): otherwise a re-export copies the source's images as
stored, whatever a definition says of them.
"""

from __future__ import annotations

import json
import tomllib

from dsbench.export.spec import ExportSpec, FieldSpec, parse_spec


def _value(v: object) -> str:
    # TOML's basic strings and arrays of integers read as JSON writes them.
    return json.dumps(v, ensure_ascii=False)


def _field(f: FieldSpec) -> list[str]:
    lines = [f"[fields.{f.name}]", f"type = {_value(f.type)}"]
    if f.type == "embedding":
        lines += [f"dim = {f.dim}", f"encoding = {_value(f.encoding)}"]
    if f.ext:
        lines.append(f"ext = {_value(f.ext)}")
    return lines


def to_toml(spec: ExportSpec, header: str) -> str:
    """The definition as TOML, `header` (one or more lines) as its opening comment."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"name = {_value(spec.name)}", f"description = {_value(spec.description)}",
              f"layout = {_value(spec.layout)}", f"samples = {spec.samples}"]
    if spec.layout == "files":
        lines.append(f"files_per_dir = {spec.files_per_dir}")
    else:
        lines.append(f"shard_samples = {spec.shard_samples}")
    if spec.layout in ("files", "wds"):
        lines.append(f"fields_as = {_value(spec.fields_as)}")
    if spec.layout == "hf":
        lines.append(f"form = {_value(spec.form)}")
    if spec.compression:
        lines.append(f"compression = {_value(spec.compression)}")
    if spec.image.reencode:
        lines += ["", "[image]", f"codec = {_value(spec.image.codec)}",
                  f"quality = {spec.image.quality}", "reencode = true"]
    if spec.tokens:  # the ids are copied as stored: their dtype is what the writer uses
        lines += ["", "[tokens]", f"dtype = {_value(spec.tokens.dtype)}"]
        if spec.tokens.stream:
            lines.append("stream = true")
    if spec.audio:  # the clips are copied as stored, or transcoded to this codec
        lines += ["", "[audio]", f"codec = {_value(spec.audio.codec)}"]
    if spec.text:  # the texts are copied as stored: the table says only that they are text
        lines += ["", "[text]"]
    for f in spec.fields:
        lines += ["", *_field(f)]
    return "\n".join(lines) + "\n"


def same_writer(a: ExportSpec, b: ExportSpec) -> bool:
    """Whether two definitions lay samples out alike (all but names, text and image settings
    a re-export does not use: all of them, unless it re-encodes)."""
    keys = ("layout", "shard_samples", "fields_as", "files_per_dir", "fields", "form",
            "compression", "tokens", "audio", "text")
    images = (a.image.reencode == b.image.reencode and
              (not a.image.reencode or (a.image.codec, a.image.quality) ==
               (b.image.codec, b.image.quality)))
    return images and all(getattr(a, k) == getattr(b, k) for k in keys)


def check_text(spec: ExportSpec, text: str, path: str) -> None:
    """`text` (to be written at `path`) loads back as the same layout; the fields' names were
    checked to be identifiers when they were found (advise.fields), so a failure is a bug."""
    if not same_writer(spec, parse_spec(tomllib.loads(text), path)):
        raise AssertionError(f"{path} would not load back as {spec.name}")
