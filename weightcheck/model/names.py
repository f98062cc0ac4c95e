"""The one name table (mappings/names.toml): every spelling of a drafter tensor that is not its
canonical name — who writes it, who reads it — and the non-parameter buffers exports carry.

Read by the dialects (a layout's ``[[rename]] alias = ...``; aliases of scope "any" in every
layout: model/dialects.py) and by the engines' replay (an engine file's ``[[names.rewrite]]``
names the alias its loader renames: engines/data.py), so a name one command knows every command
knows.
"""

from __future__ import annotations

import re

from weightcheck import mappings, schema
from weightcheck.schema import Alias, Buffer

FILE = "names.toml"


def _check(data: schema.NamesFile) -> None:
    seen: set[str] = set()
    for i, a in enumerate(data.alias):
        if a.written in seen:
            raise mappings.Bad(f"alias[{i}].written", f"{a.written!r} is given twice")
        seen.add(a.written)
        if a.match == "prefix" and not (a.written.endswith(".") and a.canonical.endswith(".")):
            raise mappings.Bad(
                f"alias[{i}]",
                "a prefix alias ends at a module boundary: written and canonical end in '.'",
            )


@mappings.memo
def table() -> schema.NamesFile:
    return mappings.build(schema.NamesFile, mappings.load(FILE), mappings.where(FILE), _check)


def alias(written: str) -> Alias | None:
    """The entry of a spelling, None when the table has none."""
    for a in table().alias:
        if a.written == written:
            return a
    return None


def _rewrite(a: Alias, name: str) -> str | None:
    """``name`` with ``a``'s written spelling replaced by its canonical one; None: no match."""
    if a.match == "exact":
        return a.canonical if name == a.written else None
    return a.canonical + name[len(a.written) :] if name.startswith(a.written) else None


def any_layout(name: str) -> tuple[str, Alias] | None:
    """(the name with a legacy spelling of scope "any" replaced, the alias) — the names every
    layout reads — or None when none applies."""
    for a in table().alias:
        if a.scope == "any":
            out = _rewrite(a, name)
            if out is not None:
                return out, a
    return None


def unread_spelling(name: str) -> Alias | None:
    """The legacy alias (scope "any") whose written spelling ``name`` carries (anywhere, as the
    engines match substrings), for saying why an engine that does not rename it finds no
    parameter."""
    for a in table().alias:
        if a.scope == "any" and a.written.rstrip(".") in name:
            return a
    return None


def buffer_of(name: str) -> Buffer | None:
    """The non-parameter buffer ``name`` is, None for any other name."""
    for b in table().buffer:
        if re.search(b.pattern, name):
            return b
    return None
