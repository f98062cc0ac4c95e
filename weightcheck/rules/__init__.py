"""The rules ``weightcheck check`` applies, each with a stable code and a page in docs/rules.md;
this file is the one list of them, in the order of their codes. The rule modules are imported
when RULES is first asked for, so commands that apply no rule (inspect, convert) do not pay for
them."""

from __future__ import annotations

import functools
from types import ModuleType

from weightcheck.rules.base import (
    ERROR,
    INFO,
    SEVERITY_ORDER,
    WARNING,
    Context,
    Finding,
    Rule,
    TrainingGate,
    rule,
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
    out: dict[str, Rule] = {}
    for m in _modules():
        for r in vars(m).values():
            if isinstance(r, Rule):
                if r.code in out:
                    raise ValueError(f"rule code {r.code} defined twice ({m.__name__})")
                out[r.code] = r
    return dict(sorted(out.items()))


def __getattr__(name: str):
    """``RULES``: :func:`registry`, read when first asked for (PEP 562)."""
    if name == "RULES":
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
