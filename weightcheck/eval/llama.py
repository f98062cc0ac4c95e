"""A Llama EAGLE-3 drafter's attention (grouped-query): q/k/v projections (+ biases), rotary
over the whole head (rope.py ``llama_rope``), the key/value heads repeated to the query heads,
softmax scale ``1/sqrt(head_dim)`` — SpecForge 0.2.0 specforge/modeling/draft/llama3_eagle.py
``LlamaAttention``, the engines' ``LlamaAttention`` (sglang 0.5.23 models/llama.py, vllm 0.32.0
models/llama.py) over the drafter's layer input (2H for layer 0, H after)."""

from __future__ import annotations

import math

from weightcheck.eval.rope import llama_rope


class LlamaAttention:
    def __init__(self, m, prefix: str, width: int):
        sym = m.d.normalized.symbols()
        self.nh, self.nkv = sym["nh"], sym["nkv"]
        self.hd = sym["hd"] or m.H // self.nh
        w, p = m._w, prefix + "self_attn."
        self.q = w(p + "q_proj.weight", shape=(self.nh * self.hd, width))
        self.k = w(p + "k_proj.weight", shape=(self.nkv * self.hd, width))
        self.v = w(p + "v_proj.weight", shape=(self.nkv * self.hd, width))
        self.o = w(p + "o_proj.weight")
        self.qb = w(p + "q_proj.bias", False)
        self.kb = w(p + "k_proj.bias", False)
        self.vb = w(p + "v_proj.bias", False)
        self.ob = w(p + "o_proj.bias", False)
        self.rope = llama_rope(self.hd, m.d.normalized, m.label)
        self._sqrt_hd = math.sqrt(self.hd)

    def qkv(self, x, pos):
        """q [nh, S, hd], k and v [nh, S, hd] (the KV heads repeated), rotated at ``pos``."""
        import torch.nn.functional as F

        S = x.shape[0]
        nh, nkv, hd = self.nh, self.nkv, self.hd
        q = F.linear(x, self.q, self.qb).view(S, nh, hd).transpose(0, 1)
        kk = F.linear(x, self.k, self.kb).view(S, nkv, hd).transpose(0, 1)
        vv = F.linear(x, self.v, self.vb).view(S, nkv, hd).transpose(0, 1)
        q, kk = self.rope(q, pos), self.rope(kk, pos)
        rep = nh // nkv
        if rep > 1:
            kk = kk.repeat_interleave(rep, dim=0)
            vv = vv.repeat_interleave(rep, dim=0)
        return q, kk, vv

    def score(self, w):
        return w / self._sqrt_hd

    def out(self, o):
        import torch.nn.functional as F

        return F.linear(o, self.o, self.ob)
