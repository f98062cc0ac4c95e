"""Every ``--json`` output the suite produces is validated against its shipped schema
(weightcheck/schemas/, generated from weightcheck/reports/): conftest.run_cli and
run_subprocess call :func:`check_output`. A small validator for the subset of JSON Schema
weightcheck/schemagen.py writes (type, enum, properties, required, additionalProperties, items,
anyOf, $ref to $defs): no dependency."""

from __future__ import annotations

import functools
import json
import pathlib

SCHEMAS = pathlib.Path(__file__).resolve().parent.parent / "weightcheck" / "schemas"
_TYPES = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_KNOWN = {"$schema", "$id", "$defs", "$ref", "title", "description", "type", "enum", "properties"}
_KNOWN |= {"required", "additionalProperties", "items", "anyOf"}


@functools.cache
def schema_for(name: str) -> dict:
    """The shipped schema of a report's ``"schema"`` value (``weightcheck.check/1``)."""
    kind = name.removeprefix("weightcheck.").split("/")[0]
    return json.loads((SCHEMAS / f"{kind}.json").read_text())


def errors(value, schema: dict, root: dict, path: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (an empty list: it validates)."""
    unknown = set(schema) - _KNOWN
    assert not unknown, f"the validator does not know {unknown}"
    if "$ref" in schema:
        return errors(value, root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root, path)
    if "anyOf" in schema:
        tries = [errors(value, s, root, path) for s in schema["anyOf"]]
        return [] if any(not t for t in tries) else [f"{path}: none of anyOf: {tries}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} not in {schema['enum']}"]
    if "type" in schema and not _TYPES[schema["type"]](value):
        return [f"{path}: {type(value).__name__}, not {schema['type']}"]
    out = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{path}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                out += errors(v, props[k], root, f"{path}.{k}")
            elif extra is False:
                out.append(f"{path}: {k!r} is not in the schema")
            elif isinstance(extra, dict):
                out += errors(v, extra, root, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += errors(v, schema["items"], root, f"{path}[{i}]")
    return out


def validate(report: dict) -> None:
    """Assert that ``report`` (a parsed ``--json`` output) validates against its schema."""
    schema = schema_for(report["schema"])
    found = errors(report, schema, schema)
    assert not found, f"{report['schema']} output breaks its schema: {found[:5]}"


def asks_json(args) -> bool:
    args = [str(a) for a in args]
    pairs = zip(args, args[1:] + [""])
    return "--json" in args or "--format=json" in args or ("--format", "json") in pairs


def check_output(args, stdout: str) -> None:
    """Called on every CLI run of the suite: a ``--json`` output validates against its schema."""
    if not asks_json(args) or not stdout.strip():
        return
    try:
        report = json.loads(stdout)
    except ValueError:
        return  # the test itself says what it expects of a broken output
    assert isinstance(report, dict) and str(report.get("schema", "")).startswith("weightcheck."), (
        f"{args}: a --json output names no weightcheck schema"
    )
    validate(report)
