"""WC3xx: the vocabulary: lm_head, d2t, t2d, tie_word_embeddings."""

from __future__ import annotations

import math

from weightcheck.model import vocab
from weightcheck.rules.base import CONDITIONAL, MISFED, UNCHANGED, engines_do, rule
from weightcheck.storage.header import INT_FORMATS, float_values


def _vocab(ctx):
    return ctx.normalized.get("vocab_size"), ctx.normalized.get("draft_vocab_size")


@rule("WC301")
def lm_head_rows(ctx, finding):
    t = ctx.tensor("lm_head.weight")
    v, vd = _vocab(ctx)
    if t is None or not vd or not t.shape or t.shape[0] == vd:
        return
    rows = t.shape[0]
    raw = ctx.drafter.source.config or {}
    if "draft_vocab_size" in raw and raw["draft_vocab_size"] is None:
        said = f"null (read as vocab_size {vd})"
    elif ctx.normalized.provenance.get("draft_vocab_size") == "default":
        said = f"absent (read as vocab_size {vd})"
    else:
        said = str(vd)
    d2t = ctx.tensor("d2t")
    n = d2t.shape[0] if d2t is not None and len(d2t.shape) == 1 else None
    if n is not None and n != rows:
        # the weights disagree with each other: no value of draft_vocab_size fits both, and
        # convert (which sets it from the weights) has nothing to take it from
        full = " (the full vocabulary)" if rows == v else ""
        yield finding(
            f"{t.name} has {rows} rows{full}, d2t {n} entries: re-export the head for the "
            f"{n}-token vocabulary",
            t.name,
            detail=f"draft_vocab_size is {said}. The engines build the head with "
            f"draft_vocab_size rows and d2t with as many entries: no value fits both, and no "
            "convert settles it. A head trained on the d2t's tokens keeps only their rows; a "
            "drafter trained on the full vocabulary ships no d2t/t2d and sets draft_vocab_size "
            "to vocab_size",
        )
        return
    fix = ctx.fix_command(ctx.engine or "sglang")
    yield finding(
        f"{t.name} has {rows} rows but draft_vocab_size is {said}; set it to {rows}",
        t.name,
        fix=fix,
        detail="the engines build the head with draft_vocab_size rows and their weight loaders "
        f"assert on {rows}" + (f"; `{fix}` sets draft_vocab_size from the weights" if fix else ""),
    )


@rule("WC302")
def lm_head_missing(ctx, finding):
    if ctx.tensor("lm_head.weight") is not None or ctx.drafter.source.config is None:
        return
    v, vd = _vocab(ctx)
    tied = ctx.normalized.get("tie_word_embeddings")
    if tied and ctx.tensor("embed_tokens.weight") is not None and vd == v:
        return
    if vd != v or tied:
        yield from _reduced_head_missing(ctx, finding, vd)
        return
    # a full-vocabulary head can be the target's: which engines take it, which keep a random one
    # (SGLang on an explicit `draft_vocab_size: null`, vLLM always: the served view)
    hurt, fine = ctx.hurts(_random_head)
    if ctx.views() and not hurt:
        return  # every engine asked takes the target's head: nothing missing
    detail = "the untied draft head [Vd, H] is built and nothing loads into it"
    if fine:
        yield finding(
            f"no lm_head.weight: {engines_do(hurt, 'keeps')} a random head, {engines_do(fine, 'takes')} "
            "the target's; ship the head",
            "lm_head.weight",
            consequence=CONDITIONAL,
            detail=f"{detail} in {', '.join(hurt)} (accept length ~1.00); {engines_do(fine, 'takes')} "
            "the target's full-vocabulary head, which serves a full draft vocabulary",
        )
        return
    who = engines_do(hurt, "keeps") if hurt else "the engine keeps"
    yield finding(
        f"no lm_head.weight, full draft vocabulary, untied: {who} a random head; ship it",
        "lm_head.weight",
        detail=f"{detail} (accept length ~1.00); `draft_vocab_size: null` makes SGLang take the "
        "target's head instead",
    )


def _random_head(view) -> bool:
    return any(p.canonical == "lm_head.weight" and p.state == "random" for p in view.params)


def _reduced_head_missing(ctx, finding, vd):
    """No head for a reduced draft vocabulary: what each engine serves instead — a random head
    (SGLang), or the target's full head with its logits cut to the first Vd columns (vLLM:
    draft id i scored by target token i's row, proposed as i + d2t[i]; right only when d2t is
    the placeholder map, the target's first ids)."""
    d2t, _ = ctx.vocab_maps()
    # no d2t, or the all-zero placeholder: draft id i is target token i (vLLM's map stays zeros
    # without one), the very row the cut head keeps
    first_ids = d2t is None or all(x == 0 for x in d2t)
    said, bad, fine = [], [], []
    for e, view in ctx.views().items():
        if _random_head(view):
            said.append(f"{e} keeps a random head")
            bad.append(e)
        elif view.truncated_head is not None:
            said.append(f"{e} borrows the target's and keeps its first {view.truncated_head} rows")
            (fine if first_ids else bad).append(e)
    if ctx.views() and not bad:
        return
    fix = ctx.fix_command(ctx.engine or "sglang", "--lm-head-from TARGET")
    how = f" ({'; '.join(said)})" if said else ""
    detail = (
        f"the engines cannot serve a {vd}-token draft vocabulary with the target's full head"
        f"{how}: draft ids are scored by rows trained for other tokens"
        + (
            f". If the drafter was trained with the target's head rows, `{fix}` gathers them at "
            "the d2t ids"
            if fix
            else ""
        )
    )
    if fine:  # served right where d2t is the target's first ids: a warning naming the others
        kind = CONDITIONAL
    elif any(_random_head(ctx.views()[e]) for e in bad) or not bad:
        kind = None  # a random head: the page's consequence
    else:
        kind = MISFED  # every engine asked scores draft ids with other tokens' rows
    yield finding(
        f"no lm_head.weight for a {vd}-token draft vocabulary"
        + (f" ({', '.join(bad)})" if fine else "")
        + "; ship the trained head",
        "lm_head.weight",
        detail=detail,
        consequence=kind,
    )


@rule("WC303")
def tied(ctx, finding):
    v, vd = _vocab(ctx)
    if not (ctx.normalized.get("tie_word_embeddings") and vd and v and vd != v):
        return
    # only an engine that ties the head is hurt (vLLM never ties the drafter's head: vllm 0.32.0
    # model_executor/models/llama_eagle3.py builds lm_head [Vd, H] whatever the flag says)
    ties, untied = ctx.hurts(lambda view: view.tied_head)
    if not ties:
        return
    detail = (
        f"lm_head [{vd}, H] cannot be tied to embed_tokens [{v}, H] (draft_vocab_size {vd}, "
        f"vocab_size {v}): {engines_do(ties, 'ties')} the drafter's head"
    )
    # untied, the head is the checkpoint's lm_head: one SRC lacks is WC302's next, so say it now
    fix = "set it to false" + (
        "" if "lm_head.weight" in ctx.drafter.covered() else " and ship the trained lm_head"
    )
    if untied:  # some engine serves it correctly: a warning that says which does not
        yield finding(
            f"tie_word_embeddings is true with a reduced draft vocabulary: "
            f"{engines_do(ties, 'ties')} the head; {fix}",
            "tie_word_embeddings",
            consequence=CONDITIONAL,
            detail=f"{detail}; {', '.join(untied)} never ties the drafter's head",
        )
        return
    yield finding(
        f"tie_word_embeddings is true with a reduced draft vocabulary; {fix}",
        "tie_word_embeddings",
        detail=detail,
    )


@rule("WC304")
def d2t_shape(ctx, finding):
    t = ctx.tensor("d2t")
    if t is None:
        return
    _, vd = _vocab(ctx)
    why = "the engines load d2t into an int64 buffer of draft_vocab_size entries"
    if t.dtype in INT_FORMATS and t.dtype != "I64":  # the values load as stored, widened
        yield _int_map(ctx, finding, t)
    elif t.dtype != "I64":
        yield _float_map(ctx, finding, t, why)
    if len(t.shape) != 1:
        yield finding(
            f"{t.name} has rank {len(t.shape)} ({list(t.shape)}); write it as a vector",
            t.name,
            detail=why,
        )
    elif vd and t.shape[0] != vd:
        yield finding(
            f"{t.name} has {t.shape[0]} entries but draft_vocab_size is {vd}; make them agree",
            t.name,
            detail=why,
        )


def _int_map(ctx, finding, t):
    """A d2t of another integer dtype: vLLM copies it into its int64 parameter, SGLang adds an
    int64 arange to it: the map served is the one stored, but for the dtypes an engine's code
    fails on (SGLang: uint16/32/64, which torch does not promote; the replay's d2t landing says,
    mappings/engines/sglang.toml [[names.special]] refuses_dtypes)."""
    refused = {  # engine -> why its loader stops on this d2t (its mappings/engines data says)
        e: x.why
        for e, v in ctx.views().items()
        for x in v.landings
        if x.canonical == "d2t" and x.fate == "error"
    }
    fails, serves = list(refused), [e for e in ctx.views() if e not in refused]
    if not fails:
        return finding(
            f"{t.name} is {t.dtype}; {engines_do(serves, 'widens')} it to int64 at load, nothing "
            "served changes",
            t.name,
            consequence=UNCHANGED,
            detail="vLLM copies it into its int64 draft_id_to_target_id parameter; SGLang adds "
            "an int64 arange to it (the sum is int64): the map served is the one stored",
        )
    return finding(
        f"{t.name} is {t.dtype}; {engines_do(fails, 'fails')} to load it: write it as int64",
        t.name,
        consequence=CONDITIONAL if serves else None,
        detail="; ".join(f"{e}: {why}" for e, why in refused.items())
        + (f"; {engines_do(serves, 'casts')} it and serves the map stored" if serves else ""),
    )


def _float_map(ctx, finding, t, why: str):
    """A d2t of floats: SGLang keeps a float map (d2t + an int64 arange is float) and fails at
    the first draft step indexing with it (a crash); vLLM copies it into its int64 parameter,
    truncating each entry: the map served is the one stored when every entry is whole. Plain
    check: a warning naming SGLang when vLLM serves it so."""
    from weightcheck.sources.tensors import read_small

    try:
        vals = float_values(read_small(ctx.drafter.source, t.name), t.dtype)
    except (ValueError, OSError):  # too large to read, or unreadable: not compared
        vals = None
    whole = vals is not None and all(math.isfinite(v) and v == int(v) for v in vals)
    fix = f"{t.name} is {t.dtype}; write it as int64"
    sglang = (
        f"SGLang keeps a {t.dtype} map (d2t + arange) and fails at the first draft step "
        "indexing with it"
    )
    vllm = "vLLM copies it into its int64 draft_id_to_target_id parameter (copy_ truncates)"
    if ctx.engine == "vllm" and whole:
        return finding(
            f"{t.name} is {t.dtype} of whole values; vllm casts it to int64 at load, nothing "
            "served changes",
            t.name,
            consequence=UNCHANGED,
            detail=f"{vllm}: every entry is a whole number, so the map served is the one stored",
        )
    if ctx.engine == "vllm":
        return finding(
            fix,
            t.name,
            consequence=MISFED,
            detail=f"{why}: {vllm}, and "
            + ("some entries are not whole numbers" if vals is not None else "it was not read"),
        )
    if ctx.engine is None and whole and "vllm" in ctx.views():
        return finding(
            f"{t.name} is {t.dtype}; sglang fails on a float map (vllm casts it): write it as "
            "int64",
            t.name,
            consequence=CONDITIONAL,
            detail=f"{sglang}; {vllm}: every entry is whole, so vLLM serves the map stored",
        )
    return finding(fix, t.name, detail=f"{why}: {sglang}; {vllm}")


@rule("WC305")
def d2t_missing(ctx, finding):
    v, vd = _vocab(ctx)
    if ctx.tensor("d2t") is None and v and vd and vd < v:
        yield finding(
            f"draft_vocab_size {vd} < vocab_size {v} but no d2t; ship the d2t it was trained with",
            "d2t",
            detail="without d2t the engines read draft id i as target id i: every draft token "
            "is proposed as the wrong target token",
        )


@rule("WC306", engine_free=True)
def d2t_range(ctx, finding):
    d2t, t2d = ctx.vocab_maps()
    v, _ = _vocab(ctx)
    if d2t is None or not v:
        return
    bad = [i for i, off in enumerate(d2t) if not 0 <= i + off < v]
    if bad:
        i = bad[0]
        said = (
            f"first: draft id {i} -> target id {i + d2t[i]}; the engines index the target's "
            "logits with it"
        )
        if vocab.reads_as_target_ids(d2t, v, t2d):
            yield finding(
                f"{vocab.TARGET_IDS_SAID} ({len(bad)} draft id(s) land outside [0, {v}))",
                "d2t",
                detail="its values are the draft tokens' target ids, rising, in the vocabulary; "
                f"the engines add the draft id to each ({said})",
            )
            return
        yield finding(
            f"d2t maps {len(bad)} draft id(s) outside [0, {v}); rebuild it for this vocabulary",
            "d2t",
            detail=said,
        )


@rule("WC307", engine_free=True)
def d2t_dups(ctx, finding):
    d2t, _ = ctx.vocab_maps()
    if d2t is None:
        return
    targets = [i + off for i, off in enumerate(d2t)]
    dup = len(targets) - len(set(targets))
    if dup:
        seen, first = set(), None
        for i, tid in enumerate(targets):
            if tid in seen:
                first = (i, tid)
                break
            seen.add(tid)
        yield finding(
            f"d2t sends {dup} draft id(s) to a target id already taken; rebuild the map",
            "d2t",
            detail=f"first: draft id {first[0]} -> {first[1]}; two draft ids then propose one "
            "token, each head row scoring a token it was not trained for",
        )


@rule("WC308")
def t2d_shape(ctx, finding):
    t = ctx.tensor("t2d")
    v, _ = _vocab(ctx)
    if t is None:
        return
    why = "no engine reads t2d (both skip it at load): rebuild it or drop it from the export"
    if t.dtype not in ("BOOL", "U8"):
        yield finding(f"{t.name} is {t.dtype}, not bool; engines skip it", t.name, detail=why)
    if len(t.shape) != 1 or (v and t.shape[0] != v):
        yield finding(
            f"{t.name} has shape {list(t.shape)}, not [{v}]; engines skip it",
            t.name,
            detail=why,
        )


@rule("WC309", engine_free=True)
def t2d_count(ctx, finding):
    _, t2d = ctx.vocab_maps()
    _, vd = _vocab(ctx)
    if t2d is None or not vd:
        return
    count = len(t2d) - t2d.count(0)
    if count != vd:
        yield finding(
            f"t2d marks {count} target tokens but draft_vocab_size is {vd}; engines skip t2d",
            "t2d",
            detail="no engine reads t2d (d2t is the map they read): rebuild it from the same "
            "vocabulary mapping as d2t, or drop it",
        )


_ONE = bytes([0] + [1] * 255)  # bytes.translate table: any nonzero byte -> 1


@rule("WC310", engine_free=True)
def t2d_vs_d2t(ctx, finding):
    d2t, t2d = ctx.vocab_maps()
    if d2t is None or t2d is None:
        return
    # the fast path (a 163840-token t2d): the d2t targets marked in a fresh mask, compared with
    # t2d as 0/1 bytes, both in C; the sets only when they differ
    mask = bytearray(len(t2d))
    for i, off in enumerate(d2t):
        if 0 <= i + off < len(mask):
            mask[i + off] = 1
    if mask == t2d.translate(_ONE) and all(0 <= i + off < len(mask) for i, off in enumerate(d2t)):
        return
    targets = {i + off for i, off in enumerate(d2t)}
    marked = {i for i, b in enumerate(t2d) if b}
    only_d2t, only_t2d = targets - marked, marked - targets
    if (only_d2t or only_t2d) and vocab.reads_as_target_ids(d2t, len(t2d), t2d):
        yield finding(
            vocab.TARGET_IDS_SAID,
            "d2t",
            consequence=MISFED,  # the trainers' draft token j is t2d's j-th id; served: ids[j] + j
            detail="t2d marks exactly d2t's values: d2t holds the target ids themselves, and the "
            f"engines add the draft id to each: the head proposes {len(only_d2t)} target id(s) "
            "t2d does not mark",
        )
    elif only_d2t or only_t2d:
        yield finding(
            "t2d and d2t describe different draft vocabularies; keep the map the head was "
            "trained on",
            "t2d",
            detail=f"d2t reaches {len(only_d2t)} target id(s) t2d does not mark, and t2d marks "
            f"{len(only_t2d)} d2t does not reach (a stale vocab mapping?); the engines read d2t "
            "and never t2d",
        )


def vocab_is_draft_evidence(ctx) -> tuple[list[str], list[int]] | None:
    """Whether vocab_size holds the draft vocabulary's size (the head's rows) while the rest of
    the drafter says the target's vocabulary is larger: what says so (t2d's length, d2t's reach,
    the target) and the sizes it gives, the target's first; None when nothing does. The one test:
    WC313 and the full-vocabulary maps of WC205 (not full: vocab_size is wrong) read it."""
    v, vd = _vocab(ctx)
    head = ctx.tensor("lm_head.weight")
    if not isinstance(v, int) or v != vd or head is None or not head.shape or head.shape[0] != v:
        return None
    d2t, t2d = ctx.vocab_maps()
    said, sizes = [], []
    if t2d is not None and len(t2d) > v:
        said.append(f"t2d has {len(t2d)} entries")
        sizes.append(len(t2d))
    reach = max((i + off for i, off in enumerate(d2t)), default=-1) if d2t else -1
    if reach >= v:
        said.append(f"d2t reaches target id {reach}")
    tv = ctx.target.vocab_size if ctx.target is not None else None
    if isinstance(tv, int) and tv > v:
        said.append(f"the target's vocabulary is {tv}")
        sizes.insert(0, tv)
    return (said, sizes) if said else None


@rule("WC313", engine_free=True)
def vocab_is_draft(ctx, finding):
    """vocab_size holding the draft vocabulary's size while the rest of the drafter says the
    target's vocabulary is larger (:func:`vocab_is_draft_evidence`)."""
    evidence = vocab_is_draft_evidence(ctx)
    if evidence is None:
        return
    said, sizes = evidence
    v = _vocab(ctx)[0]
    to = f"vocab_size {sizes[0]}" if sizes else "vocab_size to the target's vocabulary"
    yield finding(
        f"vocab_size {v} is the draft vocabulary's (the head's rows); set {to} and "
        f"draft_vocab_size {v} in config.json",
        "vocab_size",
        detail="; ".join(said) + ": the engines read vocab_size as the target's vocabulary "
        "(the ids d2t maps to, t2d's length, the embedding's rows) and draft_vocab_size as the "
        "head's",
    )


@rule("WC312")
def d2t_placeholder(ctx, finding):

    d2t, t2d = ctx.vocab_maps()
    v = len(t2d) if t2d is not None else ctx.normalized.get("vocab_size")
    if d2t is None or not vocab.is_placeholder(d2t, v):
        return
    yield finding(
        "d2t is the placeholder map (all zeros, the target's first ids); ship the run's own map",
        "d2t",
        detail=f"{vocab.placeholder_said(len(d2t), v)}: it loads and runs, but the head was "
        "almost certainly not trained on that map (acceptance near 1.0); SpecForge keeps the "
        "run's map in cache/vocab_mapping/<hash>.pt",
    )
