"""The target's side of the engine proof of ``weightcheck eval`` (tests/test_eval_vllm.py).

Runs in the vLLM side venv (``bash tests/engine/setup_vllm_venv.sh``: transformers 5.19, torch
2.13 CPU), never with weightcheck's Python; nothing here imports weightcheck. The target is read
by transformers' own ``LlamaForCausalLM`` (bfloat16, as vLLM serves it). Two commands:

``train TARGET OUT --prompts JSON --tokens N --iters I [--seed S]``
    Trains a tiny EAGLE-3 drafter for TARGET (one Llama decoder layer over fc(aux hidden states),
    the target's embedding, a 128-token draft vocabulary: the most frequent outputs) on the
    target's own greedy continuations (N tokens) of the given prompts (token-id lists of one
    length), I full-batch AdamW steps, with a training-time test of 3 steps as SpecForge's
    (``OnlineEagle3Model``): step k at column t reads token t+k+1, its own step-(k-1) hidden
    state, attends to the step-0 keys of columns <= t and to its own keys of steps 1..k, rotary
    position t+k, and learns the target's top-1 after position t+k+1. Written in SpecForge's
    layout (``midlayer.*``, d2t, t2d, no embed_tokens) with the config SpecForge 0.2.0 exported
    for this target (aux ids [0, 1, 2], SGLang's: the outputs of layers 0, 1, 2). Deterministic:
    fixed seeds, one thread.

``data TARGET OUT --sequences JSON --aux-layers 1,2,3``
    Writes SpecForge 0.2.0's offline hidden-state layout (``rows_0-2000/data_<i>.ckpt``, a
    ``torch.save``d dict: ``input_ids`` [S], ``loss_mask`` [S], ``aux_hidden_state``
    [1, S, n_aux*T], ``hidden_state`` [1, S, T] after the final norm) for the given sequences:
    JSON ``[{"prompt": [...], "output": [...]}, ...]``. Each sample is prompt + output + the
    target's next greedy token (so the target's top-1 is known after every drafted position);
    ``loss_mask`` is 1 at the columns vLLM drafts from (see ``engine_columns``). The aux hidden
    states are the layers named by **vLLM's** ids (vLLM 0.32 ``models/llama.py``: id 0 is the
    embedding output, id j the residual stream entering layer j, id L the last layer's output):
    here the input of decoder layer j, captured by a forward pre-hook. Prints one JSON line: per
    sample, how many output tokens the target's top-1 (transformers, teacher-forced) reproduces.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SPECFORGE_CONFIG = os.path.join(
    os.path.dirname(HERE), "fixtures", "producers", "specforge-sglang", "config.json"
)
STEPS = 3  # the training-time test's depth (= the engines' num_speculative_tokens here)


def load_target(path: str):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    return m.eval()


def capture(model, ids, layers):
    """(aux [B, S, n*T], last [B, S, T] after the final norm, top-1 [B, S]) for token ids
    [B, S]; ``layers`` in vLLM's numbering (id j: the residual stream entering decoder layer j;
    id L: the last layer's output, entering the final norm)."""
    inner = model.model
    L = len(inner.layers)
    seen = {}
    hooks = []
    for j in layers:
        mod = inner.layers[j] if j < L else inner.norm

        def pre(_m, args, kwargs, j=j):
            seen[j] = (args[0] if args else kwargs["hidden_states"]).detach()

        hooks.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        with torch.inference_mode():
            out = inner(input_ids=ids)
            last = out.last_hidden_state
            top1 = model.lm_head(last).float().argmax(-1)
    finally:
        for h in hooks:
            h.remove()
    aux = torch.cat([seen[j] for j in layers], dim=-1)
    return aux, last, top1


def greedy(model, prompts, n: int):
    """The target's greedy continuation (``n`` tokens) of equal-length prompts [B, P]."""
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
        for i in range(n):
            nxt = out.logits[:, -1].float().argmax(-1, keepdim=True)
            ids = torch.cat((ids, nxt), dim=1)
            if i + 1 < n:
                out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return ids


def engine_columns(prompt_len: int, out_len: int) -> tuple[int, int]:
    """[first, last] column vLLM drafts from for a prompt of ``prompt_len`` tokens and
    ``out_len`` generated (greedy, ``max_tokens`` = out_len, no stop): column p holds the target's
    hidden state at position p and the token p+1. The first chain starts right after prefill
    (p = prompt_len - 1, fed the first generated token); a chain is verified after every verify
    step that leaves the request with fewer than ``out_len`` tokens, i.e. up to
    p = prompt_len + out_len - 3. (The drafter also runs in the step that finishes the request;
    vllm 0.32 v1/core/sched/scheduler.py ``update_draft_token_ids`` drops those drafts: never
    verified nor counted.)"""
    return prompt_len - 1, prompt_len + out_len - 3


# --- data ------------------------------------------------------------------------------------


def write_data(target: str, out: str, sequences, layers) -> list:
    """The samples, sequences of one length batched; returns per sample how many output tokens
    transformers' top-1 (teacher-forced) reproduces."""
    model = load_target(target)
    agree = [None] * len(sequences)
    by_len: dict = {}
    for i, s in enumerate(sequences):
        by_len.setdefault((len(s["prompt"]), len(s["output"])), []).append(i)
    d = os.path.join(out, "rows_0-2000")
    os.makedirs(d, exist_ok=True)
    for (n, m), rows in sorted(by_len.items()):
        ids = torch.tensor(
            [list(sequences[i]["prompt"]) + list(sequences[i]["output"]) for i in rows]
        )
        _, _, top1 = capture(model, ids, layers)
        same = (top1[:, n - 1 : -1] == ids[:, n:]).sum(1).tolist()
        # each sample ends with the target's next token, its top-1 after the last output token
        ids = torch.cat((ids, top1[:, -1:]), dim=1)
        aux, last, _ = capture(model, ids, layers)
        mask = torch.zeros(n + m + 1, dtype=torch.long)
        a, b = engine_columns(n, m)
        mask[a : b + 1] = 1
        for r, i in enumerate(rows):
            agree[i] = {"tokens": m, "same": same[r]}
            sample = {
                "input_ids": ids[r].clone(),
                "loss_mask": mask.clone(),
                "aux_hidden_state": aux[r : r + 1].clone(),
                "hidden_state": last[r : r + 1].clone(),
            }
            torch.save(sample, os.path.join(d, f"data_{i}.ckpt"))
    return agree


# --- the drafter -----------------------------------------------------------------------------


def _rms(x, w, eps):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return w * (x.float() * torch.rsqrt(v + eps)).to(x.dtype)


def _rope(x, pos, inv):
    f = torch.outer(pos.float(), inv)
    emb = torch.cat((f, f), dim=-1)
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * emb.cos() + rot * emb.sin()


class Drafter(torch.nn.Module):
    """A Llama EAGLE-3 drafter (SpecForge's ``LlamaForCausalLMEagle3``: one decoder layer over
    [input_layernorm(embed) ; hidden_norm(fc(aux))]), float32 for training."""

    def __init__(self, cfg, embed):
        super().__init__()
        H, T = cfg["hidden_size"], cfg.get("target_hidden_size") or cfg["hidden_size"]
        self.nh, self.nkv, self.hd = (
            cfg["num_attention_heads"],
            cfg["num_key_value_heads"],
            cfg["head_dim"],
        )
        n_aux, Vd, inter = 3, cfg["draft_vocab_size"], cfg["intermediate_size"]
        self.eps = cfg["rms_norm_eps"]
        lin = torch.nn.Linear
        self.fc = lin(n_aux * T, H, bias=False)
        self.q = lin(2 * H, self.nh * self.hd, bias=False)
        self.k = lin(2 * H, self.nkv * self.hd, bias=False)
        self.v = lin(2 * H, self.nkv * self.hd, bias=False)
        self.o = lin(self.nh * self.hd, H, bias=False)
        self.gate, self.up = lin(H, inter, bias=False), lin(H, inter, bias=False)
        self.down = lin(inter, H, bias=False)
        self.lm_head = lin(H, Vd, bias=False)
        ones = lambda: torch.nn.Parameter(torch.ones(H))  # noqa: E731
        self.in_norm, self.hidden_norm, self.post_norm, self.norm = ones(), ones(), ones(), ones()
        theta = float(cfg.get("rope_theta") or 10000.0)
        self.register_buffer(
            "inv", 1.0 / (theta ** (torch.arange(0, self.hd, 2).float() / self.hd))
        )
        self.embed = embed  # the target's, frozen

    def forward(self, aux, ids, steps: int):
        """Draft logits [steps, B, S, Vd]: step k at column t reads token t+k+1."""
        B, S, _ = aux.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        h = self.fc(aux)
        pos = torch.arange(S)
        causal = torch.full((S, S), float("-inf")).triu(1)
        keys, values, out = [], [], []
        for k in range(steps):
            tok = torch.nn.functional.pad(ids[:, k + 1 :], (0, k + 1))
            x = torch.cat(
                (
                    _rms(self.embed[tok], self.in_norm, self.eps),
                    _rms(h, self.hidden_norm, self.eps),
                ),
                -1,
            )
            q = self.q(x).view(B, S, nh, hd).transpose(1, 2)
            kk = self.k(x).view(B, S, nkv, hd).transpose(1, 2)
            vv = self.v(x).view(B, S, nkv, hd).transpose(1, 2)
            q, kk = _rope(q, pos + k, self.inv), _rope(kk, pos + k, self.inv)
            kk = kk.repeat_interleave(nh // nkv, 1)
            vv = vv.repeat_interleave(nh // nkv, 1)
            keys.append(kk)
            values.append(vv)
            sc = [q @ keys[0].transpose(-1, -2) / math.sqrt(hd) + causal]
            sc += [(q * kj).sum(-1, keepdim=True) / math.sqrt(hd) for kj in keys[1:]]
            w = torch.softmax(torch.cat(sc, -1), -1)
            a = w[..., :S] @ values[0]
            for j in range(1, len(keys)):
                a = a + w[..., S + j - 1 : S + j] * values[j]
            h = h + self.o(a.transpose(1, 2).reshape(B, S, nh * hd))
            m = _rms(h, self.post_norm, self.eps)
            h = h + self.down(torch.nn.functional.silu(self.gate(m)) * self.up(m))
            out.append(self.lm_head(_rms(h, self.norm, self.eps)))
        return torch.stack(out)


def train(target: str, out: str, prompts, tokens: int, iters: int, seed: int = 0) -> dict:
    """Train the drafter on the target's greedy continuations (``tokens`` each) of ``prompts``
    (token-id lists of one length) for ``iters`` full-batch AdamW steps, and write it; returns
    the per-step training accuracy (the last step's)."""
    from collections import Counter

    from safetensors.torch import save_file

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    with open(SPECFORGE_CONFIG) as f:
        cfg = json.load(f)
    model = load_target(target)
    V, Vd = cfg["vocab_size"], cfg["draft_vocab_size"]
    P = len(prompts[0])
    if any(len(p) != P for p in prompts):
        raise SystemExit("train: the prompts must have one length")
    ids = greedy(model, prompts, tokens)
    aux, _, ref = capture(model, ids, [1, 2, 3])  # SGLang's [0, 1, 2]: layers 0..2's outputs
    aux = aux.float()
    # the draft vocabulary: the target's most frequent greedy outputs (then the smallest ids)
    freq = Counter(ids[:, P:].reshape(-1).tolist())
    kept = [t for t, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:Vd]]
    kept = sorted(kept + [t for t in range(V) if t not in set(kept)][: Vd - len(kept)])
    t2d_idx = torch.full((V,), -1, dtype=torch.long)
    t2d_idx[torch.tensor(kept)] = torch.arange(Vd)
    d = Drafter(cfg, model.model.embed_tokens.weight.detach().float())
    opt = torch.optim.AdamW(list(d.parameters()), lr=3e-3, weight_decay=0.0)
    B, S = ids.shape
    cols = torch.arange(S)
    labels = []
    for k in range(STEPS):
        p = cols + k + 1  # step k at column t learns the target's top-1 after position t+k+1
        inside = (p < S) & (cols >= P - 1)  # from the last prompt column on, as the engine drafts
        lab = torch.full((B, S), -1, dtype=torch.long)
        lab[:, inside] = t2d_idx[ref[:, p[inside]]]
        labels.append(lab)
    accs = []
    for _ in range(iters):
        logits = d(aux, ids, STEPS)
        loss = 0.0
        accs = []
        for k, lab in enumerate(labels):
            ok = lab >= 0
            loss = loss + (0.8**k) * torch.nn.functional.cross_entropy(logits[k][ok], lab[ok])
            accs.append(round(float((logits[k].argmax(-1)[ok] == lab[ok]).float().mean()), 4))
        opt.zero_grad()
        loss.backward()
        opt.step()
    _write_drafter(d, cfg, kept, out, save_file)
    return {"train_acc": accs, "sequences": B, "tokens": tokens, "iters": iters}


def _write_drafter(d, cfg, kept, out, save_file):
    V, Vd = cfg["vocab_size"], cfg["draft_vocab_size"]
    bf = lambda t: t.detach().to(torch.bfloat16).contiguous()  # noqa: E731
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[torch.tensor(kept)] = True
    p = "midlayer."
    tensors = {
        "fc.weight": bf(d.fc.weight),
        p + "self_attn.q_proj.weight": bf(d.q.weight),
        p + "self_attn.k_proj.weight": bf(d.k.weight),
        p + "self_attn.v_proj.weight": bf(d.v.weight),
        p + "self_attn.o_proj.weight": bf(d.o.weight),
        p + "mlp.gate_proj.weight": bf(d.gate.weight),
        p + "mlp.up_proj.weight": bf(d.up.weight),
        p + "mlp.down_proj.weight": bf(d.down.weight),
        p + "input_layernorm.weight": bf(d.in_norm),
        p + "hidden_norm.weight": bf(d.hidden_norm),
        p + "post_attention_layernorm.weight": bf(d.post_norm),
        "norm.weight": bf(d.norm),
        "lm_head.weight": bf(d.lm_head.weight),
        "d2t": torch.tensor([t - i for i, t in enumerate(kept)], dtype=torch.long),
        "t2d": t2d,
    }
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    assert Vd == len(kept)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("target")
    t.add_argument("out")
    t.add_argument("--prompts", required=True, help="JSON file: token-id lists of one length")
    t.add_argument("--tokens", type=int, required=True, help="greedy tokens per prompt")
    t.add_argument("--iters", type=int, required=True)
    t.add_argument("--seed", type=int, default=0)
    dd = sub.add_parser("data")
    dd.add_argument("target")
    dd.add_argument("out")
    dd.add_argument("--sequences", required=True, help="JSON file: [{prompt, output}, ...]")
    dd.add_argument("--aux-layers", required=True, help="vLLM's ids, e.g. 1,2,3")
    a = ap.parse_args(argv)
    if a.cmd == "train":
        with open(a.prompts) as f:
            prompts = json.load(f)
        r = train(a.target, a.out, prompts, a.tokens, a.iters, seed=a.seed)
    else:
        with open(a.sequences) as f:
            seqs = json.load(f)
        layers = [int(x) for x in a.aux_layers.split(",")]
        r = {"agreement": write_data(a.target, a.out, seqs, layers)}
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
