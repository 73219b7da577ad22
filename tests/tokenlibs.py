"""Token exports written by each format's own library, as LLM-pretraining users write them, and
what each library reads back: the test data of the token-array sample kind (and a text kind).

Every export holds SAMPLES documents: a 1-d array of token ids (20..300 long, ids Zipf-like over
a 50_000 vocabulary, uint16 by default) and a doc id, in 3 shards so that workers have units to
split. `read_back` reads an export back through the library, in its own order; `expected` says
what that read must equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import formatlibs
import numpy as np

SAMPLES = 120
PER_SHARD = 40
SHARDS = SAMPLES // PER_SHARD
VOCAB = 50_000
MIN_LEN, MAX_LEN = 20, 300
# The context a TokensLoader reader cuts the token stream into (litdata's `block_size`).
BLOCK = 64
KINDS = ("mds-tokens", "mds-tokens-json", "litdata-tokens", "litdata-tokens-pytree",
         "hf-tokens", "parquet-tokens", "text-jsonl", "megatron-tokens", "mds-text", "hf-text",
         "parquet-text", "wds-tokens", "wds-text", "litdata-text", "lance-tokens", "lance-text",
         "tfrecord-tokens", "tfrecord-text")
# The member a WebDataset sample's payload is, as webdataset's own encoders name them.
WDS_MEMBER = {"wds-tokens": "input_ids.npy", "wds-text": "txt"}

# Zipf's law over the vocabulary (p(rank k) ∝ 1/k^1.1), as a CDF to sample by inverse transform:
# a few ids are very common, most are rare, as in real tokenized text.
_CDF = np.cumsum(1.0 / np.arange(1, VOCAB + 1) ** 1.1)
_CDF /= _CDF[-1]
_TEXT = ("the of and to a in is that for it as was with be by on not he this are or his from at"
         " which but have an they you were her one all we can their there been has more if will"
         " would model data train loader shard token batch stream format reader sample")
_WORDS = _TEXT.split()


def length(i: int) -> int:
    """len(tokens(i)), without drawing the tokens (the same seed's first draw)."""
    return int(np.random.default_rng([7, i]).integers(MIN_LEN, MAX_LEN + 1))


def tokens(i: int, dtype: str = "uint16") -> np.ndarray:
    """Sample i's token ids (seeded per sample, so any subset is written identically)."""
    rng = np.random.default_rng([7, i])
    n = int(rng.integers(MIN_LEN, MAX_LEN + 1))
    ids = np.minimum(np.searchsorted(_CDF, rng.random(n)), VOCAB - 1)
    return ids.astype(dtype)


def doc_id(i: int) -> int:
    # Not the sample index, so that a reader that confuses the two is caught.
    return 100_000 + 37 * i


def text(i: int) -> str:
    """English-like words (Zipf-ish over a small word list), in sentences."""
    rng = np.random.default_rng([11, i])
    n = int(rng.integers(MIN_LEN, MAX_LEN + 1))
    weights = 1.0 / np.arange(1, len(_WORDS) + 1)
    words = list(rng.choice(_WORDS, n, p=weights / weights.sum()))
    out, start = [], 0
    while start < n:  # sentences of 5..15 words
        end = min(n, start + int(rng.integers(5, 16)))
        sentence = " ".join(words[start:end])
        out.append(sentence[0].upper() + sentence[1:] + ".")
        start = end
    return " ".join(out)


def meta(i: int) -> dict[str, Any]:
    return {"doc_id": doc_id(i), "source": f"web/{i % 3}"}


def _per_shard() -> list[range]:
    return [range(k * PER_SHARD, (k + 1) * PER_SHARD) for k in range(SHARDS)]


def _mds_sample(i: int, dtype: str, with_json: bool) -> dict[str, Any]:
    sample: dict[str, Any] = {"input_ids": tokens(i, dtype), "doc_id": doc_id(i)}
    if with_json:
        sample["meta"] = meta(i)
    return sample


def write_mds(out: Path, dtype: str, with_json: bool) -> Path:
    """MDSWriter with a variable-shape `ndarray:<dtype>` column (each sample stores its shape)."""
    from streaming import MDSWriter
    from streaming.base.format.mds.encodings import mds_encode

    columns = {"input_ids": f"ndarray:{dtype}", "doc_id": "int"}
    if with_json:
        columns["meta"] = "json"
    # Shards are cut by bytes (each sample: its encoded columns, a uint32 size per variable-size
    # column and a uint32 offset). A third of the data plus the largest sample and room for the
    # shard's header always makes exactly 3 shards of about PER_SHARD samples.
    def size(sample: dict[str, Any]) -> int:  # doc_id ("int") is the one fixed-size column
        return 4 + sum(len(mds_encode(columns[k], v)) + 4 * (k != "doc_id")
                       for k, v in sample.items())

    sizes = [size(_mds_sample(i, dtype, with_json)) for i in range(SAMPLES)]
    size_limit = sum(sizes) // SHARDS + max(sizes) + 512
    with MDSWriter(out=str(out), columns=columns, size_limit=size_limit,
                   progress_bar=False) as w:
        for i in range(SAMPLES):
            w.write(_mds_sample(i, dtype, with_json))
    return out


# litdata's optimize calls these in worker processes: module-level, so that they pickle.
def _litdata_tokens(i: int, dtype: str = "uint16") -> Any:
    import torch

    # A 1-d tensor per document, as litdata's LLM-pretraining examples return (tokenizer.encode).
    return torch.from_numpy(tokens(i, dtype))


def _litdata_pytree(i: int, dtype: str = "uint16") -> dict[str, Any]:
    return {"input_ids": tokens(i, dtype), "doc_id": doc_id(i)}


def _litdata_text(i: int) -> dict[str, Any]:
    return {"text": text(i), "doc_id": doc_id(i)}


def write_litdata(out: Path, dtype: str, loader: bool) -> Path:
    """optimize(): with item_loader=TokensLoader() every chunk is its documents' tokens laid end
    to end, and chunk_size counts tokens; without, one pytree item per document, chunk_size
    counting documents."""
    from functools import partial

    import litdata
    from litdata.streaming.item_loader import TokensLoader

    inputs = list(range(SAMPLES))
    # Documents are never split across chunks (a chunk ends before the document that would
    # overflow it), so a third of the tokens plus the longest document makes 3 chunks.
    total = sum(length(i) for i in inputs)
    with formatlibs.litdata_caches(out.parent / f"{out.name}-cache"):
        if loader:
            litdata.optimize(fn=partial(_litdata_tokens, dtype=dtype), inputs=inputs,
                             output_dir=str(out), chunk_size=total // SHARDS + MAX_LEN,
                             item_loader=TokensLoader(), num_workers=1, mode="overwrite",
                             start_method="fork")
        else:
            litdata.optimize(fn=partial(_litdata_pytree, dtype=dtype), inputs=inputs,
                             output_dir=str(out), chunk_size=PER_SHARD, num_workers=1,
                             mode="overwrite", start_method="fork")
    return out


def write_litdata_text(out: Path) -> Path:
    """optimize() of one {"text": str, "doc_id": int} item per text: a `str` leaf."""
    import litdata

    with formatlibs.litdata_caches(out.parent / f"{out.name}-cache"):
        litdata.optimize(fn=_litdata_text, inputs=list(range(SAMPLES)), output_dir=str(out),
                         chunk_size=PER_SHARD, num_workers=1, mode="overwrite",
                         start_method="fork")
    return out


def write_hf(out: Path, dtype: str) -> Path:
    import datasets

    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value(dtype)),
                                  "doc_id": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict(
        {"input_ids": [tokens(i, dtype) for i in range(SAMPLES)],
         "doc_id": [doc_id(i) for i in range(SAMPLES)]}, features=features)
    ds.save_to_disk(str(out), num_shards=SHARDS)
    return out


def write_parquet(out: Path, dtype: str) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        table = pa.table({
            "input_ids": pa.array([tokens(i, dtype) for i in rows], pa.list_(pa.from_numpy_dtype(
                np.dtype(dtype)))),
            "doc_id": pa.array([doc_id(i) for i in rows], pa.int64())})
        pq.write_table(table, out / f"part-{k:05d}.parquet")
    return out


def write_jsonl(out: Path) -> Path:
    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        lines = [json.dumps({"text": text(i), "doc_id": doc_id(i)}) + "\n" for i in rows]
        (out / f"part-{k:05d}.jsonl").write_text("".join(lines))
    return out


def write_text(kind: str, out: Path) -> Path:
    """The same texts and doc ids as text-jsonl, through MDSWriter (a `str` column), `datasets`
    (save_to_disk) and pyarrow (Parquet): a text column each, as raw-text exports store it."""
    if kind == "mds-text":
        from streaming import MDSWriter

        with MDSWriter(out=str(out), columns={"text": "str", "doc_id": "int"},
                       size_limit=sum(len(text(i)) for i in range(SAMPLES)) // SHARDS + 4096,
                       progress_bar=False) as w:
            for i in range(SAMPLES):
                w.write({"text": text(i), "doc_id": doc_id(i)})
        return out
    if kind == "hf-text":
        import datasets

        datasets.Dataset.from_dict({"text": [text(i) for i in range(SAMPLES)],
                                    "doc_id": [doc_id(i) for i in range(SAMPLES)]}
                                   ).save_to_disk(str(out), num_shards=SHARDS)
        return out
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        pq.write_table(pa.table({"text": [text(i) for i in rows],
                                 "doc_id": pa.array([doc_id(i) for i in rows], pa.int64())}),
                       out / f"part-{k:05d}.parquet")
    return out


def write_wds(kind: str, out: Path, dtype: str) -> Path:
    """webdataset's TarWriter, a shard per PER_SHARD documents: the ids as an `.npy` member
    (its default encoder: numpy.save) or the text as a `.txt` one, the doc id in a `.json`."""
    import webdataset as wds

    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        with wds.TarWriter(str(out / f"shard-{k:05d}.tar")) as w:
            for i in rows:
                w.write({"__key__": f"{i:06d}", "json": {"doc_id": doc_id(i)},
                         WDS_MEMBER[kind]: tokens(i, dtype) if kind == "wds-tokens"
                         else text(i)})
    return out


def write_lance(kind: str, out: Path, dtype: str) -> Path:
    """lance.write_dataset of a table (a list column of the ids in their dtype, or a text
    column, and the doc id), PER_SHARD rows a fragment."""
    import lance
    import pyarrow as pa

    payload = (pa.array([tokens(i, dtype) for i in range(SAMPLES)],
                        pa.list_(pa.from_numpy_dtype(np.dtype(dtype))))
               if kind == "lance-tokens" else pa.array([text(i) for i in range(SAMPLES)]))
    name = "input_ids" if kind == "lance-tokens" else "text"
    table = pa.table({name: payload, "doc_id": pa.array([doc_id(i) for i in range(SAMPLES)],
                                                        pa.int64())})
    lance.write_dataset(table, str(out), max_rows_per_file=PER_SHARD)
    return out


def write_tfrecord(kind: str, out: Path) -> Path:
    """The tfrecord package's TFRecordWriter, a file per PER_SHARD documents: tf.train.Example
    records with the ids as an int64 list (TFRecord's only integer type) or the text as bytes,
    and the doc id."""
    import tfrecord

    out.mkdir(parents=True)
    for k, rows in enumerate(_per_shard()):
        writer = tfrecord.TFRecordWriter(str(out / f"part-{k:05d}.tfrecord"))
        for i in rows:
            payload = ({"input_ids": (tokens(i).tolist(), "int")} if kind == "tfrecord-tokens"
                       else {"text": (text(i).encode(), "byte")})
            writer.write({**payload, "doc_id": (doc_id(i), "int")})
        writer.close()
    return out


def write(kind: str, root: Path, dtype: str = "uint16") -> Path:
    out = root / kind
    if kind in ("mds-text", "hf-text", "parquet-text"):
        return write_text(kind, out)
    if kind.startswith("mds"):
        return write_mds(out, dtype, with_json=kind == "mds-tokens-json")
    if kind == "litdata-text":
        return write_litdata_text(out)
    if kind.startswith("litdata"):
        return write_litdata(out, dtype, loader=kind == "litdata-tokens")
    if kind == "hf-tokens":
        return write_hf(out, dtype)
    if kind == "parquet-tokens":
        return write_parquet(out, dtype)
    if kind == "text-jsonl":
        return write_jsonl(out)
    if kind == "megatron-tokens":
        return write_megatron(out, dtype)
    if kind in WDS_MEMBER:
        return write_wds(kind, out, dtype)
    if kind.startswith("lance"):
        return write_lance(kind, out, dtype)
    if kind.startswith("tfrecord"):
        return write_tfrecord(kind, out)
    raise ValueError(f"unknown kind {kind!r}")


def expected(kind: str, dtype: str = "uint16") -> list[np.ndarray]:
    """What `read_back` must equal. For TokensLoader: each chunk's tokens cut into BLOCK-token
    blocks that run across document boundaries but never across chunks; the chunk's last
    `tokens % BLOCK` tokens are never read (litdata counts dim // block_size blocks a chunk)."""
    if kind in ("text-jsonl", "wds-text", "litdata-text", "lance-text", "tfrecord-text"):
        return [np.frombuffer(text(i).encode(), np.uint8) for i in range(SAMPLES)]
    if kind != "litdata-tokens":
        return [tokens(i, dtype) for i in range(SAMPLES)]
    total = sum(length(i) for i in range(SAMPLES))
    limit = total // SHARDS + MAX_LEN
    blocks: list[np.ndarray] = []
    chunk: list[np.ndarray] = []
    used = 0
    for i in range(SAMPLES + 1):
        # The same cut as the writer's: the chunk closes before the document that overflows it.
        if i == SAMPLES or used + length(i) > limit:
            stream = np.concatenate(chunk)
            blocks += list(stream[: len(stream) // BLOCK * BLOCK].reshape(-1, BLOCK))
            chunk, used = [], 0
        if i < SAMPLES:
            chunk.append(tokens(i, dtype))
            used += length(i)
    return blocks


def read_back(kind: str, path: Path) -> list[np.ndarray]:
    """Every sample's tokens as the format's own library reads them, in its order (for
    litdata-tokens: the BLOCK-token blocks; for text-jsonl: each text's UTF-8 bytes)."""
    return [np.asarray(ids) for ids, _ in _read(kind, path)]


def read_doc_ids(kind: str, path: Path) -> list[int]:
    """The doc ids, where the export keeps them (a TokensLoader export keeps only tokens)."""
    if kind in ("litdata-tokens", "megatron-tokens"):
        raise ValueError(f"a {kind} export keeps no doc ids")
    return [int(d) for _, d in _read(kind, path)]


def _read(kind: str, path: Path) -> list[tuple[Any, Any]]:
    if kind.startswith("mds"):
        from streaming import StreamingDataset

        # Its state lives in /dev/shm (000000_locals, ...) until this process exits, when an
        # atexit handler unlinks it; a later dataset takes the next prefix. Not
        # clean_stale_shared_memory(): that unlinks every prefix, another process's live ones too.
        ds = StreamingDataset(local=str(path), shuffle=False, batch_size=1)
        rows = [ds[i] for i in range(ds.num_samples)]
        if kind == "mds-tokens-json":
            return [(r["input_ids"], r["meta"]["doc_id"]) for r in rows]
        return [(r["input_ids"], r["doc_id"]) for r in rows]
    if kind == "litdata-text":
        import litdata

        lds = litdata.StreamingDataset(str(path))
        return [(np.frombuffer(x["text"].encode(), np.uint8), x["doc_id"])
                for x in (lds[i] for i in range(len(lds)))]
    if kind.startswith("litdata"):
        import litdata
        from litdata.streaming.item_loader import TokensLoader

        if kind == "litdata-tokens":
            lds = litdata.StreamingDataset(str(path), item_loader=TokensLoader(block_size=BLOCK))
            return [(lds[i].numpy(), None) for i in range(len(lds))]
        lds = litdata.StreamingDataset(str(path))
        return [(x["input_ids"], x["doc_id"]) for x in (lds[i] for i in range(len(lds)))]
    if kind == "hf-tokens":
        import datasets

        # Arrow rows, not with_format("numpy"): datasets' numpy formatter widens every integer
        # list to int64, hiding the stored uint16.
        return _arrow_rows(datasets.load_from_disk(str(path)).with_format("arrow")[:])
    if kind == "megatron-tokens":
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        # Megatron's own reader, dataset by dataset of the blend; it keeps no doc ids. Each
        # sequence copied out: a dataset unmaps its .bin when it is collected, and a view of
        # it read after that crashes the process.
        prefixes = sorted(str(p)[:-4] for p in path.glob("*.idx"))
        return [(np.array(ds[i]), None) for ds in map(IndexedDataset, prefixes)
                for i in range(len(ds))]
    if kind.startswith("lance"):
        import lance

        table = lance.dataset(str(path)).to_table()
        if kind == "lance-text":
            return [(np.frombuffer(t.encode(), np.uint8), d) for t, d in
                    zip(table.column("text").to_pylist(), table.column("doc_id").to_pylist(),
                        strict=True)]
        return _arrow_rows(table)
    files = sorted(p for p in path.iterdir() if not p.name.startswith(("_", ".")))
    if kind.startswith("tfrecord"):
        from tfrecord.reader import tfrecord_loader

        rows = [r for f in files for r in tfrecord_loader(str(f), None)]
        if kind == "tfrecord-text":
            return [(np.frombuffer(bytes(r["text"]), np.uint8), int(r["doc_id"][0]))
                    for r in rows]
        return [(r["input_ids"], int(r["doc_id"][0])) for r in rows]
    if kind in WDS_MEMBER:
        import webdataset as wds

        # Its default decoders: numpy.load for .npy, UTF-8 for .txt, json for .json.
        ds = wds.WebDataset([str(f) for f in files], shardshuffle=False).decode()
        return [(s[WDS_MEMBER[kind]] if kind == "wds-tokens" else
                 np.frombuffer(s["txt"].encode(), np.uint8), s["json"]["doc_id"]) for s in ds]
    if kind == "parquet-tokens":
        import pyarrow.parquet as pq

        return [row for f in files for row in _arrow_rows(pq.read_table(f))]
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    return [(np.frombuffer(r["text"].encode(), np.uint8), r["doc_id"]) for r in rows]


def _arrow_rows(table: Any) -> list[tuple[Any, Any]]:
    """(input_ids, doc_id) per row of an Arrow table: each row a slice of the list column's flat
    values, in the stored dtype."""
    col = table.column("input_ids").combine_chunks()
    ids = table.column("doc_id").to_pylist()
    return [(col[j].values.to_numpy(), ids[j]) for j in range(len(col))]


def write_megatron(out: Path, dtype: str) -> Path:
    """Megatron's IndexedDatasetBuilder: a blend of SHARDS datasets (a .bin and its .idx each),
    every document one sequence, as Megatron's preprocessing writes a corpus."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    out.mkdir(parents=True, exist_ok=True)
    for k, rows in enumerate(_per_shard()):
        prefix = out / f"corpus-{k}_text_document"
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.dtype(dtype).type)
        for i in rows:
            builder.add_item(torch.from_numpy(tokens(i, dtype).astype(np.int64)))
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
    return out
