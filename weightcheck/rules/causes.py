"""One cause, one finding: the findings a root cause explains are listed under it.

The table is data: each root rule's ``[[rule.WCnnn.explains]]`` entries in mappings/rules.toml, the
codes it explains and how their subjects relate ("same", "any", "named", "names_root", or a
regular expression over the consequence's subject), applied in the file's ``cause_order``.
:func:`fold` applies it to check's findings: each consequence moves under its root
(``Finding.consequences``), and the root's severity becomes its worst consequence's, so the
exit status is what it was. Rule pages say which codes a rule explains (:func:`explained_by`).
"""

from __future__ import annotations

import dataclasses
import re

from weightcheck import mappings
from weightcheck.errors import WeightcheckError
from weightcheck.record import record
from weightcheck.rules.base import RULES_FILE, SEVERITY_ORDER, Finding, rules_file
from weightcheck.schema import Explains, RulesFile

SUBJECTS = ("same", "any", "named", "names_root")


@record(frozen=True)
class Cause:
    root: str
    explains: tuple[str, ...]
    subject: str  # "same", "any", "named", "names_root" or a regular expression
    why: str

    def relates(self, root: Finding, f: Finding, canonical: dict | None = None) -> bool:
        if f.code not in self.explains:
            return False
        if self.subject == "same":  # one tensor, whatever layout names it
            return f.subject is not None and _same(f.subject, root.subject, canonical or {})
        if self.subject == "any":
            return True
        if self.subject == "named":  # the root's message or detail names what it concerns
            return f.subject is not None and _names(_said(root), f.subject)
        if self.subject == "names_root":  # the consequence's message names the root's subject
            return root.subject is not None and _names(_said(f), root.subject)
        if f.subject is None:
            return False
        names = {f.subject, (canonical or {}).get(f.subject, f.subject)}
        return any(re.search(self.subject, n) is not None for n in names)


def _said(f: Finding) -> str:
    """What a finding says: its message and its detail (the evidence names what it concerns)."""
    return f.message + ("\n" + f.detail if f.detail else "")


def _names(message: str, name: str) -> bool:
    """``message`` names ``name`` as a whole word (a tensor or a config field)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", message) is not None


def _same(a: str, b: str | None, canonical: dict) -> bool:
    """Two subjects name the same thing: equal, or the same tensor in canonical terms (a
    checkpoint's ``layers.0.mlp.down_proj.weight`` and the parameter ``midlayer.mlp...``)."""
    if b is None:
        return False
    return a == b or canonical.get(a, a) == canonical.get(b, b)


@mappings.memo
def table() -> tuple[Cause, ...]:
    """The causes of mappings/rules.toml, in the order they are applied."""
    return parse(rules_file(), mappings.where(RULES_FILE))


def load(raw: dict, where: str) -> tuple[Cause, ...]:
    """The causes of a parsed rules file (``raw``), validated; errors name ``where``."""
    return parse(mappings.build(RulesFile, raw, where), where)


def _cause(code: str, i: int, e: Explains, rules: dict) -> Cause:
    at = f"rule.{code}.explains[{i}]"
    if not e.codes:
        raise mappings.Bad(f"{at}.codes", "must list the codes it explains")
    for c in e.codes:
        if c not in rules:
            raise mappings.Bad(f"{at}.codes", f"no rule {c!r}")
    if e.subject not in SUBJECTS:
        try:
            re.compile(e.subject)
        except re.error as err:
            raise mappings.Bad(
                f"{at}.subject",
                f"not one of {', '.join(SUBJECTS)} nor a regular expression: {err}",
            ) from None
    return Cause(code, e.codes, e.subject, e.why)


def _causes(data: RulesFile) -> tuple[Cause, ...]:
    roots = [code for code, p in data.rule.items() if p.explains]
    for code in data.cause_order:
        if code not in roots:
            raise mappings.Bad("cause_order", f"{code!r} is no rule with [[rule.{code}.explains]]")
    missing = [code for code in roots if code not in data.cause_order]
    if missing:
        raise mappings.Bad("cause_order", f"does not name {missing[0]!r}: its causes never apply")
    return tuple(
        _cause(code, i, e, data.rule)
        for code in data.cause_order
        for i, e in enumerate(data.rule[code].explains)
    )


def parse(data: RulesFile, where: str) -> tuple[Cause, ...]:
    """The causes of a rules file in the order they are applied (``cause_order``): every code a
    rule's, every subject "same", "any", "named", "names_root" or a regular expression; anything
    else is an error naming ``where``."""
    try:
        return _causes(data)
    except mappings.Bad as e:
        raise WeightcheckError(where, f"{e.path}: {e.message}") from None


class _Node:
    __slots__ = ("finding", "children")

    def __init__(self, finding: Finding):
        self.finding = finding
        self.children: list[_Node] = []

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def build(self) -> Finding:
        kids = tuple(c.build() for c in self.children)
        sev = min(
            [self.finding.severity, *(k.severity for k in kids)], key=SEVERITY_ORDER.__getitem__
        )
        return dataclasses.replace(self.finding, severity=sev, consequences=kids)


def fold(
    findings: list[Finding],
    causes: tuple[Cause, ...] | None = None,
    canonical: dict[str, str] | None = None,
) -> list[Finding]:
    """Move each consequence under its root (the first cause in table order that claims it).
    ``canonical``: checkpoint name -> canonical name, so a subject relates in any layout."""
    top = [_Node(f) for f in findings]
    for cause in table() if causes is None else causes:
        for root in [n for t in top for n in t.walk() if n.finding.code == cause.root]:
            taken = [t for t in top if t is not root and root not in list(t.walk())]
            taken = [t for t in taken if cause.relates(root.finding, t.finding, canonical)]
            if taken:
                root.children.extend(taken)
                top = [t for t in top if t not in taken]
    out = [t.build() for t in top]
    out.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
    return out


def explained_by(code: str) -> list[dict]:
    """What a rule explains, for its page: [{codes, subject, why}]."""
    return [
        {"explains": list(c.explains), "subject": c.subject, "why": c.why}
        for c in table()
        if c.root == code
    ]
