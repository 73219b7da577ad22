"""MP3 clips, written by libsndfile's LAME encoder into exports written by webdataset, datasets
(its Audio feature) and MosaicML Streaming (a bytes column with no ID3 tag to say what it holds):
each clip checked frame by frame and decoded whole by FFmpeg through torchcodec, every frame as
the reference decoder (libsndfile's mpg123, which reads these whole: their Info header says how
long) makes it; a clip cut short is one line, not a shorter clip."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path

import audiolibs
import numpy as np
import pytest
from layouts import assert_one_line_error

from dsbench import adapters
from dsbench.adapters import mp3
from dsbench.cli import main
from dsbench.loader.options import BenchOptions
from dsbench.loader.pipeline import make_decoder, parse_fields
from dsbench.loader.runner import run_benches

KINDS = ("wds-mp3", "hf-audio-mp3", "mds-audio-mp3")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mp3")
    return {k: audiolibs.write(k, root) for k in KINDS}


def _reference(i: int) -> np.ndarray:
    import soundfile as sf

    frames, rate = sf.read(io.BytesIO(audiolibs.encoded_mp3(i)), dtype="float32",
                           always_2d=True)
    assert rate == audiolibs.RATE
    return frames


@pytest.mark.parametrize("kind", KINDS)
def test_every_mp3_clip_is_decoded_whole_frame_for_frame(kind: str,
                                                         exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports[kind])
    decode = make_decoder()
    samples = list(export.read())
    assert len(samples) == audiolibs.SAMPLES
    for raw in samples:
        assert raw.codec == "mp3", kind
        i = (int(parse_fields(raw)["speaker"]) - 1000) // 13  # audiolibs.speaker(i)
        clip = decode(raw)
        want = _reference(i)
        # As long as the clip written, every frame as the other decoder makes it (two float
        # decoders of one stream differ in the last bits).
        assert clip.rate == audiolibs.RATE and clip.frames.shape == want.shape, (kind, i)
        assert clip.frames.shape[0] == len(audiolibs.frames(i))
        assert np.abs(clip.frames - want).max() < 1e-5, (kind, i)


# Four sides, two of them torch's DataLoader with the libraries, 13 s: with the slow tests (CI
# runs them).
@pytest.mark.slow
def test_mp3_exports_are_benchmarked_with_both_readers(exports: dict[str, Path]) -> None:
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=3, clip_s=0.5,
                        exact=False)
    kinds = ("wds-mp3", "hf-audio-mp3")
    each = [dataclasses.replace(opts, backend=b) for _ in kinds for b in ("dsbench", "native")]
    docs = run_benches([exports[k] for k in kinds for _ in (0, 1)], opts, each=each)
    for doc in docs:
        assert doc["export"]["audio"]["codec"] == "mp3"
        assert doc["export"]["audio"]["sample_rate"] == audiolibs.RATE
        assert doc["runs"][0]["samples"] == 12 and doc["runs"][0]["cpu_s_per_sample"] > 0


def _frame_starts(raw: bytes) -> list[int]:
    at, starts = mp3.after_id3(raw), []
    while (found := mp3._header(raw, at)) is not None:
        starts.append(at)
        at += found[0]
    return starts


def _cut(cut: str) -> bytes:
    whole = audiolibs.encoded_mp3(3)
    middle = _frame_starts(whole)[len(_frame_starts(whole)) // 2]
    return {"mid-frame": whole[:middle + 10], "at-a-frame": whole[:middle],
            "not-frames": whole[:middle] + bytes(64) + whole[middle:]}[cut]


@pytest.mark.parametrize(("cut", "needle"), [
    ("mid-frame", "its last frame holds"),
    ("at-a-frame", "frames its header declares"),
    ("not-frames", "is neither a frame nor a tag")])
def test_a_cut_or_corrupt_mp3_is_refused_not_read_as_a_shorter_clip(cut: str,
                                                                     needle: str) -> None:
    # FFmpeg alone decodes the cut ones to shorter clips (measured: 9,263 and 8,687 of 18,831
    # frames) and steps over stray bytes without a word.
    with pytest.raises(ValueError, match=needle):
        mp3.decode(_cut(cut))


def test_a_cut_mp3_in_an_export_is_one_line_naming_its_shard_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import webdataset as wds

    cut, needle, bad = "mid-frame", "its last frame holds", _cut("mid-frame")
    (tmp_path / cut).mkdir()
    with wds.TarWriter(str(tmp_path / cut / "shard-00000.tar")) as w:
        for i in range(6):
            w.write({"__key__": f"{i:06d}", "mp3": bad if i == 3 else audiolibs.encoded_mp3(i)})
    assert main(["bench", str(tmp_path / cut), "--workers", "1", "--rounds", "1",
                 "--seconds", "0.2", "--batch-size", "2", "--no-exact",
                 "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "shard-00000.tar", "000003",
                          needle)


def test_bytes_that_only_start_like_an_mp3_frame_are_not_taken_for_one() -> None:
    # UTF-16 text opens with FF FE, AAC's ADTS frames with FF F1: a frame's sync bits, but no
    # chain of MPEG audio frames.
    assert mp3.looks_like(audiolibs.encoded_mp3(0))
    assert not mp3.looks_like("a transcript".encode("utf-16"))
    assert not mp3.looks_like(bytes([0xFF, 0xF1, 0x50, 0x80]) + bytes(300))


def test_generate_from_mp3_writes_what_ffmpeg_decodes_as_16_bit_flac(
        exports: dict[str, Path], tmp_path: Path) -> None:
    import soundfile as sf

    out = tmp_path / "flac"
    assert main(["generate", "speech", str(out), "--from", str(exports["wds-mp3"])]) == 0
    decode = make_decoder()
    mp3s = list(adapters.open_export(exports["wds-mp3"]).read())
    flacs = list(adapters.open_export(out).read())
    assert [r.codec for r in flacs] == ["flac"] * audiolibs.SAMPLES
    for raw, flac in zip(mp3s, flacs, strict=True):
        frames, rate = sf.read(io.BytesIO(flac.image), dtype="float32", always_2d=True)
        decoded = decode(raw).frames
        # The frames FFmpeg decodes, each to its nearest 16-bit step.
        assert rate == audiolibs.RATE and frames.shape == decoded.shape
        assert np.abs(frames - np.clip(decoded, -1, 1)).max() <= 1 / 32768 + 1e-7


def _id3(size: int) -> bytes:
    """An ID3v2.3 tag of `size` bytes after its header (synchsafe size, one padding frame)."""
    return b"ID3\x03\x00\x00" + bytes((size >> s) & 0x7F for s in (21, 14, 7, 0)) + bytes(size)


@pytest.mark.parametrize("wrapped", ["id3v1", "ape-footer-only", "two-id3-tags"])
def test_tags_and_padding_around_the_frames_are_read_past(wrapped: str) -> None:
    whole = audiolibs.encoded_mp3(2)
    ape_footer = b"APETAGEX" + (1000).to_bytes(4, "little") + (32).to_bytes(4, "little") + \
        bytes(16)
    raw = {"id3v1": whole + b"TAG" + bytes(125),
           "ape-footer-only": whole + ape_footer,  # an APEv1 tag of no items
           "two-id3-tags": _id3(40) + _id3(20) + whole}[wrapped]
    assert mp3.walk(raw).count == mp3.walk(whole).count
    assert np.array_equal(mp3.decode(raw)[0], mp3.decode(whole)[0])


@pytest.mark.parametrize(("damage", "needle"), [
    # FFmpeg fails on both (through torchcodec): said here, before it decodes.
    ("lyrics3", "neither a frame nor a tag"),
    ("zero-padding", "neither a frame nor a tag"),
    # FFmpeg would decode the Info frame as audio there: a clip not the one stored.
    ("id3-then-padding", "no MPEG audio frame where its first should be"),
    ("free-format", "free-format MP3"),
    ("one-frame-of-text", None)])
def test_what_is_not_an_mp3_dsbench_reads_is_said(damage: str, needle: str | None) -> None:
    whole = audiolibs.encoded_mp3(2)
    if damage == "one-frame-of-text":
        # UTF-16 text whose first bytes parse as one whole frame: a frame that does not chain
        # to a second is no MP3.
        text = ("a" + "x" * 102).encode("utf-16")
        assert not mp3.looks_like(text)
        return
    raw = {"lyrics3": whole + b"LYRICSBEGIN" + b"INDsome words" + b"LYRICS200",
           "zero-padding": whole + bytes(500),
           "id3-then-padding": _id3(40) + bytes(300) + whole,
           "free-format": bytes([0xFF, 0xFB, 0x00, 0x44]) + bytes(400)}[damage]
    with pytest.raises(ValueError, match=needle):
        mp3.walk(raw)


def test_a_flac_behind_an_id3_tag_is_read_as_flac() -> None:
    from dsbench.adapters import audio

    flac = _id3(40) + audiolibs.encoded(3, "flac")
    assert not audio.is_mp3(flac)
    assert audio.info(flac)[:2] == ("flac", len(audiolibs.frames(3)))


def test_mp3_without_its_decoder_is_one_line_naming_the_extra_not_a_bad_sample_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import webdataset as wds

    with wds.TarWriter(str(tmp_path / "shard-00000.tar")) as w:
        for i in range(3):
            w.write({"__key__": f"{i:06d}", "mp3": audiolibs.encoded_mp3(i)})
    # torchcodec not installed: its import fails as an absent module's does.
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)
    for command in (["inspect", str(tmp_path)],
                    ["bench", str(tmp_path), "--seconds", "0.2", "--rounds", "1", "--no-exact"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert_one_line_error(err, command[0], "pip install 'dsbench[mp3]'")
        assert "[sample" not in err and "bad samples" not in err
