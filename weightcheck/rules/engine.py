"""WC7xx: the engine's view (--engine), read from the replay in weightcheck/engines/."""

from __future__ import annotations

import json

from weightcheck import expr
from weightcheck.engines import aux
from weightcheck.engines.data import load, loaders
from weightcheck.engines.view import view as replay
from weightcheck.model import config as config_mod
from weightcheck.rules.base import WARNING, rule


@rule("WC701", needs="engine")
def engine_arch(ctx, finding):
    v = ctx.engine_view
    if not v.architectures_ok:
        accepted = ", ".join(  # every loader's: the Llama drafter's and the MLA drafter's
            a for data in loaders(v.engine) for a in data.engine.architectures
        )
        yield finding(
            f"{v.engine} {v.version} loads EAGLE-3 drafters declared as {accepted}; "
            f"this config says {v.architecture!r}",
            "architectures",
        )


@rule("WC702", needs="engine")
def engine_drops(ctx, finding):
    for landing in ctx.engine_view.landings:
        if landing.fate in ("dropped", "warned") and not landing.why.startswith(
            "dropped on purpose"
        ):
            yield finding(
                f"{landing.name}: {ctx.engine_view.engine} drops it ({landing.why}; looked up as "
                f"{landing.engine_name})",
                landing.name,
            )
        elif landing.fate == "dropped":
            yield finding(
                f"{landing.name}: shipped but unused by {ctx.engine_view.engine} ({landing.why})",
                landing.name,
                severity=WARNING,
            )


@rule("WC703", needs="engine")
def engine_rejects(ctx, finding):
    for landing in ctx.engine_view.landings:
        if landing.fate == "error":
            yield finding(
                f"{landing.name}: {ctx.engine_view.engine} fails to load ({landing.why}; looked "
                f"up as {landing.engine_name})",
                landing.name,
            )


@rule("WC704", needs="engine")
def engine_random(ctx, finding):
    for p in ctx.engine_view.params:
        if p.state == "random":
            yield finding(
                f"{p.param} ({p.canonical}) receives nothing in {ctx.engine_view.engine}: {p.note}",
                p.canonical,
            )


@rule("WC705", needs="engine")
def engine_config_error(ctx, finding):
    for fld, msg in ctx.engine_view.config_errors:
        yield finding(f"{ctx.engine_view.engine}: {msg}", fld)


@rule("WC706", needs="engine")
def engine_cannot(ctx, finding):
    v = ctx.engine_view
    data = load(v.loader)  # the loader replayed (the MLA drafter's has its own)
    # what the engine cannot express is what convert refuses to write for it (the same data)
    refused = [r for r in data.output.refuse if expr.holds(r.when, ctx.normalized.values)]
    if v.speculators_format and data.speculators_adapter is None:
        layout = (
            f"a speculators-format config (transformer_layer_config): {v.engine} reads only "
            "flat fields and eagle_config"
        )
        if refused:  # convert refuses it too: no command to suggest, the reason instead
            r = refused[0]
            yield finding(
                f"{layout}, and {v.engine} cannot express {r.when} ({r.why}): serve it with an "
                "engine that reads it",
                r.when,
            )
            return
        fix = ctx.convert_fix(v.engine)
        yield finding(f"{layout}; convert it with `{fix}`", "transformer_layer_config", fix=fix)
        return
    for r in refused:
        yield finding(f"{r.when}: {r.why}", r.when)


@rule("WC707", needs="engine")
def engine_default(ctx, finding):
    v = ctx.engine_view
    adapter = load(v.loader).speculators_adapter
    if not v.speculators_format or adapter is None:
        return
    for k, default in adapter.override.items():
        if k not in ctx.drafter.config and k in adapter.trainers_mean:
            meant = adapter.trainers_mean.get(k)
            yield finding(
                f"{k} is absent: {v.engine} assumes {json.dumps(default)} for "
                "speculators configs"
                + (f" (trainers mean {meant})" if meant else "")
                + "; write it explicitly",
                k,
            )


@rule("WC708", needs="engine")
def aux_convention(ctx, finding):
    v = ctx.engine_view
    t = ctx.target
    if not v.starts:  # an engine that does not start captures nothing (its failure is said)
        return
    # the convention the drafter was trained in: its dialect's (mappings/dialects/*.toml
    # aux_convention), refined by where its config keeps the ids
    if t is None:
        return
    L = t.num_layers
    trained = (
        aux.convention_of(ctx.drafter, L) if aux.trained_convention(ctx.drafter.dialect) else None
    )
    ids = ctx.normalized.get("aux_layer_ids")
    if trained is None or trained == v.engine or ids is None:
        return  # without ids of its own the drafter gets defaults everywhere (WC407)
    if not all(type(i) is int for i in ids):
        return  # ids that are no integers capture nothing anywhere (WC403 says so)
    mt = t.model_type
    here = aux.captured_layers(v, mt, L)
    other = replay(ctx.drafter, trained)
    there = aux.captured_layers(other, mt, L, reach=False)  # as trained: every id, in order
    why = (
        f"ids that end at the target's {L} layers are layer boundaries"
        if trained != aux.convention_of(ctx.drafter)
        else "the one its config writes them in"
    )
    if here is not None and there is not None and here != there:
        ids_here = v.aux.get("ids") or f"none it reads, so its default {[2, L // 2, L - 3]}"
        yield finding(
            f"{v.engine} captures the outputs of target layers {here} (ids: "
            f"{ids_here}), but the drafter was trained on layers {there} (ids "
            f"{other.aux.get('ids')} in {trained}'s convention: {why})",
            "aux_layer_ids",
        )


@rule("WC709", needs="engine")
def target_support(ctx, finding):
    t = ctx.target
    if t is None:
        return
    tg = load(ctx.engine_view.engine).targets
    types = tg.supported_model_types
    archs = tg.supported_architectures
    ok = (
        (t.model_type in types)
        or (t.text_model_type in types)
        or any(a in archs for a in t.architectures)
    )
    if types and not ok:
        yield finding(
            f"{ctx.engine_view.engine} {ctx.engine_view.version} has no EAGLE-3 "
            f"capture for target model_type {t.model_type!r} "
            f"({', '.join(t.architectures) or 'no architectures'})",
            "target",
        )


@rule("WC710", needs="engine")
def aux_location(ctx, finding):
    v = ctx.engine_view
    if not v.starts:  # an engine that does not start captures nothing (its failure is said)
        return
    raw = ctx.drafter.config
    nested = config_mod.lookup(raw, "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    if v.engine == "sglang" and isinstance(top, list) and not isinstance(nested, list):
        yield finding(
            f"aux layer ids {top} are top-level only: SGLang reads only "
            "eagle_config.eagle_aux_hidden_state_layer_ids and captures its defaults",
            "aux_layer_ids",
        )
    if v.engine == "vllm" and isinstance(nested, list) and not isinstance(top, list):
        yield finding(
            f"aux layer ids {nested} are only in eagle_config: vLLM's V2 model runner "
            "(the default on GPU in 0.33) reads the top-level list and captures its "
            "defaults",
            "aux_layer_ids",
        )


@rule("WC711", needs="engine")
def shipped(ctx, finding):
    for p in ctx.engine_view.params:
        if p.state == "from_target" and p.sources:
            t = ctx.drafter.by_canonical().get(p.canonical)
            size = f" ({t.nbytes / 1e9:.2f} GB)" if t is not None else ""
            fix = (
                ctx.convert_fix(ctx.engine_view.engine, "--embeddings drop")
                if p.canonical == "embed_tokens.weight"
                else None
            )
            yield finding(
                f"{p.canonical}{size} is replaced by the target's in "
                f"{ctx.engine_view.engine}" + (f"; `{fix}` leaves it out" if fix else ""),
                p.canonical,
                fix=fix,
            )


@rule("WC712", needs="engine")
def captured_count(ctx, finding):
    v = ctx.engine_view
    t = ctx.target
    if t is None or not v.starts or not v.architectures_ok or v.aux.get("captures") is False:
        return
    ids = v.aux.get("ids")
    got = v.captured_layers
    if got is None:  # nothing captured: ids none of which its forward loop reaches, or no
        # convention for this target (then nothing is said)
        known = aux.captured([0], v.engine, v.version, t.model_type, t.num_layers) is not None
        if ids is None or not known or not all(type(i) is int for i in ids):
            return
        got = []
    n = (v.config.get("num_aux_hidden_states") or {}).get("value")
    if type(n) is not int or len(got) == n:
        return
    # with no ids it reads, the engine captures its defaults: for a shallow target they collapse
    # to fewer states than fc reads, and the forward fails all the same (docs/differential.md R22)
    said = f"ids {json.dumps(ids)}" if ids is not None else "no ids it reads: its default ids"
    yield finding(
        f"{v.engine} captures {len(got)} target state(s), the outputs of layers "
        f"{got} ({said}: sorted, repeats once, only layers its forward loop "
        f"reaches, for a {t.num_layers}-layer target), but fc is built for {n}: the first "
        "forward pass fails on fc's input width",
        "aux_layer_ids",
    )


@rule("WC713", needs="live")
def live_disagrees(ctx, finding):
    lv = ctx.live
    said = (
        f"{lv['engine']} {lv['version']} (installed, live) vs the replay of {lv['replay_version']}"
    )
    for x in lv["disagreements"]:
        yield finding(f"{said}: {x['says']}", x.get("tensor") or x.get("param"))


@rule("WC714", needs="engine")
def engine_narrows(ctx, finding):
    v = ctx.engine_view
    for landing in v.landings:
        # routing.py: a tensor of another shape that the loader narrows or pads (parameters.py
        # narrowed()) loads, its why giving both shapes
        if landing.fate == "loaded" and landing.why.startswith("shape "):
            yield finding(
                f"{landing.name}: {v.engine} loads it into {landing.param} cut or padded to the "
                "parameter: it serves other values than trained",
                landing.name,
                detail=landing.why,
            )
