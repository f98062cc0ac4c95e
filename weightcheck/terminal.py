"""Where the output goes: a terminal or not, its width, colour.

Text fits a width: ``COLUMNS`` when it is set (a positive number), else the terminal's (one that
reports 0×0 — some CI ptys — is taken as 80 columns, shutil's fallback), else, in a pipe or a
file (a CI log, ``| less``), 100 columns; never narrower than 40. ``--format concise`` is the one
line per finding for ``grep``. Colour only on a terminal, honouring ``NO_COLOR`` and
``FORCE_COLOR`` (no-color.org, force-color.org; NO_COLOR wins when both are set).
"""

from __future__ import annotations

import os

MIN_WIDTH = 40  # narrower terminals are drawn as if they had this many columns
FALLBACK_WIDTH = 80  # a terminal whose size cannot be read, or reads 0
PIPE_WIDTH = 100  # a pipe or a file without COLUMNS: what a CI log or a pager shows readably


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


def terminal_width(stream) -> int:
    """The width text is drawn at on ``stream``: ``COLUMNS`` when set (a positive number), else
    the terminal's (0 or unreadable: 80), else (a pipe, a file) 100; at least 40."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return max(MIN_WIDTH, int(cols))
    if not isatty(stream):
        return PIPE_WIDTH
    try:
        n = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        n = 0
    if n <= 0:  # shutil.get_terminal_size's rule: a size of 0 is no size
        n = FALLBACK_WIDTH
    return max(MIN_WIDTH, n)
