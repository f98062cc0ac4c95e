"""The reports the commands return: one dataclass per command (inspect, compare, check, convert,
rule, clean, error), typed down to what a caller tests. The API returns them (weightcheck/api.py),
the renderer draws them (weightcheck/output/), :meth:`Report.to_dict` is ``--json``'s output
and weightcheck/schemas/*.json is generated from these classes (weightcheck/schema.py).

How a field becomes JSON: under its name, or ``metadata["key"]`` where the name a caller reads
differs from the JSON key (``InspectReport.tensors`` is the count, JSON's ``tensors`` the list);
``metadata["omit"]``: left out when None (an optional part of a report); ``metadata["skip"]``: not
in the JSON at all. Objects sections that other layers build as they see fit (the engine's replay,
--live, --values, the training gate) are ``dict[str, Any]``: the schema says "an object".
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from weightcheck.model.compatibility import Difference
from weightcheck.rules.base import Finding, Severity

Verdict = Literal["identical", "compatible", "incompatible"]


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
    if isinstance(x, Finding):
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


# =============================================================================================
# shared parts
@dataclass
class SourceFile:
    name: str
    format: str
    size: int | None
    sha256: str | None
    pickle_key: str | None = optional()


@dataclass
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


# =============================================================================================
# inspect
@dataclass
class DialectInfo:
    name: str | None
    wrappers: list[str]
    evidence: list[str]


@dataclass
class ArchitectureInfo:
    name: str | None
    evidence: str


@dataclass
class InspectConfig:
    raw: dict[str, Any] | None
    normalized: dict[str, Any]
    provenance: dict[str, str]
    problems: list[str]
    key_fields: list[str]


@dataclass
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


@dataclass
class MissingTensor:
    canonical: str
    presence: str
    shape: list[int] | None
    note: str | None


@dataclass
class Totals:
    tensors: int
    parameters: int
    bytes: int


@dataclass(kw_only=True)
class InspectReport(Report):
    """``weightcheck inspect``: schema ``weightcheck.inspect/1``."""

    SCHEMA_NAME = "inspect"

    schema: Literal["weightcheck.inspect/1"] = field(default="weightcheck.inspect/1")
    source_info: SourceInfo = key("source")
    dialect_info: DialectInfo = key("dialect")
    architecture_info: ArchitectureInfo = key("architecture")
    looks_like_target: str | None  # why SRC looks like a target model, or None
    config_info: InspectConfig = key("config")
    tensor_rows: list[InspectTensor] = key("tensors")
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
    def tensors(self) -> int:
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


# =============================================================================================
# compare
@dataclass
class Side:
    source: SourceInfo
    dialect: str | None
    architecture: str | None
    config_architecture: str | None  # the drafter architecture its config names, if any


@dataclass
class OnlyIn:
    canonical: str
    name: str
    presence: str | None


@dataclass
class ShapeMismatch:
    canonical: str
    a: list[int]
    b: list[int]


@dataclass
class DtypeMismatch:
    canonical: str
    a: str
    b: str


@dataclass
class ConfigDifference:
    field: str
    category: str  # architecture, serving, informational (mappings/config.toml)
    a: Any
    b: Any
    a_from: str | None
    b_from: str | None
    note: str | None = optional()  # why two spellings mean the same (category informational)


@dataclass
class ByteCounts:
    equal: int
    different: int
    not_compared: int


@dataclass
class PairedTensor:
    canonical: str
    name_a: str
    name_b: str
    shape: list[int]
    dtype_a: str
    dtype_b: str
    bytes_equal: bool | None
    decided_by: Literal["lfs-sha256", "bytes", "dtype"] | None


@dataclass
class VocabOverlap:
    a_draft: int
    b_draft: int
    shared: int
    same_index: int
    a_identity: bool
    b_identity: bool
    a_placeholder: bool
    b_placeholder: bool
    meaning: str


@dataclass(kw_only=True)
class CompareReport(Report):
    """``weightcheck compare``: schema ``weightcheck.compare/1``. ``reasons`` and
    ``strict_failures`` are structured (model/compatibility.py Difference: kind, subject, a, b),
    written to JSON as their sentences."""

    SCHEMA_NAME = "compare"

    schema: Literal["weightcheck.compare/1"] = field(default="weightcheck.compare/1")
    verdict: Verdict
    exit_status: int  # 1: incompatible, or a difference with --strict
    strict: bool
    reasons: tuple[Difference, ...]
    strict_failures: tuple[Difference, ...]
    a: Side
    b: Side
    only_in_a: list[OnlyIn]
    only_in_b: list[OnlyIn]
    shape_mismatches: list[ShapeMismatch]
    dtype_mismatches: list[DtypeMismatch]
    config_differences: list[ConfigDifference]
    bytes: ByteCounts
    tensors: list[PairedTensor]
    notes: list[str]
    vocab: VocabOverlap | None
    values: dict[str, dict[str, Any]] | None = optional()  # --values: per tensor

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


# =============================================================================================
# check
@dataclass
class Summary:
    errors: int
    warnings: int
    info: int


@dataclass(kw_only=True)
class CheckReport(Report):
    """``weightcheck check``: schema ``weightcheck.check/1``. ``ok`` is the gate: no error."""

    SCHEMA_NAME = "check"

    schema: Literal["weightcheck.check/1"] = field(default="weightcheck.check/1")
    ok: bool
    source_info: SourceInfo = key("source")
    dialect: str | None
    architecture: str | None
    engine: dict[str, Any] | None  # --engine: the replay (engines/view.py), field for field
    target: dict[str, Any] | None  # --target: model/target.py Target.summary()
    findings: tuple[Finding, ...]  # every one, ungrouped
    summary: Summary
    conclusion: str
    engines: dict[str, dict[str, Any]] | None = optional()  # plain check: each engine's line
    live: dict[str, Any] | None = optional()
    values: dict[str, Any] | None = optional()
    training: dict[str, Any] | None = optional()
    training_vocab: dict[str, Any] | None = optional()

    @property
    def source(self) -> str:
        return self.source_info.spec

    @property
    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def of(self, severity: Severity) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == severity)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return self.of("error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return self.of("warning")

    @property
    def codes(self) -> set[str]:
        return {f.code for f in self.findings}


# =============================================================================================
# convert
@dataclass
class PlannedTensor:
    source: str | None
    canonical: str | None
    output: str
    shard: str
    dtype: str
    source_dtype: str | None
    shape: list[int]
    how: str  # commands/convert/plan.py Item.kind
    bytes: int


@dataclass
class GateRun:
    engine: str
    version: str
    findings: list[Finding]


@dataclass
class Gate:
    """convert's gate: check's rules on the planned output (or on SRC: ``on``)."""

    ok: bool
    engines: list[GateRun]
    on: Literal["source"] | None = optional()  # run on SRC, which no plan could be made of
    why: Literal["target", "config_types"] | None = optional()


@dataclass(kw_only=True)
class ConvertReport(Report):
    """``weightcheck convert``: schema ``weightcheck.convert/1``; ``written`` is None for a dry
    run and a refused conversion."""

    SCHEMA_NAME = "convert"

    schema: Literal["weightcheck.convert/1"] = field(default="weightcheck.convert/1")
    source: str
    source_dialect: str | None
    to: str
    out: str
    shards: list[str]
    tensor_rows: list[PlannedTensor] = key("tensors")
    config_changes: list[str]
    notes: list[str]
    config: dict[str, Any] | None  # the config written
    reindex: dict[str, Any] | None = optional()  # --vocab-from
    check: Gate | None = None
    refused: bool = False  # the gate found errors: nothing written
    exit_status: int = 0  # 1: the gate refused
    written: dict[str, Any] | None = optional()
    dry: bool = field(default=False, metadata={"skip": True})

    @property
    def dry_run(self) -> bool:
        return self.written is None and not self.refused

    @property
    def files(self) -> tuple[str, ...]:
        """The files written into OUT (weights and index); a plan's shards; none if refused."""
        if self.refused:
            return ()
        return tuple(self.written["files"]) if self.written is not None else tuple(self.shards)

    @property
    def tensors(self) -> list[PlannedTensor]:
        return self.tensor_rows

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The gate's findings, for every engine that reads the layout in turn."""
        return tuple(f for e in (self.check.engines if self.check else ()) for f in e.findings)


# =============================================================================================
# rule, clean, error
@dataclass
class Explains:
    explains: list[str]
    subject: str
    why: str


@dataclass(kw_only=True)
class RulePage(Report):
    """``weightcheck rule CODE``: schema ``weightcheck.rule/1``. Read as a mapping too
    (``page["fix"]``), as the API gave it before it was typed."""

    SCHEMA_NAME = "rule"

    schema: Literal["weightcheck.rule/1"] = field(default="weightcheck.rule/1")
    code: str
    name: str
    severity: Severity
    severity_note: str | None
    needs: str
    summary: str
    what: str
    why: str
    reported: str
    fix: str
    explains: list[Explains]
    layout_specific: str  # why the finding depends on the layout written in, or ""

    exit_status = 0

    def __getitem__(self, name: str):
        return self.to_dict()[name]

    def get(self, name: str, default=None):
        return self.to_dict().get(name, default)


@dataclass(kw_only=True)
class RuleList(Report):
    """``weightcheck rule --all --json``: schema ``weightcheck.rules/1``."""

    SCHEMA_NAME = "rules"

    schema: Literal["weightcheck.rules/1"] = field(default="weightcheck.rules/1")
    rules: list[RulePage]
    # docs/rules.md's title, introduction and code groups (commands/rule.py document()), for
    # the Markdown document; not in the JSON
    catalog: dict | None = field(default=None, metadata={"skip": True})

    exit_status = 0


@dataclass
class KeptEntry:
    name: str
    pid: int


@dataclass(kw_only=True)
class CleanReport(Report):
    """``weightcheck clean``: the leftovers of killed converts removed (or restored) and kept."""

    SCHEMA_NAME = "clean"

    schema: Literal["weightcheck.clean/1"] = field(default="weightcheck.clean/1")
    folder: str
    removed: tuple[str, ...]
    kept_entries: list[KeptEntry] = key("kept")

    exit_status = 0

    @property
    def kept(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kept_entries)


@dataclass(kw_only=True)
class ErrorReport(Report):
    """Exit status 2: the command could not be done (bad input, a usage error)."""

    SCHEMA_NAME = "error"

    schema: Literal["weightcheck.error/1"] = field(default="weightcheck.error/1")
    command: str | None
    exit_status: Literal[2] = 2
    error: str  # the line stderr gets
    file: str | None  # the file or repo path concerned, if one is


REPORTS: tuple[type[Report], ...] = (
    InspectReport,
    CompareReport,
    CheckReport,
    ConvertReport,
    RulePage,
    RuleList,
    CleanReport,
    ErrorReport,
)
