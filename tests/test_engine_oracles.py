"""The engine oracles: what SGLang 0.5.23's and vLLM 0.32.0's own code do with a drafter
checkpoint, on CPU, without serving.

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_engine_oracles.py``. Each engine runs in its side venv
(``bash tests/engine/setup_sglang_venv.sh``, ``bash tests/engine/setup_vllm_venv.sh``;
docs/engine-test.md "SGLang oracle", "vLLM oracle"): the interpreter named by
WEIGHTCHECK_SGLANG_PYTHON / WEIGHTCHECK_VLLM_PYTHON, else
``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/{sglang,vllm}/bin/python``. Without one, every
test of that engine is skipped. WEIGHTCHECK_ORACLE_REPORT=FILE keeps every record (JSON) in
FILE.sglang.json and FILE.vllm.json.

One subprocess per engine runs its oracle (tests/engine/sglang_oracle.py, vllm_oracle.py) over
every drafter below, the engine imported once: the engine's config handling, model-class
selection and construction with every parameter NaN beforehand, its weight iterator and
``load_weights``, then the startup step that binds the target's embedding (and head). The
drafters, the same for both engines: variants of a SpecForge-layout drafter written by
tests/engine/drafters.py (made here by rewriting the safetensors file with the standard library),
the producer-written fixtures under tests/fixtures/producers/, and their copies made by
``python -m weightcheck convert SRC OUT --to ENGINE`` (vLLM: also ``--to speculators``).

A question both engines answer is one test, run once per engine (the ``engine`` fixture and the
``oracle`` records it selects), with each engine's answer in a table next to it; a question
about one engine alone (SGLang's shards, writers, hot_token_id and draft_vocab_size handling;
vLLM's d2t parameter, ...) is a ``test_sglang_*`` or ``test_vllm_*`` test on that engine's
records (the ``sglang`` and ``vllm`` fixtures). Both engines load every drafter; a few are asked
of one engine only. What the engine does is the truth here; where it differs from what one might
expect the test says so. Citations name files of sglang 0.5.23 under sglang/srt/ and of vllm
0.32.0 under vllm/, as installed in the side venvs.
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

ENGINES = ["sglang", "vllm"]
ENGINE_DIR = ROOT / "tests" / "engine"
TARGET = PRODUCERS / "target-llama"
ORACLE_TIMEOUT = 1200
# what each oracle is run with: SGLang's details (key order, writers, shards, ...), vLLM's traceback
ORACLE_ARGS = {
    "sglang": ["--details", "--target", str(TARGET)],
    "vllm": ["--target", str(TARGET), "--traceback"],
}
# the copies ``weightcheck convert --to X`` makes of each producer fixture, per engine
CONVERT_TO = {"sglang": ["sglang"], "vllm": ["vllm", "speculators"]}
# convert refuses these on purpose (mappings/engines/sglang.toml [[output.refuse]])
# copies convert refuses on purpose: (exit status, what the refusal names). speculators-convert
# lost its aux ids: with the 4-layer target both engines' defaults [2, 2, 1] capture two states for
# an fc of three and the first forward fails, so the gate refuses every copy (WC712; the fixture
# itself loads: test_producer_fixture)
CONVERT_REFUSED = {
    "speculators-train--to-sglang": (2, "norm_before_residual"),
    **{
        f"speculators-convert--to-{to}": (1, "WC712 error")
        for to in ("sglang", "vllm", "speculators")
    },
}
QKV = "model.layers.0.self_attn.qkv_proj.weight"
GATE_UP = "model.layers.0.mlp.gate_up_proj.weight"
DOWN = "model.layers.0.mlp.down_proj.weight"


# --- the drafters (the same for both engines) -----------------------------------------------------


def build_variants(root: pathlib.Path) -> dict:
    """name -> folder: the SpecForge-layout base drafter and its variants, and the producer
    fixtures. Some variants were written for one engine's question; both engines load all."""
    sys.path.insert(0, str(ENGINE_DIR))
    try:
        import drafters
    finally:
        sys.path.remove(str(ENGINE_DIR))
    base = root / "base"
    drafters.write_constant_drafter(str(base), 361)
    meta, data, info = read_st(base / "model.safetensors")
    dn = "midlayer.mlp.down_proj.weight"
    zeros_down = (info[dn]["dtype"], info[dn]["shape"], bytes(len(data[dn])))
    h = ("BF16", [64], bytes(128))
    emb = ("BF16", [512, 64], bytes(512 * 64 * 2))

    v = {"base": base}
    # misspelled names: a whole parameter, one q/k/v slice, a .bias under a misspelled module
    v["typo"] = variant(base, root / "typo", rename={dn: "midlayer.mlp.down_prj.weight"})
    v["typo_q"] = variant(
        base,
        root / "typo_q",
        rename={"midlayer.self_attn.q_proj.weight": "midlayer.self_attn.q_prj.weight"},
    )
    v["typo_bias"] = variant(
        base,
        root / "typo_bias",
        rename={"midlayer.self_attn.o_proj.weight": "midlayer.self_attn.o_prj.bias"},
    )
    # missing tensors
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
    # ... and in two shards, the layers.0 copy in the second file (no index: the engines glob
    # *.safetensors)
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
    # draft_vocab_size absent or null, with and without the drafter's own head
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
    # name prefixes
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
    v["model_layers0"] = variant(
        base, root / "model_layers0", rename=lambda n: n.replace("midlayer.", "model.layers.0.")
    )
    v["with_embed"] = variant(base, root / "with_embed", add={"embed_tokens.weight": emb})
    # aux hidden states
    ids_012_off = {"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": False}
    v["no_aux"] = variant(base, root / "no_aux", config={"eagle_config": ids_012_off})
    v["no_aux_ids"] = variant(
        base, root / "no_aux_ids", config={"eagle_config": {"use_aux_hidden_state": True}}
    )
    # a top-level id list next to eagle_config's [0, 1, 2], and alone (eagle_config removed)
    v["top_level_aux_ids"] = variant(
        base, root / "top_level_aux_ids", config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    )
    v["top_level_aux_ids_alone"] = variant(
        base,
        root / "top_level_aux_ids_alone",
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
    ids_201 = {"eagle_aux_hidden_state_layer_ids": [2, 0, 1], "use_aux_hidden_state": True}
    v["aux_unsorted"] = variant(base, root / "aux_unsorted", config={"eagle_config": ids_201})
    # the head, layers and architecture the config asks for
    v["tied"] = variant(base, root / "tied", config={"tie_word_embeddings": True})
    v["tied_no_lm_head"] = variant(
        base,
        root / "tied_no_lm_head",
        drop={"lm_head.weight"},
        config={"tie_word_embeddings": True},
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
    v["two_layers"] = variant(base, root / "two_layers", config={"num_hidden_layers": 2})
    v["llama_arch"] = variant(
        base, root / "llama_arch", config={"architectures": ["LlamaForCausalLM"]}
    )
    v["target_hidden_32"] = variant(
        base,
        root / "target_hidden_32",
        config={"target_hidden_size": 32},
        drop={"fc.weight"},
        add={"fc.weight": ("BF16", [64, 96], bytes(64 * 96 * 2)), "embed_tokens.weight": emb},
    )
    # optional parameters, without and with the config flags that ask for them
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
    v["extra_bias"] = variant(
        base, root / "extra_bias", add={"midlayer.self_attn.o_proj.bias": h, "fc.bias": h}
    )
    # failures before loading
    v["bad_act"] = variant(base, root / "bad_act", config={"hidden_act": "no_such_activation"})
    v["no_config"] = variant(base, root / "no_config")
    (v["no_config"] / "config.json").unlink()
    for name in PRODUCER_FIXTURES:
        v[name] = PRODUCERS / name
    return v


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict:
    return build_variants(tmp_path_factory.mktemp("oracle-variants"))


def run_engine(engine: str, variants: dict, root: pathlib.Path) -> dict:
    """name -> the engine's record, for every variant and the engine's convert copies (one
    oracle process). A copy convert refuses on purpose is a {"refused", "said"} record."""
    side_python(engine)  # skips every test of this engine without its side venv
    dirs = dict(variants)
    refused = {}
    for name in PRODUCER_FIXTURES:
        for to in CONVERT_TO[engine]:
            out = root / f"{name}--to-{to}"
            p = convert_copy(PRODUCERS / name, out, to, TARGET)
            if out.name in CONVERT_REFUSED and p.returncode != 0:
                refused[out.name] = {"refused": p.returncode, "said": p.stdout + p.stderr}
                continue
            assert p.returncode == 0, (
                f"convert {name} --to {to} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
            )
            dirs[out.name] = out
    recs, wall, p = run_oracle(engine, dirs, root, ORACLE_ARGS[engine], ORACLE_TIMEOUT)
    print(f"\n{engine} oracle: {len(dirs)} drafters in {wall:.1f} s")
    keep_oracle_report(engine, wall, p.stderr.splitlines()[-len(dirs) - 2 :], recs)
    recs.update(refused)
    return recs


@pytest.fixture(scope="module")
def sglang(variants, tmp_path_factory) -> dict:
    """SGLang's records (with the "sglang" details)."""
    return run_engine("sglang", variants, tmp_path_factory.mktemp("sglang-oracle"))


@pytest.fixture(scope="module")
def vllm(variants, tmp_path_factory) -> dict:
    """vLLM's records."""
    return run_engine("vllm", variants, tmp_path_factory.mktemp("vllm-oracle"))


@pytest.fixture(scope="module", params=ENGINES)
def engine(request) -> str:
    """The engine a shared question is asked of: every test that takes it runs once per engine."""
    return request.param


@pytest.fixture(scope="module")
def oracle(request, engine) -> dict:
    """The records of ``engine`` (the ``sglang`` or ``vllm`` fixture: each oracle runs once)."""
    return request.getfixturevalue(engine)


# --- what the records are checked with ------------------------------------------------------------

# the class each engine builds for a Llama EAGLE-3 drafter
ARCHITECTURE = {"sglang": "LlamaForCausalLMEagle3", "vllm": "Eagle3LlamaForCausalLM"}


def fate(f: str, *params: str) -> dict:
    """A key's entry in a record: its fate and the parameters it wrote."""
    return {"fate": f, "params": list(params)}


def param(shape: list, state: str, equals_checkpoint) -> dict:
    """A parameter's entry in a record: its shape, state and whether it equals the checkpoint."""
    return {"shape": shape, "state": state, "equals_checkpoint": equals_checkpoint}


def assert_outcome(r: dict, started: bool, stage, error) -> None:
    """The record started (or stopped at ``stage``) and its error starts with ``error`` (None: the
    record has no error)."""
    assert (r["started"], r["stage"]) == (started, stage), (r["stage"], r["error"])
    if error is None:
        assert r["error"] is None, r["error"]
    else:
        assert r["error"] is not None and r["error"].startswith(error), r["error"]


def loads_fully(r: dict, engine: str) -> None:
    """Started as the engine's EAGLE-3 class; every parameter loaded (equal to the checkpoint) or
    bound from the target (and then not different from the checkpoint's tensor, if it has one);
    every checkpoint key loaded except t2d (SGLang skips it by name, vLLM never reads it); the
    embedding is the target's; some target layers are captured."""
    trace = r.get("traceback") or r.get("sglang", {}).get("traceback_tail")
    assert r["started"], (r["stage"], r["error"], trace)
    assert r["architecture"] == ARCHITECTURE[engine]
    bad = {k: v for k, v in r["params"].items() if v["state"] not in ("loaded", "from_target")}
    assert not bad, bad
    neq = {
        k: v
        for k, v in r["params"].items()
        if v["equals_checkpoint"] is False
        or (v["state"] == "loaded" and v["equals_checkpoint"] is not True)
    }
    assert not neq, neq
    dropped = [k for k, v in r["keys"].items() if v["fate"] == "dropped" and k != "t2d"]
    assert not dropped, dropped
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"
    assert r["config"]["captured_layers"] and None not in r["config"]["captured_layers"]


# --- questions both engines answer ----------------------------------------------------------------

# per engine: its version, the fates its records use ("warned", SGLang only: dropped, and SGLang
# logged a WARNING while processing it), the record keys beyond the shared schema
SCHEMA = {
    "sglang": ("0.5.23", {"loaded", "dropped", "warned", "error", "not_reached"}, {"sglang"}),
    # "runner": the model runner the CPU build ran (V1): where it read the aux ids;
    # "draft_forward_error": the draft's first forward as start-up runs it (null: it ran), on a
    # drafter that loaded (commit 211d620)
    "vllm": (
        "0.32.0",
        {"loaded", "dropped", "error", "not_reached"},
        {"runner", "draft_forward_error"},
    ),
}


def test_schema(oracle, engine):
    version, fates, extra = SCHEMA[engine]
    r = oracle["base"]
    assert_record_schema(r, fates, extra)
    assert r["oracle"] == engine and r["engine_version"] == version


# the target layers whose output each engine captures for eagle_config ids [0, 1, 2]: SGLang's id
# k is layer k's output, vLLM's id 0 the embedding output (-1) and id k layer k-1's
BASE_CAPTURED = {"sglang": [0, 1, 2], "vllm": [-1, 0, 1]}


def test_specforge_layout_loads_fully(oracle, engine):
    r = oracle["base"]
    loads_fully(r, engine)
    assert r["config"] == {
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "vocab_size": 512,
        "draft_vocab_size": 128,
        "dtype": "bfloat16",
        "aux_layer_ids": [0, 1, 2],
        "aux_layer_ids_from": "config",
        "captured_layers": BASE_CAPTURED[engine],
        "tie_word_embeddings": False,
    }
    # q/k/v and gate/up are stacked into one parameter each, every slice written and equal
    assert r["params"][QKV] == param([128, 128], "loaded", True)
    for k in ("q", "k", "v"):
        assert r["keys"][f"midlayer.self_attn.{k}_proj.weight"]["params"] == [QKV]
    assert r["params"][GATE_UP] == param([256, 64], "loaded", True)
    assert r["keys"]["midlayer.mlp.gate_proj.weight"]["params"] == [GATE_UP]
    assert r["keys"]["midlayer.mlp.up_proj.weight"]["params"] == [GATE_UP]
    # fc takes 3 aux hidden states; lm_head is the draft vocab's
    assert r["params"]["model.fc.weight"]["shape"] == [64, 192]
    assert r["params"]["lm_head.weight"] == param([128, 64], "loaded", True)
    # the embedding is not in the checkpoint: the target's is bound at startup (SGLang set_embed,
    # vLLM _maybe_share_embeddings)
    assert r["params"]["model.embed_tokens.weight"] == param([512, 64], "from_target", None)


# what d2t becomes. sglang models/llama_eagle3.py:350-356 (load_weights): ``if "d2t" in name``:
# hot_token_id = d2t + arange; ``if "t2d" in name: continue``. vllm model_executor/models/
# llama_eagle3.py:426-429 (load_weights): t2d skipped, d2t renamed draft_id_to_target_id.
D2T_AS = {"sglang": "hot_token_id", "vllm": "draft_id_to_target_id"}


def test_d2t_is_read_and_t2d_is_not(oracle, engine):
    r = oracle["base"]
    assert r["d2t"] == {"present": True, "consumed_as": D2T_AS[engine]}
    assert r["keys"]["d2t"] == fate("loaded", D2T_AS[engine])
    assert r["t2d"] == {"present": True, "consumed_as": None}
    assert r["keys"]["t2d"] == fate("dropped")
    # without d2t the drafter starts (SGLang: no hot_token_id; vLLM: the map at its zero init)
    r = oracle["no_d2t"]
    assert_outcome(r, True, None, None)
    assert r["d2t"] == {"present": False, "consumed_as": None}


# a misspelled name: the key, the parameter it should have filled, and that parameter afterwards
MISSPELLED = {
    "typo": (
        "midlayer.mlp.down_prj.weight",
        DOWN,
        param([64, 128], "init", None),
    ),
    # one slice of a stacked parameter: the q rows stay at init, k (before q_prj) is loaded
    "typo_q": (
        "midlayer.self_attn.q_prj.weight",
        QKV,
        param([128, 128], "partial", True),
    ),
    # a .bias under a module name that does not exist
    "typo_bias": (
        "midlayer.self_attn.o_prj.bias",
        "model.layers.0.self_attn.o_proj.weight",
        param([64, 64], "init", None),
    ),
}
# the error each engine stops with (None: it starts). SGLang drops the key silently, no error, no
# warning: ``if param_name in params_dict:`` has no else branch (models/llama_eagle3.py:362-374).
# vLLM does not drop it: AutoWeightsLoader raises "There is no module or parameter named ..."
# (vllm model_executor/models/utils.py:431-448, AutoWeightsLoader._load_module).
MISSPELLED_ERROR = {
    "sglang": {"typo": None, "typo_q": None, "typo_bias": None},
    "vllm": {
        "typo": "ValueError: There is no module or parameter named 'layers.0.mlp.down_prj'",
        "typo_q": "ValueError: There is no module or parameter named 'layers.0.self_attn.q_prj'",
        "typo_bias": "ValueError: There is no module or parameter named 'layers.0.self_attn.o_prj'",
    },
}


@pytest.mark.parametrize("name", list(MISSPELLED))
def test_misspelled_name(oracle, engine, name):
    key, param, after = MISSPELLED[name]
    error = MISSPELLED_ERROR[engine][name]
    r = oracle[name]
    if error is None:
        assert_outcome(r, True, None, None)
        assert r["keys"][key] == fate("dropped")
    else:
        assert_outcome(r, False, "load", error)
        assert r["keys"][key] == fate("error")
    # the parameter is still at init where the key should have written it (when vLLM stops)
    assert r["params"][param] == after
    errors = [k for k, v in r["keys"].items() if v["fate"] == "error"]
    assert errors == ([] if error is None else [key])


# the keys around the misspelled down_proj: SGLang loads on past it; vLLM loaded what came before
# it, never got to the tensors it had collected after it, and skipped t2d while collecting
AROUND_TYPO = {
    "sglang": {
        "fc.weight": fate("loaded", "model.fc.weight"),
        "norm.weight": fate("loaded", "model.norm.weight"),
        "t2d": fate("dropped"),
    },
    "vllm": {
        "fc.weight": fate("loaded", "model.fc.weight"),
        "norm.weight": fate("not_reached"),
        "t2d": fate("dropped"),
    },
}


def test_keys_around_a_misspelled_name(oracle, engine):
    keys = oracle["typo"]["keys"]
    assert {k: keys[k] for k in AROUND_TYPO[engine]} == AROUND_TYPO[engine]


def test_bias_of_an_existing_module_is_dropped_silently(oracle, engine):
    """A ``.bias`` of a module that exists but has no bias (o_proj, fc) is ignored. SGLang: no
    parameter of that name, dropped like any unknown name (models/llama_eagle3.py:372-374); vLLM:
    AutoWeightsLoader ignores unexpected ``.bias`` suffixes, GPTQ leftovers (vllm
    model_executor/models/utils.py:457-458). A ``.bias`` under a module name that does not exist:
    test_misspelled_name[typo_bias]."""
    r = oracle["extra_bias"]
    loads_fully(
        dict(r, keys={k: v for k, v in r["keys"].items() if not k.endswith(".bias")}), engine
    )
    assert r["keys"]["midlayer.self_attn.o_proj.bias"] == fate("dropped")
    assert r["keys"]["fc.bias"] == fate("dropped")


def test_missing_k_proj_leaves_its_slice_at_init(oracle, engine):
    """q/k/v are three slices of one parameter: without k_proj the k rows stay at init (the
    parameter is "partial"), what was written equals the checkpoint, and the drafter starts."""
    r = oracle["no_k_proj"]
    assert_outcome(r, True, None, None)
    assert r["params"][QKV] == param([128, 128], "partial", True)


# the order the engine's iterator yields midlayer.X and layers.0.X in (the last one wins)
DUPLICATE_ORDER = {
    "dup_after": ["layers.0.mlp.down_proj.weight", "midlayer.mlp.down_proj.weight"],
    "dup_before": ["layers.0.mlp.down_proj.weight", "midlayer.mlp.down_proj.weight"],
    "dup_shards": ["midlayer.mlp.down_proj.weight", "layers.0.mlp.down_proj.weight"],
}


@pytest.mark.parametrize("name", list(DUPLICATE_ORDER))
def test_duplicate_names_both_load_into_one_parameter(oracle, engine, name):
    """midlayer.X and layers.0.X in one checkpoint: no error, both write the same parameter, the
    one yielded last wins. Both engines' iterators yield each shard's names SORTED (sglang
    model_loader/weight_utils.py:1386 buffered_multi_thread_safetensors_weights_iterator: ``for
    name in sorted(state_dict.keys())``; vllm model_loader/weight_utils.py:1207-1213
    safetensors_weights_iterator: ``safe_open(...).keys()``, sorted by the safetensors library),
    so within one file ``midlayer.*`` always comes after ``layers.0.*`` and wins, wherever each
    sits in the file; across shards the later file wins (vLLM sorts the files, :1098). The
    parameter equals the tensor that wrote it last."""
    r = oracle[name]
    assert_outcome(r, True, None, None)
    assert r["keys"]["midlayer.mlp.down_proj.weight"] == fate("loaded", DOWN)
    assert r["keys"]["layers.0.mlp.down_proj.weight"] == fate("loaded", DOWN)
    order = [k for k in r["keys"] if k in DUPLICATE_ORDER[name]]  # the iterator's order
    assert order == DUPLICATE_ORDER[name]
    assert r["params"][DOWN] == param([64, 128], "loaded", True)


def test_layers0_names_load_like_midlayer(oracle, engine):
    r = oracle["layers0"]
    loads_fully(r, engine)
    assert r["keys"]["layers.0.self_attn.q_proj.weight"]["params"] == [QKV]


# names that already carry ``model.``. SGLang tries a name as written before prepending
# ``model.`` (``name if name in params_dict else f"model.{name}"``, models/llama_eagle3.py:362,
# :372): they load. vLLM prepends ``model.`` to every name but lm_head/d2t (vllm
# model_executor/models/llama_eagle3.py:443-444): model.model.* -> error.
MODEL_PREFIX_ERROR = {
    "sglang": None,
    "vllm": "ValueError: There is no module or parameter named 'model' in LlamaModel",
}


def test_model_prefix(oracle, engine):
    error = MODEL_PREFIX_ERROR[engine]
    for name in ("model_prefix", "model_layers0"):
        if error is None:
            loads_fully(oracle[name], engine)
        else:
            assert_outcome(oracle[name], False, "load", error)
    if error is None:
        assert oracle["model_prefix"]["keys"]["model.fc.weight"]["params"] == ["model.fc.weight"]
    # bare names get model. prepended, lm_head.weight loads as written
    assert oracle["base"]["keys"]["fc.weight"]["params"] == ["model.fc.weight"]
    assert oracle["base"]["keys"]["lm_head.weight"]["params"] == ["lm_head.weight"]


# model.lm_head.weight: no SGLang parameter (model.model.lm_head neither): dropped, lm_head stays
# at init. vLLM leaves a name with lm_head in it unprefixed (vllm model_executor/models/
# llama_eagle3.py:443-444), and its loader finds no lm_head in LlamaModel.
MODEL_LM_HEAD = {
    "sglang": (True, None, None, "dropped"),
    "vllm": (
        False,
        "load",
        "ValueError: There is no module or parameter named 'lm_head' in LlamaModel",
        "error",
    ),
}


def test_model_lm_head(oracle, engine):
    started, stage, error, key_fate = MODEL_LM_HEAD[engine]
    r = oracle["model_lm_head"]
    assert_outcome(r, started, stage, error)
    assert r["keys"]["model.lm_head.weight"] == fate(key_fate)
    assert r["params"]["lm_head.weight"]["state"] == "init"


# (aux_layer_ids, where they came from, captured_layers) per engine and drafter.
# SGLang reads only eagle_config.eagle_aux_hidden_state_layer_ids
# (model_executor/model_runner_components/spec_aux_hidden_state.py:185-196) and captures the
# input of layer id+1 = the output of layer id (models/llama.py:929-941
# set_eagle3_layers_to_capture); no ids: layers_to_capture = [2, L//2, L-3], ids [1, 1, 0] for
# this 4-layer target: two distinct layers captured, fc expects three. A top-level list is not
# read for capture.
# vLLM reads the top-level list first, then eagle_config's (vllm v1/worker/gpu_model_runner.py:
# 5251-5280, _get_eagle3_aux_layers_from_config); no ids: the target's default (2, L//2, L-3).
# Both capture in layer order, once per layer, whatever the order of the ids.
AUX = {
    "sglang": {
        "base": ([0, 1, 2], "config", [0, 1, 2]),
        "no_aux_ids": ([1, 1, 0], "default", [0, 1]),
        "top_level_aux_ids": ([0, 1, 2], "config", [0, 1, 2]),
        "top_level_aux_ids_alone": ([1, 1, 0], "default", [0, 1]),
        "aux_unsorted": ([2, 0, 1], "config", [0, 1, 2]),
    },
    "vllm": {
        "base": ([0, 1, 2], "config", [-1, 0, 1]),
        "no_aux_ids": ([2, 2, 1], "default", [0, 1]),
        "top_level_aux_ids": ([1, 2, 3], "config", [0, 1, 2]),
        "top_level_aux_ids_alone": ([1, 2, 3], "config", [0, 1, 2]),
        "aux_unsorted": ([2, 0, 1], "config", [-1, 0, 1]),
    },
}


@pytest.mark.parametrize("name", list(AUX["sglang"]))
def test_aux_ids(oracle, engine, name):
    r = oracle[name]
    assert_outcome(r, True, None, None)
    cfg = r["config"]
    expected = AUX[engine][name]
    assert (cfg["aux_layer_ids"], cfg["aux_layer_ids_from"], cfg["captured_layers"]) == expected


def test_no_aux_hidden_states_capture_nothing(oracle, engine):
    """use_aux_hidden_state false: the target captures nothing; the record says null (never
    ``[]``) for the ids, where they came from, and the captured layers."""
    r = oracle["no_aux"]
    assert_outcome(r, True, None, None)
    cfg = r["config"]
    assert (cfg["aux_layer_ids"], cfg["aux_layer_ids_from"], cfg["captured_layers"]) == (
        None,
        None,
        None,
    )


# two top-level ids and a [H, 2H] fc: fc's width is num_aux_hidden_states, else
# len(eagle_config ids), else 3 (sglang models/llama_eagle3.py:156-167; vllm model_executor/
# models/llama_eagle3.py:209-221), so fc is [64, 192] and the checkpoint's [64, 128] fails the
# loader's shape assertion (sglang model_loader/weight_utils.py:1574-1585 default_weight_loader,
# vllm model_executor/layers/linear.py:402-408 ReplicatedLinear.weight_loader).
TOP_TWO_ERROR = {
    "sglang": "AssertionError: Attempted to load weight (torch.Size([64, 128])) into parameter "
    "(torch.Size([64, 192]))",
    "vllm": "AssertionError: Tried to load weights of size torch.Size([64, 128])to a parameter "
    "of size torch.Size([64, 192])",
}


def test_top_level_aux_ids_do_not_size_fc(oracle, engine):
    r = oracle["top_level_two_ids"]
    assert (r["started"], r["stage"]) == (False, "load")
    assert r["error"] == TOP_TWO_ERROR[engine]
    assert r["params"]["model.fc.weight"] == param([64, 192], "init", None)
    assert r["keys"]["fc.weight"] == fate("error")


# the drafter's lm_head parameter (None: there is none) with and without lm_head.weight in the
# checkpoint and tie_word_embeddings. SGLang: with a numeric draft_vocab_size lm_head is the
# drafter's own [Vd, H] head; without lm_head.weight nothing fills it and the startup step does
# not replace it. Tied, lm_head IS model.embed_tokens ([V, H]): the checkpoint's lm_head.weight
# matches no parameter and is dropped, and after set_embed the head is the target's embedding.
# vLLM ignores tie_word_embeddings: lm_head is its own ParallelLMHead, loaded from the checkpoint;
# without lm_head.weight the proposer shares the target's whole lm_head (V rows, not Vd), tied or
# not (vllm v1/spec_decode/llm_base_proposer.py:1508, _maybe_share_lm_head).
OWN_HEAD = param([128, 64], "loaded", True)
TARGET_HEAD = param([512, 64], "from_target", None)
HEAD = {
    "sglang": {
        "base": OWN_HEAD,
        "tied": None,
        "no_lm_head": param([128, 64], "init", None),
        "tied_no_lm_head": None,
    },
    "vllm": {
        "base": OWN_HEAD,
        "tied": OWN_HEAD,
        "no_lm_head": TARGET_HEAD,
        "tied_no_lm_head": TARGET_HEAD,
    },
}


@pytest.mark.parametrize("name", ["base", "tied", "no_lm_head", "tied_no_lm_head"])
def test_lm_head(oracle, engine, name):
    r = oracle[name]
    assert_outcome(r, True, None, None)
    assert r["config"]["tie_word_embeddings"] is name.startswith("tied")
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"
    head = HEAD[engine][name]
    if head is None:
        assert "lm_head.weight" not in r["params"]
    else:
        assert r["params"]["lm_head.weight"] == head
    if name in ("base", "tied"):  # the checkpoint has lm_head.weight: loaded, or matches nothing
        assert r["keys"]["lm_head.weight"] == (
            fate("dropped") if head is None else fate("loaded", "lm_head.weight")
        )
    else:
        assert "lm_head.weight" not in r["keys"]
    if head == OWN_HEAD:
        loads_fully(r, engine)


def test_two_layers_config_with_one_layer_of_weights(oracle, engine):
    """num_hidden_layers 2: both engines build two decoder layers; layer 1 gets no weights and
    stays at init, and the drafter starts all the same."""
    r = oracle["two_layers"]
    assert_outcome(r, True, None, None)
    assert r["config"]["num_hidden_layers"] == 2
    layer1 = {k: v for k, v in r["params"].items() if k.startswith("model.layers.1.")}
    assert layer1 and all(v["state"] == "init" for v in layer1.values()), layer1
    # the second layer reads H, not 2H (embeds are concatenated in layer 0 only)
    assert layer1["model.layers.1.self_attn.qkv_proj.weight"]["shape"] == [128, 64]
    assert all(
        v["state"] == "loaded" for k, v in r["params"].items() if k.startswith("model.layers.0.")
    )


# architectures ["LlamaForCausalLM"]: (the class built, the error it stops with; None: loads
# fully). SGLang's registry gives the plain LlamaForCausalLM, whose [V, H] head trips the shape
# assertion on the drafter's [Vd, H] lm_head (its fates: test_sglang_llama_architecture_fates).
# vLLM renames it to Eagle3LlamaForCausalLM (vllm transformers_utils/configs/eagle.py:55-64).
LLAMA_ARCH = {
    "sglang": ("LlamaForCausalLM", "AssertionError: self.org_vocab_size=512 "),
    "vllm": ("Eagle3LlamaForCausalLM", None),
}


def test_llama_architecture(oracle, engine):
    arch, error = LLAMA_ARCH[engine]
    r = oracle["llama_arch"]
    assert r["architecture"] == arch, (r["stage"], r["error"])
    if error is None:
        loads_fully(r, engine)
    else:
        assert_outcome(r, False, "load", error)


# the error each engine stops with on a drafter folder without config.json
NO_CONFIG_ERROR = {"sglang": "ValueError: Unrecognized model in ", "vllm": "ValidationError: "}


def test_failure_stages(oracle, engine):
    """No config.json fails at config; an unsupported hidden_act at build, with the same message
    in both engines (sglang models/llama.py:118, vllm model_executor/models/llama.py:114)."""
    r = oracle["no_config"]
    assert (r["started"], r["stage"], r["architecture"]) == (False, "config", None)
    assert r["error"].startswith(NO_CONFIG_ERROR[engine]), r["error"]
    r = oracle["bad_act"]
    assert (r["started"], r["stage"], r["architecture"]) == (False, "build", ARCHITECTURE[engine])
    assert (
        r["error"]
        == "ValueError: Unsupported activation: no_such_activation. Only silu is supported for now."
    )
    # every checkpoint tensor is listed, none was reached
    for name in ("no_config", "bad_act"):
        r = oracle[name]
        assert r["params"] == {} and r["keys"], name
        assert all(v == fate("not_reached") for v in r["keys"].values()), name
        assert r["d2t"] == {"present": True, "consumed_as": None}, name


# (aux_layer_ids, captured_layers) for each producer fixture as written (ids as the producer
# wrote them; captured: -1 = the embedding output, i = target layer i's output); None: SGLang
# cannot parse the raw speculators config (no model_type).
PRODUCER_CAPTURED = {
    "sglang": {
        "specforge-sglang": ([0, 1, 2], [0, 1, 2]),
        "specforge-hf": ([0, 1, 2], [0, 1, 2]),
        "speculators-train": None,
        "speculators-convert": None,
        "modelopt": ([0, 1, 2], [0, 1, 2]),
        "modelopt-default-aux": ([0, 1], [0, 1]),
        "modelopt-fullvocab-fp32": ([0, 1, 2], [0, 1, 2]),
    },
    "vllm": {
        "specforge-sglang": ([0, 1, 2], [-1, 0, 1]),
        "specforge-hf": ([0, 1, 2], [-1, 0, 1]),
        "speculators-train": ([1, 2, 3], [0, 1, 2]),
        "speculators-convert": ([2, 2, 1], [0, 1]),  # ids lost by the producer: vLLM's default
        "modelopt": ([0, 1, 2], [-1, 0, 1]),
        "modelopt-default-aux": ([0, 1], [-1, 0]),
        "modelopt-fullvocab-fp32": ([0, 1, 2], [-1, 0, 1]),
    },
}


@pytest.mark.parametrize("name", PRODUCER_FIXTURES)
def test_producer_fixture(oracle, engine, name):
    """Every producer fixture loads fully, but SGLang rejects a raw speculators config at config
    parsing (convert makes it loadable: test_converted_copy_loads_fully)."""
    r = oracle[name]
    expected = PRODUCER_CAPTURED[engine][name]
    if expected is None:
        assert (r["started"], r["stage"], r["architecture"]) == (False, "config", None), name
        assert r["error"].startswith("ValueError: Unrecognized model in "), r["error"]
        assert "model_type" in r["error"]
    else:
        loads_fully(r, engine)
        assert (r["config"]["aux_layer_ids"], r["config"]["captured_layers"]) == expected
    if name == "specforge-hf":  # its embed_tokens is the target's: loaded, then bound anyway
        assert r["keys"]["embed_tokens.weight"]["fate"] == "loaded"
        assert r["params"]["model.embed_tokens.weight"]["equals_checkpoint"] is True
    if name == "modelopt-fullvocab-fp32":  # F32 tensors, config says bfloat16: cast on load
        assert r["config"]["dtype"] == "bfloat16" and r["config"]["draft_vocab_size"] == 512
        assert r["t2d"]["present"] is False and r["d2t"]["present"] is False


# (aux_layer_ids, captured_layers) for each ``weightcheck convert --to X`` copy, per engine (the
# copies of a producer that lost its ids are refused: CONVERT_REFUSED)
CONVERTED_CAPTURED = {
    "sglang": dict.fromkeys(PRODUCER_FIXTURES, ([0, 1, 2], [0, 1, 2])),
    "vllm": dict.fromkeys(PRODUCER_FIXTURES, ([1, 2, 3], [0, 1, 2])),
}
CONVERTED_CAPTURED["sglang"]["modelopt-default-aux"] = ([0, 1], [0, 1])
CONVERTED_CAPTURED["vllm"]["modelopt-default-aux"] = ([1, 2], [0, 1])
# the decoder layer's names in the copies of each --to
COPY_LAYER_PREFIX = {"sglang": "midlayer.", "vllm": "layers.0.", "speculators": "layers.0."}
CONVERTED = [
    pytest.param(engine, name, to, id=f"{engine}-{name}--to-{to}")
    for engine in ENGINES
    for name in PRODUCER_FIXTURES
    for to in CONVERT_TO[engine]
]


@pytest.mark.parametrize("engine,name,to", CONVERTED, indirect=["engine"])
def test_converted_copy_loads_fully(oracle, engine, name, to):
    """``weightcheck convert SRC OUT --to ENGINE`` (vLLM: also ``--to speculators``) of every
    producer fixture: the engine starts it with every parameter loaded (equal to the checkpoint)
    or bound from the target."""
    r = oracle[f"{name}--to-{to}"]
    refused = CONVERT_REFUSED.get(f"{name}--to-{to}")
    if refused:
        assert r.get("refused") == refused[0] and refused[1] in r["said"], r
        pytest.skip(f"convert --to {to} refuses {name} ({refused[1]}), as designed")
    loads_fully(r, engine)
    assert any(k.startswith(COPY_LAYER_PREFIX[to]) for k in r["keys"])
    expected = CONVERTED_CAPTURED[engine][name]
    assert (r["config"]["aux_layer_ids"], r["config"]["captured_layers"]) == expected


def test_two_aux_copy_sizes_fc_by_num_aux_hidden_states(oracle, engine):
    """Two aux ids: both engines size fc from num_aux_hidden_states or eagle_config's id list,
    else 3 (sglang models/llama_eagle3.py:156-167; vllm model_executor/models/llama_eagle3.py:
    209-221); top-level ids alone do not size it, so convert writes num_aux_hidden_states
    (docs/differential.md R3) and fc [64, 128] loads."""
    for to in CONVERT_TO[engine]:
        r = oracle[f"modelopt-default-aux--to-{to}"]
        assert r["started"], r.get("error")
        assert r["params"]["model.fc.weight"]["state"] == "loaded"
        assert r["params"]["model.fc.weight"]["shape"] == [64, 128]
        assert r["keys"]["fc.weight"]["fate"] == "loaded"


# --- SGLang only ----------------------------------------------------------------------------------


def test_sglang_names_the_slice_each_stacked_key_wrote(sglang):
    for k in ("q", "k", "v"):
        assert sglang["base"]["sglang"]["shards"][f"midlayer.self_attn.{k}_proj.weight"] == k


def test_sglang_hot_token_id_has_draft_vocab_entries(sglang):
    assert sglang["base"]["sglang"]["hot_token_id_len"] == 128
    assert sglang["no_d2t"]["sglang"]["hot_token_id_len"] is None


def test_sglang_duplicate_writers_in_sorted_name_order(sglang):
    """Which key wrote the duplicated parameter, in order: sorted within a shard, shard order
    across files (test_duplicate_names_both_load_into_one_parameter)."""
    for name, order in DUPLICATE_ORDER.items():
        r = sglang[name]
        assert r["started"], r["error"]
        assert r["sglang"]["writers"][DOWN] == order, name


def test_sglang_draft_vocab_size_absent_fails_at_model_build(sglang):
    """``config.draft_vocab_size`` is read as an attribute (models/llama_eagle3.py
    LlamaForCausalLMEagle3.__init__); transformers 5.19's LlamaConfig has none."""
    r = sglang["no_draft_vocab"]
    assert (r["started"], r["stage"]) == (False, "build")
    assert r["error"].startswith("AttributeError: "), r["error"]
    assert "draft_vocab_size" in r["error"]
    assert r["config"]["draft_vocab_size"] is None


def test_sglang_draft_vocab_size_null_borrows_the_target_head(sglang):
    """``draft_vocab_size: null`` -> Vd = V and load_lm_head_from_target: the EAGLE worker binds
    the target's embedding AND head (eagle_worker_v2.py init_lm_head -> set_embed_and_head). With
    a numeric draft_vocab_size it does not (a missing lm_head stays at init:
    test_lm_head)."""
    assert sglang["no_lm_head"]["sglang"]["load_lm_head_from_target"] is False
    r = sglang["null_draft_vocab"]
    assert r["started"], r["error"]
    assert r["sglang"]["load_lm_head_from_target"] is True
    assert r["config"]["draft_vocab_size"] is None
    assert r["params"]["lm_head.weight"] == param([512, 64], "from_target", None)
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"
    # d2t is still read: hot_token_id has Vd=128 entries next to a 512-row head
    assert r["sglang"]["hot_token_id_len"] == 128


def test_sglang_draft_vocab_size_null_with_own_head_fails_at_load(sglang):
    """The head is built [V, H]; the checkpoint's [Vd, H] lm_head trips the vocab-parallel
    weight loader's shape assertion (layers/vocab_parallel_embedding.py weight_loader)."""
    r = sglang["null_draft_vocab_own_head"]
    assert (r["started"], r["stage"]) == (False, "load")
    assert r["error"].startswith("AssertionError: self.org_vocab_size=512 "), r["error"]
    # the tensor it stopped on is an error; the ones after it were never reached
    assert r["keys"]["lm_head.weight"] == fate("error")
    after = list(r["keys"])[list(r["keys"]).index("lm_head.weight") + 1 :]
    assert after and all(r["keys"][k]["fate"] == "not_reached" for k in after), after
    assert r["params"]["lm_head.weight"] == param([512, 64], "init", None)
    # the keys sorted before lm_head.weight were loaded when it stopped
    assert r["sglang"]["key_order"][:3] == ["d2t", "fc.weight", "lm_head.weight"]
    assert r["params"]["model.fc.weight"] == param([64, 192], "loaded", True)
    assert r["params"][QKV]["state"] == "init"


def test_sglang_float32_config_is_built_in_float16(sglang):
    """dtype "auto": a float32 config is served in float16 (configs/model_config.py
    _get_and_verify_dtype); the weights are cast on load."""
    r = sglang["fp32_config"]
    assert r["started"], r["error"]
    assert r["config"]["dtype"] == "float16"
    assert all(v["equals_checkpoint"] for v in r["params"].values() if v["state"] == "loaded")


def test_sglang_checkpoint_embedding_is_loaded_then_replaced_by_the_target(sglang):
    """embed_tokens.weight in the checkpoint is written, then set_embed binds the target's
    (hidden sizes equal): the drafter runs with the target's embedding, not its own."""
    r = sglang["with_embed"]
    assert r["started"], r["error"]
    assert r["keys"]["embed_tokens.weight"] == fate("loaded", "model.embed_tokens.weight")
    assert r["params"]["model.embed_tokens.weight"] == param([512, 64], "from_target", False)


def test_sglang_tied_head_still_needs_a_numeric_draft_vocab_size(sglang):
    """``config_.vocab_size = config_.draft_vocab_size`` runs for tied heads too
    (models/llama_eagle3.py:316-319): absent -> AttributeError; null is not replaced by V on the
    tied branch, so transformers 5.19's strict LlamaConfig rejects vocab_size = None."""
    r = sglang["tied_no_draft_vocab"]
    assert (r["started"], r["stage"]) == (False, "build")
    assert r["error"] == "AttributeError: 'LlamaConfig' object has no attribute 'draft_vocab_size'"
    r = sglang["tied_null_draft_vocab"]
    assert (r["started"], r["stage"]) == (False, "build")
    assert r["error"].startswith("StrictDataclassFieldValidationError: "), r["error"]
    assert "vocab_size" in r["error"]


def test_sglang_target_hidden_size_differs_keeps_the_checkpoint_embedding(sglang):
    """set_embed returns early when target_hidden_size != hidden_size (models/llama.py:910-916
    set_embed): the drafter runs with its own embed_tokens, and fc takes 3*T inputs."""
    r = sglang["target_hidden_32"]
    assert r["started"], r["error"]
    assert r["params"]["model.fc.weight"] == param([64, 96], "loaded", True)
    assert r["params"]["model.embed_tokens.weight"] == param([512, 64], "loaded", True)


def test_sglang_conditional_parameters(sglang):
    """input_norm only with norm_before_fc (eagle_config), fc_norm.* (legacy aux_norm_* names
    rewritten) only with use_aux_norm/fc_norm, fc.bias and o_proj.bias only with ``bias``;
    q/k/v biases never (qkv_proj is rebuilt with bias=False). Without the flag: dropped silently."""
    off = sglang["extras_off"]
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
        assert off["keys"][k] == fate("dropped"), k
    on = sglang["extras_on"]
    assert on["started"], on["error"]
    assert on["keys"]["input_norm.weight"]["params"] == ["model.input_norm.weight"]
    assert on["params"]["model.input_norm.weight"]["shape"] == [192]
    for i, k in enumerate(("low", "mid", "high")):
        assert on["keys"][f"aux_norm_{k}.weight"]["params"] == [f"model.fc_norm.{i}.weight"]
    assert on["keys"]["fc.bias"]["params"] == ["model.fc.bias"]
    assert on["keys"]["midlayer.self_attn.o_proj.bias"]["params"] == [
        "model.layers.0.self_attn.o_proj.bias"
    ]
    assert on["keys"]["midlayer.self_attn.q_proj.bias"] == fate("dropped")
    assert all(v["state"] in ("loaded", "from_target") for v in on["params"].values())


def test_sglang_layers_to_capture(sglang):
    """The target's own list: id + 1 for each eagle_config id, [2, L//2, L-3] without ids
    (models/llama.py:929-941)."""
    assert sglang["base"]["sglang"]["layers_to_capture"] == [1, 2, 3]
    assert sglang["no_aux_ids"]["sglang"]["layers_to_capture"] == [2, 2, 1]


def test_sglang_llama_architecture_fates(sglang):
    """LlamaForCausalLM's loader: what came before lm_head.weight in sorted order (d2t, fc.weight)
    matched nothing, and LlamaForCausalLM.load_weights logs "Parameter X not found in
    params_dict" for both; lm_head.weight trips the shape assertion ([V, H] head, the drafter's
    is [Vd, H]); norm.weight is never reached."""
    r = sglang["llama_arch"]
    for k in ("d2t", "fc.weight"):
        assert r["keys"][k] == {
            "fate": "warned",
            "params": [],
            "warning": f"Parameter {k} not found in params_dict",
        }, r["keys"][k]
    assert r["keys"]["lm_head.weight"] == fate("error")
    assert r["keys"]["norm.weight"] == fate("not_reached")


# --- vLLM only ------------------------------------------------------------------------------------


def test_vllm_d2t_is_a_parameter_left_at_its_zero_init_without_d2t(vllm):
    """d2t loads into the parameter draft_id_to_target_id, equal to the checkpoint. Without it the
    mapper drops draft_id_to_target_id, which keeps its torch.zeros init (the identity map) and
    the drafter starts (vllm 0.32.0 llama_eagle3.py load_weights)."""
    assert vllm["base"]["params"]["draft_id_to_target_id"] == param([128], "loaded", True)
    assert vllm["no_d2t"]["params"]["draft_id_to_target_id"] == param([128], "init", None)


def test_vllm_default_aux_ids_capture_fewer_states_than_fc_takes(vllm):
    """speculators-convert lost its aux ids: vLLM falls back to the target's default
    (2, L//2, L-3) = (2, 2, 1) for this 4-layer target, stored as the set {1, 2}: two captured
    states, while fc was built (and loaded) for three. Loading succeeds; the first draft step
    would not. "started" covers loading, not this runtime agreement."""
    r = vllm["speculators-convert"]
    assert r["started"]
    assert len(r["config"]["captured_layers"]) == 2
    assert r["params"]["model.fc.weight"]["shape"] == [64, 3 * 64]
