"""Drafters whose acceptance in a real engine is known in advance, written with weightcheck's own
writer (weightcheck.synth + weightcheck.safetensors_writer) in SpecForge layout.

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

from weightcheck import synth
from weightcheck.safetensors_writer import write_file

HERE = os.path.dirname(os.path.abspath(__file__))
PRODUCERS = os.path.join(os.path.dirname(HERE), "fixtures", "producers")
# a config written by SpecForge 0.2.0 itself (`specforge export --to sglang`) for target-llama
SPECFORGE_CONFIG = os.path.join(PRODUCERS, "specforge-sglang", "config.json")


def constant_vocab_map(vocab: int, draft_vocab: int, first: int, seed: int = 0) -> tuple[bytes, bytes]:
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
    assert "lm_head.weight" in names and "d2t" in names and any(n.startswith("midlayer.") for n in names)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_file(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    return {"dir": out_dir, "token": token, "draft_vocab_size": Vd, "tensors": names}
