"""Write the bundled example: the founding case of weightcheck, scaled down.

* ``kimi-k2-drafter``: AQ-MedAI's Kimi-K2 EAGLE-3 drafter (SpecForge, Llama layer);
* ``kimi-k25-drafter``: a Kimi-K2.5 drafter in the same Llama form, another draft vocabulary;
* ``kimi-k25-mla-drafter``: a Kimi-K2.5 drafter in the MLA form (``Eagle3DeepseekV2ForCausalLM``,
  TorchSpec's native export: ``midlayer.*`` names, aux ids [1, 29, 57] nested as SGLang reads them;
  docs/mla-drafters.md),
* ``kimi-k25-target``: the Kimi-K2.5 target as ``check --target`` reads it: a multimodal config
  with the text model under ``text_config`` (61 layers), and the embedding and lm_head under
  ``language_model.`` in a sharded checkpoint (the vision tower in the other shard);
* with torch installed, ``eval`` and ``eval-mla``: a tiny target and hidden states for
  ``weightcheck eval`` built for the K2 drafter and for the MLA drafter (examples/make_eval_data.py).

The Llama drafters' configs are real SpecForge configs (examples/configs/) with the sizes scaled
down: hidden 7168 -> 128, intermediate 18432 -> 320, 64 heads of 128 -> 4 heads of 32, vocab
163840 -> 2048, draft vocab 32000 -> 400. Everything else (aux layer ids [2, 30, 58], rope,
model_type, dtype spelling) is kept. The MLA drafter has the same sizes, RoPE and norm eps as the
Kimi-K2.5 Llama drafter, its MLA ranks scaled
alike (q_lora_rank 1536 -> 96, kv_lora_rank 512 -> 64, head dims 128/64/128 -> 32/16/32); the
target keeps Kimi-K2.5's 61 layers. The weights are deterministic pseudo-random bf16
(tests/synth.py, the test-data generator): every run writes the same bytes. Nothing is
downloaded.

    python examples/make_examples.py [OUT_DIR]     # default: examples/out
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # synth: the test-data generator

import synth  # noqa: E402

from weightcheck.storage.writer import OutTensor, write_file  # noqa: E402

HIDDEN, VOCAB, DRAFT_VOCAB, TARGET_LAYERS = 128, 2048, 400, 61
EVAL_SAMPLES = 24  # sequences of the K2 drafter's eval data: enough for a bootstrap interval
EVAL_SETUP = 'pip install ".[torch]" && python examples/make_examples.py'  # README.md's set-up

# The Kimi-K2.5 MLA drafter, scaled down (the tests' too: tests/synth.py KIMI_K25_MLA), with the
# fields a trainer's export writes besides
MLA_CONFIG = {
    **synth.KIMI_K25_MLA,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 131072,
}

# Kimi-K2.5's config.json: KimiK25ForConditionalGeneration, the text model nested (kimi_k2).
TARGET_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "hidden_size": HIDDEN,
        "vocab_size": VOCAB,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": 4,
        "torch_dtype": "bfloat16",
    },
    "vision_config": {"hidden_size": 64},
}


def write_target(folder: str, seed: int = 9) -> None:
    """The Kimi-K2.5-shaped target: config.json and two shards with an index; only the tensors
    a drafter check reads (embedding, lm_head) and one vision tensor stand for the rest."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TARGET_CONFIG, f, indent=2)
        f.write("\n")
    n = VOCAB * HIDDEN * 2
    emb = OutTensor("language_model.model.embed_tokens.weight", "BF16", (VOCAB, HIDDEN), b"")
    head = OutTensor("language_model.lm_head.weight", "BF16", (VOCAB, HIDDEN), b"")
    emb.data = synth.random_data("BF16", n, seed)
    head.data = synth.random_data("BF16", n, seed + 1)
    vis = OutTensor("vision_tower.patch_embed.weight", "BF16", (64, 64), b"")
    vis.data = synth.random_data("BF16", 64 * 64 * 2, seed + 2)
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    write_file(os.path.join(folder, shards[0]), [emb, head], {"format": "pt"})
    write_file(os.path.join(folder, shards[1]), [vis], {"format": "pt"})
    index = {
        "metadata": {},
        "weight_map": {emb.name: shards[0], head.name: shards[0], vis.name: shards[1]},
    }
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def main(out=None):
    out = out or os.path.join(HERE, "out")
    for name, cfg_file, seed in (
        ("kimi-k2-drafter", "specforge-kimi-k2-eagle3.json", 1),
        ("kimi-k25-drafter", "specforge-kimi-k25-eagle3.json", 2),
    ):
        with open(os.path.join(HERE, "configs", cfg_file)) as f:
            cfg = synth.scaled_config(json.load(f))
        synth.write_drafter(os.path.join(out, name), cfg, seed=seed)
        print(os.path.join(out, name))
    synth.write_drafter(os.path.join(out, "kimi-k25-mla-drafter"), MLA_CONFIG, seed=3)
    print(os.path.join(out, "kimi-k25-mla-drafter"))
    write_target(os.path.join(out, "kimi-k25-target"))
    print(os.path.join(out, "kimi-k25-target"))
    # hidden states for `weightcheck eval` (docs/eval.md): written with torch, so only when it is
    # installed (pip install ".[torch]"); every other example is header-level
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"{os.path.join(out, 'eval')}: skipped: eval's example needs torch: {EVAL_SETUP}")
        return
    sys.path.insert(0, HERE)
    from make_eval_data import write_eval_example

    # the data is drawn so that every drafter the docs evaluate on it counts the same hits on
    # any machine (make_eval_data.py): the K2 drafter, the K2.5 one and the K2 drafter
    # re-indexed to K2.5's vocabulary (docs/getting-started.md §4 writes it with convert)
    with tempfile.TemporaryDirectory() as tmp:
        reindexed = os.path.join(tmp, "k2-for-k25")
        from weightcheck import api

        api.convert(
            os.path.join(out, "kimi-k2-drafter"),
            reindexed,
            to="sglang",
            vocab_from=os.path.join(out, "kimi-k25-drafter"),
            lm_head_from=os.path.join(out, "kimi-k25-target"),
        )
        write_eval_example(
            os.path.join(out, "kimi-k2-drafter"),
            os.path.join(out, "eval"),
            samples=EVAL_SAMPLES,
            also=[os.path.join(out, "kimi-k25-drafter"), reindexed],
        )
    print(os.path.join(out, "eval"))
    # the same for the MLA drafter: its own target and data, its step-0 drafts accepted ~70%;
    # fewer samples, as a small set looks (too few sequences for an interval)
    write_eval_example(os.path.join(out, "kimi-k25-mla-drafter"), os.path.join(out, "eval-mla"))
    print(os.path.join(out, "eval-mla"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
