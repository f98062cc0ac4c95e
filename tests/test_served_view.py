"""The served view (weightcheck/engines/view.py) on the differential corpus's variants, with the
answers the engines' own loaders gave (docs/differential.md, root causes R1-R16). No side venv:
each case writes one corpus variant (tests/engine/corpus.py) and reads the replay's JSON
(`check --engine E --target target-llama --json`, key `engine`). Each case cites the engine source
that decides it and the oracle record (corpus variant, engine) that proved it.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import schema_check
from click.testing import CliRunner

from weightcheck.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "engine"))

import corpus  # noqa: E402

VARIANTS = {v.id: v for v in corpus.variants()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    cache: dict = {}

    def get(vid: str, engine: str, target: bool = True) -> dict:
        key = (vid, engine, target)
        if key not in cache:
            path = os.path.join(root, vid)
            if not os.path.isdir(path):
                corpus.write(VARIANTS[vid], path)
            args = ["check", path, "--engine", engine, "--json"]
            args += ["--target", corpus.TARGET] if target else []
            r = CliRunner().invoke(main, args, catch_exceptions=False)
            assert r.exit_code in (0, 1), r.output
            schema_check.check_output(args, r.stdout)
            cache[key] = json.loads(r.stdout)["engine"]
        return cache[key]

    return get


def fate(e: dict, name: str) -> str:
    return next(t["fate"] for t in e["tensors"] if t["name"] == name)


def state(e: dict, param: str) -> str:
    return next(p["state"] for p in e["parameters"] if p["param"] == param)


# --- R14: the dtype the draft is built in ---------------------------------------------------------
# SGLang reads the DRAFT config: dtype, else torch_dtype, else float32; under auto float32 becomes
# float16 (sglang 0.5.23 configs/model_config.py:2284-2327). vLLM builds in the target's dtype (vllm
# 0.32.0 config/speculative.py:1301). Oracles: sf.dt.absent / sf.dt.fp32 / sf.asis.
@pytest.mark.parametrize(
    "vid, engine, dtype",
    [
        ("sf.dt.absent", "sglang", "float16"),
        ("sf.dt.absent", "vllm", "bfloat16"),
        ("sf.asis", "sglang", "bfloat16"),
    ],
)
def test_r14_built_dtype(served, vid, engine, dtype):
    assert served(vid, engine)["dtype"] == dtype


# --- R4: the decoder layers built ----------------------------------------------------------------
# One decoder layer per num_hidden_layers, every one with hidden_norm (sglang 0.5.23
# models/llama_eagle3.py:198-204; vllm 0.32.0 models/llama_eagle3.py:198-207). Oracles: sf.nl.0
# (SGLang starts and drops layer 0's tensors; vLLM fails on layers.0), sf.nl.2_weights (both load
# layers.1.*), sf.nl.absent (32 layers, transformers' LlamaConfig default).
def test_r4_layers(served):
    e = served("sf.nl.0", "sglang")
    assert e["starts"] and e["layers"] == 0
    assert fate(e, "midlayer.mlp.down_proj.weight") == "dropped"
    v = served("sf.nl.0", "vllm")
    assert not v["starts"] and v["fails"]["stage"] == "load"
    for engine in ("sglang", "vllm"):
        e = served("sf.nl.2_weights", engine)
        assert e["starts"] and e["layers"] == 2
        assert fate(e, "layers.1.mlp.down_proj.weight") == "loaded"
        assert served("sf.nl.absent", engine)["layers"] == 32
    # the variant writes no layers.1.hidden_norm (a speculators-style plain layer 1): SGLang's
    # layer 1 normalizes its input with it (models/llama_eagle3.py:97-105), so it stays at init
    # where it is read; vLLM's layer 1 never reads it (models/llama_eagle3.py:131-138)
    assert state(served("sf.nl.2_weights", "sglang"), "model.layers.1.hidden_norm.weight") == (
        "random"
    )
    v = served("sf.nl.2_weights", "vllm")
    assert state(v, "model.layers.1.hidden_norm.weight") == "optional-absent"
    assert state(v, "model.layers.1.input_layernorm.weight") == "loaded"


# --- R2 / R1: architectures -----------------------------------------------------------------------
# SGLang builds the class architectures[0] names (sglang 0.5.23 models/registry.py:93-114): the
# EAGLE-3 loader does not run, so no tensor fate is claimed (oracle sf.arch.llama: fails at load on
# lm_head in LlamaForCausalLM). vLLM renames LlamaForCausalLM to Eagle3LlamaForCausalLM and loads
# (vllm 0.32.0 transformers_utils/configs/eagle.py:55-64; oracle sf.arch.llama starts); Qwen3 becomes
# Eagle3Qwen3ForCausalLM with q_norm / k_norm at init (oracle sf.arch.qwen3).
def test_r2_sglang_builds_another_class(served):
    e = served("sf.arch.llama", "sglang")
    assert not e["starts"] and {t["fate"] for t in e["tensors"]} == {"unknown"}
    assert e["parameters"] == []


def test_r1_vllm_renames_the_architecture(served):
    e = served("sf.arch.llama", "vllm")
    assert e["starts"] and e["architecture"] == "Eagle3LlamaForCausalLM"
    q = served("sf.arch.qwen3", "vllm")
    assert q["starts"] and state(q, "model.layers.0.self_attn.q_norm.weight") == "random"
    assert not served("sf.arch.mistral", "vllm")["starts"]


# --- R8: the captured target layers ---------------------------------------------------------------
# Both keep sorted(set(ids)) and capture only what the forward loop reaches: SGLang ids -1..L-2
# (sglang 0.5.23 models/llama.py:929-941, :485-494), vLLM ids 0..L (vllm 0.32.0
# models/interfaces.py:1577-1578, models/llama.py:427-441); nothing with use_aux_hidden_state false.
@pytest.mark.parametrize(
    "vid, engine, layers",
    [
        ("sf.aux.unsorted", "sglang", [0, 1, 2]),
        ("sf.aux.dupl", "sglang", [1, 2]),
        ("sf.aux.n234", "sglang", [2]),
        ("sf.aux.none", "sglang", [0, 1]),
        # eagle_config's [-1, 0, 1] is read by vLLM's V1 runner (the CPU build the oracle runs);
        # the default V2 runner reads none there (the capture oracle, tests/engine/capture_oracle.py)
        ("sf.aux.neg", "vllm:V1", [-1, 0]),
        ("sf.aux.neg", "vllm:V2", [0, 1]),
        ("sf.aux.none", "vllm", [0, 1]),
        ("sf.aux.no_aux", "sglang", None),
        ("sf.aux.no_aux", "vllm", None),
    ],
)
def test_r8_captured_layers(served, vid, engine, layers):
    engine, _, runner = engine.partition(":")
    e = served(vid, engine)
    if runner:
        (r,) = [r for r in e["aux_layers"]["runners"] if r["name"] == runner]
        assert r["captures_output_of_layers"] == layers
        assert (e["captured_layers"] == layers) == r["default"]  # the verdict follows the default
        return
    assert e["captured_layers"] == layers
    if layers is None:
        assert e["aux_layers"]["captures"] is False


# --- R9: vLLM shares an embedding / head equal to the target's ------------------------------------
# torch.equal after the cast to the built dtype (vllm 0.32.0 v1/spec_decode/llm_base_proposer.py:1450,
# :1530). Oracles: sh.asis (embed_tokens from_target), mf.asis (the F32 head equals the BF16 target's).
def test_r9_equal_to_the_target(served):
    assert state(served("sh.asis", "vllm"), "model.embed_tokens.weight") == "from_target"
    assert state(served("mf.asis", "vllm"), "lm_head.weight") == "from_target"
    assert state(served("sf.asis", "vllm"), "lm_head.weight") == "loaded"  # [128, H] != [512, H]
    alone = served("sh.asis", "vllm", target=False)
    p = next(p for p in alone["parameters"] if p["param"] == "model.embed_tokens.weight")
    assert p["state"] == "loaded" and "give --target" in p["note"]


# --- R3: a tensor whose shape does not fit the built parameter ------------------------------------
# The weight loaders assert (sglang 0.5.23 layers/vocab_parallel_embedding.py:436-441,
# model_loader/weight_utils.py:1574-1585; vllm 0.32.0 model_loader/weight_utils.py:1476-1487,
# layers/linear.py:401-407). Oracles: sf.vd.small (SGLang lm_head, vLLM d2t), sf.aux.two_fc3 (fc),
# sf.vd.null in SGLang (a [Vd, H] head into the [V, H] head it builds on null).
@pytest.mark.parametrize(
    "vid, engine, tensor",
    [
        ("sf.vd.small", "sglang", "lm_head.weight"),
        ("sf.vd.small", "vllm", "d2t"),
        ("sf.aux.two_fc3", "sglang", "fc.weight"),
        ("sf.aux.two_fc3", "vllm", "fc.weight"),
        ("sf.vd.null", "sglang", "lm_head.weight"),
    ],
)
def test_r3_shape_mismatch_stops_the_load(served, vid, engine, tensor):
    e = served(vid, engine)
    assert fate(e, tensor) == "error"
    assert not e["starts"] and e["fails"]["stage"] == "load" and e["fails"]["subject"] == tensor


# --- R7, R10, R11, R12, R5, R6 ---------------------------------------------------------------------
def test_r7_vllm_takes_only_a_bare_d2t(served):
    # vllm 0.32.0 models/llama_eagle3.py:428-430, 443-444; oracle sf.wrap.model: model.d2t error
    assert fate(served("sf.wrap.model", "vllm"), "model.d2t") == "error"
    assert fate(served("sf.wrap.model", "sglang"), "model.d2t") == "special"


def test_r10_vllm_reads_a_null_draft_vocab_as_absent(served):
    # vllm 0.32.0 models/llama_eagle3.py:312-316; oracle sf.vd.null: draft_vocab_size 512
    e = served("sf.vd.null", "vllm")
    assert e["config"]["draft_vocab_size"]["value"] == 512 and e["draft_vocab"]["size"] == 512


def test_r11_speculators_adapter_overrides(served):
    # vllm 0.32.0 transformers_utils/configs/speculators/algos.py:30-50; oracle st.vd.in_layer:
    # draft_vocab_size only in transformer_layer_config -> V, and the d2t fails
    e = served("st.vd.in_layer", "vllm")
    assert e["draft_vocab"]["size"] == 512 and not e["starts"]
    assert fate(e, "d2t") == "error"


def test_r12_attention_bias_does_not_crash(served):
    # oracle sf.flag.attn_bias: vLLM starts; the q/k/v bias shards are parameters and load
    e = served("sf.flag.attn_bias", "vllm")
    assert e["starts"]
    assert state(e, "model.layers.0.self_attn.qkv_proj.bias[q]") == "loaded"


def test_r5_pre_fused_names_load_whole(served):
    # sglang 0.5.23 models/llama_eagle3.py:370-378, vllm 0.32.0 layers/linear.py:772 (shard id None)
    for engine in ("sglang", "vllm"):
        e = served("sf.extra.gate_up", engine)
        assert e["starts"] and fate(e, "midlayer.mlp.gate_up_proj.weight") == "loaded"


def test_r6_bias_ignored_only_under_an_existing_module(served):
    # vllm 0.32.0 models/utils.py:425-447: oracle sf.typo.o_as_bias fails, sf.extra fc.bias is ignored
    assert fate(served("sf.typo.o_as_bias", "vllm"), "midlayer.self_attn.o_prj.bias") == "error"


# --- R16: config values the engine rejects while building ------------------------------------------
@pytest.mark.parametrize(
    "vid, engine, stage",
    [
        ("sf.flag.th_null", "sglang", "build"),  # llama_eagle3.py:151-154 (None * n)
        ("sf.flag.th_null", "vllm", "build"),  # llama_eagle3.py:218-221
        ("sf.vd.string", "sglang", "build"),
        ("sf.vd.string", "vllm", "build"),
        ("sf.tie.vd_null", "sglang", "build"),  # llama_eagle3.py:303-320, strict LlamaConfig
        ("sf.aux.string", "sglang", "config"),  # llama.py:941 val + 1
        ("st.nl.2", "vllm", "config"),  # transformers validate_layer_type
    ],
)
def test_r16_rejected_config_values(served, vid, engine, stage):
    e = served(vid, engine)
    assert not e["starts"] and e["fails"]["stage"] == stage


# --- R15: which duplicate wins ------------------------------------------------------------------
def test_r15_the_last_in_sorted_order_wins(served):
    # sglang 0.5.23 / vllm 0.32.0 model_loader/weight_utils.py (names sorted within a file);
    # oracles sf.dup.down: midlayer.mlp.down_proj.weight ends in the parameter
    for engine in ("sglang", "vllm"):
        e = served("sf.dup.down", engine)
        p = next(p for p in e["parameters"] if p["param"] == "model.layers.0.mlp.down_proj.weight")
        assert p["winner"] == "midlayer.mlp.down_proj.weight"


def test_tied_head_and_draft_vocab(served):
    # SGLang: tie_word_embeddings -> no lm_head parameter (llama_eagle3.py:300-314); vLLM never ties
    assert served("sf.tie.head", "sglang")["tied_head"] is True
    assert served("sf.tie.head", "vllm")["tied_head"] is False
    e = served("sf.asis", "sglang")
    assert e["draft_vocab"] == {"size": 128, "from": "draft_vocab_size"}


# --- R17: the MLP weight loaders narrow, they do not assert (issue #21 corpus) --------------------
# A gate/up/down tensor longer than the parameter along the loader's shard dim loads its leading
# slice in both engines; a shorter one fails vLLM's narrow and is zero-filled by SGLang on CPU.
# vllm 0.32.0 model_executor/layers/linear.py:846-866 (MergedColumnParallelLinear), :1735-1750
# (RowParallelLinear); sglang 0.5.23 srt/layers/linear.py:840-856, :1668-1687 with
# model_loader/weight_utils.py:1995-2029. Oracles: sf.cfg.inter64 (both start), sf.cfg.inter256
# (SGLang starts, vLLM fails at load).
@pytest.mark.parametrize(
    "vid, engine, starts",
    [
        ("sf.cfg.inter64", "sglang", True),
        ("sf.cfg.inter64", "vllm", True),
        ("st.cfg.inter64", "vllm", True),
        ("sf.cfg.inter256", "sglang", True),
        ("sf.cfg.inter256", "vllm", False),
    ],
)
def test_r17_mlp_loaders_narrow(served, vid, engine, starts):
    e = served(vid, engine)
    lp = corpus.LAYER[VARIANTS[vid].base]
    down = fate(e, lp + "mlp.down_proj.weight")
    assert e["starts"] is starts
    if starts:
        assert down == "loaded"
        assert state(e, "model.layers.0.mlp.down_proj.weight") == "loaded"
    else:
        assert "error" in {down, fate(e, lp + "mlp.gate_proj.weight")}


# --- R18: vLLM's speculators config is not validated: true where an integer is read is 1 --------
# vllm 0.32.0 transformers_utils/configs/speculators/base.py:18-30 (setattr, no strict LlamaConfig);
# oracle st.jtype.inter_bool: vLLM builds a 1-wide MLP and starts; the SpecForge config with the
# same value fails at config in both engines (transformers' strict LlamaConfig).
def test_r18_vllm_speculators_reads_a_boolean_as_an_integer(served):
    e = served("st.jtype.inter_bool", "vllm")
    assert e["starts"], e.get("fails")
    assert state(e, "model.layers.0.mlp.gate_up_proj.weight[0]") == "loaded"
    assert not served("sf.jtype.inter_bool", "vllm")["starts"]
    assert not served("sf.jtype.inter_bool", "sglang")["starts"]


# --- R19: vLLM shares the target's embedding only when it is as wide as the draft's -------------
# vllm 0.32.0 v1/spec_decode/llm_base_proposer.py:1474-1496 (_maybe_share_embeddings, V1 runner);
# oracle sf.narrow.32.noembed: hidden 32, no embed_tokens -> model.embed_tokens stays at init.
def test_r19_vllm_shares_the_embedding_only_at_equal_width(served):
    e = served("sf.narrow.32.noembed", "vllm")
    assert state(e, "model.embed_tokens.weight") == "random"
    assert state(served("sf.asis", "vllm"), "model.embed_tokens.weight") == "from_target"
    own = served("sf.narrow.32", "vllm")
    assert state(own, "model.embed_tokens.weight") == "loaded"
