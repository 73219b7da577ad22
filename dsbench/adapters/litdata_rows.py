"""litdata chunks whose items are rows of an Arrow IPC file (see litdata.py's docstring): the
file found at the chunk's end and its rows read batch by batch, as litdata's reader reads them,
and a row's leaves named as litdata's pytree names them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsbench.errors import SampleError

MAGIC = b"LDARW01\0"  # a chunk's last 8 bytes, after the Arrow file and its uint32 length


def flat(sample: Any, prefix: str = "") -> dict[str, Any]:
    """A pytree sample's leaves (a dict's, a list's) by the names `leaf_names` gives them."""
    if isinstance(sample, dict):
        items: Any = sample.items()
    elif isinstance(sample, list | tuple):
        items = enumerate(sample)
    else:
        return {prefix or "item": sample}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def rows(data: memoryview, samples: int, where: str) -> Iterator[tuple[int, Any]]:
    """The rows of an Arrow-row chunk's file (see the module docstring), batch by batch."""
    import pyarrow as pa

    n = int.from_bytes(data[-12:-8], "little") if len(data) >= 12 else -1
    if not 0 < n <= len(data) - 12:
        raise SampleError(f"corrupt Arrow rows: a file of {n} bytes stated where the chunk has "
                          f"{len(data) - 12}", path=where)
    i = 0
    try:
        rows = pa.ipc.open_file(pa.py_buffer(data[len(data) - 12 - n:len(data) - 12]))
        for b in range(rows.num_record_batches):
            for row in rows.get_batch(b).to_pylist():
                if i < samples:
                    yield i, row
                i += 1
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SampleError(f"corrupt Arrow rows (truncated?): {exc}", path=where) from None
    if i != samples:
        raise SampleError(f"its Arrow file holds {i} rows, but the index says {samples}",
                          path=where)
