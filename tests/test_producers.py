"""Checkpoints written by the producers' own code (tests/fixtures/producers/README.md) read as
what they are: dialect, architecture, every tensor explained, and the relations between them."""

import pytest
from conftest import PRODUCERS, run_cli

EXPECTED = {
    # folder: (dialect, wrappers, architecture, config architectures[0] or None)
    "specforge-sglang": ("specforge", [], "llama_eagle3"),
    "specforge-hf": ("specforge", [], "llama_eagle3"),
    "specforge-run/tiny-step2": ("specforge", [], "llama_eagle3"),
    "speculators-train": ("speculators", [], "llama_eagle3"),
    "speculators-convert": ("speculators", [], "llama_eagle3"),
    "modelopt": ("modelopt", [], "llama_eagle3"),
    "modelopt-default-aux": ("modelopt", [], "llama_eagle3"),
    "modelopt-fullvocab-fp32": ("modelopt", [], "llama_eagle3"),
}


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_producer_checkpoint_reads_as_what_it_is(folder):
    if folder.startswith("specforge-run"):
        pytest.importorskip("torch")
    r = run_cli("inspect", PRODUCERS / folder, "--json")
    assert r.exit_code == 0, r
    j = r.json
    dialect, wrappers, arch = EXPECTED[folder]
    assert j["dialect"]["name"] == dialect, j["dialect"]
    assert j["dialect"]["wrappers"] == wrappers
    assert j["architecture"]["name"] == arch
    assert j["unknown"] == [] and j["other_dialect"] == {} and j["duplicates"] == {}
    assert all(t["canonical"] for t in j["tensors"])
    if folder != "specforge-run/tiny-step2":
        assert all(t["status"] == "ok" for t in j["tensors"]), [
            t for t in j["tensors"] if t["status"] != "ok"
        ]


def test_speculators_config_is_flattened():
    j = run_cli("inspect", PRODUCERS / "speculators-train", "--json").json
    n, prov = j["config"]["normalized"], j["config"]["provenance"]
    assert prov["hidden_size"] == "transformer_layer_config.hidden_size"
    assert n["hidden_size"] == 64 and n["draft_vocab_size"] == 128
    assert (
        n["aux_layer_ids"] == [1, 2, 3]
        and prov["aux_layer_ids"] == "eagle_aux_hidden_state_layer_ids"
    )
    assert n["norm_before_fc"] is True
    names = {t["name"]: t for t in j["tensors"]}
    assert names["input_norm.weight"]["shape"] == [192]  # one RMSNorm over 3 x 64 aux features


def test_modelopt_two_aux_states():
    j = run_cli("inspect", PRODUCERS / "modelopt-default-aux", "--json").json
    assert j["config"]["normalized"]["num_aux_hidden_states"] == 2
    fc = next(t for t in j["tensors"] if t["canonical"] == "fc.weight")
    assert fc["shape"] == [64, 128] and fc["status"] == "ok"


def test_specforge_export_and_hf_export_share_bytes():
    j = run_cli(
        "compare", PRODUCERS / "specforge-sglang", PRODUCERS / "specforge-hf", "--json"
    ).json
    assert j["verdict"] == "compatible"  # embed_tokens only in the hf export (optional)
    assert [t["canonical"] for t in j["only_in_b"]] == ["embed_tokens.weight"]
    assert j["bytes"]["different"] == 0


def test_speculators_convert_is_a_float32_copy_of_the_specforge_export():
    pytest.importorskip("torch")
    j = run_cli(
        "compare",
        PRODUCERS / "specforge-sglang",
        PRODUCERS / "speculators-convert",
        "--values",
        "--json",
    ).json
    assert j["verdict"] == "compatible"
    assert {m["b"] for m in j["dtype_mismatches"]} == {"F32"}
    assert all(v["max_abs_diff"] == 0.0 for v in j["values"].values())
    diffs = {d["field"]: d for d in j["config_differences"]}
    # speculators convert lost the aux ids (README of the fixtures)
    assert diffs["aux_layer_ids"]["a"] == [0, 1, 2] and diffs["aux_layer_ids"]["b"] is None


def test_training_state_compares_without_config():
    pytest.importorskip("torch")
    j = run_cli(
        "compare",
        PRODUCERS / "specforge-run" / "tiny-step2",
        PRODUCERS / "specforge-sglang",
        "--json",
    ).json
    assert j["verdict"] == "identical"
    assert any("A has no config.json" in n for n in j["notes"])
