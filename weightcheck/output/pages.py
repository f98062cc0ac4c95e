"""The documents of ``rule`` (a rule's page; ``--all``: the index, or in Markdown
docs/rules.md), ``clean`` and of an error (exit status 2)."""

from __future__ import annotations

from weightcheck.output.blocks import Annotation, Catalog, Note, Page, Section, Table
from weightcheck.output.findings import SEVERITY_STYLE
from weightcheck.reports import CleanReport, ErrorReport, RuleList, RulePage

_RUNS = {
    "": "always",
    "engine": "with --engine",
    "target": "with --target",
    "values": "with --values",
    "training": "with --training-config",
    "training_vocab": "with --training-vocab",
    "live": "with --engine and --live",
}
# a page's parts: (field, the terminal's label, how docs/rules.md starts it)
_PARTS = (
    ("what", "What it checks", "**Checks**"),
    ("because", "Severity", "**Severity**:"),
    ("why", "Why", "**Why**:"),
    ("reported", "Reported", "**Reported**:"),
    ("fix", "Fix", "**Fix**:"),
    ("layout_specific", "Layout-specific", "**Layout-specific**:"),
)


def explains_text(page: RulePage) -> str:
    """'WC206, WC703 on the same subject: why; ...' — the consequences a rule's finding lists
    under it ([[rule.WCnnn.explains]] in mappings/rules.toml)."""
    where = {
        "same": "on the same subject",
        "any": "",
        "named": "on the tensors and fields its message names",
        "names_root": "whose messages name its subject",
    }
    parts = []
    for e in page.explains:
        rel = where.get(e.subject, f"on subjects matching `{e.subject}`")
        parts.append(f"{', '.join(e.explains)}{' ' + rel if rel else ''} ({e.why})")
    return "; ".join(parts)


def rule_page(page: RulePage) -> Page:
    """One rule's page: what it checks, why, the report behind it, the fix."""
    sections = [
        Section(label, getattr(page, key), doc)
        for key, label, doc in _PARTS
        if getattr(page, key) or key in ("what", "fix")
    ]
    if page.explains:
        doc = "**Explains** (listed under it, not as findings of their own):"
        sections.append(Section("Explains", explains_text(page), doc))
    sections.append(Section("Runs", _RUNS[page.needs], None))
    title = f"{page.code} {page.name} ({page.severity_note or page.severity})"
    return Page(title, page.summary, sections)


def rule_document(page: RulePage) -> list:
    return [rule_page(page)]


def rule_list_document(r: RuleList) -> list:
    """``rule --all``: every page, grouped as docs/rules.md groups them."""
    c = r.catalog
    return rules_document(r, c.title, c.intro, c.groups) if c else rules_document(r)


def rules_document(r: RuleList, title: str = "", intro: str = "", groups=()) -> list:
    """``rule --all``: the index of every rule; in Markdown, docs/rules.md (the introduction,
    then each group of codes with its pages)."""
    rows = [(p.code, p.name, p.severity, p.needs or "-", p.summary) for p in r.rules]
    index = Table(
        ["code", "name", "severity", "needs", "summary"],
        rows,
        prose=(4,),
        styles={2: lambda c: SEVERITY_STYLE.get(c)},
    )
    pages = [(g.title, g.intro, [rule_page(p) for p in g.pages]) for g in groups]
    return [Catalog(index, title, intro, pages)]


def clean_document(r: CleanReport) -> list:
    lines = [f"removed {e}" for e in r.removed]
    lines += [f"kept {e.name} (process {e.pid} is still running)" for e in r.kept_entries]
    if not r.removed and not r.kept_entries:
        lines.append(f"nothing to clean in {r.folder}")
    return [Note(x) for x in lines]


def error_document(r: ErrorReport) -> list:
    """An error's document: stderr has the line; the GitHub format annotates it too."""
    return [Annotation("error", "weightcheck: could not check", r.error, None)]
