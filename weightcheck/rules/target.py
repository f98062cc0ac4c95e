"""WC5xx: the drafter against its target (--target)."""

from __future__ import annotations

from weightcheck.rules.base import rule
from weightcheck.storage.header import CONFIG_DTYPES


@rule("WC501", needs="target")
def target_hidden(ctx, finding):
    th, T = ctx.target.hidden_size, ctx.normalized.get("target_hidden_size")
    if th and T and th != T:
        yield finding(
            f"target_hidden_size {T} but the target's hidden size is {th}; serve it with its own "
            "target",
            "target_hidden_size",
            detail=f"read from {ctx.normalized.provenance.get('target_hidden_size')}; the engines "
            "build fc for it and feed it the target's states of another width",
        )


@rule("WC502", needs="target")
def target_vocab(ctx, finding):
    tv, v = ctx.target.vocab_size, ctx.normalized.get("vocab_size")
    if tv and v and tv != v:
        yield finding(
            f"vocab_size {v} but the target's is {tv}; serve it with the target it was trained for",
            "vocab_size",
            detail="d2t/t2d and the borrowed embedding index the target's vocabulary",
        )
    emb = ctx.target.embed
    if emb is not None and v and emb.shape and emb.shape[0] != v:
        yield finding(
            f"the target's embedding has {emb.shape[0]} rows, the drafter's vocab_size is {v}; "
            "use its own target",
            "vocab_size",
            detail=f"{emb.name} is the embedding the engines borrow; d2t/t2d index its rows",
        )


@rule("WC503", needs="target")
def target_embed(ctx, finding):
    emb = ctx.target.embed
    H = ctx.normalized.get("hidden_size")
    mine = ctx.tensor("embed_tokens.weight")
    if emb is not None and mine is not None and tuple(mine.shape) != tuple(emb.shape):
        # an embedding of another shape than the target's is the drafter's own: both engines
        # keep it (a narrower drafter, H_draft < the target's hidden, embeds tokens itself; the
        # served view: "not the target's: the shapes differ"). It must still embed every target
        # token into the drafter's hidden size.
        own = (emb.shape[0], H) if len(emb.shape) == 2 and H else None
        if own is None or tuple(mine.shape) != tuple(own):
            # dropping it helps only when the target's embedding feeds the drafter's width
            wide = len(emb.shape) == 2 and emb.shape[1] == H
            fix = ctx.fix_command(ctx.engine or "sglang", "--embeddings drop") if wide else None
            yield finding(
                f"{mine.name} {list(mine.shape)} fits neither the target nor hidden_size {H}; "
                + ("drop it" if wide else f"ship one of [{emb.shape[0]}, {H}]"),
                mine.name,
                detail=f"neither the target's {emb.name} {list(emb.shape)} nor an embedding of "
                f"its {emb.shape[0]} tokens into the drafter's hidden size {H}"
                + (f"; `{fix}` leaves it out (the engines then use the target's)" if fix else ""),
            )
    if emb is not None and mine is None and H and len(emb.shape) == 2 and emb.shape[1] != H:
        yield finding(
            f"no embed_tokens of its own and the target's is not {H} wide; ship the drafter's own",
            "embed_tokens.weight",
            detail=f"the engines borrow the target's {emb.name} {list(emb.shape)} for a drafter "
            f"of hidden size {H}",
        )


@rule("WC504", needs="target")
def target_dtype(ctx, finding):
    td = CONFIG_DTYPES.get(str(ctx.target.dtype or "").lower())
    if ctx.target.embed is not None and not td:
        td = ctx.target.embed.dtype
    floats = set(ctx.weights_by_dtype())
    if td and floats and floats != {td}:
        built = ctx.built_dtypes()
        yield finding(
            f"drafter weights are {', '.join(sorted(floats))}, the target is {td}; cast them "
            "(convert --dtype)",
            "dtype",
            detail=(f"{built}" if built else "the engine casts at load")
            + (" (and an fp32 drafter ships twice the bytes)" if "F32" in floats else ""),
        )
