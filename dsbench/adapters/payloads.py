"""Columnar exports' payloads in the survey: each row's image, token ids or text checked, and
each row's payload bytes from the column's offsets alone (for bytes per sample)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsbench.adapters import base
from dsbench.adapters.columns import Plan, column_values, image_column
from dsbench.adapters.survey import add_payload, problem


def survey_payloads(survey: dict[str, Any], plan: Plan, arr: pa.Array, keys: Sequence[Any],
                    unit: str) -> None:
    """Each row's payload checked into the survey (survey.add_payload); a row whose payload is
    not what its kind says is a problem naming it."""
    payloads: Any = (column_values(arr) if plan.kind in (base.TOKENS, base.TEXT)
                     else image_column(arr, plan.image_child))
    for j in range(len(arr)):
        data = payloads[j]
        try:
            if data is None:
                raise ValueError(f"{plan.kind} is null")
            add_payload(survey, plan.kind, data)  # an image's codec is sniffed from its header
        except ValueError as exc:
            survey["problems"].append(problem(unit, str(keys[j]), str(exc)))


def payload_lengths(arr: pa.Array, plan: Plan) -> np.ndarray:
    """Bytes of each row's payload, from offsets alone: an image's (binary_lengths), or its
    token ids' (list lengths times the id's width)."""
    if plan.kind != base.TOKENS:
        if plan.image_child is not None:
            arr = arr.flatten()[arr.type.get_field_index(plan.image_child)]
        return binary_lengths(arr)
    width = arr.type.value_type.bit_width // 8
    counts = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    return counts.astype(np.int64) * width


def binary_lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each value of a binary column, read from its offsets alone (0 if null)."""
    return pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
