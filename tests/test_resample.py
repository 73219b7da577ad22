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
    # Its 0.25 s resampled, then silence at 16 kHz: exactly zero, where resampling the padding
    # too would leave the filter's ringing past the clip's end.
    assert np.abs(out[:3900]).max() > 0.4 and not out[4000:].any()


def test_a_clip_at_a_rate_past_any_recorders_is_a_bad_sample() -> None:
    with pytest.raises(BadSample, match="past the 384000 Hz resampled"):
        AudioCrop(seconds=1.0, rate=16_000, resample=True)(tone(50_000_000, 0.001, 440.0),
                                                           np.random.default_rng(0))


def test_without_a_rate_to_resample_to_a_clip_at_another_rate_is_a_bad_sample() -> None:
    with pytest.raises(BadSample, match="--sample-rate resamples them"):
        AudioCrop(seconds=0.5, rate=16_000)(tone(44_100, 1.0, 440.0), np.random.default_rng(0))


def _export(root: Path, rate: int, name: str, samples: int) -> Path:
    spec = parse_spec({"name": name, "layout": "wds", "samples": samples,
                       "shard_samples": samples,
                       "audio": {"sample_rate": rate, "seconds": 1.0, "max_seconds": 2.0}},
                      f"{name}.toml")
    generate(spec, root / name, seed=0, jobs=1)
    return root / name


def test_bench_resamples_clips_at_other_rates_in_its_workers(
        tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One export of clips at 44.1 kHz (its common rate) and at 48 kHz: without --sample-rate
    # a 48 kHz clip is a bad sample; with it, every clip is resampled to 16 kHz.
    hifi = _export(tmp_path, 44_100, "hifi", 8)
    (hifi / "shard-000000.tar").rename(hifi / "a.tar")
    (hifi / "b.tar").write_bytes((_export(tmp_path, 48_000, "dat", 4) / "shard-000000.tar")
                                 .read_bytes())
    out = tmp_path / "bench.json"
    quick = ["--workers", "1", "--rounds", "1", "--seconds", "0.3", "--batch-size", "4",
             "--no-exact", "--clip-seconds", "0.5"]
    assert main(["bench", str(hifi), *quick]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "b.tar", "audio at 48000 Hz")
    assert main(["bench", str(hifi), *quick, "--sample-rate", "16000", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["sample_rate"] == 16_000
    assert doc["export"]["audio"]["sample_rate"] == 44_100
    # (exit 0 under the default --on-error raise: no clip was a bad sample)
    assert doc["runs"][0]["samples"] > 0
    assert "44,100 Hz resampled to 16,000 Hz" in capsys.readouterr().out
    assert main(["bench", str(hifi), "--sample-rate", "100"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--sample-rate must be a whole "
                          "number of Hz in [1000, 384000], got 100")


def test_clips_made_at_two_rates_are_not_compared(tmp_path: Path, private_tmp: Path) -> None:
    from dsbench.analysis.compare import not_comparable
    from dsbench.loader.options import BenchOptions
    from dsbench.loader.runner import run_benches

    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, seconds=0.2, clip_s=0.5,
                        exact=False)
    a, b = run_benches([_export(tmp_path, 44_100, "a", 4), _export(tmp_path, 16_000, "b", 4)],
                       opts)
    assert any("sample_rate differs: 44100 vs 16000 (--sample-rate HZ resamples both" in r
               for r in not_comparable(a, b))
