"""litdata chunks whose items are rows of an Arrow IPC file (see litdata.py's docstring): the
file found at the chunk's end and its rows read batch by batch, as litdata's reader reads them,
and a row's leaves found by the names litdata's pytree gives them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from dsbench.adapters import base
from dsbench.adapters.columns import sniff_codec
from dsbench.errors import SampleError

MAGIC = b"LDARW01\0"  # a chunk's last 8 bytes, after the Arrow file and its uint32 length


def leaf(row: Any, name: str) -> tuple[bool, Any]:
    """A row's leaf by its pytree name ("meta.lang"): (found, value). A list or a dict that
    litdata keeps as one leaf (a JSON leaf) is its value whole; a null parent gives None."""
    value = row
    for part in name.split("."):
        if value is None:
            return True, None
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def rows(data: memoryview, samples: int, where: str) -> Iterator[tuple[int, Any]]:
    """The rows of an Arrow-row chunk's file (see the module docstring), batch by batch."""
    import pyarrow as pa

    n = int.from_bytes(data[-12:-8], "little") if len(data) >= 12 else -1
    if not 0 < n <= len(data) - 12:
        raise SampleError(f"corrupt Arrow rows: a file of {n} bytes stated where the chunk has "
                          f"{len(data) - 12}", path=where)
    i, start = 0, len(data) - 12 - n
    ipc = pa.py_buffer(data[start:len(data) - 12])
    try:
        # An Arrow IPC file; older writers put a stream there, which litdata reads too.
        if bytes(data[start:start + 6]) == b"ARROW1":
            reader = pa.ipc.open_file(ipc)
            batches = (reader.get_batch(b) for b in range(reader.num_record_batches))
        else:
            batches = iter(pa.ipc.open_stream(ipc))
        for batch in batches:
            for row in batch.to_pylist():
                if i < samples:
                    yield i, row
                i += 1
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SampleError(f"corrupt Arrow rows (truncated?): {exc}", path=where) from None
    if i != samples:
        raise SampleError(f"its Arrow file holds {i} rows, but the index says {samples}",
                          path=where)


def sample(export: Any, row: dict[str, Any], key: str, where: str) -> base.RawSample:
    """An Arrow row's sample (`export` a litdata.LitdataExport, which imports this module): its
    leaves as Arrow made them Python values (a str, bytes, an int, a list or dict kept as one
    leaf, None), the fields kept as such (text as text)."""
    values: dict[str, Any] = {}
    for name in (export.image, *export.field_names, *([export.key] if export.key else [])):
        found, values[name] = leaf(row, name)
        if not found:
            raise SampleError(f"the Arrow row lacks the leaf {name!r} the index names",
                              path=where, key=key)
    if export.key is not None and values[export.key] is not None:
        key = str(values[export.key])
    fields = {n: values[n] for n in export.field_names}
    payload = values[export.image]
    want = {base.AUDIO: bytes, base.TEXT: str, "image": bytes}.get(export.kind, object)
    codec = sniff_codec(payload) if isinstance(payload, bytes) else None
    if not isinstance(payload, want) or (export.kind == "image" and codec is None):
        raise SampleError(f"an Arrow row whose leaf {export.image!r} holds "
                          f"{type(payload).__name__}, not {export.kind}", path=where, key=key)
    # A null field is None, as litdata hands it over (not the text "None").
    encodings = export.row_encodings if all(v is not None for v in fields.values()) else {
        n: e if fields[n] is not None else base.ENC_VALUE
        for n, e in export.row_encodings.items()}
    if export.kind == base.AUDIO:
        return export.clip(cast(bytes, payload), fields, key, where)
    return base.RawSample(key, where, payload, codec or export.kind, fields, encodings)
