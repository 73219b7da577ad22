"""--sample-rate: audio clips cut at their own rate and resampled by soxr to the rate the model
takes, in the workers; without it a clip at another rate than the export's is a bad sample."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from layouts import assert_one_line_error

from dsbench.adapters.audio import Clip
from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.spec import parse_spec
from dsbench.loader.transforms import AudioCrop, BadSample


def tone(rate: int, seconds: float, hz: float, channels: int = 1) -> Clip:
    t = np.arange(round(rate * seconds)) / rate
    frames = np.repeat((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)[:, None],
                       channels, axis=1)
    return Clip(frames, rate)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[int(np.argmax(spectrum))])


@pytest.mark.parametrize("source", [44_100, 48_000, 8_000])
def test_a_clip_is_resampled_to_the_rate_asked_with_its_pitch_and_level(source: int) -> None:
    crop = AudioCrop(seconds=0.5, rate=16_000, resample=True)
    out = crop(tone(source, 2.0, 1000.0, channels=2), np.random.default_rng(0))
    assert out.dtype == np.float32 and out.shape == (8000,)
    assert peak_hz(out, 16_000) == pytest.approx(1000.0, abs=4.0)  # the same tone
    assert float(np.abs(out[400:-400]).max()) == pytest.approx(0.5, rel=0.03)  # its level


def test_a_short_clip_is_resampled_then_padded_with_silence() -> None:
    out = AudioCrop(seconds=1.0, rate=16_000, resample=True)(tone(48_000, 0.25, 440.0),
                                                             np.random.default_rng(0))
    assert out.shape == (16_000,)
    # The resampler's filter rings a little past the clip's end: silence within 1e-3.
    assert np.abs(out[:3900]).max() > 0.4 and np.abs(out[4100:]).max() < 1e-3


def test_without_a_rate_to_resample_to_a_clip_at_another_rate_is_a_bad_sample() -> None:
    with pytest.raises(BadSample, match="--sample-rate resamples them"):
        AudioCrop(seconds=0.5, rate=16_000)(tone(44_100, 1.0, 440.0), np.random.default_rng(0))


def test_bench_resamples_an_export_at_another_rate_in_its_workers(
        tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = parse_spec({"name": "hifi", "layout": "wds", "samples": 16, "shard_samples": 8,
                       "audio": {"sample_rate": 44_100, "seconds": 1.0, "max_seconds": 2.0}},
                      "hifi.toml")
    generate(spec, tmp_path / "hifi", seed=0, jobs=1)
    out = tmp_path / "bench.json"
    assert main(["bench", str(tmp_path / "hifi"), "--sample-rate", "16000", "--clip-seconds",
                 "0.5", "--workers", "1", "--rounds", "1", "--seconds", "0.3", "--batch-size",
                 "4", "--no-exact", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["sample_rate"] == 16_000
    assert doc["export"]["audio"]["sample_rate"] == 44_100
    # (exit 0 under the default --on-error raise: no clip was a bad sample)
    assert doc["runs"][0]["samples"] > 0
    assert "44,100 Hz resampled to 16,000 Hz" in capsys.readouterr().out
    assert main(["bench", str(tmp_path / "hifi"), "--sample-rate", "100"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--sample-rate must be a whole "
                          "number of Hz in [1000, 384000], got 100")
