"""compare: the founding case, dialects, incompatibilities, strictness and --values."""

import json

import pytest
import synth
from conftest import K2, K25, load_config, run_cli


def scaled(name, **kw):
    return synth.scaled_config(load_config(name), **kw)


def test_founding_case_compatible_with_config_differences(make_drafter):
    a = make_drafter("k2", scaled(K2), seed=1)
    b = make_drafter("k25", scaled(K25), seed=2)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["verdict"] == "compatible"
    diffs = {d["field"]: d for d in j["config_differences"]}
    assert diffs["model_type"]["a"] == "kimi_k2" and diffs["model_type"]["b"] == "llama"
    assert diffs["model_type"]["category"] == "informational"
    assert diffs["dtype_key"]["a"] == "torch_dtype" and diffs["dtype_key"]["b"] == "dtype"
    assert diffs["transformers_version"]["category"] == "informational"
    assert not j["only_in_a"] and not j["only_in_b"] and not j["shape_mismatches"]
    # both local: bytes were compared, and the seeds differ
    assert j["bytes"]["different"] == 15 and j["bytes"]["not_compared"] == 0


def test_same_weights_in_two_dialects_are_identical(make_drafter, tiny_cfg):
    a = make_drafter("sf", tiny_cfg, dialect="specforge", seed=3)
    b = make_drafter("spec", tiny_cfg, dialect="speculators", seed=3)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["verdict"] == "identical"
    assert j["a"]["dialect"] == "specforge" and j["b"]["dialect"] == "speculators"
    names = {t["canonical"]: (t["name_a"], t["name_b"]) for t in j["tensors"]}
    assert names["midlayer.self_attn.q_proj.weight"] == (
        "midlayer.self_attn.q_proj.weight",
        "layers.0.self_attn.q_proj.weight",
    )


def test_training_prefix_compares_with_export(make_drafter, tiny_cfg, tmp_path):
    from safetensors import safe_open  # noqa: F401  (the library reads what we wrote)

    from weightcheck.storage.writer import OutTensor, write_file

    a = make_drafter("export", tiny_cfg, seed=4)
    tensors = synth.drafter_tensors(tiny_cfg, seed=4)
    b = tmp_path / "train"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(tiny_cfg))
    write_file(
        str(b / "model.safetensors"),
        [OutTensor("draft_model." + t.name, t.dtype, t.shape, t.data) for t in tensors],
    )
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 0, r
    assert r.json["verdict"] == "identical"


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(hidden=96), "config hidden_size"),
        (dict(draft_vocab=300), "config draft_vocab_size"),
    ],
)
def test_incompatible_configs_name_each_reason(make_drafter, change, reason):
    a = make_drafter("a", scaled(K2), seed=1)
    b = make_drafter("b", scaled(K2, **change), seed=1)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 1, r
    j = r.json
    assert j["verdict"] == "incompatible"
    assert any(x.startswith(reason) for x in j["reasons"]), j["reasons"]
    assert j["shape_mismatches"], "the changed size must show in tensor shapes too"


def test_different_draft_vocab_lists_head_and_d2t(make_drafter):
    a = make_drafter("a", scaled(K2), seed=1)
    b = make_drafter("b", scaled(K2, draft_vocab=300), seed=1)
    j = run_cli("compare", a, b, "--json").json
    mism = {m["canonical"]: (m["a"], m["b"]) for m in j["shape_mismatches"]}
    assert mism["lm_head.weight"] == ([400, 128], [300, 128])
    assert mism["d2t"] == ([400], [300])


def test_a_map_that_cannot_be_read_is_said_not_compared(make_drafter, tmp_path):
    """B's d2t holds target ids where the engines read offsets (a new user's map): its draft
    vocabulary cannot be read, and compare says so in a note (it said nothing, the verdict
    COMPATIBLE and no vocab line), naming why and the check that says more."""
    from helpers.builders import edit, i64_bytes, i64_values

    a = make_drafter("a", scaled(K2), seed=1)

    def ids(m):
        v = i64_values(m["d2t"].data)
        m["d2t"].data = i64_bytes([i + off for i, off in enumerate(v)])

    b = edit(a, tmp_path / "b", tensors=ids)
    j = run_cli("compare", a, b, "--json").json
    assert j["vocab"] is None
    (note,) = [n for n in j["notes"] if n.startswith("draft vocabularies not compared")]
    assert "B's d2t holds target ids, not offsets" in note and "weightcheck check B" in note
    text = run_cli("compare", a, b).stdout
    assert "draft vocabularies not compared" in " ".join(text.split())


def test_missing_lm_head_is_incompatible(make_drafter, tiny_cfg):
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", tiny_cfg, seed=1, skip=("lm_head.weight",))
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 1
    j = r.json
    assert j["verdict"] == "incompatible"
    assert "lm_head.weight missing in B (its config requires it)" in j["reasons"]
    assert [t["canonical"] for t in j["only_in_a"]] == ["lm_head.weight"]


def test_optional_tensor_only_fails_strict(make_drafter, tiny_cfg):
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", tiny_cfg, seed=1, include_embed=True)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 0 and r.json["verdict"] == "compatible"
    assert [t["canonical"] for t in r.json["only_in_b"]] == ["embed_tokens.weight"]
    r = run_cli("compare", a, b, "--json", "--strict")
    assert r.exit_code == 1
    assert any("embed_tokens.weight" in s for s in r.json["strict_failures"])


def test_serving_difference_fails_only_strict(make_drafter, tiny_cfg):
    cfg2 = json.loads(json.dumps(tiny_cfg))
    cfg2["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [3, 31, 59]
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", cfg2, seed=1)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 0 and r.json["verdict"] == "identical"
    d = {x["field"]: x for x in r.json["config_differences"]}
    assert d["aux_layer_ids"]["category"] == "serving"
    assert run_cli("compare", a, b, "--strict").exit_code == 1


def test_kimi_ids_one_apart_capture_the_same_layers(make_drafter, tiny_cfg):
    """For a DeepSeek/Kimi target SGLang (>= 0.5.13) adds 1 only when the first id is 1: [2, 30, 58]
    and [1, 29, 57] both capture the outputs of layers 1, 29, 57 — no difference, even --strict."""
    assert tiny_cfg["model_type"] == "kimi_k2"
    cfg2 = json.loads(json.dumps(tiny_cfg))
    cfg2["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 29, 57]
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", cfg2, seed=1)
    r = run_cli("compare", a, b, "--strict", "--json")
    assert r.exit_code == 0, r.json["strict_failures"]
    d = {x["field"]: x for x in r.json["config_differences"]}
    assert "[1, 29, 57]" in d["aux_layer_ids"]["note"]


def test_dtype_difference_fails_only_strict(make_drafter, tiny_cfg):
    cfg2 = dict(tiny_cfg, torch_dtype="float16")
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", cfg2, seed=1)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 0 and r.json["verdict"] == "compatible", r
    assert {m["canonical"] for m in r.json["dtype_mismatches"]} >= {"fc.weight", "norm.weight"}
    assert run_cli("compare", a, b, "--strict", "--json").exit_code == 1


def test_values_streams_and_measures(make_drafter, tiny_cfg, monkeypatch):
    pytest.importorskip("torch")
    from weightcheck.commands import compare as compare_mod

    monkeypatch.setattr(compare_mod, "VALUES_CHUNK_ELEMS", 1000)  # force many chunks
    a = make_drafter("a", tiny_cfg, seed=1)
    same = make_drafter("same", tiny_cfg, seed=1)
    other = make_drafter("other", tiny_cfg, seed=2)
    j = run_cli("compare", a, same, "--values", "--json").json
    v = j["values"]["fc.weight"]
    assert v["bytes_equal"] is True and v["max_abs_diff"] == 0.0 and v["rel_l2"] == 0.0
    assert v["cosine"] == pytest.approx(1.0)
    j = run_cli("compare", a, other, "--values", "--json").json
    v = j["values"]["fc.weight"]
    assert v["bytes_equal"] is False and v["max_abs_diff"] > 0.1
    assert abs(v["cosine"]) < 0.2  # independent random weights
    assert j["values"]["midlayer.input_layernorm.weight"]["cosine"] > 0.99  # norms near 1


def test_values_against_torch_reference_across_dtypes(make_drafter, tiny_cfg):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    a = make_drafter("a", tiny_cfg, seed=5)
    b = make_drafter("b", dict(tiny_cfg, torch_dtype="float32"), seed=6)
    j = run_cli("compare", a, b, "--values", "--json").json
    ta = load_file(str(a / "model.safetensors"))["fc.weight"].float()
    tb = load_file(str(b / "model.safetensors"))["fc.weight"].float()
    v = j["values"]["fc.weight"]
    assert v["max_abs_diff"] == pytest.approx(float((ta - tb).abs().max()), rel=1e-6)
    assert v["rel_l2"] == pytest.approx(float((ta - tb).norm() / ta.norm()), rel=1e-5)
    assert v["cosine"] == pytest.approx(
        float(torch.nn.functional.cosine_similarity(ta.flatten(), tb.flatten(), dim=0)), abs=1e-5
    )


def test_markdown_and_table_render(make_drafter, tiny_cfg):
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", tiny_cfg, seed=1, skip=("lm_head.weight",))
    md = run_cli("compare", a, b, "--format", "markdown").stdout
    assert "**verdict: INCOMPATIBLE**" in md and "| lm_head.weight" in md
    txt = run_cli("compare", a, b).stdout
    assert "verdict: INCOMPATIBLE" in txt and "1 tensor(s) on one side only (table below)" in txt
    assert txt.count("lm_head.weight") == 1  # said once: in the table, not again as a reason


def test_target_passed_as_drafter_is_incompatible(make_drafter, tiny_cfg, tmp_path):
    from weightcheck.storage.writer import OutTensor, write_file

    t = tmp_path / "target"
    t.mkdir()
    (t / "config.json").write_text(
        json.dumps(
            {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": 4}
        )
    )
    tensors = [
        OutTensor(
            f"model.layers.{i}.self_attn.q_proj.weight", "BF16", (128, 128), bytes(128 * 128 * 2)
        )
        for i in range(4)
    ]
    write_file(str(t / "model.safetensors"), tensors)
    r = run_cli("compare", make_drafter("a", tiny_cfg), t, "--json")
    assert r.exit_code == 1
    assert any("B is a target model, not an EAGLE-3 drafter" in x for x in r.json["reasons"])
