"""Pipeline stages: decoders, field parsers, the training transform, collate and batch building."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from dsbench.adapters import base
from dsbench.adapters.base import RawSample
from dsbench.errors import DsbenchError, SampleError
from dsbench.export.images import encode, render
from dsbench.export.spec import ImageSpec
from dsbench.loader.pipeline import (
    STAGES,
    BatchBuilder,
    Pipeline,
    StageTimes,
    TrainTransform,
    collate_fields,
    make_decoder,
    parse_fields,
    resized_crop_params,
)


def _pixels(w: int = 64, h: int = 48, seed: int = 1) -> np.ndarray:
    return render(ImageSpec(sizes="fixed", width=w, height=h), np.random.default_rng(seed))


def _raw(image: bytes, codec: str = "jpeg", key: str = "k1", **fields: tuple[object, str]
         ) -> RawSample:
    return RawSample(key, "/data/shard-0.tar", image, codec,
                     {n: v for n, (v, _) in fields.items()},
                     {n: e for n, (_, e) in fields.items()})


def _jpeg(pixels: np.ndarray) -> bytes:
    return encode(pixels, ImageSpec(codec="jpeg", quality=90))


def test_pillow_and_simplejpeg_decode_the_same_jpeg_alike() -> None:
    px = _pixels()
    raw = _raw(_jpeg(px))
    a = np.asarray(make_decoder("pillow")(raw))
    b = np.asarray(make_decoder("simplejpeg")(raw))
    assert a.shape == b.shape == (48, 64, 3)
    # Both are libjpeg-turbo; they may differ by rounding in upsampling, never by much.
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 2.0
    # And the decode is of this image: close to the encoded pixels.
    assert np.abs(a.astype(int) - px.astype(int)).mean() < 8.0


def test_png_and_npy_decode_exactly() -> None:
    px = _pixels()
    png = np.asarray(make_decoder()(_raw(encode(px, ImageSpec(codec="png")), codec="png")))
    npy = make_decoder()(_raw(encode(px, ImageSpec(codec="raw")), codec="raw"))
    assert np.array_equal(png, px)
    assert np.array_equal(npy, px)


def test_grayscale_jpeg_decodes_to_rgb() -> None:
    buf = io.BytesIO()
    Image.fromarray(_pixels()[..., 0]).save(buf, format="JPEG")
    out = np.asarray(make_decoder()(_raw(buf.getvalue())))
    assert out.shape == (48, 64, 3)


@pytest.mark.parametrize("decoder", ["pillow", "simplejpeg"])
def test_truncated_jpeg_is_a_sample_error_naming_file_and_key(decoder: str) -> None:
    data = _jpeg(_pixels())
    with pytest.raises(SampleError) as exc:
        make_decoder(decoder)(_raw(data[: len(data) // 3], key="00000007"))
    msg = str(exc.value)
    assert "/data/shard-0.tar" in msg and "00000007" in msg and "\n" not in msg


def test_unknown_decoder_is_refused() -> None:
    with pytest.raises(DsbenchError, match="unknown decoder"):
        make_decoder("turbo")


def test_fields_are_parsed_by_encoding() -> None:
    emb = np.arange(4, dtype="<f4")
    npy = io.BytesIO()
    np.save(npy, emb)
    doc = json.dumps({"label": 3, "caption": "a cat", "embedding": [0.5, 1.5],
                      "boxes": [{"x": 0.1, "cls": 2}]}).encode()
    raw = _raw(b"", cls=(b"417\n", base.ENC_INT_TEXT), txt=(b"caf\xc3\xa9", base.ENC_TEXT),
               json=(doc, base.ENC_JSON), **{"emb.f32": (emb.tobytes(), base.ENC_F32),
                                             "emb.npy": (npy.getvalue(), base.ENC_NPY)},
               col=([1.0, 2.0, 3.0], base.ENC_VALUE), boxes_col=([{"x": 1}], base.ENC_VALUE),
               opaque=(b"\x00\x01", "unknown"))
    out = parse_fields(raw)
    assert out["cls"] == 417
    assert out["txt"] == "café"
    # A JSON document of fields is spread into its keys; numeric lists become arrays.
    assert out["label"] == 3 and out["caption"] == "a cat"
    assert out["embedding"].dtype == np.float32
    assert np.array_equal(out["embedding"], [0.5, 1.5])
    assert out["boxes"] == [{"x": 0.1, "cls": 2}]
    assert np.array_equal(out["emb.f32"], emb) and np.array_equal(out["emb.npy"], emb)
    assert out["col"].dtype == np.float32 and np.array_equal(out["col"], [1, 2, 3])
    assert out["boxes_col"] == [{"x": 1}]
    assert out["opaque"] == b"\x00\x01"


@pytest.mark.parametrize("value,encoding", [(b"{not json", base.ENC_JSON),
                                            (b"abc", base.ENC_INT_TEXT),
                                            (b"\x00\x01\x02", base.ENC_F32),
                                            (b"\xff\xfe", base.ENC_TEXT)])
def test_bad_field_is_a_sample_error_naming_field_file_and_key(value: bytes, encoding: str
                                                                ) -> None:
    with pytest.raises(SampleError) as exc:
        parse_fields(_raw(b"", key="00000042", meta=(value, encoding)))
    msg = str(exc.value)
    assert "'meta'" in msg and "00000042" in msg and "/data/shard-0.tar" in msg


def test_crop_params_stay_inside_the_image_and_follow_scale_and_ratio() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        w, h = int(rng.integers(20, 800)), int(rng.integers(20, 800))
        top, left, ch, cw = resized_crop_params(w, h, rng)
        assert top >= 0 and top + ch <= h and left >= 0 and left + cw <= w
        assert ch > 0 and cw > 0
    # On a square image every try fits at once: area and ratio lie in the ranges (up to rounding).
    for _ in range(500):
        _, _, ch, cw = resized_crop_params(500, 500, rng)
        assert 0.08 * 0.95 <= ch * cw / 500**2 <= 1.0
        assert 3 / 4 * 0.95 <= cw / ch <= 4 / 3 * 1.05


def test_crop_falls_back_to_a_centred_crop_clamped_to_the_ratio() -> None:
    # 1000 x 10: no crop with an area of >= 8% and a ratio in [3/4, 4/3] fits in 10 rows.
    top, left, ch, cw = resized_crop_params(1000, 10, np.random.default_rng(0))
    assert (ch, cw) == (10, round(10 * 4 / 3))
    assert (top, left) == (0, (1000 - cw) // 2)
    top, left, ch, cw = resized_crop_params(10, 1000, np.random.default_rng(0))
    assert (ch, cw) == (round(10 / (3 / 4)), 10)
    assert (top, left) == ((1000 - ch) // 2, 0)


def test_crop_params_are_seeded() -> None:
    def draws(seed: int) -> list[tuple[int, int, int, int]]:
        rng = np.random.default_rng(seed)
        return [resized_crop_params(500, 375, rng) for _ in range(9)]
    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def test_transform_output_and_flip() -> None:
    px = _pixels(300, 200)
    no_flip = TrainTransform(flip_p=0.0)(px, np.random.default_rng(3))
    flip = TrainTransform(flip_p=1.0)(px, np.random.default_rng(3))
    assert no_flip.shape == (224, 224, 3) and no_flip.dtype == np.uint8
    assert np.array_equal(flip, no_flip[:, ::-1])  # same crop (same draws), mirrored


def test_transform_resizes_the_crop_box() -> None:
    # Left half black, right half white: a crop's mean brightness tells where it was taken.
    px = np.zeros((100, 200, 3), np.uint8)
    px[:, 100:] = 255
    rng = np.random.default_rng(11)
    for _ in range(20):
        state = rng.bit_generator.state
        _, left, _, cw = resized_crop_params(200, 100, rng)
        rng.bit_generator.state = state
        out = TrainTransform(flip_p=0.0)(px, rng)
        white = max(0, left + cw - max(left, 100)) / cw
        assert abs(out.mean() / 255 - white) < 0.05


def test_normalize_is_mean_std_in_float32() -> None:
    px = np.full((64, 64, 3), 200, np.uint8)
    t = TrainTransform(normalize=True)
    out = t(px, np.random.default_rng(0))
    assert out.dtype == np.float32 and out.shape == t.out_shape
    want = (200 / 255 - np.array(t.mean)) / np.array(t.std)
    assert np.allclose(out[0, 0], want, atol=1e-5)


def test_collate_stacks_arrays_and_numbers_and_keeps_the_rest() -> None:
    items = [{"label": i, "w": float(i), "emb": np.full(3, i, np.float32), "cap": f"c{i}",
              "boxes": [{"x": i}] * i} for i in range(4)]
    out = collate_fields(items)
    assert out["label"].dtype == np.int64 and list(out["label"]) == [0, 1, 2, 3]
    assert out["w"].dtype == np.float64
    assert out["emb"].shape == (4, 3) and out["emb"].dtype == np.float32
    assert out["cap"] == ["c0", "c1", "c2", "c3"]
    assert out["boxes"][2] == [{"x": 2}, {"x": 2}]


def _stream(samples: list[RawSample]) -> Iterator[RawSample]:
    while True:
        yield from samples


def test_batch_builder_fills_whole_batches_and_times_every_stage() -> None:
    samples = [_raw(_jpeg(_pixels(seed=i)), key=f"{i:08d}",
                    cls=(str(i).encode(), base.ENC_INT_TEXT)) for i in range(3)]
    b = BatchBuilder(Pipeline(), lambda skip: _stream(samples), np.random.default_rng(0))
    images = np.zeros((5, 224, 224, 3), np.uint8)
    times = StageTimes()
    keys, fields = b.build(images, times)
    assert keys == ["00000000", "00000001", "00000002", "00000000", "00000001"]
    assert list(fields["cls"]) == [0, 1, 2, 0, 1]
    assert images.reshape(5, -1).max(axis=1).min() > 0  # every row written
    assert all(t > 0 for t in times.seconds), times.as_dict()
    assert list(times.as_dict()) == list(STAGES)


def test_batch_builder_skips_or_raises_on_a_bad_sample() -> None:
    good = [_raw(_jpeg(_pixels(seed=i)), key=f"g{i}") for i in range(3)]
    bad = _raw(b"\xff\xd8 not a jpeg", key="bad")
    images = np.zeros((6, 224, 224, 3), np.uint8)
    skip = BatchBuilder(Pipeline(on_error="skip"), lambda s: _stream([*good[:2], bad, good[2]]),
                        np.random.default_rng(0))
    keys, _ = skip.build(images, StageTimes())
    assert "bad" not in keys and len(keys) == 6
    assert [e.key for e in skip.skipped] == ["bad", "bad"]
    strict = BatchBuilder(Pipeline(), lambda s: _stream([good[0], bad]),
                          np.random.default_rng(0))
    with pytest.raises(SampleError, match="bad"):
        strict.build(images, StageTimes())


def test_stage_clock_is_cpu_not_wall() -> None:
    class Sleepy(TrainTransform):
        def __call__(self, pixels: object, rng: np.random.Generator) -> np.ndarray:
            time.sleep(0.02)  # waiting is not CPU: the transform stage must not count it
            return np.zeros(self.out_shape, np.uint8)

    samples = [_raw(_jpeg(_pixels()), key="a")]
    b = BatchBuilder(Pipeline(transform=Sleepy()), lambda s: _stream(samples),
                     np.random.default_rng(0))
    times = StageTimes()
    b.build(np.zeros((3, 224, 224, 3), np.uint8), times)
    assert times.as_dict()["transform"] < 0.01


def test_pipeline_refuses_unknown_policy() -> None:
    with pytest.raises(DsbenchError, match="error policy"):
        Pipeline(on_error="ignore")
