"""The neutral block model a report is drawn from: what to say, never how a format says it.

A document is a list of blocks. The text and Markdown emitters (output/text.py) draw every block
but :class:`Annotation`; the one-line emitters (output/lines.py: concise, GitHub workflow
commands) draw only the Annotations. A piece of text is a ``str`` or a tuple of strings and
:class:`Span` s (a part drawn in a style: colour on a terminal only).
"""

from __future__ import annotations

import json
from dataclasses import field
from typing import Callable, Union

from weightcheck.record import record


@record(frozen=True)
class Span:
    text: str
    style: str | None  # error, warning, info, ok, bad, bold, dim


Text = Union[str, tuple]  # a str, or a tuple of str and Span


@record
class Title:
    """Markdown's heading (``## text``); the text format's first line, ``plain``, if any."""

    text: str
    plain: str | None = None


@record
class Fields:
    """Key-value rows (the key in bold); the values are wrapped to fit the width."""

    rows: list[tuple[str, str]]


@record
class Table:
    """A table; ``prose``: the columns wrapped first to fit the width; ``styles``: column index
    -> function(cell) -> the style of that cell."""

    headers: list[str]
    rows: list[tuple]
    prose: tuple[int, ...] = ()
    styles: dict[int, Callable[[str], str | None]] = field(default_factory=dict)


@record
class FindingRow:
    """One finding as a report shows it: ``depth`` 0 for a root, 1 and more for the
    consequences its cause explains; ``subject`` "" when it has none."""

    code: str
    severity: str
    subject: str
    message: str  # the first part: what is wrong and what to do
    fix: str | None = None  # the command that fixes it
    detail: str | None = None  # the second part: the evidence, the code path, the long command
    depth: int = 0


@record
class Findings:
    """Findings, diagnostics in the text format (a head line per finding, its fix under it,
    with ``explain`` its detail too), a table in Markdown."""

    rows: list[FindingRow]
    explain: bool = False


@record
class Line:
    """A line of text, wrapped at the width as a paragraph (``wrap=False``: as it is, for a line
    whose layout is its meaning)."""

    text: Text
    wrap: bool = True


@record
class Note:
    """A note after the tables: a paragraph (``wrap``) of the text format, a bullet of
    Markdown."""

    text: str
    wrap: bool = True


@record
class Item:
    """An indented item of a list (``label: text``, wrapped with a hanging indent); Markdown's
    bullet says the text alone."""

    text: str
    label: str = ""


@record
class Verdict:
    """``label: VALUE`` with the value in ``style``; Markdown: the line in bold."""

    label: str
    value: str
    style: str | None


@record
class Blank:
    """An empty line (``markdown_only``: the paragraph break Markdown needs before a list)."""

    markdown_only: bool = False


@record
class Section:
    """A labelled part of a page: ``label: text`` on a terminal; Markdown starts it with
    ``doc`` (None: not in the Markdown page)."""

    label: str
    text: str
    doc: str | None


@record
class Page:
    """A titled page (a rule's): its title, summary (terminal only) and sections."""

    title: str
    summary: str
    sections: list[Section]
    level: int = 3  # Markdown heading level of the title


@record
class Catalog:
    """Pages in groups: a terminal shows the index (``index``, a Table), Markdown the whole
    document (its title, introduction and each group's pages)."""

    index: Table
    title: str
    intro: str
    groups: list[tuple[str, str, list[Page]]]


@record
class Annotation:
    """One finding or verdict of the one-line formats: ``concise``'s line, and GitHub's
    workflow command of ``severity`` (None: ``message`` as a plain line), ``title`` and
    ``file``. Ignored by the text and Markdown formats (their tables say it)."""

    severity: str | None
    title: str
    message: str
    concise: Text | None
    file: str | None = None


# =============================================================================================
# small formatting helpers the documents share
def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


def human_count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def shape_str(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(s) for s in shape) + "]"


def value_str(v) -> str:
    """A config value as JSON writes it (``true``, ``[2, 30, 58]``, ``{"type": "yarn"}``), never
    as Python would (``True``, ``{'type': ...}``); None (not set) is ``-``."""
    if v is None:
        return "-"
    if isinstance(v, (dict, list, tuple, bool)):
        return json.dumps(v, separators=(", ", ": "))
    return str(v)


def subject_str(subject: str | None) -> str:
    """A finding's subject as a report names it: a field, tensor or file as it is; a condition of
    an engine's data (``rope_factor is None``: the Python the engine runs) in backquotes."""
    if not subject:
        return ""
    return subject if " " not in subject or subject.startswith("`") else f"`{subject}`"


def source_line(src) -> str:
    """A source in a line: location, Hub revision and commit, kind and layout (and, for a run
    folder, the checkpoint picked); the kind and layout left out for the common case, a folder
    holding model.safetensors (the path says the rest)."""
    rev = f" @ {src.revision} (commit {src.commit})" if src.kind == "hub" else ""
    picked = f"; {src.picked}" if getattr(src, "picked", None) else ""
    if src.kind == "folder" and src.layout == "model.safetensors" and not picked:
        return src.location
    return f"{src.location}{rev} [{src.kind}, {src.layout}{picked}]"
