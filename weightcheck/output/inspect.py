"""inspect's document: the source, dialect and architecture; the config fields; the tensors;
what is missing or unknown."""

from __future__ import annotations

from weightcheck.output.blocks import (
    Blank,
    Fields,
    Line,
    Note,
    Table,
    Title,
    human_bytes,
    human_count,
    shape_str,
    source_line,
    value_str,
)
from weightcheck.reports import InspectReport


def inspect_document(r: InspectReport) -> list:
    dia = r.dialect_info
    head = [
        ("source", source_line(r.source_info)),
        (
            "dialect",
            f"{dia.name or '-'}"
            + (f" + wrapper {', '.join(dia.wrappers)}" if dia.wrappers else "")
            + (f" ({'; '.join(dia.evidence)})" if dia.evidence else ""),
        ),
        ("architecture", f"{r.architecture or '-'} ({r.architecture_info.evidence})"),
    ]
    if r.looks_like_target:
        said = f"this is a target model, not an EAGLE-3 drafter: {r.looks_like_target}"
        head.append(("warning", said))
    blocks = [Title(f"weightcheck inspect `{r.source}`"), Fields(head), Blank()]
    blocks += [_config_table(r), Blank(), _tensor_table(r), Blank()]
    tot = r.totals
    blocks.append(
        Line(
            f"{tot.tensors} tensors, {human_count(tot.parameters)} parameters "
            f"({tot.parameters}), {human_bytes(tot.bytes)}"
        )
    )
    return blocks + [Blank(markdown_only=True)] + _notes(r)


def value_from(value: str, source: str, name: str) -> str:
    """A config value and where it came from, in one cell: ``[2, 30, 58] (eagle_config.ids)``;
    the source left out where it is the field's own name."""
    return value if source in ("", name) else f"{value} ({source})"


def _config_table(r: InspectReport) -> Table:
    """The config fields the architecture reads: each value, and where it came from when that
    is not the field's own key (a nested path, ``default``, ``absent``, or what is wrong with
    a value of the wrong JSON type)."""
    c = r.config_info
    norm, prov = c.normalized, c.provenance
    problem: dict[str, str] = {}
    for p in c.problems:
        name, _, msg = p.partition(": ")
        problem.setdefault(name, msg)
    rows = [
        (
            k,
            value_from(
                value_str(norm.get(k)),
                problem.get(k, "wrong type") if prov.get(k) == "invalid" else prov.get(k, ""),
                k,
            ),
        )
        for k in c.key_fields  # the architecture's fields (commands/inspect.py key_fields)
    ]
    invalid = {k for k in c.key_fields if prov.get(k) == "invalid"}
    return Table(
        ["config", "value (from)"],
        rows,
        prose=(1,),
        styles={
            1: lambda cell: "warning" if any(problem.get(k, "") in cell for k in invalid) else None
        },
    )


def _tensor_table(r: InspectReport) -> Table:
    """Each tensor's shape, dtype, size and status; its canonical name ("=" where the name
    already is canonical, so renamed tensors stand out) only when some tensor is renamed. The
    parameter counts are the JSON's (``parameters``) and the totals line's."""
    renamed = any(t.canonical != t.name for t in r.tensors)
    rows = []
    for t in r.tensors:
        canonical = ("=" if t.canonical == t.name else (t.canonical or "?"),) if renamed else ()
        rows.append(
            (t.name, *canonical, shape_str(t.shape), t.dtype, human_bytes(t.bytes), t.status)
        )
    heads = ["tensor", *(("canonical",) if renamed else ()), "shape", "dtype", "bytes", "status"]
    status = len(heads) - 1
    return Table(
        heads,
        rows,
        prose=(status, status - 3),
        styles={status: lambda c: None if c == "ok" else "warning"},
    )


def _notes(r: InspectReport) -> list:
    def missing(m):
        return f"{m.canonical} {shape_str(m.shape)}" + (f" — {m.note}" if m.note else "")

    notes = [
        f"missing (required): {missing(m)}" for m in r.missing_tensors if m.presence == "required"
    ]
    notes += [
        f"missing (optional): {missing(m)}" for m in r.missing_tensors if m.presence != "required"
    ]
    notes += [
        f"unknown: {n} (no dialect in mappings/dialects explains this name)"
        for n in r.unknown_names
    ]
    notes += [f"config: {p}" for p in r.config_info.problems]
    notes += [f"note: {n}" for n in r.notes]
    return [Note(n) for n in notes]
