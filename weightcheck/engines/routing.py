"""Name routing, phase 2 of the replay (view.py): each checkpoint tensor's way through the loader's
name rules (mappings/engines/<engine>.toml [names], applied in ``names.order``), to the parameter
it lands in, or to its being consumed by special code (d2t), skipped, dropped without a word, or
refused. Each step kind is one small function of :data:`STEPS`."""

from __future__ import annotations

import json
import re

from weightcheck import expr
from weightcheck.engines.data import Engine, Names, applies
from weightcheck.engines.parameters import Expected, narrowed
from weightcheck.engines.replay_types import BUFFER, Landing
from weightcheck.model import names as name_table
from weightcheck.record import record


@record
class _Route:
    """A tensor on its way: the name as the loader has rewritten it so far, and its fate once a
    rule decides one (``held``: by a concat rule, settled when every tensor has arrived)."""

    name: str
    fate: str | None = None
    shard: str | None = None
    why: str = ""
    cite: str = ""
    held: tuple | None = None  # (Concat rule, index of the part)


@record(frozen=True)
class _Rules:
    """What the steps read besides the tensor."""

    names: Names
    version: str
    vals: dict
    exp: Expected
    param_names: set
    modules: set
    fused: dict
    exceptions: tuple
    module_exceptions: tuple


def _rewrite(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.rewrite:
        if applies(rule, ctx.version):
            pattern, replace = rule.regex()
            r.name = re.sub(pattern, replace, r.name, count=int(rule.occurrences == "first"))


def _special(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.special:
        if not re.search(rule.pattern, r.name):
            continue
        if expr.holds(rule.when, ctx.vals):
            r.fate, r.why, r.cite = "special", rule.becomes, rule.cite
            got = list(t.shape) if t.canonical == "d2t" else None
            want = ctx.exp.d2t_shape
            if t.dtype in rule.refuses_dtypes:
                r.fate, r.why = "error", f"{t.dtype}: {rule.refuses_why}"
            elif want is not None and got is not None and got != want:
                r.fate = "error"
                r.why = (
                    f"shape {got} into {rule.becomes.split()[0]} {want}: the "
                    "weight loader asserts and the load stops"
                )
        return


def _skip(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.skip:
        if re.search(rule.pattern, r.name):
            r.fate, r.why, r.cite = "skipped", "skipped by the loader", rule.cite
            return


def _drop(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.drop:
        if re.search(rule.pattern, r.name) and expr.holds(rule.when, ctx.vals):
            said = f" ({rule.when})" if rule.when else ""
            r.fate, r.why, r.cite = "dropped", f"dropped on purpose{said}", rule.cite
            return


def _stacked(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.stacked:
        if rule.from_ in r.name:
            r.name, r.shard = r.name.replace(rule.from_, rule.to, 1), rule.shard
            return


def _concat(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.concat:
        part = next((i for i, x in enumerate(rule.parts) if x in r.name), None)
        if part is not None:
            r.fate, r.held = "held", (rule, part)
            return


def _prefix(r: _Route, t, ctx: _Rules) -> None:
    for rule in ctx.names.prefix:
        if rule.mode == "unless_parameter":
            add = r.name not in ctx.param_names
        elif rule.mode == "unless_starts_with":
            add = not any(r.name.startswith(x) for x in rule.unless_starts_with)
        else:
            add = not any(s in r.name for s in rule.unless_contains)
        if add:
            r.name = rule.add + r.name


# the loader's name rules by kind (data.Step), applied in names.order until one decides a fate
STEPS = {
    "rewrite": _rewrite,
    "special": _special,
    "skip": _skip,
    "drop": _drop,
    "stacked": _stacked,
    "concat": _concat,
    "prefix": _prefix,
}


def route_names(tensors, data: Engine, version: str, vals: dict, exp: Expected) -> list:
    """Phase 2: the Landing of every tensor, in checkpoint order."""
    names = data.names
    ctx = _Rules(
        names,
        version,
        vals,
        exp,
        exp.names,
        exp.modules,
        exp.fused,
        tuple(re.compile(x) for x in names.unknown_exceptions),
        tuple(re.compile(x) for x in names.module_exceptions),
    )
    landings: list = []
    pending: list = []  # (landing index, Concat, part, name, tensor): held by a concat rule
    for t in tensors:
        r = _Route(t.name)
        for step in names.order:
            if r.fate:
                break
            STEPS[step](r, t, ctx)
        if r.fate == "held":  # settled below, when every tensor has arrived
            pending.append((len(landings), *r.held, r.name, t))
            landings.append(
                Landing(t.name, t.canonical, r.name, None, "dropped", "", r.held[0].cite)
            )
        elif r.fate is None:
            landings.append(_into_parameter(t, r, ctx) or _unknown(t, r.name, ctx))
        else:
            landings.append(Landing(t.name, t.canonical, r.name, None, r.fate, r.why, r.cite))
        buffer = name_table.buffer_of(t.name)
        if buffer is not None and landings[-1].fate in ("dropped", "warned"):
            landings[-1].why = f"{BUFFER}, not a weight ({buffer.what}): {landings[-1].why}"
    _settle_concat(pending, landings, exp.params, exp.shapes)
    return landings


def unrouted(tensors, arch0) -> list:
    """Every tensor's Landing when architectures[0] selects no EAGLE-3 loader: none of them is
    routed, the loader does not run."""
    why = (
        f"architectures[0] {json.dumps(arch0)} selects no EAGLE-3 loader: this loader does not run"
    )
    return [Landing(t.name, t.canonical, None, None, "unknown", why) for t in tensors]


def _into_parameter(t, r: _Route, ctx: _Rules) -> Landing | None:
    """The tensor loaded into the parameter its final name is (a shard of it, or every shard of
    a fused one), or the assertion that stops the load on its shape; None: no such parameter."""
    params, shapes, fused = ctx.exp.params, ctx.exp.shapes, ctx.fused
    name, shard = r.name, r.shard
    key = f"{name}[{shard}]" if shard else name
    if not (key in params or (name in params and not shard) or (not shard and name in fused)):
        return None
    p = params.get(key) or params.get(name)
    pname = p.param if p is not None else name
    want = shapes.get(key) if p is not None else None
    got = list(t.shape) if getattr(t, "shape", None) is not None else None
    narrow = narrowed(p, got, want) if p is not None else None
    if p is None:  # a fused parameter's whole name: the loader splits it into every shard
        fate, why = _split_whole(got, [shapes.get(k) for k in fused[name]], pname)
        return Landing(t.name, t.canonical, name, pname, fate, why, params[fused[name][0]].cite)
    if want is not None and got is not None and got != want and not narrow:
        why = (
            f"shape {got} into parameter {pname} {want}: the weight loader asserts and the "
            "load stops"
        )
        return Landing(t.name, t.canonical, name, pname, "error", why, p.cite)
    cite = p.cite if p is not None else params[fused[name][0]].cite
    return Landing(t.name, t.canonical, name, pname, "loaded", narrow or "", cite)


def _split_whole(got: list | None, shards: list, pname: str) -> tuple[str, str]:
    """A tensor given under a fused parameter's own name (``qkv_proj``, ``gate_up_proj``): both
    engines' weight loaders, given no shard id, narrow its rows at each shard's offset and size
    and load each shard (asserting its shape), so rows past the shards' are never read, too few
    fail the last narrow, other columns fail the assertion. Its fate ("loaded" or "error") and
    why ("" when it is the shards' shape).
    cite: sglang==0.5.23 sglang/srt/layers/linear.py:753-806,1373-1431; vllm==0.32.0
    vllm/model_executor/layers/linear.py:772-830,1212-1263 (the oracles: docs/differential.md R22)"""
    if got is None or any(s is None or len(s) != 2 for s in shards) or len(got) != 2:
        return "loaded", ""
    want = [sum(s[0] for s in shards), shards[0][1]]
    if got == want:
        return "loaded", ""
    if got[1] != want[1]:
        return "error", (
            f"shape {got} into parameter {pname} {want}: each shard's weight loader asserts its "
            "columns and the load stops"
        )
    if got[0] < want[0]:
        return "error", (
            f"shape {got} into parameter {pname} {want}: the split at the shards' row offsets "
            "runs past its rows and the load stops"
        )
    return "loaded", (
        f"shape {got} into {want}: the weight loader splits its first {want[0]} rows at the "
        "shards' offsets and drops the rest"
    )


def _unknown(t, name: str, ctx: _Rules) -> Landing:
    """A name no parameter has: the loader drops it without a word, refuses it or warns."""
    silent = "no such parameter; the loader ignores this suffix silently"
    if any(x.search(name) for x in ctx.exceptions):
        fate, why = "dropped", silent
    elif any(
        (m := x.search(name)) and name[: m.start()].rstrip(".") in ctx.modules
        for x in ctx.module_exceptions
    ):
        fate, why = "dropped", silent
    else:
        fate = {"drop": "dropped", "error": "error", "warn": "warned"}[ctx.names.unknown]
        why = "no such parameter" + _conditional_why(ctx.names, t.name, name)
    return Landing(t.name, t.canonical, name, None, fate, why, ctx.names.cite)


def _conditional_why(names_cfg: Names, original: str, name: str) -> str:
    def matches(pat: str) -> bool:
        return bool(
            re.search(pat, original)
            or re.search(pat, name)
            or re.search(pat, name.removeprefix("model."))
        )

    for r in names_cfg.conditional:
        if matches(r.pattern):
            return f" (the parameter exists only when `{r.when}`)"
    for r in names_cfg.never:
        if matches(r.pattern):
            return " (the engine's module never has this parameter)"
    legacy = name_table.unread_spelling(original)
    if legacy is not None:
        return (
            f" (a legacy spelling of {legacy.canonical.rstrip('.')}, which this loader does not "
            "rename: mappings/names.toml)"
        )
    return ""


def _settle_concat(pending: list, landings: list, params: dict, shapes: dict) -> None:
    """What the tensors held by a concat rule became, replayed in checkpoint order as the loader
    caches them: a complete set is concatenated (dim 0) into the fused parameter, checked against
    its shape as a whole (the tensor that completes the set is the one the load stops on); a
    part replaced in the cache, or whose partners never come, is dropped without a word."""
    cache: dict[str, int] = {}  # name as looked up -> index of the landing held under it
    shape_of = {idx: list(t.shape) for idx, *_rest, t in pending}
    for idx, r, part, name, _t in pending:
        if name in cache:
            replaced = landings[cache[name]]
            replaced.why = (
                f"held for its partner, then replaced in the loader's cache by {landings[idx].name}"
            )
        cache[name] = idx
        names = [name.replace(r.parts[part], x, 1) for x in r.parts]
        if not all(n in cache for n in names):
            continue
        held = [cache.pop(n) for n in names]
        _concatenated(r, names, held, idx, landings, params, shapes, shape_of)
    for i in cache.values():
        if not landings[i].why:
            landings[i].why = "held for its partner, which never comes: dropped without a word"


def _concatenated(r, names, held, idx, landings, params, shapes, shape_of) -> None:
    """A complete set of parts, concatenated into the fused parameter (or discarded when there
    is none); the tensor that completes it (``idx``) stops the load when the shapes disagree."""
    fused = names[0].replace(r.parts[0], r.into, 1)
    keys = [f"{fused}[{i}]" for i in range(len(names))]
    if not all(k in params for k in keys):
        for i in held:
            others = " + ".join(landings[j].name for j in held if j != i)
            landings[i].why = (
                f"concatenated with {others} into {fused}, which is no parameter: "
                "discarded without a word"
            )
        return
    for i, k in zip(held, keys):
        landing = landings[i]
        landing.fate, landing.param, landing.engine_name, landing.why, landing.cite = (
            "loaded",
            k,
            fused,
            "",
            params[k].cite,
        )
    want = [shapes.get(k) for k in keys]
    if any(w is None for w in want):
        return
    got = [shape_of[i] for i in held]
    rows, rows_want = sum(g[0] for g in got), sum(w[0] for w in want)
    if rows != rows_want or any(g[1:] != want[0][1:] for g in got):
        # the tensor that completes the set is the one the load stops on; its partners
        # were only held: nothing of them was written
        for i in held:
            landing = landings[i]
            landing.fate, landing.param = "dropped", None
            landing.why = "held for its partner, then part of a concatenation the load stops on"
        landing = landings[idx]
        landing.fate, landing.param = "error", None
        landing.why = (
            f"concatenated {' + '.join(map(str, got))} into parameter {fused} "
            f"{[rows_want, *want[0][1:]]}: the weight loader asserts and the load stops"
        )
