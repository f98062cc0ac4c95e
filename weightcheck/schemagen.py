"""JSON Schema (draft 2020-12) of each report, generated from the report dataclasses' type hints
(weightcheck/reports/); shipped as weightcheck/schemas/<name>.json, kept equal to what this
generates by a test (tests/test_output_schemas.py).

    python -m weightcheck.schemagen          # rewrite weightcheck/schemas/*.json

A dataclass is an object with a property per field (under its JSON key), every field required
unless left out when None (``reports.optional``), nothing else allowed; ``X | None`` is
``anyOf``; ``Literal`` an ``enum``; ``list``/``tuple`` an array; ``dict[str, X]`` an object of X;
``Any`` anything (no report field is: tests/test_output_schemas.py). A class with a
``json_schema(defs)`` static method says its own (``reports.base.ConfigValue``: a config file's
value, any JSON value, the one open type).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import types
import typing
from typing import Any, Literal, Union

from weightcheck.reports import REPORTS, Report

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS = pathlib.Path(__file__).resolve().parent / "schemas"
_SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}


def _type(tp, defs: dict) -> dict:
    if tp is Any or tp is object:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if isinstance(tp, type) and hasattr(tp, "json_schema"):
        return tp.json_schema(defs)
    if dataclasses.is_dataclass(tp):
        return _ref(tp, defs)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type(a, defs) for a in args]}
    if origin in (list, tuple) or tp in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        return {"type": "array", **({"items": _type(items[0], defs)} if items else {})}
    if origin is dict or tp is dict:
        return {
            "type": "object",
            **({"additionalProperties": _type(args[1], defs)} if args else {}),
        }
    raise TypeError(f"no JSON Schema for {tp!r}")


def _ref(cls, defs: dict) -> dict:
    if cls.__name__ not in defs:
        defs[cls.__name__] = {}  # a placeholder while its fields are read (recursive types)
        defs[cls.__name__] = _object(cls, defs)
    return {"$ref": f"#/$defs/{cls.__name__}"}


def _object(cls, defs: dict) -> dict:
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        if f.metadata.get("skip"):
            continue
        name = f.metadata.get("key", f.name)
        props[name] = _type(hints[f.name], defs)
        if not f.metadata.get("omit"):
            required.append(name)
    out = {"type": "object", "properties": props, "required": required}
    out["additionalProperties"] = False
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(f"{cls.__name__}("):  # not dataclass's generated signature
        out = {"description": " ".join(doc.split()), **out}
    return out


def _default(cls, name: str):
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def schema(report: type[Report]) -> dict:
    """The JSON Schema of ``report``'s ``to_dict()``."""
    defs: dict = {}
    top = _object(report, defs)
    return {
        "$schema": DIALECT,
        "$id": _default(report, "schema"),  # weightcheck.check/1: the report's "schema" value
        "title": f"weightcheck {report.SCHEMA_NAME} report",
        **top,
        **({"$defs": dict(sorted(defs.items()))} if defs else {}),
    }


def text(report: type[Report]) -> str:
    return json.dumps(schema(report), indent=2) + "\n"


def generated() -> dict[str, str]:
    """{file name: content} of every shipped schema."""
    return {f"{r.SCHEMA_NAME}.json": text(r) for r in REPORTS}


def main() -> None:
    SCHEMAS.mkdir(exist_ok=True)
    for name, content in generated().items():
        (SCHEMAS / name).write_text(content)
        print(SCHEMAS / name, file=sys.stderr)


if __name__ == "__main__":
    main()
