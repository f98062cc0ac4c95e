"""check's findings as a table (grouped: near-identical findings once, consequences indented
under the finding whose cause explains them), shared by check's and convert's documents."""

from __future__ import annotations

from weightcheck.output.blocks import Table
from weightcheck.rules.grouping import group

SEVERITY_STYLE = {"error": "error", "warning": "warning", "info": "info"}
MAX_CONSEQUENCES = 3  # of one code under a root, shown one by one; more are one row


def findings_table(findings: list[dict]) -> Table:
    """check's findings table (grouped findings in, consequences indented under their root)."""
    return Table(
        ["code", "severity", "subject", "message"],
        finding_rows(findings),
        prose=(3, 2),
        styles={1: lambda c: SEVERITY_STYLE.get(c)},
    )


def finding_rows(findings: list[dict], depth: int = 0) -> list[tuple]:
    """(code, severity, subject, message) rows: each finding, then the consequences its cause
    explains (rules/causes.py) indented under it, near-identical ones said once."""
    rows = []
    for f in findings:
        code = ("  " * (depth - 1) + "↳ " if depth else "") + f["code"]
        rows.append((code, f["severity"], f["subject"] or "", finding_message(f)))
        if f.get("consequences"):
            rows += finding_rows(_collapse(group(f["consequences"])), depth + 1)
    return rows


def _collapse(consequences: list[dict]) -> list[dict]:
    """Many consequences of one code (every parameter of 31 layers left at init) are one row:
    the first, and how many more (``--json`` lists each)."""
    by_code: dict[str, list[dict]] = {}
    for c in consequences:
        by_code.setdefault(c["code"], []).append(c)
    out = []
    for c in consequences:
        same = by_code[c["code"]]
        if len(same) <= MAX_CONSEQUENCES:
            out.append(c)
        elif c is same[0]:
            n = sum(x.get("count", 1) for x in same) - c.get("count", 1)
            out.append({**c, "message": f"{c['message']} (and {n} more like it)"})
    return out


def finding_message(f: dict) -> str:
    """A finding's message with its fix (``fix``, what --json carries) when the message does not
    already say it: every format shows the same advice."""
    fix = f.get("fix")
    if not fix or fix in f["message"]:
        return f["message"]
    return f"{f['message']} (fix: {fix})"


def explains(f: dict) -> str:
    """' (explains WC206, WC703)': the codes under a root, for one-line formats."""
    codes: list[str] = []

    def walk(x):
        for c in x.get("consequences", []):
            if c["code"] not in codes:
                codes.append(c["code"])
            walk(c)

    walk(f)
    return f" (explains {', '.join(codes)})" if codes else ""


def counts(findings: list) -> dict[str, int]:
    return {sev: sum(1 for f in findings if f["severity"] == sev) for sev in SEVERITY_STYLE}
