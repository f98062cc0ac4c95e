"""MLA drafters (Eagle3DeepseekV2ForCausalLM, the Kimi-K2.5 MLA form) end to end: both engines'
loaders replayed (mappings/engines/sglang_mla.toml, vllm_mla.toml), the MLA geometry rules, and
convert between the layouts the engines read.

Every expectation is what the engine source does (docs/mla-drafters.md §2, with file and lines),
not what the replay happens to print: SGLang caches q_a_proj / kv_a_proj_with_mqa and concatenates
them only when both arrived (kimi_k25_eagle3.py:467-492), warns and skips an unknown name, needs
exactly one layer and a q_lora_rank; vLLM loads each half into fused_qkv_a_proj by shard, raises on
an unknown name, ignores a `.bias` under an existing module, builds num_hidden_layers layers.
"""

from __future__ import annotations

import pathlib

import pytest
from conftest import run_cli
from helpers.builders import by_code, check, edit, mla_drafter, read_config, said, tensor_map
from helpers.convert import (
    aux_ids,
    compare,
    convert,
    refused,
    tensor_bytes,
    write_target,
)

from weightcheck.storage.writer import OutTensor

A = "midlayer.self_attn."
QA, KVA, KVB = A + "q_a_proj.weight", A + "kv_a_proj_with_mqa.weight", A + "kv_b_proj.weight"
SG_FUSED = "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
VL_FUSED = "model.layers.0.self_attn.fused_qkv_a_proj.weight"


def engine(src, name, *args) -> tuple[int, dict]:
    return check(src, "--engine", name, *args)


def fates(rep) -> dict:
    return {t["name"]: t["fate"] for t in rep["engine"]["tensors"]}


def states(rep) -> dict:
    return {p["param"]: p["state"] for p in rep["engine"]["parameters"]}


def why(rep, name) -> str:
    return next(t["why"] for t in rep["engine"]["tensors"] if t["name"] == name)


@pytest.fixture
def mla(tmp_path) -> pathlib.Path:
    return mla_drafter(tmp_path / "mla")


@pytest.fixture
def kimi_target(tmp_path) -> pathlib.Path:
    """A Kimi-K2-like target (DeepSeek-V3 layout, 61 layers) with the drafter's hidden size."""
    return write_target(
        tmp_path / "target", "kimi_k2", 61, hidden=128, architecture="DeepseekV3ForCausalLM"
    )


# --- the replay: a clean drafter ------------------------------------------------------------------
@pytest.mark.parametrize("eng", ["sglang", "vllm"])
def test_clean_mla_drafter_loads_every_parameter(mla, eng):
    code, rep = engine(mla, eng)
    assert code == 0, rep["findings"]
    v = rep["engine"]
    assert v["loader"] == f"mappings/engines/{eng}_mla.toml"
    assert v["starts"] and v["architecture"] == "Eagle3DeepseekV2ForCausalLM"
    assert set(fates(rep).values()) <= {"loaded", "special", "skipped"}
    assert [p for p, s in states(rep).items() if s == "random"] == []
    fused = SG_FUSED if eng == "sglang" else VL_FUSED
    assert states(rep)[f"{fused}[0]"] == states(rep)[f"{fused}[1]"] == "loaded"
    assert not by_code(rep, "WC700")  # retired: MLA loaders are replayed


def test_layers0_spelling_loads_in_both(tmp_path, mla):
    """ModelOpt / TorchSpec --vllm write layers.0.*: SGLang's anchored ^layers.0. -> midlayer.,
    vLLM's midlayer. -> layers.0. — both read both spellings (docs/mla-drafters.md §7.1)."""
    src = edit(mla, tmp_path / "l0", rename=renamed_prefix("midlayer.", "layers.0."))
    for eng in ("sglang", "vllm"):
        code, rep = engine(src, eng)
        assert code == 0 and rep["engine"]["starts"], (eng, rep["findings"])
        assert "random" not in states(rep).values()


def renamed_prefix(old: str, new: str) -> dict:
    names = [n for n in MLA_NAMES if n.startswith(old)]
    return {n: new + n[len(old) :] for n in names}


MLA_NAMES = [
    "midlayer." + x
    for x in (
        "self_attn.q_a_proj.weight",
        "self_attn.q_a_layernorm.weight",
        "self_attn.q_b_proj.weight",
        "self_attn.kv_a_proj_with_mqa.weight",
        "self_attn.kv_a_layernorm.weight",
        "self_attn.kv_b_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
        "input_layernorm.weight",
        "hidden_norm.weight",
        "post_attention_layernorm.weight",
    )
]


# --- the replay: what each engine does differently ----------------------------------------------
def test_lone_q_a_proj(tmp_path, mla):
    """kv_a_proj_with_mqa missing: SGLang holds q_a_proj for a partner that never comes and drops
    it without a word (both halves of the fused weight stay at init); vLLM loads q_a_proj into
    shard 0 and leaves shard 1 at init."""
    src = edit(mla, tmp_path / "x", drop=[KVA])
    _, sg = engine(src, "sglang")
    assert fates(sg)[QA] == "dropped" and "never comes" in why(sg, QA)
    assert states(sg)[f"{SG_FUSED}[0]"] == states(sg)[f"{SG_FUSED}[1]"] == "random"
    assert any(f["subject"] == QA for f in by_code(sg, "WC702"))
    _, vl = engine(src, "vllm")
    assert fates(vl)[QA] == "loaded"
    assert states(vl)[f"{VL_FUSED}[0]"] == "loaded" and states(vl)[f"{VL_FUSED}[1]"] == "random"


def test_q_a_given_twice_the_cache_keeps_the_later(tmp_path, mla):
    """midlayer.* and layers.0.* spellings of q_a_proj before its partner: SGLang's cache keeps the
    later one; the earlier is dropped."""
    src = edit(mla, tmp_path / "x", drop=[QA, KVA])
    t = tensor_map(mla)
    first = t[QA]
    second = OutTensor("layers.0.self_attn.q_a_proj.weight", first.dtype, first.shape, first.data)
    src = edit(src, tmp_path / "y", add=[first, second, t[KVA]])
    _, sg = engine(src, "sglang")
    assert fates(sg)[QA] == "dropped" and "replaced in the loader's cache" in why(sg, QA)
    assert fates(sg)["layers.0.self_attn.q_a_proj.weight"] == "loaded"
    assert fates(sg)[KVA] == "loaded"


def test_model_prefix_warned_by_sglang_rejected_by_vllm(tmp_path, mla):
    src = edit(mla, tmp_path / "x", rename={n: "model." + n for n in MLA_NAMES})
    _, sg = engine(src, "sglang")
    # q_a / kv_a still pair up in the cache, into a fused name that is no parameter: silent
    halves = {"model." + QA, "model." + KVA}
    assert {fates(sg)["model." + n] for n in MLA_NAMES if "model." + n not in halves} == {"warned"}
    assert {fates(sg)[n] for n in halves} == {"dropped"}
    assert "which is no parameter" in why(sg, "model." + QA)
    _, vl = engine(src, "vllm")
    assert {fates(vl)["model." + n] for n in MLA_NAMES} == {"error"}
    assert not vl["engine"]["starts"]


def test_fc_bias_without_bias_flag(tmp_path, mla):
    """SGLang builds fc.bias only with `bias` (warned and skipped otherwise); vLLM's fc never has a
    bias and ignores the name silently (the `.bias` suffix under an existing module)."""
    w = tensor_map(mla)["norm.weight"]
    bias = OutTensor("fc.bias", w.dtype, w.shape, w.data)
    src = edit(mla, tmp_path / "x", add=[bias])
    _, sg = engine(src, "sglang")
    assert fates(sg)["fc.bias"] == "warned"
    _, vl = engine(src, "vllm")
    assert fates(vl)["fc.bias"] == "dropped"
    with_flag = edit(src, tmp_path / "y", cfg=lambda c: c.update(bias=True))
    _, sg = engine(with_flag, "sglang")
    assert fates(sg)["fc.bias"] == "loaded"


def test_draft_vocab_size_absent(tmp_path, mla):
    """ModelOpt's Kimi template writes no draft_vocab_size, beside a pruned [Vd, H] head: both
    engines size the head to vocab_size (SGLang: getattr None, absent == null, and the target's
    head and embedding are bound later; vLLM: None -> vocab_size) and the weight loader's shape
    assertion stops the load on the checkpoint's head (sglang 0.5.23
    layers/vocab_parallel_embedding.py:414; docs/mla-drafters.md §7.3)."""
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.pop("draft_vocab_size"))
    for eng in ("sglang", "vllm"):
        _, rep = engine(src, eng)
        assert fates(rep)["lm_head.weight"] == "error" and not rep["engine"]["starts"], eng
        assert rep["engine"]["fails"]["subject"] == "lm_head.weight"
    no_head = edit(src, tmp_path / "y", drop=["lm_head.weight", "d2t", "t2d"])
    _, sg = engine(no_head, "sglang")  # without a head of its own SGLang takes the target's
    assert states(sg)["lm_head.weight"] == "from_target" and sg["engine"]["starts"]


def test_q_lora_rank_null(tmp_path):
    """An explicit q_lora_rank null (one q_proj): SGLang fails at build; vLLM builds q_proj but its
    mapper renames kv_a_proj_with_mqa to fused_qkv_a_proj, which does not exist: the load stops."""
    src = mla_drafter(tmp_path / "x", q_lora_rank=None)
    assert A + "q_proj.weight" in tensor_bytes(src) and QA not in tensor_bytes(src)
    _, sg = engine(src, "sglang")
    assert (
        sg["engine"]["fails"]["stage"] == "build" and "q_lora_rank" in sg["engine"]["fails"]["why"]
    )
    _, vl = engine(src, "vllm")
    assert fates(vl)[A + "q_proj.weight"] == "loaded"
    assert fates(vl)[KVA] == "error" and vl["engine"]["fails"]["stage"] == "load"
    assert "q_lora_rank" in refused(src, tmp_path / "out", "--to", "sglang")
    assert "q_lora_rank" in refused(src, tmp_path / "out2", "--to", "vllm")


def test_q_lora_rank_absent_is_deepseek_v3s_1536(tmp_path):
    """Absent is not null: DeepseekV3Config's q_lora_rank 1536, so the drafter has q_a_proj."""
    src = mla_drafter(tmp_path / "x", drop=["q_lora_rank"])
    assert QA in tensor_bytes(src)  # synth built it from the normalized config's default
    for eng in ("sglang", "vllm"):
        code, rep = engine(src, eng)
        assert code == 0, rep["findings"]
        assert rep["engine"]["config"]["q_lora_rank"]["value"] == 1536


def test_num_hidden_layers_absent(tmp_path, mla):
    """Absent, DeepseekV3Config says 61: SGLang refuses anything but one layer at build; vLLM
    builds 61 layers, 60 of them at init (WC406)."""
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.pop("num_hidden_layers"))
    _, sg = engine(src, "sglang")
    assert sg["engine"]["fails"]["stage"] == "build"
    assert "1 layer" in sg["engine"]["fails"]["why"]
    code, vl = engine(src, "vllm")
    assert vl["engine"]["layers"] == 61 and code == 1
    assert by_code(vl, "WC406")


def test_deepseekv3_architecture_is_mla_in_vllm_and_nextn_in_sglang(tmp_path, mla):
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.update(architectures=["DeepseekV3ForCausalLM"]))
    _, vl = engine(src, "vllm")
    assert vl["engine"]["architecture"] == "Eagle3DeepseekV3ForCausalLM" and vl["engine"]["starts"]
    _, sg = engine(src, "sglang")
    assert not sg["engine"]["starts"] and by_code(sg, "WC701")


def test_plain_check_says_what_each_engine_does(tmp_path, mla):
    src = edit(mla, tmp_path / "x", drop=[KVA])
    _, rep = check(src)
    assert "leaves 2 parameter(s) at init" in rep["engines"]["sglang"]["says"]
    assert "leaves 1 parameter(s) at init" in rep["engines"]["vllm"]["says"]


# --- geometry rules ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, said, held",
    [("kv_lora_rank", 48, 64), ("qk_rope_head_dim", 32, 16), ("q_lora_rank", 80, 96)],
)
def test_mla_dims_name_the_field(tmp_path, mla, field, said, held):
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.update({field: said}))
    code, rep = check(src)
    (f,) = by_code(rep, "WC408")
    assert code == 1 and f["subject"] == field
    assert f"{field} is {said} but the weights hold {held}" in f["message"]
    assert f["fix"] == f'set "{field}": {held} in config.json'
    assert not by_code(rep, "WC206")  # folded under the one cause
    assert {c["code"] for c in f["consequences"]} == {"WC206"}


def test_mla_dims_absent_default_contradicts(tmp_path, mla):
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.pop("kv_lora_rank"))
    _, rep = check(src)
    (f,) = by_code(rep, "WC408")
    assert "kv_lora_rank is absent (the engines take 512) but the weights hold 64" in f["message"]


def test_swapped_kv_a_kv_b(tmp_path, mla):
    src = edit(mla, tmp_path / "x", rename={KVA: KVB, KVB: KVA})
    code, rep = check(src)
    (f,) = by_code(rep, "WC211")
    assert code == 1 and KVA in said(f) and KVB in said(f)
    assert not by_code(rep, "WC206") and not by_code(rep, "WC408")


def test_the_fix_fixes_it(tmp_path, mla):
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.update(kv_lora_rank=48))
    _, rep = check(src)
    (f,) = by_code(rep, "WC408")
    edit(src, tmp_path / "y", cfg=lambda c: c.update(kv_lora_rank=64))
    code, rep = check(tmp_path / "y")
    assert code == 0 and not by_code(rep, "WC408")


# --- convert -------------------------------------------------------------------------------------
def test_round_trip_between_the_engines_layouts(tmp_path, mla, kimi_target):
    """midlayer.* (SGLang) -> layers.0.* (vLLM) -> midlayer.*: the same bytes under the names each
    engine reads, the same target layers captured, compare says identical."""
    mid, back = tmp_path / "mid", tmp_path / "back"
    r1 = convert(mla, mid, "--to", "vllm", "--target", kimi_target)
    assert all(
        n.startswith(("layers.0.", "fc.", "norm.", "lm_head.", "d2t", "t2d"))
        for n in tensor_bytes(mid, canonical=False)
    )
    assert read_config(mid)["eagle_aux_hidden_state_layer_ids"] == [
        2,
        30,
        58,
    ]  # vLLM: id k = out k-1
    assert r1["refused"] is False
    convert(mid, back, "--to", "sglang", "--target", kimi_target)
    assert tensor_bytes(back) == tensor_bytes(mla) == tensor_bytes(mid)
    assert tensor_bytes(back, canonical=False).keys() == tensor_bytes(mla, canonical=False).keys()
    c = compare(mla, back)
    assert c["verdict"] == "identical", c["reasons"]
    for eng, src in (("sglang", mla), ("vllm", mid), ("sglang", back)):
        code, rep = check(src, "--engine", eng, "--target", kimi_target)
        assert code == 0, (eng, rep["findings"])
        assert rep["engine"]["aux_layers"]["captures_output_of_layers"] == [1, 29, 57]
    assert aux_ids(read_config(back)) in ([1, 29, 57], [2, 30, 58])


def test_modelopt_style_export_gets_draft_vocab_size(tmp_path, mla, kimi_target):
    """A ModelOpt Kimi export (layers.0.*, no draft_vocab_size, pruned head + d2t) fails in vLLM
    as it is; convert writes draft_vocab_size from the head's rows and both engines load it."""
    src = edit(
        mla,
        tmp_path / "modelopt",
        rename=renamed_prefix("midlayer.", "layers.0."),
        cfg=lambda c: c.pop("draft_vocab_size"),
    )
    _, vl = engine(src, "vllm")
    assert not vl["engine"]["starts"]
    out = tmp_path / "out"
    r = convert(
        src,
        out,
        "--to",
        "vllm",
        "--target",
        kimi_target,
    )
    assert read_config(out)["draft_vocab_size"] == 400
    assert any("draft_vocab_size" in c for c in r["config_changes"])
    for eng in ("sglang", "vllm"):
        code, rep = engine(out, eng)
        assert code == 0 and rep["engine"]["starts"], (eng, rep["findings"])


def test_convert_writes_the_mla_dims_out(tmp_path):
    src = mla_drafter(tmp_path / "x", drop=["kv_lora_rank", "q_lora_rank"])
    out = tmp_path / "out"
    r = convert(src, out, "--to", "sglang")
    cfg = read_config(out)
    assert cfg["kv_lora_rank"] == 512 and cfg["q_lora_rank"] == 1536
    assert any(c.startswith("kv_lora_rank: absent -> 512") for c in r["config_changes"])
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]


def test_convert_refuses_what_check_refuses(tmp_path, mla):
    """The gate: kv_lora_rank contradicting the weights is refused (exit 1, nothing written)."""
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.update(kv_lora_rank=48))
    r = run_cli("convert", src, tmp_path / "out", "--to", "vllm", "--json")
    assert r.exit_code == 1 and r.json["refused"]
    assert not (tmp_path / "out").exists()


def test_deepseek_v3_model_type_fails_in_vllm_and_convert_writes_kimi_k2(
    tmp_path, mla, kimi_target
):
    """vLLM rewrites any draft config of model_type deepseek_v3 to an MTP model
    (config/speculative.py hf_config_override, found by the vLLM oracle): no EAGLE-3 drafter is
    built. kimi_k2 is the same DeepseekV3Config in both engines: convert --to vllm writes it."""
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.update(model_type="deepseek_v3"))
    _, vl = engine(src, "vllm")
    assert (
        vl["engine"]["fails"]["stage"] == "config"
        and "deepseek_mtp" in vl["engine"]["fails"]["why"]
    )
    code, sg = engine(src, "sglang")
    assert code == 0 and sg["engine"]["starts"]
    out = tmp_path / "out"
    r = convert(
        src,
        out,
        "--to",
        "vllm",
        "--target",
        kimi_target,
    )
    assert read_config(out)["model_type"] == "kimi_k2"
    assert any(c.startswith("model_type: deepseek_v3 -> kimi_k2") for c in r["config_changes"])
    code, vl = engine(out, "vllm")
    assert code == 0 and vl["engine"]["starts"]


# --- the MLA fixtures in the published layouts (generated: tests/fixtures/producers/README.md) ---
MLA_FIXTURES = {"mla-modelopt": ("modelopt", "vllm"), "mla-torchspec": ("specforge", "sglang")}


def _kimi_ids(c):
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]


@pytest.mark.parametrize("name", sorted(MLA_FIXTURES))
def test_mla_fixture_reads_and_loads_in_both_engines(name):
    from conftest import PRODUCERS

    r = run_cli("inspect", PRODUCERS / name, "--json")
    assert r.exit_code == 0
    assert r.json["dialect"]["name"] == MLA_FIXTURES[name][0]
    assert r.json["architecture"]["name"] == "deepseek_mla_eagle3"
    assert r.json["unknown"] == [] and all(t["status"] == "ok" for t in r.json["tensors"])
    for eng in ("sglang", "vllm"):
        code, rep = engine(PRODUCERS / name, eng)
        assert code == 0 and rep["engine"]["starts"], (eng, rep["findings"])
        assert "random" not in states(rep).values()


@pytest.mark.parametrize("name", sorted(MLA_FIXTURES))
def test_mla_fixture_round_trips_through_the_other_layout(tmp_path, name):
    """Through the other engine's layout and back, byte for byte. The fixtures' own ids [0, 1, 2]
    (SGLang's DeepSeek convention: the outputs of the embedding and layers 0, 1) cannot be served
    by vLLM: its DeepSeek forward raises on id 0 (the residual is still None; the capture
    oracle runs vLLM's own DeepseekV2Model.forward), so convert --to vllm refuses them (WC712);
    the round trip runs on the ids a Kimi drafter writes, [2, 30, 58], which both engines read
    as the same layers."""
    from conftest import PRODUCERS

    target = write_target(
        tmp_path / "t", "kimi_k2", 61, hidden=64, vocab=512, architecture="DeepseekV3ForCausalLM"
    )
    r = run_cli("convert", PRODUCERS / name, tmp_path / "no", "--to", "vllm", "--target", target)
    assert r.exit_code == 1 and "WC712" in r.stdout, r
    j = run_cli("convert", PRODUCERS / name, tmp_path / "no", "--to", "vllm", "--target", target,
                "--json")  # fmt: skip
    (f,) = [f for e in j.json["check"]["engines"] for f in e["findings"] if f["code"] == "WC712"]
    assert "id 0" in f["detail"], f
    src = edit(PRODUCERS / name, tmp_path / "src", cfg=_kimi_ids)
    other = "sglang" if MLA_FIXTURES[name][1] == "vllm" else "vllm"
    mid, back = tmp_path / "mid", tmp_path / "back"
    convert(src, mid, "--to", other, "--target", target)
    convert(mid, back, "--to", MLA_FIXTURES[name][1], "--target", target)
    assert tensor_bytes(back) == tensor_bytes(src) == tensor_bytes(mid)
    c = compare(src, back)
    assert c["verdict"] == "identical", c["reasons"]
    for eng, folder in (("sglang", src), (other, mid), (MLA_FIXTURES[name][1], back)):
        _, rep = check(folder, "--engine", eng, "--target", target)
        want = check(src, "--engine", eng, "--target", target)[1]
        assert (
            rep["engine"]["aux_layers"]["captures_output_of_layers"]
            == want["engine"]["aux_layers"]["captures_output_of_layers"]
        )


def test_yarn_rope_without_factor(tmp_path, mla):
    """transformers 5.19 rejects rope scaling of type linear/dynamic/yarn/llama3 without `factor`
    when vLLM reads the draft config, and when SGLang reads a Llama drafter's; SGLang's kimi_k2
    config lets the MLA drafter through (both found by the oracles: mt./sf.rope.no_factor)."""
    rope = {"type": "yarn", "original_max_position_embeddings": 4096}
    src = edit(mla, tmp_path / "x", cfg=lambda c: c.update(rope_scaling=rope))
    _, vl = engine(src, "vllm")
    assert vl["engine"]["fails"]["stage"] == "config" and "factor" in vl["engine"]["fails"]["why"]
    _, sg = engine(src, "sglang")
    assert sg["engine"]["starts"]
    from conftest import PRODUCERS

    llama = edit(
        PRODUCERS / "specforge-sglang",
        tmp_path / "l",
        cfg=lambda c: c.update(rope_scaling={"rope_type": "yarn"}),
    )
    for eng in ("sglang", "vllm"):
        _, rep = engine(llama, eng)
        assert rep["engine"]["fails"]["stage"] == "config", eng
    with_factor = edit(src, tmp_path / "y", cfg=lambda c: c["rope_scaling"].update(factor=8.0))
    _, vl = engine(with_factor, "vllm")
    assert vl["engine"]["starts"]


def test_second_round_trip_is_a_fixed_point(tmp_path, mla, kimi_target):
    """After one round (which writes the engines' defaults out), another round through the other
    layout gives back the same config.json byte for byte and the same tensors under the same
    names; the files differ only in their provenance (the source named in the metadata and the
    model card), and the card names the MLA loader file."""
    out = {}
    src = mla
    for i, to in enumerate(["vllm", "sglang", "vllm", "sglang"], 1):
        out[i] = tmp_path / f"r{i}"
        convert(src, out[i], "--to", to, "--target", kimi_target)
        src = out[i]
    for a, b in ((1, 3), (2, 4)):
        assert (out[a] / "config.json").read_bytes() == (out[b] / "config.json").read_bytes()
        assert tensor_bytes(out[a], canonical=False) == tensor_bytes(out[b], canonical=False)
    assert "mappings/engines/sglang_mla.toml" in (out[2] / "README.md").read_text()
    assert "mappings/engines/vllm_mla.toml" in (out[1] / "README.md").read_text()


def test_rules_read_the_mla_loader_not_the_llama_one(tmp_path, mla):
    """WC401 names the class the engines load an MLA drafter as, WC706 the MLA loader's own
    refusals (q_lora_rank null), WC701 every loader's architectures."""
    v3 = edit(mla, tmp_path / "v3", cfg=lambda c: c.update(architectures=["DeepseekV3ForCausalLM"]))
    _, rep = check(v3)
    (f,) = by_code(rep, "WC401")
    assert f["message"].endswith("write Eagle3DeepseekV2ForCausalLM")
    src = mla_drafter(tmp_path / "qn", q_lora_rank=None)
    _, rep = engine(src, "sglang")
    assert any("requires q_lora_rank" in f["message"] for f in by_code(rep, "WC706"))
    foo = edit(mla, tmp_path / "foo", cfg=lambda c: c.update(architectures=["FooForCausalLM"]))
    _, rep = engine(foo, "vllm")
    (f,) = by_code(rep, "WC701")
    assert "Eagle3LlamaForCausalLM" in said(f) and "Eagle3DeepseekV2ForCausalLM" in said(f)
