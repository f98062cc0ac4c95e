"""check's findings as a document block (grouped: near-identical findings once, consequences
indented under the finding whose cause explains them), shared by check's and convert's
documents; and the one-line text of a finding the concise and GitHub formats print."""

from __future__ import annotations

import dataclasses

from weightcheck.output.blocks import FindingRow, Findings, subject_str
from weightcheck.rules.base import Finding
from weightcheck.rules.grouping import Grouped, group

SEVERITY_STYLE = {"error": "error", "warning": "warning", "info": "info"}
MAX_CONSEQUENCES = 3  # of one code under a root, shown one by one; more are one row


def findings_block(findings, explain: bool = False) -> Findings:
    """The findings (Finding records, ungrouped) as check prints them; ``explain``: each one's
    detail under it."""
    return Findings(finding_rows(group(findings)), explain)


def finding_rows(grouped: list[Grouped], depth: int = 0) -> list[FindingRow]:
    """Each grouped finding, then the consequences its cause explains (rules/causes.py)
    indented under it, near-identical ones said once."""
    rows = []
    for g in grouped:
        f = g.finding
        rows.append(
            FindingRow(
                f.code, f.severity, subject_str(f.subject), f.message, f.fix, f.detail, depth
            )
        )
        if f.consequences:
            rows += finding_rows(_collapse(group(f.consequences)), depth + 1)
    return rows


def _collapse(consequences: list[Grouped]) -> list[Grouped]:
    """Many consequences of one code (every parameter of 31 layers left at init) are one row:
    the first, and how many more (``--json`` lists each)."""
    by_code: dict[str, list[Grouped]] = {}
    for c in consequences:
        by_code.setdefault(c.finding.code, []).append(c)
    out = []
    for c in consequences:
        same = by_code[c.finding.code]
        if len(same) <= MAX_CONSEQUENCES:
            out.append(c)
        elif c is same[0]:
            n = sum(x.count for x in same) - c.count
            said = f"{c.finding.message} (and {n} more like it)"
            out.append(dataclasses.replace(c, finding=dataclasses.replace(c.finding, message=said)))
    return out


def finding_message(f: Finding) -> str:
    """A finding's message with its fix when the message does not already say it: the one-line
    formats' text (the text format prints the fix on a line of its own)."""
    if not f.fix or f.fix in f.message:
        return f.message
    return f"{f.message} (fix: {f.fix})"


def explains(f: Finding) -> str:
    """' (explains WC206, WC703)': the codes under a root, for one-line formats."""
    codes: list[str] = []

    def walk(x: Finding):
        for c in x.consequences:
            if c.code not in codes:
                codes.append(c.code)
            walk(c)

    walk(f)
    return f" (explains {', '.join(codes)})" if codes else ""


def counts(findings) -> dict[str, int]:
    return {sev: sum(1 for f in findings if f.severity == sev) for sev in SEVERITY_STYLE}
