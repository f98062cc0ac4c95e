"""`weightcheck inspect`'s report."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.record import record
from weightcheck.reports.base import ConfigValue, Report, SourceInfo, key


@record
class DialectInfo:
    name: str | None
    wrappers: list[str]
    evidence: list[str]


@record
class ArchitectureInfo:
    name: str | None
    evidence: str


@record
class InspectConfig:
    raw: dict[str, ConfigValue] | None  # config.json as written
    normalized: dict[str, ConfigValue]  # every field of mappings/config.toml
    provenance: dict[str, str]  # the key path each value came from, default, absent, invalid
    problems: list[str]
    key_fields: list[str]


@record
class InspectTensor:
    name: str
    canonical: str | None
    dtype: str
    shape: list[int]
    parameters: int
    bytes: int
    file: str | None
    via: str | None
    expected_shape: list[int] | None
    status: str


@record
class MissingTensor:
    canonical: str
    presence: str
    shape: list[int] | None
    note: str | None


@record
class Totals:
    tensors: int
    parameters: int
    bytes: int


@record(kw_only=True)
class InspectReport(Report):
    """``weightcheck inspect``: schema ``weightcheck.inspect/1``."""

    SCHEMA_NAME = "inspect"

    schema: Literal["weightcheck.inspect/1"] = field(default="weightcheck.inspect/1")
    source_info: SourceInfo = key("source")
    dialect_info: DialectInfo = key("dialect")
    architecture_info: ArchitectureInfo = key("architecture")
    looks_like_target: str | None  # why SRC looks like a target model, or None
    config_info: InspectConfig = key("config")
    tensors: list[InspectTensor]
    unknown_names: list[str] = key("unknown")  # names no dialect explains
    other_dialect: dict[str, str]
    duplicates: dict[str, list[str]]
    missing_tensors: list[MissingTensor] = key("missing")
    totals: Totals
    notes: list[str]

    # what a caller reads (the API's names)
    exit_status = 0

    @property
    def source(self) -> str:
        return self.source_info.spec

    @property
    def dialect(self) -> str | None:
        return self.dialect_info.name

    @property
    def architecture(self) -> str | None:
        return self.architecture_info.name

    @property
    def config(self) -> dict:
        return self.config_info.normalized

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(self.config_info.problems)

    @property
    def tensor_rows(self) -> list[InspectTensor]:
        """The tensors (``tensors``; the name before the count gave way to the list)."""
        return self.tensors

    @property
    def tensor_count(self) -> int:
        return self.totals.tensors

    @property
    def parameters(self) -> int:
        return self.totals.parameters

    @property
    def bytes(self) -> int:
        return self.totals.bytes

    @property
    def missing(self) -> tuple[str, ...]:
        """Canonical names the config implies and SRC lacks."""
        return tuple(m.canonical for m in self.missing_tensors)

    @property
    def unknown(self) -> tuple[str, ...]:
        return tuple(self.unknown_names)
