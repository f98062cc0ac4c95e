"""The reports the commands return: one dataclass per command (inspect, compare, check, convert,
rule, clean, error), each in the module named after it (base.py: what they share), typed down to what a caller tests. The API returns them (weightcheck/api.py),
the renderer draws them (weightcheck/output/), :meth:`Report.to_dict` is ``--json``'s output
and weightcheck/schemas/*.json is generated from these classes (weightcheck/schema.py).

How a field becomes JSON: under its name, or ``metadata["key"]`` where the name a caller reads
differs from the JSON key (``CheckReport.source_info`` is JSON's ``source``);
``metadata["omit"]``: left out when None (an optional part of a report); ``metadata["skip"]``: not
in the JSON at all. Every field is typed down to its leaves (no ``dict[str, Any]``): what another
layer hands over as plain data (the replay's aux layers, a trainer's replay, --live) becomes its
record with :func:`~weightcheck.reports.base.typed`; a config file's own values are
:class:`~weightcheck.reports.base.ConfigValue`, the one open type.

A command imports only its own report's module (``from weightcheck.reports.check import
CheckReport``); ``from weightcheck.reports import CheckReport`` works too, importing that module
when the name is first asked for (PEP 562), so ``inspect`` never builds the other commands'
classes (their definitions are a measurable part of start-up: BENCHMARKS.md).
"""

from __future__ import annotations

import importlib

# every public name, and the module of this package that defines it
_WHERE = {
    "ConfigValue": "base",
    "Keyed": "base",
    "typed": "base",
    "Report": "base",
    "SourceFile": "base",
    "SourceInfo": "base",
    "key": "base",
    "optional": "base",
    "source_info": "base",
    "to_json": "base",
    "to_json_value": "base",
    "AuxConvention": "check",
    "AuxLayers": "check",
    "CheckReport": "check",
    "Compared": "check",
    "ConfigRead": "check",
    "Disagreement": "check",
    "DraftVocab": "check",
    "EngineLine": "check",
    "EngineReport": "check",
    "FieldDiff": "check",
    "LiveReport": "check",
    "LiveWarning": "check",
    "RunVerdict": "check",
    "ShapeDiff": "check",
    "Summary": "check",
    "TargetInfo": "check",
    "TensorHeader": "check",
    "TrainerReport": "check",
    "TrainingReport": "check",
    "TrainingVocab": "check",
    "ValueStats": "check",
    "ByteCounts": "compare",
    "CompareReport": "compare",
    "ConfigDifference": "compare",
    "DtypeMismatch": "compare",
    "OnlyIn": "compare",
    "PairedTensor": "compare",
    "ShapeMismatch": "compare",
    "Side": "compare",
    "TensorValues": "compare",
    "Verdict": "compare",
    "VocabOverlap": "compare",
    "ConvertReport": "convert",
    "EvalData": "eval",
    "EvalDrafter": "eval",
    "EvalReport": "eval",
    "EvalSpeed": "eval",
    "EvalStep": "eval",
    "EvalTarget": "eval",
    "Gate": "convert",
    "GateRun": "convert",
    "PlannedTensor": "convert",
    "ReindexInfo": "convert",
    "Written": "convert",
    "ArchitectureInfo": "inspect",
    "DialectInfo": "inspect",
    "InspectConfig": "inspect",
    "InspectReport": "inspect",
    "InspectTensor": "inspect",
    "MissingTensor": "inspect",
    "Totals": "inspect",
    "CleanReport": "pages",
    "ErrorReport": "pages",
    "Explains": "pages",
    "KeptEntry": "pages",
    "RuleCatalog": "pages",
    "RuleGroup": "pages",
    "RuleList": "pages",
    "RulePage": "pages",
}

__all__ = [*_WHERE, "REPORTS"]


def __getattr__(name: str):
    if name == "REPORTS":  # every command's report class, in command order (schemagen.py)
        return tuple(
            __getattr__(n)
            for n in (
                "InspectReport",
                "CompareReport",
                "CheckReport",
                "ConvertReport",
                "EvalReport",
                "RulePage",
                "RuleList",
                "CleanReport",
                "ErrorReport",
            )
        )
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
