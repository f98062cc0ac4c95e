"""WC1xx: tensor names (unknown, mixed dialects, duplicates, wrapper prefixes)."""

from __future__ import annotations

from weightcheck.engines.data import ENGINES
from weightcheck.engines.parameters import winner
from weightcheck.engines.view import view as replay
from weightcheck.model.drafter import last_loaded
from weightcheck.rules.base import CONDITIONAL, UNCHANGED, UNTRAINED, agree, engines_do, rule


@rule("WC101")
def unknown_names(ctx, finding):
    for n in ctx.drafter.naming.unknown:
        yield finding(
            f"{n}: no dialect explains this name; rename or drop it",
            n,
            detail="no dialect in mappings/dialects explains it: SGLang drops a name that matches "
            "no parameter without a word and vLLM refuses it, so the parameter it was meant for "
            "keeps its initial value (or the server does not start). A trainer's own names can "
            "be described in a dialect file (--mapping FILE).",
        )


@rule("WC102")
def mixed(ctx, finding):
    for n, other in ctx.drafter.naming.foreign.items():
        # which engines drop the name (the served view): an error for those; where every engine
        # asked loads both spellings (SGLang >= 0.5.12, vLLM) the served model is right on
        # those versions only
        drop, load = ctx.hurts(lambda v, n=n: _dropped(v, n))
        said = f"{n}: a {other} name in a {ctx.drafter.dialect} drafter"
        fix = ctx.fix_command(ctx.engine or "sglang")
        how = f" `{fix}` writes every name in one layout." if fix else ""
        evidence = (
            f"{engines_do(load, 'loads')} both spellings; " if load else ""
        ) + "SGLang before 0.5.12 reads only `midlayer.*` and drops a `layers.0.*` name."
        if drop:
            yield finding(
                f"{said}, dropped by {', '.join(drop)}; use one layout",
                n,
                fix=fix,
                detail=f"{evidence} Where it is dropped its parameter keeps its initial "
                f"value.{how}",
                consequence=UNTRAINED,
            )
            continue
        yield finding(
            f"{said}; use one layout",
            n,
            fix=fix,
            detail=f"{evidence}{how}",
        )


def _dropped(view, name: str) -> bool:
    """The engine does not load ``name`` into its parameter (drops, warns or refuses it)."""
    return any(x.name == name and x.fate not in ("loaded", "special") for x in view.landings)


@rule("WC103")
def duplicates(ctx, finding):
    """Two tensors for one canonical tensor: both engines load both into one parameter, files in
    order and names sorted within a file, and the last write stays (engines/parameters.py
    winner). Equal values (in the dtype each engine builds): nothing served changes (info).
    Different ones: the served model is the trained one only if the copy that stays is (a
    warning naming it); which copy was trained is not in the checkpoint."""
    for c, names in ctx.drafter.naming.duplicates.items():
        keeps = winner(ctx.drafter, names)
        listed = ", ".join(names)
        same = copies_equal(ctx, names)
        if same:
            yield finding(
                f"{c} is given {len(names)} times with equal values; nothing served changes, "
                "keep one copy",
                c,
                consequence=UNCHANGED,
                fix=ctx.fix_command(ctx.engine or "sglang"),
                detail=f"{listed} all load into one parameter and the last loaded ({keeps}) "
                "stays; their values are equal in the dtype each engine builds, so the served "
                "weights are the same whichever stays.",
            )
            continue
        differ = "differ" if same is False else "not comparable"
        yield finding(
            f"{c}: {len(names)} copies, {differ}; the engines keep {keeps}: the trained one?",
            c,
            detail=f"{listed} all load into one parameter and the last loaded ({keeps}: files in "
            "order, names sorted within a file) stays: the served model is the trained one only "
            "if that copy is. `weightcheck compare` against the training checkpoint tells which "
            "bytes match; drop the other copy from the export.",
        )
    yield from _fused_beside_parts(ctx, finding)


def _fused_beside_parts(ctx, finding):
    """A fused tensor (qkv_proj, gate_up_proj) given beside its parts stored apart: both engines
    load both spellings into the fused parameter, the fused tensor whole (its weight loader splits
    it) and each part into its rows, in load order, so each part's rows are the last written
    copy's (the SGLang and vLLM oracles: docs/differential.md R34). One finding per fused tensor:
    equal values, nothing served changes (info); different ones, the served rows are the trained
    ones only if the copies kept are (a warning) — and where the engines keep rows of each
    spelling, whichever was trained some rows served are the other's (an error)."""
    canonical = {t.name: t.canonical or t.name for t in ctx.drafter.tensors}
    groups: dict[str, list[tuple[str, list, object]]] = {}
    for c, copies in ctx.drafter.fused_copies().items():
        rows = next(t for t in copies if t.window)  # a view of the fused tensor's rows
        keep = last_loaded(copies)
        groups.setdefault(rows.name, []).append((c, copies, keep))
    arch = ctx.drafter.architecture
    for name, parts in groups.items():
        fused = canonical[name]
        got = arch.fused_of(fused) if arch is not None else None
        order = list(got[1]) if got else []  # the parts in the fused tensor's row order
        parts.sort(key=lambda p: order.index(p[0]) if p[0] in order else len(order))
        same = {c: _copies_equal(ctx, copies, keep) for c, copies, keep in parts}
        kept = {c: keep for c, _, keep in parts}
        where = "; ".join(
            f"{c.split('.')[-2]} from " + (f"{t.name}'s rows" if t.window else t.name)
            for c, t in kept.items()
        )
        how = (
            "both engines load both spellings into one parameter, the fused tensor whole (its "
            "weight loader splits it at the config's offsets) and each part into its rows, in "
            "load order (files in order, names sorted within a file): the last write of each "
            f"part's rows stays — {where}"
        )
        if all(same.values()):
            yield finding(
                f"{fused}: its parts stored apart too, with equal values; nothing served "
                "changes, keep one",
                fused,
                consequence=UNCHANGED,
                fix=ctx.fix_command(ctx.engine or "sglang"),
                detail=f"{how}; the copies are equal in the dtype each engine builds, so the "
                "served weights are the same whichever stays.",
            )
            continue
        differ = [c for c in kept if same[c] is not True]
        dshort = ", ".join(c.split(".")[-2] for c in differ)
        sides = {bool(kept[c].window) for c in differ}
        said = "differ" if all(same[c] is False for c in differ) else "differ or are not comparable"
        which = dshort if len(differ) == 1 else f"{len(differ)} parts"
        head = f"{fused}: {which} stored apart too, with other values"
        tail = (
            " (a fine-tune from SRC starts from the parts stored apart: SpecForge and speculators "
            "load by name and drop the fused tensor, docs/trainers.md); `weightcheck compare` "
            "against the training checkpoint tells which bytes match: drop the other spelling "
            "from the export"
        )
        if len(sides) > 1:  # the rows kept come from both spellings
            yield finding(
                f"{head}; the engines serve rows of each",
                fused,
                consequence=UNTRAINED,
                detail=f"{how}. The copies of {dshort} {said}: whichever spelling was trained, "
                f"the rows kept from the other are not the trained ones{tail}",
            )
            continue
        keeps = "its rows" if sides == {True} else "the copy apart"
        yield finding(
            f"{head}; the engines keep {keeps}",
            fused,
            detail=f"{how}. The copies of {dshort} {said}: the served model is the trained one "
            f"only if {'the fused rows are' if sides == {True} else 'the parts stored apart are'}"
            f"{tail}",
        )


def _copies_equal(ctx, copies: list, keep) -> bool | None:
    from weightcheck.engines import same_bytes

    dtypes = tuple({getattr(v, "dtype", None) for v in ctx.views().values()}) or (None,)
    return same_bytes.copies_equal(ctx.drafter.source, copies, keep, dtypes)


def copies_equal(ctx, names: list[str]) -> bool | None:
    """Whether every copy holds the values of the one the engines keep, in the dtype each engine
    builds in (engines/same_bytes.py: whole tensors up to 1 MB, else rows spread over them)."""
    by_name = {t.name: t for t in ctx.drafter.tensors}
    return _copies_equal(ctx, [by_name[n] for n in names], by_name[winner(ctx.drafter, names)])


@rule("WC106")
def nested_state(ctx, finding):
    from weightcheck.sources.pickled import nested_files

    for name, wf in nested_files(ctx.drafter.source).items():
        top = ", ".join(f"`{k}`" for k in wf.pickle_top)
        fix = ctx.fix_command(ctx.engine or "sglang")
        yield finding(
            f"{name} holds its tensors under `{wf.pickle_key}`; the engines read only its top "
            "level: save the state dict itself",
            name,
            fix=fix,
            detail=f"its top level: {top}. SGLang and vLLM iterate torch.load(file).items() and "
            f"look under no key: SGLang drops `{wf.pickle_key}` and keeps every parameter at its "
            "initial values, vLLM stops the load on it"
            + (f"; `{fix}` writes the tensors at the top level" if fix else ""),
        )


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
        fix = ctx.fix_command(fails[0])
        how = f" `{fix}` writes the names it reads." if fix else ""
        if loads:
            yield finding(
                f"names carry the prefix `{prefix}` ({dname}): {engines_do(fails, 'fails')} on "
                "it; convert to drop it",
                prefix,
                consequence=CONDITIONAL,
                fix=fix,
                detail=f"{engines_do(loads, 'loads')} the names as written; "
                f"{engines_do(fails, 'prepends')} `model.` again and {agree(fails, 'fails')}.{how}",
            )
            continue
        who = f"{ctx.engine} prepends" if ctx.engine else "SGLang and vLLM prepend"
        yield finding(
            f"names carry the prefix `{prefix}` ({dname}): no engine matches them; convert to "
            "drop it",
            prefix,
            fix=fix,
            detail=f"{who} `model.` itself and would match nothing: convert it before serving."
            + how,
        )


@rule("WC105")
def buffers(ctx, finding):
    """Non-parameter buffers (mappings/names.toml [[buffer]]): no engine loads them, and every
    parameter still loads, so nothing served changes (info)."""
    for n, what in ctx.drafter.naming.buffers.items():
        yield finding(
            "a non-parameter buffer, not a weight: both engines drop it; nothing served changes",
            n,
            detail=f"{what}; convert leaves it out. SGLang finds no parameter of that name and skips it; vLLM's "
            "AutoWeightsLoader drops it by name (REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER).",
        )


def _loads_prefixed(ctx, engine: str, prefix: str) -> bool:
    """The engine starts and loads every tensor whose name carries ``prefix``."""
    if ctx.engine_view is not None and ctx.engine == engine:
        view = ctx.engine_view
    else:
        view = replay(ctx.drafter, engine)
    buffers = ctx.drafter.naming.buffers  # dropped by every engine, nothing lost (WC105)
    lands = [x for x in view.landings if x.name.startswith(prefix) and x.name not in buffers]
    return (
        bool(lands)
        and view.starts
        and all(x.fate in ("loaded", "special", "skipped") for x in lands)
    )
