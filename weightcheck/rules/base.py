"""What a rule is: a code, the inputs it needs and a function ``(ctx, finding) -> iterable of
Finding``, bound to the code by :func:`rule`; its name, consequence, one-line summary, page and
the findings it explains are its entry of mappings/rules.toml (one place for each rule;
docs/rules.md is generated from it).

A finding's severity is its consequence's, decided by :func:`severity_of` and nowhere else: a rule
says what the engine does (``finding(..., consequence="conditional")`` where the case differs from
its page's), never a severity.

A rule reads the canonical model (ctx.drafter) and, when given, the target (ctx.target), the
engine's view (ctx.engine_view), the training gate (ctx.training) and the values (ctx.values).
Nothing registers itself: weightcheck/rules/__init__.py lists the rule modules.
"""

from __future__ import annotations

import functools
from dataclasses import field
from typing import TYPE_CHECKING, Callable, Iterable, Literal

from weightcheck import expr, mappings
from weightcheck.errors import WeightcheckError
from weightcheck.model.drafter import Drafter
from weightcheck.record import record
from weightcheck.schema import Consequence, RulePage, RulesFile, Severity
from weightcheck.storage.header import FLOAT_DTYPES

if TYPE_CHECKING:  # annotations only: the rules layer reads these, never imports them at run time
    from weightcheck.engines.view import EngineView
    from weightcheck.model.target import Target
    from weightcheck.requests import CheckRequest

RULES_FILE = "rules.toml"
Needs = Literal["", "target", "engine", "values", "training", "training_vocab", "live"]
ERROR: Severity = "error"
WARNING: Severity = "warning"
INFO: Severity = "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}

# the consequences (weightcheck/schema.py Consequence), each with its severity and what it means
CRASH: Consequence = "crash"
UNTRAINED: Consequence = "untrained"
MISFED: Consequence = "misfed"
CONDITIONAL: Consequence = "conditional"
UNCHANGED: Consequence = "unchanged"
_SEVERITY: dict[Consequence, Severity] = {
    CRASH: ERROR,
    UNTRAINED: ERROR,
    MISFED: ERROR,
    CONDITIONAL: WARNING,
    UNCHANGED: INFO,
}
MEANS: dict[Consequence, str] = {
    CRASH: "the engine (or trainer) crashes or refuses the drafter",
    UNTRAINED: "the engine serves a parameter with no trained values (its initial value, a "
    "constant, NaN)",
    MISFED: "the engine feeds the drafter other values than it was trained on (other captured "
    "layers, another vocabulary map, another width)",
    CONDITIONAL: "the served model is right only under a condition the finding names (an engine, "
    "a runner, a flag, a version, a trained value)",
    UNCHANGED: "nothing the engine serves (or the trainer trains) changes",
}


def severity_of(consequence: Consequence) -> Severity:
    """The severity of a finding whose consequence is ``consequence``: the one place severities
    are decided (docs/rules.md states the rule)."""
    return _SEVERITY[consequence]


def engines_do(engines: list[str], verb: str) -> str:
    """'sglang keeps', 'sglang and vllm keep': engines as the subject of a verb (given in its
    third-person singular form)."""
    return f"{' and '.join(engines)} {agree(engines, verb)}"


def agree(engines: list[str], verb: str) -> str:
    """The verb (third-person singular: 'fails') agreeing with one engine or several."""
    return verb if len(engines) == 1 else verb[:-1]


@record(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    subject: str | None = None  # the tensor or config field concerned
    rule: str | None = None  # the rule's slug
    # the findings this one's cause explains (rules/causes.py, mappings/rules.toml)
    consequences: tuple["Finding", ...] = ()
    # the command that fixes it, when one does: ``weightcheck convert SRC OUT ...`` with SRC,
    # OUT and TARGET standing for the user's paths (tests run each on the case that triggers it)
    fix: str | None = None
    # the second part of the message (issue #32): the evidence, the engine's code path, the long
    # command; ``message`` is the first line, what is wrong and what to do (<= ~120 characters).
    # Shown under --explain/--verbose, in --json and on the rule page's example, never in a
    # table's one-line row
    detail: str | None = None

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "subject": self.subject,
            "rule": self.rule,
            "consequences": [c.as_dict() for c in self.consequences],
            "fix": self.fix,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        """The inverse of :meth:`as_dict` (a report's finding back as a Finding)."""
        return cls(
            d["code"],
            d["severity"],
            d["message"],
            d.get("subject"),
            d.get("rule"),
            tuple(cls.from_dict(c) for c in d.get("consequences", ())),
            d.get("fix"),
            d.get("detail"),
        )


def rules_file() -> RulesFile:
    """mappings/rules.toml: every rule's name, severity, page and causes."""
    return mappings.load_as(RULES_FILE, RulesFile)


def page(code: str) -> RulePage:
    """The entry of mappings/rules.toml for ``code``."""
    try:
        return rules_file().rule[code]
    except KeyError:
        raise WeightcheckError(
            mappings.where(RULES_FILE), f"rule.{code}: missing (weightcheck/rules/ has this rule)"
        ) from None


@record(frozen=True)
class Rule:
    """A rule's function bound to its code; the rest (name, severity, summary, page) is its
    entry of mappings/rules.toml."""

    code: str
    needs: Needs
    fn: Callable[["Context", Callable[..., Finding]], Iterable[Finding]]
    # reads neither the engine nor the engines' views: plain check's engine runs reuse its
    # findings (rules/apply.py) instead of computing them once per engine
    engine_free: bool = False

    @property
    def slug(self) -> str:
        return page(self.code).name

    @property
    def consequence(self) -> Consequence:
        return page(self.code).consequence.kind

    @property
    def severity(self) -> Severity:
        return severity_of(self.consequence)

    @property
    def summary(self) -> str:
        return page(self.code).summary

    def __call__(self, ctx: "Context") -> Iterable[Finding]:
        """The rule's findings: its function is given ``finding(message, subject=None,
        consequence=None, fix=None, detail=None)``, which makes a finding of this rule's code
        (``consequence``: the case's, when not the page's)."""
        return self.fn(ctx, functools.partial(ctx.finding, self.code))


def rule(code: str, needs: Needs = "", engine_free: bool = False):
    """Make ``fn(ctx, finding)`` the :class:`Rule` of ``code`` (listed by
    weightcheck/rules/__init__.py; described in mappings/rules.toml)."""

    def deco(fn) -> Rule:
        return Rule(code, needs, fn, engine_free)

    return deco


@record
class TrainingGate:
    """What --training-config found, the WC9xx rules' input: can SRC initialize exactly that
    architecture?"""

    config: dict  # the training config as written
    mismatch: list[tuple[str, tuple, tuple]] = field(
        default_factory=list
    )  # name, SRC's, training's
    reinit: list[str] = field(default_factory=list)  # the training architecture has, SRC lacks
    ignored: list[str] = field(default_factory=list)  # SRC has, the training architecture lacks
    fields: list[tuple[str, object, object]] = field(
        default_factory=list
    )  # serving fields differing
    # (SRC's architecture, the training config's) when they differ (compare: incompatible)
    architectures: tuple[str | None, str] | None = None
    # architecture fields differing, as compare judges them (model/compatibility.py)
    arch_fields: list[tuple[str, object, object]] = field(default_factory=list)
    # the training architecture's parameters SRC initializes: canonical -> numel, and the others
    initialized: dict[str, int] = field(default_factory=dict)
    from_scratch: dict[str, int] = field(default_factory=dict)
    allow_partial_init: bool = False  # --allow-partial-init: WC905 is a warning
    # the trainer the config belongs to, replayed (weightcheck/trainers/): None when no trainer
    # was given or detected
    replay: object | None = None

    @property
    def fraction(self) -> float:
        if self.replay is not None:
            return self.replay.fraction
        total = sum(self.initialized.values()) + sum(self.from_scratch.values())
        return sum(self.initialized.values()) / total if total else 0.0

    def report(self) -> dict:
        """The ``training`` section of check's JSON report."""
        n, rest = sum(self.initialized.values()), sum(self.from_scratch.values())
        return {
            "architecture": self.architectures[1] if self.architectures else None,
            "src_architecture": self.architectures[0] if self.architectures else None,
            "architecture_fields": [
                {"field": f, "src": a, "training": b} for f, a, b in self.arch_fields
            ],
            "parameters_initialized": n,
            "parameters": n + rest,
            "fraction_initialized": round(self.fraction, 6),
            "initialized": sorted(self.initialized),
            "from_scratch": sorted(self.from_scratch),
            "allow_partial_init": self.allow_partial_init,
            "trainer": self.replay.report() if self.replay is not None else None,
        }


@record
class Context:
    drafter: Drafter
    rules: dict[str, Rule]  # by code: the severity and slug of each finding
    target: "Target | None" = None
    engine: str | None = None
    engine_view: "EngineView | None" = None
    training: TrainingGate | None = None
    values: dict[str, dict] | None = None  # canonical -> stats (rules/values.py value_stats)
    lm_head_equals_target: bool | None = None  # --values with --target (rules/values.py)
    training_vocab: object | None = None  # --training-vocab: rules/vocabmap.py VocabGate
    live: dict | None = None  # --live: the installed engine's loader (engines/live.py report())
    # plain check: each engine's own run (rules/apply.py EngineRun), by engine
    engine_runs: dict | None = None
    # what check was asked (weightcheck/requests.py): every option, for a rule that reads one
    request: "CheckRequest | None" = None
    _maps: tuple[list[int] | None, bytes | None] | None = field(default=None, repr=False)
    _views: dict | None = field(default=None, repr=False)
    # engine-free rules' findings by code, shared by plain check's context and its engine runs'
    _memo: dict = field(default_factory=dict, repr=False)

    def finding(
        self,
        code: str,
        message: str,
        subject: str | None = None,
        consequence: Consequence | None = None,
        fix: str | None = None,
        detail: str | None = None,
    ) -> Finding:
        r = self.rules[code]
        sev = severity_of(consequence or r.consequence)
        return Finding(code, sev, message, subject, r.slug, fix=fix, detail=detail)

    def convert_fix(self, to: str, *options: str) -> str:
        """The convert command that writes SRC in the layout ``to`` reads, checked against the
        target (convert is gated by check; ``--target`` also settles the aux-id convention)."""
        return " ".join(["weightcheck convert SRC OUT --to", to, *options, "--target TARGET"])

    def fix_command(self, to: str, *options: str) -> str | None:
        """The convert command a finding prints as its fix, one that can work as printed: None
        when convert refuses SRC whatever the destination (a target model, a config value of the
        wrong JSON type: WC203/WC212 say what to do first; no config.json, which convert needs
        or --config-from: WC201 says to ship it); in plain check (no --engine), a
        destination that holds the drafter when ``to`` cannot (a drafter trained with an option
        SGLang has no way to express is written for vLLM). With --engine E the command is for E,
        and refused for E's own reason (WC706) when E cannot hold the drafter."""
        from weightcheck.engines.data import output_for, replays

        d = self.drafter
        if d.looks_like_target or self.normalized.mistyped or d.source.config is None:
            return None
        if self.engine is None and d.architecture is not None:
            vals = self.normalized.values

            def holds(dest: str) -> bool:
                if not replays(d.architecture, dest):
                    return False
                return not any(
                    expr.holds(r.when, vals) for r in output_for(dest, d.architecture).refuse
                )

            if not holds(to):
                to = next((e for e in ("sglang", "vllm") if holds(e)), to)
        return self.convert_fix(to, *options)

    # -- small helpers shared by rules -----------------------------------------------------
    @property
    def normalized(self):
        """The drafter's normalized config (model/config.py NormalizedConfig)."""
        return self.drafter.normalized

    def tensor(self, canonical: str):
        return self.drafter.by_canonical().get(canonical)

    def views(self) -> dict[str, "EngineView"]:
        """The served view of each engine the answer depends on: the --engine one, else every
        supported engine's (newest release), computed once. A drafter no engine data describe
        (an MLA drafter) has none."""
        if self._views is None:
            from weightcheck.engines.data import ENGINES, replays
            from weightcheck.engines.view import view as replay

            engines = [self.engine] if self.engine else list(ENGINES)
            views = {}
            for e in engines:
                if self.engine_view is not None and self.engine == e:
                    views[e] = self.engine_view
                elif replays(self.drafter.architecture, e):
                    views[e] = replay(self.drafter, e, target=self.target)
            self._views = views
        return self._views

    def hurts(self, hurt: Callable[["EngineView"], bool]) -> tuple[list[str], list[str]]:
        """(engines ``hurt`` holds for, engines it does not), over :meth:`views`."""
        views = self.views()
        bad = [e for e, v in views.items() if hurt(v)]
        return bad, [e for e in views if e not in bad]

    def built_dtypes(self) -> str:
        """'sglang builds the draft in float16 (dtype (float32, auto)), vllm in bfloat16 (...)':
        the dtype each engine builds the drafter in, from the served view."""
        parts = [
            f"{e} builds the draft in {v.dtype}" + (f" ({v.dtype_from})" if v.dtype_from else "")
            if v.dtype
            else f"{e} in the target's dtype"
            for e, v in self.views().items()
        ]
        return ", ".join(parts)

    def set_vocab_maps(self, d2t: list[int] | None, t2d: bytes | None) -> None:
        """Give the maps instead of reading them (a drafter not written yet)."""
        self._maps = (d2t, t2d)

    def weights_by_dtype(self) -> dict[str, list[str]]:
        """The drafter's weights by float dtype: the tensors the engines cast to the dtype they
        build the draft in. Not the non-parameter buffers (a float32 RoPE table is never
        loaded), not the vocabulary maps (a d2t of floats is WC304's)."""
        skip = set(self.drafter.naming.buffers)
        skip.update(m.name for m in (self.tensor("d2t"), self.tensor("t2d")) if m is not None)
        out: dict[str, list[str]] = {}
        for t in self.drafter.tensors:
            if t.dtype in FLOAT_DTYPES and t.name not in skip:
                out.setdefault(t.dtype, []).append(t.name)
        return out

    def vocab_maps(self) -> tuple[list[int] | None, bytes | None]:
        """(d2t list or None, t2d bytes or None), read once: the only tensor bytes check reads
        without --values (d2t is 8 bytes per draft token, t2d one byte per token)."""
        if self._maps is None:
            from weightcheck.model.vocab import read_maps
            from weightcheck.sources.tensors import read_small

            src = self.drafter.source
            self._maps = read_maps(
                self.tensor("d2t"), self.tensor("t2d"), lambda t: read_small(src, t.name)
            )
        return self._maps
