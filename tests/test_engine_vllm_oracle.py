"""The vLLM oracle: what vLLM's own code does with a drafter checkpoint, without serving.

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_engine_vllm_oracle.py``. vLLM runs in its side venv
(``bash tests/engine/setup_vllm_venv.sh``; docs/engine-test.md): the interpreter named by
WEIGHTCHECK_VLLM_PYTHON, else ``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/vllm/bin/python``.
Without one every test here is skipped. WEIGHTCHECK_ORACLE_REPORT=FILE keeps every record (JSON).

One subprocess runs tests/engine/vllm_oracle.py over every drafter below (vLLM is imported once):
vLLM's own config handling, model construction on CPU with every parameter set to a marked NaN,
its weight iterator and ``load_weights``, then the step that shares the target's embedding /
lm_head. The drafters: variants of a SpecForge-layout drafter written by tests/engine/drafters.py
(the variants are made here by rewriting the safetensors header with the standard library), the
producer-written fixtures under tests/fixtures/producers/, and their copies made by
``python -m weightcheck convert SRC OUT --to vllm|speculators``.

What vLLM does is the truth here; where it differs from what one might expect the test says so.
"""

from __future__ import annotations

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
)

pytestmark = pytest.mark.engine

ENGINE_DIR = ROOT / "tests" / "engine"
TARGET = PRODUCERS / "target-llama"
CONVERT_TO = ["vllm", "speculators"]
ORACLE_TIMEOUT = 1200
FATES = {"loaded", "dropped", "error", "not_reached"}  # a checkpoint key's fate


def vllm_python() -> str:
    return side_python("vllm")


# --- the one oracle run ----------------------------------------------------------------------------


def _convert(src: pathlib.Path, out: pathlib.Path, to: str) -> pathlib.Path:
    """``python -m weightcheck convert SRC OUT --to TO --target target-llama`` (a subprocess)."""
    p = convert_copy(src, out, to, TARGET)
    assert p.returncode == 0, (
        f"convert {src.name} --to {to} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    )
    return out


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """name -> the oracle's JSON record, for every drafter of this module (one vLLM process)."""
    vllm_python()  # skips every test here without the side venv
    sys.path.insert(0, str(ENGINE_DIR))
    try:
        import drafters
    finally:
        sys.path.remove(str(ENGINE_DIR))
    root = tmp_path_factory.mktemp("oracle")
    base = root / "base"
    drafters.write_constant_drafter(str(base), 361)
    dirs = {"base": base}
    dirs["typo"] = variant(
        base,
        root / "typo",
        rename={"midlayer.mlp.down_proj.weight": "midlayer.mlp.down_prj.weight"},
    )
    dirs["typo_bias"] = variant(
        base,
        root / "typo_bias",
        rename={"midlayer.self_attn.o_proj.weight": "midlayer.self_attn.o_prj.bias"},
    )
    bias = ("BF16", [64], bytes(128))
    dirs["extra_bias"] = variant(
        base, root / "extra_bias", add={"midlayer.self_attn.o_proj.bias": bias, "fc.bias": bias}
    )
    dirs["no_lm_head"] = variant(base, root / "no_lm_head", drop={"lm_head.weight"})
    dirs["no_d2t"] = variant(base, root / "no_d2t", drop={"d2t", "t2d"})
    dirs["llama_arch"] = variant(
        base, root / "llama_arch", config={"architectures": ["LlamaForCausalLM"]}
    )
    dirs["two_layers"] = variant(base, root / "two_layers", config={"num_hidden_layers": 2})
    dirs["tied"] = variant(base, root / "tied", config={"tie_word_embeddings": True})
    dirs["tied_no_lm_head"] = variant(
        base,
        root / "tied_no_lm_head",
        drop={"lm_head.weight"},
        config={"tie_word_embeddings": True},
    )
    dirs["model_prefix"] = variant(
        base,
        root / "model_prefix",
        rename=lambda n: n if n in ("lm_head.weight", "d2t", "t2d") else "model." + n,
    )
    dirs["layers0"] = variant(
        base, root / "layers0", rename=lambda n: n.replace("midlayer.", "layers.0.")
    )
    dirs["model_layers0"] = variant(
        base, root / "model_layers0", rename=lambda n: n.replace("midlayer.", "model.layers.0.")
    )
    dirs["no_aux"] = variant(
        base,
        root / "no_aux",
        config={
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
                "use_aux_hidden_state": False,
            }
        },
    )
    dirs["no_aux_ids"] = variant(
        base, root / "no_aux_ids", config={"eagle_config": {"use_aux_hidden_state": True}}
    )
    dirs["top_level_aux_ids"] = variant(
        base, root / "top_level_aux_ids", config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    )
    dirs["no_k_proj"] = variant(base, root / "no_k_proj", drop={"midlayer.self_attn.k_proj.weight"})
    meta, data, info = read_st(base / "model.safetensors")
    dn = "midlayer.mlp.down_proj.weight"
    dirs["duplicate"] = variant(
        base,
        root / "duplicate",
        add={
            "layers.0.mlp.down_proj.weight": (
                info[dn]["dtype"],
                info[dn]["shape"],
                bytes(len(data[dn])),
            )
        },
    )
    dirs["bad_act"] = variant(base, root / "bad_act", config={"hidden_act": "no_such_activation"})
    dirs["no_config"] = variant(base, root / "no_config")
    (dirs["no_config"] / "config.json").unlink()
    for name in PRODUCER_FIXTURES:
        dirs[name] = PRODUCERS / name
        for to in CONVERT_TO:
            dirs[f"{name}--to-{to}"] = _convert(PRODUCERS / name, root / f"{name}--to-{to}", to)

    args = ["--target", str(TARGET), "--traceback"]
    recs, wall, p = run_oracle("vllm", dirs, root, args, ORACLE_TIMEOUT)
    print(f"\nvLLM oracle: {len(dirs)} drafters in {wall:.1f} s")
    keep_oracle_report(wall, p.stderr.splitlines()[-len(dirs) - 2 :], recs)
    return recs


# --- what "loads fully" means ----------------------------------------------------------------------


def loads_fully(r: dict) -> None:
    """Started; every parameter loaded or from the target and equal to the checkpoint; every
    checkpoint key loaded except t2d (vLLM never reads it)."""
    assert r["started"], (r["stage"], r["error"], r.get("traceback"))
    assert r["architecture"] == "Eagle3LlamaForCausalLM"
    bad = {k: v for k, v in r["params"].items() if v["state"] not in ("loaded", "from_target")}
    assert not bad, bad
    neq = {k: v for k, v in r["params"].items() if v["equals_checkpoint"] is False}
    assert not neq, neq
    dropped = [k for k, v in r["keys"].items() if v["fate"] == "dropped" and k != "t2d"]
    assert not dropped, dropped
    assert r["params"]["model.embed_tokens.weight"]["state"] == "from_target"
    assert r["config"]["captured_layers"] and None not in r["config"]["captured_layers"]


def test_schema(oracle):
    r = oracle["base"]
    assert_record_schema(r, FATES)
    assert r["oracle"] == "vllm" and r["engine_version"].startswith("0.")


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
        "captured_layers": [-1, 0, 1],
        "tie_word_embeddings": False,
    }
    # q/k/v and gate/up are stacked into one parameter each, every slice written and equal
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    assert r["params"][qkv] == {"shape": [128, 128], "state": "loaded", "equals_checkpoint": True}
    for k in ("q", "k", "v"):
        assert r["keys"][f"midlayer.self_attn.{k}_proj.weight"]["params"] == [qkv]
    gu = "model.layers.0.mlp.gate_up_proj.weight"
    assert r["params"][gu] == {"shape": [256, 64], "state": "loaded", "equals_checkpoint": True}
    assert r["keys"]["midlayer.mlp.gate_proj.weight"]["params"] == [gu]
    assert r["keys"]["midlayer.mlp.up_proj.weight"]["params"] == [gu]
    # fc takes 3 aux hidden states; lm_head is the draft vocab's
    assert r["params"]["model.fc.weight"]["shape"] == [64, 192]
    assert r["params"]["lm_head.weight"] == {
        "shape": [128, 64],
        "state": "loaded",
        "equals_checkpoint": True,
    }


def test_d2t_consumed_as_draft_id_to_target_id_and_t2d_never_read(oracle):
    r = oracle["base"]
    assert r["d2t"] == {"present": True, "consumed_as": "draft_id_to_target_id"}
    assert r["keys"]["d2t"] == {"fate": "loaded", "params": ["draft_id_to_target_id"]}
    assert r["params"]["draft_id_to_target_id"] == {
        "shape": [128],
        "state": "loaded",
        "equals_checkpoint": True,
    }
    assert r["t2d"] == {"present": True, "consumed_as": None}
    assert r["keys"]["t2d"] == {"fate": "dropped", "params": []}


def test_typo_key_is_an_error(oracle):
    """An unknown name is not dropped: AutoWeightsLoader raises "There is no module or parameter
    named ..." (vllm 0.32.0 vllm/model_executor/models/utils.py AutoWeightsLoader._load_module).
    The parameter the typo should have filled is still at init when it stops."""
    r = oracle["typo"]
    assert not r["started"] and r["stage"] == "load"
    assert r["error"].startswith("ValueError: There is no module or parameter named")
    assert "down_prj" in r["error"]
    assert r["params"]["model.layers.0.mlp.down_proj.weight"]["state"] == "init"
    # the tensor it stopped on is an error; what was loaded before it is loaded; the tensors vLLM
    # collected but never got to are not reached; t2d was skipped while collecting (dropped)
    keys = r["keys"]
    assert keys["midlayer.mlp.down_prj.weight"] == {"fate": "error", "params": []}
    assert keys["fc.weight"] == {"fate": "loaded", "params": ["model.fc.weight"]}
    assert keys["norm.weight"] == {"fate": "not_reached", "params": []}
    assert keys["t2d"] == {"fate": "dropped", "params": []}
    assert [k for k, v in keys.items() if v["fate"] == "error"] == ["midlayer.mlp.down_prj.weight"]


def test_bias_of_an_existing_module_is_dropped_silently(oracle):
    """A ``.bias`` of a module that exists but has no bias (o_proj, fc) is ignored (GPTQ
    leftovers); a ``.bias`` under a module name that does not exist is still an error."""
    r = oracle["extra_bias"]
    loads_fully(dict(r, keys={k: v for k, v in r["keys"].items() if not k.endswith(".bias")}))
    assert r["keys"]["midlayer.self_attn.o_proj.bias"] == {"fate": "dropped", "params": []}
    assert r["keys"]["fc.bias"] == {"fate": "dropped", "params": []}
    r = oracle["typo_bias"]
    assert not r["started"] and r["stage"] == "load"
    assert r["error"].startswith(
        "ValueError: There is no module or parameter named 'layers.0.self_attn.o_prj'"
    ), r["error"]
    assert r["params"]["model.layers.0.self_attn.o_proj.weight"]["state"] == "init"


def test_missing_lm_head_is_taken_from_the_target(oracle):
    """No lm_head in the checkpoint: the proposer shares the target's whole lm_head (V rows, not
    Vd): vllm 0.32.0 vllm/v1/spec_decode/llm_base_proposer.py _maybe_share_lm_head."""
    r = oracle["no_lm_head"]
    assert r["started"], r["error"]
    assert r["params"]["lm_head.weight"] == {
        "shape": [512, 64],
        "state": "from_target",
        "equals_checkpoint": None,
    }
    assert "lm_head.weight" not in r["keys"]


def test_missing_d2t_leaves_the_map_at_its_zero_init(oracle):
    """No d2t: the mapper drops draft_id_to_target_id, which keeps its torch.zeros init (the
    identity map) and the drafter starts (vllm 0.32.0 llama_eagle3.py load_weights)."""
    r = oracle["no_d2t"]
    assert r["started"], r["error"]
    assert r["d2t"] == {"present": False, "consumed_as": None}
    assert r["params"]["draft_id_to_target_id"] == {
        "shape": [128],
        "state": "init",
        "equals_checkpoint": None,
    }


def test_llama_architecture_resolves_to_eagle3(oracle):
    r = oracle["llama_arch"]
    assert r["architecture"] == "Eagle3LlamaForCausalLM"
    loads_fully(r)


def test_two_layers_config_with_one_layer_of_weights(oracle):
    """num_hidden_layers 2: vLLM builds two decoder layers; layer 1 gets no weights and stays at
    init, and the drafter starts all the same."""
    r = oracle["two_layers"]
    assert r["started"], r["error"]
    assert r["config"]["num_hidden_layers"] == 2
    layer1 = {k: v for k, v in r["params"].items() if k.startswith("model.layers.1.")}
    assert layer1 and all(v["state"] == "init" for v in layer1.values()), layer1
    # the second layer reads H, not 2H (embeds are concatenated in layer 0 only)
    assert layer1["model.layers.1.self_attn.qkv_proj.weight"]["shape"] == [128, 64]
    assert all(
        v["state"] == "loaded" for k, v in r["params"].items() if k.startswith("model.layers.0.")
    )


def test_missing_k_proj_leaves_its_slice_at_init(oracle):
    """q/k/v are three slices of one parameter: without k_proj the k rows stay at init (the
    parameter is "partial"), what was written equals the checkpoint, and the drafter starts."""
    r = oracle["no_k_proj"]
    assert r["started"], r["error"]
    assert r["params"]["model.layers.0.self_attn.qkv_proj.weight"] == {
        "shape": [128, 128],
        "state": "partial",
        "equals_checkpoint": True,
    }


def test_duplicate_names_both_load_into_one_parameter(oracle):
    """midlayer.X and layers.0.X in one checkpoint: no error, both write the same parameter, the
    one yielded last wins. vLLM's safetensors iterator yields a file's names sorted, so
    ``midlayer.*`` comes after ``layers.0.*`` and wins (the parameter equals its tensor, not the
    zeros of the layers.0 copy)."""
    r = oracle["duplicate"]
    assert r["started"], r["error"]
    p = ["model.layers.0.mlp.down_proj.weight"]
    assert r["keys"]["midlayer.mlp.down_proj.weight"] == {"fate": "loaded", "params": p}
    assert r["keys"]["layers.0.mlp.down_proj.weight"] == {"fate": "loaded", "params": p}
    order = list(r["keys"])  # the iterator's order
    assert order.index("layers.0.mlp.down_proj.weight") < order.index(
        "midlayer.mlp.down_proj.weight"
    )
    assert r["params"][p[0]] == {"shape": [64, 128], "state": "loaded", "equals_checkpoint": True}


def test_failure_stages(oracle):
    r = oracle["no_config"]
    assert (r["started"], r["stage"], r["architecture"]) == (False, "config", None)
    assert r["error"].startswith("ValidationError: "), r["error"]
    r = oracle["bad_act"]
    assert (r["started"], r["stage"], r["architecture"]) == (
        False,
        "build",
        "Eagle3LlamaForCausalLM",
    )
    assert (
        r["error"]
        == "ValueError: Unsupported activation: no_such_activation. Only silu is supported for now."
    )
    assert r["params"] == {} and r["keys"]
    assert all(v == {"fate": "not_reached", "params": []} for v in r["keys"].values())


@pytest.mark.parametrize("name", ["base", "tied"])
def test_head_is_never_tied_to_the_embedding(oracle, name):
    """tie_word_embeddings is ignored: lm_head is its own ParallelLMHead, loaded from the
    checkpoint, while the embedding comes from the target."""
    r = oracle[name]
    loads_fully(r)
    assert r["config"]["tie_word_embeddings"] is (name == "tied")
    assert r["params"]["lm_head.weight"]["state"] == "loaded"
    assert r["params"]["lm_head.weight"]["shape"] == [128, 64]


def test_tied_without_lm_head_takes_the_target_head_not_the_embedding(oracle):
    r = oracle["tied_no_lm_head"]
    assert r["started"], r["error"]
    assert r["params"]["lm_head.weight"]["state"] == "from_target"
    assert r["params"]["lm_head.weight"]["shape"] == [512, 64]


def test_model_prefix(oracle):
    """vLLM prefixes every name but lm_head/d2t with ``model.``: ``layers.0.*`` and ``midlayer.*``
    load; a name that already has ``model.`` becomes ``model.model.*`` -> error."""
    loads_fully(oracle["layers0"])
    assert oracle["layers0"]["keys"]["layers.0.self_attn.q_proj.weight"]["params"] == [
        "model.layers.0.self_attn.qkv_proj.weight"
    ]
    for name in ("model_prefix", "model_layers0"):
        r = oracle[name]
        assert not r["started"] and r["stage"] == "load", (name, r["error"])
        assert r["error"].startswith(
            "ValueError: There is no module or parameter named 'model' in LlamaModel"
        ), r["error"]


def test_aux_ids(oracle):
    """eagle_config ids are used as given (id 0 = the embedding output, id k = layer k-1's
    output); a top-level list wins; none -> the target's default (2, L//2, L-3), which for this
    4-layer target captures only two distinct layers."""
    assert oracle["base"]["config"]["aux_layer_ids"] == [0, 1, 2]
    assert oracle["base"]["config"]["captured_layers"] == [-1, 0, 1]
    top = oracle["top_level_aux_ids"]["config"]
    assert top["aux_layer_ids"] == [1, 2, 3] and top["captured_layers"] == [0, 1, 2]
    none = oracle["no_aux_ids"]
    assert none["started"], none["error"]
    assert none["config"]["aux_layer_ids"] == [2, 2, 1]
    assert none["config"]["aux_layer_ids_from"] == "default"
    assert top["aux_layer_ids_from"] == "config"
    assert none["config"]["captured_layers"] == [0, 1]


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


# what vLLM captures for each producer fixture as written (ids as the producer wrote them), and
# for its --to vllm / --to speculators copies. -1 = the embedding output, i = target layer i's output.
CAPTURED = {
    "specforge-sglang": ([0, 1, 2], [-1, 0, 1]),
    "specforge-hf": ([0, 1, 2], [-1, 0, 1]),
    "speculators-train": ([1, 2, 3], [0, 1, 2]),
    "speculators-convert": ([2, 2, 1], [0, 1]),  # ids lost by the producer: vLLM's default
    "modelopt": ([0, 1, 2], [-1, 0, 1]),
    "modelopt-default-aux": ([0, 1], [-1, 0]),
    "modelopt-fullvocab-fp32": ([0, 1, 2], [-1, 0, 1]),
}
CAPTURED_CONVERTED = dict.fromkeys(CAPTURED, ([1, 2, 3], [0, 1, 2]))
CAPTURED_CONVERTED["speculators-convert"] = CAPTURED["speculators-convert"]
CAPTURED_CONVERTED["modelopt-default-aux"] = ([1, 2], [0, 1])


@pytest.mark.parametrize("name", PRODUCER_FIXTURES)
def test_producer_fixture_loads_fully(oracle, name):
    r = oracle[name]
    loads_fully(r)
    ids, captured = CAPTURED[name]
    assert (r["config"]["aux_layer_ids"], r["config"]["captured_layers"]) == (ids, captured)


def test_default_aux_ids_capture_fewer_states_than_fc_takes(oracle):
    """speculators-convert lost its aux ids: vLLM falls back to the target's default
    (2, L//2, L-3) = (2, 2, 1) for this 4-layer target, stored as the set {1, 2}: two captured
    states, while fc was built (and loaded) for three. Loading succeeds; the first draft step
    would not. "started" covers loading, not this runtime agreement."""
    r = oracle["speculators-convert"]
    assert r["started"]
    assert len(r["config"]["captured_layers"]) == 2
    assert r["params"]["model.fc.weight"]["shape"] == [64, 3 * 64]


def _convert_case(name, to):
    return pytest.param(name, to, id=f"{name}--to-{to}")


@pytest.mark.parametrize(
    "name,to", [_convert_case(n, t) for n in PRODUCER_FIXTURES for t in CONVERT_TO]
)
def test_converted_copy_loads_fully(oracle, name, to):
    r = oracle[f"{name}--to-{to}"]
    loads_fully(r)
    ids, captured = CAPTURED_CONVERTED[name]
    assert (r["config"]["aux_layer_ids"], r["config"]["captured_layers"]) == (ids, captured)


def test_two_aux_copy_sizes_fc_by_num_aux_hidden_states(oracle):
    """Two aux ids: vLLM sizes fc from num_aux_hidden_states or eagle_config's id list, else 3
    (vllm 0.32.0 llama_eagle3.py LlamaModel.__init__); top-level ids alone do not size it, so
    convert writes num_aux_hidden_states (docs/differential.md R3) and fc [64, 128] loads."""
    for to in CONVERT_TO:
        r = oracle[f"modelopt-default-aux--to-{to}"]
        assert r["started"], r.get("error")
        assert r["params"]["model.fc.weight"]["state"] == "loaded"
        assert r["keys"]["fc.weight"]["fate"] == "loaded"
