"""`weightcheck check`'s report."""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal

from weightcheck.record import record
from weightcheck.reports.base import Report, SourceInfo, key, optional
from weightcheck.rules.base import Finding, Severity


@record
class Summary:
    errors: int
    warnings: int
    info: int


@record(kw_only=True)
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
