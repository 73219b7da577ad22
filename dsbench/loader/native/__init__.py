"""Native readers: an export read through its format's own library, as its users read it
(`bench --backend native`).

Each format's module builds the library's dataset in the main process, as a training script
does before it hands the dataset to torch's DataLoader (MosaicML's StreamingDataset, litdata's
StreamingDataset, a `datasets` Dataset with torch formatting, Lance's LanceDataset, the
tfrecord package's reader, webdataset's WebDataset), and iterates one epoch of a loader
worker's share in that worker. What the library hands over (a PIL image, a tensor, a decoded
array, bytes) becomes a RawSample of codec `decoded` (or the bytes' own codec), so that the
loader's stages and accounting are dsbench's own: `read` is the library's iteration (its
reading and, where the library decodes, its decoding), `decode` what turning its image into
pixels still costs (a PIL image's lazy decode, a tensor's copy), then fields, the transform
and collation as for dsbench's reader. The worker processes, windows, rounds and OS
accounting are the torch backend's (torch_source.py).

A session (session.py) gives the libraries a private temporary directory and starts the
workers; the result names the library and its version (`reader`).

In: dsbench's own export (for the image column and the units). Out: a picklable opener whose
exports yield RawSamples through the library. May import: adapters, storage and the
foundation modules; the format libraries only inside functions (each is an optional extra).
"""

from __future__ import annotations

import bisect
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from dsbench.adapters import base
from dsbench.errors import DsbenchError, SampleError
from dsbench.loader.decode import DECODED_AUDIO
from dsbench.storage.files import Loc, location

READERS = {"mds": "dsbench.loader.native.mds", "litdata": "dsbench.loader.native.litdata",
           "hf": "dsbench.loader.native.hf", "lance": "dsbench.loader.native.lance",
           "tfrecord": "dsbench.loader.native.tfrecord", "wds": "dsbench.loader.native.wds",
           "megatron": "dsbench.loader.native.megatron"}
DECODED = "decoded"  # a RawSample's codec when the library already decoded its image

Position = tuple[int, int]  # a sample's unit (index in the export's units) and offset there
# key, image (PIL, array, tensor or bytes), fields, and where the sample lies in the export
# where the library tells it (None where it does not: the order figures then go without)
Item = tuple[str, Any, dict[str, Any], Position | None]


@dataclass(frozen=True)
class Shuffle:
    """--order shuffle with a format's own library: its shuffle, seeded; `buffer` samples for
    the libraries whose shuffle is a buffer (webdataset, a streaming Hugging Face dataset)."""

    seed: int
    buffer: int


class Reader(Protocol):
    """One format's library; see the module docstring."""

    library: str  # the distribution whose version the result names
    usage: str  # how it is called, for people
    # How --order shuffle calls the library's own shuffle, for people; None where dsbench does
    # not drive one (the order is then refused with this reader).
    shuffle_usage: str | None

    def prepare(self, export: base.Export, batch_size: int, tmp: Path,
                options: dict[str, Any], shuffle: Shuffle | None = None) -> Any:
        """The library's dataset, built in the main process (picklable to workers), with
        `options` (--native-option) as keywords of `options_targets`, shuffled by the
        library's own shuffle where `shuffle` is given."""
        ...

    def options_targets(self, export: base.Export) -> tuple[list[tuple[Callable[..., Any], str]],
                                                            dict[str, str]]:
        """The constructors (or methods) --native-option's keys go to, each with its name for
        people, and the keys dsbench sets itself with what sets them (options.check)."""
        ...

    def epoch(self, prepared: Any, export: Any, worker: int, n_workers: int,
              batch_size: int) -> Iterator[Item]:
        """One epoch of loader worker `worker`'s share, in that worker."""
        ...

    def close(self, prepared: Any) -> None:
        """Release what the dataset holds beyond the session's directory (shared memory)."""
        ...


def get(layout: str) -> Reader:
    if layout not in READERS:
        raise DsbenchError(f"--backend native: no native reader for layout {layout!r} "
                           f"(native readers: {', '.join(READERS)}); files, arrow and parquet "
                           "are read by dsbench's reader or --backend torch")
    reader: Reader = importlib.import_module(READERS[layout]).READER
    return reader


# The layouts whose library tells a sample's number in the export, front to back (View.locate).
NUMBERED = ("mds", "litdata", "hf")

# The extra that installs each format's library.
EXTRAS = {"mds": "mds", "litdata": "litdata", "hf": "hf", "lance": "lance",
          "tfrecord": "tfrecord", "wds": "torch", "megatron": "megatron"}


def check(layout: str, shuffled: bool = False) -> None:
    """Before any round: a native reader exists for the layout and its library is installed;
    with --order shuffle, dsbench drives the library's own shuffle."""
    reader = get(layout)
    if version(reader.library) == "not installed":
        raise DsbenchError(f"--backend native reads {layout} through {reader.library}, which "
                           f"is not installed: pip install 'dsbench[{EXTRAS[layout]}]'")
    if shuffled and reader.shuffle_usage is None:
        shufflers = ", ".join(k for k in READERS if get(k).shuffle_usage)
        raise DsbenchError(f"--order shuffle with --backend native uses the library's own "
                           f"shuffle, which dsbench drives for {shufflers}, not for "
                           f"{reader.library}: read it in order, or shuffle with dsbench's "
                           "reader (--backend dsbench)")


def version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe(layout: str, options: dict[str, Any] | None = None,
             shuffled: bool = False) -> dict[str, Any]:
    """What the result says of the native reader: the library, its version, the call, the
    options given to it (--native-option), and with --order shuffle its shuffle's call."""
    reader = get(layout)
    out: dict[str, Any] = {"library": reader.library, "version": version(reader.library),
                           "usage": reader.usage, "options": dict(options or {})}
    if shuffled:
        out["shuffle"] = reader.shuffle_usage
    return out


def check_options(export: base.Export, given: dict[str, Any]) -> None:
    """--native-option's keys against the installed library's constructor (options.py)."""
    from dsbench.loader.native import options

    if given:
        targets, reserved = get(export.layout).options_targets(export)
        options.check(targets, tuple(given.items()), reserved)


@dataclass(frozen=True)
class Placed:
    """A sample as the library gave it, with its number in the export, front to back, which a
    dataset subclass took from the index the library asked its `__getitem__` for (None: the
    library did not ask by number)."""

    sample: Any
    number: int | None


def made_on_first_use(namespace: dict[str, Any], name: str, make: Callable[[], type]) -> type:
    """The class `make` builds (a subclass of a library's dataset, which this module may not
    import at its top), built on first use and kept in its module's `namespace` under `name`,
    where pickle finds it again in the loader's workers."""
    if name not in namespace:
        cls = make()
        cls.__module__, cls.__qualname__ = namespace["__name__"], name
        namespace[name] = cls
    cls = namespace[name]
    assert isinstance(cls, type)
    return cls


def require(module: str, extra: str) -> Any:
    """Import a format library, or one line saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DsbenchError(f"--backend native needs {module}, which does not import ({exc}): "
                           f"pip install 'dsbench[{extra}]'") from None


@dataclass
class NativeExport:
    """A worker's view of the export through the library: `read` yields its share, epoch by
    epoch as `endless` asks, as RawSamples of decoded (or encoded) images and plain fields."""

    path: Loc
    layout: str
    prepared: Any
    view: Any  # what the format's reader needs of dsbench's own export (the image column)
    batch_size: int
    ignored: list[str]

    # Where the sample `read` yielded last lies in the export, where the library tells it.
    position: Position | None = None

    def read(self, worker: int = 0, n_workers: int = 1, skip: base.SkipHandler = None,
             ) -> Iterator[base.RawSample]:
        reader = get(self.layout)
        where = str(self.path)
        items = reader.epoch(self.prepared, self.view, worker, n_workers, self.batch_size)
        while True:
            try:
                key, image, fields, self.position = next(items)
            except StopIteration:
                return
            except (SampleError, DsbenchError):
                raise
            except Exception as exc:  # the library's own errors: one line naming the export
                text = str(exc).strip().splitlines()
                raise SampleError(f"{reader.library} failed: {type(exc).__name__}: "
                                  f"{text[0] if text else ''}", path=where) from None
            codec = (self.view.kind if self.view.kind not in ("image", base.AUDIO)
                     else _codec(image, self.view.kind))
            yield base.RawSample(key, where, image, codec, fields,
                                 dict.fromkeys(fields, base.ENC_VALUE))


def _codec(payload: Any, kind: str) -> str:
    """An image's or a clip's codec from its bytes, or that the library handed it decoded (an
    audio decoder object, for a clip, that the decode stage calls)."""
    if isinstance(payload, bytes | bytearray | memoryview):
        from dsbench.adapters.columns import sniff_codec

        return sniff_codec(bytes(payload[:16])) or ("jpeg" if kind == "image" else base.AUDIO)
    return DECODED if kind == "image" else DECODED_AUDIO


@dataclass(frozen=True)
class NativeOpener:
    """Opens the export through the library in each loader worker (picklable: the dataset
    built in the main process travels with it, as a DataLoader's dataset does)."""

    path: str
    layout: str
    prepared: Any
    view: Any
    batch_size: int

    def __call__(self, path: str) -> NativeExport:
        return NativeExport(location(self.path), self.layout, self.prepared, self.view,
                            self.batch_size, [])


@dataclass(frozen=True)
class View:
    """What the native readers need of dsbench's own export: where the image is, the units,
    and where each unit starts in the export's samples numbered front to back (None where
    counting them would read the units again)."""

    image: str | None
    units: tuple[str, ...]
    starts: tuple[int, ...] | None = None
    kind: str = "image"  # what the samples carry (base.KINDS): token ids are not decoded

    def locate(self, number: int) -> Position | None:
        """Sample `number` of the export (front to back) as (unit, offset)."""
        if self.starts is None or not 0 <= number < self.starts[-1]:
            return None
        unit = bisect.bisect_right(self.starts, number) - 1
        return unit, number - self.starts[unit]


def view_of(export: base.Export) -> View:
    from dsbench.loader.batch_order import unit_starts

    plan = getattr(export, "plan", None)
    image = getattr(plan, "image", None) or getattr(export, "image", None)
    if image is None and hasattr(export, "image_field"):
        image = export.image_field
    units = tuple(export.units())
    # Each unit's start, and the end of the last, for the readers whose library gives a
    # sample's number in the export (the others place samples by unit and offset).
    starts = unit_starts(export, len(units)) if units and export.layout in NUMBERED else None
    return View(image if isinstance(image, str) else None, units,
                tuple(starts) if starts else None, base.kind_of(export))
