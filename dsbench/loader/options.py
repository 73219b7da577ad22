"""How to run the loader benchmark: every option, checked before any process starts."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import adapters
from dsbench.adapters.base import AUDIO, SEQ_LEN, TEXT, TOKENS
from dsbench.adapters.tokenizer import TokenizerSpec
from dsbench.errors import DsbenchError
from dsbench.loader.counts import DEFAULT_MAX_SAMPLES, REMOTE_MAX_SAMPLES
from dsbench.loader.decode import DECODERS, DEFAULT_MAX_PIXELS
from dsbench.loader.exact_pass import DEFAULT_SAMPLES
from dsbench.loader.order import (
    BLOCK,
    DEFAULT_BLOCK,
    DEFAULT_BUFFER,
    ORDERS,
    SEQUENTIAL,
    SHUFFLE,
    Order,
)
from dsbench.loader.packing import TokenPack
from dsbench.loader.pipeline import AudioCrop, Pipeline, TokenCrop, TrainTransform, Transform
from dsbench.loader.transforms import MAX_RATE, soxr
from dsbench.loader.user import UserStep, load
from dsbench.loader.worker import Opener
from dsbench.results.types import Config
from dsbench.storage.files import Loc, is_remote, location

BACKENDS = ("dsbench", "torch", "native")


# An emulated training step longer than an hour is a typo (and time.sleep overflows near 1e11).
MAX_STEP_S = 3600
MAX_CLIP_S = 600  # a training clip of ten minutes is already far past any speech model's
MAX_INFLIGHT = 64  # requests ahead per worker: past this, threads, not the store, are the cost

def check_rate(rate: int | None) -> None:
    """--sample-rate: None, or a whole number of Hz in [1000, MAX_RATE] with soxr installed."""
    if rate is None:
        return
    if isinstance(rate, bool) or not isinstance(rate, int) or not 1000 <= rate <= MAX_RATE:
        raise DsbenchError(f"--sample-rate must be a whole number of Hz in [1000, {MAX_RATE}], "
                           f"got {rate!r}")
    soxr()  # one line before anything runs where it does not import


# The options for one kind of sample (commands.sample_options.Given notes them given): the kinds
# each applies to, and what it does.
FOR_KIND = {"--seq-len": ((TOKENS, TEXT), "sets the length of token sequences"),
            "--tokenizer": ((TEXT,), "tokenizes text"),
            "--clip-seconds": ((AUDIO,), "sets the length of audio clips")}


def check_kind(kind: str, path: object, *, pack: bool = False,
               sample_rate: int | None = None, given: tuple[str, ...] = ()) -> None:
    """--pack on an export that holds no token documents, --sample-rate on one that holds
    no audio, or an option of FOR_KIND `given` for another kind: one line, where the option
    would otherwise be ignored without a word."""
    what = {TOKENS: "token ids", TEXT: "text", AUDIO: "audio"}.get(kind, "images")
    for option in given:
        kinds, does = FOR_KIND[option]
        if kind not in kinds:
            raise DsbenchError(f"{option} {does}; this export's samples are {what}", path=path)
    if pack and kind not in (TOKENS, TEXT):
        raise DsbenchError(f"--pack packs token documents into sequences; this export's "
                           f"samples are {what}", path=path)
    if sample_rate is not None and kind != AUDIO:
        raise DsbenchError(f"--sample-rate resamples audio; this export's samples are {what}",
                           path=path)


def check_given(given: tuple[str, ...], kinds: list[str], path: object) -> None:
    """An option of FOR_KIND `given` for sides (compare's two) none of whose samples it applies
    to: one line (check_kind's, of the first side). A raw-text side beside a tokenized one
    takes --tokenizer, so the option is for the sides together, not each."""
    for option in given:
        if not set(kinds) & set(FOR_KIND[option][0]):
            check_kind(kinds[0], path, given=(option,))


def check_clip(clip_s: float) -> None:
    """--clip-seconds: a number of seconds in (0, MAX_CLIP_S]; one line otherwise."""
    if isinstance(clip_s, bool) or not (isinstance(clip_s, int | float)
                                        and math.isfinite(clip_s) and 0 < clip_s <= MAX_CLIP_S):
        raise DsbenchError(f"--clip-seconds must be a number of seconds in (0, {MAX_CLIP_S}], "
                           f"got {clip_s!r}")


@dataclass(frozen=True)
class BenchOptions:
    """How to run the benchmark; validated here, so bad options fail before any process starts."""

    workers: tuple[int, ...] = (1,)
    batch_size: int = 64
    seconds: float = 2.0
    rounds: int = 6
    sweep_rounds: int | None = None  # rounds of each worker count after the first
    warmup_batches: int = 1  # per worker: past start-up, imports and the first touch
    step_time_s: float = 0.0
    cold: bool = False
    decoder: str = "pillow"
    normalize: bool = False
    on_error: str = "raise"
    backend: str = "dsbench"
    prefetch: int = 2
    seed: int = 0
    batches: int | None = None  # measure exactly this many batches per round instead of seconds
    transform: Transform | None = None  # replaces the training transform (e.g. a known cost)
    step: str | None = None  # --pipeline MODULE:CALLABLE: the user's per-sample step
    step_bytes: int = 0  # its output's bytes per sample, probed before the rounds
    dataset: str | None = None  # --dataset MODULE:FACTORY: the user's Dataset, a black box
    opener: Opener | None = None  # opens the export in each worker (default: adapters)
    layout: str | None = None  # read as this layout instead of detecting it
    # The layout this run found when it surveyed the export: workers open the export as it,
    # rather than each detecting it again at every round's start (see runner._run_benches).
    found_layout: str | None = None
    image_field: str | None = None  # the column or member holding the image, where ambiguous
    # What the export's samples carry (adapters.base.KINDS), as the run's survey found it:
    # token ids are cropped to --seq-len instead of the image transform.
    found_kind: str = "image"
    seq_len: int = SEQ_LEN  # --seq-len: ids per training sequence, for token samples
    pack: bool = False  # --pack: token documents laid end to end into sequences (packing.py)
    tokenizer: str | None = None  # --tokenizer FILE: text samples' tokenizer (tokenize.py)
    given: tuple[str, ...] = ()  # options of FOR_KIND the user gave (check_kind)
    clip_s: float = 4.0  # --clip-seconds: seconds of audio per training clip, for audio samples
    found_rate: int | None = None  # audio samples' rate, as the run's survey found it (Hz)
    sample_rate: int | None = None  # --sample-rate: audio resampled to it (Hz); None: as found
    # The tokenizer text samples are encoded with, once the run has loaded or trained it.
    tokenizer_spec: TokenizerSpec | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS  # larger images are bad samples
    stall_s: float | None = None  # a worker silent this long fails the run (None: adaptive)
    # Samples of whole units to count; 0: every unit; None: the default for where the export is.
    count_samples: int | None = None
    order: str = SEQUENTIAL  # one of order.ORDERS: how each worker reads its share
    shuffle_buffer: int = DEFAULT_BUFFER  # samples per worker, with --order shuffle on shards
    block: int = DEFAULT_BLOCK  # consecutive samples per block, with --order block
    epochs: int | None = None  # --epochs E: each round reads E whole epochs from fresh workers
    start_epoch: int = 0  # the epoch a round's workers start at (set per epoch by epochs.py)
    ceiling: bool = False  # --ceiling: also measure the loader replaying batches it built
    inflight: int = 1  # --inflight K: units (objects, shards) requested ahead by each worker
    replay: bool = False  # this side is the ceiling: workers hand built batches over again
    # The exact pass (exact.py): None counts instructions where valgrind is installed, True
    # requires it, False skips it; over this many samples.
    exact: bool | None = None
    exact_samples: int = DEFAULT_SAMPLES
    # --native-option KEY=VALUE: keywords of the native reader's dataset (native/options.py)
    native_options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        def bad(option: str, value: object, want: str) -> DsbenchError:
            return DsbenchError(f"--{option} must be {want}, got {value!r}")
        if isinstance(self.inflight, bool) or not isinstance(self.inflight, int) or \
                not 1 <= self.inflight <= MAX_INFLIGHT:
            raise bad("inflight", self.inflight, f"an integer from 1 to {MAX_INFLIGHT}")
        if not self.workers or any(isinstance(w, bool) or not isinstance(w, int) or w < 1
                                   for w in self.workers):
            raise bad("workers", self.workers, "a list of positive integers")
        for name, lo in (("batch_size", 1), ("rounds", 1), ("warmup_batches", 1),
                         ("prefetch", 1), ("count_samples", 0), ("shuffle_buffer", 0),
                         ("block", 1), ("exact_samples", 1), ("seq_len", 1)):
            value = getattr(self, name)
            if name == "count_samples" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise bad(name.replace("_", "-"), value, f"an integer >= {lo}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise bad("seconds", self.seconds, "a positive number")
        check_clip(self.clip_s)
        check_rate(self.sample_rate)
        if not (math.isfinite(self.step_time_s) and 0 <= self.step_time_s <= MAX_STEP_S):
            raise bad("step-time", self.step_time_s, f"a number of seconds in [0, {MAX_STEP_S}]")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise bad("seed", self.seed, "an integer >= 0")
        if self.stall_s is not None and not (math.isfinite(self.stall_s) and self.stall_s > 0):
            raise bad("stall-timeout", self.stall_s, "a positive number")
        if self.sweep_rounds is not None and (isinstance(self.sweep_rounds, bool) or not
                                              isinstance(self.sweep_rounds, int)
                                              or self.sweep_rounds < 1):
            raise bad("sweep-rounds", self.sweep_rounds, "an integer >= 1")
        if self.batches is not None and self.batches < 1:
            raise bad("batches", self.batches, "a positive integer")
        if self.epochs is not None:
            if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) \
                    or self.epochs < 1:
                raise bad("epochs", self.epochs, "an integer >= 1")
            if self.ceiling or self.dataset is not None or self.backend == "native":
                raise DsbenchError("--epochs starts dsbench's workers afresh each epoch "
                                   "(--backend dsbench or torch): not with --ceiling, "
                                   "--dataset or --backend native")
        if self.backend not in BACKENDS:
            raise bad("backend", self.backend, " or ".join(BACKENDS))
        if self.order not in ORDERS:
            raise bad("order", self.order, " or ".join(ORDERS))
        if (self.order != SEQUENTIAL and self.dataset is not None) or \
                (self.order not in (SEQUENTIAL, SHUFFLE) and self.backend == "native"):
            # A user's Dataset orders its reads itself; a format's own library reads in its
            # order, or shuffles with its own shuffle (--order shuffle).
            raise DsbenchError(f"--order {self.order} orders dsbench's reads (--backend "
                               "dsbench or torch); a --dataset reads in its own order, and "
                               "--backend native in the library's (--order sequential) or "
                               "with its own shuffle (--order shuffle)")
        if self.backend == "native" and self.order == SHUFFLE and self.shuffle_buffer < 1:
            raise bad("shuffle-buffer", self.shuffle_buffer,
                      "an integer >= 1 with --backend native --order shuffle (the library's "
                      "own buffer)")
        if self.native_options and self.backend != "native":
            raise DsbenchError("--native-option configures the format's own library: it "
                               "needs --backend native")
        if (self.ceiling or self.replay) and (self.backend != "dsbench"
                                              or self.dataset is not None):
            raise DsbenchError("--ceiling replays built batches in dsbench's own loader "
                               "(--backend dsbench, no --dataset)")
        if self.pack and (self.backend == "native" or self.step is not None
                          or self.dataset is not None):
            raise DsbenchError("--pack packs documents into sequences in dsbench's workers "
                               "(--backend dsbench or torch, no --pipeline or --dataset)")
        if self.pack and (self.epochs is not None or self.ceiling or self.replay):
            # A packed batch holds as many documents as filled it: an epoch is not a number
            # of batches, and the ceiling's replayed batches hold other documents than the
            # measured ones.
            raise DsbenchError("--pack carries a document's ids from batch to batch in a "
                               "worker: not with --epochs or --ceiling")
        if self.decoder not in DECODERS:
            raise bad("decoder", self.decoder, " or ".join(DECODERS))
        if self.layout is not None:
            adapters.get(self.layout)  # an unknown layout fails here, naming the choices
        self.pipeline()  # checks the error policy and that the decoder is installed
        if self.step is not None:
            load(self.step, "--pipeline")  # a bad module or name fails here, in one line
        if self.dataset is not None:
            if self.step is not None or self.backend != "dsbench":
                raise DsbenchError("--dataset measures your Dataset through torch's DataLoader "
                                   "as it is: --pipeline and --backend do not apply")
            load(self.dataset, "--dataset")

    def pipeline(self) -> Pipeline:
        if self.step is not None:
            step = UserStep(self.step, self.step_bytes)
            return Pipeline(decoder=self.decoder, transform=step, on_error=self.on_error,
                            max_pixels=self.max_pixels, user=step)
        transform = self.transform or self._transform()
        return Pipeline(decoder=self.decoder, transform=transform, on_error=self.on_error,
                        max_pixels=self.max_pixels,
                        tokenizer=self.tokenizer_spec.json if self.tokenizer_spec else None)

    def _transform(self) -> Transform:
        """What the samples carry picks the transform (found_kind, from the run's survey)."""
        if self.found_kind in (TOKENS, TEXT):
            return TokenPack(self.seq_len) if self.pack else TokenCrop(self.seq_len)
        if self.found_kind == AUDIO:
            return AudioCrop(self.clip_s, self.sample_rate or self.found_rate or AudioCrop.rate,
                             resample=self.sample_rate is not None)
        return TrainTransform(normalize=self.normalize)

    def found(self, summary: dict[str, Any]) -> BenchOptions:
        """These options for the export `summary` describes: its kind, and audio's rate; --pack
        or --sample-rate for another kind of sample is one line (check_kind; the options of
        FOR_KIND are checked over all sides, check_given)."""
        kind = summary["sample"]["kind"]
        check_kind(kind, summary.get("path"), pack=self.pack, sample_rate=self.sample_rate)
        return dataclasses.replace(self, found_kind=kind,
                                   found_rate=(summary.get("audio") or {}).get("sample_rate"))

    def reading_order(self) -> Order:
        return Order(self.order, self.shuffle_buffer, self.seed, self.block,
                     self.start_epoch)

    def rounds_for(self, index: int) -> int:
        """Rounds of the `index`-th worker count: the verdicts use the first, so it gets the
        most; the others describe how throughput scales."""
        return self.rounds if index == 0 or self.sweep_rounds is None else self.sweep_rounds

    def export_opener(self) -> Opener:
        """How every process opens the export: the given opener, or the adapters (picklable,
        as spawned workers need it)."""
        return self.opener or functools.partial(adapters.open_export,
                                                layout=self.layout or self.found_layout,
                                                image_field=self.image_field,
                                                seq_len=self.seq_len)

    def samples_to_count(self, path: str | Path | Loc) -> int:
        if self.count_samples is not None:
            return self.count_samples
        return REMOTE_MAX_SAMPLES if is_remote(location(path)) else DEFAULT_MAX_SAMPLES

    def config(self, path: str | Path | Loc) -> Config:
        return {"path": str(path), "workers": list(self.workers), "batch_size": self.batch_size,
                "seconds": self.seconds, "rounds": self.rounds,
                "sweep_rounds": self.sweep_rounds,
                "warmup_batches": self.warmup_batches, "step_time_s": self.step_time_s,
                "cold": self.cold, "decoder": self.decoder, "normalize": self.normalize,
                "on_error": self.on_error, "backend": self.backend, "prefetch": self.prefetch,
                "seed": self.seed, "batches": self.batches,
                "count_samples": self.samples_to_count(path),
                "layout": self.layout, "image_field": self.image_field,
                "stall_s": self.stall_s, "max_pixels": self.max_pixels,
                "transform": type(self.pipeline().transform).__name__,
                "pipeline": self.step, "dataset": self.dataset, "order": self.order,
                "shuffle_buffer": self.shuffle_buffer if self.order == SHUFFLE else None,
                "block": self.block if self.order == BLOCK else None,
                "ceiling": self.ceiling, "epochs": self.epochs, "inflight": self.inflight,
                "exact_samples": self.exact_samples,
                "seq_len": self.seq_len if self.found_kind in (TOKENS, TEXT) else None,
                "pack": self.pack,
                "clip_seconds": self.clip_s if self.found_kind == AUDIO else None,
                "sample_rate": (self.sample_rate or self.found_rate)
                if self.found_kind == AUDIO else None,
                "tokenizer": self.tokenizer_spec.describe() if self.tokenizer_spec else None}
