"""MLA EAGLE-3 drafters (``Eagle3DeepseekV2ForCausalLM``) through the engines' own loaders: the
SGLang 0.5.23 and vLLM 0.32.0 (CPU) oracles on the two MLA fixtures
(tests/fixtures/producers/mla-modelopt, mla-torchspec) and on MLA variants of the differential
corpus (tests/engine/corpus.py ``mla_variants``). What each asserts is what the engine's code did
here, on CPU; docs/mla-drafters.md §9 records it next to what was read.

Opt-in (marker ``engine``): ``python -m pytest -m engine tests/test_engine_mla.py``; an engine
whose side venv is absent has its tests skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers.engine import side_python

pytestmark = pytest.mark.engine

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import corpus  # noqa: E402

PRODUCERS = ROOT / "tests" / "fixtures" / "producers"
TARGET = PRODUCERS / "target-llama"
FIXTURES = {"modelopt": PRODUCERS / "mla-modelopt", "torchspec": PRODUCERS / "mla-torchspec"}
ORACLES = {"sglang": "sglang_oracle.py", "vllm": "vllm_oracle.py"}
ORACLE_TIMEOUT = 900
ARCH = corpus.MLA_ARCHITECTURE
# corpus variants run here (each engine: one oracle process for all of them)
VARIANTS = (
    "mm.miss.q_a_proj",
    "mm.miss.kv_a_proj_with_mqa",
    "mt.miss.q_a_proj",
    "mm.typo.down",
    "mt.wrap.eagle_module",
    "mm.wrap.model",
    "mm.extra.fc_bias",
    "mm.extra.fc_bias_flag",
    "mm.extra.layer1",
    "mm.nl2",
    "mm.nl2.layer1",
    "mm.q_proj",
    "mm.fused.sglang",
    "mm.fused.vllm",
    "mm.vd.pruned",
    "mm.vd.d2t_full",
    "mt.vd.absent",
    "mt.miss.lm_head",
    "mt.dup.kv_a",
    "mm.mix.q_a",
    "mm.arch.v3eagle",
    "mm.arch.v3",
    "mm.mt.deepseek_v3",
    "mm.cfg.ths_null",
    "mt.cfg.index_topk",
    "mm.swap.kv_a_kv_b",
    "mm.aux.top",
)
FUSED_SGLANG = "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
FUSED_VLLM = "model.layers.0.self_attn.fused_qkv_a_proj.weight"


def _run(engine: str, dirs: dict, extra=()) -> dict:
    py = side_python(engine)
    cmd = [py, str(ENGINE_DIR / ORACLES[engine]), "--target", str(TARGET), *extra]
    if engine == "sglang":
        cmd.append("--details")
    cmd += [str(d) for d in dirs.values()]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)  # the venv's own packages only
    p = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=ORACLE_TIMEOUT, cwd=str(ROOT)
    )
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or len(lines) != len(dirs):
        tail = "\n".join(p.stderr.splitlines()[-40:])
        pytest.fail(
            f"the {engine} oracle failed (exit {p.returncode}, {len(lines)} records):\n{tail}"
        )
    by_path = {r["drafter"]: r for r in lines}
    return {n: by_path[str(d)] for n, d in dirs.items()}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("mla")
    dirs = dict(FIXTURES)
    by_id = {v.id: v for v in corpus.mla_variants()}
    for vid in VARIANTS:
        dirs[vid] = corpus.write(by_id[vid], str(root / vid))
    cache: dict = {}

    def get(engine: str) -> dict:
        if engine not in cache:
            cache[engine] = _run(engine, dirs)
            path = os.environ.get("WEIGHTCHECK_ORACLE_REPORT")
            if path:
                with open(f"{path}.{engine}-mla.json", "w") as f:
                    json.dump(cache[engine], f, indent=1)
        return cache[engine]

    return get


def fates(r: dict) -> dict:
    return {k: e["fate"] for k, e in r["keys"].items()}


def states(r: dict) -> dict:
    return {k: p["state"] for k, p in r["params"].items()}


# --- both engines ----------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("fixture", ["modelopt", "torchspec"])
def test_fixture_loads_fully(records, engine, fixture):
    """Both published layouts load: every key but t2d written into a parameter, every parameter
    loaded (equal to the checkpoint, the fused down-projection = cat(q_a_proj, kv_a_proj_with_mqa))
    or bound from the target."""
    r = records(engine)[fixture]
    assert r["started"], (r["stage"], r["error"])
    assert r["architecture"] == ARCH
    f = fates(r)
    assert {v for k, v in f.items() if k != "t2d"} == {"loaded"}, f
    if "t2d" in f:
        assert f["t2d"] == "dropped"
    for name, p in r["params"].items():
        assert p["state"] in ("loaded", "from_target"), (name, p)
        if p["state"] == "loaded":
            assert p["equals_checkpoint"] is True, (name, p)
    fused = FUSED_SGLANG if engine == "sglang" else FUSED_VLLM
    layer = "layers.0." if fixture == "modelopt" else "midlayer."
    for half in ("q_a_proj", "kv_a_proj_with_mqa"):
        assert r["keys"][f"{layer}self_attn.{half}.weight"]["params"] == [fused]
    assert r["params"][fused]["shape"] == [64 + 32 + 16, 128]  # q_rank + kv_rank + rope, 2H


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_lone_half_of_the_fused_down_projection(records, engine):
    """q_a_proj missing: SGLang drops the lone kv_a_proj_with_mqa without a word (it waits for
    a partner that never comes) and the whole fused weight stays at init; vLLM loads kv_a into
    shard 1 and leaves shard 0 at init (partial). Both start."""
    for vid in ("mm.miss.q_a_proj", "mm.miss.kv_a_proj_with_mqa", "mt.miss.q_a_proj"):
        r = records(engine)[vid]
        assert r["started"], (vid, r["error"])
        if engine == "sglang":
            lone = [k for k, e in r["keys"].items() if "a_proj" in k and "fused" not in k]
            assert len(lone) == 1, lone
            assert r["keys"][lone[0]] == {"fate": "dropped", "params": []}, vid  # no warning
            assert r["params"][FUSED_SGLANG]["state"] == "init", vid
        else:
            assert r["params"][FUSED_VLLM]["state"] == "partial", vid
            assert {v for k, v in fates(r).items() if k != "t2d"} == {"loaded"}, vid


# --- SGLang 0.5.23 ---------------------------------------------------------------------------------


def test_sglang_bind_needs_cuda_synchronize_neutralised(records):
    """set_embed / set_embed_and_head end with torch.cuda.synchronize(): the oracle made it a
    no-op during bind and says so per record; post_load_weights split kv_b_proj on CPU.
    ModelOpt's config has no draft_vocab_size -> set_embed_and_head (head and embed from the
    target, the checkpoint's lm_head discarded); TorchSpec's has one -> set_embed only."""
    recs = records("sglang")
    mo, ts = recs["modelopt"], recs["torchspec"]
    assert any(c.endswith(":423 set_embed_and_head") for c in mo["cpu_patches"]), mo.get(
        "cpu_patches"
    )
    assert any(c.endswith(":415 set_embed") for c in ts["cpu_patches"]), ts.get("cpu_patches")
    for r in (mo, ts):
        post = r["sglang"]["post_load_weights"]
        assert post == {
            "model.midlayer.self_attn.w_kc": [2, 32, 32],
            "model.midlayer.self_attn.w_vc": [2, 32, 32],
        }
    assert mo["params"]["lm_head.weight"]["state"] == "from_target"
    assert mo["sglang"]["load_lm_head_from_target"] is True
    assert mo["config"]["draft_vocab_size"] is None
    assert ts["params"]["lm_head.weight"] == {
        "shape": [256, 64],
        "state": "loaded",
        "equals_checkpoint": True,
    }
    assert ts["keys"]["d2t"]["params"] == ["hot_token_id"]
    assert ts["sglang"]["hot_token_id_len"] == 256
    assert ts["params"]["model.embed_tokens.weight"]["state"] == "from_target"


def test_sglang_without_the_neutralised_synchronize_fails_at_bind(records):
    """--strict-cuda: SGLang's own bind on a CPU torch fails (what a CPU server would do)."""
    (r,) = _run("sglang", {"modelopt": FIXTURES["modelopt"]}, extra=["--strict-cuda"]).values()
    assert (r["started"], r["stage"]) == (False, "bind")
    assert r["error"] == "AssertionError: Torch not compiled with CUDA enabled"
    assert "cpu_patches" not in r
    assert set(fates(r).values()) == {"loaded"}  # the load itself was complete


def test_sglang_unknown_names_are_warned_and_skipped(records):
    """'Eagle3 MLA: skipping unexpected weight X' for a typo, a wrapper prefix, fc.bias without
    `bias`, layers.1.*, and vLLM's fused name; the parameters they should fill stay at init.
    A lone q_a/kv_a under an unknown prefix is cached, never paired, and dropped silently."""
    recs = records("sglang")
    r = recs["mm.typo.down"]
    assert r["started"]
    assert r["keys"]["layers.0.mlp.down_prj.weight"] == {
        "fate": "warned",
        "params": [],
        "warning": "Eagle3 MLA: skipping unexpected weight layers.0.mlp.down_prj.weight",
    }
    assert r["params"]["model.midlayer.mlp.down_proj.weight"]["state"] == "init"
    for vid in ("mt.wrap.eagle_module", "mm.wrap.model"):
        r = recs[vid]
        assert r["started"], vid
        f = fates(r)
        halves = {k for k in f if k.endswith(("q_a_proj.weight", "kv_a_proj_with_mqa.weight"))}
        assert {f[k] for k in halves} == {"dropped"}, vid
        d2t = [k for k in f if k.endswith(".d2t")]  # `name.endswith(".d2t")`: still read
        assert all(r["keys"][k]["params"] == ["hot_token_id"] for k in d2t), vid
        t2d = [k for k in f if k.endswith(".t2d")]  # skipped by name, no warning
        assert all(f[k] == "dropped" for k in t2d), vid
        rest = {v for k, v in f.items() if k not in halves and k not in d2t and k not in t2d}
        assert rest == {"warned"}, (vid, f)
        own = {k: s for k, s in states(r).items() if s != "from_target"}
        assert set(own.values()) == {"init"}, (vid, own)
    assert recs["mm.extra.fc_bias"]["keys"]["fc.bias"]["fate"] == "warned"
    assert recs["mm.extra.fc_bias_flag"]["keys"]["fc.bias"]["params"] == ["model.fc.bias"]
    assert {
        fates(recs["mm.extra.layer1"])[k]
        for k in recs["mm.extra.layer1"]["keys"]
        if k.startswith("layers.1.") and "a_proj" not in k
    } == {"warned"}
    assert recs["mm.fused.vllm"]["keys"]["layers.0.self_attn.fused_qkv_a_proj.weight"]["fate"] == (
        "warned"
    )


def test_sglang_prefused_name_is_dropped_silently(records):
    """A pre-fused fused_qkv_a_proj_with_mqa contains 'kv_a_proj_with_mqa': cached as a kv half
    whose q partner never comes -> dropped without a warning, the fused parameter at init."""
    r = records("sglang")["mm.fused.sglang"]
    assert r["started"]
    k = "layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight"
    assert r["keys"][k] == {"fate": "dropped", "params": []}
    assert r["params"][FUSED_SGLANG]["state"] == "init"


def test_sglang_build_failures(records):
    recs = records("sglang")
    for vid, msg in (
        ("mm.nl2", "ValueError: EAGLE3 currently only supports 1 layer"),
        ("mm.nl2.layer1", "ValueError: EAGLE3 currently only supports 1 layer"),
        ("mm.q_proj", "ValueError: Eagle3 MLA layer requires q_lora_rank in the draft config"),
    ):
        r = recs[vid]
        assert (r["started"], r["stage"], r["error"]) == (False, "build", msg), vid
        assert set(fates(r).values()) == {"not_reached"}
    r = recs["mm.arch.v3eagle"]  # Eagle3DeepseekV3ForCausalLM: vLLM-only name
    assert (r["stage"], r["error"].split(".")[0]) == (
        "build",
        "ValueError: Cannot find model module",
    )
    r = recs["mm.arch.v3"]  # DeepseekV3ForCausalLM -> DeepseekV3ForCausalLMNextN (an MTP head)
    assert r["architecture"] == "DeepseekV3ForCausalLMNextN"
    assert (r["stage"], r["error"]) == ("load", "AssertionError: Only 1 nextn layer is supported")


def test_sglang_pruned_head_without_draft_vocab_size_fails_at_load(records):
    """draft_vocab_size absent: SGLang builds a [V, H] head (to be replaced by the target's), so
    a checkpoint head of Vd rows fails the vocab-parallel shape assertion at load - the drafter
    never reaches the bind that would replace it. d2t with Vd == V is accepted."""
    recs = records("sglang")
    for vid in ("mm.vd.pruned", "mt.vd.absent"):
        r = recs[vid]
        assert (r["started"], r["stage"]) == (False, "load"), vid
        assert r["error"].startswith("AssertionError: self.org_vocab_size=512 "), r["error"]
        assert r["keys"]["lm_head.weight"]["fate"] == "error"
    r = recs["mm.vd.d2t_full"]
    assert r["started"] and r["sglang"]["hot_token_id_len"] == 512
    r = recs["mt.miss.lm_head"]  # draft_vocab_size set, no head: left at init, no check
    assert r["started"] and r["params"]["lm_head.weight"]["state"] == "init"


def test_sglang_duplicate_and_mixed_spellings(records):
    """layers.0.X and midlayer.X of a half map to one cache slot: the later one (sorted order:
    midlayer.*) is concatenated; a q_a spelled midlayer.* pairs with a kv_a spelled layers.0.*."""
    recs = records("sglang")
    r = recs["mt.dup.kv_a"]
    assert r["started"]
    assert r["keys"]["layers.0.self_attn.kv_a_proj_with_mqa.weight"]["fate"] == "dropped"
    assert r["params"][FUSED_SGLANG]["equals_checkpoint"] is True
    r = recs["mm.mix.q_a"]
    assert r["started"] and r["params"][FUSED_SGLANG]["state"] == "loaded"
    assert r["keys"]["midlayer.self_attn.q_a_proj.weight"]["params"] == [FUSED_SGLANG]


def test_sglang_reads_nested_aux_ids_only(records):
    r = records("sglang")["mm.aux.top"]  # ids only at the top level: SGLang's default
    assert r["config"]["aux_layer_ids_from"] == "default"


# --- vLLM 0.32.0 (CPU) -----------------------------------------------------------------------------


def test_vllm_parameters_are_canonical_names(records):
    """vLLM's MLA layer re-references its modules under self_attn.mla_attn.*; the record lists
    each parameter once, under named_parameters()' canonical name."""
    for fixture in FIXTURES:
        params = records("vllm")[fixture]["params"]
        assert not [p for p in params if ".mla_attn." in p]
        assert FUSED_VLLM in params


def test_vllm_unknown_names_are_errors_but_bias_is_dropped(records):
    recs = records("vllm")
    for vid, key, where in (
        ("mm.typo.down", "layers.0.mlp.down_prj.weight", "layers.0.mlp.down_prj"),
        ("mm.wrap.model", "model.fc.weight", "model"),
        ("mm.extra.layer1", "layers.1.input_layernorm.weight", "layers.1"),
        ("mm.fused.sglang", "layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight", None),
    ):
        r = recs[vid]
        assert (r["started"], r["stage"]) == (False, "load"), vid
        assert r["error"].startswith("ValueError: There is no module or parameter named"), vid
        if where:
            assert f"'{where}'" in r["error"], r["error"]
        assert r["keys"][key]["fate"] == "error", vid
    for vid in ("mm.extra.fc_bias", "mm.extra.fc_bias_flag"):  # `bias: true` changes nothing
        r = recs[vid]
        assert r["started"] and r["keys"]["fc.bias"] == {"fate": "dropped", "params": []}


def test_vllm_prefused_vllm_name_loads_whole(records):
    """layers.0.self_attn.fused_qkv_a_proj.weight (not a published layout) loads through the
    fused linear's shard-less path into the whole parameter."""
    r = records("vllm")["mm.fused.vllm"]
    assert r["started"]
    assert r["keys"]["layers.0.self_attn.fused_qkv_a_proj.weight"]["params"] == [FUSED_VLLM]
    assert r["params"][FUSED_VLLM] == {
        "shape": [112, 128],
        "state": "loaded",
        "equals_checkpoint": True,
    }


def test_vllm_q_lora_rank_null_cannot_load(records):
    """q_lora_rank null builds q_proj + kv_a_proj_with_mqa, but the mapper sends
    kv_a_proj_with_mqa to fused_qkv_a_proj, which does not exist then."""
    r = records("vllm")["mm.q_proj"]
    assert (r["started"], r["stage"]) == (False, "load")
    assert "'layers.0.self_attn.fused_qkv_a_proj'" in r["error"]
    assert r["keys"]["layers.0.self_attn.kv_a_proj_with_mqa.weight"]["fate"] == "error"


def test_vllm_more_layers(records):
    """num_hidden_layers 2: layer 1 (H-input) is built; without its tensors it stays at init and
    the drafter starts; with layers.1.* they load."""
    recs = records("vllm")
    r = recs["mm.nl2"]
    assert r["started"]
    assert r["params"]["model.layers.1.self_attn.fused_qkv_a_proj.weight"]["shape"] == [112, 64]
    assert {s for k, s in states(r).items() if ".layers.1." in k} == {"init"}
    r = recs["mm.nl2.layer1"]
    assert r["started"]
    assert r["params"]["model.layers.1.self_attn.fused_qkv_a_proj.weight"]["state"] == "loaded"
    # no layers.1.hidden_norm in the checkpoint (only layer 0 has one in the published layout)
    assert r["params"]["model.layers.1.hidden_norm.weight"]["state"] == "init"


def test_vllm_vocabulary(records):
    """d2t with Vd == V: no draft_id_to_target_id parameter -> ValueError. ModelOpt's pruned
    export (no draft_vocab_size) fails the same way. TorchSpec without lm_head: the target's
    whole [V, H] head is shared although Vd = 256."""
    recs = records("vllm")
    for vid in ("mm.vd.d2t_full", "mm.vd.pruned", "mt.vd.absent"):
        r = recs[vid]
        assert (r["started"], r["stage"]) == (False, "load"), vid
        assert "'draft_id_to_target_id'" in r["error"], r["error"]
        assert r["keys"]["d2t"]["fate"] == "error"
    r = recs["mt.miss.lm_head"]
    assert r["started"]
    assert r["params"]["lm_head.weight"]["state"] == "from_target"
    assert r["params"]["lm_head.weight"]["shape"] == [512, 64]


def test_vllm_architecture_and_model_type(records):
    """Eagle3DeepseekV3ForCausalLM and DeepseekV3ForCausalLM (renamed Eagle3...) both build the
    MLA drafter. model_type deepseek_v3 does not: the speculative config rewrites any
    deepseek_v3 draft to DeepSeekMTPModel, which the eagle3 prefix turns into an unknown
    Eagle3DeepSeekMTPModel (vllm 0.32.0 vllm/config/speculative.py:679-694)."""
    recs = records("vllm")
    for vid in ("mm.arch.v3eagle", "mm.arch.v3"):
        r = recs[vid]
        assert r["started"] and r["architecture"] == ARCH, vid
    r = recs["mm.mt.deepseek_v3"]
    assert (r["started"], r["stage"]) == (False, "config")
    assert r["error"].startswith("ValidationError: 1 validation error for SpeculativeConfig")


def test_vllm_config_failures(records):
    recs = records("vllm")
    r = recs["mm.cfg.ths_null"]
    assert (r["stage"], r["error"]) == (
        "build",
        "TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'",
    )
    r = recs["mt.cfg.index_topk"]  # a V3.2 indexer is built and wants its fields
    assert (r["stage"], r["error"]) == (
        "build",
        "AttributeError: 'EAGLEConfig' object has no attribute 'index_n_heads'",
    )
    r = recs["mm.aux.top"]  # the CPU (V1) runner reads top-level ids
    assert (r["config"]["aux_layer_ids"], r["config"]["aux_layer_ids_from"]) == (
        [1, 2, 3],
        "config",
    )
    assert r["config"]["captured_layers"] == [0, 1, 2]


def test_swapped_kv_names_fail_at_load_in_both(records):
    for engine in ("sglang", "vllm"):
        r = records(engine)["mm.swap.kv_a_kv_b"]
        assert (r["started"], r["stage"]) == (False, "load"), engine
        assert "error" in fates(r).values()
