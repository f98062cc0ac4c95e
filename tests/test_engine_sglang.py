"""The SGLang oracle: what SGLang 0.5.23's own code does with a drafter checkpoint, on CPU.

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_engine_sglang.py``. SGLang runs in its side venv
(``bash tests/engine/setup_sglang_venv.sh``; docs/engine-test.md "SGLang oracle"): the interpreter
named by WEIGHTCHECK_SGLANG_PYTHON, else ``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/sglang/
bin/python``. Without one every test here is skipped. WEIGHTCHECK_ORACLE_REPORT=FILE keeps every
record (JSON).

One subprocess runs tests/engine/sglang_oracle.py over every drafter below (SGLang imported and
the target loaded once): SGLang's server-args and draft-config handling, model-class and loader
selection, its weight iterator and ``LlamaForCausalLMEagle3.load_weights`` with every parameter
NaN beforehand, then the EAGLE worker's startup step that binds the target's embedding (and head).
The drafters: variants of a SpecForge-layout drafter written by tests/engine/drafters.py (made
here by rewriting the safetensors file with the standard library), the producer-written fixtures
under tests/fixtures/producers/, and their copies made by
``python -m weightcheck convert SRC OUT --to sglang``.

What SGLang does is the truth here; where it differs from what one might expect the test says so.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
from conftest import PRODUCERS, ROOT
from helpers.engine import (
    PRODUCER_FIXTURES,
    assert_record_schema,
    convert_copy,
    keep_oracle_report,
    read_st,
    run_oracle,
    side_python,
    variant,
    write_st,
)

pytestmark = pytest.mark.engine

ENGINE_DIR = ROOT / "tests" / "engine"
TARGET = PRODUCERS / "target-llama"
# raw speculators configs (no model_type): SGLang cannot parse them; convert makes them loadable
SPECULATORS = {"speculators-train", "speculators-convert"}
# convert --to sglang refuses these on purpose (mappings/engines/sglang.toml [[output.refuse]])
CONVERT_REFUSED = {"speculators-train": "norm_before_residual"}
ORACLE_TIMEOUT = 1200
QKV = "model.layers.0.self_attn.qkv_proj.weight"
GATE_UP = "model.layers.0.mlp.gate_up_proj.weight"
DOWN = "model.layers.0.mlp.down_proj.weight"
# a checkpoint key's fate; "warned": dropped, and SGLang logged a WARNING while processing it
FATES = {"loaded", "dropped", "warned", "error", "not_reached"}


def sglang_python() -> str:
    return side_python("sglang")


def _convert(src: pathlib.Path, out: pathlib.Path, to: str):
    """``python -m weightcheck convert SRC OUT --to TO --target target-llama`` (a subprocess):
    OUT, or the CompletedProcess of a refusal expected by CONVERT_REFUSED."""
    p = convert_copy(src, out, to, TARGET)
    if src.name in CONVERT_REFUSED and p.returncode != 0:
        return p
    assert p.returncode == 0, (
        f"convert {src.name} --to {to} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    )
    return out


# --- the one oracle run ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """name -> the oracle's JSON record (with the "sglang" details) for every drafter here."""
    sglang_python()  # skips every test here without the side venv
    sys.path.insert(0, str(ENGINE_DIR))
    try:
        import drafters
    finally:
        sys.path.remove(str(ENGINE_DIR))
    root = tmp_path_factory.mktemp("sglang-oracle")
    base = root / "base"
    drafters.write_constant_drafter(str(base), 361)
    meta, data, info = read_st(base / "model.safetensors")
    dn = "midlayer.mlp.down_proj.weight"
    zeros_down = (info[dn]["dtype"], info[dn]["shape"], bytes(len(data[dn])))
    lm = info["lm_head.weight"]

    v = {"base": base}
    v["typo"] = variant(base, root / "typo", rename={dn: "midlayer.mlp.down_prj.weight"})
    v["typo_q"] = variant(
        base,
        root / "typo_q",
        rename={"midlayer.self_attn.q_proj.weight": "midlayer.self_attn.q_prj.weight"},
    )
    v["no_lm_head"] = variant(base, root / "no_lm_head", drop={"lm_head.weight"})
    v["no_d2t"] = variant(base, root / "no_d2t", drop={"d2t", "t2d"})
    v["no_k_proj"] = variant(base, root / "no_k_proj", drop={"midlayer.self_attn.k_proj.weight"})
    # the same parameter twice: layers.0.* after midlayer.* in the file, and before it
    v["dup_after"] = variant(
        base, root / "dup_after", add={"layers.0.mlp.down_proj.weight": zeros_down}
    )
    v["dup_before"] = variant(
        base, root / "dup_before", first={"layers.0.mlp.down_proj.weight": zeros_down}
    )
    # ... and in two shards, the layers.0 copy in the second file (no index: SGLang globs *.safetensors)
    two = variant(base, root / "dup_shards", drop={dn})
    write_st(
        two / "model-00002-of-00002.safetensors",
        {"format": "pt"},
        {"layers.0.mlp.down_proj.weight": zeros_down[2]},
        {"layers.0.mlp.down_proj.weight": {"dtype": zeros_down[0], "shape": zeros_down[1]}},
    )
    write_st(
        two / "model-00001-of-00002.safetensors", {"format": "pt"}, {dn: data[dn]}, {dn: info[dn]}
    )
    (two / "model.safetensors").rename(two / "model-00000-of-00002.safetensors")
    v["dup_shards"] = two
    v["no_draft_vocab"] = variant(base, root / "no_draft_vocab", drop_config={"draft_vocab_size"})
    v["null_draft_vocab"] = variant(
        base, root / "null_draft_vocab", drop={"lm_head.weight"}, config={"draft_vocab_size": None}
    )
    v["null_draft_vocab_own_head"] = variant(
        base, root / "null_draft_vocab_own_head", config={"draft_vocab_size": None}
    )
    v["fp32_config"] = variant(
        base, root / "fp32_config", config={"torch_dtype": "float32", "dtype": "float32"}
    )
    v["model_prefix"] = variant(
        base,
        root / "model_prefix",
        rename=lambda n: n if n in ("lm_head.weight", "d2t", "t2d") else "model." + n,
    )
    v["model_lm_head"] = variant(
        base, root / "model_lm_head", rename={"lm_head.weight": "model.lm_head.weight"}
    )
    v["layers0"] = variant(
        base, root / "layers0", rename=lambda n: n.replace("midlayer.", "layers.0.")
    )
    v["with_embed"] = variant(
        base,
        root / "with_embed",
        add={"embed_tokens.weight": (lm["dtype"], [512, 64], bytes(512 * 64 * 2))},
    )
    v["no_aux"] = variant(
        base,
        root / "no_aux",
        config={
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
                "use_aux_hidden_state": False,
            }
        },
    )
    v["no_aux_ids"] = variant(
        base, root / "no_aux_ids", config={"eagle_config": {"use_aux_hidden_state": True}}
    )
    v["top_level_aux_ids"] = variant(
        base,
        root / "top_level_aux_ids",
        drop_config={"eagle_config"},
        config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
    )
    v["top_level_two_ids"] = variant(
        base,
        root / "top_level_two_ids",
        drop_config={"eagle_config"},
        config={"eagle_aux_hidden_state_layer_ids": [0, 1]},
        drop={"fc.weight"},
        add={"fc.weight": ("BF16", [64, 128], bytes(64 * 128 * 2))},
    )
    v["aux_unsorted"] = variant(
        base,
        root / "aux_unsorted",
        config={
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": [2, 0, 1],
                "use_aux_hidden_state": True,
            }
        },
    )
    v["tied"] = variant(base, root / "tied", config={"tie_word_embeddings": True})
    v["two_layers"] = variant(base, root / "two_layers", config={"num_hidden_layers": 2})
    v["llama_arch"] = variant(
        base, root / "llama_arch", config={"architectures": ["LlamaForCausalLM"]}
    )
    v["tied_no_draft_vocab"] = variant(
        base,
        root / "tied_no_draft_vocab",
        drop_config={"draft_vocab_size"},
        config={"tie_word_embeddings": True},
    )
    v["tied_null_draft_vocab"] = variant(
        base,
        root / "tied_null_draft_vocab",
        config={"tie_word_embeddings": True, "draft_vocab_size": None},
    )
    emb = ("BF16", [512, 64], bytes(512 * 64 * 2))
    v["target_hidden_32"] = variant(
        base,
        root / "target_hidden_32",
        config={"target_hidden_size": 32},
        drop={"fc.weight"},
        add={"fc.weight": ("BF16", [64, 96], bytes(64 * 96 * 2)), "embed_tokens.weight": emb},
    )
    h = ("BF16", [64], bytes(128))
    extras = {
        "input_norm.weight": ("BF16", [192], bytes(384)),
        "aux_norm_low.weight": h,
        "aux_norm_mid.weight": h,
        "aux_norm_high.weight": h,
        "fc.bias": h,
        "midlayer.self_attn.o_proj.bias": h,
        "midlayer.self_attn.q_proj.bias": h,
    }
    v["extras_off"] = variant(base, root / "extras_off", add=extras)
    eagle = json.loads((base / "config.json").read_text())["eagle_config"]
    v["extras_on"] = variant(
        base,
        root / "extras_on",
        add=extras,
        config={
            "eagle_config": dict(eagle, norm_before_fc=True),
            "use_aux_norm": True,
            "bias": True,
        },
    )
    v["no_config"] = variant(base, root / "no_config")
    (v["no_config"] / "config.json").unlink()
    refused = {}
    for name in PRODUCER_FIXTURES:
        v[name] = PRODUCERS / name
        out = _convert(PRODUCERS / name, root / f"{name}--to-sglang", "sglang")
        if isinstance(out, pathlib.Path):
            v[f"{name}--to-sglang"] = out
        else:
            refused[f"{name}--to-sglang"] = {"refused": out.returncode, "stderr": out.stderr}

    args = ["--details", "--target", str(TARGET)]
    recs, wall, p = run_oracle("sglang", v, root, args, ORACLE_TIMEOUT)
    per = [r["sglang"]["seconds"] for r in recs.values()]
    recs.update(refused)
    print(
        f"\nSGLang oracle: {len(v)} drafters in {wall:.1f} s "
        f"(per drafter: max {max(per):.2f} s, mean {sum(per) / len(per):.2f} s)"
    )
    keep_oracle_report(wall, p.stderr.splitlines()[-10:], recs)
    return recs


# --- what "loads fully" means ----------------------------------------------------------------------


def loads_fully(r: dict) -> None:
    """Started; every parameter loaded (equal to the checkpoint) or bound from the target; every
    checkpoint key loaded except t2d (SGLang skips it by name)."""
    assert r["started"], (r["stage"], r["error"], r["sglang"].get("traceback_tail"))
    assert r["architecture"] == "LlamaForCausalLMEagle3"
    bad = {k: v for k, v in r["params"].items() if v["state"] not in ("loaded", "from_target")}
    assert not bad, bad
    neq = {
        k: v
        for k, v in r["params"].items()
        if v["state"] == "loaded" and v["equals_checkpoint"] is not True
    }
    assert not neq, neq
    dropped = [k for k, v in r["keys"].items() if v["fate"] == "dropped" and k != "t2d"]
    assert not dropped, dropped
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"
    assert r["config"]["captured_layers"]


def test_schema(oracle):
    r = oracle["base"]
    assert_record_schema(r, FATES, {"sglang"})
    assert r["oracle"] == "sglang" and r["engine_version"] == "0.5.23"


def test_specforge_layout_loads_fully(oracle):
    r = oracle["base"]
    loads_fully(r)
    assert r["config"] == {
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "vocab_size": 512,
        "draft_vocab_size": 128,
        "dtype": "bfloat16",
        "aux_layer_ids": [0, 1, 2],
        "aux_layer_ids_from": "config",
        "captured_layers": [0, 1, 2],
        "tie_word_embeddings": False,
    }
    # q/k/v and gate/up are stacked into one parameter each, every slice written and equal
    assert r["params"][QKV] == {"shape": [128, 128], "state": "loaded", "equals_checkpoint": True}
    for k in ("q", "k", "v"):
        assert r["keys"][f"midlayer.self_attn.{k}_proj.weight"]["params"] == [QKV]
        assert r["sglang"]["shards"][f"midlayer.self_attn.{k}_proj.weight"] == k
    assert r["params"][GATE_UP] == {
        "shape": [256, 64],
        "state": "loaded",
        "equals_checkpoint": True,
    }
    assert r["keys"]["midlayer.mlp.gate_proj.weight"]["params"] == [GATE_UP]
    assert r["keys"]["midlayer.mlp.up_proj.weight"]["params"] == [GATE_UP]
    assert r["params"]["model.fc.weight"]["shape"] == [64, 192]
    assert r["params"]["lm_head.weight"] == {
        "shape": [128, 64],
        "state": "loaded",
        "equals_checkpoint": True,
    }
    # the embedding is not in the checkpoint: the target's is bound at startup (set_embed)
    assert r["params"]["model.embed_tokens.weight"] == {
        "shape": [512, 64],
        "state": "from_target",
        "equals_checkpoint": None,
    }


def test_d2t_becomes_hot_token_id_and_t2d_is_skipped_by_name(oracle):
    """sglang 0.5.23 models/llama_eagle3.py load_weights: ``if "d2t" in name``: hot_token_id =
    d2t + arange; ``if "t2d" in name: continue``."""
    r = oracle["base"]
    assert r["d2t"] == {"present": True, "consumed_as": "hot_token_id"}
    assert r["keys"]["d2t"] == {"fate": "loaded", "params": ["hot_token_id"]}
    assert r["sglang"]["hot_token_id_len"] == 128
    assert r["t2d"] == {"present": True, "consumed_as": None}
    assert r["keys"]["t2d"] == {"fate": "dropped", "params": []}
    r = oracle["no_d2t"]
    assert r["started"] and r["d2t"] == {"present": False, "consumed_as": None}
    assert r["sglang"]["hot_token_id_len"] is None


def test_typo_key_is_dropped_silently_and_its_rows_stay_at_init(oracle):
    """No error, no warning: ``if param_name in params_dict:`` has no else branch."""
    r = oracle["typo"]
    assert r["started"], r["error"]
    assert r["keys"]["midlayer.mlp.down_prj.weight"] == {"fate": "dropped", "params": []}
    assert r["params"][DOWN] == {"shape": [64, 128], "state": "init", "equals_checkpoint": None}
    # a typo in one slice of a stacked parameter: the q rows stay at init, k and v are loaded
    r = oracle["typo_q"]
    assert r["started"], r["error"]
    assert r["keys"]["midlayer.self_attn.q_prj.weight"] == {"fate": "dropped", "params": []}
    assert r["params"][QKV] == {"shape": [128, 128], "state": "partial", "equals_checkpoint": True}


def test_missing_k_proj_leaves_its_slice_at_init(oracle):
    r = oracle["no_k_proj"]
    assert r["started"], r["error"]
    assert r["params"][QKV] == {"shape": [128, 128], "state": "partial", "equals_checkpoint": True}


def test_missing_lm_head_stays_at_init(oracle):
    """draft_vocab_size is a number: lm_head is the drafter's own [Vd, H] head; without it in the
    checkpoint nothing fills it and the startup step does not replace it."""
    r = oracle["no_lm_head"]
    assert r["started"], r["error"]
    assert r["params"]["lm_head.weight"] == {
        "shape": [128, 64],
        "state": "init",
        "equals_checkpoint": None,
    }
    assert r["sglang"]["load_lm_head_from_target"] is False


def test_duplicate_is_overwritten_silently_in_sorted_name_order(oracle):
    """midlayer.X and layers.0.X both load into one parameter, no error. SGLang's weight
    iterator yields each shard's names SORTED (model_loader/weight_utils.py
    buffered_multi_thread_safetensors_weights_iterator: ``for name in sorted(state_dict.keys())``),
    so within one file ``midlayer.*`` always wins over ``layers.0.*``, wherever each sits in the
    file; across shards the later file wins."""
    for name in ("dup_after", "dup_before"):
        r = oracle[name]
        assert r["started"], r["error"]
        assert r["keys"]["midlayer.mlp.down_proj.weight"] == {"fate": "loaded", "params": [DOWN]}
        assert r["keys"]["layers.0.mlp.down_proj.weight"] == {"fate": "loaded", "params": [DOWN]}
        assert r["sglang"]["writers"][DOWN] == [
            "layers.0.mlp.down_proj.weight",
            "midlayer.mlp.down_proj.weight",
        ], name
        assert r["params"][DOWN]["equals_checkpoint"] is True  # = the last writer, midlayer's
    r = oracle["dup_shards"]
    assert r["started"], r["error"]
    assert r["sglang"]["writers"][DOWN] == [
        "midlayer.mlp.down_proj.weight",
        "layers.0.mlp.down_proj.weight",
    ]


def test_draft_vocab_size_absent_fails_at_model_build(oracle):
    """``config.draft_vocab_size`` is read as an attribute (models/llama_eagle3.py
    LlamaForCausalLMEagle3.__init__); transformers 5.19's LlamaConfig has none."""
    r = oracle["no_draft_vocab"]
    assert (r["started"], r["stage"]) == (False, "build")
    assert r["error"].startswith("AttributeError: "), r["error"]
    assert "draft_vocab_size" in r["error"]
    assert r["config"]["draft_vocab_size"] is None


def test_draft_vocab_size_null_borrows_the_target_head(oracle):
    """``draft_vocab_size: null`` -> Vd = V and load_lm_head_from_target: the EAGLE worker binds
    the target's embedding AND head (eagle_worker_v2.py init_lm_head -> set_embed_and_head)."""
    r = oracle["null_draft_vocab"]
    assert r["started"], r["error"]
    assert r["sglang"]["load_lm_head_from_target"] is True
    assert r["config"]["draft_vocab_size"] is None
    assert r["params"]["lm_head.weight"] == {
        "shape": [512, 64],
        "state": "from_target",
        "equals_checkpoint": None,
    }
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"
    # d2t is still read: hot_token_id has Vd=128 entries next to a 512-row head
    assert r["sglang"]["hot_token_id_len"] == 128


def test_draft_vocab_size_null_with_own_head_fails_at_load(oracle):
    """The head is built [V, H]; the checkpoint's [Vd, H] lm_head trips the vocab-parallel
    weight loader's shape assertion (layers/vocab_parallel_embedding.py weight_loader)."""
    r = oracle["null_draft_vocab_own_head"]
    assert (r["started"], r["stage"]) == (False, "load")
    assert r["error"].startswith("AssertionError: self.org_vocab_size=512 "), r["error"]
    # the tensor it stopped on is an error; the ones after it were never reached
    assert r["keys"]["lm_head.weight"] == {"fate": "error", "params": []}
    after = list(r["keys"])[list(r["keys"]).index("lm_head.weight") + 1 :]
    assert after and all(r["keys"][k]["fate"] == "not_reached" for k in after), after
    assert r["params"]["lm_head.weight"] == {
        "shape": [512, 64],
        "state": "init",
        "equals_checkpoint": None,
    }
    # the keys sorted before lm_head.weight were loaded when it stopped
    assert r["sglang"]["key_order"][:3] == ["d2t", "fc.weight", "lm_head.weight"]
    assert r["params"]["model.fc.weight"] == {
        "shape": [64, 192],
        "state": "loaded",
        "equals_checkpoint": True,
    }
    assert r["params"][QKV]["state"] == "init"


def test_float32_config_is_built_in_float16(oracle):
    """dtype "auto": a float32 config is served in float16 (configs/model_config.py
    _get_and_verify_dtype); the weights are cast on load."""
    r = oracle["fp32_config"]
    assert r["started"], r["error"]
    assert r["config"]["dtype"] == "float16"
    assert all(v["equals_checkpoint"] for v in r["params"].values() if v["state"] == "loaded")


def test_name_as_written_before_model_prefix(oracle):
    """``name if name in params_dict else f"model.{name}"``: model.* names load as written,
    bare names get model. prepended, lm_head.weight loads as written, model.lm_head.weight is no
    parameter (model.model.lm_head neither) and is dropped."""
    loads_fully(oracle["model_prefix"])
    assert oracle["model_prefix"]["keys"]["model.fc.weight"]["params"] == ["model.fc.weight"]
    assert oracle["base"]["keys"]["fc.weight"]["params"] == ["model.fc.weight"]
    assert oracle["base"]["keys"]["lm_head.weight"]["params"] == ["lm_head.weight"]
    r = oracle["model_lm_head"]
    assert r["started"], r["error"]
    assert r["keys"]["model.lm_head.weight"] == {"fate": "dropped", "params": []}
    assert r["params"]["lm_head.weight"]["state"] == "init"


def test_layers0_names_load_like_midlayer(oracle):
    r = oracle["layers0"]
    loads_fully(r)
    assert r["keys"]["layers.0.self_attn.q_proj.weight"]["params"] == [QKV]


def test_checkpoint_embedding_is_loaded_then_replaced_by_the_target(oracle):
    """embed_tokens.weight in the checkpoint is written, then set_embed binds the target's
    (hidden sizes equal): the drafter runs with the target's embedding, not its own."""
    r = oracle["with_embed"]
    assert r["started"], r["error"]
    assert r["keys"]["embed_tokens.weight"] == {
        "fate": "loaded",
        "params": ["model.embed_tokens.weight"],
    }
    assert r["params"]["model.embed_tokens.weight"] == {
        "shape": [512, 64],
        "state": "from_target",
        "equals_checkpoint": False,
    }


def test_tied_head_still_needs_a_numeric_draft_vocab_size(oracle):
    """``config_.vocab_size = config_.draft_vocab_size`` runs for tied heads too
    (models/llama_eagle3.py:316-319): absent -> AttributeError; null is not replaced by V on the
    tied branch, so transformers 5.19's strict LlamaConfig rejects vocab_size = None."""
    r = oracle["tied_no_draft_vocab"]
    assert (r["started"], r["stage"]) == (False, "build")
    assert r["error"] == "AttributeError: 'LlamaConfig' object has no attribute 'draft_vocab_size'"
    r = oracle["tied_null_draft_vocab"]
    assert (r["started"], r["stage"]) == (False, "build")
    assert r["error"].startswith("StrictDataclassFieldValidationError: "), r["error"]
    assert "vocab_size" in r["error"]


def test_target_hidden_size_differs_keeps_the_checkpoint_embedding(oracle):
    """set_embed returns early when target_hidden_size != hidden_size (models/llama.py set_embed):
    the drafter runs with its own embed_tokens, and fc takes 3*T inputs."""
    r = oracle["target_hidden_32"]
    assert r["started"], r["error"]
    assert r["params"]["model.fc.weight"] == {
        "shape": [64, 96],
        "state": "loaded",
        "equals_checkpoint": True,
    }
    assert r["params"]["model.embed_tokens.weight"] == {
        "shape": [512, 64],
        "state": "loaded",
        "equals_checkpoint": True,
    }


def test_conditional_parameters(oracle):
    """input_norm only with norm_before_fc (eagle_config), fc_norm.* (legacy aux_norm_* names
    rewritten) only with use_aux_norm/fc_norm, fc.bias and o_proj.bias only with ``bias``;
    q/k/v biases never (qkv_proj is rebuilt with bias=False). Without the flag: dropped silently."""
    off = oracle["extras_off"]
    assert off["started"], off["error"]
    for k in (
        "input_norm.weight",
        "aux_norm_low.weight",
        "aux_norm_mid.weight",
        "aux_norm_high.weight",
        "fc.bias",
        "midlayer.self_attn.o_proj.bias",
        "midlayer.self_attn.q_proj.bias",
    ):
        assert off["keys"][k] == {"fate": "dropped", "params": []}, k
    on = oracle["extras_on"]
    assert on["started"], on["error"]
    assert on["keys"]["input_norm.weight"]["params"] == ["model.input_norm.weight"]
    assert on["params"]["model.input_norm.weight"]["shape"] == [192]
    for i, k in enumerate(("low", "mid", "high")):
        assert on["keys"][f"aux_norm_{k}.weight"]["params"] == [f"model.fc_norm.{i}.weight"]
    assert on["keys"]["fc.bias"]["params"] == ["model.fc.bias"]
    assert on["keys"]["midlayer.self_attn.o_proj.bias"]["params"] == [
        "model.layers.0.self_attn.o_proj.bias"
    ]
    assert on["keys"]["midlayer.self_attn.q_proj.bias"] == {"fate": "dropped", "params": []}
    assert all(v["state"] in ("loaded", "from_target") for v in on["params"].values())


def test_aux_ids(oracle):
    """eagle_config ids: SGLang captures the input of layer id+1 = the output of layer id
    (models/llama.py set_eagle3_layers_to_capture). No ids: layers_to_capture = [2, L//2, L-3]
    (ids [1, 1, 0] for this 4-layer target: two distinct layers captured, fc expects three).
    A top-level eagle_aux_hidden_state_layer_ids is not read for capture. Capture happens in layer
    order, once per layer, whatever the order of the ids."""
    assert oracle["base"]["sglang"]["layers_to_capture"] == [1, 2, 3]
    none = oracle["no_aux_ids"]
    assert none["started"], none["error"]
    assert none["config"]["aux_layer_ids_from"] == "default"
    assert none["sglang"]["layers_to_capture"] == [2, 2, 1]
    assert none["config"]["aux_layer_ids"] == [1, 1, 0]
    assert none["config"]["captured_layers"] == [0, 1]
    top = oracle["top_level_aux_ids"]
    assert top["started"], top["error"]
    assert top["config"]["aux_layer_ids_from"] == "default"
    assert top["config"]["captured_layers"] == [0, 1]
    uns = oracle["aux_unsorted"]["config"]
    assert uns["aux_layer_ids"] == [2, 0, 1] and uns["captured_layers"] == [0, 1, 2]
    assert uns["aux_layer_ids_from"] == "config"


def test_no_aux_hidden_states_capture_nothing(oracle):
    """use_aux_hidden_state false: the target captures nothing; the record says null (never
    ``[]``) for the ids, where they came from, and the captured layers."""
    r = oracle["no_aux"]
    assert r["started"], r["error"]
    cfg = r["config"]
    assert (cfg["aux_layer_ids"], cfg["aux_layer_ids_from"], cfg["captured_layers"]) == (
        None,
        None,
        None,
    )


def test_top_level_aux_ids_do_not_size_fc(oracle):
    """fc's width is num_aux_hidden_states, else len(eagle_config ids), else 3
    (models/llama_eagle3.py:156-167): two top-level ids and a [H, 2H] fc fail at load."""
    r = oracle["top_level_two_ids"]
    assert (r["started"], r["stage"]) == (False, "load")
    assert r["error"] == (
        "AssertionError: Attempted to load weight (torch.Size([64, 128])) into parameter "
        "(torch.Size([64, 192]))"
    )
    assert r["params"]["model.fc.weight"]["shape"] == [64, 192]


def test_tied_head_is_the_embedding_which_comes_from_the_target(oracle):
    """tie_word_embeddings: lm_head IS model.embed_tokens ([V, H]); the checkpoint's lm_head.weight
    matches no parameter and is dropped; after set_embed the head is the target's embedding."""
    r = oracle["tied"]
    assert r["started"], r["error"]
    assert r["config"]["tie_word_embeddings"] is True
    assert "lm_head.weight" not in r["params"]
    assert r["keys"]["lm_head.weight"] == {"fate": "dropped", "params": []}
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"


def test_two_layers_config_with_one_layer_of_weights(oracle):
    r = oracle["two_layers"]
    assert r["started"], r["error"]
    layer1 = {k: v for k, v in r["params"].items() if k.startswith("model.layers.1.")}
    assert layer1 and all(v["state"] == "init" for v in layer1.values()), layer1
    assert layer1["model.layers.1.self_attn.qkv_proj.weight"]["shape"] == [128, 64]


def test_llama_architecture_is_built_as_the_target_class(oracle):
    """architectures ["LlamaForCausalLM"]: the registry gives the plain LlamaForCausalLM, whose
    loader drops the EAGLE-3 names it does not know."""
    r = oracle["llama_arch"]
    assert r["architecture"] == "LlamaForCausalLM", (r["stage"], r["error"])
    assert (r["started"], r["stage"]) == (False, "load")
    # its head is [V, H]: the drafter's [Vd, H] lm_head trips the shape assertion; what came
    # before it in sorted order (d2t, fc.weight) matched nothing
    assert r["error"].startswith("AssertionError: self.org_vocab_size=512 "), r["error"]
    # LlamaForCausalLM.load_weights logs "Parameter X not found in params_dict" for both
    for k in ("d2t", "fc.weight"):
        assert r["keys"][k] == {
            "fate": "warned",
            "params": [],
            "warning": f"Parameter {k} not found in params_dict",
        }, r["keys"][k]
    assert r["keys"]["lm_head.weight"] == {"fate": "error", "params": []}
    assert r["keys"]["norm.weight"] == {"fate": "not_reached", "params": []}


def test_failure_stages(oracle):
    r = oracle["no_config"]
    assert (r["started"], r["stage"], r["architecture"]) == (False, "config", None)
    # every checkpoint tensor is listed, none was reached
    assert r["params"] == {} and r["keys"]
    assert all(v == {"fate": "not_reached", "params": []} for v in r["keys"].values())
    assert r["d2t"] == {"present": True, "consumed_as": None}


def test_raw_speculators_config_is_rejected_at_config_parsing(oracle):
    for name in sorted(SPECULATORS):
        r = oracle[name]
        assert (r["started"], r["stage"], r["architecture"]) == (False, "config", None), name
        assert r["error"].startswith("ValueError: Unrecognized model in "), r["error"]
        assert "model_type" in r["error"]


# what SGLang captures for each producer fixture as written, and for its --to sglang copy
CAPTURED = {
    "specforge-sglang": ([0, 1, 2], [0, 1, 2]),
    "specforge-hf": ([0, 1, 2], [0, 1, 2]),
    "modelopt": ([0, 1, 2], [0, 1, 2]),
    "modelopt-default-aux": ([0, 1], [0, 1]),
    "modelopt-fullvocab-fp32": ([0, 1, 2], [0, 1, 2]),
}
CAPTURED_CONVERTED = dict(CAPTURED)
CAPTURED_CONVERTED["speculators-train"] = ([0, 1, 2], [0, 1, 2])
CAPTURED_CONVERTED["speculators-convert"] = None  # ids lost by the producer: checked below


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_producer_fixture_loads_fully(oracle, name):
    r = oracle[name]
    loads_fully(r)
    ids, captured = CAPTURED[name]
    assert (r["config"]["aux_layer_ids"], r["config"]["captured_layers"]) == (ids, captured)
    if name == "specforge-hf":  # its embed_tokens is the target's: loaded, then bound anyway
        assert r["keys"]["embed_tokens.weight"]["fate"] == "loaded"
        assert r["params"]["model.embed_tokens.weight"]["equals_checkpoint"] is True
    if name == "modelopt-fullvocab-fp32":  # F32 tensors, config says bfloat16: cast on load
        assert r["config"]["dtype"] == "bfloat16" and r["config"]["draft_vocab_size"] == 512
        assert r["t2d"]["present"] is False and r["d2t"]["present"] is False


@pytest.mark.parametrize("name", PRODUCER_FIXTURES)
def test_convert_to_sglang_loads_fully(oracle, name):
    """``weightcheck convert SRC OUT --to sglang`` of every producer fixture: SGLang starts it
    with every parameter loaded (equal to the checkpoint) or bound from the target."""
    r = oracle[f"{name}--to-sglang"]
    if name in CONVERT_REFUSED:
        assert r.get("refused") == 2 and CONVERT_REFUSED[name] in r["stderr"], r
        pytest.skip(f"convert --to sglang refuses {name} ({CONVERT_REFUSED[name]}), as designed")
    loads_fully(r)
    assert any(k.startswith("midlayer.") for k in r["keys"])
    expected = CAPTURED_CONVERTED[name]
    if expected is None:
        assert r["config"]["aux_layer_ids_from"] == "default", r["config"]
    else:
        assert (r["config"]["aux_layer_ids"], r["config"]["captured_layers"]) == expected
