"""``weightcheck check SRC``: the gate before training or serving.

load -> normalize -> (engine view, target, training config, values: each only when asked) ->
rules (weightcheck/rules/, documented in docs/rules.md) -> report (schema ``weightcheck.check/1``)
-> render. Exit 0 when no finding is an error, 1 otherwise, 2 when the check could not be done.
"""

from __future__ import annotations

import dataclasses

from weightcheck.engines import aux
from weightcheck.reports import CheckReport, Summary, source_info
from weightcheck.rules import ERROR, INFO, WARNING, Context, training
from weightcheck.rules.apply import run, vocab_gate

__all__ = ["run", "vocab_gate", "report", "ALL_CLEAR"]


ALL_CLEAR = (
    "weights and config check out: if acceptance is still low, look at the chat template "
    "and the training data (prompt format mismatch), not the weights"
)


def engine_line(summary: dict, run) -> dict:
    """An engine's line in plain check: the served view's summary and ``check --engine E``'s
    verdict (``findings``); "loads every parameter" is said only where that run finds nothing."""
    if run is None:
        return summary
    verdict = run.verdict()
    out = {**summary, "findings": verdict}
    if verdict["errors"] or verdict["warnings"]:
        counts = ", ".join(
            f"{n} {what}"
            for n, what in ((verdict["errors"], "error(s)"), (verdict["warnings"], "warning(s)"))
            if n
        )
        said = summary["says"]
        if summary["starts"] and said.startswith("loads every parameter"):
            said = "starts" + said[len("loads every parameter") :]
        out["says"] = (
            f"{said}; with --engine {run.engine}: {counts} ({', '.join(verdict['codes'])})"
        )
    return out


def report(ctx: Context, findings: list) -> CheckReport:
    errors = sum(1 for f in findings if f.severity == ERROR)
    r = CheckReport(
        ok=errors == 0,
        source_info=source_info(ctx.drafter),
        dialect=ctx.drafter.dialect,
        architecture=ctx.drafter.architecture.name if ctx.drafter.architecture else None,
        engine=engine_report(ctx),
        target=ctx.target.summary() if ctx.target is not None else None,
        findings=tuple(findings),
        summary=Summary(
            errors=errors,
            warnings=sum(1 for f in findings if f.severity == WARNING),
            info=sum(1 for f in findings if f.severity == INFO),
        ),
        conclusion=ALL_CLEAR
        if errors == 0
        else f"{errors} error(s): fix them before training or serving",
        live=ctx.live,
        values=ctx.values,
        training_vocab=ctx.training_vocab.report() if ctx.training_vocab is not None else None,
    )
    if ctx.engine is None:  # plain check: what each engine does with it, and its own verdict
        r.engines = {
            e: engine_line(view.summary(), (ctx.engine_runs or {}).get(e))
            for e, view in ctx.views().items()
        }
    if ctx.training is not None:
        r.training = {**ctx.training.report(), "says": training.said(ctx.training)}
    return r


def engine_report(ctx: Context) -> dict | None:
    """``--engine``: the replay, field for field (engines/view.py Landing and ParamState)."""
    v = ctx.engine_view
    if v is None:
        return None
    e = {
        "name": v.engine,
        "version": v.version,
        "loader": f"mappings/engines/{v.loader}.toml",
        "speculators_format": v.speculators_format,
        "config": v.config,
        # one object per checkpoint tensor and per engine parameter: the replay's
        # Landing and ParamState (weightcheck/engines/view.py), field for field
        "tensors": [dataclasses.asdict(x) for x in v.landings],
        "parameters": [dataclasses.asdict(p) for p in v.params],
        "aux_layers": v.aux,
        **v.facts(),
    }
    if ctx.target is not None:
        e["aux_layers"]["captures_output_of_layers"] = aux.captured_layers(
            v, ctx.target.model_type, ctx.target.num_layers
        )
    return e
