"""The Python API: the commands as functions returning typed results, for a training script or a
pipeline that gates itself without a subprocess.

    import weightcheck

    result = weightcheck.check("./drafter", engine="sglang", target="org/target")
    if not result.ok:
        for f in result.errors:
            print(f.code, f.subject, f.message)
        raise SystemExit(result.exit_status)

Each result is the command's report (weightcheck/reports/): typed fields for what a caller
tests, ``to_dict()`` (``result.report``) and ``to_json()`` what ``--json`` prints, the schema
weightcheck/schemas/<command>.json. Bad input raises
:class:`weightcheck.WeightcheckError` (the CLI's exit status 2), with ``where`` (the file) and
``message``. Nothing here prints, exits or touches the terminal unless ``progress=True``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from weightcheck import _API
from weightcheck.errors import UsageError, WeightcheckError
from weightcheck.mappings import load_toml_file
from weightcheck.model.dialects import dialect_from_data
from weightcheck.model.drafter import load_drafter
from weightcheck.progress import Progress
from weightcheck.reports.pages import CleanReport, KeptEntry, RuleList
from weightcheck.rules.base import Finding  # noqa: F401 (exported: weightcheck.Finding)
from weightcheck.sources import is_local

if TYPE_CHECKING:  # the annotations' names; at run time each is resolved by __getattr__ below
    from weightcheck.reports.check import CheckReport as CheckResult
    from weightcheck.reports.compare import CompareReport as CompareResult
    from weightcheck.reports.convert import ConvertReport as ConvertResult
    from weightcheck.reports.eval import EvalReport as EvalResult
    from weightcheck.reports.inspect import InspectReport as InspectResult
    from weightcheck.reports.pages import CleanReport, RuleList, RulePage

__all__ = [*_API, "WeightcheckError"]  # the names the package exports from here

# The results are the reports (weightcheck/reports/), under the names the API has had since 0.1.
# Each command's report module is imported when its command runs or its name is first asked for:
# a command does not build the other commands' report classes (start-up, BENCHMARKS.md).
_RESULTS = {
    "InspectResult": ("inspect", "InspectReport"),
    "CompareResult": ("compare", "CompareReport"),
    "CheckResult": ("check", "CheckReport"),
    "ConvertResult": ("convert", "ConvertReport"),
    "CleanResult": ("pages", "CleanReport"),
    "EvalResult": ("eval", "EvalReport"),
}


def __getattr__(name: str):
    if name in _RESULTS:
        module, cls = _RESULTS[name]
        return getattr(importlib.import_module(f"weightcheck.reports.{module}"), cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# =============================================================================================
def require_torch(what: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise WeightcheckError(
            None, f"{what} needs torch: pip install 'weightcheck[torch]'"
        ) from None


def _dialects(mapping) -> tuple:
    if not mapping:
        return ()
    return (dialect_from_data(load_toml_file(mapping), str(mapping)),)


def inspect(
    src: str | os.PathLike,
    *,
    revision: str | None = None,
    token: str | None = None,
    mapping: str | os.PathLike | None = None,
) -> InspectResult:
    """What is in a checkpoint: dialect, architecture, config, tensors."""
    from weightcheck.commands import inspect as inspect_mod  # each command's, when it runs

    d = load_drafter(str(src), revision=revision, token=token, extra_dialects=_dialects(mapping))
    return inspect_mod.report(d)


def compare(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    revision_a: str | None = None,
    revision_b: str | None = None,
    values: bool = False,
    strict: bool = False,
    token: str | None = None,
    progress: bool = False,
) -> CompareResult:
    """Are two drafters the same model? ``verdict``: identical, compatible or incompatible."""
    from weightcheck.commands import compare as compare_mod  # imports the engines
    from weightcheck.sources.together import at_once

    if values:
        require_torch("--values")
    da, db = at_once(  # a Hub source: its requests overlap the other source's reads
        lambda: load_drafter(str(a), revision=revision_a, token=token),
        lambda: load_drafter(str(b), revision=revision_b, token=token),
        threads=not (is_local(str(a)) and is_local(str(b))),
    )
    c = compare_mod.compare(da, db, values=values, progress=progress and sys.stderr.isatty())
    return compare_mod.report(c, values=values, strict=strict)


def training_config_file(path: str | os.PathLike) -> str:
    """``--training-config``: a config file, or a folder holding config.json."""
    path = str(path)
    if os.path.isdir(path):
        inner = os.path.join(path, "config.json")
        if not os.path.isfile(inner):
            raise WeightcheckError(path, "a folder without config.json: no training config in it")
        return inner
    return path


def check(
    src: str | os.PathLike,
    *,
    engine: str | None = None,
    target: str | os.PathLike | None = None,
    training_config: str | os.PathLike | None = None,
    allow_partial_init: bool = False,
    training_vocab: str | os.PathLike | None = None,
    values: bool = False,
    revision: str | None = None,
    token: str | None = None,
    progress: bool = False,
    live: bool = False,
    trainer: str | None = None,
    served_as: str | None = None,
) -> CheckResult:
    """The gate: every rule, and with ``engine`` (``"sglang"``, ``"vllm"``,
    ``"sglang==0.5.11"``) the engine's own view. ``result.ok`` is False when a finding is an
    error. ``live`` (needs ``engine``, torch and the engine installed) also runs the installed
    engine's own loader on meta tensors (engines/live.py): the report's ``live`` object.
    ``allow_partial_init``: with ``training_config``, another architecture than SRC's is a
    warning (WC905), not an error. ``served_as``: the model path the engine will be given, when
    not ``src`` as given (SGLang picks its config parser from it)."""
    from weightcheck.commands import check as check_mod  # imports the engines
    from weightcheck.model import vocab
    from weightcheck.model.target import load_target

    name, version = _check_options(
        engine, live, training_config, allow_partial_init, values, trainer
    )
    tc = training_config_file(training_config) if training_config is not None else None
    d = load_drafter(str(src), revision=revision, token=token)
    d.source.served_as = served_as
    if tc is not None:
        from weightcheck import trainers
        from weightcheck.rules.apply import read_training_config

        # a SpecForge run checkpoint has no config.json: the training config stands in for it
        d = trainers.with_training_config(d, read_training_config(tc), tc)
    t = load_target(str(target), token=token) if target is not None else None
    tv = None
    if training_vocab is not None:
        tv = vocab.load_map(str(training_vocab), token=token)
    bar = (
        Progress("check --values: reading weights", d.total_bytes) if values and progress else None
    )
    try:
        ctx, findings = check_mod.run(
            d,
            engine=name,
            engine_version=version or None,
            target=t,
            training_config=tc,
            values=values,
            training_vocab=tv,
            live=live,
            allow_partial_init=allow_partial_init,
            progress=bar.update if bar is not None and bar.enabled else None,
            trainer=trainer,
        )
    finally:
        if bar is not None:
            bar.close()
    return check_mod.report(ctx, findings)


def _check_options(engine, live, training_config, allow_partial_init, values, trainer):
    """check's options that cannot go together or name what is not there, refused before
    anything is read (exit 2). The engine's (name, version)."""
    from weightcheck.engines.data import engine_data

    name, version = None, None
    if engine:
        name, _, version = engine.partition("==")
        data = engine_data(name)
        if version and version not in data.engine.versions_read:
            raise WeightcheckError(
                None,
                f"{name} {version} was not read; versions known: "
                f"{', '.join(data.engine.versions_read)}",
            )
    if live:
        if not name:
            raise UsageError(None, "--live runs an engine's loader: give --engine sglang|vllm")
        from weightcheck.engines import live as live_mod

        live_mod.installed(name)  # not importable: one line, exit 2, before reading anything
    if allow_partial_init and training_config is None:
        raise UsageError(None, "--allow-partial-init qualifies --training-config: give both")
    if values:
        require_torch("--values")
    if trainer is not None and training_config is None:
        raise UsageError(None, "--trainer qualifies --training-config: give both")
    if trainer is not None:
        from weightcheck import trainers

        trainers.load(trainer)  # an unknown name: one line, exit 2, before reading anything
    return name, version


def convert(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    to: str,
    config_from: str | os.PathLike | None = None,
    dtype: str | None = None,
    embeddings: str = "keep",
    lm_head_from: str | os.PathLike | None = None,
    vocab_from: str | os.PathLike | None = None,
    target: str | os.PathLike | None = None,
    verifier: str | os.PathLike | None = None,
    max_shard_size: str | int = "5GB",
    mapping: str | os.PathLike | None = None,
    dry_run: bool = False,
    force: bool = False,
    fsync: bool = False,
    revision: str | None = None,
    token: str | None = None,
    progress=None,
    check: bool = True,
    allow_errors: bool = False,
) -> ConvertResult:
    """Write SRC in the layout ``to`` reads (``sglang``, ``vllm``, ``speculators``), every byte
    verified before OUT appears. ``progress``: a callable given the bytes written, or True for a
    progress line on a terminal.

    Gated by check (``check=True``): the planned output goes through check's rules for each
    engine that reads ``to``; an error refuses (``refused``, exit status 1, nothing written)
    unless ``allow_errors``. ``check=False`` skips the gate (``report["check"]`` is None)."""
    from weightcheck.commands import convert as convert_mod  # imports the engines

    out = str(out)
    shard_size = _convert_options(to, verifier, embeddings, max_shard_size, dtype)
    d = load_drafter(str(src), revision=revision, token=token, extra_dialects=_dialects(mapping))
    cleaned: list[str] = []
    if not dry_run:
        cleaned = convert_mod.clean_stale(out)  # killed runs' leftovers (and an OUT set aside)
        convert_mod.check_paths(d, out, force)
    ref, tgt, emb, head, vmap = _convert_inputs(
        token, config_from, target, embeddings, lm_head_from, vocab_from
    )
    if (d.looks_like_target or d.normalized.mistyped) and check:
        # a target model, not a drafter, or a config with values of the wrong JSON type (WC212):
        # nothing to plan (no output config can be built from values no engine reads); refused
        # with check's findings on SRC (exit 1, as check SRC gives), --allow-errors or not
        gate = convert_mod.check_source(d, to, tgt)
        gate.why = "target" if d.looks_like_target else "config_types"
        refused = convert_mod.refused_report(d, to, out, gate)
        refused.dry = dry_run
        return refused
    if any(f.format == "pickle" for f in d.source.files.values()):
        require_torch("converting a pickled checkpoint")
    p = convert_mod.plan(
        d,
        to,
        out,
        dtype=dtype,
        embeddings=embeddings,
        lm_head_from=head,
        config_from=ref,
        max_shard_size=shard_size,
        target=tgt,
        embed_target=emb,
        vocab_from=vmap,
        verifier=None if verifier is None else str(verifier),
    )
    r = convert_mod.plan_report(p)
    r.dry = dry_run
    r.check = convert_mod.check_plan(p) if check else None
    if r.check is not None and not r.check.ok and not allow_errors:
        r.refused, r.exit_status = True, 1
        return r
    if not dry_run:
        r.written = _write(p, progress, force, fsync)
        r.written["cleaned"] = cleaned + r.written.get("cleaned", [])
    return r


def _convert_inputs(token, config_from, target, embeddings, lm_head_from, vocab_from):
    """What convert reads besides SRC: --config-from REF, --target, the targets of
    --embeddings from= and --lm-head-from (their weights are needed, not only their config), and
    --vocab-from's map."""
    from weightcheck.model import vocab
    from weightcheck.model.target import load_target

    ref = load_drafter(str(config_from), token=token) if config_from is not None else None
    tgt = load_target(str(target), token=token) if target is not None else None
    emb = (
        load_target(embeddings[5:], token=token, config_only=False)
        if embeddings.startswith("from=")
        else None
    )
    head = (
        load_target(str(lm_head_from), token=token, config_only=False)
        if lm_head_from is not None
        else None
    )
    vmap = vocab.load_map(str(vocab_from), token=token) if vocab_from is not None else None
    return ref, tgt, emb, head, vmap


def _convert_options(to, verifier, embeddings, max_shard_size, dtype) -> int:
    """convert's options that cannot be done (exit 2 before anything is read); the shard size."""
    if verifier is not None and to != "speculators":
        raise UsageError(
            None,
            f"--verifier: only --to speculators writes a verifier (speculators_config.verifier), "
            f"not --to {to}",
        )
    if verifier is not None and not str(verifier).strip():
        raise UsageError(None, "--verifier: empty; give the target's Hub id or path")
    if embeddings not in ("keep", "drop") and not embeddings.startswith("from="):
        raise UsageError(None, f"--embeddings {embeddings!r}: use keep, drop or from=TARGET")
    from weightcheck.commands import convert as convert_mod  # imports the engines

    shard_size = (
        max_shard_size
        if isinstance(max_shard_size, int) and not isinstance(max_shard_size, bool)
        else convert_mod.parse_size(str(max_shard_size))
    )
    if shard_size < 1:
        raise UsageError(
            None, f"--max-shard-size {max_shard_size!r}: a shard holds at least a byte"
        )
    if dtype:
        require_torch("--dtype")
    return shard_size


def _write(p, progress, force: bool, fsync: bool) -> dict:
    """Write the plan (publish.write), with a progress line on a terminal when ``progress`` is
    True (a callable is given the bytes written)."""
    from weightcheck.commands.convert import publish  # imports the engines

    bar = None
    if progress is True:
        bar = Progress("convert", sum(it.nbytes for it in p.items))
        progress = bar.update if bar.enabled else None
    try:
        return publish.write(p, force=force, progress=progress or None, fsync=fsync)
    finally:
        if bar is not None:
            bar.close()


def evaluate(
    drafters,
    hidden_states: str | os.PathLike,
    *,
    target: str | os.PathLike | None = None,
    steps: int = 3,
    limit: int | None = None,
    dtype: str | None = None,
    baseline_tps: float | None = None,
    cycle_ms: float | None = None,
    draft_ms: float | None = None,
    token: str | None = None,
    progress: bool = False,
) -> EvalResult:
    """``weightcheck eval``: how well each drafter (a spec, or a list of them) predicts the
    target on saved hidden states — per-step accuracy, the expected acceptance length ``tau`` of
    a ``steps``-token chain and the one ``walked`` cycle by cycle as an engine drafts, ranked; with ``baseline_tps`` and ``cycle_ms`` the predicted tokens
    per second. Needs torch (``pip install "weightcheck[torch]"``); CPU only."""
    from weightcheck.commands import eval as eval_mod

    if isinstance(drafters, (str, os.PathLike)):
        drafters = [drafters]
    bar = Progress("eval", stream=sys.stderr, unit="sample") if progress else None
    try:
        return eval_mod.run(
            [str(d) for d in drafters],
            str(hidden_states),
            target=target,
            steps=steps,
            limit=limit,
            dtype=dtype,
            token=token,
            baseline_tps=baseline_tps,
            cycle_ms=cycle_ms,
            draft_ms=draft_ms,
            progress=bar.step if bar is not None and bar.enabled else None,
        )
    finally:
        if bar is not None:
            bar.close()


def clean(folder: str | os.PathLike = ".") -> CleanReport:
    """Remove what killed converts left in ``folder`` (``.OUT.weightcheck-tmp-PID``), never a
    leftover of a process still alive; an OUT a killed ``--force`` had set aside is restored."""
    from weightcheck.commands.convert import publish  # imports the engines

    folder = str(folder)
    if not os.path.isdir(folder):
        raise WeightcheckError(folder, "not a folder")
    r = publish.clean(folder)
    return CleanReport(
        folder=r["folder"],
        removed=tuple(r["removed"]),
        kept_entries=[KeptEntry(k["name"], k["pid"]) for k in r["kept"]],
    )


def rule(code: str) -> RulePage:
    """A rule's page: code, name, severity, needs, summary, what, why, reported, fix (read as
    attributes, or as a mapping: ``rule("WC305")["fix"]``)."""
    from weightcheck.commands import rule as rule_mod  # imports the rules

    return rule_mod.page(code)


def rule_list() -> RuleList:
    """``rule --all``: every rule's page, and docs/rules.md's title, introduction and groups."""
    from weightcheck.commands import rule as rule_mod

    return RuleList(rules=rule_mod.pages(), catalog=rule_mod.document())


def rule_pages() -> list[RulePage]:
    """Every rule's page, in code order."""
    from weightcheck.commands import rule as rule_mod

    return rule_mod.pages()
