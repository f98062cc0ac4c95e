"""WC1xx: tensor names (unknown, mixed dialects, duplicates, wrapper prefixes)."""

from __future__ import annotations

from weightcheck.engines.data import ENGINES
from weightcheck.engines.view import view as replay
from weightcheck.rules.base import WARNING, rule


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
        # which engine loads the prefixed names as written: the engine view says (SGLang's Llama
        # drafter tries a name as written before prepending `model.`; vLLM always prepends it)
        engines = [ctx.engine] if ctx.engine else list(ENGINES)
        loads = [e for e in engines if _loads_prefixed(ctx, e, prefix)]
        if loads and ctx.engine:
            continue  # this engine loads them: nothing dropped, nothing to say
        fails = [e for e in engines if e not in loads]
        fix = ctx.convert_fix(fails[0])
        if loads:
            yield ctx.f(
                "WC104",
                f"tensor names carry the prefix `{prefix}` ({dname}): {', '.join(loads)} load(s) "
                f"them as written; {', '.join(fails)} prepend(s) `model.` again and fail(s) — "
                f"`{fix}` writes the names it reads",
                prefix,
                severity=WARNING,
                fix=fix,
            )
            continue
        who = f"{ctx.engine} prepends" if ctx.engine else "SGLang and vLLM prepend"
        yield ctx.f(
            "WC104",
            f"tensor names carry the prefix `{prefix}` ({dname}); {who} `model.` itself and "
            f"would match nothing — convert it before serving: `{fix}`",
            prefix,
            fix=fix,
        )


def _loads_prefixed(ctx, engine: str, prefix: str) -> bool:
    """The engine starts and loads every tensor whose name carries ``prefix``."""
    if ctx.engine_view is not None and ctx.engine == engine:
        view = ctx.engine_view
    else:
        view = replay(ctx.d, engine)
    lands = [x for x in view.landings if x.name.startswith(prefix)]
    return (
        bool(lands)
        and view.starts
        and all(x.fate in ("loaded", "special", "skipped") for x in lands)
    )
