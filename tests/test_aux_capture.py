"""Aux capture per target family and runner (issue #31 Why 3): the verdict follows the version's
default runner and names it when runners differ; a capture the target family's forward cannot
make is an error. The facts are data (mappings/engines/*.toml [aux_layers]: [[aux_layers.runner]]
and each [[aux_layers.convention]]'s capture point), run with the engines' own code by the capture
oracle (tests/test_engine_capture.py, marker ``engine``)."""

from __future__ import annotations

import json

import pytest
from conftest import PRODUCERS
from helpers.builders import by_code, check, codes, edit, said, target_copy

from weightcheck.engines import data

SF = PRODUCERS / "specforge-sglang"


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("targets")
    return {
        "llama32": target_copy(tmp / "llama32", num_hidden_layers=32),
        "kimi61": target_copy(
            tmp / "kimi61",
            model_type="kimi_k2",
            architectures=["DeepseekV3ForCausalLM"],
            num_hidden_layers=61,
        ),
    }


def _nested(ids):
    return lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=ids)


def _top(ids):
    """The ids at the top level only (where both vLLM runners read them)."""

    def edit_(c):
        c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
        c["eagle_aux_hidden_state_layer_ids"] = ids

    return edit_


def test_the_runners_are_data():
    """vLLM: V2 the default, V1 otherwise, each with where it reads; SGLang one runner."""
    v = data.runners("vllm")
    assert [r.name for r in v] == ["V2", "V1"] and v[0].default
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in v[1].paths
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" not in v[0].paths
    (s,) = data.runners("sglang")
    assert s.paths == ("eagle_config.eagle_aux_hidden_state_layer_ids",)
    for e in data.ENGINES:
        for c in data.load(e).aux_layers.convention:
            assert c.cite, (e, c.target_model_types)


def test_the_verdict_follows_the_default_runner_and_names_the_other(tmp_path, targets):
    """SpecForge ids [1, 15, 28] in eagle_config, a 32-layer Llama target: vLLM's V1 runner reads
    them (outputs 0, 14, 27: not trained), the default V2 runner reads none and captures its
    default (2, 16, 29) = outputs 1, 15, 28: exactly the trained layers. Not an error (it was,
    describing V1, beside a line about V2); a warning naming V1."""
    src = edit(SF, tmp_path / "x", cfg=_nested([1, 15, 28]))
    code, vl = check(src, "--engine", "vllm", "--target", targets["llama32"])
    assert code == 0 and codes(vl) == {"WC710"}, vl["findings"]
    (f,) = by_code(vl, "WC710")
    assert f["severity"] == "warning"
    assert (
        "V2 runner, the default" in f["message"]
        and "V1 runner captures [0, 14, 27]" in f["message"]
    )
    runners = {r["name"]: r for r in vl["engine"]["aux_layers"]["runners"]}
    assert runners["V2"]["captures_output_of_layers"] == [1, 15, 28]
    assert runners["V1"]["captures_output_of_layers"] == [0, 14, 27]
    assert vl["engine"]["captured_layers"] == [1, 15, 28]  # the default runner's
    code, plain = check(src, "--target", targets["llama32"])
    assert code == 0 and "WC708" not in codes(plain)


def test_ids_ending_at_the_layer_count_fail_sglangs_deepseek_forward(tmp_path, targets):
    """Ids [2, 30, 61] for a 61-layer Kimi-K2 target (the last id names the last layer's
    output): SGLang's DeepSeek forward captures at layer entry only, so id 61 is never captured
    and its packed buffer's finalize raises at the first forward. It was a pass."""
    src = edit(SF, tmp_path / "x", cfg=_nested([2, 30, 61]))
    code, sg = check(src, "--engine", "sglang", "--target", targets["kimi61"])
    assert code == 1
    (f,) = by_code(sg, "WC712")
    assert f["severity"] == "error" and "never reached: [61]" in said(f)
    assert "AuxHiddenStatePacker" in f["detail"] and "deepseek_v2.py" in f["detail"]
    assert sg["engine"]["forward_fails"]["subject"] == "aux_layer_ids"
    # vLLM captures the last layer's output (id 61, after the loop) — under V1, which reads
    # eagle_config; V2 reads no ids there and captures its default: other layers, an error
    code, vl = check(src, "--engine", "vllm", "--target", targets["kimi61"])
    (g,) = by_code(vl, "WC708")
    assert g["severity"] == "error" and "[1, 29, 60]" in g["message"]
    assert "V1" in g["detail"] and g["fix"]
    # written where V2 reads them, vLLM captures the trained layers
    top = edit(SF, tmp_path / "top", cfg=_top([2, 30, 61]))
    code, vt = check(top, "--engine", "vllm", "--target", targets["kimi61"])
    assert code == 0 and vt["engine"]["captured_layers"] == [1, 29, 60], vt["findings"]


def test_vllms_deepseek_forward_raises_on_id_0(tmp_path, targets):
    """vLLM's DeepseekV2Model.forward captures id k before layer k runs as hidden + residual,
    and the residual is None before layer 0: id 0 raises TypeError (a Llama target captures the
    embedding instead)."""
    src = edit(SF, tmp_path / "x", cfg=_top([0, 30, 61]))
    code, vl = check(src, "--engine", "vllm", "--target", targets["kimi61"])
    (f,) = by_code(vl, "WC712")
    assert code == 1 and "residual is still None" in said(f)
    llama61 = target_copy(tmp_path / "llama61", num_hidden_layers=61)
    code, ll = check(src, "--engine", "vllm", "--target", llama61)
    assert "WC712" not in codes(ll) and ll["engine"]["captured_layers"] == [-1, 29, 60]


def test_the_aux_json_names_every_runner(targets):
    code, r = check(SF, "--engine", "sglang", "--target", targets["llama32"])
    (only,) = r["engine"]["aux_layers"]["runners"]
    assert only["default"] and only["from"] == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert json.dumps(r["engine"]["aux_layers"]["ids"]) == "[0, 1, 2]"
