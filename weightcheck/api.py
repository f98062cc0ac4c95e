"""The Python API: the commands as functions returning typed results, for a training script or a
pipeline that gates itself without a subprocess.

    import weightcheck

    result = weightcheck.check("./drafter", engine="sglang", target="org/target")
    if not result.ok:
        for f in result.errors:
            print(f.code, f.subject, f.message)
        raise SystemExit(result.exit_status)

Each result carries the report ``--json`` prints (``result.report``, ``result.to_json()``: the
same dict, the same schema) and typed fields for what a caller tests. Bad input raises
:class:`weightcheck.WeightcheckError` (the CLI's exit status 2), with ``where`` (the file) and
``message``. Nothing here prints, exits or touches the terminal unless ``progress=True``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from weightcheck import _API
from weightcheck.errors import UsageError, WeightcheckError
from weightcheck.rules.base import Finding, Severity

__all__ = [*_API, "WeightcheckError"]  # the names the package exports from here

Verdict = Literal["identical", "compatible", "incompatible"]


@dataclass(frozen=True)
class _Result:
    report: dict = field(repr=False, compare=False)  # what --json prints

    @property
    def exit_status(self) -> int:
        """What the CLI exits with for this result: 0 fine, 1 findings."""
        return 0

    def to_dict(self) -> dict:
        """The report as ``--json`` prints it (the documented schema)."""
        return self.report

    def to_json(self) -> str:
        from weightcheck.render import to_json

        return to_json(self.report)


@dataclass(frozen=True)
class InspectResult(_Result):
    """``weightcheck inspect``: schema ``weightcheck.inspect/1``."""

    source: str = ""  # the SRC given
    dialect: str | None = None
    architecture: str | None = None
    looks_like_target: str | None = None  # why SRC looks like a target model, or None
    config: dict = field(default_factory=dict)  # the normalized config
    problems: tuple[str, ...] = ()  # config values of the wrong type, and the like
    tensors: int = 0
    parameters: int = 0
    bytes: int = 0
    missing: tuple[str, ...] = ()  # canonical names the config implies and SRC lacks
    unknown: tuple[str, ...] = ()  # names no dialect explains


@dataclass(frozen=True)
class CompareResult(_Result):
    """``weightcheck compare``: schema ``weightcheck.compare/1``."""

    verdict: Verdict = "incompatible"
    reasons: tuple[str, ...] = ()
    strict_failures: tuple[str, ...] = ()
    strict: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def exit_status(self) -> int:
        return self.report["exit_status"]


@dataclass(frozen=True)
class CheckResult(_Result):
    """``weightcheck check``: schema ``weightcheck.check/1``. ``ok`` is the gate: no error."""

    ok: bool = False
    findings: tuple[Finding, ...] = ()
    conclusion: str = ""

    @property
    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def of(self, severity: Severity) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == severity)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return self.of("error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return self.of("warning")

    @property
    def codes(self) -> set[str]:
        return {f.code for f in self.findings}


@dataclass(frozen=True)
class ConvertResult(_Result):
    """``weightcheck convert``: schema ``weightcheck.convert/1``; ``written`` is None for a dry
    run."""

    out: str = ""
    to: str = ""
    files: tuple[str, ...] = ()  # the files written into OUT (weights and index)
    written: dict | None = None
    config_changes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    refused: bool = False  # the gate found errors: nothing written

    @property
    def dry_run(self) -> bool:
        return self.written is None and not self.refused

    @property
    def exit_status(self) -> int:
        """1 when the gate refused the conversion (its check found errors), else 0."""
        return 1 if self.refused else 0

    @property
    def findings(self) -> tuple["Finding", ...]:
        """The gate's findings, for every engine that reads the layout in turn."""
        g = self.report.get("check") or {"engines": []}
        return tuple(Finding.from_dict(f) for e in g["engines"] for f in e["findings"])


@dataclass(frozen=True)
class CleanResult(_Result):
    """``weightcheck clean``: the leftovers of killed converts removed (or restored) and kept."""

    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


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
    from weightcheck.mappings import load_toml_file
    from weightcheck.model.dialects import dialect_from_data

    return (dialect_from_data(load_toml_file(mapping), str(mapping)),)


def inspect(
    src: str | os.PathLike,
    *,
    revision: str | None = None,
    token: str | None = None,
    mapping: str | os.PathLike | None = None,
) -> InspectResult:
    """What is in a checkpoint: dialect, architecture, config, tensors."""
    from weightcheck.commands import inspect as inspect_mod
    from weightcheck.model.drafter import load_drafter

    d = load_drafter(str(src), revision=revision, token=token, extra_dialects=_dialects(mapping))
    r = inspect_mod.report(d)
    return InspectResult(
        report=r,
        source=r["source"]["spec"],
        dialect=r["dialect"]["name"],
        architecture=r["architecture"]["name"],
        looks_like_target=r["looks_like_target"],
        config=dict(r["config"]["normalized"]),
        problems=tuple(r["config"]["problems"]),
        tensors=r["totals"]["tensors"],
        parameters=r["totals"]["parameters"],
        bytes=r["totals"]["bytes"],
        missing=tuple(m["canonical"] for m in r["missing"]),
        unknown=tuple(r["unknown"]),
    )


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
    from weightcheck.commands import compare as compare_mod
    from weightcheck.model.drafter import load_drafter
    from weightcheck.render import isatty

    if values:
        require_torch("--values")
    da = load_drafter(str(a), revision=revision_a, token=token)
    db = load_drafter(str(b), revision=revision_b, token=token)
    import sys

    c = compare_mod.compare(da, db, values=values, progress=progress and isatty(sys.stderr))
    r = compare_mod.report(c, values=values, strict=strict)
    return CompareResult(
        report=r,
        verdict=r["verdict"],
        reasons=tuple(r["reasons"]),
        strict_failures=tuple(r["strict_failures"]),
        strict=strict,
    )


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
) -> CheckResult:
    """The gate: every rule, and with ``engine`` (``"sglang"``, ``"vllm"``,
    ``"sglang==0.5.11"``) the engine's own view. ``result.ok`` is False when a finding is an
    error. ``live`` (needs ``engine``, torch and the engine installed) also runs the installed
    engine's own loader on meta tensors (engines/live.py): the report's ``live`` object.
    ``allow_partial_init``: with ``training_config``, another architecture than SRC's is a
    warning (WC905), not an error."""
    from weightcheck.commands import check as check_mod
    from weightcheck.engines import view as engine_mod
    from weightcheck.model.drafter import load_drafter
    from weightcheck.model.target import load_target

    name, version = None, None
    if engine:
        name, _, version = engine.partition("==")
        data = engine_mod.engine_data(name)
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
    tc = training_config_file(training_config) if training_config is not None else None
    d = load_drafter(str(src), revision=revision, token=token)
    if tc is not None:
        from weightcheck import trainers
        from weightcheck.rules.apply import read_training_config

        # a SpecForge run checkpoint has no config.json: the training config stands in for it
        d = trainers.with_training_config(d, read_training_config(tc), tc)
    t = load_target(str(target), token=token) if target is not None else None
    tv = None
    if training_vocab is not None:
        from weightcheck.model import vocab

        tv = vocab.load_map(str(training_vocab), token=token)
    bar = None
    if values and progress:
        from weightcheck.render import Progress

        bar = Progress("check --values: reading weights", d.total_bytes).watch_io()
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
            trainer=trainer,
        )
    finally:
        if bar is not None:
            bar.close()
    r = check_mod.report(ctx, findings)
    return CheckResult(
        report=r,
        ok=bool(r["ok"]),
        findings=tuple(Finding.from_dict(f) for f in r["findings"]),
        conclusion=r["conclusion"],
    )


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
    from weightcheck.commands import convert as convert_mod
    from weightcheck.model.drafter import load_drafter
    from weightcheck.model.target import load_target

    out = str(out)
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
    d = load_drafter(str(src), revision=revision, token=token, extra_dialects=_dialects(mapping))
    cleaned: list[str] = []
    if not dry_run:
        cleaned = convert_mod.clean_stale(out)  # killed runs' leftovers (and an OUT set aside)
        convert_mod.check_paths(d, out, force)
    ref = load_drafter(str(config_from), token=token) if config_from is not None else None
    tgt = load_target(str(target), token=token) if target is not None else None
    # the embedding and the head are read from the target: its weights are needed
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
    vmap = None
    if vocab_from is not None:
        from weightcheck.model import vocab

        vmap = vocab.load_map(str(vocab_from), token=token)
    if (d.looks_like_target or d.normalized.mistyped) and check:
        # a target model, not a drafter, or a config with values of the wrong JSON type (WC212):
        # nothing to plan (no output config can be built from values no engine reads); refused
        # with check's findings on SRC (exit 1, as check SRC gives), --allow-errors or not
        r = {
            "schema": "weightcheck.convert/1",
            "source": d.source.spec,
            "source_dialect": d.dialect,
            "to": to,
            "out": out,
            "shards": [],
            "tensors": [],
            "config_changes": [],
            "notes": [],
            "config": None,
            "check": {
                **convert_mod.check_source(d, to, tgt),
                "why": "target" if d.looks_like_target else "config_types",
            },
            "refused": True,
            "exit_status": 1,
        }
        return ConvertResult(report=r, out=out, to=to, refused=True)
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
    r["check"] = gate = convert_mod.check_plan(p) if check else None
    if gate is not None and not gate["ok"] and not allow_errors:
        r["refused"] = True
        r["exit_status"] = 1
        return ConvertResult(
            report=r,
            out=out,
            to=to,
            files=(),
            written=None,
            config_changes=tuple(r["config_changes"]),
            notes=tuple(r["notes"]),
            refused=True,
        )
    r["refused"] = False
    r["exit_status"] = 0
    if not dry_run:
        bar = None
        if progress is True:
            from weightcheck.render import Progress

            bar = Progress("convert", sum(it.nbytes for it in p.items))
            progress = bar.update if bar.enabled else None
        try:
            written = convert_mod.write(p, force=force, progress=progress or None, fsync=fsync)
        finally:
            if bar is not None:
                bar.close()
        written["cleaned"] = cleaned + written.get("cleaned", [])
        r["written"] = written
    return ConvertResult(
        report=r,
        out=out,
        to=to,
        files=tuple(r["written"]["files"]) if "written" in r else tuple(r["shards"]),
        written=r.get("written"),
        config_changes=tuple(r["config_changes"]),
        notes=tuple(r["notes"]),
    )


def clean(folder: str | os.PathLike = ".") -> CleanResult:
    """Remove what killed converts left in ``folder`` (``.OUT.weightcheck-tmp-PID``), never a
    leftover of a process still alive; an OUT a killed ``--force`` had set aside is restored."""
    from weightcheck.commands import convert as convert_mod

    folder = str(folder)
    if not os.path.isdir(folder):
        raise WeightcheckError(folder, "not a folder")
    r = convert_mod.clean(folder)
    r = {"schema": "weightcheck.clean/1", **r}
    return CleanResult(
        report=r,
        removed=tuple(r["removed"]),
        kept=tuple(k["name"] for k in r["kept"]),
    )


def rule(code: str) -> dict:
    """A rule's page: code, name, severity, needs, summary, what, why, reported, fix."""
    from weightcheck.commands import rule as rule_mod

    return rule_mod.page(code)


def rule_pages() -> list[dict]:
    """Every rule's page, in code order."""
    from weightcheck.commands import rule as rule_mod

    return rule_mod.pages()
