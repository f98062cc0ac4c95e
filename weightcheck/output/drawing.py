"""The documents and emitters by report type and by format (what :func:`weightcheck.output.emit`
loads to draw anything but JSON)."""

from __future__ import annotations

from weightcheck.output.check import check_document
from weightcheck.output.compare import compare_document
from weightcheck.output.convert import convert_document
from weightcheck.output.eval import eval_document
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
    EvalReport,
    InspectReport,
    RuleList,
    RulePage,
)

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
    EvalReport: eval_document,
    RulePage: rule_document,
    CleanReport: clean_document,
    ErrorReport: error_document,
}


def document(report) -> list:
    """The blocks a report is drawn from."""
    if isinstance(report, RuleList):
        c = report.catalog or {}
        return rules_document(report, c.get("title", ""), c.get("intro", ""), c.get("groups", ()))
    return DOCUMENTS[type(report)](report)


def draw(blocks: list, out) -> str:
    """A document in ``out``'s format (output.Output; not JSON: that is the report's)."""
    return EMITTERS[out.fmt](out.width, out.color)(blocks)
