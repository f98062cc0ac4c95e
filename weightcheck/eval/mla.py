"""An MLA EAGLE-3 drafter's attention: DeepSeek-V2 multi-head latent attention over the
drafter's layer input (2H for layer 0, H after), in the naive (non-absorbed) form — numerically
what the engines' absorbed kernels compute, up to rounding.

SGLang 0.5.23 ``Eagle3DeepseekV2ForCausalLM`` (sglang/srt/models/kimi_k25_eagle3.py:62-187: the
2H fused ``q_a_proj``/``kv_a_proj_with_mqa`` down-projection, :118-124) with
``DeepseekV2AttentionMLA`` (sglang/srt/models/deepseek_v2.py:2010-2261); vLLM 0.32.0
``DeepseekV2Eagle3DecoderLayer`` (vllm/model_executor/models/deepseek_eagle3.py:38-148,
``input_size`` 2H for layer 0 at :82) with ``DeepseekV2MLAAttention``
(models/deepseek_v2.py:1000-1140). Per head:

- ``q = q_b_proj(q_a_layernorm(q_a_proj(x)))`` (or ``q_proj(x)`` when ``q_lora_rank`` is null),
  split into ``q_nope`` [qk_nope_head_dim] and ``q_pe`` [qk_rope_head_dim];
- ``[c ; k_pe] = kv_a_proj_with_mqa(x)``, ``c = kv_a_layernorm(c)`` [kv_lora_rank], ``k_pe`` one
  head shared by all; ``[k_nope ; v] = kv_b_proj(c)`` per head;
- ``q_pe``, ``k_pe`` rotated (rope.py ``mla_rope``: interleaved pairs, DeepSeek-YaRN);
- key ``[k_nope ; k_pe]``, softmax scale ``qk_head_dim ** -0.5`` (times YaRN's mscale²),
  ``o_proj`` over the heads' ``v``-weighted sums [v_head_dim].

The norms' eps is the config's ``rms_norm_eps`` (both engines; transformers' DeepseekV3Attention
gives its q_a/kv_a layernorms eps 1e-6 whatever the config says).
"""

from __future__ import annotations

from weightcheck.eval.rope import mla_rope


class MlaAttention:
    def __init__(self, m, prefix: str, width: int):
        sym = m.d.normalized.symbols()
        self.nh = sym["nh"]
        self.q_rank, self.kv_rank = sym["q_rank"], sym["kv_rank"]
        self.d_nope, self.d_rope, self.d_v = sym["d_nope"], sym["d_rope"], sym["d_v"]
        d_qk = self.d_nope + self.d_rope
        w, p = m._w, prefix + "self_attn."
        if self.q_rank is None:
            self.q_a = self.q_norm = None
            self.q_b = w(p + "q_proj.weight", shape=(self.nh * d_qk, width))
        else:
            self.q_a = w(p + "q_a_proj.weight", shape=(self.q_rank, width))
            self.q_norm = m.rms_norm(w(p + "q_a_layernorm.weight", shape=(self.q_rank,)))
            self.q_b = w(p + "q_b_proj.weight", shape=(self.nh * d_qk, self.q_rank))
        self.kv_a = w(p + "kv_a_proj_with_mqa.weight", shape=(self.kv_rank + self.d_rope, width))
        self.kv_norm = m.rms_norm(w(p + "kv_a_layernorm.weight", shape=(self.kv_rank,)))
        self.kv_b = w(
            p + "kv_b_proj.weight", shape=(self.nh * (self.d_nope + self.d_v), self.kv_rank)
        )
        self.o = w(p + "o_proj.weight", shape=(m.H, self.nh * self.d_v))
        self.rope = mla_rope(self.d_rope, m.d.normalized, m.d.config, m.label)
        self.scaling = d_qk**-0.5 * self.rope.softmax_mscale

    def qkv(self, x, pos):
        """q and k [nh, S, qk_head_dim] (nope then rope part), v [nh, S, v_head_dim]."""
        import torch
        import torch.nn.functional as F

        S, nh = x.shape[0], self.nh
        if self.q_a is None:
            q = F.linear(x, self.q_b)
        else:
            q = F.linear(self.q_norm(F.linear(x, self.q_a)), self.q_b)
        q = q.view(S, nh, self.d_nope + self.d_rope).transpose(0, 1)
        q_nope, q_pe = q.split([self.d_nope, self.d_rope], dim=-1)
        c, k_pe = F.linear(x, self.kv_a).split([self.kv_rank, self.d_rope], dim=-1)
        kv = F.linear(self.kv_norm(c), self.kv_b).view(S, nh, self.d_nope + self.d_v)
        k_nope, v = kv.transpose(0, 1).split([self.d_nope, self.d_v], dim=-1)
        q_pe, k_pe = self.rope(q_pe, pos), self.rope(k_pe, pos)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.unsqueeze(0).expand(nh, S, self.d_rope)), dim=-1)
        return q, k, v.contiguous()

    def score(self, w):
        return w * self.scaling

    def out(self, o):
        import torch.nn.functional as F

        return F.linear(o, self.o)
