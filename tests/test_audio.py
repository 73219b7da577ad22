"""Samples of audio: exports written by each library itself (tests/audiolibs.py) are inspected,
read frame for frame as written, benchmarked with dsbench's reader and the library's own, and a
planted regression (WAV where the export held FLAC) is found in the read and decode stages."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import audiolibs
import numpy as np
import pytest
from layouts import assert_one_line_error

from dsbench import adapters
from dsbench.adapters.audio import Clip
from dsbench.adapters.survey import summarize
from dsbench.cli import main
from dsbench.loader.decode import make_decoder
from dsbench.loader.options import BenchOptions
from dsbench.loader.pipeline import AudioCrop, parse_fields
from dsbench.loader.runner import run_benches
from dsbench.loader.transforms import BadSample
from dsbench.model.cluster import extrapolate
from dsbench.model.costs import Distribution
from dsbench.model.node import ClusterSpec
from dsbench.report.bench import render as render_bench
from dsbench.report.extrapolation import render
from dsbench.results import schema

FIELD = {"hf-audio": "audio", "hf-hub-audio": "audio", "mds-audio": "audio",
         "litdata-audio": "audio", "lance-audio": "audio", "tfrecord-audio": "audio"}  # wds: none


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("audio")
    return {k: audiolibs.write(k, root) for k in audiolibs.KINDS}


@pytest.mark.parametrize("kind", audiolibs.KINDS)
def test_every_frame_is_read_as_written(kind: str, exports: dict[str, Path]) -> None:
    decode = make_decoder()
    samples = list(adapters.open_export(exports[kind]).read())
    assert len(samples) == audiolibs.SAMPLES
    for i, raw in enumerate(samples):
        assert raw.codec == audiolibs.CODEC.get(kind, "flac")
        clip = decode(raw)
        assert isinstance(clip, Clip) and clip.rate == audiolibs.RATE
        # 16-bit PCM decoded to float32 is the integer over 32768: every frame, exactly.
        assert clip.frames.dtype == np.float32
        assert np.array_equal(clip.frames * 32768, audiolibs.frames(i)), (kind, i)
        assert parse_fields(raw)["speaker"] == audiolibs.speaker(i)
    # What the library itself reads back is what was written, in the same order.
    theirs = audiolibs.read_back(kind, exports[kind])
    assert len(theirs) == audiolibs.SAMPLES
    assert [who for _, who in theirs] == [audiolibs.speaker(i) for i in range(len(theirs))]
    assert all(np.array_equal(pcm, audiolibs.frames(i)) for i, (pcm, _) in enumerate(theirs))


@pytest.mark.parametrize("kind", audiolibs.KINDS)
def test_inspect_says_the_samples_carry_audio(kind: str, exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports[kind])
    s = summarize(export.survey(), exports[kind], export.ignored, export)
    assert s["sample"] == {"kind": "audio", "field": FIELD.get(kind)}
    found = s["audio"]
    assert found["codec"] == audiolibs.CODEC.get(kind, "flac")
    assert found["count_checked"] == audiolibs.SAMPLES
    assert found["sample_rate"] == audiolibs.RATE and found["sample_rates"] == [audiolibs.RATE]
    assert found["channels"] == [1, 2]
    lengths = [audiolibs.seconds(i) for i in range(audiolibs.SAMPLES)]
    assert found["seconds_per_sample"]["min"] == pytest.approx(min(lengths))
    assert found["seconds_per_sample"]["max"] == pytest.approx(max(lengths))
    assert found["mean_seconds_per_sample"] == pytest.approx(np.mean(lengths))
    assert s["image"]["count_checked"] == 0 and s["bad_samples"] == 0


def test_a_clip_is_mixed_to_mono_and_cropped_at_a_random_offset_or_padded() -> None:
    crop = AudioCrop(seconds=0.001, rate=8000)  # 8 frames
    rng = np.random.default_rng(0)
    ramp = np.arange(30, dtype=np.float32)
    stereo = Clip(np.stack([ramp, ramp + 2], axis=1), 8000)  # mono: ramp + 1
    starts = set()
    for _ in range(20):
        out = crop(stereo, rng)
        assert out.dtype == np.float32 and out.shape == (8,)
        assert np.array_equal(out, np.arange(out[0], out[0] + 8, dtype=np.float32))
        starts.add(int(out[0]))
    assert len(starts) > 1 and min(starts) >= 1 and max(starts) <= 23
    short = crop(Clip(np.array([[0.5], [0.25]], dtype=np.float32), 8000), rng)
    assert short.tolist() == [0.5, 0.25, 0, 0, 0, 0, 0, 0]
    with pytest.raises(BadSample, match="22050 Hz"):
        crop(Clip(np.zeros((40, 1), dtype=np.float32), 22050), rng)



def _ffmpeg() -> str | None:
    """Why torchcodec cannot decode here, or None: it loads FFmpeg's libraries, which come
    from the system, not from pip."""
    try:
        from torchcodec.decoders import AudioDecoder  # noqa: F401
    except Exception as exc:  # its loader raises RuntimeError or OSError, by version
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


# Three layouts in the suite, the other four with the slow tests (CI runs both): 10 s a group.
@pytest.mark.parametrize("kinds", [
    pytest.param(("wds-flac", "mds-audio", "litdata-audio"), id="wds-mds-litdata"),
    pytest.param(("hf-audio", "hf-hub-audio", "lance-audio", "tfrecord-audio"),
                 id="the-others", marks=pytest.mark.slow)])
def test_audio_exports_are_benchmarked_with_both_readers(kinds: tuple[str, ...],
                                                         exports: dict[str, Path]) -> None:
    # Each library's export read by dsbench's reader and by the library's (which for the Audio
    # feature decodes with torchcodec, in the decode stage), all in one interleaved run.
    # Without FFmpeg (.ci/run installs it, as it does valgrind) the rest runs, and the test
    # then says what it left out.
    why = _ffmpeg()
    sides = [(k, b) for k in kinds for b in ("dsbench", "native")
             if why is None or not (k.startswith("hf-") and b == "native")]
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=3, warmup_batches=1,
                        clip_s=0.5, exact=False)
    docs = run_benches([exports[k] for k, _ in sides], opts,
                       each=[dataclasses.replace(opts, backend=b) for _, b in sides])
    for doc, (kind, _) in zip(docs, sides, strict=True):
        schema.validate(doc, "bench")
        config = doc["config"]
        assert config["transform"] == "AudioCrop" and config["clip_seconds"] == 0.5
        assert config["sample_rate"] == audiolibs.RATE and config["seq_len"] is None
        (run,) = doc["runs"]
        assert run["samples"] == 12 and run["cpu_s_per_sample"] > 0, kind
        assert run["stages"]["decode"] > 0, kind
        said = " ".join(render_bench(doc).split())
        assert "Audio samples (flac, 16,000 Hz, 1/2 channel(s)): clips of 0.500 s, mono" \
            in said
        assert "a sample longer than 0.500 s is cropped; per second of audio stored:" in said
    assert [d["config"]["backend"] for d in docs] == [b for _, b in sides]
    assert all(d["reader"]["library"] for d in docs if d["config"]["backend"] == "native")
    # Carried to a job, the rates are said in seconds of audio too: 8 clips of 0.5 s per GPU.
    cluster = ClusterSpec(nodes=2, gpus_per_node=8, batch_size=8,
                          compute=Distribution.parse("0.2"))
    model = extrapolate(docs[0], cluster, np.random.default_rng(0), steps=200, scaling=[1])
    schema.validate(model, "extrapolation")
    clips = model["audio"]
    assert clips["clip_seconds"] == 0.5 and clips["per_step_per_gpu"] == 8 * 0.5
    assert clips["demand_per_s_per_node"] == pytest.approx(0.5 * 8 * 8 / 0.2)
    assert clips["supply_per_s_per_node"] == pytest.approx(
        0.5 * model["supply_samples_per_s_per_node"])
    assert model["tokens"] is None and "in audio: supply" in render(model)
    if why is not None:
        pytest.skip(f"datasets' own reader of the Audio feature not run: torchcodec cannot "
                    f"load FFmpeg here (apt-get install ffmpeg): {why}")


# Counted under valgrind on both sides, 13 to 19 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_wav_in_place_of_flac_costs_the_read_and_the_decode(exports: dict[str, Path],
                                                            tmp_path: Path) -> None:
    # The planted regression: the same clips re-exported as WAV. Counted exactly, the read
    # stage reads (and copies) the larger files, and the decode stage does other work: PCM
    # copied where FLAC was decompressed.
    out = tmp_path / "cmp.json"
    assert main(["compare", str(exports["wds-flac"]), str(exports["wds-wav"]), "--workers",
                 "1", "--rounds", "1", "--seconds", "0.1", "--batch-size", "4",
                 "--clip-seconds", "0.5", "--exact", "--exact-samples", "8", "--no-cluster",
                 "--json", str(out)]) in (0, 1)
    run = json.loads(out.read_text())["runs"][0]
    metric = {m["metric"]: m for m in run["metrics"]}
    grew = metric["bytes_per_sample"]
    assert grew["cand"] > 1.5 * grew["base"]  # 16-bit PCM against FLAC of a tone under noise
    counted = {a["what"].removesuffix(" instructions"): a for a in run["attribution"]
               if a["unit"] == "instructions/sample"}
    assert counted["read"]["delta"] > 0 and counted["read"]["distinguishable"], counted
    assert counted["decode"]["delta"] < 0 and counted["decode"]["distinguishable"], counted
    # The clips themselves are cropped alike on both sides.
    assert abs(counted["transform"]["delta"]) < 0.1 * abs(counted["decode"]["delta"]), counted


def _with_bad_clip(out: Path, ext: str, bad: bytes) -> Path:
    """Six clips in a shard, the fourth `bad` (MP3's: tests/test_mp3.py)."""
    import webdataset as wds

    out.mkdir()
    with wds.TarWriter(str(out / "shard-00000.tar")) as w:
        for i in range(6):
            good = audiolibs.encoded(i, ext)
            w.write({"__key__": f"{i:06d}", ext: bad if i == 3 else good,
                     "json": {"speaker": audiolibs.speaker(i)}})
    return out


def _declaring(frames: int) -> bytes:
    """Clip 3 as FLAC, its STREAMINFO's 36-bit sample count set to `frames`."""
    data = bytearray(audiolibs.encoded(3, "flac"))
    at = 8 + 13  # "fLaC", the block header, then 13 bytes before the count's top 4 bits
    data[at] = (data[at] & 0xF0) | (frames >> 32)
    data[at + 1:at + 5] = (frames & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(data)


@pytest.mark.parametrize("cut", ["flac-truncated", "flac-not-audio", "flac-declares-too-much",
                                 "ogg-truncated"])
def test_a_bad_clip_is_one_line_naming_its_shard_and_key(tmp_path: Path, cut: str,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    ext = cut.split("-")[0]
    whole = audiolibs.encoded(3, ext)
    bad = {"flac-truncated": whole[:len(whole) // 2], "flac-not-audio": b"fLaC" + bytes(200),
           # A header that declares 2^36 - 1 frames: refused, not 256 GiB allocated.
           "flac-declares-too-much": _declaring((1 << 36) - 1),
           # Cut at a page's end: libsndfile would read the pages before it as the clip.
           "ogg-truncated": whole[:whole.rfind(b"OggS")]}[cut]
    export = _with_bad_clip(tmp_path / cut, ext, bad)
    assert main(["bench", str(export), "--workers", "1", "--rounds", "1", "--seconds", "0.2",
                 "--batch-size", "2", "--no-exact", "--count-samples", "0"]) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err, "bench", "shard-00000.tar", "000003", f"{ext} audio")


def test_a_truncated_wav_is_one_line_not_a_shorter_clip(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    # libsndfile reads a WAV cut short as a shorter clip without a word: dsbench checks the
    # data chunk against its header.
    import webdataset as wds

    whole = audiolibs.encoded(2, "wav")
    (tmp_path / "cut").mkdir()
    with wds.TarWriter(str(tmp_path / "cut" / "shard-00000.tar")) as w:
        for i in range(4):
            w.write({"__key__": f"{i:06d}",
                     "wav": whole[:len(whole) - 1000] if i == 2 else audiolibs.encoded(i, "wav")})
    assert main(["inspect", str(tmp_path / "cut")]) == 2  # its report, then one line
    said = capsys.readouterr().out
    assert "truncated WAV: its data chunk declares" in said
    assert main(["bench", str(tmp_path / "cut"), "--workers", "1", "--rounds", "1",
                 "--seconds", "0.2", "--batch-size", "2", "--no-exact",
                 "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "shard-00000.tar", "000002",
                          "truncated WAV")


def test_a_clip_among_images_is_one_line_not_a_traceback(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    # An MDS bytes column named image with one FLAC clip among the JPEGs: the clip decodes, and
    # the image transform cannot take it.
    from streaming import MDSWriter

    from dsbench.export.images import make_image
    from dsbench.export.spec import ImageSpec

    spec = ImageSpec(sizes="fixed", width=32, height=24)
    with MDSWriter(out=str(tmp_path / "mixed"), columns={"image": "bytes", "label": "int"},
                   progress_bar=False) as w:
        for i in range(6):
            w.write({"image": audiolibs.encoded(i, "flac") if i == 2 else
                     make_image(spec, np.random.default_rng([0, i])), "label": i})
    assert main(["bench", str(tmp_path / "mixed"), "--workers", "1", "--rounds", "1",
                 "--seconds", "0.2", "--batch-size", "2", "--no-exact",
                 "--count-samples", "0"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "shard.00000.mds", "[sample 2]",
                          "flac audio where the export's samples are images")


# Two ranks launched by torch's launcher, 7 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_a_job_reads_audio_clips_on_every_rank(exports: dict[str, Path], tmp_path: Path
                                               ) -> None:
    # Two ranks, each cutting its share's FLAC clips to 0.5 s at the export's rate: an image
    # pipeline would fail on the first clip.
    from dsbench.job import result

    out = tmp_path / "job.json"
    assert main(["job", str(exports["mds-audio"]), "--ranks", "2", "--workers", "1",
                 "--gpu-batch", "2", "--compute", "0.005", "--steps", "12",
                 "--clip-seconds", "0.5", "--json", str(out)]) == 0
    doc = result.read(out)
    options = doc["config"]["options"]
    assert (options["kind"], options["rate"], options["clip_s"]) == ("audio", audiolibs.RATE, 0.5)
    assert doc["ranks"] == 2 and all(len(r["step_s"]) == 12 for r in doc["per_rank"])


def test_a_restart_of_an_audio_loader_is_audited(exports: dict[str, Path]) -> None:
    # dsbench resume cutting clips of 0.5 s at the export's rate in its workers: without
    # state the first K batches come again; with the loader's state, nothing.
    from dsbench.results import schema
    from dsbench.resume.measure import ResumeOptions, run_resume

    k, batch = 2, 2
    doc = run_resume(str(exports["mds-audio"]), ResumeOptions(
        restart_at=k, policies=("none", "stateful"), workers=1, batch_size=batch,
        clip_s=0.5))
    schema.validate(doc, "resume")
    by = {p["policy"]: p["total"] for p in doc["policies"]}
    assert (by["none"]["replayed"], by["none"]["skipped"]) == (k * batch, 0)
    assert (by["stateful"]["replayed"], by["stateful"]["skipped"]) == (0, 0)


def test_a_litdata_bytes_leaf_named_for_audio_is_read_as_clips_when_named_too(
        exports: dict[str, Path]) -> None:
    export = adapters.open_export(exports["litdata-audio"], image_field="audio")
    s = summarize(export.survey(), exports["litdata-audio"], export.ignored, export)
    assert s["sample"] == {"kind": "audio", "field": "audio"} and s["bad_samples"] == 0
    assert s["audio"]["count_checked"] == audiolibs.SAMPLES
