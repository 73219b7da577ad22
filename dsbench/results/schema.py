"""The documents' contract: JSON Schemas shipped with dsbench (results/schemas/), one per kind.

`validate(doc, name, source)` checks a document against its schema and reports the first
problem as one line naming the source and the key (`runs[0].rounds[2].wall_s: ...`).
docs/results.md holds the schemas' descriptions as tables; `markdown(name)` makes them, and a
test checks that the document and the schemas say the same (`python -m dsbench.results.schema`
prints the tables to paste).
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Iterator
from importlib import resources
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from referencing.jsonschema import DRAFT202012

from dsbench.errors import DsbenchError

NAMES = ("bench", "summary", "comparison", "gate", "extrapolation", "budget", "demo", "probe",
         "job", "resume", "resume-native", "advice")


def _urn(name: str) -> str:
    return f"urn:dsbench:schema:{name}"


@functools.cache
def load(name: str) -> dict[str, Any]:
    text = resources.files("dsbench.results").joinpath("schemas", f"{name}.schema.json")
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


def _retrieve(uri: str) -> referencing.Resource[Any]:
    name = uri.removeprefix(_urn(""))
    if name not in NAMES:
        raise referencing.exceptions.NoSuchResource(uri)
    return DRAFT202012.create_resource(load(name))


# attrs makes `retrieve` a keyword the type stubs do not know.
_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_retrieve)  # type: ignore[call-arg]


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load(name), registry=_REGISTRY)


def where(path: Any) -> str:
    """A JSON path as people write it: runs[0].rounds[2].wall_s."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "document"


def validate(doc: Any, name: str, source: object = "document") -> None:
    """Raise a one-line DsbenchError naming `source` and the key when `doc` breaks the schema
    or holds a number JSON cannot (NaN, infinity: a schema's "number" lets them pass)."""
    try:
        error = jsonschema.exceptions.best_match(_validator(name).iter_errors(doc))
        bad = _non_finite(doc, ())
    except RecursionError:
        raise DsbenchError("not a dsbench document: nested too deep", path=source) from None
    if error is not None:
        message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
        raise DsbenchError(f"{where(error.absolute_path)}: {message}", path=source)
    if bad is not None:
        raise DsbenchError(f"{where(bad[0])}: {bad[1]} is not a finite number", path=source)


def _non_finite(x: Any, path: tuple[Any, ...]) -> tuple[tuple[Any, ...], float] | None:
    if isinstance(x, float) and not math.isfinite(x):
        return path, x
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for key, value in items:
        found = _non_finite(value, (*path, key))
        if found is not None:
            return found
    return None


# --- the tables of docs/results.md ----------------------------------------------------------------

def _type(prop: dict[str, Any]) -> str:
    if "const" in prop:
        return {"int": "integer", "str": "string"}.get(type(prop["const"]).__name__, "any")
    if "$ref" in prop:
        return "object"
    if "enum" in prop and "type" not in prop:
        return " or ".join(dict.fromkeys({"int": "integer", "str": "string", "NoneType": "null"}
                                         .get(type(v).__name__, "any") for v in prop["enum"]))
    kinds = prop.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "array" in kinds and prop.get("minItems") == 2 == prop.get("maxItems"):
        item = prop.get("items", {}).get("type", "number")
        pair = f"[{item}, {item}]"
        return pair + (" or null" if "null" in kinds else "")
    names = [k if k != "array" else f"list of {_type(prop.get('items', {}))}" for k in kinds]
    return " or ".join(n for n in names if n != "null") + (" or null" if "null" in kinds else "")


def _objects(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(title, object schema) for the document and each object it defines, in order."""
    schema = load(name)
    yield "Top level", schema
    for key, sub in schema.get("$defs", {}).items():
        if sub.get("type") == "object" and sub.get("properties"):
            yield f"`{key}`", sub


def markdown(name: str) -> str:
    """The schema `name` as docs/results.md's tables: key, type, required, meaning."""
    out = []
    for title, obj in _objects(name):
        required = set(obj.get("required", ()))
        out += [f"#### {title}", "", "| key | type | required | meaning |", "|---|---|---|---|"]
        for key, prop in obj["properties"].items():
            text = prop.get("description", "").replace("|", "\\|")
            out.append(f"| `{key}` | {_type(prop)} | {'yes' if key in required else ''} | "
                       f"{text} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    for n in sys.argv[1:] or NAMES:
        print(f"<!-- schema: {n} -->\n{markdown(n)}<!-- end schema: {n} -->\n")
