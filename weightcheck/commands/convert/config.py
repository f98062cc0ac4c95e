"""``convert``: the output config.json, in the destination's layout (mappings/engines/<to>.toml
[output]): fields lifted, renamed and defaulted as the engine reads them, aux ids in its
convention."""

from __future__ import annotations

from weightcheck.commands.convert.items import Plan
from weightcheck.engines import aux
from weightcheck.engines.data import load, output_for
from weightcheck.errors import UsageError, WeightcheckError, json_value
from weightcheck.model import config as config_mod

CONFIG_NAME = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


LAYER_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "rms_norm_eps",
    "max_position_embeddings",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "attention_dropout",
    "num_hidden_layers",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
)  # attention the layer was trained with
SPECULATORS_ONLY = (
    "speculators_model_type",
    "speculators_config",
    "speculators_version",
    "transformer_layer_config",
    "eagle_aux_hidden_state_layer_ids",
    "auto_map",
)


def flat_view(raw: dict) -> dict:
    """Any drafter config as one flat dict (a speculators transformer_layer_config lifted up)."""
    out = {}
    layer = raw.get("transformer_layer_config")
    if isinstance(layer, dict):
        out.update({k: v for k, v in layer.items() if k != "architectures"})
    out.update({k: v for k, v in raw.items() if k not in SPECULATORS_ONLY})
    return out


def build_config(plan: Plan, base: dict, out_dtype: str | None) -> dict:
    """The output config.json in the destination layout of mappings/engines/<to>.toml [output]."""
    src = plan.src
    out_spec = output_for(plan.to, src.architecture)
    norm = config_mod.normalize(base)
    flat = flat_view(base)
    if flat.get("tie_word_embeddings") is None and any(
        it.canonical == "lm_head.weight" for it in plan.items
    ):  # settle_from_weights writes false; the key's place is taken here, among SRC's fields, so
        # a second round through the other layout writes the same config.json
        flat["tie_word_embeddings"] = None
    # drop every place aux ids could be; they are written back where the destination reads them
    # an eagle_config that is no object (WC212) has nothing to keep: the gate refuses the output
    ec = dict(flat["eagle_config"]) if isinstance(flat.get("eagle_config"), dict) else {}
    ec.pop("eagle_aux_hidden_state_layer_ids", None)
    flat.pop("eagle_aux_hidden_state_layer_ids", None)
    new_ids, model_type = aux_ids(plan, base, norm, out_spec.aux_convention)
    dtype_name = CONFIG_NAME.get(out_dtype) if out_dtype else None
    dtype_name = dtype_name or norm.get("dtype") or "bfloat16"
    for k in ("dtype", "torch_dtype"):
        flat.pop(k, None)
    if out_spec.config_layout == "flat":
        cfg = flat_config(plan, flat, ec, norm, out_spec, new_ids, dtype_name)
    else:
        cfg = speculators_config(plan, base, flat, norm, out_spec, new_ids, dtype_name, model_type)
    say_changes(plan, cfg, settle_from_weights(plan, cfg))
    return cfg


def aux_ids(plan: Plan, base: dict, norm, dst_conv: str) -> tuple[list | None, str]:
    """The aux layer ids in the destination's convention (the same target layers captured), and
    the target family they were converted for; what changed goes into the plan's notes."""
    src = plan.src
    ids = norm.get("aux_layer_ids")
    targets = (plan.target, plan.head_target, plan.embed_target)
    L = next((t.num_layers for t in targets if t is not None and t.num_layers), None)
    src_conv = (
        aux.convention_of(src, L) if base is src.config else aux.config_convention(base, None, L)
    )
    model_type, how = aux.target_family(src, targets)
    if model_type is None:  # never assumed: fine only when every family gives the same ids
        options = aux.conversions_by_family(ids, src_conv, dst_conv, L) if ids else {}
        spellings = {tuple(v) for v in options.values()}
        if len(spellings) > 1:
            each = "; ".join(f"{fam}: {new}" for fam, new in options.items())
            raise UsageError(
                src.source.spec,
                f"aux layer ids {ids} ({src_conv} convention): which ids capture the same "
                f"target layers in {dst_conv} depends on the target family ({each}), and "
                "nothing names the target: pass --target TARGET",
            )
        model_type, how = aux.LLAMA, "every target family gives the same ids"
    else:
        plan.target_family = model_type
    expressed = True
    try:
        new_ids = aux.convert_ids(ids, src_conv, dst_conv, model_type, L)
    except WeightcheckError as e:
        expressed = False
        # no ids make the destination engine capture the trained layers (SGLang cannot reach
        # the last layer of a Llama target): written as they are, and the gate judges them as
        # check OUT --engine E would (WC708/WC712: refused, exit 1), not an unreadable input
        new_ids = ids
        plan.notes.append(f"aux layer ids {ids} kept as they are: {e.message}")
    if ids is not None and new_ids != ids:
        plan.config_changes.append(
            f"aux layer ids {ids} ({src_conv} convention) -> {new_ids} ({dst_conv} convention): the "
            f"same target layers for a {model_type} target ({how}); docs/engines.md"
        )
    elif ids is not None and src_conv != dst_conv and expressed:  # kept: say why (the family)
        plan.config_changes.append(
            f"aux layer ids {ids} ({src_conv} convention) kept: {dst_conv}'s convention captures the "
            f"same target layers with them for a {model_type} target ({how}); docs/engines.md"
        )
    elif ids is None:
        plan.notes.append("the source names no aux layer ids: the engine will capture its defaults")
    return new_ids, model_type


def flat_config(plan: Plan, flat: dict, ec: dict, norm, out_spec, new_ids, dtype_name) -> dict:
    """The flat layout (SGLang's, vLLM's): SRC's fields with the destination's architecture,
    model type, explicit defaults and aux ids where it reads them."""
    vd = norm.get("draft_vocab_size")
    cfg = {k: v for k, v in flat.items()}
    cfg["architectures"] = list(out_spec.architectures)
    cfg["draft_vocab_size"] = vd  # SGLang reads it as an attribute: absent fails
    if norm.get("target_hidden_size") is not None and "target_hidden_size" in flat:
        cfg["target_hidden_size"] = norm.get("target_hidden_size")
    if flat.get("model_type") in (None, "eagle3"):
        cfg["model_type"] = out_spec.model_type
    elif flat.get("model_type") in out_spec.model_type_for:
        cfg["model_type"] = out_spec.model_type_for[flat["model_type"]]
        plan.config_changes.append(
            f"model_type: {flat['model_type']} -> {cfg['model_type']} ({plan.to} rewrites a "
            f"{flat['model_type']} draft config to an MTP model; {cfg['model_type']} is the "
            "same config class)"
        )
    for k in out_spec.explicit:  # the value the engines would default to, written out
        if k not in flat and norm.get(k) is not None:
            cfg[k] = norm.get(k)
            plan.config_changes.append(
                f"{k}: absent -> {norm.get(k)} (the default the engines take, written out)"
            )
    if new_ids is not None:
        for path in out_spec.aux_ids_paths:
            if path.startswith("eagle_config."):
                ec[path.split(".", 1)[1]] = list(new_ids)
            else:
                cfg[path] = list(new_ids)
    ec.setdefault("use_aux_hidden_state", True)
    cfg["eagle_config"] = ec
    if new_ids is not None and len(new_ids) != 3 and "eagle_aux_hidden_state_layer_ids" not in ec:
        # fc's width: both engines read num_aux_hidden_states, else eagle_config's ids, else 3
        # (top-level ids do not size it: vLLM fails to load fc, docs/differential.md R3)
        cfg["num_aux_hidden_states"] = len(new_ids)
    if plan.to != "vllm":
        cfg.pop("norm_before_residual", None)  # refused above when true
    elif norm.get("norm_before_residual") is not None:
        cfg["norm_before_residual"] = norm.get("norm_before_residual")
    cfg["dtype"] = dtype_name
    cfg["torch_dtype"] = dtype_name  # speculators and transformers 4 read this spelling
    return cfg


def speculators_config(
    plan: Plan, base: dict, flat: dict, norm, out_spec, new_ids, dtype_name, model_type
) -> dict:
    """speculators' layout: the layer's fields in transformer_layer_config, the verifier in
    speculators_config."""
    vd = norm.get("draft_vocab_size")
    layer = {k: flat[k] for k in LAYER_FIELDS if k in flat}
    layer["model_type"] = "llama"
    layer["architectures"] = ["LlamaForCausalLM"]
    layer["torch_dtype"] = dtype_name
    if new_ids is not None and len(new_ids) != 3:  # fc's width (see the flat layout above)
        layer["num_aux_hidden_states"] = len(new_ids)
    verifier = {}
    old = base.get("speculators_config") if isinstance(base.get("speculators_config"), dict) else {}
    if isinstance(old.get("verifier"), dict):
        verifier = dict(old["verifier"])
    if plan.target is not None:
        verifier = {
            "name_or_path": plan.target.source.spec,
            "architectures": plan.target.architectures,
        }
    verifier.setdefault("name_or_path", None)
    if not verifier.get("architectures"):  # record the family, so the way back knows it
        fam = load("speculators").output.family_architectures
        verifier["architectures"] = [fam[model_type]] if model_type in fam else []
    cfg = {
        "architectures": list(out_spec.architectures),
        "speculators_model_type": "eagle3",
        "speculators_version": base.get("speculators_version", "0.9.0"),
        "transformer_layer_config": layer,
        "draft_vocab_size": vd,
        "norm_before_residual": bool(norm.get("norm_before_residual") or False),
        "norm_before_fc": bool(norm.get("norm_before_fc") or False),
        "fc_norm": bool(norm.get("fc_norm") or False),
        "norm_output": bool(norm.get("norm_output") or False),
        "target_hidden_size": norm.get("target_hidden_size"),
        "eagle_aux_hidden_state_layer_ids": list(new_ids) if new_ids is not None else None,
        "speculators_config": old
        or {
            "algorithm": "eagle3",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": 3,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "default_proposal_method": "greedy",
            "verifier": verifier,
        },
        "dtype": dtype_name,
        "torch_dtype": dtype_name,
    }
    if old:
        cfg["speculators_config"] = dict(old, verifier=verifier)
    if norm.get("norm_before_residual") is None:
        plan.config_changes.append(
            "norm_before_residual written as false explicitly (vLLM "
            "assumes true for speculators configs that omit it)"
        )
    return cfg


def say_changes(plan: Plan, cfg: dict, why: dict[str, str]) -> None:
    """What changed between SRC's config and the output's, field by field, for --dry-run and the
    model card (a field the weights decide, with the reason)."""
    src = plan.src
    before = config_mod.normalize(src.config)
    after = config_mod.normalize(cfg)
    for spec in config_mod.field_specs():
        a, b = before.get(spec.name), after.get(spec.name)
        # a field the weights decide is said also when only its writing changed (absent -> false)
        if (a != b or spec.name in why) and spec.name != "aux_layer_ids":
            if spec.name in why and (src.config or {}).get(spec.name) is None:
                a = None  # absent or null as written, not the default it is read as
            line = f"{spec.name}: {json_value(a)} -> {json_value(b)}"
            plan.config_changes.append(line + (f" ({why[spec.name]})" if spec.name in why else ""))


def settle_from_weights(plan: Plan, cfg: dict) -> dict[str, str]:
    """Set the config fields the weights being written decide, and say why (field -> reason).

    * ``draft_vocab_size``: the rows of the lm_head written (else d2t's length). SGLang reads the
      field to build the head (absent: the load fails; null: it borrows the target's head and
      asserts on an own one), vLLM sizes the head by it: a value the weights contradict fails
      both (docs/engines.md).
    * ``num_hidden_layers``: the decoder layers written (layer 0 up to the highest ``layers.i``).
      Both engines build as many layers as the field says and leave those without weights at init.
    * ``tie_word_embeddings``: false when an own lm_head is written, also when the source does
      not say (absent, a config class whose default is tied — transformers' PretrainedConfig —
      reads it as true); tied, SGLang would drop the trained head for the embedding.

    When the lm_head and d2t disagree with each other nothing is set: the gate refuses."""
    layer = cfg["transformer_layer_config"] if "transformer_layer_config" in cfg else cfg
    by = {it.canonical: it for it in plan.items}
    why: dict[str, str] = {}
    head, d2t = by.get("lm_head.weight"), by.get("d2t")
    rows = head.shape[0] if head is not None and len(head.shape) == 2 else None
    n = d2t.shape[0] if d2t is not None and len(d2t.shape) == 1 else None
    if rows is not None and n is not None and rows != n:
        pass  # the weights disagree: nothing to take the size from
    elif (rows or n) is not None and cfg.get("draft_vocab_size") != (rows or n):
        cfg["draft_vocab_size"] = rows or n
        why["draft_vocab_size"] = (
            f"from the weights: {head.out_name} has {rows} rows"
            if rows is not None
            else f"from the weights: {d2t.out_name} has {n} entries"
        )
    # the decoder layers written: layer 0 up to the highest layers.i (mappings/architectures/)
    arch = plan.src.architecture
    layers = arch.layers_held(it.canonical for it in plan.items) if arch is not None else 1
    if layer.get("num_hidden_layers") != layers:
        written = "one decoder layer is" if layers == 1 else f"{layers} decoder layers are"
        why["num_hidden_layers"] = f"from the weights: {written} written; " + (
            "absent, the engines' LlamaConfig default builds 32"
            if layer.get("num_hidden_layers") is None
            else "the engines build every layer the field names and leave the rest at init"
        )
        layer["num_hidden_layers"] = layers
    tied = layer.get("tie_word_embeddings")
    if head is not None and tied is not False:
        layer["tie_word_embeddings"] = False
        why["tie_word_embeddings"] = (
            f"an own {head.out_name} is written: tied, SGLang would drop it for the embedding"
            if tied
            else f"an own {head.out_name} is written: said explicitly; absent, a config class "
            "whose default is tied, as transformers' PretrainedConfig, would drop it for the "
            "embedding"
        )
    return why
