"""The rules ``weightcheck check`` applies, each with a stable code and a page in docs/rules.md;
this file is the one list of them, in the order of their codes. The rule modules are imported
when RULES is first asked for, so commands that apply no rule (inspect, convert) do not pay for
them."""

from __future__ import annotations

import functools
from types import ModuleType

from weightcheck import mappings
from weightcheck.errors import WeightcheckError
from weightcheck.rules.base import (
    CONDITIONAL,
    CRASH,
    ERROR,
    INFO,
    MISFED,
    RULES_FILE,
    SEVERITY_ORDER,
    UNCHANGED,
    UNTRAINED,
    WARNING,
    Context,
    Finding,
    Rule,
    TrainingGate,
    rule,
    rules_file,
    severity_of,
)

__all__ = [
    "RULES",
    "Context",
    "Finding",
    "Rule",
    "TrainingGate",
    "rule",
    "ERROR",
    "WARNING",
    "INFO",
    "SEVERITY_ORDER",
    "CRASH",
    "UNTRAINED",
    "MISFED",
    "CONDITIONAL",
    "UNCHANGED",
    "severity_of",
]


def _modules() -> tuple[ModuleType, ...]:
    from weightcheck.rules import (
        engine,
        geometry,
        naming,
        target,
        tensors,
        training,
        values,
        vocab,
        vocabmap,
    )

    return (naming, tensors, vocab, vocabmap, geometry, target, engine, values, training)


@functools.cache
def registry() -> dict[str, Rule]:
    """Every rule, by code, in code order: collected from the rule modules on first use."""
    return _collect(_modules())


def _collect(modules) -> dict[str, Rule]:
    """The rules of ``modules``, each checked against its page in mappings/rules.toml."""
    out: dict[str, Rule] = {}
    for m in modules:
        for r in vars(m).values():
            if isinstance(r, Rule):
                if r.code in out:
                    raise ValueError(f"rule code {r.code} defined twice ({m.__name__})")
                out[r.code] = r
    pages = rules_file().rule
    for code in list(out) + list(pages):
        if code not in pages or code not in out:
            what = "missing" if code not in pages else "no such rule in weightcheck/rules/"
            raise WeightcheckError(mappings.where(RULES_FILE), f"rule.{code}: {what}")
    return dict(sorted(out.items()))


def __getattr__(name: str):
    """``RULES``: :func:`registry`, read when first asked for (PEP 562)."""
    if name == "RULES":
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
