"""The text and Markdown emitters: a document (output/blocks.py) as a terminal's text or as
GitHub Markdown.

Every line of text fits the width (weightcheck/terminal.py: ``COLUMNS``, the terminal's, 100 in a
pipe; None: no limit, the API's default), broken between atoms only — a fix command, a tensor
name, a path or a short list stays whole (output/fit.py: the atoms and the table layouts).
Findings are diagnostics (:meth:`TextEmitter.diagnostic`): the message under its code, the fix on
a line of its own, the detail when asked for.
Markdown tables are valid GitHub tables: every row has the header's cell count, a ``|`` in a
cell is escaped and a line break is ``<br>``.
"""

from __future__ import annotations

from weightcheck.output import fit
from weightcheck.output.blocks import (
    Annotation,
    Blank,
    Catalog,
    Fields,
    FindingRow,
    Findings,
    Item,
    Line,
    Note,
    Page,
    Span,
    Table,
    Title,
    Verdict,
)

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
# a text table, fitted to a width (output/fit.py: the atoms, the three layouts)
def wrap_cell(text: str, width: int) -> str:
    """A cell's text in lines of at most ``width``, broken between atoms only: an atom longer
    than the width stays whole on a line of its own."""
    return "\n".join(fit.wrap(text, width))


def table(headers, rows, width: int | None, color: bool, prose=(), styles=None, keep=()) -> str:
    """A text table (a key/value block when ``headers`` is empty) fitted to ``width`` (None: no
    limit); the columns ``keep`` (indexes) are never narrowed."""
    return "\n".join(
        fit.draw_table(
            headers or [], rows, width, lambda t, s: paint(t, s, color), prose, styles, keep
        )
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
        """A paragraph wrapped at the width between atoms (output/fit.py), its later lines
        indented by two more spaces."""
        return "\n".join(fit.wrap(text, self.width, indent, indent + "  "))

    def table(self, headers, rows, prose=(), styles=None, keep=()) -> str:
        return table(headers, rows, self.width, self.color, prose, styles, keep)

    def _title(self, b: Title) -> list[str]:
        return [] if b.plain is None else [self.wrap(b.plain)]  # two paths can outrun the width

    def _fields(self, b: Fields) -> list[str]:
        """``key  value`` lines, the keys in bold, each value wrapped under its own start."""
        kw = max((len(k) for k, _ in b.rows), default=0)
        out = []
        for k, v in b.rows:
            lead = paint(k, "bold", self.color) + " " * (kw - len(k) + fit.SEP)
            lines = fit.wrap(v, self.width, " " * (kw + fit.SEP))
            out += [(lead + lines[0].lstrip(" ")).rstrip()] + lines[1:]
        return out

    def _table(self, b: Table) -> list[str]:
        return [self.table(b.headers, b.rows, b.prose, b.styles)]

    def _findings(self, b: Findings) -> list[str]:
        out = []
        for f in b.rows:
            out += self.diagnostic(f, b.explain)
        return out

    def diagnostic(self, f: FindingRow, explain: bool) -> list[str]:
        """``WC305 error  d2t: message`` (the subject left out when the message names it),
        wrapped under itself; then ``fix:`` and, explained, ``detail:``, each on its own lines.
        A consequence is indented under its root, marked ``↳``."""
        lead = "  " * (f.depth - 1) + "↳ " if f.depth else ""
        hang = " " * (len(lead) + 4)
        subject = f"{f.subject}: " if f.subject and f.subject not in f.message else ""
        head = f"{lead}{f.code} {paint(f.severity, f.severity, self.color)}  "
        out = fit.wrap(subject + f.message, self.width, head, hang)
        if f.fix and f.fix not in f.message:
            out += fit.wrap_command(f.fix, self.width, hang + "fix: ", hang + "       ")
        if explain and f.detail:
            out += fit.wrap(f.detail, self.width, hang + "detail: ", hang + "        ")
        return out

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

    def _fields(self, b: Fields) -> list[str]:
        return [self.table([], b.rows)]

    def _findings(self, b: Findings) -> list[str]:
        rows = []
        for f in b.rows:
            code = ("  " * (f.depth - 1) + "↳ " if f.depth else "") + f.code
            said = f.message
            if f.fix and f.fix not in said:
                said += f" (fix: `{f.fix}`)"
            if b.explain and f.detail:
                said += "\n" + f.detail
            rows.append((code, f.severity, f.subject, said))
        return [self.table(["code", "severity", "subject", "message"], rows)]

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
