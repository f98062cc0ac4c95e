"""WC3xx: the vocabulary: lm_head, d2t, t2d, tie_word_embeddings."""

from __future__ import annotations

from weightcheck.model import vocab
from weightcheck.rules.base import CONDITIONAL, rule


def _vocab(ctx):
    return ctx.normalized.get("vocab_size"), ctx.normalized.get("draft_vocab_size")


@rule("WC301")
def lm_head_rows(ctx, finding):
    t = ctx.tensor("lm_head.weight")
    _, vd = _vocab(ctx)
    if t is not None and vd and t.shape and t.shape[0] != vd:
        raw = ctx.drafter.source.config or {}
        if "draft_vocab_size" in raw and raw["draft_vocab_size"] is None:
            said = f"null, read as vocab_size {vd}"
        elif ctx.normalized.provenance.get("draft_vocab_size") == "default":
            said = f"absent, read as vocab_size {vd}"
        else:
            said = f"{vd} ({ctx.normalized.provenance.get('draft_vocab_size')})"
        fix = ctx.convert_fix(ctx.engine or "sglang")
        yield finding(
            f"{t.name} has {t.shape[0]} rows but draft_vocab_size is {said}; set it to "
            f"{t.shape[0]} (`{fix}` sets it from the weights)",
            t.name,
            fix=fix,
        )


@rule("WC302")
def lm_head_missing(ctx, finding):
    if ctx.tensor("lm_head.weight") is not None or ctx.drafter.source.config is None:
        return
    v, vd = _vocab(ctx)
    tied = ctx.normalized.get("tie_word_embeddings")
    if tied and ctx.tensor("embed_tokens.weight") is not None and vd == v:
        return
    if vd == v and not tied:
        # a full-vocabulary head can be the target's: which engines take it, which keep a random
        # one (SGLang on an explicit `draft_vocab_size: null`, vLLM always: the served view)
        def random_head(view) -> bool:
            return any(p.canonical == "lm_head.weight" and p.state == "random" for p in view.params)

        hurt, fine = ctx.hurts(random_head)
        if ctx.views() and not hurt:
            return  # every engine asked takes the target's head: nothing missing
        if fine:
            yield finding(
                f"no lm_head.weight: {', '.join(hurt)} keep(s) a random head (accept length "
                f"~1.00); {', '.join(fine)} take(s) the target's",
                "lm_head.weight",
                consequence=CONDITIONAL,
            )
            return
        who = " and ".join(hurt) if hurt else "the engine"
        yield finding(
            "no lm_head.weight, draft vocab = vocab and tie_word_embeddings is "
            f"false: {who} keep(s) a random head (accept length ~1.00)",
            "lm_head.weight",
        )
    else:
        yield finding(
            f"no lm_head.weight for a draft vocabulary of {vd}: the engine cannot "
            "borrow the target's full-vocabulary head for it",
            "lm_head.weight",
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
    message = (
        f"tie_word_embeddings is true but draft_vocab_size {vd} != vocab_size "
        f"{v}: lm_head [{vd}, H] cannot be tied to embed_tokens [{v}, H]"
    )
    if untied:  # some engine serves it correctly: a warning that says which does not
        yield finding(
            f"{message} in {', '.join(ties)} ({', '.join(untied)} never ties the drafter's head); "
            "set tie_word_embeddings to false",
            "tie_word_embeddings",
            consequence=CONDITIONAL,
        )
        return
    yield finding(message, "tie_word_embeddings")


@rule("WC304")
def d2t_shape(ctx, finding):
    t = ctx.tensor("d2t")
    if t is None:
        return
    _, vd = _vocab(ctx)
    if t.dtype != "I64":
        yield finding(f"{t.name} is {t.dtype}; engines expect int64", t.name)
    if len(t.shape) != 1:
        yield finding(
            f"{t.name} has rank {len(t.shape)} ({list(t.shape)}); expected a vector",
            t.name,
        )
    elif vd and t.shape[0] != vd:
        yield finding(f"{t.name} has {t.shape[0]} entries but draft_vocab_size is {vd}", t.name)


@rule("WC305")
def d2t_missing(ctx, finding):
    v, vd = _vocab(ctx)
    if ctx.tensor("d2t") is None and v and vd and vd < v:
        yield finding(
            f"draft_vocab_size {vd} < vocab_size {v} but there is no d2t: every "
            "draft token would be read as the wrong target token",
            "d2t",
        )


@rule("WC306", engine_free=True)
def d2t_range(ctx, finding):
    d2t, _ = ctx.vocab_maps()
    v, _ = _vocab(ctx)
    if d2t is None or not v:
        return
    bad = [i for i, off in enumerate(d2t) if not 0 <= i + off < v]
    if bad:
        i = bad[0]
        yield finding(
            f"d2t maps {len(bad)} draft id(s) outside [0, {v}); first: draft id "
            f"{i} -> target id {i + d2t[i]}",
            "d2t",
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
            f"d2t sends {dup} draft id(s) to a target id already taken; first: "
            f"draft id {first[0]} -> {first[1]}",
            "d2t",
        )


@rule("WC308")
def t2d_shape(ctx, finding):
    t = ctx.tensor("t2d")
    v, _ = _vocab(ctx)
    if t is None:
        return
    if t.dtype not in ("BOOL", "U8"):
        yield finding(f"{t.name} is {t.dtype}; expected bool", t.name)
    if len(t.shape) != 1 or (v and t.shape[0] != v):
        yield finding(f"{t.name} has shape {list(t.shape)}; expected [{v}]", t.name)


@rule("WC309", engine_free=True)
def t2d_count(ctx, finding):
    _, t2d = ctx.vocab_maps()
    _, vd = _vocab(ctx)
    if t2d is None or not vd:
        return
    count = len(t2d) - t2d.count(0)
    if count != vd:
        yield finding(f"t2d marks {count} target tokens but draft_vocab_size is {vd}", "t2d")


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
    if only_d2t or only_t2d:
        yield finding(
            f"d2t reaches {len(only_d2t)} target id(s) t2d does not mark, and t2d "
            f"marks {len(only_t2d)} d2t does not reach (stale vocab mapping?)",
            "t2d",
        )


@rule("WC312")
def d2t_placeholder(ctx, finding):

    d2t, t2d = ctx.vocab_maps()
    v = len(t2d) if t2d is not None else ctx.normalized.get("vocab_size")
    if d2t is None or not vocab.is_placeholder(d2t, v):
        return
    yield finding(
        f"{vocab.placeholder_said(len(d2t), v)}: it loads and runs, but the head was almost "
        "certainly not trained on that map (acceptance near 1.0); ship the run's own map as "
        "d2t/t2d (SpecForge: cache/vocab_mapping/<hash>.pt)",
        "d2t",
    )
