"""Biases under ``attention_bias`` / ``mlp_bias``, fused as the weights are
(``qkv_proj.bias``, ``gate_up_proj.bias``: mappings/architectures/llama_eagle3.toml [[fused]]):
vLLM builds them and loads the fused ones whole (its weight loader splits them at the config's
offsets); SGLang builds none of them (the drafter's qkv_proj is rebuilt bias=False, its LlamaMLP
has no bias) and drops them, fused or not (the oracles: docs/differential.md R34;
tests/test_engine_hurried.py runs them). o_proj's bias loads in both.
"""

from __future__ import annotations

import pytest
from conftest import PRODUCERS, run_cli
from helpers import hurried
from helpers.builders import check

TARGET = PRODUCERS / "target-llama"
KINDS = {  # hurried drafter -> the biases SGLang drops (its WC702 names them)
    "biased-attention": {
        "midlayer.self_attn.q_proj.bias",
        "midlayer.self_attn.k_proj.bias",
        "midlayer.self_attn.v_proj.bias",
    },
    "fused-bias-qkv": {"midlayer.self_attn.qkv_proj.bias"},
    "fused-bias-mlp": {"midlayer.mlp.gate_up_proj.bias", "midlayer.mlp.down_proj.bias"},
}


def _codes(rep) -> set[str]:
    return {f["code"] for f in rep["findings"]}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_bias_is_known_and_vllm_loads_it(tmp_path, kind):
    src = hurried.BUILDERS[kind](tmp_path / kind)
    code, rep = check(src, "--engine", "vllm", "--target", TARGET)
    assert not _codes(rep) & {"WC101", "WC204", "WC206", "WC702", "WC703"}, rep["findings"]
    view = rep["engine"]
    assert view["starts"], view
    biases = [p for p in view["parameters"] if p["canonical"] and p["canonical"].endswith(".bias")]
    assert biases and all(p["state"] == "loaded" for p in biases), biases


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sglang_drops_the_biases_it_never_builds(tmp_path, kind):
    src = hurried.BUILDERS[kind](tmp_path / kind)
    code, rep = check(src, "--engine", "sglang", "--target", TARGET)
    dropped = [f for f in rep["findings"] if f["code"] == "WC702"]
    named = set()
    for f in dropped:
        assert f["severity"] == "error"
        named |= {n for n in KINDS[kind] if n in f["message"] or n == f["subject"]}
    assert named == KINDS[kind], [f["message"] for f in dropped]
    assert "WC101" not in _codes(rep)  # o_proj.bias is a name it knows (and loads)
    assert code == 1  # SGLang serves the layer without the trained biases


def test_fused_biases_are_their_parts(tmp_path):
    """inspect reads the fused bias as its parts, convert writes them split, and the result is the
    drafter written with the parts apart, byte for byte."""
    src = hurried.BUILDERS["fused-bias-qkv"](tmp_path / "fused")
    apart = hurried.BUILDERS["biased-attention"](tmp_path / "apart")
    ins = run_cli("inspect", src, "--json").json
    status = {t["name"]: t["status"] for t in ins["tensors"]}
    assert status["midlayer.self_attn.qkv_proj.bias"] == "fused q+k+v"
    assert not [m for m in ins["missing"] if m["presence"] == "required"]
    c = run_cli("compare", src, apart, "--json").json
    assert c["verdict"] == "compatible" and c["bytes"]["different"] == 0, c
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "vllm")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "midlayer.self_attn.qkv_proj.bias split into layers.0.self_attn.q_proj.bias" in r.stdout
    c = run_cli("compare", out, apart, "--json").json
    assert c["bytes"]["different"] == 0 and c["verdict"] in ("identical", "compatible"), c
