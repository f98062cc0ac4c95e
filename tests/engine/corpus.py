"""The differential corpus: a deterministic set of EAGLE-3 drafter variants for the tiny target
tests/fixtures/producers/target-llama (H=64, 4 layers, vocab 512, head_dim 32).

Every variant starts from one of the producer-written fixtures (tests/fixtures/producers/*: their
real config spellings and tensor names) and changes one thing, or a dialect and one defect
together. Each has a short stable id (``<base>.<axis>.<detail>``), a one-line description and the
axes it covers. Tensors are written with weightcheck's own writer (weightcheck.storage.writer);
new or re-typed tensors get tests/synth.py's deterministic pseudo-random bytes (never NaN: both
oracles use NaN as "never written"). Nothing random is left to chance: the only seeds are fixed.

    python tests/engine/corpus.py OUT_DIR        # writes OUT_DIR/<id>/{config.json,*.safetensors}
    python tests/engine/corpus.py --list         # id, axes and description, one per line

Imported by tests/engine/differential.py and tests/test_engine_differential.py.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
PRODUCERS = os.path.join(TESTS, "fixtures", "producers")
TARGET = os.path.join(PRODUCERS, "target-llama")
if TESTS not in sys.path:  # tests/synth.py
    sys.path.insert(0, TESTS)

SEED = 20250611

# base id -> producer fixture folder
BASES = {
    "sf": "specforge-sglang",
    "sh": "specforge-hf",
    "st": "speculators-train",
    "sc": "speculators-convert",
    "mo": "modelopt",
    "ma": "modelopt-default-aux",
    "mf": "modelopt-fullvocab-fp32",
}
# MLA drafters (Eagle3DeepseekV2ForCausalLM; tests/fixtures/producers/make_mla_fixtures.py writes
# them in the ModelOpt-kimik2 and TorchSpec-native layouts): their own variants, mla_variants()
MLA_BASES = {"mm": "mla-modelopt", "mt": "mla-torchspec"}
MLA_ARCHITECTURE = "Eagle3DeepseekV2ForCausalLM"
# the target itself given as SRC (consistency_variants()): not a drafter
TARGET_BASES = {"tg": "target-llama"}
ALL_BASES = {**BASES, **MLA_BASES, **TARGET_BASES}
# what the base's names look like: SpecForge writes midlayer.*, the others layers.0.*
LAYER = {"sf": "midlayer.", "sh": "midlayer.", "st": "layers.0.", "sc": "layers.0."}
LAYER.update(dict.fromkeys(("mo", "ma", "mf"), "layers.0."))
LAYER.update({"mm": "layers.0.", "mt": "midlayer.", "tg": "model.layers.0."})
DIALECT = {"sf": "specforge", "sh": "specforge", "st": "speculators", "sc": "speculators"}
DIALECT.update(dict.fromkeys(("mo", "ma", "mf"), "modelopt"))
DIALECT.update({"mm": "modelopt", "mt": "torchspec", "tg": "target"})

AXES = (
    "dialect",
    "wrapper",
    "missing",
    "extra",
    "typo",
    "duplicate",
    "draft_vocab_size",
    "tie_word_embeddings",
    "num_hidden_layers",
    "architectures",
    "aux_ids",
    "dtype",
    "config_flags",
    "combination",
    "hidden_size",  # a drafter narrower than its target (own embedding, target_hidden_size)
    "json_type",  # a config value of the wrong JSON type
    "target_src",  # the target checkpoint itself given as SRC
)

H, INTER, V, VD = 64, 128, 512, 128
_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1}
TORCH_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple
    data: bytes


@dataclass
class Variant:
    id: str
    description: str
    axes: tuple
    base: str
    config: dict | None  # None: no config.json at all
    files: list  # list of (file name, [Tensor, ...]) in file order

    @property
    def tensor_names(self) -> list[str]:
        return [t.name for _, ts in self.files for t in ts]


# --- reading the fixtures (standard library) -------------------------------------------------------


def _read_safetensors(path: str) -> list[Tensor]:
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = []
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, en = e["data_offsets"]
        out.append(Tensor(name, e["dtype"], tuple(e["shape"]), raw[base + b : base + en]))
    return out


_CACHE: dict = {}


def base_of(key: str) -> tuple[dict, list[Tensor]]:
    if key not in _CACHE:
        d = os.path.join(PRODUCERS, ALL_BASES[key])
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        _CACHE[key] = (cfg, _read_safetensors(os.path.join(d, "model.safetensors")))
    cfg, ts = _CACHE[key]
    return copy.deepcopy(cfg), list(ts)


def _random_bytes(dtype: str, shape, seed: int, near_one: bool = False) -> bytes:
    import synth

    n = _BYTES[dtype]
    for s in shape:
        n *= s
    buf = bytearray()
    synth.random_data(dtype, n, seed, near_one)(buf.extend)
    return bytes(buf)


def new_tensor(name: str, dtype: str, shape, seed: int) -> Tensor:
    """synth's deterministic pseudo-random values; norms (and fc_norm/input_norm) near 1."""
    near_one = name.endswith("norm.weight") or "norm_" in name or "norm." in name
    if dtype == "I64":  # a d2t: Vd distinct sorted ids, as offsets
        import synth

        d2t, _ = synth.vocab_maps(V, shape[0], seed)
        return Tensor(name, dtype, tuple(shape), d2t)
    if dtype == "BOOL":
        return Tensor(name, dtype, tuple(shape), bytes(shape[0]))
    return Tensor(name, dtype, tuple(shape), _random_bytes(dtype, shape, seed, near_one))


# --- building variants -----------------------------------------------------------------------------


class Draft:
    """A mutable copy of a base drafter: config and tensors (one file unless split)."""

    def __init__(self, base: str):
        self.base = base
        self.cfg, ts = base_of(base)
        self.files = [("model.safetensors", ts)]
        self.seed = SEED

    # tensors
    @property
    def tensors(self) -> list[Tensor]:
        return [t for _, ts in self.files for t in ts]

    def find(self, suffix: str) -> Tensor:
        for t in self.tensors:
            if t.name == suffix or t.name.endswith("." + suffix) or t.name.endswith(suffix):
                return t
        raise KeyError(suffix)

    def layer(self, rest: str) -> str:
        return LAYER[self.base] + rest

    def rename(self, fn) -> Draft:
        self.files = [
            (f, [Tensor(fn(t.name), t.dtype, t.shape, t.data) for t in ts]) for f, ts in self.files
        ]
        return self

    def rename_one(self, old: str, new: str) -> Draft:
        assert old in self.names(), (self.base, old)
        return self.rename(lambda n: new if n == old else n)

    def names(self) -> list[str]:
        return [t.name for t in self.tensors]

    def drop(self, *names: str) -> Draft:
        for n in names:
            assert n in self.names(), (self.base, n)
        self.files = [(f, [t for t in ts if t.name not in names]) for f, ts in self.files]
        return self

    def add(self, name: str, dtype: str | None = None, shape=None, first=False, like=None):
        """A new tensor (synth bytes), or a copy of ``like``'s bytes under another name."""
        if like is not None:
            src = next(t for t in self.tensors if t.name == like)
            t = Tensor(name, src.dtype, src.shape, src.data)
        else:
            self.seed += 1
            t = new_tensor(name, dtype or self.wdtype(), tuple(shape), self.seed)
        f, ts = self.files[0]
        self.files[0] = (f, [t] + ts if first else ts + [t])
        return self

    def replace(self, name: str, dtype: str | None = None, shape=None) -> Draft:
        old = next(t for t in self.tensors if t.name == name)
        self.seed += 1
        t = new_tensor(name, dtype or old.dtype, tuple(shape or old.shape), self.seed)
        self.files = [(f, [t if x.name == name else x for x in ts]) for f, ts in self.files]
        return self

    def retype(self, dtype: str) -> Draft:
        """Every floating tensor re-written in ``dtype`` (fresh synth bytes)."""
        out = []
        for f, ts in self.files:
            new = []
            for t in ts:
                if t.dtype in TORCH_DTYPE and t.dtype != dtype:
                    self.seed += 1
                    t = new_tensor(t.name, dtype, t.shape, self.seed)
                new.append(t)
            out.append((f, new))
        self.files = out
        return self

    def wdtype(self) -> str:
        return next(t.dtype for t in self.tensors if t.dtype in TORCH_DTYPE)

    def split(self, moved: list[str], second_first=False) -> Draft:
        """Move tensors ``moved`` into a second file (no index: both engines glob the folder)."""
        f0, ts = self.files[0]
        keep = [t for t in ts if t.name not in moved]
        out = [t for t in ts if t.name in moved]
        a = ("model-00001-of-00002.safetensors", keep)
        b = ("model-00002-of-00002.safetensors", out)
        self.files = [b, a] if second_first else [a, b]
        return self

    # config
    def set(self, path: str, value) -> Draft:
        node = self.cfg
        parts = path.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[parts[-1]] = value
        return self

    def unset(self, path: str) -> Draft:
        node = self.cfg
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.get(p)
            if not isinstance(node, dict):
                return self
        node.pop(parts[-1], None)
        return self

    def layer_cfg(self, key: str, value=None, delete=False) -> Draft:
        """A decoder-layer field where this base keeps it (speculators: transformer_layer_config)."""
        where = "transformer_layer_config." if "transformer_layer_config" in self.cfg else ""
        return self.unset(where + key) if delete else self.set(where + key, value)

    def variant(self, vid: str, description: str, *axes: str, no_config=False) -> Variant:
        for a in axes:
            assert a in AXES, a
        return Variant(
            vid,
            description,
            tuple(axes),
            self.base,
            None if no_config else copy.deepcopy(self.cfg),
            [(f, list(ts)) for f, ts in self.files],
        )


def _to_layers0(n: str) -> str:
    return n.replace("midlayer.", "layers.0.", 1) if n.startswith("midlayer.") else n


def _to_midlayer(n: str) -> str:
    return n.replace("layers.0.", "midlayer.", 1) if n.startswith("layers.0.") else n


def _second_layer(d: Draft, prefix: str) -> None:
    """The tensors of a plain (H-input) decoder layer under ``prefix``."""
    dt = d.wdtype()
    for rest, shape in (
        ("self_attn.q_proj.weight", (64, 64)),
        ("self_attn.k_proj.weight", (32, 64)),
        ("self_attn.v_proj.weight", (32, 64)),
        ("self_attn.o_proj.weight", (64, 64)),
        ("mlp.gate_proj.weight", (INTER, H)),
        ("mlp.up_proj.weight", (INTER, H)),
        ("mlp.down_proj.weight", (H, INTER)),
        ("input_layernorm.weight", (H,)),
        ("post_attention_layernorm.weight", (H,)),
    ):
        d.add(prefix + rest, dt, shape)


# --- the corpus ------------------------------------------------------------------------------------


def variants() -> list[Variant]:
    out: list[Variant] = []
    v = out.append

    # dialects: every producer fixture as written, and its tensors renamed to the other layout
    for b, folder in BASES.items():
        v(Draft(b).variant(f"{b}.asis", f"{folder} as the producer wrote it", "dialect"))
    for b in BASES:
        d = Draft(b)
        if LAYER[b] == "midlayer.":
            d.rename(_to_layers0)
            desc = f"{BASES[b]} with midlayer.* renamed to layers.0.*"
        else:
            d.rename(_to_midlayer)
            desc = f"{BASES[b]} with layers.0.* renamed to midlayer.*"
        v(d.variant(f"{b}.relayout", desc, "dialect"))

    # wrappers: a prefix on every name, or HF-style (model. on all but lm_head/d2t/t2d)
    bare = ("lm_head.weight", "d2t", "t2d")
    for b in ("sf", "mo", "st"):
        for w in ("model.", "draft_model.", "module.", "eagle_module."):
            d = Draft(b).rename(lambda n, w=w: w + n)
            v(d.variant(f"{b}.wrap.{w[:-1]}", f"{BASES[b]}: every name prefixed {w}", "wrapper"))
        d = Draft(b).rename(lambda n: n if n in bare else "model." + n)
        v(
            d.variant(
                f"{b}.wrap.hf", f"{BASES[b]}: model. on every name but lm_head/d2t/t2d", "wrapper"
            )
        )
    v(
        Draft("sf")
        .rename_one("lm_head.weight", "model.lm_head.weight")
        .variant("sf.wrap.lm_head", "lm_head.weight named model.lm_head.weight", "wrapper")
    )
    v(
        Draft("sh")
        .rename_one("embed_tokens.weight", "model.embed_tokens.weight")
        .variant("sh.wrap.embed", "embed_tokens.weight named model.embed_tokens.weight", "wrapper")
    )
    v(
        Draft("sf")
        .rename(lambda n: "model." + n if n in ("d2t", "t2d") else n)
        .variant("sf.wrap.maps", "d2t/t2d named model.d2t / model.t2d", "wrapper")
    )

    # missing keys: each tensor of the SpecForge export, some of the others
    for n in Draft("sf").names():
        v(Draft("sf").drop(n).variant(f"sf.miss.{n}", f"specforge-sglang without {n}", "missing"))
    for b, names in (
        ("mo", ["d2t", "lm_head.weight", "fc.weight", "layers.0.self_attn.k_proj.weight"]),
        ("st", ["input_norm.weight", "embed_tokens.weight", "lm_head.weight", "d2t"]),
        ("sc", ["layers.0.hidden_norm.weight", "t2d"]),
    ):
        for n in names:
            v(Draft(b).drop(n).variant(f"{b}.miss.{n}", f"{BASES[b]} without {n}", "missing"))
    v(Draft("sf").drop("d2t", "t2d").variant("sf.miss.maps", "no d2t and no t2d", "missing"))
    v(Draft("sf").variant("sf.miss.config", "no config.json at all", "missing", no_config=True))
    v(
        Draft("sf")
        .set("rope_scaling", {"rope_type": "yarn", "original_max_position_embeddings": 64})
        .variant("sf.rope.no_factor", "yarn rope scaling without factor", "config_flags")
    )

    # extra keys (flags off: the config does not ask for them)
    dt = "BF16"
    extras = [
        ("embed", "embed_tokens.weight", (V, H)),
        ("fc_bias", "fc.bias", (H,)),
        ("o_bias", "midlayer.self_attn.o_proj.bias", (H,)),
        ("q_bias", "midlayer.self_attn.q_proj.bias", (64,)),
        ("qkv_bias", None, None),
        ("input_norm", "input_norm.weight", (3 * H,)),
        ("fc_norm", None, None),
        ("aux_norm", None, None),
        ("inv_freq", "midlayer.self_attn.rotary_emb.inv_freq", (16,)),
        ("mask_hidden", "mask_hidden", (1, 3 * H)),
        ("vision", "vision_tower.proj.weight", (H, H)),
        ("lm_head_bias", "lm_head.bias", (VD,)),
        ("norm_bias", "norm.bias", (H,)),
        ("gate_up", "midlayer.mlp.gate_up_proj.weight", (2 * INTER, H)),
        ("qkv_fused", "midlayer.self_attn.qkv_proj.weight", (128, 2 * H)),
        ("layer1", None, None),
        ("q_norm", "midlayer.self_attn.q_norm.weight", (32,)),
    ]
    for tag, name, shape in extras:
        d = Draft("sf")
        if tag == "qkv_bias":
            for p, s in (("q", 64), ("k", 32), ("v", 32)):
                d.add(f"midlayer.self_attn.{p}_proj.bias", dt, (s,))
            desc = "extra q/k/v_proj.bias (attention_bias false)"
        elif tag == "fc_norm":
            for i in range(3):
                d.add(f"fc_norm.{i}.weight", dt, (H,))
            desc = "extra fc_norm.{0,1,2}.weight (fc_norm absent)"
        elif tag == "aux_norm":
            for k in ("low", "mid", "high"):
                d.add(f"aux_norm_{k}.weight", dt, (H,))
            desc = "extra legacy aux_norm_{low,mid,high}.weight (use_aux_norm absent)"
        elif tag == "layer1":
            _second_layer(d, "layers.1.")
            desc = "extra layers.1.* (a second decoder layer; num_hidden_layers 1)"
        else:
            d.add(name, dt, shape)
            desc = f"extra {name} {list(shape)}"
        v(d.variant(f"sf.extra.{tag}", desc, "extra"))
    for b in ("mo", "st"):
        d = Draft(b)
        if "embed_tokens.weight" not in d.names():
            d.add("embed_tokens.weight", dt, (V, H))
            v(d.variant(f"{b}.extra.embed", f"{BASES[b]} + embed_tokens.weight", "extra"))
        d = Draft(b).add("fc.bias", dt, (H,)).add("layers.0.self_attn.o_proj.bias", dt, (H,))
        v(d.variant(f"{b}.extra.bias", f"{BASES[b]} + fc.bias and o_proj.bias", "extra"))
    v(
        Draft("mo")
        .add("t2d", "BOOL", (V,))
        .variant("mo.extra.t2d", "modelopt + a t2d (all False)", "extra")
    )
    v(
        Draft("mo")
        .add("aux_norm_low.weight", dt, (H,))
        .variant("mo.extra.aux_norm_low", "modelopt + aux_norm_low.weight", "extra")
    )

    # typos in tensor names (and in config keys)
    typos = [
        ("down", "midlayer.mlp.down_proj.weight", "midlayer.mlp.down_prj.weight"),
        ("q", "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.q_prj.weight"),
        ("k", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.kproj.weight"),
        ("fc", "fc.weight", "fc.weigth"),
        ("norm", "norm.weight", "norm.weights"),
        ("lm_head", "lm_head.weight", "lm_head.weigth"),
        ("lm_head2", "lm_head.weight", "lm_heads.weight"),
        ("ln", "midlayer.input_layernorm.weight", "midlayer.input_layer_norm.weight"),
        ("hidden_norm", "midlayer.hidden_norm.weight", "midlayer.hidden_nrom.weight"),
        ("o_as_bias", "midlayer.self_attn.o_proj.weight", "midlayer.self_attn.o_prj.bias"),
        ("midlayers", "midlayer.mlp.up_proj.weight", "midlayers.mlp.up_proj.weight"),
        ("mid_layer", "midlayer.mlp.up_proj.weight", "mid_layer.mlp.up_proj.weight"),
        ("layer0", "midlayer.mlp.gate_proj.weight", "layer.0.mlp.gate_proj.weight"),
        ("layers00", "midlayer.mlp.gate_proj.weight", "layers.00.mlp.gate_proj.weight"),
        (
            "case",
            "midlayer.post_attention_layernorm.weight",
            "Midlayer.post_attention_layernorm.weight",
        ),
        ("d2t", "d2t", "d2t_map"),
        ("t2d", "t2d", "t2d_mask"),
        ("d2t_case", "d2t", "D2T"),
    ]
    for tag, old, new in typos:
        d = Draft("sf").rename_one(old, new)
        v(d.variant(f"sf.typo.{tag}", f"{old} misspelled {new}", "typo"))
    for tag, old, new in (
        ("down", "layers.0.mlp.down_proj.weight", "layers.0.mlp.down_prj.weight"),
        ("k", "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.k_prj.weight"),
        ("layers1", "layers.0.mlp.down_proj.weight", "layers.1.mlp.down_proj.weight"),
    ):
        d = Draft("mo").rename_one(old, new)
        v(d.variant(f"mo.typo.{tag}", f"modelopt: {old} misspelled {new}", "typo"))
    v(
        Draft("sf")
        .unset("tie_word_embeddings")
        .set("tie_word_embedding", True)
        .variant("sf.typo.cfg_tie", "config key tie_word_embedding (singular): true", "typo")
    )
    v(
        Draft("sf")
        .unset("eagle_config.eagle_aux_hidden_state_layer_ids")
        .set("eagle_config.eagle_aux_hidden_states_layer_ids", [0, 1, 2])
        .variant(
            "sf.typo.cfg_aux",
            "eagle_config key eagle_aux_hidden_states_layer_ids",
            "typo",
            "aux_ids",
        )
    )
    v(
        Draft("sf")
        .unset("draft_vocab_size")
        .set("draft_vocab_sz", 128)
        .variant("sf.typo.cfg_vd", "config key draft_vocab_sz", "typo", "draft_vocab_size")
    )

    # duplicates: two names for one parameter, one name in two shard files
    for tag, rest in (
        ("down", "mlp.down_proj.weight"),
        ("q", "self_attn.q_proj.weight"),
        ("input_ln", "input_layernorm.weight"),
    ):
        d = Draft("sf").add("layers.0." + rest, dt, Draft("sf").find(rest).shape)
        v(
            d.variant(
                f"sf.dup.{tag}",
                f"midlayer.{rest} and layers.0.{rest} (other values)",
                "duplicate",
            )
        )
    d = Draft("sf").add("layers.0.mlp.down_proj.weight", dt, (H, INTER), first=True)
    v(d.variant("sf.dup.first", "layers.0.mlp.down_proj.weight first in the file", "duplicate"))
    d = Draft("mo").add("midlayer.mlp.down_proj.weight", dt, (H, INTER))
    v(d.variant("mo.dup.down", "layers.0.* and a midlayer.mlp.down_proj.weight", "duplicate"))
    d = Draft("sf").add("model.fc.weight", dt, (H, 3 * H))
    v(d.variant("sf.dup.model_fc", "fc.weight and model.fc.weight", "duplicate"))
    d = Draft("sf").add("model.lm_head.weight", dt, (VD, H))
    v(d.variant("sf.dup.model_lm_head", "lm_head.weight and model.lm_head.weight", "duplicate"))
    d = Draft("sh").add("model.embed_tokens.weight", dt, (V, H))
    v(d.variant("sh.dup.embed", "embed_tokens.weight and model.embed_tokens.weight", "duplicate"))
    d = Draft("sf").add("model.d2t", "I64", (VD,))
    v(d.variant("sf.dup.d2t", "d2t and model.d2t (another map)", "duplicate"))
    for tag, orig_second in (("shards", True), ("shards_rev", False)):
        # the same name in both files (no index): the original tensor in one, other values in
        # the other; "shards": the original is in the second file
        d = Draft("sf").split(["midlayer.mlp.down_proj.weight"])
        (n1, rest), (n2, orig) = d.files
        d.seed += 1
        other = [new_tensor("midlayer.mlp.down_proj.weight", dt, (H, INTER), d.seed)]
        d.files = (
            [(n1, rest + other), (n2, orig)] if orig_second else [(n1, rest + orig), (n2, other)]
        )
        where = "second" if orig_second else "first"
        v(
            d.variant(
                f"sf.dup.{tag}",
                f"midlayer.mlp.down_proj.weight in both shard files, the original in the {where}",
                "duplicate",
            )
        )
    d = Draft("sf").split(["fc.weight", "lm_head.weight"])
    v(d.variant("sf.shards", "two shard files, no duplicates, no index", "dialect"))

    # draft_vocab_size
    for b in ("sf", "mo", "st"):
        v(
            Draft(b)
            .unset("draft_vocab_size")
            .variant(f"{b}.vd.absent", f"{BASES[b]}: draft_vocab_size absent", "draft_vocab_size")
        )
        v(
            Draft(b)
            .set("draft_vocab_size", None)
            .variant(f"{b}.vd.null", f"{BASES[b]}: draft_vocab_size null", "draft_vocab_size")
        )
        v(
            Draft(b)
            .set("draft_vocab_size", 100)
            .variant(
                f"{b}.vd.small",
                f"{BASES[b]}: draft_vocab_size 100 (tensors: 128)",
                "draft_vocab_size",
            )
        )
    v(
        Draft("sf")
        .set("draft_vocab_size", None)
        .drop("lm_head.weight")
        .variant("sf.vd.null_nohead", "draft_vocab_size null, no lm_head", "draft_vocab_size")
    )
    v(
        Draft("sf")
        .set("draft_vocab_size", None)
        .replace("lm_head.weight", shape=(V, H))
        .drop("d2t", "t2d")
        .variant(
            "sf.vd.null_fullhead",
            "draft_vocab_size null, lm_head [512, 64], no d2t/t2d",
            "draft_vocab_size",
        )
    )
    v(
        Draft("sf")
        .set("draft_vocab_size", 256)
        .variant("sf.vd.large", "draft_vocab_size 256 (tensors: 128)", "draft_vocab_size")
    )
    v(
        Draft("sf")
        .set("draft_vocab_size", V)
        .variant(
            "sf.vd.eq_vocab_maps", "draft_vocab_size 512 = vocab, d2t/t2d kept", "draft_vocab_size"
        )
    )
    v(
        Draft("sf")
        .set("draft_vocab_size", V)
        .replace("lm_head.weight", shape=(V, H))
        .drop("d2t", "t2d")
        .variant(
            "sf.vd.eq_vocab", "draft_vocab_size 512, lm_head [512, 64], no maps", "draft_vocab_size"
        )
    )
    v(
        Draft("sf")
        .unset("draft_vocab_size")
        .replace("lm_head.weight", shape=(V, H))
        .drop("d2t", "t2d")
        .variant(
            "sf.vd.absent_full",
            "draft_vocab_size absent, lm_head [512, 64], no maps",
            "draft_vocab_size",
        )
    )
    v(
        Draft("sf")
        .unset("draft_vocab_size")
        .drop("lm_head.weight")
        .variant("sf.vd.absent_nohead", "draft_vocab_size absent, no lm_head", "draft_vocab_size")
    )
    v(
        Draft("sf")
        .set("draft_vocab_size", "128")
        .variant("sf.vd.string", 'draft_vocab_size "128" (a string)', "draft_vocab_size")
    )
    v(
        Draft("st")
        .unset("draft_vocab_size")
        .set("transformer_layer_config.draft_vocab_size", VD)
        .variant(
            "st.vd.in_layer",
            "speculators: draft_vocab_size only in transformer_layer_config",
            "draft_vocab_size",
        )
    )
    v(
        Draft("mf")
        .set("draft_vocab_size", None)
        .variant("mf.vd.null", "full-vocab modelopt: draft_vocab_size null", "draft_vocab_size")
    )
    v(
        Draft("mf")
        .unset("draft_vocab_size")
        .variant("mf.vd.absent", "full-vocab modelopt: draft_vocab_size absent", "draft_vocab_size")
    )

    # tie_word_embeddings
    for tag, drop_head, embed in (
        ("head", False, False),
        ("nohead", True, False),
        ("head_embed", False, True),
        ("nohead_embed", True, True),
    ):
        d = Draft("sf").set("tie_word_embeddings", True)
        if drop_head:
            d.drop("lm_head.weight")
        if embed:
            d.add("embed_tokens.weight", dt, (V, H))
        desc = "tie_word_embeddings true, " + ("no lm_head" if drop_head else "lm_head kept")
        desc += ", embed_tokens added" if embed else ""
        v(d.variant(f"sf.tie.{tag}", desc, "tie_word_embeddings"))
    v(
        Draft("sf")
        .set("tie_word_embeddings", True)
        .set("draft_vocab_size", None)
        .variant(
            "sf.tie.vd_null",
            "tied and draft_vocab_size null",
            "tie_word_embeddings",
            "draft_vocab_size",
        )
    )
    v(
        Draft("sf")
        .set("tie_word_embeddings", True)
        .unset("draft_vocab_size")
        .variant(
            "sf.tie.vd_absent",
            "tied and draft_vocab_size absent",
            "tie_word_embeddings",
            "draft_vocab_size",
        )
    )
    v(
        Draft("sf")
        .set("tie_word_embeddings", True)
        .set("draft_vocab_size", None)
        .drop("lm_head.weight", "d2t", "t2d")
        .variant(
            "sf.tie.vd_null_nohead",
            "tied, draft_vocab_size null, no lm_head, no maps",
            "tie_word_embeddings",
            "draft_vocab_size",
        )
    )
    v(
        Draft("sf")
        .unset("tie_word_embeddings")
        .variant("sf.tie.absent", "tie_word_embeddings absent", "tie_word_embeddings")
    )
    v(
        Draft("mo")
        .set("tie_word_embeddings", True)
        .variant("mo.tie.true", "modelopt: tie_word_embeddings true", "tie_word_embeddings")
    )
    v(
        Draft("st")
        .set("tie_word_embeddings", True)
        .variant(
            "st.tie.top",
            "speculators: tie_word_embeddings true at top level",
            "tie_word_embeddings",
        )
    )
    v(
        Draft("st")
        .set("transformer_layer_config.tie_word_embeddings", True)
        .variant(
            "st.tie.layer",
            "speculators: tie_word_embeddings true in transformer_layer_config",
            "tie_word_embeddings",
        )
    )

    # num_hidden_layers
    for n in (0, 2, 3):
        v(
            Draft("sf")
            .set("num_hidden_layers", n)
            .variant(
                f"sf.nl.{n}", f"num_hidden_layers {n}, one layer of weights", "num_hidden_layers"
            )
        )
    d = Draft("sf").set("num_hidden_layers", 2)
    _second_layer(d, "layers.1.")
    v(
        d.variant(
            "sf.nl.2_weights", "num_hidden_layers 2 with layers.1.* weights", "num_hidden_layers"
        )
    )
    d = Draft("mo").set("num_hidden_layers", 2)
    _second_layer(d, "layers.1.")
    v(
        d.variant(
            "mo.nl.2_weights", "modelopt: num_hidden_layers 2 with layers.1.*", "num_hidden_layers"
        )
    )
    v(
        Draft("sf")
        .unset("num_hidden_layers")
        .variant("sf.nl.absent", "num_hidden_layers absent", "num_hidden_layers")
    )
    v(
        Draft("st")
        .layer_cfg("num_hidden_layers", 2)
        .variant(
            "st.nl.2",
            "speculators: transformer_layer_config.num_hidden_layers 2",
            "num_hidden_layers",
        )
    )
    v(
        Draft("mo")
        .set("num_hidden_layers", 2)
        .variant("mo.nl.2", "modelopt: num_hidden_layers 2, one layer", "num_hidden_layers")
    )

    # architectures spellings
    arches = [
        ("eagle3", ["LlamaForCausalLMEagle3"]),
        ("vllm_name", ["Eagle3LlamaForCausalLM"]),
        ("eagle", ["LlamaForCausalLMEagle"]),
        ("draftmodel", ["Eagle3DraftModel"]),
        ("speculator", ["Eagle3Speculator"]),
        ("llama", ["LlamaForCausalLM"]),
        ("qwen3", ["Qwen3ForCausalLM"]),
        ("mistral", ["MistralForCausalLM"]),
        ("mla", ["Eagle3DeepseekV2ForCausalLM"]),
        ("two", ["LlamaForCausalLM", "LlamaForCausalLMEagle3"]),
        ("empty", []),
        ("null", None),
        ("absent", "ABSENT"),
        ("string", "LlamaForCausalLMEagle3"),
    ]
    for tag, a in arches:
        d = Draft("sf")
        if a == "ABSENT":
            d.unset("architectures")
            desc = "architectures absent"
        else:
            d.set("architectures", a)
            desc = f"architectures {json.dumps(a)}"
        v(d.variant(f"sf.arch.{tag}", desc, "architectures"))
    for tag, a in (("eagle3", ["LlamaForCausalLMEagle3"]), ("absent", "ABSENT")):
        d = Draft("st")
        if a == "ABSENT":
            d.unset("architectures")
        else:
            d.set("architectures", a)
        v(d.variant(f"st.arch.{tag}", f"speculators-train: architectures {a}", "architectures"))
    for tag, a in (("llama", ["LlamaForCausalLM"]), ("vllm_name", ["Eagle3LlamaForCausalLM"])):
        v(
            Draft("mo")
            .set("architectures", a)
            .variant(f"mo.arch.{tag}", f"modelopt: architectures {a}", "architectures")
        )

    # aux ids in every place
    ek = "eagle_config.eagle_aux_hidden_state_layer_ids"
    tk = "eagle_aux_hidden_state_layer_ids"
    fc2, fc4 = (H, 2 * H), (H, 4 * H)
    aux = [
        ("n123", {ek: [1, 2, 3]}, None, "eagle_config ids [1, 2, 3]"),
        ("n012_L", {ek: [0, 2, 3]}, None, "eagle_config ids [0, 2, 3] (last layer L-1)"),
        ("n234", {ek: [2, 3, 4]}, None, "eagle_config ids [2, 3, 4] (4 = L)"),
        ("unsorted", {ek: [2, 0, 1]}, None, "eagle_config ids [2, 0, 1]"),
        ("dupl", {ek: [1, 1, 2]}, None, "eagle_config ids [1, 1, 2]"),
        ("neg", {ek: [-1, 0, 1]}, None, "eagle_config ids [-1, 0, 1]"),
        ("two", {ek: [0, 1]}, fc2, "eagle_config ids [0, 1], fc [64, 128]"),
        ("four", {ek: [0, 1, 2, 3]}, fc4, "eagle_config ids [0, 1, 2, 3], fc [64, 256]"),
        ("two_fc3", {ek: [0, 1]}, None, "eagle_config ids [0, 1], fc still [64, 192]"),
        ("none", {ek: "UNSET"}, None, "eagle_config without ids"),
        ("null", {ek: None}, None, "eagle_config ids null"),
        ("no_eagle_config", {"eagle_config": "UNSET"}, None, "no eagle_config at all"),
        ("top123", {"eagle_config": "UNSET", tk: [1, 2, 3]}, None, "top-level ids [1, 2, 3] only"),
        ("top012", {"eagle_config": "UNSET", tk: [0, 1, 2]}, None, "top-level ids [0, 1, 2] only"),
        ("top_two", {"eagle_config": "UNSET", tk: [0, 1]}, fc2, "top-level ids [0, 1], fc 2H"),
        ("both_same", {tk: [0, 1, 2]}, None, "ids [0, 1, 2] nested and at top level"),
        ("both_diff", {tk: [1, 2, 3]}, None, "nested [0, 1, 2], top-level [1, 2, 3]"),
        ("top_null", {tk: None}, None, "nested [0, 1, 2], top-level null"),
        ("num_aux2", {"num_aux_hidden_states": 2, ek: [0, 1]}, fc2, "num_aux_hidden_states 2"),
        ("num_aux2_noids", {"num_aux_hidden_states": 2, ek: "UNSET"}, fc2, "num_aux 2, no ids"),
        (
            "layer_ids",
            {ek: "UNSET", "eagle_config.layer_ids": [0, 1, 2]},
            None,
            "eagle_config.layer_ids",
        ),
        (
            "dflash",
            {ek: "UNSET", "dflash_config.target_layer_ids": [0, 1, 2]},
            None,
            "dflash_config.target_layer_ids",
        ),
        (
            "no_aux",
            {"eagle_config.use_aux_hidden_state": False},
            None,
            "use_aux_hidden_state false",
        ),
        ("string", {ek: ["0", "1", "2"]}, None, 'eagle_config ids ["0", "1", "2"] (strings)'),
    ]
    for tag, sets, fc, desc in aux:
        d = Draft("sf")
        for k, val in sets.items():
            if val == "UNSET":
                d.unset(k)
            else:
                d.set(k, val)
        if fc:
            d.replace("fc.weight", shape=fc)
        v(d.variant(f"sf.aux.{tag}", desc, "aux_ids"))
    for b, tag, sets, fc, desc in (
        (
            "st",
            "nested",
            {"eagle_config.eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
            None,
            "speculators: + nested [0, 1, 2]",
        ),
        ("st", "top_two", {tk: [1, 2]}, fc2, "speculators: top-level [1, 2], fc 2H"),
        ("st", "top_null", {tk: None}, None, "speculators-train: ids null"),
        ("sc", "top123", {tk: [1, 2, 3]}, None, "speculators-convert: ids [1, 2, 3] restored"),
        ("mo", "top", {tk: [1, 2, 3]}, None, "modelopt: + top-level [1, 2, 3]"),
        ("ma", "top", {tk: [1, 2]}, None, "modelopt 2 aux: + top-level [1, 2]"),
        (
            "ma",
            "num_aux",
            {"num_aux_hidden_states": 2},
            None,
            "modelopt 2 aux: + num_aux_hidden_states 2",
        ),
    ):
        d = Draft(b)
        for k, val in sets.items():
            d.set(k, val)
        if fc:
            d.replace("fc.weight", shape=fc)
        v(d.variant(f"{b}.aux.{tag}", desc, "aux_ids"))

    # dtype: config dtype x tensor dtype, key spellings
    for cdt in ("bfloat16", "float16", "float32"):
        for tdt in ("BF16", "F16", "F32"):
            d = Draft("sf").set("dtype", cdt).retype(tdt)
            v(
                d.variant(
                    f"sf.dt.{cdt[:2]}{cdt[-2:]}_{tdt.lower()}",
                    f"config dtype {cdt}, tensors {tdt}",
                    "dtype",
                )
            )
    v(
        Draft("sf")
        .unset("dtype")
        .set("torch_dtype", "float32")
        .variant("sf.dt.torch_dtype_fp32", "torch_dtype float32 (no dtype key)", "dtype")
    )
    v(
        Draft("sf")
        .set("torch_dtype", "float16")
        .variant("sf.dt.both_keys", "dtype bfloat16 and torch_dtype float16", "dtype")
    )
    v(Draft("sf").unset("dtype").variant("sf.dt.absent", "no dtype key at all", "dtype"))
    d = Draft("sf").replace("fc.weight", dtype="F32").replace("norm.weight", dtype="F16")
    v(d.variant("sf.dt.mixed", "BF16 tensors with fc F32 and norm F16", "dtype"))
    v(
        Draft("mo")
        .set("torch_dtype", "float32")
        .variant("mo.dt.fp32", "modelopt: torch_dtype float32", "dtype")
    )
    v(
        Draft("mo")
        .set("torch_dtype", "float16")
        .retype("F16")
        .variant("mo.dt.fp16", "modelopt: float16 everywhere", "dtype")
    )
    v(
        Draft("st")
        .set("dtype", "float16")
        .variant("st.dt.fp16", "speculators-train: dtype float16", "dtype")
    )
    v(
        Draft("sc")
        .set("dtype", "bfloat16")
        .variant("sc.dt.bf16", "speculators-convert: dtype bfloat16 (F32 tensors)", "dtype")
    )

    # config flags that add or remove parameters
    h = (H,)
    flags = [
        (
            "bias_on",
            {"bias": True},
            [("fc.bias", h), ("midlayer.self_attn.o_proj.bias", h)],
            "bias true with fc.bias and o_proj.bias",
        ),
        ("bias_on_missing", {"bias": True}, [], "bias true, no bias tensors"),
        (
            "attn_bias",
            {"attention_bias": True},
            [
                ("midlayer.self_attn.q_proj.bias", (64,)),
                ("midlayer.self_attn.k_proj.bias", (32,)),
                ("midlayer.self_attn.v_proj.bias", (32,)),
                ("midlayer.self_attn.o_proj.bias", h),
            ],
            "attention_bias true with q/k/v/o biases",
        ),
        (
            "nbf_nested",
            {"eagle_config.norm_before_fc": True},
            [("input_norm.weight", (3 * H,))],
            "eagle_config.norm_before_fc with input_norm",
        ),
        (
            "nbf_top",
            {"norm_before_fc": True},
            [("input_norm.weight", (3 * H,))],
            "top-level norm_before_fc with input_norm",
        ),
        ("nbf_missing", {"norm_before_fc": True}, [], "norm_before_fc true, no input_norm"),
        (
            "fc_norm",
            {"fc_norm": True},
            [(f"fc_norm.{i}.weight", h) for i in range(3)],
            "fc_norm true with fc_norm.{0,1,2}",
        ),
        (
            "use_aux_norm",
            {"use_aux_norm": True},
            [(f"aux_norm_{k}.weight", h) for k in ("low", "mid", "high")],
            "use_aux_norm true with aux_norm_*",
        ),
        (
            "fc_norm_legacy",
            {"fc_norm": True},
            [(f"aux_norm_{k}.weight", h) for k in ("low", "mid", "high")],
            "fc_norm true with legacy aux_norm_* names",
        ),
        ("fc_norm_missing", {"fc_norm": True}, [], "fc_norm true, no fc_norm tensors"),
        ("norm_output", {"norm_output": True}, [], "norm_output true"),
        ("nbr", {"norm_before_residual": True}, [], "norm_before_residual true"),
        (
            "th32",
            {"target_hidden_size": 32},
            [("embed_tokens.weight", (V, H))],
            "target_hidden_size 32, fc [64, 96], own embedding",
        ),
        ("th64", {"target_hidden_size": 64}, [], "target_hidden_size 64 (= hidden)"),
        ("th_null", {"target_hidden_size": None}, [], "target_hidden_size null"),
    ]
    for tag, sets, adds, desc in flags:
        d = Draft("sf")
        for k, val in sets.items():
            d.set(k, val)
        for n, s in adds:
            d.add(n, dt, s)
        if tag == "th32":
            d.replace("fc.weight", shape=(H, 3 * 32))
        v(d.variant(f"sf.flag.{tag}", desc, "config_flags"))
    v(
        Draft("st")
        .unset("norm_before_residual")
        .variant("st.flag.nbr_absent", "speculators: norm_before_residual absent", "config_flags")
    )
    v(
        Draft("st")
        .set("norm_before_fc", False)
        .variant(
            "st.flag.nbf_off", "speculators: norm_before_fc false, input_norm kept", "config_flags"
        )
    )
    v(
        Draft("st")
        .set("fc_norm", True)
        .variant("st.flag.fc_norm", "speculators: fc_norm true, no fc_norm tensors", "config_flags")
    )

    # a dialect and a defect together: every producer fixture x the same defects
    for b in BASES:
        lp = LAYER[b]
        cases = []
        d = Draft(b).rename_one(lp + "mlp.down_proj.weight", lp + "mlp.down_prj.weight")
        cases.append((d, "typo", "down_proj misspelled down_prj", "typo"))
        d = Draft(b).drop("lm_head.weight")
        cases.append((d, "nohead", "no lm_head", "missing"))
        d = Draft(b).drop(lp + "self_attn.v_proj.weight")
        cases.append((d, "nov", "no v_proj", "missing"))
        d = Draft(b)
        if "embed_tokens.weight" in d.names():
            d.drop("embed_tokens.weight")
            cases.append((d, "noembed", "embed_tokens dropped", "missing"))
        else:
            d.add("embed_tokens.weight", d.wdtype(), (V, H))
            cases.append((d, "embed", "+ embed_tokens [512, 64]", "extra"))
        d = Draft(b)
        alias = _to_midlayer if lp == "layers.0." else _to_layers0
        d.add(alias(lp + "mlp.up_proj.weight"), d.wdtype(), (INTER, H))
        cases.append((d, "dup", "up_proj under both layouts", "duplicate"))
        d = Draft(b).unset("draft_vocab_size")
        cases.append((d, "vdabsent", "draft_vocab_size absent", "draft_vocab_size"))
        d = Draft(b).set("tie_word_embeddings", True)
        cases.append((d, "tied", "tie_word_embeddings true", "tie_word_embeddings"))
        d = Draft(b).set("architectures", ["LlamaForCausalLM"])
        cases.append((d, "llama", "architectures LlamaForCausalLM", "architectures"))
        d = Draft(b).retype("F16" if b in ("sc", "mf") else "F32")
        cases.append(
            (d, "retype", "tensors re-typed " + ("F16" if b in ("sc", "mf") else "F32"), "dtype")
        )
        d = Draft(b).layer_cfg("num_hidden_layers", 2)
        cases.append((d, "nl2", "num_hidden_layers 2", "num_hidden_layers"))
        d = Draft(b).rename(lambda n: "model." + n)
        cases.append((d, "wrap", "every name prefixed model.", "wrapper"))
        for d, tag, desc, axis in cases:
            v(d.variant(f"{b}.x.{tag}", f"{BASES[b]}: {desc}", "combination", "dialect", axis))

    out.extend(mla_variants())
    out.extend(multilayer_variants())
    out.extend(consistency_variants())

    ids = [x.id for x in out]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, dup
    return out


# MLA dims of the two fixtures (make_mla_fixtures.py): H = 64, 2 heads, q_lora_rank 64,
# kv_lora_rank 32, qk_nope 32, qk_rope 16, v_head 32, intermediate 128, V = 512, Vd = 256 (TorchSpec)
MLA_NH, MLA_Q, MLA_KV, MLA_NOPE, MLA_ROPE, MLA_V = 2, 64, 32, 32, 16, 32
MLA_VD = 256


def is_mla(x: Variant) -> bool:
    """An MLA drafter variant (compared only where weightcheck replays that loader)."""
    return x.base in MLA_BASES


def _mla_layer(d: Draft, prefix: str, width: int) -> None:
    """The tensors of one MLA decoder layer under ``prefix`` (attention input ``width``)."""
    dt = d.wdtype()
    qk = MLA_NH * (MLA_NOPE + MLA_ROPE)
    for rest, shape in (
        ("self_attn.q_a_proj.weight", (MLA_Q, width)),
        ("self_attn.q_a_layernorm.weight", (MLA_Q,)),
        ("self_attn.q_b_proj.weight", (qk, MLA_Q)),
        ("self_attn.kv_a_proj_with_mqa.weight", (MLA_KV + MLA_ROPE, width)),
        ("self_attn.kv_a_layernorm.weight", (MLA_KV,)),
        ("self_attn.kv_b_proj.weight", (MLA_NH * (MLA_NOPE + MLA_V), MLA_KV)),
        ("self_attn.o_proj.weight", (H, MLA_NH * MLA_V)),
        ("mlp.gate_proj.weight", (INTER, H)),
        ("mlp.up_proj.weight", (INTER, H)),
        ("mlp.down_proj.weight", (H, INTER)),
        ("input_layernorm.weight", (H,)),
        ("post_attention_layernorm.weight", (H,)),
    ):
        d.add(prefix + rest, dt, shape)


def mla_variants() -> list[Variant]:
    """MLA drafter variants: the two fixtures as written and re-laid-out, and the defects
    docs/mla-drafters.md §2 and §7 say the two engines treat differently."""
    out: list[Variant] = []
    v = out.append
    name = MLA_BASES
    for b in MLA_BASES:
        L = LAYER[b]
        v(Draft(b).variant(f"{b}.asis", f"{name[b]} as written", "dialect"))
        other = _to_midlayer if L == "layers.0." else _to_layers0
        o = "midlayer." if L == "layers.0." else "layers.0."
        v(
            Draft(b)
            .rename(other)
            .variant(f"{b}.relayout", f"{name[b]} with {L}* renamed to {o}*", "dialect")
        )
        # missing: the two halves of the fused down-projection, each alone and both
        for miss, desc in (
            ("self_attn.q_a_proj.weight", "without q_a_proj (kv_a_proj_with_mqa alone)"),
            ("self_attn.kv_a_proj_with_mqa.weight", "without kv_a_proj_with_mqa (q_a alone)"),
            ("self_attn.kv_a_layernorm.weight", "without kv_a_layernorm"),
        ):
            tag = miss.split(".")[1]
            v(Draft(b).drop(L + miss).variant(f"{b}.miss.{tag}", f"{name[b]} {desc}", "missing"))
        v(
            Draft(b)
            .drop(L + "self_attn.q_a_proj.weight", L + "self_attn.kv_a_proj_with_mqa.weight")
            .variant(f"{b}.miss.both_a", f"{name[b]} without q_a_proj and kv_a", "missing")
        )
        v(
            Draft(b)
            .drop("norm.weight")
            .variant(f"{b}.miss.norm", f"{name[b]} without norm", "missing")
        )
        v(
            Draft(b)
            .drop("lm_head.weight")
            .variant(
                f"{b}.miss.lm_head",
                f"{name[b]} without lm_head"
                + (" (draft_vocab_size 256 in config)" if b == "mt" else " (no draft_vocab_size)"),
                "missing",
                "draft_vocab_size",
            )
        )
        # typos
        v(
            Draft(b)
            .rename_one(L + "self_attn.q_b_proj.weight", L + "self_attn.q_b_prj.weight")
            .variant(f"{b}.typo.q_b", f"{name[b]}: q_b_proj misspelled q_b_prj", "typo")
        )
        v(
            Draft(b)
            .rename_one(L + "mlp.down_proj.weight", L + "mlp.down_prj.weight")
            .variant(f"{b}.typo.down", f"{name[b]}: down_proj misspelled down_prj", "typo")
        )
        # wrappers
        v(
            Draft(b)
            .rename(lambda n: "model." + n)
            .variant(f"{b}.wrap.model", f"{name[b]}: every name prefixed model.", "wrapper")
        )
        v(
            Draft(b)
            .rename(lambda n: "eagle_module." + n)
            .variant(
                f"{b}.wrap.eagle_module", f"{name[b]}: every name prefixed eagle_module.", "wrapper"
            )
        )
        # extras
        v(
            Draft(b)
            .add("fc.bias", shape=(H,))
            .variant(f"{b}.extra.fc_bias", f"{name[b]} + fc.bias", "extra")
        )
        v(
            Draft(b)
            .add("fc.bias", shape=(H,))
            .set("bias", True)
            .variant(
                f"{b}.extra.fc_bias_flag",
                f"{name[b]} + fc.bias, bias: true",
                "extra",
                "config_flags",
            )
        )
        d = Draft(b)
        _mla_layer(d, "layers.1.", H)
        v(d.variant(f"{b}.extra.layer1", f"{name[b]} + layers.1.* (H-input MLA layer)", "extra"))
        d = Draft(b)
        _mla_layer(d, "layers.1.", H)
        d.set("num_hidden_layers", 2)
        v(
            d.variant(
                f"{b}.nl2.layer1",
                f"{name[b]}: num_hidden_layers 2 + layers.1.*",
                "num_hidden_layers",
                "extra",
            )
        )
        v(
            Draft(b)
            .set("num_hidden_layers", 2)
            .variant(
                f"{b}.nl2",
                f"{name[b]}: num_hidden_layers 2, one layer of weights",
                "num_hidden_layers",
            )
        )
        v(
            Draft(b)
            .add("input_norm.weight", shape=(3 * H,))
            .variant(f"{b}.extra.input_norm", f"{name[b]} + input_norm.weight [3H]", "extra")
        )
        # duplicates / spellings
        v(
            Draft(b)
            .add(o + "self_attn.kv_b_proj.weight", like=L + "self_attn.kv_b_proj.weight")
            .variant(f"{b}.dup.kv_b", f"{name[b]} + kv_b_proj also spelled {o}*", "duplicate")
        )
        v(
            Draft(b)
            .rename(
                lambda n, L=L, o=o: (
                    n.replace(L, o, 1) if n == L + "self_attn.q_a_proj.weight" else n
                )
            )
            .variant(
                f"{b}.mix.q_a",
                f"{name[b]}: q_a_proj spelled {o}*, kv_a as {L}*",
                "dialect",
                "duplicate",
            )
        )
        # swapped names
        d = Draft(b)
        ka, kb = L + "self_attn.kv_a_proj_with_mqa.weight", L + "self_attn.kv_b_proj.weight"
        d.rename(lambda n, ka=ka, kb=kb: kb if n == ka else ka if n == kb else n)
        v(
            d.variant(
                f"{b}.swap.kv_a_kv_b",
                f"{name[b]}: kv_a_proj_with_mqa and kv_b_proj names swapped",
                "typo",
            )
        )
        # wrong kv_lora_rank in config (tensors for 32)
        v(
            Draft(b)
            .set("kv_lora_rank", 64)
            .variant(
                f"{b}.cfg.kv_rank64",
                f"{name[b]}: kv_lora_rank 64 in config, tensors for 32",
                "config_flags",
            )
        )
        # MLA dims absent -> DeepseekV3Config defaults (q_lora_rank 1536, ...)
        v(
            Draft(b)
            .unset("q_lora_rank")
            .variant(
                f"{b}.cfg.no_q_rank",
                f"{name[b]}: q_lora_rank absent (class default 1536)",
                "config_flags",
                "missing",
            )
        )
        # q_lora_rank null + q_proj (TorchSpec can train this; ModelOpt cannot export it)
        d = Draft(b).drop(
            L + "self_attn.q_a_proj.weight",
            L + "self_attn.q_a_layernorm.weight",
            L + "self_attn.q_b_proj.weight",
        )
        d.add(L + "self_attn.q_proj.weight", shape=(MLA_NH * (MLA_NOPE + MLA_ROPE), 2 * H))
        d.set("q_lora_rank", None)
        v(
            d.variant(
                f"{b}.q_proj",
                f"{name[b]}: q_lora_rank null + q_proj [nh*(nope+rope), 2H]",
                "config_flags",
            )
        )
        # pre-fused down-projections (neither is a published layout)
        fused_rows = MLA_Q + MLA_KV + MLA_ROPE
        d = Draft(b).drop(
            L + "self_attn.q_a_proj.weight", L + "self_attn.kv_a_proj_with_mqa.weight"
        )
        d.add(L + "self_attn.fused_qkv_a_proj_with_mqa.weight", shape=(fused_rows, 2 * H))
        v(
            d.variant(
                f"{b}.fused.sglang", f"{name[b]}: pre-fused fused_qkv_a_proj_with_mqa", "dialect"
            )
        )
        d = Draft(b).drop(
            L + "self_attn.q_a_proj.weight", L + "self_attn.kv_a_proj_with_mqa.weight"
        )
        d.add(L + "self_attn.fused_qkv_a_proj.weight", shape=(fused_rows, 2 * H))
        v(
            d.variant(
                f"{b}.fused.vllm", f"{name[b]}: pre-fused fused_qkv_a_proj (vLLM's name)", "dialect"
            )
        )
        # vocabulary
        v(
            Draft(b)
            .set("draft_vocab_size", None)
            .variant(f"{b}.vd.null", f"{name[b]}: draft_vocab_size null", "draft_vocab_size")
        )
        v(
            Draft(b)
            .set("tie_word_embeddings", True)
            .variant(f"{b}.tied", f"{name[b]}: tie_word_embeddings true", "tie_word_embeddings")
        )
        # architectures and model_type
        for arch, tag in (
            ("Eagle3DeepseekV3ForCausalLM", "v3eagle"),
            ("DeepseekV3ForCausalLM", "v3"),
            ("LlamaForCausalLMEagle3", "llama"),
        ):
            v(
                Draft(b)
                .set("architectures", [arch])
                .variant(f"{b}.arch.{tag}", f"{name[b]}: architectures [{arch}]", "architectures")
            )
        v(
            Draft(b)
            .set("model_type", "deepseek_v3")
            .variant(f"{b}.mt.deepseek_v3", f"{name[b]}: model_type deepseek_v3", "config_flags")
        )
        # aux ids
        v(
            Draft(b)
            .unset("eagle_config.eagle_aux_hidden_state_layer_ids")
            .variant(f"{b}.aux.none", f"{name[b]}: no aux ids", "aux_ids")
        )
        v(
            Draft(b)
            .unset("eagle_config.eagle_aux_hidden_state_layer_ids")
            .set("eagle_aux_hidden_state_layer_ids", [1, 2, 3])
            .variant(
                f"{b}.aux.top", f"{name[b]}: aux ids [1, 2, 3] at the top level only", "aux_ids"
            )
        )
        v(
            Draft(b)
            .set("eagle_config.eagle_aux_hidden_state_layer_ids", [0, 2])
            .replace("fc.weight", shape=(H, 2 * H))
            .variant(f"{b}.aux.two", f"{name[b]}: 2 aux ids, fc [H, 2H]", "aux_ids")
        )
        v(
            Draft(b)
            .set("num_aux_hidden_states", 2)
            .variant(f"{b}.aux.num2", f"{name[b]}: num_aux_hidden_states 2, fc [H, 3H]", "aux_ids")
        )
        # config flags
        d = Draft(b).set("fc_norm", True)
        for i in range(3):
            d.add(f"fc_norm.{i}.weight", shape=(H,))
        v(
            d.variant(
                f"{b}.cfg.fc_norm", f"{name[b]}: fc_norm true + fc_norm.{{0,1,2}}", "config_flags"
            )
        )
        v(
            Draft(b)
            .set("hidden_act", "gelu")
            .variant(f"{b}.cfg.gelu", f"{name[b]}: hidden_act gelu", "config_flags")
        )
        v(
            Draft(b)
            .set("target_hidden_size", None)
            .variant(f"{b}.cfg.ths_null", f"{name[b]}: target_hidden_size null", "config_flags")
        )
        # dtype
        v(Draft(b).retype("F32").variant(f"{b}.retype.f32", f"{name[b]}: tensors F32", "dtype"))
        # combinations: a dialect and a defect together
        d = Draft(b).rename(other).drop(o + "self_attn.q_a_proj.weight")
        v(
            d.variant(
                f"{b}.x.relayout_miss_q_a",
                f"{name[b]}: {o}* names and no q_a_proj",
                "combination",
                "dialect",
                "missing",
            )
        )
        d = Draft(b).rename(lambda n: "model." + n).set("num_hidden_layers", 2)
        v(
            d.variant(
                f"{b}.x.wrap_nl2",
                f"{name[b]}: model. prefix and num_hidden_layers 2",
                "combination",
                "wrapper",
                "num_hidden_layers",
            )
        )
    # per-base specifics
    # ModelOpt with a pruned vocabulary (docs/mla-drafters.md §7.3): d2t and a [Vd, H] head, no
    # draft_vocab_size (the kimik2 template has none)
    d = Draft("mm").replace("lm_head.weight", shape=(MLA_VD, H)).add("d2t", "I64", (MLA_VD,))
    v(
        d.variant(
            "mm.vd.pruned",
            "mla-modelopt: pruned vocab (d2t, lm_head [256, H]), no draft_vocab_size",
            "draft_vocab_size",
            "combination",
        )
    )
    # d2t with Vd == V (vLLM: no draft_id_to_target_id parameter)
    d = Draft("mm").add("d2t", "I64", (V,))
    v(
        d.variant(
            "mm.vd.d2t_full", "mla-modelopt + d2t [512] (Vd == V)", "draft_vocab_size", "extra"
        )
    )
    d = Draft("mt").replace("lm_head.weight", shape=(V, H)).set("draft_vocab_size", V).drop("d2t")
    d.add("d2t", "I64", (V,))
    v(
        d.variant(
            "mt.vd.d2t_full",
            "mla-torchspec: draft_vocab_size 512, lm_head [512, H], d2t [512]",
            "draft_vocab_size",
        )
    )
    v(
        Draft("mt")
        .unset("draft_vocab_size")
        .variant(
            "mt.vd.absent",
            "mla-torchspec: draft_vocab_size absent (lm_head [256, H], d2t)",
            "draft_vocab_size",
        )
    )
    v(
        Draft("mt")
        .drop("embed_tokens.weight")
        .variant("mt.miss.embed", "mla-torchspec without embed_tokens", "missing")
    )
    v(
        Draft("mt")
        .drop("d2t")
        .variant("mt.miss.d2t", "mla-torchspec without d2t (t2d kept)", "missing")
    )
    v(
        Draft("mt")
        .set("rope_scaling", {"type": "yarn", "original_max_position_embeddings": 256})
        .variant(
            "mt.rope.no_factor", "mla-torchspec: yarn rope scaling without factor", "config_flags"
        )
    )
    v(
        Draft("mt")
        .set("index_topk", 8)
        .variant(
            "mt.cfg.index_topk",
            "mla-torchspec: index_topk 8 (a DeepSeek-V3.2 config field)",
            "config_flags",
        )
    )
    d = Draft("mt").add(
        "layers.0.self_attn.kv_a_proj_with_mqa.weight",
        like="midlayer.self_attn.kv_a_proj_with_mqa.weight",
    )
    v(
        d.variant(
            "mt.dup.kv_a", "mla-torchspec + kv_a_proj_with_mqa also spelled layers.0.*", "duplicate"
        )
    )
    return out


# --- multi-layer drafters (num_hidden_layers > 1) ----------------------------------------------------


def _later_layer(d: Draft, prefix: str, hidden_norm: bool, width: int = H) -> None:
    """Decoder layer i >= 1 under ``prefix``: q/k/v read ``width`` (H: the engines' shape);
    ``hidden_norm`` as SGLang/vLLM build it (speculators' plain later layers have none)."""
    _second_layer(d, prefix)
    if hidden_norm:
        d.add(prefix + "hidden_norm.weight", d.wdtype(), (H,))
    if width != H:
        for rest, rows in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32)):
            d.replace(prefix + f"self_attn.{rest}.weight", shape=(rows, width))


def multilayer_variants() -> list[Variant]:
    """Drafters of more than one decoder layer (docs/formats.md, multi-layer drafters): layer 0
    in each layout (``midlayer.*``, ``layers.0.*``), layers >= 1 as ``layers.i.*`` with and
    without hidden_norm, and the layer-count and shape defects of the later layers."""
    out: list[Variant] = []
    v = out.append
    nl = "num_hidden_layers"
    for b, n, hn in (("sf", 2, True), ("sf", 3, True), ("mo", 2, True), ("sc", 2, False)):
        d = Draft(b).layer_cfg(nl, n)
        for i in range(1, n):
            _later_layer(d, f"layers.{i}.", hn)
        tag = "" if hn else ".nohn"
        what = "with" if hn else "without"
        v(
            d.variant(
                f"ml.{b}.{n}{tag}",
                f"{BASES[b]}: {n} decoder layers ({LAYER[b]}* + layers.i.*, {what} hidden_norm)",
                nl,
            )
        )
    # speculators train: layer_types must list every layer (transformers validates its length)
    d = Draft("st").layer_cfg(nl, 2).layer_cfg("layer_types", ["sliding_attention"] * 2)
    _later_layer(d, "layers.1.", False)
    v(d.variant("ml.st.2.nohn", "speculators-train: 2 decoder layers, layer 1 plain", nl))
    # specforge layer 0 renamed to layers.0.*: the same drafter in the vLLM/speculators layout
    d = Draft("sf").rename(_to_layers0).layer_cfg(nl, 2)
    _later_layer(d, "layers.1.", True)
    v(d.variant("ml.sf.2.layers0", "specforge-sglang: 2 layers, all named layers.i.*", nl))
    # layer 1 written with layer 0's 2H input width: the weight loaders assert
    d = Draft("sf").layer_cfg(nl, 2)
    _later_layer(d, "layers.1.", True, width=2 * H)
    v(d.variant("ml.sf.2.l1_2h", "specforge-sglang: 2 layers, layer 1's q/k/v 2H wide", nl))
    # a gap: layers 0 and 2 written, num_hidden_layers 3
    d = Draft("sf").layer_cfg(nl, 3)
    _later_layer(d, "layers.2.", True)
    v(d.variant("ml.sf.3.gap", "specforge-sglang: num_hidden_layers 3, layers 0 and 2 only", nl))
    # more layers written than the config builds
    d = Draft("sf").layer_cfg(nl, 1)
    _later_layer(d, "layers.1.", True)
    v(d.variant("ml.sf.1.held2", "specforge-sglang: num_hidden_layers 1, layers.1.* written", nl))
    # MLA: vLLM builds N layers, SGLang's MLA drafter exactly one
    d = Draft("mm").layer_cfg(nl, 2)
    _mla_layer(d, "layers.1.", H)
    d.add("layers.1.hidden_norm.weight", d.wdtype(), (H,))
    v(d.variant("ml.mm.2", "mla-modelopt: 2 decoder layers (layers.1.* H wide)", nl))
    return out


def _narrow(d: Draft, hd: int) -> Draft:
    """The drafter rewritten with hidden size ``hd`` (< the target's H = 64): fc [hd, 3H], q/k/v
    read 2*hd, o_proj/down_proj write hd, norms hd, lm_head [Vd, hd]; an embed_tokens becomes
    [V, hd]; attention heads stay 2 x head_dim 32 (head_dim is explicit in every base config)."""
    shapes = {
        "fc.weight": (hd, 3 * H),
        "lm_head.weight": (VD, hd),
        "embed_tokens.weight": (V, hd),
        "norm.weight": (hd,),
        "hidden_norm.weight": (hd,),
        "input_layernorm.weight": (hd,),
        "post_attention_layernorm.weight": (hd,),
        "self_attn.q_proj.weight": (64, 2 * hd),
        "self_attn.k_proj.weight": (32, 2 * hd),
        "self_attn.v_proj.weight": (32, 2 * hd),
        "self_attn.o_proj.weight": (hd, 64),
        "mlp.gate_proj.weight": (INTER, hd),
        "mlp.up_proj.weight": (INTER, hd),
        "mlp.down_proj.weight": (hd, INTER),
    }
    for n in d.names():
        for suffix, shape in shapes.items():
            if n == suffix or n.endswith("." + suffix):
                d.replace(n, shape=shape)
                break
    d.layer_cfg("hidden_size", hd)
    return d.set("target_hidden_size", H)


def consistency_variants() -> list[Variant]:
    """The cases of issue #21 ("one fact, one answer"): drafters narrower than the target with
    their own embedding, config values of the wrong JSON type, the target itself as SRC, and
    every aux-id boundary of the 4-layer target in both layer layouts."""
    out: list[Variant] = []
    v = out.append
    dt = "BF16"

    # narrower drafters: hidden_size < 64 = the target's, own embed_tokens [V, hd]
    for b, hd, relayout, tag, desc in (
        ("sf", 32, False, "32", "hidden 32, own embedding [512, 32], fc [32, 192]"),
        ("sf", 32, True, "32.l0", "hidden 32 in layers.0.*, own embedding [512, 32]"),
        ("sf", 48, False, "48", "hidden 48, own embedding [512, 48], fc [48, 192]"),
        ("sf", 48, True, "48.l0", "hidden 48 in layers.0.*, own embedding [512, 48]"),
        ("mo", 32, False, "32", "modelopt: hidden 32, own embedding [512, 32]"),
        ("st", 32, False, "32", "speculators: hidden 32, its embedding re-written [512, 32]"),
    ):
        d = Draft(b)
        if relayout:
            d.rename(_to_layers0)
        if "embed_tokens.weight" not in d.names():
            d.add("embed_tokens.weight", dt, (V, H))
        v(_narrow(d, hd).variant(f"{b}.narrow.{tag}", f"{BASES[b]}: {desc}", "hidden_size"))
    d = _narrow(Draft("sf").add("embed_tokens.weight", dt, (V, H)), 32)
    d.replace("embed_tokens.weight", shape=(256, 32))
    v(
        d.variant(
            "sf.narrow.32.embed_v256",
            "hidden 32, own embedding with 256 rows (V = 512)",
            "hidden_size",
        )
    )
    d = _narrow(Draft("sf").rename(_to_layers0).add("embed_tokens.weight", dt, (V, H)), 32)
    d.replace("embed_tokens.weight", shape=(256, 32))
    v(
        d.variant(
            "sf.narrow.32.l0.embed_v256",
            "hidden 32 in layers.0.*, embedding 256 rows",
            "hidden_size",
        )
    )
    v(
        _narrow(Draft("sf"), 32).variant(
            "sf.narrow.32.noembed", "hidden 32, no embedding of its own", "hidden_size", "missing"
        )
    )
    d = _narrow(Draft("sf").add("embed_tokens.weight", dt, (V, H)), 32)
    d.replace("embed_tokens.weight", shape=(V, H))
    v(
        d.variant(
            "sf.narrow.32.embed_h64",
            "hidden 32, own embedding [512, 64] (the target's width)",
            "hidden_size",
        )
    )
    d = _narrow(Draft("sf").add("embed_tokens.weight", dt, (V, H)), 32).unset("target_hidden_size")
    v(
        d.variant(
            "sf.narrow.32.no_th",
            "hidden 32, own embedding, target_hidden_size absent",
            "hidden_size",
            "config_flags",
        )
    )

    # config values of the wrong JSON type, on a SpecForge and a speculators base
    for b in ("sf", "st"):
        for tag, key, val in (
            ("hidden_str", "hidden_size", "64"),
            ("nl_float", "num_hidden_layers", 1.5),
            ("inter_bool", "intermediate_size", True),
            ("vd_list", "draft_vocab_size", [128]),
            ("eagle_int", "eagle_config", 3),
            ("arch_int", "architectures", [7]),
        ):
            d = Draft(b)
            if key in ("hidden_size", "num_hidden_layers", "intermediate_size"):
                d.layer_cfg(key, val)
            else:
                d.set(key, val)
            v(d.variant(f"{b}.jtype.{tag}", f"{BASES[b]}: {key}: {json.dumps(val)}", "json_type"))

    # intermediate_size other than the tensors' 128 rows: vLLM's speculators config reads the
    # boolean above as 1; what each loader does with a narrower or wider MLP than the tensors
    for b in ("sf", "st"):
        for n in (64, 256):
            v(
                Draft(b)
                .layer_cfg("intermediate_size", n)
                .variant(
                    f"{b}.cfg.inter{n}",
                    f"{BASES[b]}: intermediate_size {n}, MLP tensors {INTER} wide",
                    "config_flags",
                )
            )

    # the target checkpoint itself as SRC
    def target() -> Draft:
        return Draft("tg")

    v(target().variant("tg.asis", "target-llama itself (LlamaForCausalLM, 4 layers)", "target_src"))
    v(
        target()
        .rename(lambda n: n.removeprefix("model."))
        .variant("tg.nomodel", "target-llama with model. stripped from every name", "target_src")
    )
    v(
        target()
        .set("architectures", ["LlamaForCausalLMEagle3"])
        .variant(
            "tg.arch.eagle3",
            "target-llama, config says LlamaForCausalLMEagle3",
            "target_src",
            "architectures",
        )
    )
    v(
        target()
        .set("architectures", ["Eagle3LlamaForCausalLM"])
        .rename(lambda n: n.removeprefix("model."))
        .variant(
            "tg.x.vllm_nomodel",
            "target-llama, Eagle3LlamaForCausalLM, model. stripped",
            "target_src",
            "architectures",
            "combination",
        )
    )

    # every aux-id boundary of the 4-layer target, in eagle_config / top level / both, in the
    # midlayer.* and layers.0.* layouts (SGLang: id k = output of layer k, k <= L-2; vLLM: of
    # layer k-1, 0 <= k <= L)
    ek = "eagle_config.eagle_aux_hidden_state_layer_ids"
    tk = "eagle_aux_hidden_state_layer_ids"
    for ids in (
        [1, 2, 4],
        [0, 2, 4],
        [1, 2, 3],
        [2, 3, 4],
        [-1, 1, 2],
        [0, 1, 5],
        [2, 0, 1],
        [1, 1, 2],
        [2, 2, 2],
    ):
        it = "_".join(str(i).replace("-", "m") for i in ids)
        for place in ("nested", "top", "both"):
            for l0 in (False, True):
                d = Draft("sf")
                if l0:
                    d.rename(_to_layers0)
                if place != "top":
                    d.set(ek, ids)
                else:
                    d.unset(ek)
                if place != "nested":
                    d.set(tk, ids)
                where = {
                    "nested": "eagle_config only",
                    "top": "top level only",
                    "both": "eagle_config and top level",
                }[place]
                lay = "layers.0.*" if l0 else "midlayer.*"
                v(
                    d.variant(
                        f"sf.auxb.{it}.{place}{'.l0' if l0 else ''}",
                        f"aux ids {ids} in {where}, {lay}",
                        "aux_ids",
                    )
                )
    # both places, different ids: which one each engine reads
    for l0 in (False, True):
        d = Draft("sf").set(ek, [0, 1, 2]).set(tk, [1, 2, 4])
        if l0:
            d.rename(_to_layers0)
        lay = "layers.0.*" if l0 else "midlayer.*"
        v(
            d.variant(
                f"sf.auxb.diff.both{'.l0' if l0 else ''}",
                f"aux ids [0, 1, 2] in eagle_config, [1, 2, 4] at top level, {lay}",
                "aux_ids",
            )
        )
    return out


def axis_counts(vs: list[Variant]) -> dict[str, int]:
    counts = dict.fromkeys(AXES, 0)
    for x in vs:
        for a in x.axes:
            counts[a] += 1
    return counts


def write(x: Variant, out_dir: str) -> str:
    from weightcheck.storage.writer import OutTensor, write_file

    os.makedirs(out_dir, exist_ok=True)
    if x.config is not None:
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(x.config, f, indent=2)
            f.write("\n")
    for fname, ts in x.files:
        write_file(
            os.path.join(out_dir, fname),
            [OutTensor(t.name, t.dtype, t.shape, t.data) for t in ts],
            {"format": "pt"},
        )
    return out_dir


def build(root: str, only=None) -> dict[str, str]:
    """Write the corpus (or the ids in ``only``) under ``root``: id -> folder."""
    out = {}
    for x in variants():
        if only and x.id not in only:
            continue
        out[x.id] = write(x, os.path.join(root, x.id))
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="write every variant under this folder")
    ap.add_argument("--list", action="store_true", help="print id, axes, description")
    a = ap.parse_args(argv)
    vs = variants()
    if a.list or not a.out:
        for x in vs:
            print(f"{x.id}\t{','.join(x.axes)}\t{x.description}")
        print(f"# {len(vs)} variants; per axis: {axis_counts(vs)}", file=sys.stderr)
    if a.out:
        build(a.out)
        print(f"# wrote {len(vs)} variants under {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
