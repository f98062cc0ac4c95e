"""The reports of `weightcheck rule`, `weightcheck clean` and of an error (exit 2)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.record import record
from weightcheck.reports.base import Report, key
from weightcheck.rules.base import Consequence, Severity


@record
class Explains:
    explains: list[str]
    subject: str
    why: str


@record(kw_only=True)
class RulePage(Report):
    """``weightcheck rule CODE``: schema ``weightcheck.rule/1``. Read as a mapping too
    (``page["fix"]``), as the API gave it before it was typed."""

    SCHEMA_NAME = "rule"

    schema: Literal["weightcheck.rule/1"] = field(default="weightcheck.rule/1")
    code: str
    name: str
    severity: Severity
    # the heading's parenthesis when a named case has another severity ("error; warning when ...")
    severity_note: str | None
    # what the engine does that decides the severity (mappings/rules.toml [rule.WCnnn.consequence])
    consequence: Consequence
    # the page's sentence on it: the severity, the consequence's meaning, what the engine does,
    # and each case of another severity
    because: str
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


@record
class RuleGroup:
    """A group of codes of docs/rules.md: its title, introduction and pages."""

    title: str
    intro: str
    pages: list[RulePage]


@record
class RuleCatalog:
    """docs/rules.md as data: its title, introduction and code groups."""

    title: str
    intro: str
    groups: list[RuleGroup]


@record(kw_only=True)
class RuleList(Report):
    """``weightcheck rule --all --json``: schema ``weightcheck.rules/1``."""

    SCHEMA_NAME = "rules"

    schema: Literal["weightcheck.rules/1"] = field(default="weightcheck.rules/1")
    rules: list[RulePage]
    # docs/rules.md's title, introduction and code groups (commands/rule.py document()), for
    # the Markdown document; not in the JSON
    catalog: RuleCatalog | None = field(default=None, metadata={"skip": True})

    exit_status = 0


@record
class KeptEntry:
    name: str
    pid: int


@record(kw_only=True)
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


@record(kw_only=True)
class ErrorReport(Report):
    """Exit status 2: the command could not be done (bad input, a usage error)."""

    SCHEMA_NAME = "error"

    schema: Literal["weightcheck.error/1"] = field(default="weightcheck.error/1")
    command: str | None
    exit_status: Literal[2] = 2
    error: str  # the line stderr gets
    file: str | None  # the file or repo path concerned, if one is
