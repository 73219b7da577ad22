"""Audio exports written by each format's own library, as speech teams write them, and what each
library reads back: the test data of the audio sample kind.

Every export holds SAMPLES clips of 16-bit PCM at RATE Hz (0.4 to 1.2 s; every fifth in
stereo), encoded by libsndfile (soundfile) as FLAC or WAV, with a speaker id and a transcript,
in 3 shards. `frames(i)` is what clip i decodes to, exactly: FLAC and PCM WAV are lossless.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

SAMPLES = 24
PER_SHARD = 8
SHARDS = SAMPLES // PER_SHARD
RATE = 16_000
KINDS = ("wds-flac", "wds-wav", "hf-audio", "hf-hub-audio", "mds-audio", "litdata-audio",
         "lance-audio", "tfrecord-audio")
CODEC = {"wds-wav": "wav"}  # the others hold FLAC


def frames(i: int) -> np.ndarray:
    """Clip i as int16 frames (frames x channels): a tone under noise, seeded per clip."""
    rng = np.random.default_rng([5, i])
    n = int(rng.integers(int(0.4 * RATE), int(1.2 * RATE)))
    t = np.arange(n) / RATE
    tone = 6000 * np.sin(2 * np.pi * (120 + 40 * (i % 7)) * t)
    channels = 2 if i % 5 == 4 else 1
    out = np.stack([tone + rng.normal(0, 40, n) for _ in range(channels)], axis=1)
    return np.clip(out, -32768, 32767).astype(np.int16)


def seconds(i: int) -> float:
    return len(frames(i)) / RATE


def encoded(i: int, codec: str) -> bytes:
    import soundfile as sf

    if codec == "mp3":
        return encoded_mp3(i)
    buf = io.BytesIO()
    # 16-bit PCM in WAV and FLAC (lossless); Ogg is Vorbis (lossy: for the refusals only).
    sf.write(buf, frames(i), RATE, format=codec.upper(),
             subtype=None if codec == "ogg" else "PCM_16")
    return buf.getvalue()


def encoded_mp3(i: int) -> bytes:
    """Clip i as MP3, by libsndfile's LAME encoder: lossy, so read back against what a decoder
    makes of it (libsndfile's own reads it whole, its Info header giving the length). It starts
    with a frame, no ID3 tag."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, frames(i), RATE, format="MP3")
    return buf.getvalue()


def speaker(i: int) -> int:
    return 1000 + 13 * i  # not the index, so that a reader that confuses the two is caught


def transcript(i: int) -> str:
    return f"utterance {i} of speaker {speaker(i)}"


def _per_shard() -> list[range]:
    return [range(k * PER_SHARD, (k + 1) * PER_SHARD) for k in range(SHARDS)]


def write_wds(out: Path, codec: str) -> Path:
    """webdataset's TarWriter: a `.flac` (or `.wav`) member and a `.json` one per sample."""
    import webdataset as wds

    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        with wds.TarWriter(str(out / f"shard-{k:05d}.tar")) as w:
            for i in rows:
                w.write({"__key__": f"{i:06d}", codec: encoded(i, codec),
                         "json": {"speaker": speaker(i), "transcript": transcript(i)}})
    return out


def _hf_dataset(codec: str = "flac") -> Any:
    """`datasets` with an Audio feature (its struct of the file's bytes and a path). The
    encoded bytes are given as they are: `datasets` stores them without re-encoding (the Audio
    feature's cast of a struct)."""
    import datasets

    rows = {"audio": [{"bytes": encoded(i, codec), "path": f"{i:06d}.{codec}"}
                      for i in range(SAMPLES)],
            "speaker": [speaker(i) for i in range(SAMPLES)],
            "transcript": [transcript(i) for i in range(SAMPLES)]}
    return datasets.Dataset.from_dict(rows).cast_column("audio", datasets.Audio())


def write_hf(out: Path, codec: str = "flac") -> Path:
    """Saved to disk (save_to_disk's Arrow shards)."""
    _hf_dataset(codec).save_to_disk(str(out), num_shards=SHARDS)
    return out


def write_hf_hub(out: Path) -> Path:
    import formatlibs

    return formatlibs.hub_parquet(_hf_dataset(), out, SHARDS)


def write_mds(out: Path, codec: str = "flac") -> Path:
    """MDSWriter with the clip as a `bytes` column named audio (MDS has no audio encoding)."""
    from streaming import MDSWriter

    columns = {"audio": "bytes", "speaker": "int", "transcript": "str"}
    size = sum(len(encoded(i, codec)) + 64 for i in range(SAMPLES))
    with MDSWriter(out=str(out), columns=columns, size_limit=size // SHARDS + 4096,
                   progress_bar=False) as w:
        for i in range(SAMPLES):
            w.write({"audio": encoded(i, codec), "speaker": speaker(i),
                     "transcript": transcript(i)})
    return out


# litdata's optimize calls it in a worker process: module-level, so that it pickles.
def _litdata_item(i: int) -> dict[str, Any]:
    return {"audio": encoded(i, "flac"), "speaker": speaker(i), "transcript": transcript(i)}


def write_litdata(out: Path) -> Path:
    """litdata's optimize() of {"audio": FLAC bytes, "speaker", "transcript"} items: with no
    media serializer among them, litdata 0.2.76 stores each chunk's items as rows of an Arrow
    file at the chunk's end."""
    import formatlibs
    import litdata

    with formatlibs.litdata_caches(out.parent / f"{out.name}-cache"):
        litdata.optimize(fn=_litdata_item, inputs=list(range(SAMPLES)), output_dir=str(out),
                         chunk_size=PER_SHARD, num_workers=1, mode="overwrite",
                         start_method="fork")
    return out


def write_lance(out: Path) -> Path:
    """lance.write_dataset of a binary column named audio (the FLAC files' bytes), PER_SHARD
    rows a fragment."""
    import lance
    import pyarrow as pa

    lance.write_dataset(pa.table({
        "audio": pa.array([encoded(i, "flac") for i in range(SAMPLES)], pa.binary()),
        "speaker": pa.array([speaker(i) for i in range(SAMPLES)], pa.int64()),
        "transcript": [transcript(i) for i in range(SAMPLES)]}), str(out),
        max_rows_per_file=PER_SHARD)
    return out


def write_tfrecord(out: Path) -> Path:
    """The tfrecord package's TFRecordWriter: a bytes feature named audio (the FLAC file's
    bytes), the speaker and the transcript, a file per PER_SHARD clips."""
    import tfrecord

    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        writer = tfrecord.TFRecordWriter(str(out / f"part-{k:05d}.tfrecord"))
        for i in rows:
            writer.write({"audio": (encoded(i, "flac"), "byte"), "speaker": (speaker(i), "int"),
                          "transcript": (transcript(i).encode(), "byte")})
        writer.close()
    return out


def write(kind: str, root: Path) -> Path:
    out = root / kind
    if kind.startswith("wds-"):
        return write_wds(out, kind.removeprefix("wds-"))
    if kind == "hf-audio":
        return write_hf(out)
    if kind == "hf-audio-mp3":
        return write_hf(out, "mp3")
    if kind == "mds-audio-mp3":
        return write_mds(out, "mp3")
    if kind == "hf-hub-audio":
        return write_hf_hub(out)
    if kind == "mds-audio":
        return write_mds(out)
    if kind == "litdata-audio":
        return write_litdata(out)
    if kind == "lance-audio":
        return write_lance(out)
    if kind == "tfrecord-audio":
        return write_tfrecord(out)
    raise ValueError(f"unknown kind {kind!r}")


def read_back(kind: str, path: Path) -> list[tuple[np.ndarray, int]]:
    """Each clip as the library reads it back, in its own order, decoded to int16 frames by
    libsndfile: (frames, speaker)."""
    import soundfile as sf

    def pcm(data: bytes) -> np.ndarray:
        out, rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
        assert rate == RATE
        return out

    rows: list[tuple[Any, Any]]
    if kind.startswith("wds-"):
        import webdataset as wds

        codec = kind.removeprefix("wds-")
        shards = [str(p) for p in sorted(path.glob("*.tar"))]
        rows = [(s[codec], json.loads(s["json"])["speaker"])
                for s in wds.WebDataset(shards, shardshuffle=False, empty_check=False)]
    elif kind.startswith("hf-"):
        import datasets

        ds = (datasets.load_from_disk(str(path)) if kind == "hf-audio" else
              datasets.load_dataset("parquet", data_files=sorted(
                  str(p) for p in (path / "data").glob("*.parquet")), split="train"))
        # The stored file's bytes, as the Audio feature keeps them (decoding is torchcodec's).
        ds = ds.cast_column("audio", datasets.Audio(decode=False))
        rows = [(r["audio"]["bytes"], r["speaker"]) for r in ds]
    elif kind == "tfrecord-audio":
        from tfrecord.reader import tfrecord_loader

        rows = [(bytes(r["audio"]), int(r["speaker"][0])) for f in sorted(path.iterdir())
                for r in tfrecord_loader(str(f), None)]
    elif kind == "lance-audio":
        import lance

        table = lance.dataset(str(path)).to_table()
        rows = list(zip(table.column("audio").to_pylist(), table.column("speaker").to_pylist(),
                        strict=True))
    elif kind == "litdata-audio":
        import litdata

        lds = litdata.StreamingDataset(str(path))
        rows = [(r["audio"], r["speaker"]) for r in (lds[i] for i in range(len(lds)))]
    else:
        from streaming import StreamingDataset

        ds = StreamingDataset(local=str(path), shuffle=False, batch_size=1)
        rows = [(r["audio"], r["speaker"]) for r in ds]
    return [(pcm(data), int(who)) for data, who in rows]
