"""Drawing reports: each report (weightcheck/reports.py) becomes a document of neutral blocks
(output/blocks.py: key-value rows, tables, notes, verdicts, annotations) and one emitter per
format draws it — text (output/text.py, fitted to the terminal, coloured on a terminal only),
Markdown, concise and GitHub workflow commands (output/lines.py); JSON is the report's own
``to_json()``. Commands never branch on the format.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from weightcheck.output.check import check_document
from weightcheck.output.compare import compare_document
from weightcheck.output.convert import convert_document
from weightcheck.output.inspect import inspect_document
from weightcheck.output.lines import ConciseEmitter, GithubEmitter
from weightcheck.output.pages import clean_document, error_document, rule_document, rules_document
from weightcheck.output.text import MarkdownEmitter, TextEmitter
from weightcheck.reports import (
    CheckReport,
    CleanReport,
    CompareReport,
    ConvertReport,
    ErrorReport,
    InspectReport,
    RuleList,
    RulePage,
)
from weightcheck.terminal import terminal_width, use_color

EMITTERS = {
    "text": TextEmitter,
    "markdown": MarkdownEmitter,
    "concise": ConciseEmitter,
    "github": GithubEmitter,
}
DOCUMENTS = {
    InspectReport: inspect_document,
    CompareReport: compare_document,
    CheckReport: check_document,
    ConvertReport: convert_document,
    RulePage: rule_document,
    CleanReport: clean_document,
    ErrorReport: error_document,
}


@dataclass(frozen=True)
class Output:
    """How to draw: the format, the width text fits (None: no limit), colour or not."""

    fmt: str = "text"
    width: int | None = None
    color: bool = False

    @classmethod
    def to(cls, fmt: str = "text", stream=None) -> "Output":
        """The settings for writing ``fmt`` to ``stream`` (stdout by default)."""
        stream = stream if stream is not None else sys.stdout
        return cls(
            fmt,
            terminal_width(stream) if fmt == "text" else None,
            fmt in ("text", "concise") and use_color(stream),
        )


def document(report) -> list:
    """The blocks a report is drawn from."""
    if isinstance(report, RuleList):
        c = report.catalog or {}
        return rules_document(report, c.get("title", ""), c.get("intro", ""), c.get("groups", ()))
    return DOCUMENTS[type(report)](report)


def draw(blocks: list, out: Output) -> str:
    """A document in ``out``'s format (not JSON: that is the report's)."""
    return EMITTERS[out.fmt](out.width, out.color)(blocks)


def emit(report, out: Output, **options) -> str:
    """What a command prints: ``--json``'s report, or its document drawn in the format.
    ``options``: what the document shows besides (check: ``explain``)."""
    if out.fmt == "json":
        return report.to_json()
    if options:
        return draw(DOCUMENTS[type(report)](report, **options), out)
    return draw(document(report), out)
