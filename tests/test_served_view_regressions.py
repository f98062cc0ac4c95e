"""Regressions for each "Why" item of the served-view issue, built from the same kind of input
(the producer fixtures with one thing changed, as real trainers write it).

Where another file already holds the item's test it is named here, not repeated:

1. convert without --target on a model_type-llama K2.5 drafter: test_convert.py
   test_aux_ids_without_target_are_refused_when_the_family_matters (also: a target named by
   --embeddings from= settles it), and below for --lm-head-from.
2. convert writing outputs its own check rejects: test_convert_gate.py (each case of the list).
3. compare --strict SRC OUT of our own conversion: test_compare_meaning.py.
4. false alarms on real configs: below (LlamaForCausalLM under vLLM, WC303 under vLLM, WC104
   under SGLang).
5. num_hidden_layers > 1 with one layer of weights: below (an error, plain and per engine).
6. contradictory findings: below, one test per case; WC904 on [2,30,58] vs [1,29,57]:
   test_check_rules.py test_wc904_compares_aux_ids_by_the_layers_they_capture.
"""

from __future__ import annotations

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import fixture_variant, model_prefixed, said
from helpers.convert import fixture_target
from test_target import kimi_k25_target

SPECFORGE = PRODUCERS / "specforge-sglang"


def check(src, *args):
    r = run_cli("check", src, *args, "--json")
    assert r.exit_code in (0, 1), r
    return r.json


def all_codes(report):
    def walk(fs):
        for f in fs:
            yield f["code"]
            yield from walk(f.get("consequences", []))

    return set(walk(report["findings"]))


# --- 1 ------------------------------------------------------------------------------------------
def test_1_the_target_named_by_lm_head_from_settles_the_family(tmp_path):
    """A K2.5-like drafter without lm_head (model_type llama, ids [2, 30, 58]): --lm-head-from a
    Kimi-K2.5 target says the family, so the ids are converted for it, not for a Llama."""
    src = fixture_variant(
        tmp_path,
        "k25-nohead",
        lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 30, 58]),
        lambda ts: [t for t in ts if t.name != "lm_head.weight"],
    )
    target = kimi_k25_target(tmp_path / "k25", hidden=64, vocab=512)
    r = run_cli(
        "convert",
        src,
        tmp_path / "out",
        "--to",
        "vllm",
        "--lm-head-from",
        target,
        "--dry-run",
        "--json",
    )
    assert r.exit_code == 0, r
    line = next(c for c in r.json["config_changes"] if c.startswith("aux layer ids"))
    assert "kimi" in line and "[3, 31, 59]" not in line, line


# --- 4 ------------------------------------------------------------------------------------------
def test_4_llama_architecture_is_no_error_under_vllm(tmp_path):
    """The original EAGLE trainer's `architectures: ["LlamaForCausalLM"]`: vLLM renames it."""
    src = fixture_variant(tmp_path, "arch", lambda c: c.update(architectures=["LlamaForCausalLM"]))
    r = check(src, "--engine", "vllm")
    assert r["ok"] and "WC401" not in all_codes(r) and r["engine"]["starts"]
    assert r["engine"]["architecture"] == "Eagle3LlamaForCausalLM"
    plain = check(src)  # SGLang fails on it: a warning naming it, not an error
    (f,) = [f for f in plain["findings"] if f["code"] == "WC401"]
    assert f["severity"] == "warning" and "sglang" in f["message"]


def test_4_tied_embeddings_are_no_error_under_vllm(tmp_path):
    """vLLM never ties the drafter's head: WC303 is SGLang's problem only."""
    src = fixture_variant(tmp_path, "tied", lambda c: c.update(tie_word_embeddings=True))
    assert "WC303" not in all_codes(check(src, "--engine", "vllm"))
    assert "WC303" in all_codes(check(src, "--engine", "sglang"))


def test_4_model_prefix_is_no_error_under_sglang(tmp_path):
    """SGLang tries a name as written first: `model.midlayer.*` loads; nothing dropped."""

    src = fixture_variant(tmp_path, "prefixed", tensors_edit=model_prefixed)
    r = check(src, "--engine", "sglang")
    assert r["ok"] and "WC104" not in all_codes(r)
    assert not [t for t in r["engine"]["tensors"] if t["fate"] == "dropped"]


# --- 5 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", [None, "sglang", "vllm"])
def test_5_more_layers_declared_than_weighed_is_an_error(tmp_path, engine):
    src = fixture_variant(tmp_path, "l4", lambda c: c.update(num_hidden_layers=4))
    r = check(src, *(["--engine", engine] if engine else []))
    assert not r["ok"]
    (f,) = [f for f in r["findings"] if f["code"] == "WC406"]
    assert f["severity"] == "error" and "4 decoder layers" in said(f)
    if engine is None:
        # 3 layers at init, 9 read parameters each (the later layers' unread norm, SGLang's
        # input_layernorm and vLLM's hidden_norm, is no loss: docs/formats.md §1.1)
        assert all(v["layers"] == 4 and len(v["left_at_init"]) == 27 for v in r["engines"].values())


# --- 6 ------------------------------------------------------------------------------------------
def test_6a_no_engines_ignore_d2t_next_to_vllm_loading_it():
    """vLLM renames d2t to draft_id_to_target_id: WC205 ("engines ignore it") never beside it."""
    for fixture in ("specforge-sglang", "speculators-train", "modelopt"):
        r = check(PRODUCERS / fixture, "--engine", "vllm", "--target", fixture_target())
        assert "WC205" not in all_codes(r), (fixture, r["findings"])
        d2t = [t for t in r["engine"]["tensors"] if t["canonical"] == "d2t"]
        assert d2t and d2t[0]["fate"] in ("loaded", "special"), d2t


def test_6b_a_null_draft_vocab_borrows_the_target_head_in_sglang(tmp_path):
    """`draft_vocab_size: null` without an lm_head: SGLang takes the target's head. No WC302
    "stays random"."""
    src = fixture_variant(
        tmp_path,
        "null-nohead",
        lambda c: c.update(draft_vocab_size=None),
        lambda ts: [t for t in ts if t.name not in ("lm_head.weight", "d2t", "t2d")],
    )
    r = check(src, "--engine", "sglang")
    assert "WC302" not in all_codes(r) and r["ok"]
    (head,) = [p for p in r["engine"]["parameters"] if p["canonical"] == "lm_head.weight"]
    assert head["state"] == "from_target"


def test_6c_null_draft_vocab_with_an_own_head_fails_sglang_and_says_so(tmp_path):
    """null with an own [Vd, H] head: SGLang builds a [V, H] head and its loader asserts. The
    view says it does not start; one root finding, the load failure under it."""
    src = fixture_variant(tmp_path, "null-head", lambda c: c.update(draft_vocab_size=None))
    r = check(src, "--engine", "sglang", "--explain")
    assert not r["engine"]["starts"] and r["engine"]["fails"]["stage"] == "load"
    (head,) = [t for t in r["engine"]["tensors"] if t["canonical"] == "lm_head.weight"]
    assert head["fate"] == "error"
    assert [f["code"] for f in r["findings"] if f["severity"] == "error"] == ["WC301"]
    assert "WC703" in all_codes(r)


def test_6d_the_dtype_sglang_builds_in_is_said(tmp_path):
    """An fp32-config drafter is built in float16 by SGLang (auto), not "cast at load"."""
    src = fixture_variant(
        tmp_path, "fp32", lambda c: c.update(dtype="float32", torch_dtype="float32")
    )
    r = check(src, "--engine", "sglang", "--target", fixture_target())
    assert r["engine"]["dtype"] == "float16"
    (f,) = [f for f in r["findings"] if f["code"] == "WC209"]
    assert "sglang builds the draft in float16" in said(f)


def test_6e_no_advice_convert_refuses():
    """speculators-train (norm_before_residual: true) under SGLang: convert --to sglang refuses
    it, so no finding advises it."""
    r = check(PRODUCERS / "speculators-train", "--engine", "sglang")
    assert not any("weightcheck convert" in f["message"] for f in r["findings"])
    assert all(f["fix"] is None for f in r["findings"] if f["code"] == "WC706")
    refused = run_cli(
        "convert", PRODUCERS / "speculators-train", "/nonexistent-out", "--to", "sglang"
    )
    assert refused.exit_code == 2 and "norm_before_residual" in refused.stderr
