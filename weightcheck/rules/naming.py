"""WC1xx: tensor names (unknown, mixed dialects, duplicates, wrapper prefixes)."""

from __future__ import annotations

from weightcheck.engines.data import ENGINES
from weightcheck.engines.view import view as replay
from weightcheck.rules.base import WARNING, rule


@rule("WC101")
def unknown_names(ctx, finding):
    for n in ctx.drafter.naming.unknown:
        yield finding(
            f"{n}: no dialect in mappings/dialects explains this name; SGLang "
            "would drop it silently",
            n,
        )


@rule("WC102")
def mixed(ctx, finding):
    for n, other in ctx.drafter.naming.foreign.items():
        yield finding(
            f"{n}: a {other} name in a {ctx.drafter.dialect} checkpoint; an engine that "
            f"reads {ctx.drafter.dialect} names drops it and keeps the parameter random",
            n,
        )


@rule("WC103")
def duplicates(ctx, finding):
    for c, names in ctx.drafter.naming.duplicates.items():
        yield finding(f"{c} is given {len(names)} times: {', '.join(names)}", c)


@rule("WC104")
def wrappers(ctx, finding):
    for w in ctx.drafter.naming.wrappers:
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
            yield finding(
                f"tensor names carry the prefix `{prefix}` ({dname}): {', '.join(loads)} load(s) "
                f"them as written; {', '.join(fails)} prepend(s) `model.` again and fail(s) — "
                f"`{fix}` writes the names it reads",
                prefix,
                severity=WARNING,
                fix=fix,
            )
            continue
        who = f"{ctx.engine} prepends" if ctx.engine else "SGLang and vLLM prepend"
        yield finding(
            f"tensor names carry the prefix `{prefix}` ({dname}); {who} `model.` itself and "
            f"would match nothing — convert it before serving: `{fix}`",
            prefix,
            fix=fix,
        )


@rule("WC105")
def buffers(ctx, finding):
    """Non-parameter buffers (mappings/names.toml [[buffer]]): no engine loads them, and every
    parameter still loads, so nothing served changes (info)."""
    for n, what in ctx.drafter.naming.buffers.items():
        yield finding(
            f"{n}: a non-parameter buffer, not a weight; both engines drop it and nothing "
            "served changes (convert leaves it out)",
            n,
            detail=f"{what}. SGLang finds no parameter of that name and skips it; vLLM's "
            "AutoWeightsLoader drops it by name (REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER).",
        )


def _loads_prefixed(ctx, engine: str, prefix: str) -> bool:
    """The engine starts and loads every tensor whose name carries ``prefix``."""
    if ctx.engine_view is not None and ctx.engine == engine:
        view = ctx.engine_view
    else:
        view = replay(ctx.drafter, engine)
    lands = [x for x in view.landings if x.name.startswith(prefix)]
    return (
        bool(lands)
        and view.starts
        and all(x.fate in ("loaded", "special", "skipped") for x in lands)
    )
