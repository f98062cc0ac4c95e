"""``weightcheck check SRC``: the gate before training or serving.

load -> normalize -> (engine view, target, training config, values: each only when asked) ->
rules (weightcheck/rules/, documented in docs/rules.md) -> report (schema ``weightcheck.check/1``)
-> render. Exit 0 when no finding is an error, 1 otherwise, 2 when the check could not be done.
"""

from __future__ import annotations

from weightcheck.engines import aux
from weightcheck.engines import view as engine_mod
from weightcheck.errors import WeightcheckError
from weightcheck.model.drafter import Drafter, source_report
from weightcheck.rules import (
    ERROR,
    INFO,
    RULES,
    SEVERITY_ORDER,
    WARNING,
    Context,
    Finding,
    training,
)
from weightcheck.rules import values as values_mod

SCHEMA = "weightcheck.check/1"

ALL_CLEAR = (
    "weights and config check out: if acceptance is still low, look at the chat template "
    "and the training data (prompt format mismatch), not the weights"
)


def run(
    d: Drafter,
    engine: str | None = None,
    engine_version: str | None = None,
    target=None,
    training_config: str | None = None,
    values: bool = False,
    training_vocab=None,
) -> tuple[Context, list]:
    ctx = Context(drafter=d, rules=RULES, target=target, engine=engine)
    if training_vocab is not None:
        ctx.training_vocab = vocab_gate(d, training_vocab)
    if engine and engine_mod.replays(d.architecture, engine):
        ctx.engine_view = engine_mod.view(d, engine, engine_version, target)
    if training_config:
        from weightcheck.sources.base import read_json_file

        cfg = read_json_file(training_config, "training config", 10_000_000)
        if not isinstance(cfg, dict):
            raise WeightcheckError(training_config, "training config is not a JSON object")
        ctx.training = training.training_gate(d, cfg)
    if values:
        ctx.values = values_mod.value_stats(d)
        if target is not None:
            ctx.lm_head_equals_target = values_mod.lm_head_is_target_slice(ctx)
    findings: list[Finding] = []
    for r in RULES.values():
        if r.needs == "engine" and ctx.engine_view is None:
            continue
        if r.needs == "target" and ctx.target is None:
            continue
        if r.needs == "values" and ctx.values is None:
            continue
        if r.needs == "training" and ctx.training is None:
            continue
        if r.needs == "training_vocab" and ctx.training_vocab is None:
            continue
        findings.extend(r.fn(ctx))
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
    return ctx, findings


def vocab_gate(d: Drafter, training_map):
    """--training-vocab: SRC's map (d2t, or the identity) against the training run's."""
    from weightcheck.model import vocab
    from weightcheck.rules import vocabmap

    mine = vocab.from_drafter(d)
    if mine is None:
        raise WeightcheckError(d.source.spec, "no d2t, no lm_head and no vocab size: no map")
    return vocabmap.gate(mine, training_map)


def report(ctx: Context, findings: list, explain: bool = False) -> dict:
    errors = sum(1 for f in findings if f.severity == ERROR)
    warnings = sum(1 for f in findings if f.severity == WARNING)
    r = {
        "schema": SCHEMA,
        "ok": errors == 0,
        "source": source_report(ctx.d),
        "dialect": ctx.d.dialect,
        "architecture": ctx.d.architecture.name if ctx.d.architecture else None,
        "engine": None,
        "target": ctx.target.summary() if ctx.target is not None else None,
        "findings": [f.as_dict() for f in findings],
        "summary": {
            "errors": errors,
            "warnings": warnings,
            "info": sum(1 for f in findings if f.severity == INFO),
        },
        "conclusion": ALL_CLEAR
        if errors == 0
        else f"{errors} error(s): fix them before training or serving",
    }
    v = ctx.engine_view
    if v is not None:
        r["engine"] = {
            "name": v.engine,
            "version": v.version,
            "speculators_format": v.speculators_format,
            "config": v.config,
            "tensors": [
                {
                    "name": l.name,
                    "canonical": l.canonical,
                    "engine_name": l.engine_name,
                    "param": l.param,
                    "fate": l.fate,
                    "why": l.why,
                    "cite": l.cite,
                }
                for l in v.landings
            ],
            "parameters": [
                {
                    "param": p.param,
                    "canonical": p.canonical,
                    "required": p.required,
                    "state": p.state,
                    "sources": p.sources,
                    "note": p.note,
                    "cite": p.cite,
                    "shape": p.shape,
                    "winner": p.winner,
                }
                for p in v.params
            ],
            "aux_layers": v.aux,
            **v.facts(),
        }
        if ctx.target is not None:
            r["engine"]["aux_layers"]["captures_output_of_layers"] = aux.captured_layers(
                v, ctx.target.model_type, ctx.target.num_layers
            )
    if ctx.values is not None:
        r["values"] = ctx.values
    if ctx.training_vocab is not None:
        r["training_vocab"] = ctx.training_vocab.report()
    return r
