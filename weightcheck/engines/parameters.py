"""The engine's parameters, two phases of the replay (view.py): the parameters the engine's module
has for a config (:func:`expected_parameters`, with the shapes it builds them in), and what each
ends with once every tensor is routed (:func:`parameter_states`): loaded, the target's, or left at
its random initialisation."""

from __future__ import annotations

import dataclasses
import re

from weightcheck import expr
from weightcheck.engines.data import Engine, Parameter, applies
from weightcheck.engines.replay_types import ParamState
from weightcheck.record import record


@record
class Expected:
    """The parameters the engine's module has for this config (d2t, consumed by special code, is
    not one): by full name, each with its shape (None: not known)."""

    params: dict[str, Parameter]
    shapes: dict[str, list | None]
    layers: int  # decoder layers built
    d2t_shape: list | None  # the shape the special code asserts for d2t

    @property
    def names(self) -> set[str]:
        """The parameter names without their shard (``[i]``)."""
        return {k.split("[")[0] for k in self.params}

    @property
    def modules(self) -> set[str]:
        """Every module that holds a parameter (each dotted prefix of a name)."""
        return {n.rsplit(".", i)[0] for n in self.names for i in range(1, n.count(".") + 1)}

    @property
    def fused(self) -> dict[str, list]:
        """Parameters that exist only as shards: a tensor under the whole name loads every one."""
        out: dict[str, list] = {}
        for k in self.params:
            if "[" in k:
                out.setdefault(k.split("[")[0], []).append(k)
        return out


def _int(v, default):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _expand(param: str, n: int) -> list[str]:
    return [param.format(i=i) for i in range(n)] if "{i}" in param else [param]


def shape_of(p: Parameter, vals: dict, layer: int) -> list | None:
    """The shape the engine builds ``p`` in for layer ``layer`` (None: not known)."""
    if p.shape is None:
        return None
    try:
        got = expr.evaluate(p.shape, {**vals, "layer": layer})
    except (expr.ExprError, TypeError, ValueError, ZeroDivisionError):
        return None
    if not isinstance(got, list) or not all(type(x) is int for x in got):
        return None
    return got


def _layer_count(data: Engine, vals: dict) -> int:
    if data.layers is None:
        return 1
    try:
        return _int(expr.evaluate(data.layers.count, vals), 1)
    except expr.ExprError:
        return 1


def expected_parameters(data: Engine, version: str, vals: dict, built_arch) -> Expected:
    """Phase 1: the parameters the engine builds for the config values ``vals``: each rule of
    the data that applies to the version, the config and the class, copied once per decoder layer
    (in-layer rules) and once per aux hidden state (``{i}``), renamed as older module trees name
    them."""
    n_aux = _int(vals.get("num_aux_hidden_states") or 3, 3)
    n_layers = _layer_count(data, vals)
    d2t = next((p for p in data.parameter if p.canonical == "d2t" and p.shape), None)
    out = Expected({}, {}, n_layers, shape_of(d2t, vals, 0) if d2t is not None else None)
    for p in data.parameter:
        if p.canonical == "d2t" or not applies(p, version) or not expr.holds(p.when, vals):
            continue
        if p.architectures and built_arch not in p.architectures:
            continue
        in_layer = data.layers is not None and p.param.startswith(data.layers.prefix)
        for layer in range(n_layers) if in_layer else [0]:
            for i, full in enumerate(_expand(p.param, n_aux)):
                _add(out, data, version, vals, p, full, p.canonical.format(i=i), layer, in_layer)
    return out


def _add(out: Expected, data, version, vals, p, full, canonical, layer, in_layer) -> None:
    """One copy of parameter rule ``p``: named for its layer and the version's module tree."""
    if in_layer and layer:
        full = f"model.layers.{layer}." + full[len(data.layers.prefix) :]
        canonical = f"layers.{layer}." + canonical.split(".", 1)[1]
    for r in data.names.param_rename:  # older module trees (sglang <= 0.5.11)
        if applies(r, version):
            full = re.sub(r.pattern, r.replace, full)
    required = p.required and expr.holds(p.required_when, {**vals, "layer": layer})
    out.params[full] = dataclasses.replace(p, param=full, canonical=canonical, required=required)
    out.shapes[full] = shape_of(p, vals, layer)


def narrowed(p: Parameter, got: list | None, want: list | None) -> str | None:
    """Why a tensor of shape ``got`` loads into ``p`` of shape ``want`` all the same: they differ
    only along the dimension the weight loader narrows (``narrows``), and the tensor is larger
    there, or smaller and the loader pads (``narrow_smaller = "pad"``). None: the load stops."""
    d = {"rows": 0, "columns": 1}.get(p.narrows or "")
    if d is None or got is None or want is None or len(got) != len(want) or d >= len(got):
        return None
    if any(g != w for i, (g, w) in enumerate(zip(got, want)) if i != d):
        return None
    if got[d] > want[d]:
        return (
            f"shape {got} into {want}: the weight loader keeps the first {want[d]} {p.narrows} "
            "and drops the rest"
        )
    if got[d] < want[d] and p.narrow_smaller == "pad":
        return (
            f"shape {got} into {want}: the weight loader zero-fills the {p.narrows} after {got[d]}"
        )
    return None


# ---------------------------------------------------------------------------------------------
# phase 3: what each parameter ends with


@record(frozen=True)
class _Context:
    """What deciding a parameter's state reads besides the parameter."""

    drafter: object
    raw: dict
    target: object
    by_name: dict
    dtype: object
    target_hidden: object
    hidden: object


def parameter_states(drafter, data: Engine, vals: dict, exp: Expected, landings, target) -> list:
    """Phase 3: every parameter's state once the tensors are routed (``landings``): loaded (and
    from which tensors, the last one winning), supplied by the target, left at its random
    initialisation, or optional and absent; d2t's from the special code's landing."""
    raw = drafter.config or {}
    fused = exp.fused
    filled: dict[str, list] = {}
    for landing in landings:
        if landing.fate == "loaded":
            for k in (
                fused.get(landing.param, [landing.param])
                if landing.param not in exp.params
                else [landing.param]
            ):
                filled.setdefault(k, []).append(landing.name)
    ctx = _Context(
        drafter,
        raw,
        target,
        {t.name: t for t in drafter.tensors},
        vals.get("dtype") if "dtype" in vals else None,
        raw.get("target_hidden_size"),
        vals.get("hidden_size") or raw.get("hidden_size"),
    )
    states = [_state(p, filled.get(p.param, []), exp, ctx) for p in exp.params.values()]
    return states + _d2t_states(drafter, data, vals, landings)


def _state(p: Parameter, got: list, exp: Expected, ctx: _Context) -> ParamState:
    ft = p.from_target
    equal, equal_note = None, ""
    same_width = ft == "if_absent_or_equal_same_width"
    if same_width:
        ft = "if_absent_or_equal"
    if ft == "if_absent_or_equal" and got:
        t = ctx.by_name.get(got[-1])
        equal, equal_note = _equals_target(ctx.drafter, t, p, ctx.target, ctx.dtype)
    wide = _target_width(ctx.target, ctx.target_hidden) if same_width else None
    mine = (exp.shapes.get(p.param) or [None])[-1]
    if wide is not None and mine is not None and wide != mine:
        equal, ft = False, "width"  # the draft keeps its own (or its initial) embedding
        equal_note = f"the target's embedding is {wide} wide, the draft's {mine}: not shared"
    fills = _target_fills(ft, ctx, got, equal)
    if got and fills and ft != "if_absent_or_equal":
        state, note = "from_target", "the checkpoint's tensor is replaced by the target's"
    elif got and fills:
        state, note = "from_target", equal_note
    elif got:
        state, note = "loaded", equal_note
    elif fills:
        state, note = "from_target", p.note
    elif ft == "width":
        state, note = "random", equal_note
    elif p.required:
        state, note = "random", p.note or "nothing loads into it; it keeps its initial values"
    else:
        state, note = "optional-absent", p.note
    kept = winner(ctx.drafter, got) if len(got) > 1 else None
    return ParamState(
        p.param, p.canonical, p.required, state, got, note, p.cite, exp.shapes.get(p.param), kept
    )


def _target_fills(ft, ctx: _Context, got: list, equal) -> bool:
    """Whether the target's tensor ends in the parameter (rule ``from_target`` of the data)."""
    raw, target_hidden, hidden = ctx.raw, ctx.target_hidden, ctx.hidden
    if ft == "always":
        return True
    if ft == "unless_target_hidden_differs":
        return not (target_hidden and hidden and target_hidden != hidden)
    if ft == "if_draft_vocab_null":
        return "draft_vocab_size" in raw and raw["draft_vocab_size"] is None
    if ft == "if_draft_vocab_unset":
        return raw.get("draft_vocab_size") is None
    if ft == "if_absent_or_equal":
        return bool(not got or equal)
    return False


def _d2t_states(drafter, data: Engine, vals: dict, landings) -> list:
    """d2t is consumed by special code, not loaded into a parameter: its state from that."""
    out = []
    for p in data.parameter:
        if p.canonical != "d2t" or not expr.holds(p.when, vals):
            continue
        got = [
            landing.name
            for landing in landings
            if landing.fate == "special" and landing.canonical == "d2t"
        ]
        state = "loaded" if got else ("random" if p.required else "optional-absent")
        note = "" if got else (p.note or "absent: draft ids are used as target ids")
        kept = winner(drafter, got) if len(got) > 1 else None
        out.append(
            ParamState(
                p.param, "d2t", p.required, state, got, note, p.cite, shape_of(p, vals, 0), kept
            )
        )
    return out


def winner(drafter, names: list) -> str | None:
    """Of several tensors loaded into one parameter slice, the one whose values stay: both engines
    load files in order and names sorted within a file, the last write wins."""
    files = {}
    for t in drafter.tensors:
        files.setdefault(t.name, getattr(t, "file", None) or "")
    return max(names, key=lambda n: (files.get(n, ""), n))


def _target_width(target, target_hidden) -> int | None:
    """The target's embedding width: its embed_tokens tensor with --target, else the draft
    config's ``target_hidden_size`` (None: unknown)."""
    embed = getattr(target, "embed", None) if target is not None else None
    if embed is not None and getattr(embed, "shape", None):
        return int(embed.shape[-1])
    return target_hidden if type(target_hidden) is int else None


def _equals_target(drafter, t, p: Parameter, target, dtype) -> tuple[bool | None, str]:
    """Whether checkpoint tensor ``t`` equals the target's tensor for parameter ``p`` once both are
    cast to the built dtype (vLLM shares the target's then: torch.equal). (None, note) when it
    cannot tell: no --target, or the bytes cannot be compared."""
    unknown = "loaded, or the target's when equal to it (give --target to compare)"
    if target is None or t is None:
        return None, unknown
    theirs = target.lm_head if p.canonical == "lm_head.weight" else target.embed
    if theirs is None:
        if getattr(target.source, "layout", "") == "config only":
            return None, "loaded, or the target's when equal to it (--target is config only)"
        return None, unknown
    if tuple(theirs.shape) != tuple(t.shape):
        return False, "not the target's: the shapes differ"
    from weightcheck.engines import same_bytes

    try:
        eq = same_bytes.equal_as(drafter.source, t, target.source, theirs, dtype)
    except Exception as e:  # a remote read failing must not fail the view
        return None, f"{unknown}; comparing failed: {type(e).__name__}"
    if eq is None:
        return None, unknown
    if eq:
        return (
            True,
            f"equal to the target's {theirs.name} in {dtype or t.dtype}: the target's is shared",
        )
    return False, f"differs from the target's {theirs.name}: the checkpoint's is kept"
