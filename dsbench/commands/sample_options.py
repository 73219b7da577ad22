"""The options that say what a training job makes of a sample, by what the samples carry:
token ids (`--seq-len`, `--pack`), text (`--tokenizer`) and audio (`--clip-seconds`,
`--sample-rate`); bench, compare, gate, advise, job and resume take the ones that apply to them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from dsbench.adapters.base import SEQ_LEN
from dsbench.loader.options import BenchOptions


class Given(argparse.Action):
    """Stores the value and notes that the option was given (in `args.given`): an option for
    one kind of sample, given for an export of another, is then one line (check_kind), where
    its default would have been ignored silently."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.given = (*getattr(namespace, "given", ()), self.option_strings[0])


def given(args: argparse.Namespace) -> tuple[str, ...]:
    """The options for one kind of sample that the command line gave."""
    return tuple(dict.fromkeys(getattr(args, "given", ())))


def add_seq_len_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--seq-len", type=int, default=SEQ_LEN, metavar="N", action=Given,
                   help="token ids per training sequence, for an export of token samples: "
                        "each is cropped to N at a random offset or padded; a token stream "
                        "stored without samples of its own (litdata's TokensLoader) is cut "
                        f"into blocks of N, as its reader's block size (default {SEQ_LEN})")


def add_pack_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--pack", action="store_true",
                   help="token and text samples: lay the documents end to end and cut them "
                        "into sequences of --seq-len ids, no padding and nothing cropped away, "
                        "as pretraining loaders pack them (docs/tokens.md)")


def add_tokenizer_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--tokenizer", default=None, metavar="FILE", action=Given,
                   help="the job's tokenizer for an export of text samples: a Hugging Face "
                        "tokenizers JSON (tokenizer.json); default: a byte-level BPE trained "
                        "on the export's first texts")


def add_clip_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    clip_s = BenchOptions().clip_s
    p.add_argument("--clip-seconds", type=float, default=clip_s, metavar="S", action=Given,
                   help="seconds of audio per training clip, for an export of audio samples: "
                        "each is mixed to mono and cropped to S at a random offset or padded "
                        f"with silence (default {clip_s:g})")
    p.add_argument("--sample-rate", type=int, default=None, metavar="HZ",
                   help="the rate the model takes audio at: each clip is cut at its own rate "
                        "and resampled to HZ by soxr where it differs (default: the export's "
                        "rate, and a clip at another is a bad sample)")
