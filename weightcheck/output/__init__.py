"""Drawing reports: each report (weightcheck/reports/) becomes a document of neutral blocks
(output/blocks.py: key-value rows, tables, notes, verdicts, annotations; one module per command
builds them) and one emitter per format draws it — text (output/text.py, fitted to the width
by output/fit.py: the terminal's, COLUMNS, 100 in a pipe; coloured on a terminal only), Markdown, concise and GitHub workflow commands
(output/lines.py); JSON is the report's own ``to_json()``. Commands never branch on the format.
"""

from __future__ import annotations

import sys

from weightcheck.record import record
from weightcheck.terminal import terminal_width, use_color


@record(frozen=True)
class Output:
    """How to draw: the format, the width text fits (None: no limit), colour or not."""

    fmt: str = "text"
    width: int | None = None
    color: bool = False

    @classmethod
    def to(cls, fmt: str = "text", stream=None) -> "Output":
        """The settings for writing ``fmt`` to ``stream`` (stdout by default)."""
        stream = stream if stream is not None else sys.stdout
        return cls(
            fmt,
            terminal_width(stream) if fmt == "text" else None,
            fmt in ("text", "concise") and use_color(stream),
        )


def emit(report, out: Output, **options) -> str:
    """What a command prints: ``--json``'s report, or its document drawn in the format.
    ``options``: what the document shows besides (check: ``explain``)."""
    if out.fmt == "json":
        return report.to_json()
    # the documents and emitters, loaded only to draw: JSON needs none of them, and they cost
    # ~55 ms of a command's start-up (tabulate alone ~35 ms), more than inspect --json takes
    from weightcheck.output.drawing import document, draw

    return draw(document(report, **options), out)
