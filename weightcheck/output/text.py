"""The text and Markdown emitters: a document (output/blocks.py) as a terminal's text or as
GitHub Markdown.

Text tables fit the width (the terminal's, ``COLUMNS``; no limit in a pipe) by wrapping cells at
spaces — the prose columns first — and never inside a word: a fix command, a tensor name or a
value longer than its cell overflows it whole, so what is copied from the screen still runs.
Markdown tables are valid GitHub tables: every row has the header's cell count, a ``|`` in a
cell is escaped and a line break is ``<br>``.
"""

from __future__ import annotations

import textwrap

from weightcheck.output.blocks import (
    Annotation,
    Blank,
    Catalog,
    Fields,
    Item,
    Line,
    Note,
    Page,
    Span,
    Table,
    Title,
    Verdict,
)

MIN_CELL = 4  # no column is wrapped narrower than this (or its longest word)
HEADER_PAD = 2  # tabulate's "simple" format pads a header by 2 (its MIN_PADDING)
SEP = 2  # spaces between two columns

_SGR = {
    "error": "1;31",
    "warning": "33",
    "info": "36",
    "ok": "32",
    "bad": "1;31",
    "bold": "1",
    "dim": "2",
}


def paint(text: str, style: str | None, color: bool) -> str:
    if not color or not style or not text:
        return text
    return f"\x1b[{_SGR[style]}m{text}\x1b[0m"


def painted(text, color: bool) -> str:
    """A piece of text (a str, or a tuple of str and Span) as a string."""
    if isinstance(text, str):
        return text
    return "".join(paint(p.text, p.style, color) if isinstance(p, Span) else p for p in text)


# =============================================================================================
# fitting a table to a width
def longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def fit(natural: list[int], floors: list[int], width: int | None, prose=()) -> list[int | None]:
    """Column widths so that a table fits ``width``: the prose columns (``prose``, indexes)
    narrowed first, widest first, then every column, none below its floor (its longest word).
    None for a column left at its natural width."""
    n = len(natural)
    if width is None or not n:
        return [None] * n
    avail = width - SEP * (n - 1)
    w = list(natural)
    for cols in (list(prose), range(n)):
        while sum(w) > avail:
            cand = [i for i in cols if w[i] > floors[i]]
            if not cand:
                break
            i = max(cand, key=lambda i: (w[i], i))
            w[i] -= 1
    return [w[i] if w[i] < natural[i] else None for i in range(n)]


def wrap_cell(text: str, width: int) -> str:
    """A cell's text in lines of at most ``width``, broken at spaces only: a word longer than
    the width stays whole on a line of its own."""
    return "\n".join(
        line
        for para in text.split("\n")
        for line in (
            textwrap.wrap(para, width, break_long_words=False, break_on_hyphens=False) or [""]
        )
    )


def table(headers, rows, width: int | None, color: bool, prose=(), styles=None, keep=()) -> str:
    """A text table (a key/value block when ``headers`` is empty) fitted to ``width``; the
    columns ``keep`` (indexes) are never narrowed."""
    rows = [["" if c is None else str(c) for c in row] for row in rows]
    ncols = len(headers) if headers else (len(rows[0]) if rows else 0)
    pad = HEADER_PAD if headers else 0
    head = [len(str(headers[i])) + pad if headers else 0 for i in range(ncols)]
    natural = [
        max([head[i]] + [len(line) for r in rows for line in (r[i].splitlines() or [""])])
        for i in range(ncols)
    ]
    floors = [
        natural[i]
        if i in keep
        else min(natural[i], max(MIN_CELL, head[i], *(longest_word(r[i]) for r in rows)))
        for i in range(ncols)
    ]
    widths = fit(natural, floors, width, prose)
    cells = [
        [wrap_cell(c, widths[i]) if widths[i] is not None else c for i, c in enumerate(r)]
        for r in rows
    ]
    if styles and color:
        cells = [
            [
                "\n".join(paint(x, styles[i](c), color) for x in cell.split("\n"))
                if i in styles
                else cell
                for i, (c, cell) in enumerate(zip(r, wr))
            ]
            for r, wr in zip(rows, cells)
        ]
    # imported when a table is drawn: tabulate costs ~35 ms of start-up (wcwidth,
    # importlib.metadata), and convert's report after a write draws none
    from tabulate import tabulate

    return tabulate(
        cells,
        headers=headers or (),
        tablefmt="simple" if headers else "plain",
        disable_numparse=True,
    )


def _md_cell(v) -> str:
    text = str(v).strip().replace("\\", "\\\\").replace("|", "\\|")
    return "<br>".join(line.strip() for line in text.splitlines()) if "\n" in text else text


def md_table(headers, rows) -> str:
    """A GitHub table: a header row, a separator, every row with the header's cell count."""
    n = len(headers)
    head = [_md_cell(h) for h in headers]
    body = [[_md_cell(c) for c in row] + [""] * (n - len(row)) for row in rows]
    widths = [max([3, len(head[i])] + [len(r[i]) for r in body]) for i in range(n)]

    def line(cells):
        return "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(cells)) + " |"

    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in body)])


# =============================================================================================
class TextEmitter:
    """The text format: tables fitted to ``width`` (None: no limit), colour when ``color``."""

    markdown = False

    def __init__(self, width: int | None = None, color: bool = False):
        self.width, self.color = width, color

    def __call__(self, blocks: list) -> str:
        return "\n".join(line for b in blocks for line in self.block(b))

    def block(self, b) -> list[str]:
        return getattr(self, "_" + type(b).__name__.lower())(b)

    def wrap(self, text: str, indent: str = "") -> str:
        """A paragraph wrapped at the width, at spaces only (as it is in a pipe)."""
        if self.width is None or len(text) + len(indent) <= self.width:
            return indent + text
        return textwrap.fill(
            text,
            self.width,
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )

    def table(self, headers, rows, prose=(), styles=None, keep=()) -> str:
        return table(headers, rows, self.width, self.color, prose, styles, keep)

    def _title(self, b: Title) -> list[str]:
        return [] if b.plain is None else [b.plain]

    def _fields(self, b: Fields) -> list[str]:
        return [self.table([], b.rows, prose=(1,), styles={0: lambda c: "bold"}, keep=(0,))]

    def _table(self, b: Table) -> list[str]:
        return [self.table(b.headers, b.rows, b.prose, b.styles)]

    def _line(self, b: Line) -> list[str]:
        text = painted(b.text, self.color)
        return [self.wrap(text) if b.wrap else text]

    def _note(self, b: Note) -> list[str]:
        return [self.wrap(b.text) if b.wrap else b.text]

    def _item(self, b: Item) -> list[str]:
        return [self.wrap(f"{b.label}: {b.text}" if b.label else b.text, "  ")]

    def _verdict(self, b: Verdict) -> list[str]:
        return [f"{b.label}: {paint(b.value, b.style, self.color)}"]

    def _blank(self, b: Blank) -> list[str]:
        return [] if b.markdown_only else [""]

    def _page(self, b: Page) -> list[str]:
        out = [paint(b.title, "bold", self.color), self.wrap(b.summary), ""]
        for s in b.sections:
            out.append(self.wrap(f"{paint(s.label + ':', 'bold', self.color)} {s.text}"))
        return out

    def _catalog(self, b: Catalog) -> list[str]:
        return self._table(b.index)

    def _annotation(self, b: Annotation) -> list[str]:
        return []


class MarkdownEmitter(TextEmitter):
    """GitHub Markdown: headings, GitHub tables, bullets; nothing wrapped, nothing coloured."""

    markdown = True

    def __init__(self, width=None, color=False):
        super().__init__(None, False)

    def table(self, headers, rows, prose=(), styles=None, keep=()) -> str:
        rows = [["" if c is None else str(c) for c in row] for row in rows]
        return md_table(headers if headers else [""] * len(rows[0] if rows else []), rows)

    def _title(self, b: Title) -> list[str]:
        return [f"## {b.text}\n"]

    def _note(self, b: Note) -> list[str]:
        return ["- " + b.text]

    def _item(self, b: Item) -> list[str]:
        return ["- " + b.text]

    def _verdict(self, b: Verdict) -> list[str]:
        return [f"**{b.label}: {b.value}**"]

    def _blank(self, b: Blank) -> list[str]:
        return [""]

    def _page(self, b: Page) -> list[str]:
        return ["\n\n".join(self.page(b))]

    def page(self, b: Page) -> list[str]:
        return [f"{'#' * b.level} {b.title}"] + [f"{s.doc} {s.text}" for s in b.sections if s.doc]

    def _catalog(self, b: Catalog) -> list[str]:
        parts = [f"# {b.title}", b.intro.strip()]
        for title, intro, pages in b.groups:
            parts.append(f"## {title}")
            if intro:
                parts.append(intro.strip())
            parts += ["\n\n".join(self.page(p)) for p in pages]
        return ["\n\n".join(parts)]
