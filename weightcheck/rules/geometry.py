"""WC4xx: the config: architectures, fc width, aux layer ids, attention geometry, rope, layer count."""

from __future__ import annotations

from weightcheck import expr
from weightcheck.engines import aux
from weightcheck.engines.data import (
    ENGINES,
    output_for,
    resolved_architecture,
    selects_eagle3_loader,
)
from weightcheck.model import config as config_mod
from weightcheck.model import inventory
from weightcheck.rules.base import CONDITIONAL, agree, engines_do, rule
from weightcheck.rules.tensors import config_held, swapped_pairs, transposed

TARGET_ARCHITECTURES = ("ForCausalLM", "ForConditionalGeneration")


@rule("WC401")
def architectures(ctx, finding):
    if ctx.drafter.source.config is None:
        return
    names = inventory.declared(ctx.drafter.config)
    v = ctx.views().get(ctx.engine) if ctx.engine else None
    if not names and v is not None and v.speculators_format and v.architectures_ok:
        # the engine's speculators adapter derives the class itself (vLLM: speculators_model_type
        # eagle3 -> Eagle3LlamaForCausalLM); the engine view judges the rest (docs/differential.md R27)
        return
    if names is None:
        found = type(ctx.drafter.config.get("architectures")).__name__
        found = {
            "dict": "an object",
            "str": "a string",
            "bool": "a boolean",
            "list": "a list of non-strings",
        }.get(found, f"a {found}")
        yield finding(
            f"config `architectures` is {found}, not a list of class names; write "
            '["LlamaForCausalLMEagle3"]',
            "architectures",
            detail="the engines pick the EAGLE-3 loader from architectures[0]",
        )
        return
    if not names:
        yield finding(
            'config has no `architectures`; write ["LlamaForCausalLMEagle3"] (the drafter\'s class)',
            "architectures",
            detail="the engines pick the EAGLE-3 loader from architectures[0]",
        )
        return
    known = {a for arch in inventory.architectures() for a in arch.config_architectures}
    # the class the engines load a drafter of these tensors as (convert writes it)
    want = output_for("sglang", ctx.drafter.architecture).architectures[0]
    if names[0] not in known:
        hint = " (a target model's class)" if names[0].endswith(TARGET_ARCHITECTURES) else ""
        engines = [ctx.engine] if ctx.engine else list(ENGINES)
        loads = [e for e in engines if selects_eagle3_loader(e, names[0])]
        if loads and ctx.engine:
            return  # this engine reads it as its EAGLE-3 class (the engine view judges the rest)
        fails = [e for e in engines if e not in loads]
        if loads:  # some engine loads it: a warning that says which does and which does not
            read_as = resolved_architecture(loads[0], names[0])
            fix = ctx.fix_command(fails[0])
            # "loads the drafter" only where the engine's view says it starts (the engine lines)
            views = ctx.views()
            starts = all(views[e].starts for e in loads if e in views)
            then = (
                f" and {agree(loads, 'loads')} the drafter" if starts else " (its EAGLE-3 loader)"
            )
            yield finding(
                f"architectures[0] is {names[0]}: {engines_do(fails, 'selects')} no EAGLE-3 "
                f"loader; write {want}",
                "architectures",
                consequence=CONDITIONAL,
                fix=fix,
                detail=f"{names[0]}{hint}: {engines_do(loads, 'reads')} it as {read_as}{then}; "
                f"{engines_do(fails, 'selects')} no EAGLE-3 loader and {agree(fails, 'fails')}"
                + (f". `{fix}` writes {want}" if fix else ""),
            )
            return
        stops = (  # what SGLang's Llama target class then does with a Llama drafter's names
            "SGLang fails with KeyError midlayer.self_attn.qkv_proj.weight"
            if want == "LlamaForCausalLMEagle3"
            else "no engine selects an EAGLE-3 loader for it"
        )
        yield finding(
            f"architectures[0] is {names[0]}, not an EAGLE-3 drafter class; write {want}",
            "architectures",
            detail=f"{names[0]}{hint}: an EAGLE-3 engine looks for {want} (or its speculators "
            f"equivalent); {stops}",
        )


@rule("WC402")
def fc_width(ctx, finding):
    t = ctx.tensor("fc.weight")
    T, n_aux, H = (
        ctx.normalized.get("target_hidden_size"),
        ctx.normalized.get("num_aux_hidden_states"),
        ctx.normalized.get("hidden_size"),
    )
    if t is None or len(t.shape) != 2 or not (T and n_aux):
        return
    if "fc.weight" in transposed(ctx):  # its width is right, stored [in, out]: WC213 says so
        return
    held = config_held(ctx)
    if held.settles("fc.weight"):
        return  # a config size the weights contradict sizes it: WC409 says which (WC206 the rest)
    # no config value fits fc beside the other tensors: the tensor is wrong (model/held.py)
    wrong = "fc.weight" in held.wrong
    if t.shape[1] != T * n_aux:
        k = t.shape[1] / T if T else None
        guess = (
            f"; as many as {k:g} aux layers of {T} would read"
            if k and k == int(k) and k > 0 and t.shape[1] != H
            else ""
        )
        yield finding(
            f"{t.name} reads {t.shape[1]} features, not {T * n_aux}; "
            + (
                "the tensor is wrong: re-export it"
                if wrong
                else "set target_hidden_size and the aux layers as trained"
            ),
            t.name,
            detail=f"the config says target_hidden_size {T} x {n_aux} aux layers = {T * n_aux}"
            f"{guess}; the engines build fc from them and their loaders assert on the width",
        )
    if H and t.shape[0] != H:
        yield finding(
            f"{t.name} writes {t.shape[0]} features but hidden_size is {H}; "
            + ("the tensor is wrong: re-export it" if wrong else "make them agree"),
            t.name,
            detail="the engines build fc as [hidden_size, target_hidden_size x n_aux] and their "
            "loaders assert on another shape",
        )


@rule("WC403")
def aux_ids(ctx, finding):
    ids = ctx.normalized.get("aux_layer_ids")
    n_aux = ctx.normalized.get("num_aux_hidden_states")
    if ids is None:
        return
    if not all(type(i) is int for i in ids):
        yield finding(
            f"aux layer ids {ids} are not all integers; write the trained ids as integers",
            "aux_layer_ids",
            detail="the engines capture one target layer per id",
        )
        return
    if (
        n_aux
        and len(ids) != n_aux
        and ctx.normalized.provenance.get("num_aux_hidden_states") != "default"
    ):
        yield finding(
            f"{len(ids)} aux layer ids {ids} but num_aux_hidden_states is {n_aux}; make them agree",
            "aux_layer_ids",
            detail="the engines capture one state per id and build fc for num_aux_hidden_states",
        )
    L = ctx.target.num_layers if ctx.target is not None else None
    # the ids in the drafter's own place, in that place's convention (aux.written_places: a
    # config may spell both places, each in its reader's convention; docs/differential.md R32)
    ids = aux.written_ids(ctx.drafter.config or {}) or ids
    # the lowest id a convention has: SGLang's -1 is the embeddings' output (it captures the
    # input of layer 0), vLLM's 0 is (docs/engines.md §aux layers)
    lowest = 0 if aux.convention_of(ctx.drafter, L) == "vllm" else -1
    if any(i < lowest for i in ids):
        yield finding(
            f"aux layer id below {lowest} in {ids}; write the ids the drafter was trained with",
            "aux_layer_ids",
            detail=f"the embeddings' output is {lowest} in the "
            f"{'vLLM' if lowest == 0 else 'SGLang'} convention, the lowest id",
        )
    if len(set(ids)) != len(ids):
        yield finding(
            f"duplicate aux layer id in {ids}; write distinct ids",
            "aux_layer_ids",
            detail="the engines capture each layer once: fewer states than fc reads",
        )
    # SGLang's convention: id k is the output of layer k (0..L-1); vLLM's: the output of layer
    # k-1, so id L is the last layer (docs/engines.md §aux layers). Which one the ids are written
    # in is engine.convention_of's answer, the one convert and the engine view use: speculators
    # drafters, and top-level-only ids (convert --to vllm of a ModelOpt drafter) are vLLM's
    vllm_convention = aux.convention_of(ctx.drafter, L) == "vllm"
    top = L if vllm_convention else (L - 1 if L else None)
    if L and any(i > top for i in ids):
        yield finding(
            f"aux layer ids {ids} reach past the target's {L} layers; write ids 0..{top}",
            "aux_layer_ids",
            detail=f"ids 0..{top} in the {'vLLM' if vllm_convention else 'SGLang'} convention, "
            "the one these ids are read in (docs/engines.md §aux layers)",
        )


@rule("WC407")
def aux_missing(ctx, finding):
    if ctx.drafter.source.config is None or ctx.drafter.looks_like_target:
        return
    if (
        ctx.normalized.get("aux_layer_ids") is None
        and ctx.normalized.get("use_aux_hidden_state") is not False
    ):
        yield finding(
            "no aux layer ids: engines capture their defaults [2, L//2, L-3]; write the trained ids",
            "aux_layer_ids",
            detail="eagle_config.eagle_aux_hidden_state_layer_ids (SGLang) or the top-level "
            "eagle_aux_hidden_state_layer_ids (vLLM): the defaults match training only by luck "
            "(speculators convert drops the ids unless passed explicitly)",
        )


@rule("WC404")
def attention(ctx, finding):
    nh, nkv, hd = (
        ctx.normalized.get("num_attention_heads"),
        ctx.normalized.get("num_key_value_heads"),
        ctx.normalized.get("head_dim"),
    )
    if ctx.drafter.architecture is None or ctx.drafter.architecture.attention != "gqa":
        return
    if nh and nkv and nh % nkv:
        yield finding(
            f"num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}; correct "
            "them",
            "num_key_value_heads",
            detail="grouped-query attention shares each KV head among heads // kv_heads heads",
        )
    if hd and (hd % 8 or hd < 32 or hd > 256):
        yield finding(
            f"head_dim {hd}: the attention kernels want a multiple of 8 in [32, 256]; check it",
            "head_dim",
            consequence=CONDITIONAL,
            detail="attention kernels and KV caches serve fixed head sizes (vLLM's CPU backend "
            "needs >= 32): a drafter trained with another needs a backend that serves it",
        )


@rule("WC405")
def stale_rope(ctx, finding):
    cfg = ctx.drafter.config

    def number(x) -> bool:  # a value of another type is WC212's (config types), not a base
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    rp = cfg.get("rope_parameters")
    if (
        isinstance(rp, dict)
        and number(rp.get("rope_theta"))
        and number(cfg.get("rope_theta"))
        and rp["rope_theta"] != cfg["rope_theta"]
    ):
        lo, hi = sorted((rp["rope_theta"], cfg["rope_theta"]))
        yield finding(
            f"rope_theta {cfg['rope_theta']} beside rope_parameters.rope_theta "
            f"{rp['rope_theta']}: one is stale; remove it",
            "rope_theta",
            detail=f"transformers 5 reads rope_parameters, older readers the top-level value: "
            f"the RoPE base is {hi / max(1e-9, lo):g}x off under one of them",
        )


@rule("WC406")
def layer_count(ctx, finding):
    L = ctx.normalized.get("num_hidden_layers")
    arch = ctx.drafter.architecture
    if (
        ctx.drafter.looks_like_target or ctx.drafter.source.config is None or arch is None
    ):  # no config: WC201
        return
    # the layers the weights hold: layer 0 (`midlayer.*` or `layers.0.*`) up to the highest
    # `layers.i.*` (mappings/architectures/ [layers])
    held = arch.layers_held(t.canonical for t in ctx.drafter.tensors)
    if L == held:
        return
    holds = f"the weights hold {_layers(held)}"
    # what the engines build from it (one layer per num_hidden_layers, absent = Llama's default
    # 32; sglang 0.5.23 models/llama_eagle3.py:198-204, vllm 0.32.0 :198-207)
    hurt, fine = ctx.hurts(lambda v: v.layers != held or not v.starts)
    if not ctx.views():
        if L is not None:
            yield finding(
                f"num_hidden_layers is {L} but {holds}; set it to {held}",
                "num_hidden_layers",
                consequence=CONDITIONAL,
                detail="no engine view describes this drafter: what an engine builds from it is "
                "not known here",
            )
        return
    if not hurt:
        return
    built = sorted({ctx.views()[e].layers for e in hurt if ctx.views()[e].layers is not None})
    said = "absent (Llama's default: 32)" if L is None else str(L)
    one = len(hurt) == 1
    if built and min(built) > held:
        what = (
            f"{'builds' if one else 'build'} {'/'.join(map(str, built))} decoder layers and "
            f"{'leaves' if one else 'leave'} all but {'one' if held == 1 else held} at init"
        )
    elif built and min(built) > 0:
        what = (
            f"{'builds' if one else 'build'} {'/'.join(map(str, built))} and "
            f"{'has' if one else 'have'} no parameter for the tensors of "
            + (
                f"layer {held - 1}"
                if max(built) == held - 1
                else f"layers {max(built)}..{held - 1}"
            )
        )
    else:
        what = f"{'builds' if one else 'build'} no decoder layer from it"
    fix = ctx.fix_command(hurt[0])
    detail = f"{holds}: {' and '.join(hurt)} {what}" + (
        f". `{fix}` sets it from the weights" if fix else ""
    )
    message = f"num_hidden_layers is {said} but {holds}; set it to {held}"
    if fine:
        yield finding(
            message,
            "num_hidden_layers",
            consequence=CONDITIONAL,
            fix=fix,
            detail=f"{detail} ({', '.join(fine)} is unaffected)",
        )
    else:
        yield finding(message, "num_hidden_layers", fix=fix, detail=detail)


def _layers(n: int) -> str:
    return "one decoder layer" if n == 1 else f"{n} decoder layers"


def mla_dims_held(ctx) -> dict[str, tuple[int, list[str]]]:
    """The MLA dims the weights hold, each with the tensors that say so: kv_lora_rank from
    kv_a_layernorm / kv_b_proj, q_lora_rank from q_a_layernorm / q_b_proj / q_a_proj, the rope
    dims from kv_a_proj_with_mqa's rows past kv_lora_rank, v_head_dim from o_proj, the nope dims
    from kv_b_proj (with num_attention_heads)."""
    a = "midlayer.self_attn."
    got = {c: list(t.shape) for c, t in ctx.drafter.by_canonical().items()}

    def dim(name: str, axis: int):
        s = got.get(a + name + ".weight")
        return (s[axis], a + name + ".weight") if s is not None and len(s) > axis else None

    def first(*options):
        found = [o for o in options if o is not None]
        return (found[0][0], [n for _, n in found]) if found else None

    held = {}
    kv = first(dim("kv_a_layernorm", 0), dim("kv_b_proj", 1))
    q = first(dim("q_a_layernorm", 0), dim("q_b_proj", 1), dim("q_a_proj", 0))
    if kv:
        held["kv_lora_rank"] = kv
    if q:
        held["q_lora_rank"] = q
    kva = dim("kv_a_proj_with_mqa", 0)
    if kv and kva and kva[0] > kv[0]:
        held["qk_rope_head_dim"] = (kva[0] - kv[0], [kva[1], *kv[1]])
    nh = ctx.normalized.get("num_attention_heads")
    o, kvb = dim("o_proj", 1), dim("kv_b_proj", 0)
    if isinstance(nh, int) and nh > 0 and o and o[0] % nh == 0:
        d_v = o[0] // nh
        held["v_head_dim"] = (d_v, [o[1]])
        if kvb and kvb[0] % nh == 0 and kvb[0] // nh > d_v:
            held["qk_nope_head_dim"] = (kvb[0] // nh - d_v, [kvb[1], o[1]])
    return held


@rule("WC408")
def mla_dims(ctx, finding):
    arch = ctx.drafter.architecture
    if arch is None or arch.attention != "mla" or ctx.drafter.source.config is None:
        return
    if swapped_pairs(ctx):  # WC211: the shapes sit under the wrong names
        return
    inv = ctx.drafter.inventory
    symbols = {spec.name: spec.symbol for spec in config_mod.field_specs()}
    for field, (value, evidence) in mla_dims_held(ctx).items():
        said, where = ctx.normalized.get(field), ctx.normalized.provenance.get(field)
        if said == value:
            continue
        if said is None and where != "absent":  # q_lora_rank null: the one-projection query
            continue
        symbol = symbols[field]  # how mappings/architectures/*.toml write it (config.toml)
        # every tensor whose expected shape the field decides, and that the weights contradict
        hit = [
            t.name
            for t in arch.tensors
            if any({symbol, field} & expr.names(s) for s in t.shape)
            and ctx.tensor(t.name) is not None
            and inv.tensors.get(t.name) is not None
            and inv.tensors[t.name].shape is not None
            and tuple(ctx.tensor(t.name).shape) != inv.tensors[t.name].shape
        ]
        names = sorted(set(evidence) | set(hit))
        was = (
            f"is absent (the engines take {said})"
            if where == "default"
            else ("is absent" if said is None else f"is {said}")
        )
        yield finding(
            f"{field} {was} but the weights hold {value}; set it to {value} in config.json",
            field,
            fix=f'set "{field}": {value} in config.json',
            detail=f"the weights say {value} ({', '.join(names)}); the engines build every "
            "projection it sizes from the config and stop on the shapes",
        )


@rule("WC409")
def config_contradicted(ctx, finding):
    for h in config_held(ctx).fields:  # weightcheck/model/held.py decides them
        names = [ctx.tensor(c).name if ctx.tensor(c) is not None else c for c in h.tensors]
        yield finding(
            f"{h.field} {h.was()} but the weights hold {h.value}; set it to {h.value} in "
            "config.json",
            h.field,
            fix=f'set "{h.path}": {h.value} in config.json'
            if "." not in h.path
            else f"set {h.path} to {h.value} in config.json",
            detail=f"{len(names)} tensor(s) say {h.value}: {', '.join(names)}; the engines "
            "build every parameter it sizes from the config and their loaders stop on these shapes",
        )
