"""The deviations of tests/engine/generate.py: what real EAGLE-3 checkpoints vary in, one kind
each. A kind has a ``phase`` (content 1, names 2, dtypes 3, files 4, path 5: the order they are
applied), a ``weight`` (how often it is drawn), ``sample(rng, base) -> params | None`` and
``apply(g, params)``, which changes the drafter being built and, where the deviation changes what
the drafter *is* (other trained layers, a head of another width, a second decoder layer), its
truth. Every parameter is written into the spec, so ``apply`` draws nothing: new tensors get
bytes seeded by their name and the kind (tests/synth.py via corpus.new_tensor).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Callable

import corpus
import synth
from gen_values import (  # noqa: F401  (layout_files, retyped, transposed: the kinds' API)
    GT,
    HD,
    INTER,
    MAX_POS,
    H,
    V,
    _seed,
    cget,
    cset,
    cunset,
    layout_files,
    new,
    retyped,
    transposed,
)


def _wdtype(g) -> str:
    return next(t.dtype for t in g.tensors if t.dtype in corpus.TORCH_DTYPE)


def _layer0(g) -> str:
    """The prefix this drafter's layer-0 names have now (midlayer. or layers.0.)."""
    t = g.find("midlayer.mlp.down_proj.weight") or g.find("midlayer.self_attn.o_proj.weight")
    return t.name[: -len("mlp.down_proj.weight")] if t and "mlp.down" in t.name else "midlayer."


def _replace(g, role: str, t: GT | None) -> None:
    g.tensors = [x for x in g.tensors if x.role != role] + ([t] if t is not None else [])


def _aux_count(g) -> int:
    fc = g.find("fc.weight")
    return max(fc.shape) // H if fc else 3


# --- the kinds -------------------------------------------------------------------------------------

KINDS: dict = {}


@dataclass
class Kind:
    phase: int
    weight: float
    sample: Callable
    apply: Callable


def kind(name: str, phase: int, weight: float, sample: Callable):
    def deco(fn):
        KINDS[name] = Kind(phase, weight, sample, fn)
        return fn

    return deco


def _conv(layers: list, home: str) -> list:
    """The ids a trainer of that engine's convention writes for the outputs of ``layers``."""
    return list(layers) if home == "sglang" else [k + 1 for k in layers]


AUX_LAYERS = ([0, 1, 2], [1, 2, 3], [0, 2, 3], [-1, 0, 1], [0, 1], [1, 3], [0, 1, 2, 3], [2, 3])
AUX_PLACES = ("native", "nested", "top", "both", "both_diff", "none")


@kind(
    "aux",
    1,
    10,
    lambda rng, b: {
        "layers": list(rng.choice(AUX_LAYERS)),
        "place": rng.choices(AUX_PLACES, weights=(8, 2, 2, 3, 1, 1))[0],
        "shift": rng.random() < 0.12,
        "num_aux": rng.random() < 0.4,
    },
)
def aux(g, p):
    """Trained on the outputs of ``layers``; the ids written where ``place`` says (native: where
    the producer writes them; none: nowhere, as a conversion that loses them), each place in the
    convention of the engine that reads it (eagle_config: SGLang's, id k = the output of layer k;
    top level: vLLM's, k + 1), as a correct export writes them; ``both_diff``: both places in the
    producer's convention (a half conversion: the other place is wrong). ``shift``: the ids in
    the other convention (a hand edit): what they were trained on is then not knowable from the
    checkpoint, and only the count is judged. fc (and input_norm) as wide as the count."""
    layers, home = p["layers"], g.truth["home"]
    sg, vl = list(layers), [k + 1 for k in layers]
    if p["shift"]:
        sg, vl = vl, sg
    native = "top" if home == "vllm" else "nested"
    cunset(g.cfg, "eagle_config.eagle_aux_hidden_state_layer_ids")
    g.cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    place = {"native": native}.get(p["place"], p["place"])
    if place == "both_diff":
        sg = vl = sg if home == "sglang" else vl
    if place in ("nested", "both", "both_diff"):
        cset(g.cfg, "eagle_config.eagle_aux_hidden_state_layer_ids", sg)
    if place in ("top", "both", "both_diff"):
        g.cfg["eagle_aux_hidden_state_layer_ids"] = vl
    n = len(layers)
    if p["num_aux"]:
        g.cfg["num_aux_hidden_states"] = n
    if n != _aux_count(g):
        dt = _wdtype(g)
        fc = g.find("fc.weight")
        _replace(g, "fc.weight", new(fc.name, fc.dtype, (H, n * H), "fc.weight", True, "aux", n))
        inorm = g.find("input_norm.weight")
        if inorm is not None:
            _replace(g, inorm.role, new(inorm.name, dt, (n * H,), inorm.role, True, "aux", n))
    g.truth["trained_layers"] = list(layers)
    g.truth["ids_written"] = place != "none"
    g.truth["capture_known"] = not p["shift"]


def _set_vd(g, value) -> None:
    if value == "absent":
        g.cfg.pop("draft_vocab_size", None)
    else:
        g.cfg["draft_vocab_size"] = value


def _maps(g, vd: int, identity: bool) -> None:
    had_t2d = g.find("t2d") is not None or g.find("d2t") is None
    if identity:
        d2t, t2d = bytes(8 * vd), b"\x01" * V
    else:
        d2t, t2d = synth.vocab_maps(V, vd, _seed("maps", vd))
    _replace(g, "d2t", GT("d2t", "I64", (vd,), d2t, "d2t", vd < V))
    _replace(g, "t2d", GT("t2d", "BOOL", (V,), t2d, "t2d", False) if had_t2d else None)


VOCAB_MODES = ("full", "full_maps", "pruned", "cfg", "d2t_len")


@kind(
    "vocab",
    1,
    8,
    lambda rng, b: {
        "mode": (m := rng.choices(VOCAB_MODES, weights=(4, 2, 4, 3, 1))[0]),
        "vd": rng.choice((64, 256)) if m in ("pruned", "d2t_len") else None,
        "cfg": rng.choice((V, None, "absent", 256, 64)) if m in ("full", "cfg") else None,
    },
)
def vocab(g, p):
    """Head and map widths: a full-vocabulary head (with or without an identity map), another
    pruned width, a config draft_vocab_size that says something else, a d2t of another length."""
    head = g.find("lm_head.weight")
    mode = p["mode"]
    if mode in ("full", "full_maps", "pruned") and head is not None:
        vd = V if mode != "pruned" else p["vd"]
        _replace(g, head.role, new(head.name, head.dtype, (vd, H), head.role, True, "vocab", vd))
        g.truth["vd"] = vd
        if mode == "full":
            _replace(g, "d2t", None)
            _replace(g, "t2d", None)
        else:
            _maps(g, vd, mode == "full_maps")
        _set_vd(g, p["cfg"] if mode == "full" else vd)
    elif mode == "cfg":
        _set_vd(g, p["cfg"])
    elif mode == "d2t_len" and g.find("d2t") is not None:
        d2t, _ = synth.vocab_maps(V, p["vd"], _seed("stale-d2t", p["vd"]))
        _replace(g, "d2t", GT(g.find("d2t").name, "I64", (p["vd"],), d2t, "d2t", False))
        g.truth["map_stale"] = True


@kind(
    "tie",
    1,
    4,
    lambda rng, b: {
        "value": rng.choices((True, False, None, "true"), weights=(2, 3, 3, 0.5))[0],
        "head": rng.choices(("keep", "drop"), weights=(3, 1))[0],
    },
)
def tie(g, p):
    """tie_word_embeddings true / false / absent / a string; the head kept or not written (a head
    that equals the target's, or the embedding when tied, which exports leave out)."""
    for where in ("", g.layer_key()):
        if where == "" or cget(g.cfg, where + "tie_word_embeddings") is not None:
            if p["value"] is None:
                cunset(g.cfg, where + "tie_word_embeddings")
            else:
                cset(g.cfg, where + "tie_word_embeddings", p["value"])
    if p["head"] == "drop" and g.find("lm_head.weight") is not None:
        _replace(g, "lm_head.weight", None)
        tied = p["value"] in (True, "true")
        g.truth["head"] = (
            "lost" if g.truth["vd"] < V else ("target_embed" if tied else "target_head")
        )


_LAYER_SHAPES = (
    ("self_attn.q_proj.weight", (64, H)),
    ("self_attn.k_proj.weight", (32, H)),
    ("self_attn.v_proj.weight", (32, H)),
    ("self_attn.o_proj.weight", (H, 64)),
    ("mlp.gate_proj.weight", (INTER, H)),
    ("mlp.up_proj.weight", (INTER, H)),
    ("mlp.down_proj.weight", (H, INTER)),
    ("input_layernorm.weight", (H,)),
    ("post_attention_layernorm.weight", (H,)),
    ("hidden_norm.weight", (H,)),
)
LAYER_CASES = ((2, 2), (1, 2), (2, 1), (0, 1), ("absent", 1), (3, 3))


@kind(
    "layers",
    1,
    2.5,
    lambda rng, b: dict(zip(("cfg", "real"), rng.choice(LAYER_CASES))),
)
def layers(g, p):
    """``real`` decoder layers trained (layers.i.* for i >= 1, H-wide); ``cfg`` what
    num_hidden_layers says (speculators: layer_types as long when they agree)."""
    dt = _wdtype(g)
    for i in range(1, p["real"]):
        for rest, shape in _LAYER_SHAPES:
            name = f"layers.{i}.{rest}"
            g.tensors.append(new(name, dt, shape, name, True, "layers"))
    key = g.layer_key()
    if p["cfg"] == "absent":
        cunset(g.cfg, key + "num_hidden_layers")
    else:
        cset(g.cfg, key + "num_hidden_layers", p["cfg"])
        if p["cfg"] == p["real"] and cget(g.cfg, key + "layer_types") is not None:
            cset(g.cfg, key + "layer_types", [cget(g.cfg, key + "layer_types")[0]] * p["real"])
    g.truth["layers"] = p["real"]


LAYER_FIELDS = {
    "hidden_size": 64,
    "intermediate_size": INTER,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": HD,
    "vocab_size": V,
    "max_position_embeddings": MAX_POS,
    "rms_norm_eps": 1e-5,
    "num_hidden_layers": 1,
}
TOP_FIELDS = {"draft_vocab_size": 128, "tie_word_embeddings": False, "target_hidden_size": H}
TYPE_HOWS = ("str", "float", "null", "missing", "int")


@kind(
    "cfg_types",
    1,
    1.5,
    lambda rng, b: {
        "field": rng.choice(sorted(LAYER_FIELDS) + sorted(TOP_FIELDS)),
        "how": rng.choices(TYPE_HOWS, weights=(3, 3, 2, 3, 1))[0],
    },
)
def cfg_types(g, p):
    """A config field as a string, a float, null, missing, or (target_hidden_size, flags) set to
    its plain value where the export left it out."""
    f = p["field"]
    path = (g.layer_key() if f in LAYER_FIELDS else "") + f
    default = {**LAYER_FIELDS, **TOP_FIELDS}[f]
    cur = cget(g.cfg, path, default)
    cur = default if cur is None else cur
    how = p["how"]
    if how == "missing":
        cunset(g.cfg, path)
    elif how == "null":
        cset(g.cfg, path, None)
    elif how == "str":
        cset(g.cfg, path, json.dumps(cur) if isinstance(cur, bool) else str(cur))
    elif how == "float":
        cset(g.cfg, path, float(cur))
    else:
        cset(g.cfg, path, cur)


@kind("hidden", 1, 0.4, lambda rng, b: {"value": rng.choice((0, -H))})
def hidden(g, p):
    """hidden_size 0 or negative (a config written by hand or from a failed read)."""
    cset(g.cfg, g.layer_key() + "hidden_size", p["value"])


ARCHS = (
    ["LlamaForCausalLMEagle3"],
    ["Eagle3LlamaForCausalLM"],
    ["LlamaForCausalLM"],
    ["LlamaForCausalLMEagle"],
    None,
    [],
    ["LlamaForCausalLMEagle3", "LlamaForCausalLM"],
    ["Eagle3DraftModel"],
    ["Eagle3Speculator"],
)


@kind(
    "arch",
    1,
    1.5,
    lambda rng, b: {"value": rng.choices(ARCHS, weights=(4, 2, 2, 1, 1, 1, 1, 1, 1))[0]},
)
def arch(g, p):
    """architectures as the producers and hand edits write it (absent, empty, two entries)."""
    if p["value"] is None:
        g.cfg.pop("architectures", None)
    else:
        g.cfg["architectures"] = p["value"]


@kind(
    "fcnorm",
    1,
    2,
    lambda rng, b: {
        "names": rng.choice(("aux_norm", "fc_norm")),
        "flag": rng.choice(("fc_norm", "use_aux_norm", None)),
    },
)
def fcnorm(g, p):
    """A norm per aux state before fc, trained: legacy aux_norm_{low,mid,high} names (3 states
    only) or fc_norm.{i}; the config flag that builds them, or none."""
    n = _aux_count(g)
    names = ["aux_norm_low", "aux_norm_mid", "aux_norm_high"] if n == 3 else None
    if p["names"] == "fc_norm" or names is None:
        names = [f"fc_norm.{i}" for i in range(n)]
    dt = _wdtype(g)
    for i, nm in enumerate(names):
        g.tensors.append(new(nm + ".weight", dt, (H,), f"fc_norm.{i}.weight", True, "fcnorm"))
    if p["flag"]:
        g.cfg[p["flag"]] = True


@kind("fc_t", 1, 0.8, lambda rng, b: {})
def fc_t(g, p):
    """fc stored transposed: [n*H, H] instead of [H, n*H]."""
    fc = g.find("fc.weight")
    _replace(g, "fc.weight", transposed(fc))


def _inv_freq() -> bytes:
    return struct.pack(f"<{HD // 2}f", *(1.0 / math.pow(1e4, 2 * i / HD) for i in range(HD // 2)))


@kind(
    "buffer",
    1,
    6,
    lambda rng, b: {
        "which": rng.choices(("inv_freq", "cos_sin", "both"), weights=(4, 1, 1))[0],
        "where": rng.choices(("layer", "top"), weights=(3, 1))[0],
    },
)
def buffer(g, p):
    """Non-parameter tensors older exports carry: the rotary inv_freq buffer, cos/sin caches."""
    pre = _layer0(g) + "self_attn." if p["where"] == "layer" else ""
    if p["which"] in ("inv_freq", "both"):
        g.tensors.append(GT(pre + "rotary_emb.inv_freq", "F32", (HD // 2,), _inv_freq(), "", False))
    if p["which"] in ("cos_sin", "both"):
        for nm in ("cos_cached", "sin_cached"):
            t = new(pre + "rotary_emb." + nm, "F32", (MAX_POS, HD), "", False, "buffer")
            g.tensors.append(t)
    for t in g.tensors:
        if "rotary_emb." in t.name:
            t.role = "buffer:" + t.name.rsplit(".", 1)[1]


@kind("embed", 1, 3, lambda rng, b: {"op": rng.choice(("add", "drop"))})
def embed(g, p):
    """embed_tokens written (the target's, as SpecForge's HF export and speculators write it) or
    left out."""
    _replace(g, "embed_tokens.weight", None)
    if p["op"] == "add":
        tgt = next(t for t in corpus.base_of("tg")[1] if t.name == "model.embed_tokens.weight")
        g.tensors.append(
            GT("embed_tokens.weight", tgt.dtype, tgt.shape, tgt.data, "embed_tokens.weight", False)
        )


@kind("drop", 1, 2, lambda rng, b: {"which": rng.choices(("t2d", "d2t"), weights=(3, 1))[0]})
def drop(g, p):
    """t2d (no engine reads it) or d2t left out."""
    _replace(g, p["which"], None)


MAP_DTYPES = {"d2t": ("I32", "I16", "U32"), "t2d": ("U8", "I64", "I32")}
_PACK = {"I64": "q", "I32": "i", "I16": "h", "U32": "I", "U8": "B"}


def _map_dtype_sample(rng, b) -> dict:
    m = rng.choices(("d2t", "t2d"), weights=(3, 1))[0]
    return {"map": m, "dtype": rng.choice(MAP_DTYPES[m])}


@kind("map_dtype", 3, 1.5, _map_dtype_sample)
def map_dtype(g, p):
    """A vocabulary map in another integer dtype, values kept (a hand-made or old export: d2t as
    int32, t2d as uint8 or int64). Floats are left out: SGLang fails on a float d2t only at its
    first draft step, which its oracle does not run (docs/differential.md, limits)."""
    t = g.find(p["map"])
    if t is None:
        return
    if t.dtype == "BOOL":
        vals = list(t.data)
    else:
        vals = list(struct.unpack(f"<{len(t.data) // 8}q", t.data))
    f = _PACK[p["dtype"]]
    data = struct.pack(f"<{len(vals)}{f}", *vals)
    _replace(g, t.role, GT(t.name, p["dtype"], t.shape, data, t.role, t.trained))


DUP_ROLES = (
    "midlayer.mlp.down_proj.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
)


@kind(
    "dup",
    2,
    1.5,
    lambda rng, b: {"role": rng.choice(DUP_ROLES), "same": rng.random() < 0.75},
)
def dup(g, p):
    """A layer-0 tensor also under the other layout's name (a half-converted export): the same
    bytes, or an older copy."""
    t = g.find(p["role"])
    if t is None:
        return
    a, b = (
        ("midlayer.", "layers.0.") if t.name.startswith("midlayer.") else ("layers.0.", "midlayer.")
    )
    if not t.name.startswith(a):
        return
    name = b + t.name[len(a) :]
    if p["same"]:
        g.tensors.append(GT(name, t.dtype, t.shape, t.data, "copy:" + t.role, False))
    else:
        g.tensors.append(new(name, t.dtype, t.shape, "stale:" + t.role, False, "dup"))


@kind("layout", 2, 3, lambda rng, b: {})
def layout(g, p):
    """midlayer.* <-> layers.0.* (the other producers' layout)."""
    for t in g.tensors:
        if t.name.startswith("midlayer."):
            t.name = "layers.0." + t.name[len("midlayer.") :]
        elif t.name.startswith("layers.0."):
            t.name = "midlayer." + t.name[len("layers.0.") :]


@kind(
    "oldnames",
    2,
    1,
    lambda rng, b: {"which": rng.choice(("norm", "head", "both"))},
)
def oldnames(g, p):
    """Older ModelOpt names: input_embeds_norm.weight (layer 0's input_layernorm), eagle_lm_head."""
    for t in g.tensors:
        if t.role == "midlayer.input_layernorm.weight" and p["which"] != "head":
            t.name = "input_embeds_norm.weight"
        if t.role == "lm_head.weight" and p["which"] != "norm":
            t.name = "eagle_lm_head.weight"


PREFIXES = ("model.", "module.", "draft_model.", "eagle_module.", "hf")


@kind("prefix", 2, 3, lambda rng, b: {"p": rng.choice(PREFIXES)})
def prefix(g, p):
    """A wrapper prefix on every name, or HF-style: model. on all but lm_head, d2t, t2d."""
    for t in g.tensors:
        if p["p"] != "hf":
            t.name = p["p"] + t.name
        elif t.role not in ("lm_head.weight", "d2t", "t2d"):
            t.name = "model." + t.name


DTYPE_WHICH = ("all", "norms", "fc", "head", "layer", "embed")


@kind(
    "dtype_t",
    3,
    5,
    lambda rng, b: {
        "dtype": rng.choice(("F32", "F16", "BF16")),
        "which": rng.choices(DTYPE_WHICH, weights=(4, 2, 1, 1, 1, 1))[0],
    },
)
def dtype_t(g, p):
    """Tensors stored in another dtype than the rest, values kept (an fp32 export, fp32 norms)."""

    def hit(t: GT) -> bool:
        w = p["which"]
        r = t.role.split(":")[-1]
        return (
            w == "all"
            or (w == "norms" and "norm" in r)
            or (w == "fc" and r == "fc.weight")
            or (w == "head" and r == "lm_head.weight")
            or (w == "layer" and r.startswith("midlayer."))
            or (w == "embed" and r == "embed_tokens.weight")
        )

    g.tensors = [retyped(t, p["dtype"]) if hit(t) else t for t in g.tensors]


@kind(
    "dtype_cfg",
    3,
    3,
    lambda rng, b: {
        "key": rng.choice(("dtype", "torch_dtype", "both", "none")),
        "value": rng.choice(("bfloat16", "float16", "float32")),
    },
)
def dtype_cfg(g, p):
    """The config's dtype under either key, both, or none."""
    g.cfg.pop("dtype", None)
    g.cfg.pop("torch_dtype", None)
    for k in ("dtype", "torch_dtype"):
        if p["key"] in (k, "both"):
            g.cfg[k] = p["value"]


INDEX_MODES = (
    "none",
    "ok",
    "stale_total",
    "no_total",
    "extra_meta",
    "missing_file",
    "extra_entry",
    "wrong_shard",
    "unlisted",
    "dup_tensor",
)


@kind(
    "shards",
    4,
    4,
    lambda rng, b: {
        "n": rng.choice((2, 3)),
        "index": rng.choices(INDEX_MODES, weights=(1, 3, 3, 1, 2, 1, 1, 1, 1, 1))[0],
    },
)
def shards(g, p):
    """Several shard files, with an index that is right, has a stale or no total_size, carries
    extra metadata, omits one file's tensors, lists a tensor no file has, names the wrong shard
    for one, leaves one out of a file it names; or one tensor written into two shards."""
    g.shards = dict(p)


PATHS = (
    "drafter",
    "EAGLE3-LLaMA3.1-Instruct-8B",
    "sglang-EAGLE3-Llama-3.1-8B-Instruct",
    "Mistral-Small-24B-eagle3",
    "eagle3-mistral-draft",
    "llama3-eagle-head",
    "Qwen3-8B_eagle3",
)


@kind("path", 5, 2, lambda rng, b: {"name": rng.choice(PATHS)})
def path(g, p):
    """The folder's name (engines read the model path too)."""
    g.folder = p["name"]


@kind("strip", 6, 0, lambda rng, b: None)
def strip(g, p):
    """The minimizer's: config keys (dotted paths) and tensors (by role) taken out, to shrink a
    drafter to what its disagreement needs. Never drawn."""
    for path in p.get("config", ()):
        cunset(g.cfg, path)
    gone = set(p.get("tensors", ()))
    g.tensors = [t for t in g.tensors if t.role not in gone]
