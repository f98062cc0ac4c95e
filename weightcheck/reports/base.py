"""What every report is made of: :class:`Report` (``to_dict()`` is ``--json``), how a field becomes
JSON (:func:`key`, :func:`optional`), and the source every report names (:class:`SourceInfo`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field
from typing import Any, Literal

from weightcheck.record import record


def key(name: str, **more) -> Any:
    """A field written under another JSON key than its name."""
    return field(metadata={"key": name, **more})


def optional(default=None, **more) -> Any:
    """A field left out of the JSON when None."""
    return field(default=default, metadata={"omit": True, **more})


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
