"""The rules ``weightcheck check`` applies. Each has a stable code, a slug, a default severity and a
page in docs/rules.md (code, what it checks, why, the user report that motivated it).

A rule is a function ``(ctx) -> iterable of Finding``; it registers itself with :func:`rule`.
Rules read the canonical model (ctx.drafter) and, when given, the target (ctx.target), the
engine's view (ctx.engine_view), the training config (ctx.training) and values (ctx.values).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

from weightcheck import engine as engine_mod
from weightcheck import inventory
from weightcheck.drafter import Drafter
from weightcheck.safetensors_header import CONFIG_DTYPES, FLOAT_DTYPES

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    message: str
    subject: str | None = None  # the tensor or config field concerned

    def as_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "subject": self.subject, "rule": RULES[self.code].slug if self.code in RULES else None}


@dataclass(frozen=True)
class Rule:
    code: str
    slug: str
    severity: str
    summary: str
    needs: str  # "" | "target" | "engine" | "values" | "training"
    fn: Callable


RULES: dict[str, Rule] = {}


def rule(code: str, slug: str, severity: str, summary: str, needs: str = ""):
    def deco(fn):
        if code in RULES:
            raise ValueError(f"rule code {code} registered twice")
        RULES[code] = Rule(code, slug, severity, summary, needs, fn)
        return fn
    return deco


@dataclass
class Context:
    drafter: Drafter
    target: object | None = None  # weightcheck.target.Target
    engine: str | None = None
    engine_view: object | None = None  # weightcheck.engine.EngineView
    training: dict | None = None  # raw training config
    values: dict | None = None  # canonical -> stats (weightcheck.check.value_stats)
    cache: dict = field(default_factory=dict)

    def f(self, code: str, message: str, subject: str | None = None, severity: str | None = None):
        return Finding(code, severity or RULES[code].severity, message, subject)

    # -- small helpers shared by rules -----------------------------------------------------
    @property
    def d(self) -> Drafter:
        return self.drafter

    @property
    def n(self):
        return self.drafter.normalized

    def tensor(self, canonical: str):
        return self.drafter.by_canonical().get(canonical)

    def vocab_maps(self):
        """(d2t list or None, t2d bytes or None), read once: the only tensor bytes check reads
        without --values (d2t is 8 bytes per draft token, t2d one byte per token)."""
        if "maps" not in self.cache:
            from weightcheck.tensor_io import read_small
            d2t = t2d = None
            t = self.tensor("d2t")
            if t is not None and t.dtype == "I64" and len(t.shape) == 1:
                raw = read_small(self.d.source, t.name)
                d2t = list(struct.unpack(f"<{len(raw) // 8}q", raw))
            t = self.tensor("t2d")
            if t is not None and t.dtype in ("BOOL", "U8") and len(t.shape) == 1:
                t2d = read_small(self.d.source, t.name)
            self.cache["maps"] = (d2t, t2d)
        return self.cache["maps"]


# =============================================================================================
# WC1xx names
@rule("WC101", "unknown-tensor-name", "error",
      "A tensor name no dialect explains: engines drop it without a word (SGLang) or refuse (vLLM).")
def unknown_names(ctx):
    for n in ctx.d.naming.unknown:
        yield ctx.f("WC101", f"{n}: no dialect in mappings/dialects explains this name; SGLang "
                             "would drop it silently", n)


@rule("WC102", "mixed-dialect", "error",
      "Names of two dialects in one checkpoint (e.g. layers.0.* inside a midlayer.* drafter).")
def mixed(ctx):
    for n, other in ctx.d.naming.foreign.items():
        yield ctx.f("WC102", f"{n}: a {other} name in a {ctx.d.dialect} checkpoint; an engine that "
                             f"reads {ctx.d.dialect} names drops it and keeps the parameter random", n)


@rule("WC103", "duplicate-canonical", "error",
      "Two tensors map to the same canonical tensor: which one an engine keeps is an accident.")
def duplicates(ctx):
    for c, names in ctx.d.naming.duplicates.items():
        yield ctx.f("WC103", f"{c} is given {len(names)} times: {', '.join(names)}", c)


@rule("WC104", "wrapper-prefix", "error",
      "Names carry a training or HF-style prefix (draft_model., module., model.) the engines do not strip.")
def wrappers(ctx):
    for w in ctx.d.naming.wrappers:
        dname, prefix = w.split(":", 1)
        if prefix == "model.":
            # SGLang's Llama drafter uses an existing model.* name as it is (docs/engines.md §0 #3)
            why = ("vLLM prepends `model.` itself and fails on the doubled `model.model.*` names "
                   "(so does SGLang's MLA drafter)")
        else:
            why = "SGLang and vLLM prepend `model.` themselves and would match nothing"
        yield ctx.f("WC104", f"tensor names carry the prefix `{prefix}` ({dname}); {why} — convert "
                             "the checkpoint (weightcheck convert) before serving", prefix)


# =============================================================================================
# WC2xx inventory and shapes
@rule("WC201", "no-config", "error", "No config.json: nothing tells the engine the drafter's shape.")
def no_config(ctx):
    if ctx.d.source.config is None:
        yield ctx.f("WC201", "no config.json beside the weights", "config.json")


@rule("WC202", "unknown-architecture", "error",
      "Neither config nor tensors identify a known drafter architecture.")
def unknown_arch(ctx):
    if ctx.d.architecture is None and not ctx.d.looks_like_target:
        yield ctx.f("WC202", ctx.d.architecture_evidence, "architectures")


@rule("WC203", "target-as-drafter", "error",
      "The checkpoint looks like a target model (many layers, no fc, no d2t), not a drafter.")
def target_as_drafter(ctx):
    if ctx.d.looks_like_target:
        yield ctx.f("WC203", f"this looks like a target model, not an EAGLE-3 drafter: "
                             f"{ctx.d.looks_like_target} (SGLang crashes on hot_token_id)", None)


@rule("WC204", "missing-tensor", "error",
      "A tensor the config implies is absent: the engine parameter keeps its random init.")
def missing(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    present = set(ctx.d.by_canonical())
    for name, e in inv.tensors.items():
        if name in present or e.presence != "required":
            continue
        if name == "lm_head.weight":
            continue  # WC302/WC303 say more precisely what a missing head means
        if name == "d2t":
            continue  # WC305
        yield ctx.f("WC204", f"{name} {list(e.shape) if e.shape else ''} is missing; its config "
                             "requires it" + (f" ({e.note})" if e.note else ""), name)


@rule("WC205", "unexpected-tensor", "warning",
      "A canonical tensor the config does not imply (e.g. fc_norm without fc_norm: true): the engine ignores it.")
def unexpected(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    for c, t in ctx.d.by_canonical().items():
        if c not in inv.tensors:
            tmpl = inv.architecture.template_for(c)
            why = f"its condition `{tmpl.when}` is false in the config" if tmpl and tmpl.when else \
                "the architecture has no such tensor"
            yield ctx.f("WC205", f"{t.name}: not expected ({why}); engines ignore it", t.name)


@rule("WC206", "shape-mismatch", "error", "A tensor's shape disagrees with the shape its config implies.")
def shapes(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    for c, t in ctx.d.by_canonical().items():
        e = inv.tensors.get(c)
        if e is None:
            continue
        if e.shape is None:
            continue
        if c == "lm_head.weight" and tuple(t.shape[1:]) == tuple(e.shape[1:]):
            continue  # rows are WC301's business
        if c == "d2t":
            continue  # WC304
        if tuple(t.shape) != tuple(e.shape):
            yield ctx.f("WC206", f"{t.name}: shape {list(t.shape)}, config implies {list(e.shape)}", t.name)


@rule("WC207", "config-incomplete", "warning",
      "The config lacks a field needed to compute an expected shape.")
def config_incomplete(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    seen = set()
    for e in inv.tensors.values():
        if e.problem and e.problem not in seen:
            seen.add(e.problem)
            yield ctx.f("WC207", f"{e.name}: {e.problem}", e.name)
    for fld, msg in ctx.n.problems:
        yield ctx.f("WC207", f"config {msg}", fld)


@rule("WC208", "dtype-mixed", "warning", "Floating-point tensors in more than one dtype.")
def dtype_mixed(ctx):
    kinds = {}
    for t in ctx.d.tensors:
        if t.dtype in FLOAT_DTYPES:
            kinds.setdefault(t.dtype, []).append(t.name)
    if len(kinds) > 1:
        desc = ", ".join(f"{k} ({len(v)})" for k, v in sorted(kinds.items()))
        major = max(sorted(kinds), key=lambda k: len(kinds[k]))
        odd = [n for k, v in sorted(kinds.items()) if k != major for n in v]
        names = ", ".join(odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
        yield ctx.f("WC208", f"weights in several dtypes: {desc}; not {major}: {names}", odd[0])


@rule("WC209", "dtype-vs-config", "warning",
      "Weights stored in another dtype than the config declares (fp32 exports are twice the size).")
def dtype_config(ctx):
    declared = CONFIG_DTYPES.get(str(ctx.n.get("dtype") or "").lower())
    floats = {t.dtype for t in ctx.d.tensors if t.dtype in FLOAT_DTYPES}
    if declared and floats and floats != {declared}:
        yield ctx.f("WC209", f"config says {ctx.n.get('dtype')} ({ctx.n.provenance.get('dtype')}) "
                             f"but weights are {', '.join(sorted(floats))}", "dtype")
    elif floats == {"F32"}:
        yield ctx.f("WC209", "weights are float32: twice the size of a bf16 export, and engines "
                             "cast them at load", "dtype")


@rule("WC210", "index-inconsistent", "error",
      "The shard index and the shards disagree (a tensor in another shard, unlisted, or a wrong total).")
def index_drift(ctx):
    for note in ctx.d.source.notes:
        if note.startswith("index-"):
            yield ctx.f("WC210", note.split(": ", 1)[1], ctx.d.source.index_file)


# =============================================================================================
# WC3xx vocabulary: lm_head, d2t, t2d, tie_word_embeddings
def _vocab(ctx):
    return ctx.n.get("vocab_size"), ctx.n.get("draft_vocab_size")


@rule("WC301", "lm-head-rows", "error", "lm_head rows differ from draft_vocab_size.")
def lm_head_rows(ctx):
    t = ctx.tensor("lm_head.weight")
    _, vd = _vocab(ctx)
    if t is not None and vd and t.shape and t.shape[0] != vd:
        yield ctx.f("WC301", f"{t.name} has {t.shape[0]} rows but draft_vocab_size is {vd} "
                             f"({ctx.n.provenance.get('draft_vocab_size')})", t.name)


@rule("WC302", "lm-head-missing", "error",
      "No lm_head: with a full draft vocabulary and untied embeddings the engine keeps a random head.")
def lm_head_missing(ctx):
    if ctx.tensor("lm_head.weight") is not None or ctx.d.source.config is None:
        return
    v, vd = _vocab(ctx)
    tied = ctx.n.get("tie_word_embeddings")
    if tied and ctx.tensor("embed_tokens.weight") is not None and vd == v:
        return
    if vd == v and not tied:
        yield ctx.f("WC302", "no lm_head.weight, draft vocab = vocab and tie_word_embeddings is "
                             "false: the engine's head stays random (accept length ~1.00)",
                    "lm_head.weight")
    else:
        yield ctx.f("WC302", f"no lm_head.weight for a draft vocabulary of {vd}: the engine cannot "
                             "borrow the target's full-vocabulary head for it", "lm_head.weight")


@rule("WC303", "tied-embeddings", "error",
      "tie_word_embeddings: true with a reduced draft vocabulary forces an impossible shape.")
def tied(ctx):
    v, vd = _vocab(ctx)
    if ctx.n.get("tie_word_embeddings") and vd and v and vd != v:
        yield ctx.f("WC303", f"tie_word_embeddings is true but draft_vocab_size {vd} != vocab_size "
                             f"{v}: lm_head [{vd}, H] cannot be tied to embed_tokens [{v}, H]",
                    "tie_word_embeddings")


@rule("WC304", "d2t-shape", "error", "d2t is not an int64 vector of draft_vocab_size entries.")
def d2t_shape(ctx):
    t = ctx.tensor("d2t")
    if t is None:
        return
    _, vd = _vocab(ctx)
    if t.dtype != "I64":
        yield ctx.f("WC304", f"{t.name} is {t.dtype}; engines expect int64", t.name)
    if len(t.shape) != 1:
        yield ctx.f("WC304", f"{t.name} has rank {len(t.shape)} ({list(t.shape)}); expected a vector", t.name)
    elif vd and t.shape[0] != vd:
        yield ctx.f("WC304", f"{t.name} has {t.shape[0]} entries but draft_vocab_size is {vd}", t.name)


@rule("WC305", "d2t-missing", "error",
      "A reduced draft vocabulary without d2t: draft ids are read as target ids (acceptance collapses).")
def d2t_missing(ctx):
    v, vd = _vocab(ctx)
    if ctx.tensor("d2t") is None and v and vd and vd < v:
        yield ctx.f("WC305", f"draft_vocab_size {vd} < vocab_size {v} but there is no d2t: every "
                             "draft token would be read as the wrong target token", "d2t")


@rule("WC306", "d2t-range", "error", "A d2t entry maps a draft id outside [0, vocab_size).")
def d2t_range(ctx):
    d2t, _ = ctx.vocab_maps()
    v, _ = _vocab(ctx)
    if d2t is None or not v:
        return
    bad = [i for i, off in enumerate(d2t) if not 0 <= i + off < v]
    if bad:
        i = bad[0]
        yield ctx.f("WC306", f"d2t maps {len(bad)} draft id(s) outside [0, {v}); first: draft id "
                             f"{i} -> target id {i + d2t[i]}", "d2t")


@rule("WC307", "d2t-duplicates", "error", "Two draft ids map to the same target id.")
def d2t_dups(ctx):
    d2t, _ = ctx.vocab_maps()
    if d2t is None:
        return
    targets = [i + off for i, off in enumerate(d2t)]
    dup = len(targets) - len(set(targets))
    if dup:
        seen, first = set(), None
        for i, tid in enumerate(targets):
            if tid in seen:
                first = (i, tid)
                break
            seen.add(tid)
        yield ctx.f("WC307", f"d2t sends {dup} draft id(s) to a target id already taken; first: "
                             f"draft id {first[0]} -> {first[1]}", "d2t")


@rule("WC308", "t2d-shape", "error", "t2d is not a bool vector of vocab_size entries.")
def t2d_shape(ctx):
    t = ctx.tensor("t2d")
    v, _ = _vocab(ctx)
    if t is None:
        return
    if t.dtype not in ("BOOL", "U8"):
        yield ctx.f("WC308", f"{t.name} is {t.dtype}; expected bool", t.name)
    if len(t.shape) != 1 or (v and t.shape[0] != v):
        yield ctx.f("WC308", f"{t.name} has shape {list(t.shape)}; expected [{v}]", t.name)


@rule("WC309", "t2d-count", "error", "t2d marks a different number of tokens than draft_vocab_size.")
def t2d_count(ctx):
    _, t2d = ctx.vocab_maps()
    _, vd = _vocab(ctx)
    if t2d is None or not vd:
        return
    count = sum(1 for b in t2d if b)
    if count != vd:
        yield ctx.f("WC309", f"t2d marks {count} target tokens but draft_vocab_size is {vd}", "t2d")


@rule("WC310", "t2d-vs-d2t", "error", "t2d and d2t describe different draft vocabularies.")
def t2d_vs_d2t(ctx):
    d2t, t2d = ctx.vocab_maps()
    if d2t is None or t2d is None:
        return
    targets = {i + off for i, off in enumerate(d2t)}
    marked = {i for i, b in enumerate(t2d) if b}
    only_d2t, only_t2d = targets - marked, marked - targets
    if only_d2t or only_t2d:
        yield ctx.f("WC310", f"d2t reaches {len(only_d2t)} target id(s) t2d does not mark, and t2d "
                             f"marks {len(only_t2d)} d2t does not reach (stale vocab mapping?)", "t2d")


# =============================================================================================
# WC4xx config
TARGET_ARCHITECTURES = ("ForCausalLM", "ForConditionalGeneration")


@rule("WC401", "architectures", "error",
      "config architectures missing, or naming the target's class instead of the drafter's.")
def architectures(ctx):
    if ctx.d.source.config is None:
        return
    names = ctx.d.config.get("architectures")
    if not names:
        yield ctx.f("WC401", "config has no `architectures`: engines cannot pick the EAGLE-3 "
                             "loader", "architectures")
        return
    known = {a for arch in inventory.architectures() for a in arch.config_architectures}
    if names[0] not in known:
        hint = " (a target model's class)" if names[0].endswith(TARGET_ARCHITECTURES) else ""
        yield ctx.f("WC401", f"architectures[0] is {names[0]}{hint}; an EAGLE-3 engine looks for "
                             "LlamaForCausalLMEagle3 (or its speculators equivalent) and fails with "
                             "KeyError midlayer.self_attn.qkv_proj.weight", "architectures")


@rule("WC402", "fc-width", "error", "fc input width differs from target_hidden_size × number of aux layers.")
def fc_width(ctx):
    t = ctx.tensor("fc.weight")
    T, n_aux, H = ctx.n.get("target_hidden_size"), ctx.n.get("num_aux_hidden_states"), ctx.n.get("hidden_size")
    if t is None or len(t.shape) != 2 or not (T and n_aux):
        return
    if t.shape[1] != T * n_aux:
        k = t.shape[1] / T if T else None
        extra = f" (= {k:g} x {T}: {k:g} aux layers?)" if k and k == int(k) else ""
        yield ctx.f("WC402", f"{t.name} reads {t.shape[1]} features but target_hidden_size {T} x "
                             f"{n_aux} aux layers = {T * n_aux}{extra}", t.name)
    if H and t.shape[0] != H:
        yield ctx.f("WC402", f"{t.name} writes {t.shape[0]} features but hidden_size is {H}", t.name)


@rule("WC403", "aux-layer-ids", "error",
      "Aux layer ids inconsistent with num_aux_hidden_states, negative, duplicated, or past the target's layers.")
def aux_ids(ctx):
    ids = ctx.n.get("aux_layer_ids")
    n_aux = ctx.n.get("num_aux_hidden_states")
    if ids is None:
        return
    if not all(type(i) is int for i in ids):
        yield ctx.f("WC403", f"aux layer ids {ids} are not all integers", "aux_layer_ids")
        return
    if n_aux and len(ids) != n_aux and ctx.n.provenance.get("num_aux_hidden_states") != "default":
        yield ctx.f("WC403", f"{len(ids)} aux layer ids {ids} but num_aux_hidden_states is {n_aux}",
                    "aux_layer_ids")
    if any(i < 0 for i in ids):
        yield ctx.f("WC403", f"negative aux layer id in {ids}", "aux_layer_ids")
    if len(set(ids)) != len(ids):
        yield ctx.f("WC403", f"duplicate aux layer id in {ids}", "aux_layer_ids")
    L = ctx.target.num_layers if ctx.target is not None else None
    # SGLang's convention: id k is the output of layer k (0..L-1); vLLM's: the output of layer
    # k-1, so id L is the last layer (docs/engines.md §aux layers). Which one the ids are written
    # in is engine.convention_of's answer, the one convert and the engine view use: speculators
    # drafters, and top-level-only ids (convert --to vllm of a ModelOpt drafter) are vLLM's
    vllm_convention = engine_mod.convention_of(ctx.d) == "vllm"
    top = L if vllm_convention else (L - 1 if L else None)
    if L and any(i > top for i in ids):
        yield ctx.f("WC403", f"aux layer ids {ids} reach past the target's {L} layers (ids 0..{top} "
                             f"in the {'vLLM' if vllm_convention else 'SGLang'} convention)",
                    "aux_layer_ids")


@rule("WC407", "aux-ids-missing", "warning",
      "The config names no aux layer ids: every engine captures its default layers instead of the trained ones.")
def aux_missing(ctx):
    if ctx.d.source.config is None or ctx.d.looks_like_target:
        return
    if ctx.n.get("aux_layer_ids") is None and ctx.n.get("use_aux_hidden_state") is not False:
        yield ctx.f("WC407", "no aux layer ids (eagle_config.eagle_aux_hidden_state_layer_ids or "
                             "eagle_aux_hidden_state_layer_ids): engines capture their defaults "
                             "[2, L//2, L-3], which match training only by luck (speculators convert "
                             "drops them unless passed explicitly)", "aux_layer_ids")


@rule("WC404", "attention-geometry", "error",
      "num_key_value_heads / head_dim the engines' attention or KV cache cannot serve.")
def attention(ctx):
    nh, nkv, hd = (ctx.n.get("num_attention_heads"), ctx.n.get("num_key_value_heads"),
                   ctx.n.get("head_dim"))
    if ctx.d.architecture is None or ctx.d.architecture.name != "llama_eagle3":
        return
    if nh and nkv and nh % nkv:
        yield ctx.f("WC404", f"num_attention_heads {nh} is not a multiple of num_key_value_heads "
                             f"{nkv}", "num_key_value_heads")
    if hd and (hd % 8 or hd < 32 or hd > 256):
        yield ctx.f("WC404", f"head_dim {hd}: attention kernels and KV caches want a multiple of 8 "
                             "between 32 and 256 (vLLM's CPU backend needs >= 32)", "head_dim",
                    severity=WARNING)


@rule("WC405", "stale-rope-theta", "warning",
      "A top-level rope_theta beside rope_parameters with another base: which one wins depends on the reader.")
def stale_rope(ctx):
    cfg = ctx.d.config
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and "rope_theta" in rp and "rope_theta" in cfg \
            and rp["rope_theta"] != cfg["rope_theta"]:
        yield ctx.f("WC405", f"rope_theta {cfg['rope_theta']} beside rope_parameters.rope_theta "
                             f"{rp['rope_theta']}: one is stale (RoPE base "
                             f"{max(rp['rope_theta'], cfg['rope_theta']) / max(1e-9, min(rp['rope_theta'], cfg['rope_theta'])):g}x off)",
                    "rope_theta")


@rule("WC406", "layer-count", "warning", "A drafter config with num_hidden_layers other than 1.")
def layer_count(ctx):
    L = ctx.n.get("num_hidden_layers")
    if L is not None and L != 1 and not ctx.d.looks_like_target:
        yield ctx.f("WC406", f"num_hidden_layers is {L}; an EAGLE-3 drafter has one decoder layer",
                    "num_hidden_layers")


# =============================================================================================
# WC5xx the target (--target)
@rule("WC501", "target-hidden", "error", "The drafter's target_hidden_size differs from the target's hidden size.",
      needs="target")
def target_hidden(ctx):
    th, T = ctx.target.hidden_size, ctx.n.get("target_hidden_size")
    if th and T and th != T:
        yield ctx.f("WC501", f"target_hidden_size {T} ({ctx.n.provenance.get('target_hidden_size')}) "
                             f"but the target's hidden size is {th}", "target_hidden_size")


@rule("WC502", "target-vocab", "error", "The drafter's vocab_size differs from the target's.", needs="target")
def target_vocab(ctx):
    tv, v = ctx.target.vocab_size, ctx.n.get("vocab_size")
    if tv and v and tv != v:
        yield ctx.f("WC502", f"vocab_size {v} but the target's is {tv}: d2t/t2d and the borrowed "
                             "embedding index another vocabulary", "vocab_size")
    emb = ctx.target.embed
    if emb is not None and v and emb.shape and emb.shape[0] != v:
        yield ctx.f("WC502", f"the target's embedding {emb.name} has {emb.shape[0]} rows, the "
                             f"drafter's vocab_size is {v}", "vocab_size")


@rule("WC503", "target-embedding", "error",
      "The drafter's embed_tokens (or the hidden size the target's embedding must feed) does not fit.",
      needs="target")
def target_embed(ctx):
    emb = ctx.target.embed
    H = ctx.n.get("hidden_size")
    mine = ctx.tensor("embed_tokens.weight")
    if emb is not None and mine is not None and tuple(mine.shape) != tuple(emb.shape):
        yield ctx.f("WC503", f"{mine.name} {list(mine.shape)} but the target's {emb.name} is "
                             f"{list(emb.shape)}", mine.name)
    if emb is not None and mine is None and H and len(emb.shape) == 2 and emb.shape[1] != H:
        yield ctx.f("WC503", f"no embed_tokens of its own, and the target's {emb.name} "
                             f"{list(emb.shape)} is not {H} wide", "embed_tokens.weight")


@rule("WC504", "target-dtype", "warning", "The drafter's dtype differs from the target's.", needs="target")
def target_dtype(ctx):
    td = CONFIG_DTYPES.get(str(ctx.target.dtype or "").lower())
    if ctx.target.embed is not None and not td:
        td = ctx.target.embed.dtype
    floats = {t.dtype for t in ctx.d.tensors if t.dtype in FLOAT_DTYPES}
    if td and floats and floats != {td}:
        yield ctx.f("WC504", f"drafter weights are {', '.join(sorted(floats))}, the target is {td}: "
                             "the engine casts at load (and an fp32 drafter ships twice the bytes)",
                    "dtype")


# =============================================================================================
# WC8xx values (--values)
@rule("WC801", "non-finite", "error", "NaN or Inf in a tensor.", needs="values")
def nonfinite(ctx):
    for c, s in ctx.values.items():
        if s.get("non_finite"):
            yield ctx.f("WC801", f"{c}: {s['non_finite']} NaN/Inf value(s)", c)


@rule("WC802", "constant-tensor", "error", "An all-zero or constant weight tensor (never trained, or zeroed).",
      needs="values")
def constant(ctx):
    for c, s in ctx.values.items():
        if s.get("numel", 0) > 1 and s.get("min") == s.get("max") and not c.endswith("norm.weight") \
                and c not in ("d2t", "t2d"):
            yield ctx.f("WC802", f"{c}: every value is {s['min']:g}", c)


@rule("WC803", "norm-at-init", "warning", "A norm weight still exactly 1.0 everywhere: never trained.",
      needs="values")
def norm_init(ctx):
    for c, s in ctx.values.items():
        if c.endswith("norm.weight") and s.get("min") == 1.0 and s.get("max") == 1.0:
            yield ctx.f("WC803", f"{c}: all ones, its initial value (was it trained?)", c)


@rule("WC804", "lm-head-is-target-slice", "warning",
      "The drafter's lm_head equals the target's rows at the d2t ids: the head was copied, not trained.",
      needs="values")
def head_slice(ctx):
    same = ctx.cache.get("lm_head_equals_target")
    if same:
        yield ctx.f("WC804", "lm_head.weight equals the target's lm_head rows at the draft "
                             "vocabulary: an untrained head copied from the target", "lm_head.weight")


# =============================================================================================
# WC9xx the pre-training gate (--training-config)
@rule("WC901", "training-shape", "error",
      "SRC cannot initialize the training architecture: a tensor's shape differs.", needs="training")
def training_shapes(ctx):
    for c, mine, want in ctx.cache.get("training_mismatch", ()):
        yield ctx.f("WC901", f"{c}: {list(mine)} here, the training config builds {list(want)}", c)


@rule("WC902", "training-reinit", "info",
      "Tensors the training architecture has and SRC lacks: training starts them from scratch.",
      needs="training")
def training_reinit(ctx):
    for c in ctx.cache.get("training_reinit", ()):
        if c == "embed_tokens.weight":
            yield ctx.f("WC902", f"{c}: not in SRC; SpecForge takes the target's embedding (and "
                                 "freezes it), others initialize it", c)
        else:
            yield ctx.f("WC902", f"{c}: not in SRC; training would initialize it from scratch", c)


@rule("WC903", "training-ignored", "warning",
      "Tensors SRC has and the training architecture lacks: training would ignore them.",
      needs="training")
def training_ignored(ctx):
    for c in ctx.cache.get("training_ignored", ()):
        yield ctx.f("WC903", f"{c}: in SRC but not in the training architecture; it would be ignored", c)


@rule("WC904", "training-config-differs", "warning",
      "A serving-relevant config field differs between SRC and the training config.", needs="training")
def training_config(ctx):
    for fld, mine, theirs in ctx.cache.get("training_fields", ()):
        yield ctx.f("WC904", f"config {fld}: {mine!r} in SRC, {theirs!r} in the training config", fld)


__all__ = ["Finding", "Rule", "RULES", "Context", "rule", "ERROR", "WARNING", "INFO"]
