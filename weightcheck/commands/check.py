"""``weightcheck check SRC``: the gate before training or serving, its whole pipeline.

:func:`run`: the request (weightcheck/requests.py CheckRequest) -> its options checked (exit 2
before anything is read) -> load and normalize SRC -> what the options name (the target, the
training config, the training run's vocabulary map) -> rules (weightcheck/rules/apply.py run:
the engine view, values, live, the training gate, each only when asked; documented in
docs/rules.md) -> :func:`report` (schema ``weightcheck.check/1``). Exit 0 when no finding is an
error, 1 otherwise, 2 when the check could not be done.
"""

from __future__ import annotations

import os

from weightcheck.engines import aux
from weightcheck.errors import UsageError, WeightcheckError, require_torch
from weightcheck.model.drafter import load_drafter
from weightcheck.progress import Progress
from weightcheck.reports.base import source_info, typed
from weightcheck.reports.check import (
    AuxLayers,
    CheckReport,
    ConfigRead,
    DraftVocab,
    EngineLine,
    EngineReport,
    LiveReport,
    RunVerdict,
    Summary,
    TargetInfo,
    TensorHeader,
    TrainingReport,
    TrainingVocab,
    ValueStats,
)
from weightcheck.requests import CheckRequest
from weightcheck.rules import ERROR, INFO, WARNING, Context, apply, training
from weightcheck.rules.apply import read_training_config, vocab_gate

__all__ = ["run", "vocab_gate", "report", "ALL_CLEAR"]


ALL_CLEAR = (
    "weights and config check out: if acceptance is still low, look at the chat template "
    "and the training data (prompt format mismatch), not the weights"
)


def run(req: CheckRequest) -> CheckReport:
    """``check`` as ``req`` asks it: the report (the Python API's result, ``--json``)."""
    options(req)
    tc = training_config_file(req.training_config) if req.training_config is not None else None
    d = load_drafter(req.src, revision=req.revision, token=req.token)
    d.source.served_as = req.served_as
    cfg = read_training_config(tc) if tc is not None else None
    if cfg is not None:
        from weightcheck import trainers

        # a SpecForge run checkpoint has no config.json: the training config stands in for it
        d = trainers.with_training_config(d, cfg, tc)
    from weightcheck.model import vocab
    from weightcheck.model.target import load_target

    t = load_target(req.target, token=req.token) if req.target is not None else None
    tv = vocab.load_map(req.training_vocab, token=req.token) if req.training_vocab else None
    bar = (
        Progress("check --values: reading weights", d.total_bytes)
        if req.values and req.progress
        else None
    )
    try:
        ctx, findings = apply.run(
            d,
            req,
            target=t,
            training_cfg=cfg,
            training_vocab=tv,
            progress=bar.update if bar is not None and bar.enabled else None,
        )
    finally:
        if bar is not None:
            bar.close()
    return report(ctx, findings)


def training_config_file(path: str) -> str:
    """``--training-config``: a config file, or a folder holding config.json."""
    if os.path.isdir(path):
        inner = os.path.join(path, "config.json")
        if not os.path.isfile(inner):
            raise WeightcheckError(path, "a folder without config.json: no training config in it")
        return inner
    return path


def options(req: CheckRequest) -> None:
    """check's options that cannot go together or name what is not there, refused before
    anything is read (exit 2)."""
    from weightcheck.engines.data import engine_data

    name, version = req.engine_name, req.engine_version
    if name:
        data = engine_data(name)
        if version and version not in data.engine.versions_read:
            raise WeightcheckError(
                None,
                f"{name} {version} was not read; versions known: "
                f"{', '.join(data.engine.versions_read)}",
            )
    if req.live:
        if not name:
            raise UsageError(None, "--live runs an engine's loader: give --engine sglang|vllm")
        from weightcheck.engines import live as live_mod

        live_mod.installed(name)  # not importable: one line, exit 2, before reading anything
    if req.allow_partial_init and req.training_config is None:
        raise UsageError(None, "--allow-partial-init qualifies --training-config: give both")
    if req.values:
        require_torch("--values")
    if req.trainer is not None and req.training_config is None:
        raise UsageError(None, "--trainer qualifies --training-config: give both")
    if req.trainer is not None:
        from weightcheck import trainers

        trainers.load(req.trainer)  # an unknown name: one line, exit 2, before reading anything


def engine_line(summary: dict, run) -> EngineLine:
    """An engine's line in plain check: the served view's summary and ``check --engine E``'s
    verdict (``findings``); "loads every parameter" is said only where that run finds nothing."""
    line = typed(EngineLine, summary)
    if run is None:
        return line
    v = typed(RunVerdict, run.verdict())
    line.findings, line.serves = v, not v.errors
    if v.errors or v.warnings:
        counts = ", ".join(
            f"{n} {what}" for n, what in ((v.errors, "error(s)"), (v.warnings, "warning(s)")) if n
        )
        said = line.says
        if line.starts and said.startswith("loads every parameter"):
            said = "starts" + said[len("loads every parameter") :]
        line.says = f"{said}; with --engine {run.engine}: {counts} ({', '.join(v.codes)})"
    return line


def conclusion(r: CheckReport, runs: dict | None = None) -> str:
    """The last line's verdict. Plain check passes when some engine serves the drafter (the
    union policy, docs/consistency.md): where the engines' own runs differ it names each
    engine's verdict and the ``--engine`` that gates on the failing one, so it never says the
    drafter checks out while an engine line fails."""
    lines = r.engines or {}
    failing = [e for e, line in lines.items() if not line.serves]
    parts = []
    if r.summary.errors:
        parts.append(f"{r.summary.errors} error(s): fix them before training or serving")
    if failing and len(failing) < len(lines):
        said = "; ".join(
            f"serves in {e} {line.version}"
            if line.serves
            else f"fails in {e} {line.version} ({', '.join(_error_codes((runs or {}).get(e)))})"
            for e, line in lines.items()
        )
        gate = " or ".join(f"--engine {e}" for e in failing)
        parts.append(f"{said} — use {gate} to gate on it")
    elif failing:
        parts.append("fails in " + ", ".join(f"{e} {lines[e].version}" for e in failing))
    return "; ".join(parts) if parts else ALL_CLEAR


def _error_codes(run) -> list[str]:
    """The codes of an engine's own errors, as ``check --engine E`` lists them."""
    found = (run.folded or run.findings) if run is not None else ()
    return sorted({f.code for f in found if f.severity == ERROR}) or ["errors"]


def report(ctx: Context, findings: list) -> CheckReport:
    errors = sum(1 for f in findings if f.severity == ERROR)
    r = CheckReport(
        ok=errors == 0,
        source_info=source_info(ctx.drafter),
        dialect=ctx.drafter.dialect,
        architecture=ctx.drafter.architecture.name if ctx.drafter.architecture else None,
        engine=engine_report(ctx),
        target=target_info(ctx.target) if ctx.target is not None else None,
        findings=tuple(findings),
        summary=Summary(
            errors=errors,
            warnings=sum(1 for f in findings if f.severity == WARNING),
            info=sum(1 for f in findings if f.severity == INFO),
        ),
        conclusion="",
        live=typed(LiveReport, ctx.live),
        values=typed(dict[str, ValueStats], ctx.values),
        training_vocab=typed(TrainingVocab, ctx.training_vocab.report())
        if ctx.training_vocab is not None
        else None,
    )
    if ctx.engine is None:  # plain check: what each engine does with it, and its own verdict
        r.engines = {
            e: engine_line(view.summary(), (ctx.engine_runs or {}).get(e))
            for e, view in ctx.views().items()
        }
    if ctx.training is not None:
        r.training = typed(
            TrainingReport, {**ctx.training.report(), "says": training.said(ctx.training)}
        )
    r.conclusion = conclusion(r, ctx.engine_runs)
    return r


def target_info(t) -> TargetInfo:
    """The target as check's report names it (model/target.py Target)."""

    def header(x) -> TensorHeader | None:
        return None if x is None else TensorHeader(x.name, list(x.shape), x.dtype)

    return TargetInfo(
        spec=t.source.spec,
        commit=t.source.commit,
        model_type=t.model_type,
        text_model_type=t.text_model_type,
        architectures=list(t.architectures),
        hidden_size=t.hidden_size,
        vocab_size=t.vocab_size,
        num_hidden_layers=t.num_layers,
        dtype=t.dtype,
        config_only=t.source.layout == "config only",
        embed=header(t.embed),
        lm_head=header(t.lm_head),
    )


def engine_report(ctx: Context) -> EngineReport | None:
    """``--engine``: the replay (engines/view.py: its Landing and ParamState records as they
    are)."""
    v = ctx.engine_view
    if v is None:
        return None
    aux_ = typed(AuxLayers, {"captures_output_of_layers": None, **v.aux})
    if ctx.target is not None:
        aux_.captures_output_of_layers = aux.captured_layers(
            v, ctx.target.model_type, ctx.target.num_layers
        )
    f = v.facts()
    said = {"starts", "fails", "architecture", "dtype", "dtype_from", "layers", "draft_vocab"}
    said |= {"tied_head", "captured_layers", "forward_fails"}
    if set(f) - said:  # a new fact of the replay is typed here, never dropped without a word
        raise TypeError(f"EngineReport: no field for {sorted(set(f) - said)}")
    return EngineReport(
        name=v.engine,
        version=v.version,
        loader=f"mappings/engines/{v.loader}.toml",
        speculators_format=v.speculators_format,
        config=typed(dict[str, ConfigRead], v.config),
        tensors=list(v.landings),
        parameters=list(v.params),
        aux_layers=aux_,
        starts=f["starts"],
        fails=v.failure,
        architecture=f["architecture"],
        dtype=f["dtype"],
        dtype_from=f["dtype_from"],
        layers=f["layers"],
        draft_vocab=typed(DraftVocab, f["draft_vocab"]),
        tied_head=f["tied_head"],
        captured_layers=f["captured_layers"],
        forward_fails=v.forward_failure,
    )
