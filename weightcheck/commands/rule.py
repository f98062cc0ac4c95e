"""``weightcheck rule CODE``: a rule's page — what it checks, why, the user report behind it, the
fix — and ``rule --all``, the list.

A page joins the registry (weightcheck/rules/: code, name, severity, summary, what the rule
needs) with its text in mappings/rules.toml, which ships in the wheel; docs/rules.md is the
Markdown of every page (``weightcheck rule --all --format markdown``), kept equal by a test.
"""

from __future__ import annotations

from weightcheck import mappings
from weightcheck.errors import WeightcheckError
from weightcheck.reports import Explains, RulePage
from weightcheck.rules import causes, registry


def pages() -> list[RulePage]:
    """Every rule's page, in code order."""
    text = mappings.load("rules.toml").get("rule", {})
    out = []
    for code, r in registry().items():
        t = text.get(code, {})
        out.append(
            RulePage(
                code=code,
                name=r.slug,
                severity=r.severity,
                severity_note=t.get("severity_note"),
                needs=r.needs,
                summary=r.summary,
                what=_flat(t.get("what", "")),
                why=_flat(t.get("why", "")),
                reported=_flat(t.get("reported", "")),
                fix=_flat(t.get("fix", "")),
                explains=[Explains(**e) for e in causes.explained_by(code)],
                # why the finding depends on the layout the drafter is written in (the same
                # drafter in another layout need not have it: docs/consistency.md), or ""
                layout_specific=_flat(t.get("layout_specific", "")),
            )
        )
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
    raise WeightcheckError(
        None, f"no rule {code!r}: `weightcheck rule --all` lists the codes (WC101 ... WC906)"
    )


def document() -> dict:
    """docs/rules.md as data: the title, the introduction, each code group with its pages."""
    data = mappings.load("rules.toml")
    ps = pages()
    groups = []
    for g in data["group"]:
        groups.append(
            {
                "title": g["title"],
                "intro": g.get("intro", ""),
                "pages": [p for p in ps if p.code.startswith(g["prefix"])],
            }
        )
    return {"title": data["title"], "intro": data["intro"], "groups": groups}
