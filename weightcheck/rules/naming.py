"""WC1xx: tensor names (unknown, mixed dialects, duplicates, wrapper prefixes)."""

from __future__ import annotations

from weightcheck.rules.base import rule


@rule(
    "WC101",
    "unknown-tensor-name",
    "error",
    "A tensor name no dialect explains: engines drop it without a word (SGLang) or refuse (vLLM).",
)
def unknown_names(ctx):
    for n in ctx.d.naming.unknown:
        yield ctx.f(
            "WC101",
            f"{n}: no dialect in mappings/dialects explains this name; SGLang "
            "would drop it silently",
            n,
        )


@rule(
    "WC102",
    "mixed-dialect",
    "error",
    "Names of two dialects in one checkpoint (e.g. layers.0.* inside a midlayer.* drafter).",
)
def mixed(ctx):
    for n, other in ctx.d.naming.foreign.items():
        yield ctx.f(
            "WC102",
            f"{n}: a {other} name in a {ctx.d.dialect} checkpoint; an engine that "
            f"reads {ctx.d.dialect} names drops it and keeps the parameter random",
            n,
        )


@rule(
    "WC103",
    "duplicate-canonical",
    "error",
    "Two tensors map to the same canonical tensor: which one an engine keeps is an accident.",
)
def duplicates(ctx):
    for c, names in ctx.d.naming.duplicates.items():
        yield ctx.f("WC103", f"{c} is given {len(names)} times: {', '.join(names)}", c)


@rule(
    "WC104",
    "wrapper-prefix",
    "error",
    "Names carry a training or HF-style prefix (draft_model., module., model.) the engines do not strip.",
)
def wrappers(ctx):
    for w in ctx.d.naming.wrappers:
        dname, prefix = w.split(":", 1)
        if prefix == "model.":
            # SGLang's Llama drafter uses an existing model.* name as it is (docs/engines.md §0 #3)
            why = (
                "vLLM prepends `model.` itself and fails on the doubled `model.model.*` names "
                "(so does SGLang's MLA drafter)"
            )
        else:
            why = "SGLang and vLLM prepend `model.` themselves and would match nothing"
        yield ctx.f(
            "WC104",
            f"tensor names carry the prefix `{prefix}` ({dname}); {why} — convert "
            "the checkpoint (weightcheck convert) before serving",
            prefix,
        )
