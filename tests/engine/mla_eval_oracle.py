"""An MLA EAGLE-3 drafter's draft logits, step by step, from transformers' own DeepSeek-V3 MLA
code (and, with ``"rope": "vllm"``, vLLM's own DeepSeek-YaRN rotary module), on CPU.

Runs in vLLM's side venv (tests/engine/setup_vllm_venv.sh: vllm 0.32.0 CPU, transformers 5.19.0),
never weightcheck's Python:

    python mla_eval_oracle.py JOBS.json

JOBS.json is a list of ``{"name", "drafter", "inputs", "out", "steps", "rope", "dtype"}``: DRAFTER a
drafter folder (config.json, model.safetensors with embed_tokens), INPUTS a safetensors file of
``aux`` [S, n_aux*T] and ``input_ids`` [S], OUT where the logits go (``logits`` [steps, S, Vd],
float32), DTYPE the one the model runs in (float32 unless said). One JSON line per job on stdout (``{"name", "scaling", "rope_class"}``).

What is whose:

- the attention is transformers' ``DeepseekV3Attention`` (modeling_deepseek_v3.py:350-483: q
  through q_a_proj/q_a_layernorm/q_b_proj or q_proj, the latent kv_a_proj_with_mqa/kv_a_layernorm,
  its latent cache, ``expand_kv`` through kv_b_proj, the interleaved rotation
  ``apply_rotary_pos_emb_interleave``, eager attention with the softmax scale
  ``yarn_apply_mscale``), with the MLP ``DeepseekV3MLP``, the norms ``DeepseekV3RMSNorm`` and the
  rotary ``DeepseekV3RotaryEmbedding`` (yarn: ``_compute_yarn_parameters``), the config
  ``DeepseekV3Config.from_pretrained`` (model_type kimi_k2 read as DeepSeek-V3, as vLLM does:
  vllm/transformers_utils/config.py:141);
- ``"rope": "vllm"``: the rotation is instead vLLM's own module, built exactly as
  ``DeepseekV2MLAAttention`` builds it (vllm/model_executor/models/deepseek_v2.py:1115-1136: any
  non-default rope_type becomes deepseek_yarn, ``get_rope(..., is_neox_style=False)``, the
  softmax scale times ``yarn_get_mscale(factor, mscale_all_dim)**2``), applied through its
  ``forward_native`` to the same q_pe/k_pe in place of transformers' function;
- the EAGLE-3 layer around it is SGLang's ``Eagle3MLADecoderLayer`` / ``Eagle3MLAModel``
  (sglang/srt/models/kimi_k25_eagle3.py:62-312) written over those modules: the attention's
  down-projections read [input_layernorm(embed) ; hidden_norm(h)] (2H: the q_a_proj /
  kv_a_proj_with_mqa (or q_proj) Linear rebuilt 2H wide, as SGLang rebuilds its fused one at
  :113-124), residual h, post_attention_layernorm, MLP, the final norm, lm_head, d2t as
  ``hot_token_id``; a later layer (vLLM builds them, SGLang refuses: kimi_k25_eagle3.py:243-244)
  as vLLM's ``DeepseekV2Eagle3DecoderLayer`` (vllm models/deepseek_eagle3.py:127-148):
  ``input_layernorm(h)``, H wide;
- the chain: step k feeds the sequence shifted k+1 tokens left and the previous step's hidden
  state (pre-norm, or normed with ``norm_output``), at positions t+k, through transformers'
  ``DynamicCache`` (each layer's latents of every step kept) and a 4D additive mask: the step-0
  keys of columns <= t and column t's own keys at steps 1..k.

Two settings the engines take from the config and transformers does not, set as the engines set
them: the q_a/kv_a layernorms' eps is ``rms_norm_eps`` (transformers builds them with 1e-6:
modeling_deepseek_v3.py:381,393; SGLang deepseek_v2.py:2077,2163, vLLM deepseek_v2.py), and
``num_key_value_heads`` (read by transformers' eager attention only, default 128) is the number of
heads (neither engine's MLA reads it).
"""

import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DeepseekV3Config, DynamicCache
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

_ROPE = {}  # the vLLM rotary of the running job and its positions


def _vllm_rope(config, dtype):
    """vLLM's rotary for this config and its softmax scale, as DeepseekV2MLAAttention builds them
    (vllm/model_executor/models/deepseek_v2.py:1115-1136)."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope
    from vllm.model_executor.layers.rotary_embedding.deepseek_scaling_rope import (
        yarn_get_mscale,
    )

    params = dict(config.rope_parameters)
    if params["rope_type"] != "default":
        params["rope_type"] = (
            "deepseek_llama_scaling" if params.get("attention_factor") == 1.0 else "deepseek_yarn"
        )
    with set_current_vllm_config(VllmConfig()):
        rope = get_rope(
            config.qk_rope_head_dim,
            max_position=config.max_position_embeddings,
            rope_parameters=params,
            is_neox_style=False,
            dtype=dtype,
        )
    scaling = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
    if params["rope_type"] == "deepseek_yarn":
        m = yarn_get_mscale(params["factor"], float(params.get("mscale_all_dim", False)))
        scaling = scaling * m * m
    return rope, scaling


def _apply_vllm_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """In place of transformers' apply_rotary_pos_emb_interleave: q [1, nh, S, d], k [1, 1, S, d]
    rotated by vLLM's module at the job's positions (its [tokens, heads, d] layout)."""
    rope, pos = _ROPE["rope"], _ROPE["pos"]
    qq = q[0].transpose(0, 1).contiguous()
    kk = k[0].transpose(0, 1).contiguous()
    qq, kk = rope.forward_native(pos, qq, kk)
    return qq.transpose(0, 1)[None], kk.transpose(0, 1)[None]


class Layer(nn.Module):
    def __init__(self, config, idx):
        super().__init__()
        H, eps = config.hidden_size, config.rms_norm_eps
        self.idx = idx
        self.self_attn = ds.DeepseekV3Attention(config, layer_idx=idx)
        a = self.self_attn
        width = 2 * H if idx == 0 else H
        if a.q_lora_rank is None:
            a.q_proj = nn.Linear(width, a.num_heads * a.qk_head_dim, bias=False)
        else:
            a.q_a_proj = nn.Linear(width, a.q_lora_rank, bias=False)
            a.q_a_layernorm.variance_epsilon = eps
        a.kv_a_proj_with_mqa = nn.Linear(width, a.kv_lora_rank + a.qk_rope_head_dim, bias=False)
        a.kv_a_layernorm.variance_epsilon = eps
        self.mlp = ds.DeepseekV3MLP(config)
        self.input_layernorm = ds.DeepseekV3RMSNorm(H, eps=eps)
        self.hidden_norm = ds.DeepseekV3RMSNorm(H, eps=eps) if idx == 0 else None
        self.post_attention_layernorm = ds.DeepseekV3RMSNorm(H, eps=eps)

    def forward(self, h, embeds, pos_emb, mask, cache):
        if self.idx == 0:  # kimi_k25_eagle3.py:159-162
            residual = h
            x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(h)], dim=-1)
        else:  # deepseek_eagle3.py:133-134 (the previous layer's sum is h)
            residual, x = h, self.input_layernorm(h)
        out, _ = self.self_attn(
            x[None], position_embeddings=pos_emb, attention_mask=mask, past_key_values=cache
        )
        h = out[0] + residual
        return self.mlp(self.post_attention_layernorm(h)) + h


class Drafter(nn.Module):
    def __init__(self, folder):
        super().__init__()
        raw = json.load(open(os.path.join(folder, "config.json")))
        config = DeepseekV3Config.from_pretrained(folder)
        config.num_key_value_heads = config.num_attention_heads
        config._attn_implementation = "eager"
        self.config = config
        H = config.hidden_size
        ids = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0] * 3
        T = raw.get("target_hidden_size") or H
        self.fc = nn.Linear(T * len(ids), H, bias=bool(raw.get("bias", False)))
        fc_norm = raw.get("fc_norm") or raw.get("use_aux_norm")
        self.fc_norm = (
            nn.ModuleList([ds.DeepseekV3RMSNorm(T, config.rms_norm_eps) for _ in ids])
            if fc_norm
            else None
        )
        self.layers = nn.ModuleList(Layer(config, i) for i in range(config.num_hidden_layers))
        self.norm = ds.DeepseekV3RMSNorm(H, eps=config.rms_norm_eps)
        self.norm_output = bool(raw.get("norm_output", False))
        self.rotary = ds.DeepseekV3RotaryEmbedding(config)
        self._load(folder)

    def _load(self, folder):
        w = load_file(os.path.join(folder, "model.safetensors"))
        self.embed = w.pop("embed_tokens.weight")
        self.lm_head = w.pop("lm_head.weight")
        d2t = w.pop("d2t", None)
        self.hot = d2t + torch.arange(d2t.shape[0]) if d2t is not None else None
        w.pop("t2d", None)
        state = {k.replace("midlayer.", "layers.0."): v for k, v in w.items()}
        for i in range(1, len(self.layers)):  # vLLM builds it and never reads it (:133-134)
            state.pop(f"layers.{i}.hidden_norm.weight", None)
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [m for m in missing if "rotary" not in m]
        assert not missing and not unexpected, (missing, unexpected)

    def steps(self, aux, input_ids, steps):
        S = aux.shape[0]
        h = aux
        if self.fc_norm is not None:
            h = torch.cat([n(c) for n, c in zip(self.fc_norm, h.chunk(len(self.fc_norm), -1))], -1)
        h = self.fc(h)
        cache = DynamicCache()
        neg = torch.finfo(h.dtype).min
        causal = torch.full((S, S), neg).triu(1)
        diag = torch.full((S, S), neg).fill_diagonal_(0)
        out = []
        for k in range(steps):
            ids = input_ids[k + 1 : k + 1 + S]
            ids = torch.cat((ids, ids.new_zeros(S - ids.shape[0])))
            embeds = nn.functional.embedding(ids, self.embed)
            pos = torch.arange(S) + k
            _ROPE["pos"] = pos
            pos_emb = self.rotary(h[None], pos[None])
            mask = torch.cat([causal] + [diag] * k, dim=-1)[None, None]
            for layer in self.layers:
                h = layer(h, embeds, pos_emb, mask, cache)
            normed = self.norm(h)  # kimi_k25_eagle3.py:308-311
            out.append(nn.functional.linear(normed, self.lm_head))
            if self.norm_output:
                h = normed
        return torch.stack(out)


def run(job):
    transformers_rope = ds.apply_rotary_pos_emb_interleave
    dt = getattr(torch, job.get("dtype", "float32"))
    model = Drafter(job["drafter"]).eval().to(dt)
    model.embed, model.lm_head = model.embed.to(dt), model.lm_head.to(dt)
    rope_class = type(model.rotary).__name__
    scaling = model.layers[0].self_attn.scaling
    if job["rope"] == "vllm":
        rope, scaling = _vllm_rope(model.config, dt)
        _ROPE["rope"] = rope
        rope_class = type(rope).__name__
        ds.apply_rotary_pos_emb_interleave = _apply_vllm_rope
        for layer in model.layers:
            layer.self_attn.scaling = scaling
    try:
        with safe_open(job["inputs"], framework="pt") as f:
            aux, ids = f.get_tensor("aux"), f.get_tensor("input_ids")
        with torch.no_grad():
            logits = model.steps(aux.to(dt), ids, job["steps"])
    finally:
        ds.apply_rotary_pos_emb_interleave = transformers_rope
    save_file({"logits": logits.float().contiguous()}, job["out"])
    return {"name": job["name"], "scaling": scaling, "rope_class": rope_class}


def main(jobs_file):
    for job in json.load(open(jobs_file)):
        print(json.dumps(run(job)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
