"""check's document: the source and what each engine does with it, the findings, with
``--explain`` the engine's key-by-key tables, with ``--live`` the installed loader's; and one
annotation per finding for the one-line formats."""

from __future__ import annotations

import os

from weightcheck.output.blocks import (
    Annotation,
    Blank,
    Fields,
    Item,
    Line,
    Span,
    Table,
    Title,
    source_line,
    subject_str,
    value_str,
)
from weightcheck.output.findings import explains, finding_message, findings_block
from weightcheck.output.inspect import value_from
from weightcheck.output.lines import repo_file
from weightcheck.reports.check import CheckReport, EngineReport, LiveReport, TrainerReport
from weightcheck.rules.grouping import group


def engine_verdicts(r: CheckReport) -> list[tuple[str, str]]:
    """Plain check's verdict of each engine (``sglang 0.5.23``, what it does with the drafter),
    and the training gate's answer (how much SRC initializes), as the text format's header lists
    them; the one-line formats print the same."""
    out = [(f"{e} {v.version}", v.says) for e, v in (r.engines or {}).items()]
    if r.training:
        out.append(("training", r.training.says))
        tr = r.training.trainer
        if tr and not tr.raises:
            out.append(("trainer takes", trainer_origins(tr)))
    return out


_ORIGIN_WORDS = {
    "src": "from SRC",
    "target": "from the target",
    "data": "from the run's map",
    "init": "at init",
}


def trainer_origins(tr: TrainerReport) -> str:
    """The trainer's parameters (by its own names) by where their first value comes from, in a
    line: 'specforge 0.2.0: 13 from SRC (fc.weight, lm_head.weight, midlayer.*, norm.weight), 1
    from the target (embed_tokens.weight), ...'."""
    groups: dict[str, list[str]] = {}
    for name, origin in tr.parameters.items():
        groups.setdefault(origin, []).append(name)
    said = []
    for origin in ("src", "target", "data", "init"):
        names = groups.get(origin)
        if not names:
            continue
        fams = []
        for n in names:
            parts = n.split(".")
            fam = f"{parts[0]}.*" if parts[0] == "midlayer" else n
            if parts[0] == "layers" and len(parts) > 2:
                fam = f"layers.{parts[1]}.*"
            if fam not in fams:
                fams.append(fam)
        said.append(f"{len(names)} {_ORIGIN_WORDS[origin]} ({', '.join(fams)})")
    return f"{tr.name} {tr.version}: " + ", ".join(said)


def check_document(r: CheckReport, explain: bool = False, verbose: bool = False) -> list:
    """``explain``: each finding's detail and the engine's key-by-key tables; ``verbose``: the
    details only."""
    head = [
        ("source", source_line(r.source_info)),
        ("dialect", r.dialect or "-"),
        ("architecture", r.architecture or "-"),
    ]
    if r.engine:
        e = r.engine
        head.append(("engine", f"{e.name} {e.version} (replayed from {e.loader})"))
    if r.target:
        t = r.target
        head.append(
            (
                "target",
                f"{t.spec} ({t.model_type}, hidden {t.hidden_size}, vocab {t.vocab_size}, "
                f"{t.num_hidden_layers} layers" + ("; config only" if t.config_only else "") + ")",
            )
        )
    head += engine_verdicts(r)  # plain check: each engine in a line
    blocks = [Title(f"weightcheck check `{r.source}`"), Fields(head), Blank()]
    if r.findings:
        blocks += [findings_block(r.findings, explain or verbose), Blank()]
    if explain and r.engine:
        blocks += _explain(r.engine)
    if r.live:
        blocks += live_blocks(r.live)
    blocks.append(Line(_summary(r)))
    return blocks + _annotations(r)


def _explain(e: EngineReport) -> list:
    rows = [(k, value_from(value_str(v.value), v.from_, k)) for k, v in e.config.items()]
    aux = e.aux_layers
    where = aux.from_ or f"nowhere: engine default {aux.default}"
    said = f"aux layer ids: {value_str(aux.ids)} (from {where})"
    if aux.captures_output_of_layers is not None:
        said += f"; capture the outputs of target layers {value_str(aux.captures_output_of_layers)}"
    return key_tables(e) + [
        Table(["config the engine reads", "value (from)"], rows, prose=(1,)),
        Blank(),
        Line(said),
        Blank(),
    ]


def _param_cell(x) -> str:
    """The engine parameter a tensor lands in, and the name it was looked up as when that is
    not the parameter's own (a fused parameter's shard, d2t's special name)."""
    if x.engine_name and x.engine_name != x.param and not (x.param or "").startswith(x.engine_name):
        return f"{x.param} (as {x.engine_name})" if x.param else f"(as {x.engine_name})"
    return x.param or ""


def key_tables(e: EngineReport | LiveReport, looked_up: bool = True) -> list:
    """The key-by-key table (what each checkpoint tensor becomes) and the parameters' table, of
    the replay (the report's ``engine``) or of the live run (its ``live``)."""
    rows = [
        (x.name, _param_cell(x) if looked_up else x.param or "", x.fate, x.why) for x in e.tensors
    ]
    heads = ["checkpoint tensor", "engine parameter", "fate", "why"]
    out = [
        Table(
            heads,
            rows,
            prose=(3,),
            styles={2: lambda c: "error" if c in ("dropped", "error") else None},
        ),
        Blank(),
    ]
    rows = [
        (
            p.param,
            "=" if p.canonical == p.param else p.canonical,
            p.state,
            "=" if list(p.sources) == [p.canonical] else ", ".join(p.sources),
            p.note,
        )
        for p in e.parameters
    ]
    if rows:
        out += [
            Table(
                ["engine parameter", "canonical", "state", "from", "note"],
                rows,
                prose=(4, 3),
                styles={2: lambda c: "error" if c == "random" else None},
            ),
            Blank(),
        ]
    return out


def live_blocks(lv: LiveReport) -> list:
    """--live: the installed engine's own loader, its key-by-key table, and how it compares with
    the replay."""
    head = (
        f"{lv.engine} {lv.version} installed: its own loader run on meta tensors"
        + (f" ({lv.architecture})" if lv.architecture else "")
        + (f"; the replay above is of {lv.replay_version}" if lv.replay_version else "")
    )
    out = [Line((Span("live: ", "bold"), head)), Blank()]
    f = lv.fails
    if f:
        on = f" on {subject_str(f.subject)}" if f.subject else ""
        out += [Line(f"live: {lv.engine} stops at {f.stage}{on}: {f.why}"), Blank()]
    out += key_tables(lv, looked_up=False)
    out += [Line(f"live: {n}") for n in lv.notes]
    if lv.replay_version is None:
        out.append(Line("live: no replay to compare with"))
    elif lv.disagreements:
        n = len(lv.disagreements)
        out.append(Line((Span(f"live and replay disagree on {n} point(s) (WC713):", "error"),)))
        out += [Item(x.says) for x in lv.disagreements]
    else:
        c = lv.compared
        said = f"live and replay agree on the {c.tensors if c else 0} tensor(s) both saw"
        said += (
            " and on every parameter"
            if c and c.parameters
            else " (parameters not compared: the load stops)"
        )
        out.append(Line(said))
    return out + [Blank()]


def _summary(r: CheckReport) -> tuple:
    s = r.summary
    return (
        Span(f"{s.errors} error(s)", "error" if s.errors else "ok"),
        ", ",
        Span(f"{s.warnings} warning(s)", "warning" if s.warnings else None),
        f", {s.info} info — {r.conclusion}",
    )


def _config_file(r: CheckReport) -> str | None:
    """SRC's config.json as GitHub names it in the repository, for annotations on it."""
    src = r.source_info
    if src.kind == "hub" or not src.config_file:
        return None
    base = src.location if src.kind == "folder" else os.path.dirname(src.location)
    return repo_file(os.path.join(base, src.config_file))


def _annotations(r: CheckReport) -> list:
    """The one-line formats: a line per finding (near-identical ones once, with the codes it
    explains), each engine's verdict, then the summary."""
    spec, file = r.source, _config_file(r)
    out = []
    for g in group(r.findings):
        f = g.finding
        said = finding_message(f) + explains(f)
        subject = subject_str(f.subject) if f.subject and f.subject not in f.message else None
        message = f"{spec}: " + (f"{subject}: " if subject else "") + said
        title = f"{f.code} {f.rule or ''}".strip()
        concise = (f"{spec}: ", Span(f.code, f.severity), f" {said}")
        out.append(Annotation(f.severity, title, message, concise, file))
    for e, says in engine_verdicts(r):
        out.append(
            Annotation(
                "info", f"weightcheck check: {e}", f"{spec}: {says}", f"{spec}: {e}: {says}", file
            )
        )
    s = r.summary
    counted = f"{s.errors} error(s), {s.warnings} warning(s), {s.info} info"
    concise = (
        f"Found {counted} in {spec} — {r.conclusion}"
        if r.findings
        else f"All checks passed: {spec} — {r.conclusion}"
    )
    out.append(
        Annotation(None, "", f"weightcheck check {spec}: {counted} — {r.conclusion}", concise)
    )
    return out
