"""Export definitions: one TOML file per export (see formats/), loaded and validated here.

A definition says how a dataset is laid out on disk and what each sample holds. Every error names
the file and the offending key, because a definition is usually edited by hand.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsbench import atomic
from dsbench.adapters.member_kinds import TEXT_EXTS
from dsbench.errors import DsbenchError
from dsbench.export import payloads
from dsbench.export.keys import fail, take_choice, take_int, unknown
from dsbench.export.payloads import (
    AUDIO_NAME,
    TEXT_NAME,
    TOKENS_NAME,
    AudioSpec,
    TextSpec,
    TokensSpec,
)

LAYOUTS = ("files", "wds", "arrow", "parquet", "mds", "litdata", "hf", "lance", "tfrecord")
# Layouts written through their format's own library (export.libraries).
LIBRARY_LAYOUTS = ("mds", "litdata", "hf", "lance", "tfrecord")
HF_FORMS = ("save_to_disk", "hub")
# Compression each layout's writer offers for its shards (None: uncompressed): MDS and litdata
# compress whole shards, Arrow IPC each record batch's buffers.
COMPRESSIONS = {"mds": ("zstd", "gz", "bz2", "br", "snappy"), "litdata": ("zstd",),
                "arrow": ("zstd", "lz4")}
CODECS = ("jpeg", "png", "raw")
REENCODE_CODECS = ("jpeg", "png")  # what generate --from can re-encode a source's images as
SIZE_DISTRIBUTIONS = ("imagenet", "fixed")
FIELD_TYPES = ("int", "string", "embedding", "boxes")
EMBEDDING_ENCODINGS = ("binary", "json", "list")
FIELDS_AS = ("json", "members")

# The definitions that ship with dsbench (the repository's formats/ links here).
FORMATS_DIR = Path(__file__).parent / "formats"

# Member extension of the image per codec, as WebDataset and per-sample layouts name them.
# A definition makes jpeg, png or raw images (CODECS); a re-export also copies WebP and PPM.
IMAGE_EXT = {"jpeg": "jpg", "png": "png", "raw": "npy", "webp": "webp", "ppm": "ppm"}


# The most samples an export may hold: in a definition and as generate --samples.
MAX_SAMPLES = 10**9
@dataclass(frozen=True)
class ImageSpec:
    codec: str = "jpeg"
    quality: int = 90
    sizes: str = "imagenet"
    width: int = 500
    height: int = 375
    # generate --from: decode the source's images and encode them with codec and quality
    # (which changes the data), instead of copying them as stored
    reencode: bool = False
    # JPEG: encoded progressively (the scans a browser shows coarse to fine), which costs a
    # decoder more than a baseline JPEG of the same pixels
    progressive: bool = False

    @property
    def ext(self) -> str:
        return IMAGE_EXT[self.codec]


@dataclass(frozen=True)
class FieldSpec:
    """One non-image field of a sample.

    `encoding` matters for embeddings: raw little-endian float32 bytes (`binary`), a JSON list of
    numbers (`json`), or a native Arrow list column (`list`, columnar layouts only).
    `ext` is the member extension when fields are stored as separate members or files.
    """

    name: str
    type: str
    classes: int = 1000
    words: tuple[int, int] = (5, 20)
    dim: int = 0
    encoding: str = "json"
    max_boxes: int = 8
    ext: str = ""


@dataclass(frozen=True)
class ExportSpec:
    name: str
    layout: str
    description: str = ""
    samples: int = 2000
    shard_samples: int = 1000
    fields_as: str = "members"
    files_per_dir: int = 1000
    image: ImageSpec = field(default_factory=ImageSpec)
    fields: tuple[FieldSpec, ...] = ()
    source: str = ""
    form: str = "save_to_disk"  # hf: save_to_disk's layout, or the Hub's Parquet ("hub")
    compression: str | None = None  # mds, litdata, arrow: how their shards are compressed
    tokens: TokensSpec | None = None  # token ids per sample, not an image
    audio: AudioSpec | None = None  # an encoded clip per sample, not an image
    text: TextSpec | None = None  # a document's raw text per sample, not an image

    def to_dict(self) -> dict[str, Any]:
        """Plain data for manifests and result documents. `image.reencode`,
        `image.progressive` and `tokens` only when set: a manifest written before they existed
        still describes the same export."""
        out = dataclasses.asdict(self)
        for key in ("reencode", "progressive"):
            if not getattr(self.image, key):
                del out["image"][key]
        for key in ("tokens", "audio", "text"):
            if getattr(self, key) is None:
                del out[key]
        if self.tokens and not self.tokens.stream:
            del out["tokens"]["stream"]
        return out

    @property
    def kind(self) -> str:
        """What each sample carries: "image", "tokens", "audio" or "text"."""
        return ("tokens" if self.tokens else "audio" if self.audio else "text" if self.text
                else "image")

    @property
    def payload(self) -> str:
        """The payload's key in a synthetic sample, and its column's name in every layout."""
        return {"tokens": TOKENS_NAME, "audio": AUDIO_NAME, "text": TEXT_NAME}.get(self.kind,
                                                                                "image")

    @property
    def payload_ext(self) -> str:
        """The payload's member extension (wds): the image's, the token ids' .npy, the clip's
        codec."""
        if self.tokens:
            return f"{TOKENS_NAME}.npy"
        if self.text:
            return "txt"
        return self.audio.ext if self.audio else self.image.ext

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


_TOP_KEYS = {
    "name", "description", "layout", "samples", "shard_samples", "fields_as", "files_per_dir",
    "image", "fields", "form", "compression", "tokens", "audio", "text",
}
_IMAGE_KEYS = {"codec", "quality", "sizes", "width", "height", "reencode", "progressive"}
_FIELD_KEYS = {
    "int": {"type", "classes", "ext"},
    "string": {"type", "words", "ext"},
    "embedding": {"type", "dim", "encoding", "ext"},
    "boxes": {"type", "max_boxes", "ext"},
}


def _image(src: str, raw: Any) -> ImageSpec:
    if not isinstance(raw, dict):
        raise fail(src, "image", "expected a table")
    unknown(src, "image.", raw, _IMAGE_KEYS)
    codec = take_choice(src, "image.codec", raw.get("codec", "jpeg"), CODECS)
    reencode = raw.get("reencode", False)
    if not isinstance(reencode, bool):
        raise fail(src, "image.reencode", f"expected true or false, got {reencode!r}")
    if reencode and codec not in REENCODE_CODECS:
        raise fail(src, "image.reencode", f"re-encodes as {' or '.join(REENCODE_CODECS)}, "
                   f"not {codec}")
    progressive = raw.get("progressive", False)
    if not isinstance(progressive, bool):
        raise fail(src, "image.progressive", f"expected true or false, got {progressive!r}")
    if progressive and codec != "jpeg":
        raise fail(src, "image.progressive", f"a JPEG's encoding, not {codec}'s")
    return ImageSpec(
        reencode=reencode,
        progressive=progressive,
        codec=codec,
        quality=take_int(src, "image.quality", raw.get("quality", 90), 1, 100),
        sizes=take_choice(src, "image.sizes", raw.get("sizes", "imagenet"), SIZE_DISTRIBUTIONS),
        width=take_int(src, "image.width", raw.get("width", 500), 8, 8192),
        height=take_int(src, "image.height", raw.get("height", 375), 8, 8192),
    )


def _field(src: str, name: str, raw: Any, layout: str) -> FieldSpec:
    key = f"fields.{name}"
    if not isinstance(raw, dict):
        raise fail(src, key, "expected a table")
    if not name.isidentifier() or name in ("image", "key", TOKENS_NAME, AUDIO_NAME) \
            or name.startswith("__"):
        raise fail(src, key, "a field name must be an identifier other than 'image', 'key', "
                   f"'{TOKENS_NAME}' or '{AUDIO_NAME}'")
    ftype = take_choice(src, key + ".type", raw.get("type"), FIELD_TYPES)
    unknown(src, key + ".", raw, _FIELD_KEYS[ftype])
    ext = raw.get("ext", "")
    if not isinstance(ext, str) or (ext and not all(p.isalnum() for p in ext.split("."))):
        raise fail(src, key + ".ext", f"{ext!r} is not a member extension like 'cls' or 'emb.f32'")
    if ftype == "int":
        return FieldSpec(name, ftype, classes=take_int(src, key + ".classes",
                                                       raw.get("classes", 1000), 1, 2**31 - 1),
                         ext=ext)
    if ftype == "string":
        words = raw.get("words", [5, 20])
        if (not isinstance(words, list) or len(words) != 2
                or not all(isinstance(w, int) and not isinstance(w, bool) for w in words)
                or not 0 <= words[0] <= words[1] <= 10_000):
            raise fail(src, key + ".words", f"expected [min, max] word counts, got {words!r}")
        return FieldSpec(name, ftype, words=(words[0], words[1]), ext=ext)
    if ftype == "embedding":
        if "dim" not in raw:
            raise fail(src, key + ".dim", "an embedding needs its dimension")
        encoding = take_choice(src, key + ".encoding", raw.get("encoding", "binary"),
                               EMBEDDING_ENCODINGS)
        if encoding != "json" and layout == "jsonl":
            raise fail(src, key + ".encoding", "JSON Lines stores an embedding as a JSON "
                       "list; use 'json'")
        if encoding == "list" and layout not in ("arrow", "parquet", *LIBRARY_LAYOUTS):
            raise fail(src, key + ".encoding",
                       "'list' is a columnar encoding; use 'binary' or 'json' for " + layout)
        if encoding == "json" and layout in ("litdata", "hf", "tfrecord"):
            raise fail(src, key + ".encoding", f"{layout} stores an embedding as a float32 "
                       "array; use 'list'")
        return FieldSpec(name, ftype, dim=take_int(src, key + ".dim", raw["dim"], 1, 65536),
                         encoding=encoding, ext=ext)
    if layout in ("litdata", "tfrecord"):
        raise fail(src, key + ".type", f"{layout} has no list-of-records type for boxes (a "
                   "variable list of records); leave the field out")
    max_boxes = take_int(src, key + ".max_boxes", raw.get("max_boxes", 8), 0, 10_000)
    return FieldSpec(name, ftype, max_boxes=max_boxes, ext=ext)


def _compression(src: str, layout: str, value: Any) -> str | None:
    if value is None:
        return None
    if layout not in COMPRESSIONS:
        raise fail(src, "compression", f"{layout} shards are not compressed by dsbench's "
                   f"writer ({', '.join(COMPRESSIONS)} shards are)")
    return take_choice(src, "compression", value, COMPRESSIONS[layout])


def member_ext(spec: ExportSpec, f: FieldSpec) -> str:
    """Extension of a field stored as its own member (`fields_as = "members"`, or binary data)."""
    if f.ext:
        return f.ext
    if f.type == "int":
        return "cls"
    if f.type == "string":
        return "txt"
    if f.type == "embedding" and f.encoding == "binary":
        return f"{f.name}.f32"
    return f"{f.name}.json"


def parse_spec(data: dict[str, Any], source: str) -> ExportSpec:
    unknown(source, "", data, _TOP_KEYS)
    for required in ("name", "layout"):
        if required not in data:
            raise fail(source, required, "missing (every definition names itself and its layout)")
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise fail(source, "name", f"expected a non-empty string, got {name!r}")
    # JSON Lines holds text only: a layout of text definitions alone.
    layout = take_choice(source, "layout", data["layout"], (*LAYOUTS, "jsonl"))
    if layout == "jsonl" and ("text" not in data or "image" in data or "tokens" in data
                              or "audio" in data):
        raise fail(source, "layout", "jsonl holds documents' text only: a [text] table, and "
                   "no [image], [tokens] or [audio]")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail(source, "description", "expected a string")
    raw_fields = data.get("fields", {})
    if not isinstance(raw_fields, dict):
        raise fail(source, "fields", "expected a table of fields")
    fields = tuple(_field(source, n, v, layout) for n, v in raw_fields.items())
    spec = ExportSpec(
        name=name,
        layout=layout,
        description=description,
        samples=take_int(source, "samples", data.get("samples", 2000), 1, MAX_SAMPLES),
        shard_samples=take_int(source, "shard_samples", data.get("shard_samples", 1000),
                               1, 10**7),
        fields_as=take_choice(source, "fields_as", data.get("fields_as", "members"), FIELDS_AS),
        files_per_dir=take_int(source, "files_per_dir", data.get("files_per_dir", 1000),
                               1, 10**7),
        image=_image(source, data.get("image", {})),
        fields=fields,
        source=source,
        form=take_choice(source, "form", data.get("form", "save_to_disk"), HF_FORMS),
        compression=_compression(source, layout, data.get("compression")),
        tokens=payloads.tokens(source, data["tokens"], layout) if "tokens" in data else None,
        audio=payloads.audio(source, data["audio"], layout) if "audio" in data else None,
        text=payloads.text(source, data["text"], layout) if "text" in data else None,
    )
    tables = [t for t in ("image", "tokens", "audio", "text") if t in data]
    if len(tables) > 1:
        raise fail(source, tables[1], f"a sample carries one of an image, token ids, an "
                   f"audio clip or text: leave out [{tables[0]}] or [{tables[1]}]")
    if spec.tokens and spec.tokens.stream:
        if fields:
            raise fail(source, f"fields.{fields[0].name}", "a token stream's chunks hold the "
                       "ids alone (a TokensLoader sample is a block across documents): leave "
                       "out the fields, or the stream")
        if spec.compression:
            raise fail(source, "compression", "dsbench reads a token stream's chunks "
                       "uncompressed only: leave out compression")
    taken = {TEXT_NAME: "a text export's payload is named text"} | (
        {"id": "a JSON Lines document's id is its key"} if layout == "jsonl" else {})
    clash = next((f.name for f in fields if spec.text and f.name in taken), None)
    if clash is not None:
        raise fail(source, f"fields.{clash}", f"{taken[clash]}: name the field otherwise")
    if "form" in data and layout != "hf":
        raise fail(source, "form", "only a Hugging Face (hf) export has a form")
    if spec.layout == "hf" and spec.image.codec == "raw" and spec.kind == "image":
        raise fail(source, "image.codec", "a Hugging Face Image feature holds encoded "
                   "images (jpeg, png); raw .npy images are not one")
    if spec.layout in ("files", "wds"):
        exts: dict[str, str] = {spec.payload_ext: {"tokens": "the token ids",
                                                   "audio": "the audio clip",
                                                   "text": "the text"}.get(spec.kind, "image")}
        if spec.fields_as == "json":
            exts["json"] = "the JSON document"
        for f in spec.fields:
            if spec.fields_as == "json" and not (f.type == "embedding" and f.encoding == "binary"):
                continue
            ext = member_ext(spec, f)
            if spec.text and ext.rsplit(".", 1)[-1] in TEXT_EXTS:
                # A reader takes any member ending so as the sample's text (adapters).
                raise fail(source, f"fields.{f.name}.ext", f"member extension {ext!r} ends "
                           "as the text's member does: set ext to one that does not (e.g. "
                           f"'{f.name}')")
            if ext in exts:
                raise fail(source, f"fields.{f.name}.ext",
                           f"member extension {ext!r} is already used by {exts[ext]}; set ext")
            exts[ext] = f"field {f.name!r}"
    return spec


def shipped() -> list[str]:
    """The names of the definitions shipped with dsbench (dsbench/export/formats/NAME.toml)."""
    return sorted(p.stem for p in FORMATS_DIR.glob("*.toml"))


def find_definition(given: str | Path) -> Path:
    """A definition file: `given` where it is a file, else the shipped definition it names
    ("before", or "before.toml"), from any directory (a directory of that name, an export
    called `before`, does not hide it). A path that is neither is an error that lists the
    shipped names."""
    p = Path(given)
    if p.is_file() or len(p.parts) != 1:
        return p
    name = p.name.removesuffix(".toml")
    if name in shipped():
        return FORMATS_DIR / f"{name}.toml"
    raise DsbenchError(f"no such definition file, nor a shipped definition of that name "
                       f"(shipped: {', '.join(shipped())}; dsbench generate --list)", path=p)


def load_spec(path: str | Path) -> ExportSpec:
    """Read and validate a definition, a file or a shipped one by name (find_definition); every
    problem is a DsbenchError naming file and key."""
    p = find_definition(path)
    atomic.check_input(p)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DsbenchError("no such definition file", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DsbenchError(f"cannot read definition: {exc}", path=p) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DsbenchError(f"not valid TOML: {exc}", path=p) from None
    return parse_spec(data, str(p))
