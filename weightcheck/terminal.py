"""Where the output goes: a terminal or not, its width, colour.

Text fits the terminal's width (``COLUMNS`` overrides it; a terminal that reports 0×0 — some CI
ptys — is taken as 80 columns, shutil's fallback); in a pipe or a file there is no limit, so
``grep`` and ``awk`` see whole lines. Colour only on a terminal, honouring ``NO_COLOR`` and
``FORCE_COLOR`` (no-color.org, force-color.org; NO_COLOR wins when both are set).
"""

from __future__ import annotations

import os

MIN_WIDTH = 40  # narrower terminals are drawn as if they had this many columns
FALLBACK_WIDTH = 80  # a terminal whose size cannot be read, or reads 0


def isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def use_color(stream) -> bool:
    """Colour on a terminal; ``NO_COLOR`` (any value) turns it off, ``FORCE_COLOR`` (any value but
    0) on, even in a pipe; ``TERM=dumb`` off."""
    if os.environ.get("NO_COLOR"):
        return False
    force = os.environ.get("FORCE_COLOR")
    if force:
        return force not in ("0", "false")
    if os.environ.get("TERM") == "dumb":
        return False
    return isatty(stream)


def terminal_width(stream) -> int | None:
    """On a terminal, its width (``COLUMNS`` first, as shutil reads it; 0 or unreadable: 80); in
    a pipe or a file None: no limit (test runners export COLUMNS to their workers: a pipe still
    has no limit)."""
    if not isatty(stream):
        return None
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return max(MIN_WIDTH, int(cols))
    try:
        cols = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        cols = 0
    if cols <= 0:  # shutil.get_terminal_size's rule: a size of 0 is no size
        cols = FALLBACK_WIDTH
    return max(MIN_WIDTH, cols)
