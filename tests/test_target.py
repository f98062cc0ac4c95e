"""--target: a Kimi-K2.5-style multimodal target (text_config nested, weights under
language_model.) read from its config and the one header that holds the embedding."""

import json

import synth
from conftest import K2, K25, PRODUCERS, load_config, run_cli

from weightcheck.storage.writer import OutTensor, write_file


def kimi_k25_target(folder, hidden=128, vocab=2048, layers=61):
    folder.mkdir()
    cfg = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": {
            "model_type": "kimi_k2",
            "hidden_size": hidden,
            "vocab_size": vocab,
            "num_hidden_layers": layers,
            "torch_dtype": "bfloat16",
            "num_attention_heads": 4,
        },
        "vision_config": {"hidden_size": 64},
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    emb = OutTensor(
        "language_model.model.embed_tokens.weight",
        "BF16",
        (vocab, hidden),
        bytes(vocab * hidden * 2),
    )
    head = OutTensor(
        "language_model.lm_head.weight", "BF16", (vocab, hidden), bytes(vocab * hidden * 2)
    )
    vis = OutTensor("vision_tower.patch_embed.weight", "BF16", (64, 64), bytes(64 * 64 * 2))
    write_file(str(folder / "model-00001-of-00002.safetensors"), [emb, head], {"format": "pt"})
    write_file(str(folder / "model-00002-of-00002.safetensors"), [vis], {"format": "pt"})
    wm = {
        emb.name: "model-00001-of-00002.safetensors",
        head.name: "model-00001-of-00002.safetensors",
        vis.name: "model-00002-of-00002.safetensors",
    }
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": wm})
    )
    return folder


def test_kimi_k25_target_nested_config(tmp_path, make_drafter):
    target = kimi_k25_target(tmp_path / "k25")
    d = make_drafter("d", synth.scaled_config(load_config(K25)))
    r = run_cli("check", d, "--target", target, "--engine", "sglang", "--json")
    assert r.exit_code == 0, r
    t = r.json["target"]
    assert t["model_type"] == "kimi_k25" and t["hidden_size"] == 128 and t["vocab_size"] == 2048
    assert t["num_hidden_layers"] == 61
    assert t["embed"]["name"] == "language_model.model.embed_tokens.weight"
    assert t["lm_head"]["name"] == "language_model.lm_head.weight"
    # [2, 30, 58] for a kimi target in SGLang 0.5.23: first id != 1, so k -> output of layer k-1
    assert r.json["engine"]["aux_layers"]["captures_output_of_layers"] == [1, 29, 57]


def test_kimi_k25_target_mismatch_is_caught(tmp_path, make_drafter):
    target = kimi_k25_target(tmp_path / "k25", hidden=256, layers=40)
    d = make_drafter("d", synth.scaled_config(load_config(K25)))
    r = run_cli("check", d, "--target", target, "--json")
    assert r.exit_code == 1
    codes = {f["code"] for f in r.json["findings"]}
    assert {
        "WC501",
        "WC403",
        "WC503",
    } <= codes  # hidden 128 vs 256; ids 58 >= 40 layers; embed width


def test_a_narrower_drafter_keeps_its_own_embedding(tmp_path):
    """issue #21 item 5: a drafter narrower than its target (hidden 32 under a 64-wide target)
    with its own embed_tokens [V, 32] — the layout of a widely used public 70B drafter. Both
    engines keep a distinct drafter embedding (the served view: "not the target's: the shapes
    differ"), so it is no WC503; an embedding of the wrong vocabulary still is."""
    cfg = synth.scaled_config(
        load_config(K2),
        hidden=32,
        intermediate=64,
        heads=2,
        head_dim=32,
        vocab=512,
        draft_vocab=128,
    )
    cfg["target_hidden_size"] = 64
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1, 2]
    src = tmp_path / "narrow"
    synth.write_drafter(str(src), cfg, include_embed=True)
    for args in ([], ["--engine", "sglang"], ["--engine", "vllm"]):
        r = run_cli("check", src, "--target", PRODUCERS / "target-llama", *args, "--json")
        assert "WC503" not in {f["code"] for f in r.json["findings"]}, (args, r.json["findings"])
        for v in (r.json.get("engines") or {}).values():
            assert v["embed_tokens"] == "loaded"
    wrong = tmp_path / "wrong-vocab"
    synth.write_drafter(str(wrong), dict(cfg, vocab_size=256), include_embed=True)
    r = run_cli("check", wrong, "--target", PRODUCERS / "target-llama", "--json")
    assert "WC503" in {f["code"] for f in r.json["findings"]}
