"""Fitting text to a width: paragraphs wrapped, and tables laid out so that every line fits.

Text is broken at spaces only, and never inside an *atom*: a word (a tensor name, a path), a
short bracketed list (``[128, 384]``, ``[2, 30, 58]``), a backquoted command
(`` `weightcheck convert SRC OUT` ``) or short span, or a ``weightcheck`` command written out in
a sentence (``weightcheck convert A OUT --to ENGINE --vocab-from B``: the
words after the command name that look like its arguments), so that what is copied from the screen
still runs. An atom longer than the width has a line of its own and overflows it, whole.

A table fits in one of three layouts, the first that does:

1. **columns**: each column as wide as its longest line, the ``prose`` columns narrowed first
   (widest first), then any column, none below its longest atom; cells wrap at spaces;
2. **first column above**: each row's first cell on a line of its own, the other columns as a
   table indented under it (inspect's tensor table at 80 columns: the tensor's name, then its
   shape, dtype, size);
3. **stacked**: each row as its first cell, then ``header  value`` lines indented under it (the
   engine's key-by-key table, whose three names per row no 80- or 100-column line holds).

Every command's tables go through here (output/text.py draws them), eval's as much as check's.
"""

from __future__ import annotations

import re

SEP = 2  # spaces between two columns
INDENT = 4  # the indent of what a row says under its first cell (layouts 2 and 3)
MIN_CELL = 4  # no column is wrapped narrower than this (or its longest atom)
HEADER_PAD = 2  # tabulate's "simple" format makes a column 2 wider than its header (MIN_PADDING)

# a backquoted span with what sticks to it, or a word
_WORD = re.compile(r"[^\s`]*`[^`\n]*`\S*|\S+")
COMMANDS = frozenset({"inspect", "compare", "check", "convert", "eval", "rule", "clean"})
_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(==[\w.]+)?")  # SRC, OUT, TARGET, WC305, ENGINE
_STOP = ",;:)"  # a word ending in one of these ends the command it is part of
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # a colour: no width


def width_of(text: str) -> int:
    """How many columns ``text`` takes (its colours none)."""
    return len(_SGR.sub("", text)) if "\x1b" in text else len(text)


def _arg_like(word: str, prev: str) -> bool:
    """Whether ``word`` continues a command whose previous word is ``prev``."""
    w = word.rstrip(_STOP + ".")
    if not w:
        return False
    if w.startswith("-"):
        return True
    if prev.startswith("--") and "=" not in prev:  # an option's value
        return True
    return bool(_PLACEHOLDER.fullmatch(w)) or "/" in w


SHORT_LIST = 40  # a bracketed list (a shape, aux ids) up to this long is one atom


def _glue_lists(words: list[str]) -> list[str]:
    """A short bracketed list written with spaces (``[128, 384]``, ``ids [2, 30, 58]``) as one
    word: it reads as one value."""
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        j = i
        if "[" in w and w.count("[") > w.count("]"):
            depth, j = w.count("[") - w.count("]"), i
            while depth > 0 and j + 1 < len(words):
                j += 1
                depth += words[j].count("[") - words[j].count("]")
            if depth > 0 or len(" ".join(words[i : j + 1])) > SHORT_LIST:
                j = i
        out.append(" ".join(words[i : j + 1]))
        i = j + 1
    return out


def _words(text: str) -> list[str]:
    """Words, a backquoted command (`` `weightcheck ...` ``) or short span as one; a long
    backquoted span of code (an engine's condition) breaks between its words like prose."""
    out: list[str] = []
    for w in _WORD.findall(text):
        if " " in w and not w.lstrip("(\"'").startswith("`weightcheck ") and len(w) > SHORT_LIST:
            out += w.split(" ")
        else:
            out.append(w)
    return out


def atoms(text: str) -> list[str]:
    """The unbreakable units of one paragraph (module docstring), in order."""
    words = _glue_lists(_words(text))
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if (
            w.lstrip("(\"'").rstrip(_STOP) == "weightcheck"
            and i + 1 < len(words)
            and words[i + 1].rstrip(_STOP + ".") in COMMANDS
        ):
            j = i + 2
            while (
                j < len(words)
                and not words[j - 1].endswith(tuple(_STOP))
                and _arg_like(words[j], words[j - 1])
            ):
                j += 1
            out.append(" ".join(words[i:j]))
            i = j
        else:
            out.append(w)
            i += 1
    return out


def longest_atom(text: str) -> int:
    return max((width_of(a) for para in text.split("\n") for a in atoms(para)), default=0)


def wrap(text: str, width: int | None, indent: str = "", hang: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` (None: as it is), broken between atoms only; each
    paragraph's first line starts with ``indent``, the others with ``hang`` (default: the
    indent)."""
    hang = indent if hang is None else hang
    if width is None:
        return [(indent if k == 0 else hang) + p for k, p in enumerate(text.split("\n"))]
    out: list[str] = []
    for k, para in enumerate(text.split("\n")):
        line = indent if k == 0 else hang
        fresh = True
        for a in atoms(para):
            if fresh:
                line += a
                fresh = False
            elif width_of(line) + 1 + width_of(a) <= width:
                line += " " + a
            else:
                out.append(line)
                line = hang + a
        out.append(line)
    return out


def wrap_command(command: str, width: int | None, indent: str, hang: str) -> list[str]:
    """A shell command in lines of at most ``width`` where it can be: broken before an option
    (``--to sglang`` stays together), each line but the last ending in `` \\`` — as a shell
    reads it back, so that it still runs when copied. Fits as it is: one line."""
    if width is None or len(indent) + len(command) <= width:
        return [indent + command]
    parts: list[str] = []
    for w in command.split(" "):
        if parts and not w.startswith("-") and parts[-1].split(" ")[-1].startswith("--"):
            parts[-1] += " " + w  # an option's value stays with it
        else:
            parts.append(w)
    lines, line = [], indent + parts[0]
    for p in parts[1:]:
        # an option whose value cannot follow it within the width (a long path): the value on a
        # line of its own, still one argument to the shell
        for q in p.split(" ", 1) if len(hang) + len(p) + 2 > width else [p]:
            if len(line) + 1 + len(q) + 2 <= width:
                line += " " + q
            else:
                lines.append(line + " \\")
                line = hang + q
    return lines + [line]


def wrap_cell(text: str, width: int) -> list[str]:
    return wrap(text, width) if text else [""]


# =============================================================================================
# tables
def _widths(natural: list[int], floors: list[int], avail: int, prose) -> list[int] | None:
    """Column widths summing to at most ``avail``: the prose columns narrowed first, widest
    first, then every column, none below its floor; None when the floors do not fit."""
    if sum(floors) > avail:
        return None
    w = list(natural)
    for cols in (list(prose), range(len(w))):
        while sum(w) > avail:
            cand = [i for i in cols if w[i] > floors[i]]
            if not cand:
                break
            i = max(cand, key=lambda i: (w[i], i))
            w[i] -= 1
    return w if sum(w) <= avail else None


def _natural(headers: list[str], rows: list[list[str]], i: int) -> int:
    lines = [len(x) for r in rows for x in (r[i].split("\n") or [""])]
    return max([len(headers[i]) + HEADER_PAD if headers else 0, *lines])


def _floor(headers: list[str], rows: list[list[str]], i: int, natural: int) -> int:
    head = longest_atom(headers[i]) + HEADER_PAD if headers else 0
    return min(natural, max(MIN_CELL, head, *(longest_atom(r[i]) for r in rows)))


def grid(headers, rows, width: int | None, prose=(), keep=(), indent: int = 0):
    """The columns layout: (widths, each row's cells as line lists); None when it cannot fit
    ``width`` less ``indent``."""
    n = len(headers) if headers else (len(rows[0]) if rows else 0)
    natural = [_natural(headers, rows, i) for i in range(n)]
    if width is None:
        widths = natural
    else:
        floors = [
            natural[i] if i in keep else _floor(headers, rows, i, natural[i]) for i in range(n)
        ]
        widths = _widths(natural, floors, width - indent - SEP * (n - 1), prose)
        if widths is None:
            return None
    return widths, [[wrap_cell(c, widths[i]) for i, c in enumerate(r)] for r in rows]


def draw_grid(headers, widths, cells, styles, paint, indent: int = 0) -> list[str]:
    """A grid's lines, drawn by tabulate ("simple" under headers, "plain" without) from cells
    already wrapped to ``widths``: the headers (wrapped), a rule of dashes, the rows."""
    # imported when a table is drawn: tabulate costs ~35 ms of start-up (wcwidth,
    # importlib.metadata), and most commands' JSON and convert's report draw none
    from tabulate import tabulate

    rows = [
        [
            "\n".join(paint(x, styles[i](raw[i])) if i in styles and x else x for x in part)
            for i, part in enumerate(parts)
        ]
        for raw, parts in cells
    ]
    head = (
        ["\n".join(wrap_cell(h, max(1, widths[i] - HEADER_PAD))) for i, h in enumerate(headers)]
        if headers
        else ()
    )
    if not rows and not head:
        return []
    text = tabulate(
        rows, headers=head, tablefmt="simple" if head else "plain", disable_numparse=True
    )
    return [(" " * indent + line).rstrip() for line in text.split("\n")]


def draw_table(headers, rows, width, paint, prose=(), styles=None, keep=()) -> list[str]:
    """A table's lines in the first layout that fits ``width`` (module docstring); ``paint(text,
    style)`` colours a cell's lines, ``styles``: column -> function(cell) -> style."""
    styles = styles or {}
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    headers = [str(h) for h in headers]
    got = grid(headers, rows, width, prose, keep)
    if got is not None:
        widths, cells = got
        return draw_grid(headers, widths, list(zip(rows, cells)), styles, paint)
    if len(rows[0] if rows else headers) > 1:
        rest = [r[1:] for r in rows]
        shift = {i - 1: s for i, s in styles.items() if i > 0}
        got = grid(
            headers[1:] if headers else [],
            rest,
            width,
            [i - 1 for i in prose if i > 0],
            [i - 1 for i in keep if i > 0],
            INDENT,
        )
        if got is not None:
            return _first_above(headers, rows, got, width, shift, paint)
    return stacked(headers, rows, width, styles, paint)


def _first_above(headers, rows, got, width, styles, paint) -> list[str]:
    widths, cells = got
    out = []
    if headers:
        out += wrap(headers[0], width)
        out += draw_grid(headers[1:], widths, [], {}, paint, INDENT)
    for r, parts in zip(rows, cells):
        out += wrap(r[0], width)
        out += draw_grid([], widths, [(r[1:], parts)], styles, paint, INDENT)
    return out


def stacked(headers, rows, width, styles, paint) -> list[str]:
    """Each row as its first cell, then ``header  value`` lines under it (values wrapped with a
    hanging indent); empty cells are left out."""
    keys = headers[1:] if headers else [""] * (len(rows[0]) - 1 if rows else 0)
    kw = max((len(k) for k in keys), default=0)
    out = []
    for r in rows:
        out += wrap(r[0], width)
        for i, (k, v) in enumerate(zip(keys, r[1:]), start=1):
            if not v:
                continue
            lead = " " * INDENT + k.ljust(kw) + " " * SEP
            lines = wrap(v, width, lead, " " * len(lead))
            if i in styles:
                lines = [x[: len(lead)] + paint(x[len(lead) :], styles[i](v)) for x in lines]
            out += lines
    return out
