"""Say it once: findings of one code whose messages differ only in one word (a tensor name, a
shard) are shown as one finding listing what varies.

A checkpoint whose index puts 15 tensors in the wrong shard gets one WC210 line naming the 15, not
15 lines. Findings that differ in more than one place (a shape *and* a name) stay apart: their
details differ. This is presentation: ``check --json`` and the Python API keep every finding.
"""

from __future__ import annotations

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
    """``{a, b, c}:`` for words ``a:``, ``b:``, ``c:`` (a common trailing punctuation outside)."""
    tail = ""
    while all(v and v[-1] in _OUTER for v in values) and len({v[-1] for v in values}) == 1:
        tail = values[0][-1] + tail
        values = [v[:-1] for v in values]
    shown = values[:MAX_LISTED]
    more = f", … {len(values) - len(shown)} more" if len(values) > len(shown) else ""
    return "{" + ", ".join(shown) + more + "}" + tail


def group(findings: list[dict]) -> list[dict]:
    """Findings (``Finding.as_dict()`` dicts, in order) with near-identical ones merged.

    Each result is a finding dict plus ``count`` (how many it stands for) and ``subjects`` (their
    subjects, in order). A merged finding keeps the first one's place in the list; its message
    lists the varying word's values in braces, its subject is the common one, or None when they
    differ (the message names them)."""
    words = [_split(f["message"]) for f in findings]
    done: set[int] = set()
    out = []
    for i, f in enumerate(findings):
        if i in done:
            continue
        by_pos: dict[int, list[int]] = {}
        for j in range(i + 1, len(findings)):
            g = findings[j]
            if j in done or g["code"] != f["code"] or g["severity"] != f["severity"]:
                continue
            pos = _varies_at(words[i], words[j])
            if pos is not None:
                by_pos.setdefault(pos, []).append(j)
        members, pos = [i], None
        if by_pos:
            pos, more = max(by_pos.items(), key=lambda kv: (len(kv[1]), -kv[0]))
            members += more
        subjects = [findings[k].get("subject") for k in members]
        same_subject = len(set(subjects)) == 1
        # a subject that varies must be the varying word, or merging would lose it
        if len(members) > 1 and not same_subject:
            if not all(s and s in words[k][pos] for s, k in zip(subjects, members)):
                members, subjects, same_subject = [i], subjects[:1], True
        done.update(members)
        if len(members) == 1:
            out.append({**f, "count": 1, "subjects": [f.get("subject")]})
            continue
        w = list(words[i])
        w[pos] = _listing([words[k][pos] for k in members])
        out.append(
            {
                **f,
                "message": " ".join(w),
                "subject": subjects[0] if same_subject else None,
                "count": len(members),
                "subjects": subjects,
            }
        )
    return out
