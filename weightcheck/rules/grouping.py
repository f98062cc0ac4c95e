"""Say it once: findings of one code whose messages differ only in one word (a tensor name, a
shard) are shown as one finding listing what varies.

A checkpoint whose index puts 15 tensors in the wrong shard gets one WC210 line naming the 15, not
15 lines. Findings that differ in more than one place (a shape *and* a name) stay apart: their
details differ. This is presentation: ``check --json`` and the Python API keep every finding.
"""

from __future__ import annotations

import dataclasses
import re

from weightcheck.record import record
from weightcheck.rules.base import Finding

MAX_LISTED = 50  # values named in one grouped message; more are counted
_OUTER = ":,;.)"  # punctuation a varying word carries after it, kept outside the braces


def _split(message: str) -> list[str]:
    return message.split(" ")


def _varies_at(a: list[str], b: list[str]) -> int | None:
    """The one position where two messages of equal length differ, or None."""
    if len(a) != len(b):
        return None
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return diff[0] if len(diff) == 1 else None


def _listing(values: list[str]) -> str:
    """``{a, b, c}:`` for words ``a:``, ``b:``, ``c:`` (a common trailing punctuation outside);
    names that differ only in a layer number are one entry with the numbers as ranges."""
    tail = ""
    while all(v and v[-1] in _OUTER for v in values) and len({v[-1] for v in values}) == 1:
        tail = values[0][-1] + tail
        values = [v[:-1] for v in values]
    values = _layer_ranges(values)
    shown = values[:MAX_LISTED]
    more = f", … {len(values) - len(shown)} more" if len(values) > len(shown) else ""
    return "{" + ", ".join(shown) + more + "}" + tail


_NUMBERED = re.compile(r"^(.*?\.)(\d+)(\..*)$")  # layers.12.mlp...: the first dotted number
RANGED_FROM = 3  # names of one pattern said as ranges from this many on


def _layer_ranges(values: list[str]) -> list[str]:
    """``layers.[1-39].mlp.up_proj.weight`` for the 39 names ``layers.1.mlp.up_proj.weight`` to
    ``layers.39.…`` (each pattern at its first name's place; fewer than RANGED_FROM stay as they
    are): a config that names 40 layers over a one-layer checkpoint is 9 entries, not 351."""
    by: dict[tuple[str, str], list[int]] = {}
    for v in values:
        m = _NUMBERED.match(v)
        if m:
            by.setdefault((m[1], m[3]), []).append(int(m[2]))
    out, said = [], set()
    for v in values:
        m = _NUMBERED.match(v)
        key = (m[1], m[3]) if m else None
        if key is None or len(by[key]) < RANGED_FROM:
            out.append(v)
        elif key not in said:
            said.add(key)
            out.append(f"{key[0]}[{_ranges(by[key])}]{key[1]}")
    return out


def _ranges(ns: list[int]) -> str:
    """``1-3,7,9-10`` for 1, 2, 3, 7, 9, 10 (in any order)."""
    ns = sorted(set(ns))
    runs, start = [], ns[0]
    for a, b in zip(ns, ns[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ",".join(runs)


@record(frozen=True)
class Grouped:
    """Near-identical findings said once: ``finding`` is the first of them, its message listing
    the varying word's values in braces, its subject the common one (None when they differ: the
    message names them), its detail theirs (each different one once); ``count`` how many it
    stands for, ``subjects`` their subjects in order."""

    finding: Finding
    count: int = 1
    subjects: tuple[str | None, ...] = ()


def group(findings) -> list[Grouped]:
    """Findings (in order; anything with a finding's ``code``, ``severity``, ``message``,
    ``subject`` and ``detail``) with near-identical ones merged, each keeping the first one's
    place in the list."""
    findings = list(findings)
    words = [_split(f.message) for f in findings]
    done: set[int] = set()
    out = []
    for i, f in enumerate(findings):
        if i in done:
            continue
        members = _members(findings, words, i, done)
        done.update(members)
        subjects = tuple(findings[k].subject for k in members)
        if len(members) == 1:
            out.append(Grouped(f, 1, subjects))
            continue
        pos = _varies_at(words[i], words[members[1]])
        w = list(words[i])
        w[pos] = _listing([words[k][pos] for k in members])
        details = list(dict.fromkeys(findings[k].detail for k in members if findings[k].detail))
        merged = dataclasses.replace(
            f,
            message=" ".join(w),
            subject=subjects[0] if len(set(subjects)) == 1 else None,
            detail="\n".join(details[:MAX_LISTED]) or None,
        )
        out.append(Grouped(merged, len(members), subjects))
    return out


def _members(findings: list, words: list, i: int, done: set) -> list[int]:
    """The findings said with ``findings[i]``: its own index, then those of its code and
    severity whose message differs from it in one word, at the position most of them vary."""
    f = findings[i]
    by_pos: dict[int, list[int]] = {}
    for j in range(i + 1, len(findings)):
        g = findings[j]
        if j in done or g.code != f.code or g.severity != f.severity:
            continue
        pos = _varies_at(words[i], words[j])
        if pos is not None:
            by_pos.setdefault(pos, []).append(j)
    if not by_pos:
        return [i]
    pos, more = max(by_pos.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    members = [i, *more]
    subjects = [findings[k].subject for k in members]
    # a subject that varies must be the varying word, or merging would lose it
    if len(set(subjects)) > 1 and not all(
        s and s in words[k][pos] for s, k in zip(subjects, members)
    ):
        return [i]
    return members
