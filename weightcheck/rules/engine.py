"""WC7xx: the engine's view (--engine), read from the replay in weightcheck/engines/."""

from __future__ import annotations

import json

from weightcheck import expr
from weightcheck.engines import aux, model_path
from weightcheck.engines.data import load, loaders, newest
from weightcheck.engines.replay_types import BUFFER
from weightcheck.errors import WeightcheckError
from weightcheck.rules.base import CONDITIONAL, MISFED, UNCHANGED, rule
from weightcheck.rules.tensors import shape_advice


@rule("WC701", needs="engine")
def engine_arch(ctx, finding):
    v = ctx.engine_view
    if not v.architectures_ok:
        accepted = ", ".join(  # every loader's: the Llama drafter's and the MLA drafter's
            a for data in loaders(v.engine) for a in data.engine.architectures
        )
        fix = ctx.fix_command(v.engine)
        yield finding(
            f"{v.engine} selects no EAGLE-3 loader for {json.dumps(v.architecture)}; write "
            f"{v.engine}'s class",
            "architectures",
            fix=fix,
            detail=f"{v.engine} {v.version} loads EAGLE-3 drafters declared as {accepted}"
            + (f"; `{fix}` writes the class it reads" if fix else ""),
        )


@rule("WC702", needs="engine")
def engine_drops(ctx, finding):
    for landing in ctx.engine_view.landings:
        if landing.why.startswith(BUFFER):  # not a weight: WC105 says it, as info
            continue
        if landing.fate in ("dropped", "warned") and not landing.why.startswith(
            "dropped on purpose"
        ):
            yield finding(
                f"{landing.name}: {ctx.engine_view.engine} drops it without a word; ship the "
                "name it reads",
                landing.name,
                detail=f"{landing.why}; looked up as {landing.engine_name}. `--explain` shows "
                "where each name lands",
            )
        elif landing.fate == "dropped":
            yield finding(
                f"{landing.name}: {ctx.engine_view.engine} drops it on purpose; set the flag as "
                "trained",
                landing.name,
                consequence=MISFED,  # served without the module the tensor trained (WC205)
                detail=landing.why,
            )


@rule("WC703", needs="engine")
def engine_rejects(ctx, finding):
    for landing in ctx.engine_view.landings:
        if landing.fate == "error":
            yield finding(
                f"{landing.name}: {ctx.engine_view.engine} fails to load it; the load stops",
                landing.name,
                detail=f"{landing.why}; looked up as {landing.engine_name}",
            )


@rule("WC704", needs="engine")
def engine_random(ctx, finding):
    for p in ctx.engine_view.params:
        if p.state == "random":
            yield finding(
                f"{p.canonical}: {ctx.engine_view.engine} loads nothing into it; it keeps its "
                "initial values",
                p.canonical,
                detail=f"{p.param}: {p.note}",
            )


@rule("WC705", needs="engine")
def engine_config_error(ctx, finding):
    for fld, msg in ctx.engine_view.config_errors:
        on = f"`{fld}`" if len(str(fld)) <= 40 else "a config value"
        yield finding(
            f"{ctx.engine_view.engine} stops at start-up on {on}; correct it",
            fld,
            detail=msg,
        )
    f = ctx.engine_view.forward_failure  # a config value the draft's first forward fails on
    if (
        ctx.engine_view.starts
        and f is not None
        and f.subject != "aux_layer_ids"
        and f.subject not in ctx.normalized.mistyped  # WC212 says a wrong type
    ):
        yield finding(
            f"{ctx.engine_view.engine} starts, then its first draft forward fails on "
            f"`{f.subject}`; correct it",
            f.subject,
            detail=f"{f.why}; on GPU that forward is the start-up's memory profiling, so the "
            "server never comes up" + (f" ({f.cite})" if f.cite else ""),
        )
    for x in ctx.engine_view.path_decisions:  # another config parser, chosen by the path
        # it stops (error); or it reads another file, which is there: right only if that file
        # says what config.json says (a warning)
        yield finding(
            x.message,
            model_path.FIELD,
            consequence=None if x.failure is not None else CONDITIONAL,
            detail=x.detail,
        )


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
                f"{layout}, and {v.engine} cannot express `{r.when}` ({r.why}): serve it with an "
                "engine that reads it",
                r.when,
            )
            return
        fix = ctx.convert_fix(v.engine)
        yield finding(f"{layout}; convert it with `{fix}`", "transformer_layer_config", fix=fix)
        return
    for r in refused:
        yield finding(f"`{r.when}`: {r.why}", r.when)


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


def _runner_said(v, name: str | None = None) -> str:
    """How a message names the engine's runner when it has several ("vllm (V2 runner, the
    default)"), the engine alone otherwise."""
    rs = v.aux.get("runners") or []
    r = next((x for x in rs if x["name"] == name), rs[0] if rs else None)
    if r is None or len(rs) < 2:
        return v.engine
    return f"{v.engine} ({r['name']} runner" + (", the default)" if r["default"] else ")")


def _runners_detail(v) -> str:
    rs = v.aux.get("runners") or []
    if len(rs) < 2:
        return ""
    return (
        " Runners: "
        + "; ".join(
            f"{r['name']} ({r['runs_when']}) reads {r['from'] or 'no ids here'}" for r in rs
        )
        + "."
    )


def _trained(ctx):
    """(the trained layers, the convention, why) of the drafter's own ids, or None: what the ids
    mean in the convention its trainer wrote them in, wherever the config writes them."""
    t, d = ctx.target, ctx.drafter
    if t is None or not aux.trained_convention(d.dialect):
        return None
    ids = aux.written_ids(d.config or {})
    if ids is None:
        return None  # without ids of its own the drafter gets defaults everywhere (WC407)
    L = t.num_layers
    conv = aux.convention_of(d, L)
    version = newest(load(conv))
    there = aux.captured(ids, conv, version, t.model_type, L, reach=False)
    why = (
        f"ids that end at the target's {L} layers are layer boundaries"
        if conv != aux.convention_of(d)
        else "the one its config writes them in"
    )
    return (there, conv, why, ids) if there is not None else None


@rule("WC708", needs="engine")
def aux_convention(ctx, finding):
    """The default runner captures other layers than trained: error (other values fed to fc)."""
    v = ctx.engine_view
    if not v.starts or ctx.target is None:  # a failure is said by its own finding
        return
    trained = _trained(ctx)
    if trained is None:
        return
    there, conv, why, ids = trained
    if conv == v.engine and v.aux.get("ids") == ids:
        return  # read where written, in the convention written
    here = v.captured_layers
    if here is None or here == there or v.forward_failure is not None:
        return  # the same layers; or the first forward fails on the ids (WC712)
    L = ctx.target.num_layers
    read = v.aux.get("ids")
    ids_here = read if read is not None else f"none it reads, so its default {aux.default_ids(L)}"
    others = [
        r for r in v.aux.get("runners", [])[1:] if r.get("captures_output_of_layers") == there
    ]
    detail = (
        f"The {others[0]['name']} runner ({others[0]['runs_when']}) reads {others[0]['from']} "
        "and captures the trained layers."
        if others
        else ""
    ) + _runners_detail(v)
    try:  # convert writes ids that make this engine capture the trained layers, when some do
        aux.convert_ids(ids, conv, v.engine, ctx.target.model_type, L)
        fix = ctx.convert_fix(v.engine)
    except WeightcheckError:
        fix = None
        detail += (
            f" No ids make {v.engine}'s forward for a {ctx.target.model_type} target capture "
            f"layers {there}: serve it with an engine that captures them."
        )
    yield finding(
        f"{_runner_said(v)} captures the outputs of target layers {here}, but the drafter was "
        f"trained on layers {there}",
        "aux_layer_ids",
        fix=fix,
        detail=f"Ids it reads: {ids_here}. The drafter's ids {ids} are in {conv}'s convention "
        f"({why}). {detail.strip()}".strip(),
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
    """Ids written where the engine's default runner does not read them: it captures the
    target's default ids. With the target: info when those are the trained layers and every
    runner agrees, a warning naming the runner that captures others, nothing when the default
    runner itself captures others (WC708, an error). Without it: a warning (right only if the
    target's default layers are the trained ones)."""
    v = ctx.engine_view
    if not v.starts:  # an engine that does not start captures nothing (its failure is said)
        return
    raw = ctx.drafter.config or {}
    written = aux.written_ids(raw)
    rs = v.aux.get("runners") or []
    if written is None or not rs or rs[0]["ids"] is not None or v.aux.get("captures") is False:
        return
    top = isinstance(raw.get("eagle_aux_hidden_state_layer_ids"), list)
    where = "at the top level" if top else "in eagle_config"
    who = _runner_said(v)
    reads = [r for r in rs[1:] if r["ids"] is not None]
    fix = ctx.convert_fix(v.engine)
    runners = _runners_detail(v)
    if ctx.target is None:
        also = f"; the {reads[0]['name']} runner reads them" if reads else ""
        yield finding(
            f"aux ids {written} only {where}: {who} reads none there and captures the target's "
            f"default layers{also}",
            "aux_layer_ids",
            fix=fix,
            detail="Right only if the target's default layers are the ones the drafter was "
            f"trained on (--target TARGET says).{runners}",
        )
        return
    trained = _trained(ctx)
    here = v.captured_layers
    if trained is None or here is None or here != trained[0]:
        return  # the default runner feeds other layers: WC708 (an error) says it
    differ = [r for r in reads if r.get("captures_output_of_layers") != here]
    if differ:
        r = differ[0]
        yield finding(
            f"{who} reads no aux ids {where}; its default layers {here} are the trained ones, but "
            f"the {r['name']} runner captures {r['captures_output_of_layers']}",
            "aux_layer_ids",
            consequence=CONDITIONAL,
            fix=fix,
            detail=f"Right under the default runner only. The {r['name']} runner runs on "
            f"{r['runs_when']} and reads {r['from']}.{runners}",
        )
        return
    yield finding(
        f"aux ids {written} only {where}: {who} reads none there; its default layers {here} are "
        "the trained ones (nothing served changes)",
        "aux_layer_ids",
        consequence=UNCHANGED,
        fix=fix,
        detail=runners.strip() or None,
    )


@rule("WC711", needs="engine")
def shipped(ctx, finding):
    for p in ctx.engine_view.params:
        if p.state == "from_target" and p.sources:
            t = ctx.drafter.by_canonical().get(p.canonical)
            size = f" ({t.nbytes / 1e9:.2f} GB)" if t is not None else ""
            fix = (
                ctx.fix_command(ctx.engine_view.engine, "--embeddings drop")
                if p.canonical == "embed_tokens.weight"
                else None
            )
            yield finding(
                f"{p.canonical}{size} is replaced by the target's in {ctx.engine_view.engine}"
                + ("; it can be left out" if fix else ""),
                p.canonical,
                fix=fix,
                detail=f"`{fix}` leaves it out" if fix else None,
            )


@rule("WC712", needs="engine")
def captured_count(ctx, finding):
    """The target's first forward stops on the aux ids (the view's failure at "forward": a slot
    never written, a count fc is not built for, an id the forward raises on)."""
    v = ctx.engine_view
    f = v.forward_failure
    if ctx.target is None or not v.starts or f is None or f.subject != "aux_layer_ids":
        return
    t = ctx.target
    conv = aux.convention_for(v.engine, v.version, t.model_type)
    lost = aux.never_captured(v.aux.get("ids"), v.engine, v.version, t.model_type, t.num_layers)
    said = f"A {t.num_layers}-layer {t.model_type} target. "
    if conv is not None:
        said += f"Capture point: {conv.capture_point}. "
        if lost and conv.missing:
            said += f"An id never reached: {conv.missing}. "
    yield finding(
        f"{_runner_said(v)} fails at the target's first forward on the aux ids; write ids it "
        "captures",
        "aux_layer_ids",
        detail=(
            f"{f.why}. " + said + _runners_detail(v) + (f" {f.cite}" if f.cite else "")
        ).strip(),
    )


@rule("WC713", needs="live")
def live_disagrees(ctx, finding):
    lv = ctx.live
    said = (
        f"{lv['engine']} {lv['version']} (installed, live) vs the replay of {lv['replay_version']}"
    )
    for x in lv["disagreements"]:
        yield finding(
            f"the installed {lv['engine']} {lv['version']} and the replay disagree; trust the "
            "live answer",
            x.get("tensor") or x.get("param"),
            detail=f"{said}: {x['says']}",
        )


@rule("WC714", needs="engine")
def engine_narrows(ctx, finding):
    v = ctx.engine_view
    for landing in v.landings:
        # routing.py: a tensor of another shape that the loader narrows or pads (parameters.py
        # narrowed()) loads, its why giving both shapes
        if landing.fate == "loaded" and landing.why.startswith("shape "):
            advice = shape_advice(ctx, ctx.drafter.naming.canonical.get(landing.name, ""))
            yield finding(
                f"{v.engine} cuts or pads it to its parameter: not the values trained"
                f"{advice or '; correct the config'}",
                landing.name,
                detail=f"loaded into {landing.param}: {landing.why}",
            )
