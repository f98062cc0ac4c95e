"""``weightcheck rule CODE``: a rule's page — what it checks, why, the user report behind it, the
fix — and ``rule --all``, the list.

A page is a rule's entry of mappings/rules.toml (name, severity, summary, text, what it explains),
which ships in the wheel, and what the rule needs (weightcheck/rules/); docs/rules.md is the
Markdown of every page (``weightcheck rule --all --format markdown``), kept equal by a test.
"""

from __future__ import annotations

from weightcheck.errors import WeightcheckError
from weightcheck.reports.pages import Explains, RuleCatalog, RuleGroup, RulePage
from weightcheck.rules import causes, registry
from weightcheck.rules.base import MEANS, rules_file, severity_of
from weightcheck.rules.base import page as rule_page


def pages() -> list[RulePage]:
    """Every rule's page, in code order."""
    out = []
    for code, r in registry().items():
        t = rule_page(code)
        out.append(
            RulePage(
                code=code,
                name=r.slug,
                severity=r.severity,
                severity_note=severity_note(code),
                consequence=r.consequence,
                because=because(code),
                needs=r.needs,
                summary=r.summary,
                what=_flat(t.what),
                why=_flat(t.why),
                reported=_flat(t.reported),
                fix=_flat(t.fix),
                explains=[Explains(**e) for e in causes.explained_by(code)],
                # why the finding depends on the layout the drafter is written in (the same
                # drafter in another layout need not have it: docs/consistency.md), or ""
                layout_specific=_flat(t.layout_specific),
            )
        )
    return out


def severity_note(code: str) -> str | None:
    """'error; warning when ...': a rule's severities, when a named case has another one."""
    c = rule_page(code).consequence
    if not c.case:
        return None
    cases = [f"{severity_of(x.kind)} when {_flat(x.when)}" for x in c.case]
    return "; ".join([severity_of(c.kind), *cases])


def because(code: str) -> str:
    """The consequence behind a rule's severity, for its page: 'error: the engine crashes or
    refuses the drafter. WHAT THE ENGINE DOES. A warning when CASE: the served model is ...'."""
    c = rule_page(code).consequence
    out = f"{severity_of(c.kind)}: {MEANS[c.kind]}. {_flat(c.says)}"
    for x in c.case:
        sev = severity_of(x.kind)
        out += f" {'An' if sev[0] in 'aeiou' else 'A'} {sev} when {_flat(x.when)}: {MEANS[x.kind]}."
    return out


def _flat(text: str) -> str:
    """TOML multi-line strings are wrapped for the file; a page is one paragraph per part."""
    return " ".join(text.split())


def page(code: str) -> RulePage:
    """The page of ``code`` (``WC101``, ``wc101`` or the rule's name, ``unknown-tensor-name``)."""
    want = code.strip()
    for p in pages():
        if want.upper() == p.code or want.lower() == p.name:
            return p
    codes = [p.code for p in pages()]
    raise WeightcheckError(
        None,
        f"no rule {code!r}: `weightcheck rule --all` lists the codes ({codes[0]} ... {codes[-1]})",
    )


def document() -> RuleCatalog:
    """docs/rules.md as data: the title, the introduction, each code group with its pages."""
    data = rules_file()
    ps = pages()
    groups = [
        RuleGroup(g.title, g.intro, [p for p in ps if p.code.startswith(g.prefix)])
        for g in data.group
    ]
    return RuleCatalog(data.title, data.intro, groups)
