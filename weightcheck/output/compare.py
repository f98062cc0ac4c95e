"""compare's document: both sources, the verdict and its reasons — each difference once: what
a table lists (a tensor on one side only, a shape, a dtype, a config field) is counted, not
repeated — the tables, the bytes, the vocabulary maps; and one annotation per reason for the
one-line formats."""

from __future__ import annotations

from weightcheck.output.blocks import (
    Annotation,
    Blank,
    Fields,
    Item,
    Line,
    Note,
    Span,
    Table,
    Title,
    Verdict,
    shape_str,
    value_str,
)
from weightcheck.reports.compare import CompareReport, TensorValues
from weightcheck.rules.base import Finding
from weightcheck.rules.grouping import group

_TABLE_SUMMARY = {
    "only": "{n} tensor(s) on one side only",
    "shape": "{n} tensor shape(s) differ",
    "dtype": "{n} tensor dtype(s) differ",
    "config": "{n} config field(s) differ",
}
CATEGORY_ORDER = ["architecture", "serving", "informational"]


def said_once(texts: list[str]) -> list[str]:
    """Reasons that differ in one word only (``X missing in B``) as one line listing the words."""
    if len(texts) < 2:
        return list(texts)
    items = [Finding("", "info", t) for t in texts]
    return [g.finding.message for g in group(items)]


def once(diffs) -> list[str]:
    """Each difference once: what a table below lists is counted here, not repeated; the rest
    said once."""
    counted: dict[str, int] = {}
    for d in diffs:
        if d.tabled:
            counted[d.kind] = counted.get(d.kind, 0) + 1
    return said_once([d.text for d in diffs if not d.tabled]) + [
        _TABLE_SUMMARY[k].format(n=n) + " (table below)" for k, n in counted.items()
    ]


def vocab_line(v) -> str:
    """compare's vocabulary maps in a line: '32,000 draft tokens each: 27,114 shared, 9,870 at
    the same index'."""
    na, nb = v.a_draft, v.b_draft
    sizes = f"{na:,} draft tokens each" if na == nb else f"{na:,} and {nb:,} draft tokens"
    idn = [s for s, on in (("A", v.a_identity), ("B", v.b_identity)) if on]
    tail = f" ({' and '.join(idn)} without d2t: the identity map)" if idn else ""
    ph = [s for s, on in (("A", v.a_placeholder), ("B", v.b_placeholder)) if on]
    if ph:  # all-zero d2t: not a map built from data (model/vocab.py is_placeholder)
        tail += (
            f" ({' and '.join(ph)}: d2t all zeros, the target's first ids — the placeholder "
            "SpecForge writes before building the map from data)"
        )
    return f"vocab: {sizes}: {v.shared:,} shared, {v.same_index:,} at the same index{tail}"


def compare_document(r: CompareReport) -> list:
    blocks = [Title("weightcheck compare"), Fields([_side("A", r.a), _side("B", r.b)]), Blank()]
    blocks.append(Verdict("verdict", r.verdict.upper(), "bad" if r.exit_status else "ok"))
    # each difference is listed once: in its table below, not again as a reason
    blocks += [Item(x, "reason") for x in once(r.reasons)]
    stricts = once(r.strict_failures)
    if r.strict and stricts:
        blocks.append(Line("strict mode fails on:"))
    blocks += [Item(s, "strict" if r.strict else "note") for s in stricts]
    blocks += [Blank()] + _tables(r)
    by = r.bytes
    blocks.append(
        Line(
            f"{len(r.tensors)} paired tensors: {by.equal} byte-identical, {by.different} "
            f"different, {by.not_compared} not compared"
        )
    )
    if r.vocab:
        blocks += [Note(vocab_line(r.vocab)), Note(r.vocab.meaning)]
    if r.notes:
        blocks.append(Blank(markdown_only=True))
    blocks += [Note(f"note: {n}") for n in r.notes]
    return blocks + _annotations(r)


def _said(config_value, weights_value) -> str:
    """A config value, and what the side's weights hold where they contradict it (WC409)."""
    if weights_value is None:
        return value_str(config_value)
    return f"{value_str(config_value)} (weights: {value_str(weights_value)})"


def _side(name: str, s) -> tuple[str, str]:
    """``A  path (dialect, architecture)``: where a side was read from (a Hub source with its
    revision and commit) and what it is; its files are inspect's to list."""
    src = s.source
    rev = f" @ {src.revision} (commit {src.commit})" if src.kind == "hub" else ""
    return name, f"{src.location}{rev} ({s.dialect or 'no dialect'}, {s.architecture or '-'})"


def _tables(r: CompareReport) -> list:
    out = []
    if r.only_in_a or r.only_in_b:

        def same(t):  # "=" where the name is the canonical one, as inspect writes it
            return "=" if t.name == t.canonical else t.name

        rows = [(t.canonical, same(t), "", t.presence or "-") for t in r.only_in_a]
        rows += [(t.canonical, "", same(t), t.presence or "-") for t in r.only_in_b]
        out += [Table(["only in one", "A", "B", "presence"], rows), Blank()]
    if r.shape_mismatches:
        rows = [(m.canonical, shape_str(m.a), shape_str(m.b)) for m in r.shape_mismatches]
        out += [Table(["shape mismatch", "A", "B"], rows), Blank()]
    if r.dtype_mismatches:
        rows = [(m.canonical, m.a, m.b) for m in r.dtype_mismatches]
        out += [Table(["dtype mismatch", "A", "B"], rows), Blank()]
    if r.config_differences:
        diffs = sorted(
            r.config_differences,
            key=lambda d: (
                CATEGORY_ORDER.index(d.category) if d.category in CATEGORY_ORDER else 3,
                d.field,
            ),
        )
        rows = [
            (d.field, d.category, _said(d.a, d.a_weights), _said(d.b, d.b_weights)) for d in diffs
        ]
        out += [
            Table(
                ["config field", "category", "A", "B"],
                rows,
                prose=(2, 3),
                styles={1: lambda c: "warning" if c == "architecture" else None},
            ),
            Blank(),
        ]
        # why a field that reads differently means the same (aux ids in two conventions)
        notes = [Note(f"{d.field}: {d.note}") for d in diffs if d.note]
        out += [*notes, Blank()] if notes else []
    if r.values is not None:
        out += [_values_table(r.values), Blank()]
    return out


def _values_table(values: dict[str, TensorValues]) -> Table:
    rows = []
    for name, v in values.items():
        if v.error:
            rows.append((name, "-", "-", "-", v.error))
            continue
        rows.append(
            (
                name,
                f"{v.max_abs_diff:.3g}",
                f"{v.rel_l2:.3g}",
                f"{v.cosine:.6f}",
                "yes" if v.bytes_equal else "no",
            )
        )
    return Table(["tensor", "max |a-b|", "rel L2", "cosine", "bytes equal"], rows, prose=(4,))


def _annotations(r: CompareReport) -> list:
    """The one-line formats: a line per reason (error), per strict difference (warning; error
    with --strict), the vocabulary maps and what they mean (a warning when rows would be read
    as other tokens), the notes; then the verdict."""
    who = f"{r.a.source.spec} vs {r.b.source.spec}"
    items = [("error", x) for x in said_once([d.text for d in r.reasons])]
    strict = "error" if r.strict else "warning"
    items += [(strict, x) for x in said_once([d.text for d in r.strict_failures])]
    v = r.vocab
    if v:  # what the text format's vocab lines say: the maps, then what they mean (the advice)
        misread = min(v.a_draft, v.b_draft) - v.same_index
        items.append(("warning" if misread else "info", f"{vocab_line(v)}; {v.meaning}"))
    items += [("info", f"note: {n}") for n in r.notes]
    title = f"weightcheck compare: {r.verdict}"
    out = [
        Annotation(sev, title, text, (f"{who}: ", Span(sev, sev), f": {text}"))
        for sev, text in items
    ]
    verdict = f"{who}: verdict: {r.verdict}"
    return out + [Annotation("info", "weightcheck compare", verdict, verdict)]
