"""Rotary position embeddings as the engines build them for a drafter (docs/eval.md §2).

Llama EAGLE-3 drafters (rotation of every head dim, neox layout): ``default``, ``linear``,
``llama3`` and ``yarn``, the engines' ``get_rope`` (sglang 0.5.23
sglang/srt/layers/rotary_embedding/factory.py, yarn.py:91-190; vllm 0.32.0
vllm/model_executor/layers/rotary_embedding/__init__.py:243-283, yarn_scaling_rope.py).

MLA drafters (rotation of the ``qk_rope_head_dim`` slice): *every* non-default ``rope_scaling``
is DeepSeek-YaRN in both engines (sglang/srt/models/deepseek_v2.py:2064-2066; vllm
models/deepseek_v2.py:1115-1120), whose cos/sin carry ``mscale`` and whose attention softmax
scale is multiplied by ``yarn_get_mscale(factor, mscale_all_dim)**2`` (deepseek_v2.py:2177-2178
and sglang/srt/configs/model_config.py:2623-2648; vllm deepseek_v2.py:1129-1136); the pairs are
interleaved (GPT-J layout: sglang deepseek_v2.py:2166 ``not rope_interleave``, default True;
vllm deepseek_v2.py:1126 ``is_neox_style=False``).

Where the two engines read a rope setting differently, eval refuses it in one line (exit 2).
"""

from __future__ import annotations

import math

from weightcheck.errors import WeightcheckError

LLAMA_TYPES = ("default", "linear", "llama3", "yarn")
# yarn keys one engine reads and the other does not (the engines' code, cited in docs/eval.md §2)
_ONE_ENGINE = {
    "attn_factor": (1, "SGLang multiplies cos/sin by it, vLLM ignores it"),
    "extrapolation_factor": (
        1,
        "SGLang scales the extrapolated frequencies by it, vLLM ignores it",
    ),
    "apply_yarn_scaling": (True, "SGLang reads it, vLLM does not"),
    "apply_scale": (True, "SGLang reads it, vLLM does not"),
}


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """The engines' ``yarn_get_mscale`` (sglang rotary_embedding/yarn.py:60-63, vllm
    deepseek_scaling_rope.py:20-23)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(
    dim: int, base: float, factor: float, original_max: float, rs: dict, truncate: bool = True
):
    """YaRN's frequencies: interpolated (/factor) below the correction range, extrapolated
    above it, a linear ramp between (the engines' ``_compute_inv_freq``)."""
    import torch

    beta_fast = rs.get("beta_fast", 32)
    beta_slow = rs.get("beta_slow", 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    inv_extra = 1.0 / pos_freqs
    inv_inter = 1.0 / (factor * pos_freqs)

    def corr(rot):
        return (dim * math.log(original_max / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float) - low) / (high - low), 0, 1)
    mask = 1 - ramp
    return inv_inter * (1 - mask) + inv_extra * mask


def _kind(rs) -> str:
    if not isinstance(rs, dict):
        return "default"
    return rs.get("rope_type", rs.get("type")) or "default"


def _factor(rs: dict, label) -> float:
    f = rs.get("factor")
    if not isinstance(f, (int, float)) or isinstance(f, bool) or f <= 0:
        raise WeightcheckError(label, f"rope_scaling {_kind(rs)!r} has no factor: eval needs one")
    return float(f)


def _refuse_one_engine_keys(rs: dict, label, keys) -> None:
    for key in keys:
        default, why = _ONE_ENGINE[key]
        if key in rs and rs[key] != default:
            raise WeightcheckError(
                label,
                f"rope_scaling {key} {rs[key]!r}: {why}; eval runs what both engines run alike",
            )


class Rope:
    """The rotation of one drafter: ``inv_freq`` [dim/2] (float32), ``mscale`` (cos/sin are
    multiplied by it), ``softmax_mscale`` (the MLA attention scale's factor), ``interleaved``
    (GPT-J pairs (2i, 2i+1) rather than neox halves)."""

    def __init__(self, inv_freq, mscale=1.0, softmax_mscale=1.0, interleaved=False):
        self.inv_freq, self.mscale = inv_freq, mscale
        self.softmax_mscale, self.interleaved = softmax_mscale, interleaved

    def __call__(self, x, pos):
        """``x`` [..., S, dim] rotated at positions ``pos`` [S], in x's dtype (cos/sin cast to
        it first, as the engines' caches are)."""
        import torch

        if self.inv_freq.device != pos.device:
            self.inv_freq = self.inv_freq.to(pos.device)
        if x.dtype == torch.float64:  # a float64 run (the example's generator) stays float64
            freqs = torch.outer(pos.double(), self.inv_freq.double())
        else:
            freqs = torch.outer(pos.float(), self.inv_freq)
        if self.interleaved:
            cos, sin = _scaled(freqs.cos(), self.mscale), _scaled(freqs.sin(), self.mscale)
            cos = cos.to(x.dtype).repeat_interleave(2, dim=-1)
            sin = sin.to(x.dtype).repeat_interleave(2, dim=-1)
            rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
            return x * cos + rot * sin
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = _scaled(emb.cos(), self.mscale).to(x.dtype)
        sin = _scaled(emb.sin(), self.mscale).to(x.dtype)
        return x * cos + _rotate_half(x) * sin


def _scaled(t, m: float):
    return t if m == 1.0 else t * m


def _rotate_half(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _base(norm) -> float:
    return float(norm.get("rope_theta") or 10000.0)


def llama_rope(dim: int, norm, label) -> Rope:
    """A Llama drafter's rotation (neox halves over the whole head)."""
    import torch

    base = _base(norm)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    rs = norm.get("rope_scaling")
    kind = _kind(rs)
    if kind == "default":
        return Rope(inv)
    if kind == "linear":
        return Rope(inv / _factor(rs, label))
    if kind == "llama3":
        f, lo, hi = (
            float(rs["factor"]),
            float(rs["low_freq_factor"]),
            float(rs["high_freq_factor"]),
        )
        om = float(rs["original_max_position_embeddings"])
        wave = 2 * math.pi / inv
        smooth = (om / wave - lo) / (hi - lo) if lo != hi else 0
        return Rope(
            torch.where(
                wave < om / hi,
                inv,
                torch.where(wave > om / lo, inv / f, (1 - smooth) * inv / f + smooth * inv),
            )
        )
    if kind == "yarn":
        return _llama_yarn(dim, base, norm, rs, label)
    raise WeightcheckError(
        label, f"rope_scaling type {kind!r}: eval runs {', '.join(LLAMA_TYPES)} (Llama drafters)"
    )


def _llama_yarn(dim: int, base: float, norm, rs: dict, label) -> Rope:
    """The engines' ``YaRNScalingRotaryEmbedding`` (sglang yarn.py:91-190, vllm
    yarn_scaling_rope.py): cos/sin times ``mscale``, the softmax scale unchanged."""
    _refuse_one_engine_keys(rs, label, ("attn_factor", "extrapolation_factor"))
    if "attention_factor" in rs:
        raise WeightcheckError(
            label,
            f"rope_scaling attention_factor {rs['attention_factor']!r}: vLLM takes it as the "
            "cos/sin scale, SGLang ignores it; eval runs what both engines run alike",
        )
    f = _factor(rs, label)
    om = float(rs.get("original_max_position_embeddings") or _max_pos(norm, 2048))
    ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
    if ms is not None and msa is not None:
        if not (ms and msa):  # vLLM needs both truthy, SGLang both present
            raise WeightcheckError(
                label,
                f"rope_scaling mscale {ms!r}, mscale_all_dim {msa!r}: vLLM and SGLang scale "
                "cos/sin differently when one is 0; eval runs what both engines run alike",
            )
        m = yarn_get_mscale(f, float(ms)) / yarn_get_mscale(f, float(msa))
    else:
        m = yarn_get_mscale(f)
    inv = yarn_inv_freq(dim, base, f, om, rs, truncate=bool(rs.get("truncate", True)))
    return Rope(inv, mscale=float(m))


def _max_pos(norm, default: int) -> int:
    return int(norm.get("max_position_embeddings") or default)


def mla_rope(dim: int, norm, raw: dict, label) -> Rope:
    """An MLA drafter's rotation of its ``qk_rope_head_dim`` slice: plain, or DeepSeek-YaRN for
    any other rope_scaling, interleaved pairs; ``softmax_mscale`` for the attention scale."""
    import torch

    interleave = raw.get("rope_interleave", True)
    if interleave is not True and interleave not in (None, 1):
        raise WeightcheckError(
            label,
            f"rope_interleave {interleave!r}: SGLang rotates neox halves then, vLLM interleaved "
            "pairs always; eval runs what both engines run alike",
        )
    base = _base(norm)
    rs = norm.get("rope_scaling")
    if _kind(rs) == "default":
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return Rope(inv, interleaved=True)
    _refuse_one_engine_keys(rs, label, tuple(_ONE_ENGINE))
    if rs.get("attention_factor") == 1.0:
        raise WeightcheckError(
            label,
            "rope_scaling attention_factor 1.0: vLLM drops the mscale from the softmax scale "
            "(deepseek_llama_scaling), SGLang keeps it; eval runs what both engines run alike",
        )
    f = _factor(rs, label)
    # (DeepSeek-YaRN always truncates: neither engine passes `truncate` to it)
    # transformers 5 fills original_max_position_embeddings with max_position_embeddings for
    # yarn (its config standardization), SGLang for every type (factory.py:373-378)
    om = float(rs.get("original_max_position_embeddings") or _max_pos(norm, 4096))
    m = yarn_get_mscale(f, float(rs.get("mscale", 1))) / yarn_get_mscale(
        f, float(rs.get("mscale_all_dim", 0) or 0)
    )
    sm = yarn_get_mscale(f, float(rs.get("mscale_all_dim", 0) or 0))
    return Rope(
        yarn_inv_freq(dim, base, f, om, rs),
        mscale=float(m),
        softmax_mscale=sm * sm,
        interleaved=True,
    )
