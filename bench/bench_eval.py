"""``weightcheck eval`` on the full-size Kimi-K2 drafter beside a plain PyTorch forward of it.

The drafter: bench/make_full_drafter.py (hidden 7168, intermediate 18432, 64 heads, draft vocab
32000, vocab 163840; with its embedding, so no target is needed: the data's next token stands for
the target's top-1). The data: one SpecForge offline sample (data_0.ckpt) of ``--positions``
positions (default 1000) of deterministic random aux hidden states. K = ``--steps`` (3).

Measured, each as a subprocess (wall time, peak RSS by /usr/bin/time): ``python -m weightcheck
eval DRAFTER --hidden-states DATA --steps K --device cpu`` and ``python bench/bench_eval.py
--plain DRAFTER DATA K``: safetensors.torch.load_file of the whole checkpoint, then the same
K-step unrolled forward written out in plain torch (no weightcheck code; ``plain_drafts``, which
bench_eval_gpu.py runs on the GPU). Printed: both and their ratio (issue #25:
ours <= 1.2x). On a contended 2-core machine a 1000-position run of either takes many minutes in
bfloat16; ``--once`` runs each once, without a warm-up.

    python bench/bench_eval.py [--positions 1000] [--steps 3] [--repeat 1 | --once]
"""

from __future__ import annotations

import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def load_plain(drafter: str, device: str = "cpu"):
    """The competitor's load: the config and every tensor (safetensors' ``load_file``)."""
    from safetensors.torch import load_file

    cfg = json.load(open(os.path.join(drafter, "config.json")))
    return cfg, load_file(os.path.join(drafter, "model.safetensors"), device=device)


def plain_drafts(cfg: dict, w: dict, aux, ids, steps: int):
    """The same K-step unrolled forward written out in plain torch (no weightcheck code), on the
    device of ``aux``: the drafts (target ids) [steps, S] of one sequence."""
    import torch
    import torch.nn.functional as F

    dev = aux.device
    p = "midlayer."
    nh, hd = cfg["num_attention_heads"], cfg["head_dim"]
    nkv, eps = cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    S = ids.shape[0]

    def rms(x, weight):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype)

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, device=dev).float() / hd))

    def rope(x, pos):
        f = torch.outer(pos.float(), inv)
        e = torch.cat((f, f), -1)
        h = x.shape[-1] // 2
        rot = torch.cat((-x[..., h:], x[..., :h]), -1)
        return x * e.cos().to(x.dtype) + rot * e.sin().to(x.dtype)

    h = F.linear(aux, w["fc.weight"])
    pos = torch.arange(S, device=dev)
    mask = torch.full((S, S), float("-inf"), device=dev).triu(1).to(h.dtype)
    ks, vs, out_ids = [], [], []
    for k in range(steps):
        x_ids = torch.cat((ids[k + 1 :], ids.new_zeros(k + 1)))
        emb = F.embedding(x_ids, w["embed_tokens.weight"])
        x = torch.cat(
            (rms(emb, w[p + "input_layernorm.weight"]), rms(h, w[p + "hidden_norm.weight"])), -1
        )
        q = F.linear(x, w[p + "self_attn.q_proj.weight"]).view(S, nh, hd).transpose(0, 1)
        kk = F.linear(x, w[p + "self_attn.k_proj.weight"]).view(S, nkv, hd).transpose(0, 1)
        vv = F.linear(x, w[p + "self_attn.v_proj.weight"]).view(S, nkv, hd).transpose(0, 1)
        q, kk = rope(q, pos + k), rope(kk, pos + k)
        if nh != nkv:
            kk, vv = kk.repeat_interleave(nh // nkv, 0), vv.repeat_interleave(nh // nkv, 0)
        ks.append(kk)
        vs.append(vv)
        a = torch.matmul(q, ks[0].transpose(1, 2)) / math.sqrt(hd) + mask
        extra = [((q * ks[i]).sum(-1) / math.sqrt(hd))[..., None] for i in range(1, len(ks))]
        a = torch.softmax(torch.cat([a, *extra], -1), -1, dtype=torch.float32).to(h.dtype)
        o = torch.matmul(a[..., :S], vs[0])
        for i in range(1, len(ks)):
            o = o + a[..., S + i - 1][..., None] * vs[i]
        h = h + F.linear(o.transpose(0, 1).reshape(S, nh * hd), w[p + "self_attn.o_proj.weight"])
        m = rms(h, w[p + "post_attention_layernorm.weight"])
        h = h + F.linear(
            F.silu(F.linear(m, w[p + "mlp.gate_proj.weight"]))
            * F.linear(m, w[p + "mlp.up_proj.weight"]),
            w[p + "mlp.down_proj.weight"],
        )
        d = F.linear(rms(h, w["norm.weight"]), w["lm_head.weight"]).argmax(-1)
        out_ids.append(d + w["d2t"][d])
    return torch.stack(out_ids)


def data_files(data: str) -> list[str]:
    return sorted(
        os.path.join(r, n) for r, _, ns in os.walk(data) for n in ns if n.endswith(".ckpt")
    )


def plain(drafter: str, data: str, steps: int) -> None:
    """The competitor as a process: load everything, run the unrolled forward on the first
    sample, print the drafts' checksum."""
    import torch

    torch.set_grad_enabled(False)
    cfg, w = load_plain(drafter)
    obj = torch.load(data_files(data)[0], weights_only=True)
    drafts = plain_drafts(cfg, w, obj["aux_hidden_state"][0], obj["input_ids"], steps)
    print(json.dumps({"drafts_sum": int(drafts.sum())}))


def make_data(out: str, drafter: str, positions: int) -> str:
    import torch

    cfg = json.load(open(os.path.join(drafter, "config.json")))
    path = os.path.join(out, "rows_0-2000", "data_0.ckpt")
    if os.path.exists(path):
        return out
    os.makedirs(os.path.dirname(path), exist_ok=True)
    g = torch.Generator().manual_seed(0)
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    torch.save(
        {
            "input_ids": torch.randint(V, (positions,), generator=g),
            "loss_mask": torch.ones(positions, dtype=torch.long),
            "aux_hidden_state": torch.randn(1, positions, 3 * H, generator=g).to(torch.bfloat16),
            "hidden_state": torch.randn(1, positions, H, generator=g).to(torch.bfloat16),
        },
        path + ".tmp",
    )
    os.replace(path + ".tmp", path)
    return out


def main() -> None:
    import _measure
    import click
    import make_full_drafter

    @click.command(context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--positions", default=1000, show_default=True)
    @click.option("--steps", default=3, show_default=True)
    @click.option("--repeat", default=1, show_default=True)
    @click.option("--once", is_flag=True, help="One run of each, no warm-up.")
    def bench(positions, steps, repeat, once):
        drafter = make_full_drafter.make(config="k2", embed=True)
        data = make_data(os.path.join(_measure.OUT, f"eval-data-{positions}"), drafter, positions)
        _measure.compile_tree()
        ours_cmd = [
            sys.executable,
            "-m",
            "weightcheck",
            "eval",
            drafter,
            "--hidden-states",
            data,
            "--steps",
            str(steps),
            "--device",
            "cpu",
            "--json",
        ]
        plain_cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--plain",
            drafter,
            data,
            str(steps),
        ]
        if once:  # one run each, no warm-up (a full-size run takes minutes on 2 cores)
            ours, base = (_measure.run(c) for c in (ours_cmd, plain_cmd))
            for r in (ours, base):
                if r["rc"]:
                    sys.exit(r["stderr"].decode(errors="replace")[-2000:])
                r["median"] = r["wall"]
            same = json.loads(base["stdout"])["drafts_sum"]
            print(f"plain forward's drafts checksum: {same}")
        else:
            ours = _measure.repeat(ours_cmd, repeat)
            base = _measure.repeat(plain_cmd, repeat)
        print(f"full-size K2 drafter, {positions} positions, K={steps}, {_measure.RSS_METHOD}")
        print(f"weightcheck eval: {ours['median']:.1f} s, peak {_measure.mb(ours['rss'])}")
        print(f"plain PyTorch:    {base['median']:.1f} s, peak {_measure.mb(base['rss'])}")
        print(
            f"ratio: time {ours['median'] / base['median']:.2f}x, "
            f"memory {ours['rss'] / base['rss']:.2f}x (issue #25 asks <= 1.2x)"
        )

    bench()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--plain":
        plain(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
