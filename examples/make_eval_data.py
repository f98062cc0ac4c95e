"""Tiny hidden-state data and a tiny target for ``weightcheck eval`` on the bundled example drafter.

Writes, under OUT (default examples/out/eval):

- ``target/``: a tiny target "model" — config.json and model.safetensors holding only what eval
  reads of a target: ``model.embed_tokens.weight``, ``lm_head.weight``, ``model.norm.weight``
  (vocab and hidden size of the drafter's config);
- ``hidden-states/``: SpecForge 0.2.0's offline layout (``rows_0-2000/data_<i>.ckpt``, a
  ``torch.save``d dict of input_ids, loss_mask, aux_hidden_state [1, S, 3H], hidden_state [1, S, H]);
- ``hidden-states-speculators/``: the same samples in speculators 0.9.0's layout
  (``hs_<i>.safetensors``: token_ids, hidden_states [S, 4, H], the last slot before the final norm).

The token stream is the target's greedy continuation (the target's top-1 after each position is
the next token: its last hidden state is built to point at that token's lm_head row), and each
next token is the drafter's own draft with probability ``accept`` — its step-0 draft, or with
``chain_steps`` K > 1 the step-k draft of the column k places back, k drawn at random below K, so
that every step of a chain is accepted part of the time, by construction. Deterministic for a
seed.

    python examples/make_eval_data.py [DRAFTER_DIR [OUT_DIR]]
"""

import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def write_eval_example(
    drafter_dir: str,
    out: str,
    samples: int = 8,
    seq: int = 40,
    accept: float = 0.7,
    seed: int = 0,
    prompt: int = 4,
    chain_steps: int = 1,
) -> dict:
    import torch
    from safetensors.torch import save_file

    from weightcheck.eval.forward import Eagle3Drafter
    from weightcheck.model.drafter import load_drafter

    d = load_drafter(drafter_dir)
    sym = d.normalized.symbols()
    T, V, n_aux = sym["T"], sym["V"], sym["n_aux"]
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)

    # the target: a head whose rows are near-orthogonal (top-1 of W @ W[y] is y), an embedding
    tdir = os.path.join(out, "target")
    os.makedirs(tdir, exist_ok=True)
    head = torch.randn(V, T, generator=g) / T**0.5
    embed = torch.randn(V, T, generator=g) * 0.02
    save_file(
        {
            "model.embed_tokens.weight": embed.to(torch.bfloat16),
            "lm_head.weight": head.to(torch.bfloat16),
            "model.norm.weight": torch.ones(T, dtype=torch.bfloat16),
        },
        os.path.join(tdir, "model.safetensors"),
        metadata={"format": "pt"},
    )
    with open(os.path.join(tdir, "config.json"), "w") as f:
        json.dump(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": T,
                "vocab_size": V,
                "num_hidden_layers": 61,
                "rms_norm_eps": 1e-6,
                "torch_dtype": "bfloat16",
                "tie_word_embeddings": False,
            },
            f,
            indent=2,
        )
    head_bf = head.to(torch.bfloat16)
    model = Eagle3Drafter(d, embed=embed.to(torch.bfloat16))
    sf_dir = os.path.join(out, "hidden-states", "rows_0-2000")
    sp_dir = os.path.join(out, "hidden-states-speculators")
    os.makedirs(sf_dir, exist_ok=True)
    os.makedirs(sp_dir, exist_ok=True)
    accepted = drafted = 0
    in_mask = [0, 0]  # accepted, drafted: the positions the loss mask counts at step 0
    for i in range(samples):
        aux = (torch.randn(seq, n_aux * T, generator=g)).to(torch.bfloat16)
        ids = [rng.randrange(V), rng.randrange(V)]
        with torch.inference_mode():
            for t in range(seq - 2):
                x = torch.tensor(ids, dtype=torch.long)
                # the token at position t+2 is the step-k draft of column t-k: step 0 alone, or
                # (chain_steps > 1) a step drawn at random, so that every step is accepted
                k = rng.randrange(min(chain_steps, t + 1))
                draft = int(model.unroll(aux[: t - k + 1], x, k + 1)[k, t - k])
                took = rng.random() < accept
                if took:
                    ids.append(draft)
                else:
                    ids.append(rng.choice([v for v in range(V) if v != draft][:64]))
                accepted += took
                drafted += 1
                if t >= prompt and k == 0:  # column t counts where loss_mask[t] is set
                    in_mask[0] += took
                    in_mask[1] += 1
        input_ids = torch.tensor(ids, dtype=torch.long)
        # the target's last hidden state at p points at the token after p
        nxt = torch.cat((input_ids[1:], torch.tensor([rng.randrange(V)])))
        last = head[nxt] * 4.0
        assert bool(
            (
                torch.nn.functional.linear(last.to(torch.bfloat16), head_bf).float().argmax(-1)
                == nxt
            ).all()
        )
        loss_mask = torch.ones(seq, dtype=torch.long)
        loss_mask[:prompt] = 0
        torch.save(
            {
                "input_ids": input_ids,
                "loss_mask": loss_mask,
                "aux_hidden_state": aux.unsqueeze(0),
                "hidden_state": last.to(torch.bfloat16).unsqueeze(0),
            },
            os.path.join(sf_dir, f"data_{i}.ckpt"),
        )
        hs = torch.cat((aux.view(seq, n_aux, T), last.to(torch.bfloat16).unsqueeze(1)), dim=1)
        save_file(
            {"token_ids": input_ids, "hidden_states": hs.contiguous()},
            os.path.join(sp_dir, f"hs_{i}.safetensors"),
        )
    return {
        "target": tdir,
        "specforge": os.path.join(out, "hidden-states"),
        "speculators": sp_dir,
        "built_acceptance": accepted / max(1, drafted),
        "built_step0": tuple(in_mask),
    }


def main(drafter=None, out=None):
    drafter = drafter or os.path.join(HERE, "out", "kimi-k2-drafter")
    out = out or os.path.join(HERE, "out", "eval")
    for k, v in write_eval_example(drafter, out).items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
