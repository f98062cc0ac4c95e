"""Drafters whose acceptance in a real engine is known in advance, written with weightcheck's own
writer (weightcheck.synth + weightcheck.storage.writer) in SpecForge layout.

The tiny random target (tests/fixtures/producers/target-llama) emits, for a suitable prompt, one
token ``T`` over and over. A drafter that always proposes ``T`` is then accepted 100% under greedy
verification; one that always proposes a token the target never emits is accepted 0%.

How the proposal is pinned, whatever the hidden states are:

* every weight is synth's deterministic pseudo-random value (so the whole drafter really runs:
  fc, the decoder layer, the norms), **except** ``lm_head.weight``, which is all zeros. The draft
  logits are then exactly 0 for every draft id, whatever the hidden state.
* vLLM scatters the draft logits into the target vocab at ``arange(Vd) + d2t`` (the rest -inf)
  and takes ``argmax`` (vllm 0.32 model_executor/models/llama_eagle3.py ``compute_logits``;
  v1/spec_decode/llm_base_proposer.py ``_greedy_sample``). With all-equal logits ``argmax``
  returns the first maximum, i.e. the **smallest** target id in the map. SGLang gathers
  ``hot_token_id[argmax(draft logits)]``, i.e. draft id 0's target, which is the same id here.
* so ``d2t`` is built with draft id 0 -> ``T`` and every other draft id -> a distinct id above
  ``T`` (sorted, as SpecForge writes them): the proposal is ``T`` in both readings.

If a converted copy lost or scrambled ``d2t`` (vLLM zero-fills a missing one: identity map -> token
0), lost ``lm_head`` (vLLM keeps ``torch.empty`` storage) or was refused by the loader, the engine
either fails or the acceptance changes: that is what the engine test measures.
"""

from __future__ import annotations

import copy
import json
import os
import random
import struct

import synth

from weightcheck.storage.writer import write_file

HERE = os.path.dirname(os.path.abspath(__file__))
PRODUCERS = os.path.join(os.path.dirname(HERE), "fixtures", "producers")
# a config written by SpecForge 0.2.0 itself (`specforge export --to sglang`) for target-llama
SPECFORGE_CONFIG = os.path.join(PRODUCERS, "specforge-sglang", "config.json")


def constant_vocab_map(
    vocab: int, draft_vocab: int, first: int, seed: int = 0
) -> tuple[bytes, bytes]:
    """(d2t I64 bytes, t2d BOOL bytes): draft id 0 -> ``first``, ids 1.. -> distinct ids > first."""
    if first + draft_vocab > vocab:
        raise ValueError(f"token {first}: needs {draft_vocab - 1} ids above it, vocab is {vocab}")
    rng = random.Random(seed)
    ids = [first] + sorted(rng.sample(range(first + 1, vocab), draft_vocab - 1))
    d2t = struct.pack(f"<{draft_vocab}q", *[t - i for i, t in enumerate(ids)])
    t2d = bytearray(vocab)
    for t in ids:
        t2d[t] = 1
    return d2t, bytes(t2d)


def drafter_config(draft_vocab: int | None = None) -> dict:
    with open(SPECFORGE_CONFIG) as f:
        cfg = json.load(f)
    cfg = copy.deepcopy(cfg)
    if draft_vocab is not None:
        cfg["draft_vocab_size"] = draft_vocab
    return cfg


def write_constant_drafter(out_dir: str, token: int, seed: int = 0) -> dict:
    """A SpecForge-layout drafter (``midlayer.*``, d2t, t2d, no embed_tokens) that proposes ``token``
    at every step. Returns a small description (for the report)."""
    cfg = drafter_config()
    V, Vd = cfg["vocab_size"], cfg["draft_vocab_size"]
    if token + Vd > V:  # keep "draft id 0 is the smallest target id" possible
        Vd = V - token
        cfg["draft_vocab_size"] = Vd
    if Vd < 2 or Vd >= V:
        raise ValueError(f"cannot build a drafter for token {token} (vocab {V})")
    tensors = synth.drafter_tensors(cfg, "specforge", seed)
    d2t, t2d = constant_vocab_map(V, Vd, token, seed)
    for t in tensors:
        if t.name == "lm_head.weight":
            t.data = bytes(t.nbytes)  # all zeros: every draft logit is exactly 0
        elif t.name == "d2t":
            t.data = d2t
        elif t.name == "t2d":
            t.data = t2d
    names = [t.name for t in tensors]
    assert (
        "lm_head.weight" in names
        and "d2t" in names
        and any(n.startswith("midlayer.") for n in names)
    )
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_file(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    return {"dir": out_dir, "token": token, "draft_vocab_size": Vd, "tensors": names}


def _target_tensor_bytes(target_dir: str, name: str) -> tuple[bytes, tuple, str]:
    """One tensor of the (single-file) target checkpoint: its bytes, shape and dtype."""
    from weightcheck.storage.header import read_local_header

    path = os.path.join(target_dir, "model.safetensors")
    h = read_local_header(path)
    e = h.tensors[name]
    with open(path, "rb") as f:
        f.seek(h.data_start + e.begin)
        return f.read(e.end - e.begin), tuple(e.shape), e.dtype


def write_lens_drafter(out_dir: str, target_dir: str, tokens, slot: int = 2, seed: int = 0) -> dict:
    """A SpecForge-layout drafter whose proposal depends on *which target layer* it is fed.

    ``fc`` copies aux hidden state number ``slot`` (0-based, in the order of the config's aux ids)
    unchanged; ``o_proj`` and ``down_proj`` are zero, so the decoder layer adds nothing and the
    drafter's output is that hidden state; ``norm.weight`` is the target's final norm and
    ``lm_head`` the target's lm_head rows at the d2t ids. The proposal is the target's own
    "logit lens" on the captured layer: right as often as that layer already predicts the target's
    next token, and different for different captured layers. Two copies that make vLLM capture
    the same target layers must therefore get the same acceptance counts, and copies that capture
    different layers (almost surely) do not.

    ``tokens``: target ids the draft vocab must contain (the target's greedy outputs); the rest of
    the draft vocab is filled with other ids.
    """
    cfg = drafter_config()
    V, Vd = cfg["vocab_size"], cfg["draft_vocab_size"]
    H = cfg["hidden_size"]
    ids = sorted(set(int(t) for t in tokens))
    if len(ids) > Vd:
        raise ValueError(f"{len(ids)} tokens do not fit a draft vocab of {Vd}")
    rng = random.Random(seed)
    ids = sorted(ids + rng.sample(sorted(set(range(V)) - set(ids)), Vd - len(ids)))
    d2t = struct.pack(f"<{Vd}q", *[t - i for i, t in enumerate(ids)])
    t2d = bytearray(V)
    for t in ids:
        t2d[t] = 1
    head, head_shape, head_dtype = _target_tensor_bytes(target_dir, "lm_head.weight")
    norm, _, norm_dtype = _target_tensor_bytes(target_dir, "model.norm.weight")
    assert head_dtype == norm_dtype == "BF16" and head_shape == (V, H), (head_shape, head_dtype)
    row = 2 * H
    one, zero = struct.pack("<H", 0x3F80), b"\0\0"  # bf16 1.0 and 0.0
    n_aux = 3
    fc = bytearray()
    for r in range(H):  # fc.weight [H, n_aux*H]: row r picks column slot*H + r
        fc += b"".join(one if c == slot * H + r else zero for c in range(n_aux * H))
    tensors = synth.drafter_tensors(cfg, "specforge", seed)
    for t in tensors:
        if t.name == "fc.weight":
            assert t.shape == (H, n_aux * H), t.shape
            t.data = bytes(fc)
        elif t.name in ("midlayer.self_attn.o_proj.weight", "midlayer.mlp.down_proj.weight"):
            t.data = bytes(t.nbytes)
        elif t.name == "norm.weight":
            t.data = norm
        elif t.name == "lm_head.weight":
            t.data = b"".join(head[i * row : (i + 1) * row] for i in ids)
        elif t.name == "d2t":
            t.data = d2t
        elif t.name == "t2d":
            t.data = bytes(t2d)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_file(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    return {"dir": out_dir, "slot": slot, "draft_vocab_size": Vd, "ids": ids}
