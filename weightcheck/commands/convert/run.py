"""``convert`` as a request asks it, the whole pipeline: the options checked (exit 2 before
anything is read) -> SRC read -> killed runs' leftovers cleaned, OUT's place checked -> what the
options name read (``--config-from``, ``--target``, the targets of ``--embeddings from=`` and
``--lm-head-from``, ``--vocab-from``'s map) -> the plan -> the gate (check's rules on the
planned output) -> written and verified, or refused."""

from __future__ import annotations

from weightcheck.commands.convert.gate import check_plan, check_source
from weightcheck.commands.convert.plan import parse_size, plan
from weightcheck.commands.convert.publish import check_paths, clean_stale, write
from weightcheck.commands.convert.report import plan_report, refused_report
from weightcheck.errors import UsageError, require_torch
from weightcheck.model.dialects import user_dialects
from weightcheck.model.drafter import load_drafter
from weightcheck.progress import Progress
from weightcheck.reports.base import typed
from weightcheck.reports.convert import ConvertReport, Written
from weightcheck.requests import ConvertRequest
from weightcheck.storage.header import dtype_option


def run(req: ConvertRequest) -> ConvertReport:
    shard_size = options(req)
    d = load_drafter(
        req.src, revision=req.revision, token=req.token, extra_dialects=user_dialects(req.mapping)
    )
    cleaned: list[str] = []
    if not req.dry_run:
        cleaned = clean_stale(req.out)  # killed runs' leftovers (and an OUT set aside)
        check_paths(d, req.out, req.force)
    ref, tgt, emb, head, vmap = inputs(req)
    if (d.looks_like_target or d.normalized.mistyped) and req.check:
        # a target model, not a drafter, or a config with values of the wrong JSON type (WC212):
        # nothing to plan (no output config can be built from values no engine reads); refused
        # with check's findings on SRC (exit 1, as check SRC gives), --allow-errors or not
        gate = check_source(d, req.to, tgt)
        gate.why = "target" if d.looks_like_target else "config_types"
        refused = refused_report(d, req.to, req.out, gate)
        refused.dry = req.dry_run
        return refused
    if any(f.format == "pickle" for f in d.source.files.values()):
        require_torch("converting a pickled checkpoint")
    p = plan(
        d,
        req.to,
        req.out,
        dtype=req.dtype,
        embeddings=req.embeddings,
        lm_head_from=head,
        config_from=ref,
        max_shard_size=shard_size,
        target=tgt,
        embed_target=emb,
        vocab_from=vmap,
        verifier=req.verifier,
    )
    r = plan_report(p)
    r.dry = req.dry_run
    r.check = check_plan(p) if req.check else None
    if r.check is not None and not r.check.ok and not req.allow_errors:
        r.refused, r.exit_status = True, 1
        return r
    if not req.dry_run:
        r.written = typed(Written, _write(p, req))
        r.written.cleaned = cleaned + r.written.cleaned
    return r


def inputs(req: ConvertRequest):
    """What convert reads besides SRC: --config-from REF, --target, the targets of
    --embeddings from= and --lm-head-from (their weights are needed, not only their config), and
    --vocab-from's map."""
    from weightcheck.model import vocab
    from weightcheck.model.target import load_target

    token = req.token
    ref = load_drafter(req.config_from, token=token) if req.config_from is not None else None
    tgt = load_target(req.target, token=token) if req.target is not None else None
    emb = (
        load_target(req.embeddings[5:], token=token, config_only=False)
        if req.embeddings.startswith("from=")
        else None
    )
    head = (
        load_target(req.lm_head_from, token=token, config_only=False)
        if req.lm_head_from is not None
        else None
    )
    vmap = vocab.load_map(req.vocab_from, token=token) if req.vocab_from is not None else None
    return ref, tgt, emb, head, vmap


def options(req: ConvertRequest) -> int:
    """convert's options that cannot be done (exit 2 before anything is read); the shard size."""
    if req.verifier is not None and req.to != "speculators":
        raise UsageError(
            None,
            "--verifier: only --to speculators writes a verifier (speculators_config.verifier), "
            f"not --to {req.to}",
        )
    if req.verifier is not None and not req.verifier.strip():
        raise UsageError(None, "--verifier: empty; give the target's Hub id or path")
    if req.embeddings not in ("keep", "drop") and not req.embeddings.startswith("from="):
        raise UsageError(None, f"--embeddings {req.embeddings!r}: use keep, drop or from=TARGET")
    size = req.max_shard_size
    shard_size = (
        size if isinstance(size, int) and not isinstance(size, bool) else parse_size(str(size))
    )
    if shard_size < 1:
        raise UsageError(None, f"--max-shard-size {size!r}: a shard holds at least a byte")
    if req.dtype:
        dtype_option(req.dtype)  # a usage error before anything is read
        require_torch("--dtype")
    return shard_size


def _write(p, req: ConvertRequest) -> dict:
    """Write the plan (publish.write), with a progress line on a terminal when ``progress`` is
    True (a callable is given the bytes written)."""
    progress, bar = req.progress, None
    if progress is True:
        bar = Progress("convert", sum(it.nbytes for it in p.items))
        progress = bar.update if bar.enabled else None
    try:
        return write(p, force=req.force, progress=progress or None, fsync=req.fsync)
    finally:
        if bar is not None:
            bar.close()
