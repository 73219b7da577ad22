"""What a member-per-field sample carries when it is not an image or an audio clip (token ids
in an `.npy` member, text in a `.txt` one), and how a WebDataset export's first samples tell
it: members.py reads the samples, this module decides their kind.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable, Mapping

from dsbench.adapters import base, members
from dsbench.errors import DsbenchError
from dsbench.storage.files import Loc

# A tar member's (key, extension), None for one that is no sample's (wds._sample_name).
MemberName = Callable[[tarfile.TarInfo], tuple[str, str] | None]

# Members that carry a WebDataset sample with no image or audio member: token ids as a NumPy
# array (`input_ids.npy`), else text (`txt`). An image export's `.npy` and `.txt` are fields.
TOKEN_EXTS = ("npy",)
TEXT_EXTS = ("txt", "text")


def other_payload(exts: Iterable[str], where: Loc) -> tuple[str, str] | None:
    """For a sample with no image or audio member (its extensions `exts`, in `where`), the
    member that could carry it and its kind: the `.npy` one (token ids), else the `.txt` one
    (text); None for neither; one line where several could (--image-field chooses)."""
    for kind, ends in ((base.TOKENS, TOKEN_EXTS), (base.TEXT, TEXT_EXTS)):
        found = sorted(e for e in exts if e.rsplit(".", 1)[-1].lower() in ends)
        if len(found) == 1:
            return found[0], kind
        if found:
            raise DsbenchError(f"several members could carry the samples' {kind} "
                               f"(.{', .'.join(found)}): name one with --image-field",
                               path=where)
    return None


def holds_ids(head: bytes) -> bool:
    """Whether the start of a `.npy` member (its header) states a 1-d integer array: token
    ids, where an image's raw pixels are H x W x 3."""
    try:
        shape, dtype = base.npy_header(head)
    except (ValueError, OSError, EOFError, SyntaxError):
        return False
    return len(shape) == 1 and dtype.kind in "iu"


def payload_kind(images: Mapping[str, str]) -> str | None:
    """The sample kind a payload map makes of every sample (token ids, text), or None where
    it goes by each sample's member (an image's, an audio clip's)."""
    codecs = set(images.values())
    return codecs.pop() if len(codecs) == 1 and codecs <= {base.TOKENS, base.TEXT} else None


# The first samples of an export, each member's extension with the head of its `.npy`
# members (only `wanted`'s where given): Samples(wanted, n).
Samples = Callable[[str | None, int], list[dict[str, bytes | None]]]


def payload(root: Loc, image_field: str | None, samples: Samples, where: Loc
            ) -> dict[str, str]:
    """The payload members' extensions and codecs: images and audio clips, or, where the
    first PEEKED samples have neither, their token ids (an `.npy` member of a 1-d integer
    array) or text (a `.txt` member); --image-field names the member."""
    last = (image_field or "").rsplit(".", 1)[-1].lower()
    raw = members.image_exts(root).get("npy") == "raw"  # dsbench's raw-pixel exports
    if image_field is not None and last in TEXT_EXTS:
        return {image_field: base.TEXT}
    if image_field is not None and last in TOKEN_EXTS and not raw:
        first = samples(image_field, 1)
        if first and holds_ids(first[0].get(image_field) or b""):
            return {image_field: base.TOKENS}
    images = members.image_exts(root, image_field)
    if image_field is not None:
        return images
    peeked = samples(None, PEEKED)
    if not peeked or any(members.pick_image(s, images) for s in peeked):
        return images
    other = other_payload(peeked[0], where)
    if other is None:
        return images
    ext, kind = other
    if kind == base.TOKENS and not holds_ids(peeked[0].get(ext) or b""):
        return images  # an .npy of pixels or floats: not token ids
    return {ext: kind}


def wds_payload(root: Loc, shard: Loc, image_field: str | None,
                member_name: MemberName) -> dict[str, str]:
    """`payload` of a WebDataset export, from its first shard's first samples."""
    return payload(root, image_field,
                   lambda wanted, n: first_samples(shard, member_name, n, wanted), shard)


def is_other_payload(ext: str) -> bool:
    """Whether a member's extension could carry token ids or text (other_payload)."""
    return ext.rsplit(".", 1)[-1].lower() in (*TOKEN_EXTS, *TEXT_EXTS)


PEEKED = 8  # the samples whose members say what an export's samples carry
NPY_HEAD = 4096  # enough of an .npy member for its header


def first_samples(shard: Loc, member_name: MemberName, n: int, wanted: str | None = None
                   ) -> list[dict[str, bytes | None]]:
    """The first `n` samples of a shard, from its headers: each member's extension, with the
    head of its `.npy` members (their array headers; only `wanted`'s where given); [] where the
    shard does not read (reading it reports why)."""
    out: list[dict[str, bytes | None]] = []
    key = None
    try:
        with base.open_file(shard) as f, tarfile.open(fileobj=f, mode="r|*") as tf:
            for m in tf:
                parsed = member_name(m)
                if parsed is None:
                    continue
                if parsed[0] != key:
                    if len(out) == n:
                        break
                    key = parsed[0]
                    out.append({})
                ext = parsed[1]
                head = None
                if ext == wanted or (wanted is None and ext.endswith("npy")):
                    data = tf.extractfile(m)
                    head = data.read(NPY_HEAD) if data is not None else None
                out[-1][ext] = head
    except (tarfile.TarError, OSError, EOFError, DsbenchError):
        return []
    return out
