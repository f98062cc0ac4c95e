"""Applying the rules: which run for a drafter and the inputs given (an engine, a target, a
training config, values, a training vocabulary), in code order. ``check`` and convert's gate both
run them through :func:`run`."""

from __future__ import annotations

from weightcheck import expr, rules
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
    findings = [f for f in findings if not computed_from_mistyped(ctx, f)]
    if d.looks_like_target:  # one fact, one answer: WC203 (model/drafter.py decides it)
        findings = [f for f in findings if f.code in STILL_SAID_OF_A_TARGET]
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
    return ctx, causes.fold(findings)


# a target model given as SRC (Drafter.looks_like_target): WC203 says so, and the findings that
# judge it as a drafter — names no drafter dialect explains, a wrapper prefix to convert away, the
# inventory a drafter config implies, a target class in architectures, the engines' EAGLE-3
# loaders failing on it — are that one fact seen from elsewhere (and their advice, convert it,
# cannot work): not said. Kept: what holds of any checkpoint (the shard index, config types).
STILL_SAID_OF_A_TARGET = frozenset({"WC203", "WC210", "WC212"})

# the findings a config value decides: a shape, a condition, a count computed from the config
_FROM_CONFIG = {"WC204", "WC205", "WC206", "WC207", "WC702", "WC703", "WC704"}
# the findings that say the wrong type itself (WC705, the engine's refusal, is folded under WC212)
_SAY_TYPE = {"WC212", "WC705"}


def computed_from_mistyped(ctx: Context, f: Finding) -> bool:
    """A finding computed from a config value of the wrong JSON type (mappings/config.toml gives
    each field's type; NormalizedConfig.unknown_because): nothing computes with such a value, so
    what would have (a rule about that field, a tensor whose expected shape or condition reads it)
    is no finding of its own; WC212 says the one fact."""
    n = ctx.n
    if not n.unknown_because or f.code in _SAY_TYPE or f.subject is None:
        return False
    if f.subject in n.unknown_because:
        return True
    inv = ctx.d.inventory
    if f.code not in _FROM_CONFIG or inv is None:
        return False
    t = inv.architecture.template_for(f.subject)
    if t is None:
        return False
    read: set[str] = set()
    for src in (*t.shape, t.when, t.for_each):
        if src:
            read |= expr.names(src)
    return n.blamed(read) is not None


def vocab_gate(d: Drafter, training_map):
    """--training-vocab: SRC's map (d2t, or the identity) against the training run's."""
    from weightcheck.model import vocab
    from weightcheck.rules import vocabmap

    mine = vocab.from_drafter(d)
    if mine is None:
        raise WeightcheckError(d.source.spec, "no d2t, no lm_head and no vocab size: no map")
    return vocabmap.gate(mine, training_map)
