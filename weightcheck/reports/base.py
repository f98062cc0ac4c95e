"""What every report is made of: :class:`Report` (``to_dict()`` is ``--json``), how a field becomes
JSON (:func:`key`, :func:`optional`), and the source every report names (:class:`SourceInfo`)."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from dataclasses import field
from typing import Any, Literal, Union

from weightcheck.record import record


def key(name: str, **more) -> Any:
    """A field written under another JSON key than its name."""
    return field(metadata={"key": name, **more})


def optional(default=None, **more) -> Any:
    """A field left out of the JSON when None."""
    return field(default=default, metadata={"omit": True, **more})


class ConfigValue:
    """A value of a config file as it is written (any JSON value: a config.json is the user's,
    its keys and values are not weightcheck's to fix). The one open type of the schemas; used
    only as an annotation (a field of this type holds the JSON value itself)."""

    @staticmethod
    def json_schema(defs: dict) -> dict:
        if "ConfigValue" not in defs:
            defs["ConfigValue"] = {
                "description": " ".join(ConfigValue.__doc__.split(".")[0].split()),
                "anyOf": [{"type": t} for t in ("string", "number", "boolean", "null")]
                + [
                    {"type": "array", "items": {"$ref": "#/$defs/ConfigValue"}},
                    {"type": "object", "additionalProperties": {"$ref": "#/$defs/ConfigValue"}},
                ],
            }
        return {"$ref": "#/$defs/ConfigValue"}


class Keyed:
    """A typed part of a report that can still be read as the mapping it was before it was typed
    (``report.engine["tensors"]``): its JSON, by key."""

    def __getitem__(self, name: str):
        return to_json_value(self)[name]

    def get(self, name: str, default=None):
        return to_json_value(self).get(name, default)


def to_json_value(x):
    """A report (or any part of one) as JSON-able data: dataclasses field by field."""
    if hasattr(x, "to_json_value"):
        return x.to_json_value()
    if hasattr(x, "as_dict"):  # a finding (rules/base.py Finding)
        return x.as_dict()
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = {}
        for f in dataclasses.fields(x):
            if f.metadata.get("skip"):
                continue
            v = getattr(x, f.name)
            if v is None and f.metadata.get("omit"):
                continue
            out[f.metadata.get("key", f.name)] = to_json_value(v)
        return out
    if isinstance(x, (list, tuple)):
        return [to_json_value(v) for v in x]
    if isinstance(x, dict):
        return {k: to_json_value(v) for k, v in x.items()}
    return x


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def typed(tp, value):
    """``value``, plain data as another layer hands it over (a dict from a replay's
    ``report()``), as the typed record ``tp`` describes: records field by field under their JSON
    keys (a key the record lacks, or a required one missing, is a TypeError: the record and the
    data must agree), lists, dicts and optional values element by element; the JSON of the result
    is ``value`` again."""
    if value is None or tp is Any or tp is ConfigValue:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        hints, kwargs, seen = _hints(tp), {}, set()
        for f in dataclasses.fields(tp):
            k = f.metadata.get("key", f.name)
            if k in value:
                kwargs[f.name] = typed(hints[f.name], value[k])
                seen.add(k)
        extra = set(value) - seen
        if extra:
            raise TypeError(f"{tp.__name__}: no field for {sorted(extra)}")
        return tp(**kwargs)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return typed(inner[0], value) if len(inner) == 1 else value
    if origin in (list, tuple):
        items = [typed(args[0], v) for v in value] if args else list(value)
        return tuple(items) if origin is tuple else items
    if origin is dict:
        return {k: typed(args[1], v) for k, v in value.items()}
    return value


def _finite(o):
    """Strict JSON has no NaN/Infinity: write them as strings."""
    if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
        return str(o)
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def to_json(data) -> str:
    """JSON text of a report or of plain data, as ``--json`` prints it."""
    return json.dumps(
        _finite(to_json_value(data)), indent=2, sort_keys=False, default=str, allow_nan=False
    )


class Report:
    """What every command's report does: ``to_dict()`` (``--json``), ``to_json()``,
    ``report`` (the same dict); each has ``exit_status`` (what the CLI exits with: 0 fine, 1
    findings, 2 an error)."""

    SCHEMA_NAME = ""  # the file in weightcheck/schemas/

    def to_dict(self) -> dict:
        return to_json_value(self)

    @property
    def report(self) -> dict:
        return self.to_dict()

    def to_json(self) -> str:
        return to_json(self)


@record
class SourceFile:
    name: str
    format: str
    size: int | None
    sha256: str | None
    pickle_key: str | None = optional()


@record
class SourceInfo:
    """Where a checkpoint was read from."""

    spec: str
    kind: Literal["hub", "folder", "file"]
    location: str
    layout: str
    revision: str | None
    commit: str | None
    config_file: str | None
    index_file: str | None
    files: list[SourceFile]
    picked: str | None = (
        None  # a SpecForge run folder: the checkpoint read and why (sources/local.py)
    )


def source_info(d) -> SourceInfo:
    """A drafter's (model/drafter.py) source as reports list it."""
    s = d.source
    return SourceInfo(
        s.spec,
        s.kind,
        s.location,
        s.layout,
        s.revision,
        s.commit,
        s.config_file,
        s.index_file,
        [
            SourceFile(f.name, f.format, f.size, f.sha256, f.pickle_key or None)
            for f in s.files.values()
        ],
        s.picked,
    )
