"""Applying the rules: which run for a drafter and the inputs given (an engine, a target, a
training config, values, a training vocabulary), in code order. ``check`` and convert's gate both
run them through :func:`run`."""

from __future__ import annotations

from weightcheck import rules
from weightcheck.engines import view as engine_mod
from weightcheck.errors import WeightcheckError
from weightcheck.model.drafter import Drafter
from weightcheck.rules import SEVERITY_ORDER, Context, Finding, causes, training
from weightcheck.rules import values as values_mod


def run(
    d: Drafter,
    engine: str | None = None,
    engine_version: str | None = None,
    target=None,
    training_config: str | None = None,
    values: bool = False,
    training_vocab=None,
    vocab_maps: tuple | None = None,
    live: bool = False,
) -> tuple[Context, list]:
    """Run every rule whose inputs are there. ``vocab_maps``: (d2t list, t2d bytes) when the
    caller has them already (convert's gate: the output is not written yet)."""
    ctx = Context(drafter=d, rules=rules.RULES, target=target, engine=engine)
    if vocab_maps is not None:
        ctx.set_vocab_maps(*vocab_maps)
    if training_vocab is not None:
        ctx.training_vocab = vocab_gate(d, training_vocab)
    if engine and engine_mod.replays(d.architecture, engine):
        ctx.engine_view = engine_mod.view(d, engine, engine_version, target)
    if live and engine:  # the installed engine's own loader (imports torch and the engine)
        from weightcheck.engines import live as live_mod

        ctx.live = live_mod.report(live_mod.run(d, engine, target), ctx.engine_view)
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
    for r in rules.RULES.values():
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
        if r.needs == "live" and ctx.live is None:
            continue
        findings.extend(r.fn(ctx))
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
    return ctx, causes.fold(findings)


def vocab_gate(d: Drafter, training_map):
    """--training-vocab: SRC's map (d2t, or the identity) against the training run's."""
    from weightcheck.model import vocab
    from weightcheck.rules import vocabmap

    mine = vocab.from_drafter(d)
    if mine is None:
        raise WeightcheckError(d.source.spec, "no d2t, no lm_head and no vocab size: no map")
    return vocabmap.gate(mine, training_map)
