"""Reading the text format back: a finding's diagnostic (its head line and the lines wrapped or
said under it) as one string, and a paragraph's wrapped lines as one line."""

from __future__ import annotations

import re

HEAD = re.compile(r"^\s*(↳ )?WC\d{3} ")


def diagnostics(text: str) -> list[str]:
    """Each finding of check's text output, its lines joined by a space (``↳ WC206 error  ...``
    for a consequence, as its head line starts)."""
    out: list[str] = []
    for line in text.splitlines():
        if HEAD.match(line):
            out.append(line.strip())
        elif out and line.startswith(" ") and line.strip() and out[-1] is not None:
            out[-1] += " " + line.strip()
        else:
            out.append(None)
    return [d for d in out if d is not None]


def unwrapped(text: str) -> str:
    """The text with every run of whitespace one space: what a wrapped paragraph says."""
    return " ".join(text.split())
