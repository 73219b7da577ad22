"""generate for audio: a definition's [audio] table makes speech-like clips (FLAC or WAV,
16-bit PCM) written in each layout that stores them, read back frame for frame; `generate
--from` re-lays an audio export a library wrote, copying each clip as stored or transcoding it
without loss to the definition's codec; advise's candidates try both codecs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import audiolibs
import numpy as np
import pytest
from layouts import assert_one_line_error, written_back

from dsbench import adapters
from dsbench.adapters.survey import summarize
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.generate import generate
from dsbench.export.payloads import AUDIO_LAYOUTS, AudioSpec
from dsbench.export.reexport import reexport
from dsbench.export.spec import load_spec, parse_spec
from dsbench.export.synth import make_audio, make_sample
from dsbench.loader.pipeline import parse_fields

DEFINITION: dict[str, Any] = {
    "name": "speech-test", "samples": 12, "shard_samples": 5, "fields_as": "json",
    "audio": {"codec": "flac", "sample_rate": 8000, "seconds": 0.6, "min_seconds": 0.2,
              "max_seconds": 2.0},
    "fields": {"speaker": {"type": "int", "classes": 500}}}


def _spec(layout: str, **audio: Any) -> Any:
    return parse_spec({**DEFINITION, "layout": layout,
                       "audio": {**DEFINITION["audio"], **audio}}, "speech-test.toml")


def pcm(data: bytes) -> tuple[np.ndarray, int]:
    import soundfile as sf

    frames, rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    return frames, rate


@pytest.mark.parametrize("layout", AUDIO_LAYOUTS)
def test_an_audio_definition_is_written_in_each_layout_and_read_back_frame_for_frame(
        layout: str, tmp_path: Path, private_tmp: Path) -> None:
    spec = _spec(layout)
    export, samples = written_back(spec, tmp_path / layout)
    for i, raw in enumerate(samples):
        made = make_sample(spec, 3, i)
        assert raw.codec == "flac"
        got, rate = pcm(raw.image)
        assert rate == 8000 and np.array_equal(got, pcm(made["audio"])[0]), (layout, i)
        assert parse_fields(raw)["speaker"] == made["speaker"]
    s = summarize(export.survey(), tmp_path / layout, export.ignored, export)
    assert s["sample"]["kind"] == "audio" and s["bad_samples"] == 0
    assert s["audio"]["sample_rate"] == 8000


def test_hf_audio_is_datasets_own_audio_feature(tmp_path: Path, private_tmp: Path) -> None:
    import datasets

    spec = _spec("hf")
    generate(spec, tmp_path / "hf", seed=3, jobs=1)
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    assert isinstance(ds.features["audio"], datasets.Audio)
    stored = ds.cast_column("audio", datasets.Audio(decode=False))
    assert [r["audio"]["bytes"] for r in stored] == [make_sample(spec, 3, i)["audio"]
                                                      for i in range(spec.samples)]


def test_clips_follow_the_definitions_lengths_and_flac_stores_them_smaller_than_wav() -> None:
    flac = [make_audio(AudioSpec(), np.random.default_rng([0, i])) for i in range(40)]
    wav = [make_audio(AudioSpec(codec="wav"), np.random.default_rng([0, i])) for i in range(40)]
    seconds = [len(pcm(c)[0]) / 16_000 for c in flac]
    assert min(seconds) >= 0.5 and max(seconds) <= 30.0
    assert 3.4 <= float(np.median(seconds)) <= 4.6  # log-normal around the 4 s asked for
    for f, w in zip(flac, wav, strict=True):
        assert np.array_equal(pcm(f)[0], pcm(w)[0])  # the same samples, both lossless
    # Speech-like audio compresses: FLAC holds it in well under WAV's bytes (about half).
    assert 0.3 < sum(map(len, flac)) / sum(map(len, wav)) < 0.75


@pytest.mark.parametrize("kind,layout,codec", [("wds-flac", "parquet", "flac"),
                                               ("hf-audio", "mds", "wav"),
                                               ("wds-wav", "litdata", "flac")])
def test_generate_from_a_libraries_audio_export_keeps_every_frame_and_the_speaker(
        kind: str, layout: str, codec: str, tmp_path: Path, private_tmp: Path) -> None:
    source = audiolibs.write(kind, tmp_path)
    definition = {**DEFINITION, "layout": layout, "audio": {"codec": codec},
                  "fields": {"speaker": {"type": "int", "classes": 100_000}}}
    spec = parse_spec(definition, "speech-test.toml")
    reexport(spec, tmp_path / "out", str(source), jobs=1)
    samples = list(adapters.open_export(tmp_path / "out").read())
    assert len(samples) == audiolibs.SAMPLES
    for i, raw in enumerate(samples):
        frames, rate = pcm(raw.image)
        assert raw.codec == codec and rate == audiolibs.RATE
        assert np.array_equal(frames, audiolibs.frames(i)), i  # stereo clips stay stereo
        assert parse_fields(raw)["speaker"] == audiolibs.speaker(i)
    if audiolibs.CODEC.get(kind, "flac") == codec:  # the same codec: copied byte for byte
        assert [r.image for r in samples] == [audiolibs.encoded(i, codec)
                                              for i in range(audiolibs.SAMPLES)]


@pytest.mark.parametrize("more,needle", [
    ({"image": {"codec": "jpeg"}}, "one of an image, token ids, an audio clip or text"),
    ({"tokens": {}}, "one of an image, token ids, an audio clip or text"),
    ({"layout": "jsonl"}, "layout: jsonl holds documents' text only"),
    ({"audio": {"codec": "mp3"}}, "audio.codec: 'mp3' is not one of flac, wav"),
    ({"audio": {"sample_rate": 100}}, "audio.sample_rate: 100 is out of range"),
    ({"audio": {"seconds": 0.1, "min_seconds": 0.5}}, "audio.seconds: expected a number in"),
    ({"audio": {"rate": 8000}}, "audio.rate: unknown key"),
    ({"fields": {"audio": {"type": "int"}}}, "'input_ids' or 'audio'")])
def test_a_bad_audio_definition_names_its_key(more: dict[str, Any], needle: str) -> None:
    data = {**DEFINITION, "layout": "mds", **more}
    with pytest.raises(DsbenchError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(data, "speech-test.toml")


def test_generate_from_refuses_a_definition_of_another_kind_in_one_line(
        tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = audiolibs.write("wds-flac", tmp_path)
    for definition in ("parquet", "tokens"):
        assert main(["generate", definition, str(tmp_path / "a"), "--from", str(source)]) == 2
        assert_one_line_error(capsys.readouterr().err, "generate", "carry audio clips",
                              "use a definition with [audio]")
        assert not (tmp_path / "a").exists()


def test_the_shipped_audio_definitions_load() -> None:
    flac, wav = load_spec("speech"), load_spec("speech-wav")
    assert flac.audio is not None and wav.audio is not None
    assert (flac.audio.codec, wav.audio.codec) == ("flac", "wav")
    assert flac.layout in AUDIO_LAYOUTS and wav.layout == flac.layout


def test_an_audio_exports_candidates_try_both_codecs_and_load_back_as_the_same_writer(
        tmp_path: Path, private_tmp: Path) -> None:
    from dsbench.advise import definition, kinds
    from dsbench.advise.fields import found_fields
    from dsbench.export.reexport import first_samples

    source = audiolibs.write("wds-flac", tmp_path)
    export = adapters.open_export(source)
    raws = first_samples(export, 8, str(source))
    cands, skipped = kinds.candidates(found_fields(raws[0], export.layout), raws, "wds", 24,
                                     ("wds", "parquet", "jsonl"), (64_000_000,))
    assert [s.layout for s in skipped] == ["jsonl"]
    # The source's own encoding of its fields (a JSON member) is tried in wds too.
    assert [c.name for c in cands] == ["wds-64MB", "wds-json-64MB", "parquet-64MB",
                                       "wds-64MB-wav", "wds-json-64MB-wav", "parquet-64MB-wav"]
    for c in cands:
        assert c.spec.audio is not None
        path = tmp_path / f"{c.name}.toml"
        path.write_text(definition.to_toml(c.spec, "an audio candidate"))
        assert definition.same_writer(c.spec, load_spec(path)), c.name
    with pytest.raises(DsbenchError, match="--reencode re-encodes images"):
        kinds.candidates(found_fields(raws[0], export.layout), raws, "wds", 24, ("wds",),
                        (64_000_000,), reencode=(85,))


# Writes and measures three sides under valgrind, 40 s: with the slow tests (CI runs them).
@pytest.mark.slow
def test_advise_weighs_flac_against_wav_for_an_audio_export(
        tmp_path: Path, private_tmp: Path) -> None:
    import json

    from dsbench.results import schema

    source = audiolibs.write("wds-flac", tmp_path)
    out = tmp_path / "advice.json"
    assert main(["advise", str(source), "--layouts", "mds", "--shard-sizes", "64MB",
                 "--compressions", "none", "--budget", "8s", "--batch-size", "4",
                 "--clip-seconds", "0.5", "--exact", "--json", str(out),
                 "--write-definition", str(tmp_path / "advised.toml")]) == 0
    doc = json.loads(out.read_text())
    schema.validate(doc, "advice")
    rows = {r["name"]: r for r in doc["table"]}
    assert set(rows) == {doc["table"][0]["name"], "mds-64MB", "mds-64MB-wav"}
    assert rows["mds-64MB-wav"]["definition"]["audio"]["codec"] == "wav"
    # WAV skips FLAC's decode: fewer instructions per sample, counted exactly.
    assert rows["mds-64MB-wav"]["vs_baseline"]["instructions_per_sample"]["ratio"] < 0.9
    if (tmp_path / "advised.toml").exists():
        assert load_spec(tmp_path / "advised.toml").audio is not None


def _wds_clips(out: Path, clips: list[tuple[str, bytes]]) -> Path:
    """A WebDataset shard written by webdataset's TarWriter, one clip a sample."""
    import webdataset as wds

    out.mkdir(parents=True)
    with wds.TarWriter(str(out / "shard-00000.tar")) as w:
        for i, (codec, data) in enumerate(clips):
            w.write({"__key__": f"{i:06d}", codec: data, "cls": str(i).encode()})
    return out


def _parquet_clips(out: Path, clips: list[bytes]) -> Path:
    """A Parquet file written by pyarrow: a binary column named audio, one clip a row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    pq.write_table(pa.table({"audio": pa.array(clips, pa.binary()),
                             "speaker": list(range(len(clips)))}), str(out / "part.parquet"))
    return out


def _encoded(frames: np.ndarray, codec: str, subtype: str) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, frames, 8000, format=codec.upper(), subtype=subtype)
    return buf.getvalue()


def test_a_24_bit_clip_is_transcoded_without_loss_and_a_float_one_at_full_scale(
        tmp_path: Path, private_tmp: Path) -> None:
    rng = np.random.default_rng(0)
    deep = rng.integers(-2**23, 2**23, size=(4000, 1)).astype(np.int32) * 256  # 24 bits
    loud = np.clip(rng.normal(0, 0.6, size=(4000, 1)), -1.4, 1.4).astype(np.float32)
    source = _wds_clips(tmp_path / "src", [("wav", _encoded(deep, "wav", "PCM_24")),
                                           ("wav", _encoded(loud, "wav", "FLOAT"))])
    spec = parse_spec({**DEFINITION, "layout": "parquet", "fields_as": "members",
                       "fields": {}}, "speech-test.toml")
    reexport(spec, tmp_path / "out", str(source), jobs=1)
    import soundfile as sf

    clips = [r.image for r in adapters.open_export(tmp_path / "out").read()]
    got = [sf.read(io.BytesIO(c), dtype="int32", always_2d=True)[0] for c in clips]
    assert np.array_equal(got[0], deep)  # every one of the 24 bits
    assert sf.info(io.BytesIO(clips[0])).subtype == "PCM_24"
    # A float clip is 16-bit PCM, clipped at full scale: not wrapped around, not silence.
    expect = np.clip(loud, -1.0, 1.0)
    assert np.abs(got[1] / 2.0**31 - expect).max() < 2.0 / 2**15


@pytest.mark.parametrize("second,needle", [("flac", "the clip is flac, but wav in the source"),
                                           ("cut", "truncated WAV")])
def test_a_clip_that_cannot_be_copied_as_the_first_is_one_line_and_nothing_is_left(
        second: str, needle: str, tmp_path: Path, private_tmp: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    tone = (3000 * np.sin(np.arange(4000) / 5)).astype(np.int16)[:, None]
    wav = _encoded(tone, "wav", "PCM_16")
    clips = [wav, _encoded(tone, "flac", "PCM_16") if second == "flac" else wav[:-800]]
    source = _parquet_clips(tmp_path / "src", clips)
    (tmp_path / "d.toml").write_text('name = "d"\nlayout = "mds"\n[audio]\ncodec = "flac"\n')
    assert main(["generate", str(tmp_path / "d.toml"), str(tmp_path / "out"), "--from",
                 str(source)]) == 2
    assert_one_line_error(capsys.readouterr().err, "generate", "part.parquet", needle)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("**/*.mds"))
