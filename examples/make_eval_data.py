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
that every step of a chain is accepted part of the time, by construction.

The same on every machine: every number is a multiple of a power of two drawn from integers
(exact in bfloat16, no floating-point random generator), the drafts are computed in float64, and
a sample is drawn again (its next seed) until every draft that could hit — of the drafter and of
each drafter in ``also`` — is decided by at least ``MARGIN`` of float64 logit: the target's token
either beats every other draft token by that much or trails the best one by that much. Float32
arithmetic on any CPU or GPU (1e-6 of a logit apart) then counts the same hits; bfloat16 does not
(up to 0.6 of a logit apart on this data: a near-tie flips by CPU), which is why the examples run
with ``--dtype float32``.

    python examples/make_eval_data.py [DRAFTER_DIR [OUT_DIR]]
"""

import hashlib
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

MARGIN = 2e-3  # float64 logit: a hit or a miss is decided by at least this much
STEPS = 3  # the chain length the margin is kept for (eval's default --steps)
TRIES = 50  # draws of one sample before giving up


def _ints(g, shape, scale_log2: int):
    """Roughly normal numbers of standard deviation ~1.17 * 2**-scale_log2, each a multiple of
    2**-(5 + scale_log2): a sum of four uniform integers in [-32, 32], exact in bfloat16."""
    import torch

    s = torch.randint(-32, 33, (*shape, 4), generator=g).sum(-1)
    return s.double() / 2 ** (5 + scale_log2)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "big")


def _write_target(out, V, T, seed):
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(_seed("target", seed) % 2**63)
    head = _ints(g, (V, T), 4)  # near-orthogonal rows: the top-1 of W @ W[y] is y
    embed = _ints(g, (V, T), 6)
    tdir = os.path.join(out, "target")
    os.makedirs(tdir, exist_ok=True)
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
    return tdir, head, embed


def _margin_ok(model, aux, ids, nxt, steps: int) -> bool:
    """Every draft of ``model`` that could hit (the target's token ``nxt[t+k+1]`` in its draft
    vocabulary) is decided by at least MARGIN of float64 logit."""
    import torch

    S = aux.shape[0]
    with torch.inference_mode():
        logits = list(model.step_logits(aux, ids, steps))
    inv = model.target_to_draft
    for k, lg in enumerate(logits):
        t = torch.arange(S)
        p = t + k + 1
        inside = p < S
        want = torch.full((S,), -1, dtype=torch.long)
        want[inside] = nxt[p[inside]]
        j = torch.where(want >= 0, inv[want.clamp(min=0)], -1)
        rows = (j >= 0).nonzero().flatten()
        if not len(rows):
            continue
        lr = lg[rows]
        own = lr.gather(1, j[rows].view(-1, 1)).squeeze(1)
        others = lr.scatter(1, j[rows].view(-1, 1), float("-inf")).amax(1)
        if bool(((own - others).abs() < MARGIN).any()):
            return False
    return True


def _draw(model, rng, g, n_aux, T, V, seq, accept, chain_steps, prompt):
    """One sample: aux, the tokens, the token after the last; and (accepted, drafted) at step 0
    where the loss mask counts."""
    import torch

    aux = _ints(g, (seq, n_aux * T), 0)
    ids = [rng.randrange(V), rng.randrange(V)]
    in_mask = [0, 0]
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
            if t >= prompt and k == 0:  # column t counts where loss_mask[t] is set
                in_mask[0] += took
                in_mask[1] += 1
    input_ids = torch.tensor(ids, dtype=torch.long)
    nxt = torch.cat((input_ids[1:], torch.tensor([rng.randrange(V)])))
    return aux, input_ids, nxt, in_mask


def write_eval_example(
    drafter_dir: str,
    out: str,
    samples: int = 8,
    seq: int = 40,
    accept: float = 0.7,
    seed: int = 0,
    prompt: int = 4,
    chain_steps: int = 1,
    also=(),
) -> dict:
    """The target and ``samples`` samples for the drafter at ``drafter_dir`` (and, for the
    margins, the drafters ``also``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only wait on each other
    try:
        return _write(drafter_dir, out, samples, seq, accept, seed, prompt, chain_steps, also)
    finally:
        torch.set_num_threads(threads)


def _write(drafter_dir, out, samples, seq, accept, seed, prompt, chain_steps, also) -> dict:
    import torch

    from weightcheck.eval.forward import Eagle3Drafter
    from weightcheck.model.drafter import load_drafter

    d = load_drafter(drafter_dir)
    sym = d.normalized.symbols()
    T, V, n_aux = sym["T"], sym["V"], sym["n_aux"]
    tdir, head, embed = _write_target(out, V, T, seed)
    models = []
    for path in (drafter_dir, *also):
        m = Eagle3Drafter(load_drafter(path), dtype="float64", embed=embed)
        inv = torch.full((V,), -1, dtype=torch.long)
        targets = m.d2t_targets if m.d2t_targets is not None else torch.arange(m.Vd)
        inv[targets] = torch.arange(len(targets))
        m.target_to_draft = inv
        models.append(m)
    sf_dir = os.path.join(out, "hidden-states", "rows_0-2000")
    sp_dir = os.path.join(out, "hidden-states-speculators")
    os.makedirs(sf_dir, exist_ok=True)
    os.makedirs(sp_dir, exist_ok=True)
    in_mask = [0, 0]  # accepted, drafted: the positions the loss mask counts at step 0
    redrawn = 0
    for i in range(samples):
        for attempt in range(TRIES):
            rng = random.Random(_seed("sample", seed, i, attempt))
            g = torch.Generator().manual_seed(_seed("aux", seed, i, attempt) % 2**63)
            aux, input_ids, nxt, counted = _draw(
                models[0], rng, g, n_aux, T, V, seq, accept, chain_steps, prompt
            )
            if all(_margin_ok(m, aux, input_ids, nxt, STEPS) for m in models):
                break
            redrawn += 1
        else:
            raise RuntimeError(f"sample {i}: no draw in {TRIES} decides every draft by {MARGIN}")
        in_mask[0] += counted[0]
        in_mask[1] += counted[1]
        _save(sf_dir, sp_dir, i, aux, input_ids, nxt, head, n_aux, T, prompt)
    return {
        "target": tdir,
        "specforge": os.path.join(out, "hidden-states"),
        "speculators": sp_dir,
        "built_step0": tuple(in_mask),
        "redrawn": redrawn,
    }


def _save(sf_dir, sp_dir, i, aux, input_ids, nxt, head, n_aux, T, prompt) -> None:
    import torch
    from safetensors.torch import save_file

    seq = input_ids.shape[0]
    # the target's last hidden state at p points at the token after p
    last = (head[nxt] * 4.0).to(torch.bfloat16)
    top = torch.nn.functional.linear(last.double(), head).argmax(-1)
    assert bool((top == nxt).all())
    loss_mask = torch.ones(seq, dtype=torch.long)
    loss_mask[:prompt] = 0
    aux_bf = aux.to(torch.bfloat16)
    torch.save(
        {
            "input_ids": input_ids,
            "loss_mask": loss_mask,
            "aux_hidden_state": aux_bf.unsqueeze(0),
            "hidden_state": last.unsqueeze(0),
        },
        os.path.join(sf_dir, f"data_{i}.ckpt"),
    )
    hs = torch.cat((aux_bf.view(seq, n_aux, T), last.unsqueeze(1)), dim=1)
    save_file(
        {"token_ids": input_ids, "hidden_states": hs.contiguous()},
        os.path.join(sp_dir, f"hs_{i}.safetensors"),
    )


def main(drafter=None, out=None):
    drafter = drafter or os.path.join(HERE, "out", "kimi-k2-drafter")
    out = out or os.path.join(HERE, "out", "eval")
    for k, v in write_eval_example(drafter, out).items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
