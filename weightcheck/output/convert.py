"""convert's document: the plan (with ``--dry-run``, every tensor's source, output name, file,
dtype, shape), the config changes, what the gate's check found, and what was written or why
nothing was."""

from __future__ import annotations

from weightcheck.output.blocks import (
    Blank,
    Line,
    Note,
    Span,
    Table,
    Title,
    human_bytes,
    shape_str,
)
from weightcheck.output.findings import SEVERITY_STYLE, counts, findings_block
from weightcheck.reports.convert import ConvertReport

_HOW = {
    "renamed": "renamed",
    "copy": "copied as they were",
    "cast": "cast",
    "pickle": "read from a pickle",
    "embed-from-target": "taken from the target",
    "head-from-target": "gathered from the target",
    "reindex": "re-indexed",
    "vocab-map": "written from the map",
}
_REFUSED_ON_SOURCE = {
    "config_types": (
        "SRC's config has values of the wrong JSON type (above); nothing written",
        " — fix them in SRC's config.json (no engine builds it as it is)",
    ),
    "target": (
        "SRC is a target model, not a drafter (above); nothing written",
        " — pass it as --target TARGET, and a drafter as SRC",
    ),
}


def _how(t) -> str:
    """A copied tensor whose name changed is *renamed*; one that kept its name is only copied."""
    return "renamed" if t.how == "copy" and t.source != t.output else t.how


def convert_document(r: ConvertReport, verbose: bool = False) -> list:
    """The plan (``--dry-run``: with the tensor-by-tensor table), or what was written (a
    summary: the table is the dry run's, and ``--json``'s)."""
    word = "plan" if r.dry or r.refused else "converted"
    blocks = [
        Title(
            f"weightcheck convert `{r.source}` → `{r.out}` ({r.to})",
            f"{word}: {r.source} ({r.source_dialect or 'no dialect'}) -> {r.out} [{r.to}]"
            + (f" ({r.shards[0]})" if r.dry and len(r.shards) == 1 else ""),
        )
    ]
    if r.dry:
        blocks += [_plan_table(r), Blank(markdown_only=True)]
    blocks += [Note(f"config: {c}") for c in r.config_changes]
    blocks += [Note(f"note: {n}") for n in r.notes]
    blocks += _gate(r, verbose)
    return blocks + _outcome(r)


def _plan_table(r: ConvertReport) -> Table:
    """Each output tensor: its source, its name in OUT ("=" where it keeps the source's), its
    file (when OUT has several), dtype, shape and how it is made."""
    shards = len({t.shard for t in r.tensor_rows}) > 1
    rows = [
        (
            t.source or "-",
            "=" if t.output == t.source else t.output,
            *((t.shard,) if shards else ()),
            t.dtype,
            shape_str(t.shape),
            t.how,
        )
        for t in r.tensor_rows
    ]
    heads = ["source tensor", "output", *(("file",) if shards else ()), "dtype", "shape", "how"]
    return Table(heads, rows)


def _gate(r: ConvertReport, verbose: bool = False) -> list:
    """What convert's gate (check on the planned output) found, per engine: a line, then its
    findings (grouped as check shows them; ``verbose``: with their details)."""
    g = r.check
    if not g:
        return []
    out = []
    on = "the source" if g.on == "source" else "the output"
    for e in g.engines:
        fs = e.findings
        n = counts(fs)
        verdict = (
            (Span("passes", "ok"),)
            if not fs
            else (", ".join(f"{n[k]} {k}(s)" for k in SEVERITY_STYLE if n.get(k)),)
        )
        out.append(Line((f"check --engine {e.engine} {e.version} on {on}: ", *verdict)))
        if fs:
            out.append(findings_block(fs, verbose))
    return out


def _outcome(r: ConvertReport) -> list:
    if r.refused and r.check is not None and r.check.on == "source":
        said, advice = _REFUSED_ON_SOURCE[r.check.why or "target"]
        return [Line((Span(f"refused: {said}", "error"), advice))]
    if r.refused:
        said = "refused: the output would fail its check (above); nothing written"
        advice = " — fix the source, or pass --allow-errors to write it anyway"
        return [Line((Span(said, "error"), advice))]
    if r.dry:
        return [Line("dry run: nothing written")]
    w = r.written
    how: dict[str, int] = {}
    for t in r.tensor_rows:
        how[_how(t)] = how.get(_how(t), 0) + 1
    kinds = ", ".join(f"{how[k]} {_HOW[k]}" for k in _HOW if k in how)
    out = [
        Line(
            f"wrote {w.tensors} tensors ({human_bytes(w.bytes)}; {kinds}) in "
            f"{', '.join(w.files)}, config.json, README.md — every byte re-read and verified"
            + (", flushed to disk (--fsync)" if w.fsync else "")
        )
    ]
    out += [Line(f"note: removed {n}") for n in w.cleaned]
    if w.note:
        out.append(Line(f"note: {w.note}"))
    return out
