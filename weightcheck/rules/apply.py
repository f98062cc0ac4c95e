"""Applying the rules: which run for a drafter and the inputs given (an engine, a target, a
training config, values, a training vocabulary), in code order. ``check`` and convert's gate both
run them through :func:`run`.

One fact, one answer (docs/consistency.md): plain ``check`` (no ``--engine``) is the union of
``check --engine E`` over every engine that reads the drafter. Each engine's own run is made
(:func:`engine_runs`), and a finding it gives that plain check does not give already is added
naming the engine — as a warning when another engine serves the drafter without an error, as
the error it is when none does (:func:`merge`). The engine lines of plain check are those runs'
verdicts (``EngineRun``), so a line never says "loads every parameter" where ``--engine E``
finds a problem.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

from weightcheck import expr, rules
from weightcheck.engines.data import replays
from weightcheck.engines.view import view as replay
from weightcheck.errors import WeightcheckError
from weightcheck.model import vocab
from weightcheck.model.drafter import Drafter
from weightcheck.record import record
from weightcheck.requests import CheckRequest
from weightcheck.rules import (
    CONDITIONAL,
    ERROR,
    INFO,
    SEVERITY_ORDER,
    WARNING,
    Context,
    Finding,
    causes,
    severity_of,
    training,
    vocabmap,
)
from weightcheck.rules import values as values_mod
from weightcheck.sources.base import read_json_file


@record(frozen=True)
class EngineRun:
    """What ``check --engine E`` says of the drafter (the same rules, the same inputs)."""

    engine: str
    findings: tuple[Finding, ...]  # flat: consequences not folded
    folded: tuple[Finding, ...] = ()  # as `check --engine E` lists them (one cause, one finding)

    @property
    def clean(self) -> bool:
        """The engine serves the drafter without an error."""
        return not any(f.severity == ERROR for f in self.findings)

    def verdict(self) -> dict:
        """What `check --engine E` would sum up: its findings as it lists them."""
        top = self.folded or self.findings
        codes = sorted({f.code for f in top if f.severity in (ERROR, WARNING)})
        return {
            "errors": sum(1 for f in top if f.severity == ERROR),
            "warnings": sum(1 for f in top if f.severity == WARNING),
            "codes": codes,
        }


def run(
    d: Drafter,
    request: CheckRequest,
    target=None,
    training_cfg: dict | None = None,
    training_vocab=None,
    vocab_maps: tuple | None = None,
    progress=None,
) -> tuple[Context, list]:
    """Run every rule whose inputs are there, as ``request`` asks (its engine, values, live,
    training options; commands/check.py loads what it names: ``target``, the training config
    read, the training run's vocabulary map). ``vocab_maps``: (d2t list, t2d bytes) when the
    caller has them already (convert's gate: the output is not written yet). Without an engine
    every engine's own run is merged in (module docstring); ``ctx.engine_runs`` keeps them.
    ``progress``: given the bytes ``values`` reads, as it reads them."""
    engine = request.engine_name
    ctx = Context(drafter=d, rules=rules.RULES, target=target, engine=engine, request=request)
    if vocab_maps is not None:
        ctx.set_vocab_maps(*vocab_maps)
    if training_vocab is not None:
        ctx.training_vocab = vocab_gate(d, training_vocab)
    if engine and replays(d.architecture, engine):
        ctx.engine_view = replay(d, engine, request.engine_version, target)
    if request.live and engine:  # the installed engine's own loader (imports torch, the engine)
        from weightcheck.engines import live as live_mod
        from weightcheck.engines import live_compare

        ctx.live = live_compare.report(live_mod.run(d, engine, target), ctx.engine_view)
    if training_cfg is not None:
        ctx.training = training.training_gate(
            d,
            training_cfg,
            request.allow_partial_init,
            trainer=request.trainer,
            target=target,
            training_vocab=training_vocab,
        )
    if request.values:
        ctx.values = values_mod.value_stats(d, progress=progress)
        if target is not None:
            ctx.lm_head_equals_target = values_mod.lm_head_is_target_slice(ctx)
    findings = apply(ctx)
    if engine is None:
        ctx.engine_runs = engine_runs(ctx)
        findings = merge(findings, ctx.engine_runs)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
    return ctx, causes.fold(findings, canonical=canonical_names(d))


def read_training_config(path: str) -> dict:

    cfg = read_json_file(path, "training config", 10_000_000)
    if not isinstance(cfg, dict):
        raise WeightcheckError(path, "training config is not a JSON object")
    return cfg


# the rules about training (the gate and the run's vocabulary map): the same for every engine,
# and no part of whether an engine serves the drafter
TRAINING_NEEDS = frozenset({"training", "training_vocab"})


def apply(ctx: Context, skip: frozenset = frozenset()) -> list[Finding]:
    """The findings of every rule whose input ``ctx`` has (but those whose ``needs`` is in
    ``skip``), flat (not folded)."""
    have = {
        "": True,
        "engine": ctx.engine_view is not None,
        "target": ctx.target is not None,
        "values": ctx.values is not None,
        "training": ctx.training is not None,
        "training_vocab": ctx.training_vocab is not None,
        "live": ctx.live is not None,
    }
    out: list[Finding] = []
    for r in rules.RULES.values():
        if not have[r.needs] or r.needs in skip:
            continue
        if r.engine_free:  # the same for every engine: computed once per check
            if r.code not in ctx._memo:
                ctx._memo[r.code] = list(r(ctx))
            out.extend(ctx._memo[r.code])
        else:
            out.extend(r(ctx))
    out = [f for f in out if not computed_from_mistyped(ctx, f)]
    if ctx.drafter.looks_like_target:  # one fact, one answer: WC203 (model/drafter.py decides it)
        out = [f for f in out if f.code in STILL_SAID_OF_A_TARGET]
    return out


def engine_runs(ctx: Context) -> dict[str, EngineRun]:
    """``check --engine E`` for each engine plain check shows, sharing what does not depend on
    the engine (values, the vocabulary maps read once). The training rules are left out: they
    are the same for every engine (plain check has them) and say nothing of serving."""
    runs = {}
    for e, view in ctx.views().items():
        one = dataclasses.replace(ctx, engine=e, engine_view=view, _views=None, engine_runs=None)
        flat = apply(one, skip=TRAINING_NEEDS)
        flat.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
        folded = causes.fold(flat, canonical=canonical_names(ctx.drafter))
        runs[e] = EngineRun(e, tuple(flat), tuple(folded))
    return runs


def merge(plain: list[Finding], runs: dict[str, EngineRun]) -> list[Finding]:
    """Plain check's findings and every engine's own, one row per fact (code and subject):

    * a fact an engine's run gives and plain check does not is added, naming the engines that
      give it (one row for all of them);
    * its severity is the law's: an error when some engine's run has it as an error and no other
      engine serves the drafter without an error; when another does, the served model is right
      only on the engine the finding names — the conditional consequence, a warning
      (rules/base.py severity_of); a plain-check finding below that is raised to it."""
    clean = {e: r.clean for e, r in runs.items()}
    per_fact = Counter((f.code, f.subject) for f in plain)

    def required(code: str, subject, message: str | None = None) -> str | None:
        """The severity the law requires of a fact (None: no engine has it as an error). A rule
        with several findings on one subject (WC210 on the index) is matched by message too."""

        def same(f: Finding) -> bool:
            return (
                f.code == code
                and f.subject == subject
                and (message is None or f.message == message)
            )

        hurt = [
            e for e, r in runs.items() if any(same(f) and f.severity == ERROR for f in r.findings)
        ]
        if not hurt:
            return None
        if any(c for e, c in clean.items() if e not in hurt):
            return severity_of(CONDITIONAL)  # right on the engine that serves it cleanly
        return ERROR  # the engines' own runs have it as an error: the consequence they gave

    out: list[Finding] = []
    keys = set()
    for f in plain:
        one = per_fact[(f.code, f.subject)] == 1
        need = required(f.code, f.subject, None if one else f.message)
        if need is not None and SEVERITY_ORDER[need] < SEVERITY_ORDER[f.severity]:
            f = dataclasses.replace(f, severity=need)
        out.append(f)
        keys.add((f.code, f.subject))
    added: dict[tuple, list[tuple[str, Finding]]] = {}
    for e, r in runs.items():
        for f in r.findings:
            if (f.code, f.subject) not in keys:
                added.setdefault((f.code, f.subject), []).append((e, f))
    for (code, subject), said in added.items():
        engines = list(dict.fromkeys(e for e, _ in said))
        first_engine, first = said[0]
        sev = min((f.severity for _, f in said), key=SEVERITY_ORDER.__getitem__)
        if sev == ERROR:
            sev = required(code, subject) or sev
        message = naming(first_engine, first.message)
        if len(engines) > 1:
            message += f" (also {', '.join(engines[1:])})"
        out.append(dataclasses.replace(first, severity=sev, message=message))
    return out


def naming(engine: str, message: str) -> str:
    """The message, naming the engine it is about (unless it already does)."""
    if re.search(rf"(?<![\w]){re.escape(engine)}(?![\w])", message, re.IGNORECASE):
        return message
    return f"{engine}: {message}"


def canonical_names(d: Drafter) -> dict[str, str]:
    """Checkpoint name -> canonical name, so that findings about one tensor are related whatever
    layout names it (causes.fold)."""
    return {t.name: t.canonical for t in d.tensors if getattr(t, "canonical", None)}


# a target model given as SRC (Drafter.looks_like_target): WC203 says so, and the findings that
# judge it as a drafter — names no drafter dialect explains, a wrapper prefix to convert away, the
# inventory a drafter config implies, a target class in architectures, the engines' EAGLE-3
# loaders failing on it — are that one fact seen from elsewhere (and their advice, convert it,
# cannot work): not said. Kept: what holds of any checkpoint (the shard index, config types).
STILL_SAID_OF_A_TARGET = frozenset({"WC203", "WC210", "WC212"})

# the findings a config value decides: a shape, a condition, a count computed from the config
_FROM_CONFIG = {"WC204", "WC205", "WC206", "WC207", "WC702", "WC703", "WC704"}
# the findings that say the wrong type itself (WC705, the engine's refusal, is folded under WC212)
# (WC905, the training gate's architecture comparison, says the field differs because SRC's value
# is unusable: compare says incompatible on it, so does the gate)
_SAY_TYPE = {"WC212", "WC705", "WC905"}


def computed_from_mistyped(ctx: Context, f: Finding) -> bool:
    """A finding computed from a config value of the wrong JSON type (mappings/config.toml gives
    each field's type; NormalizedConfig.unknown_because): nothing computes with such a value, so
    what would have (a rule about that field, a tensor whose expected shape or condition reads it)
    is no finding of its own; WC212 says the one fact."""
    n = ctx.normalized
    if not n.unknown_because or f.code in _SAY_TYPE or f.subject is None:
        return False
    if f.subject in n.unknown_because:
        return True
    inv = ctx.drafter.inventory
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


# what a config value of the wrong JSON type does where the engine sets it unvalidated (the
# replay's type_fates, engines/engine_config.py): the consequence of WC212 under that engine
def vocab_gate(d: Drafter, training_map):
    """--training-vocab: SRC's map (d2t, or the identity) against the training run's."""
    mine = vocab.from_drafter(d)
    if mine is None:
        raise WeightcheckError(d.source.spec, "no d2t, no lm_head and no vocab size: no map")
    return vocabmap.gate(mine, training_map)


__all__ = ["run", "apply", "engine_runs", "merge", "EngineRun", "vocab_gate", "INFO"]
