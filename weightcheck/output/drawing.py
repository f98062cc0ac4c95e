"""The documents and emitters by report type and by format (what :func:`weightcheck.output.emit`
loads to draw anything but JSON). Each is imported when a report of its type, or its format, is
drawn: a command loads its own document module, not the other commands' (start-up)."""

from __future__ import annotations

import importlib

# format -> (module, emitter class)
EMITTERS = {
    "text": ("weightcheck.output.text", "TextEmitter"),
    "markdown": ("weightcheck.output.text", "MarkdownEmitter"),
    "concise": ("weightcheck.output.lines", "ConciseEmitter"),
    "github": ("weightcheck.output.lines", "GithubEmitter"),
}
# report class -> (module, document function)
DOCUMENTS = {
    "InspectReport": ("weightcheck.output.inspect", "inspect_document"),
    "CompareReport": ("weightcheck.output.compare", "compare_document"),
    "CheckReport": ("weightcheck.output.check", "check_document"),
    "ConvertReport": ("weightcheck.output.convert", "convert_document"),
    "EvalReport": ("weightcheck.output.eval", "eval_document"),
    "RulePage": ("weightcheck.output.pages", "rule_document"),
    "RuleList": ("weightcheck.output.pages", "rule_list_document"),
    "CleanReport": ("weightcheck.output.pages", "clean_document"),
    "ErrorReport": ("weightcheck.output.pages", "error_document"),
}


def _load(where: tuple[str, str]):
    module, name = where
    return getattr(importlib.import_module(module), name)


def document(report, **options) -> list:
    """The blocks a report is drawn from (``options``: what it shows besides, check's
    ``explain``)."""
    return _load(DOCUMENTS[type(report).__name__])(report, **options)


def draw(blocks: list, out) -> str:
    """A document in ``out``'s format (output.Output; not JSON: that is the report's)."""
    return _load(EMITTERS[out.fmt])(out.width, out.color)(blocks)
