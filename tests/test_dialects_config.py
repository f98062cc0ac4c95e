"""Dialects (detection, evidence, canonical names) and config normalization (every spelling ends
in the same normalized field; the inventory's shapes follow it)."""

from __future__ import annotations

import json

import pytest
import synth
from conftest import run_cli
from helpers.bad_input import (
    canonical_tensors,
    dialect_names,
    inspect_json,
    out_bytes,
    write_renamed,
)
from helpers.builders import MLA_CFG

from weightcheck.model import config as config_mod
from weightcheck.model import dialects, inventory
from weightcheck.storage.writer import OutTensor


def _canon_map(report):
    return {t["name"]: t["canonical"] for t in report["tensors"]}


def _assert_all_ok(report):
    bad = [(t["name"], t["status"]) for t in report["tensors"] if t["status"] != "ok"]
    assert bad == [], bad
    assert report["unknown"] == [] and report["other_dialect"] == {} and report["duplicates"] == {}


# --- each dialect as synth writes it ----------------------------------------------------------
@pytest.mark.parametrize(
    "dialect,pattern",
    [
        ("specforge", r"^midlayer\."),
        ("speculators", r"^layers\.0\."),
        ("modelopt", r"input_embeds_norm\.weight$"),
    ],
)
def test_synth_dialects_detected_and_mapped(make_drafter, tiny_cfg, dialect, pattern):
    d = make_drafter(dialect, cfg=tiny_cfg, dialect=dialect)
    r = inspect_json(run_cli, d)
    assert r["dialect"]["name"] == dialect
    assert r["dialect"]["wrappers"] == []
    assert any(pattern in e for e in r["dialect"]["evidence"]), r["dialect"]["evidence"]
    assert _canon_map(r) == dialect_names(tiny_cfg, dialect)
    assert {t["via"] for t in r["tensors"]} == {dialect}
    _assert_all_ok(r)
    assert r["architecture"]["name"] == "llama_eagle3"


def test_modelopt_special_names(make_drafter, tiny_cfg):
    r = inspect_json(run_cli, make_drafter(cfg=tiny_cfg, dialect="modelopt"))
    m = _canon_map(r)
    assert m["input_embeds_norm.weight"] == "midlayer.input_layernorm.weight"
    assert m["eagle_lm_head.weight"] == "lm_head.weight"
    assert m["layers.0.self_attn.q_proj.weight"] == "midlayer.self_attn.q_proj.weight"
    assert "lm_head.weight" not in m and "midlayer.input_layernorm.weight" not in m


def test_speculators_checkpoint_with_speculators_config(tmp_path):
    """speculators convert/train: layers.0.*, input_norm (norm_before_fc), layer fields nested in
    transformer_layer_config, aux ids top level -- all flattened by normalization."""
    cfg = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "draft_vocab_size": 400,
        "norm_before_fc": True,
        "norm_before_residual": True,
        "fc_norm": False,
        "norm_output": False,
        "eagle_aux_hidden_state_layer_ids": [1, 15, 28],
        "target_hidden_size": None,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "speculators_config": {
            "algorithm": "eagle3",
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "t"},
        },
        "transformer_layer_config": {
            "model_type": "llama",
            "hidden_size": 128,
            "intermediate_size": 320,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "vocab_size": 2048,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "num_hidden_layers": 1,
        },
    }
    d = tmp_path / "spec"
    synth.write_drafter(str(d), cfg, dialect="speculators")
    r = inspect_json(run_cli, d)
    assert r["dialect"]["name"] == "speculators"
    ev = " | ".join(r["dialect"]["evidence"])
    for needle in (
        "^input_norm",
        "speculators_model_type",
        "transformer_layer_config",
        "architectures[0] is Eagle3Speculator",
    ):
        assert needle in ev, ev
    m = _canon_map(r)
    assert m["input_norm.weight"] == "input_norm.weight"
    assert m["layers.0.mlp.down_proj.weight"] == "midlayer.mlp.down_proj.weight"
    _assert_all_ok(r)
    shapes = {t["name"]: t["shape"] for t in r["tensors"]}
    assert shapes["input_norm.weight"] == [384]  # T * n_aux
    assert shapes["layers.0.self_attn.k_proj.weight"] == [64, 256]  # nkv=2 from the nested config

    n, p = r["config"]["normalized"], r["config"]["provenance"]
    assert (n["hidden_size"], p["hidden_size"]) == (128, "transformer_layer_config.hidden_size")
    assert (n["num_key_value_heads"], p["num_key_value_heads"]) == (
        2,
        "transformer_layer_config.num_key_value_heads",
    )
    assert (n["vocab_size"], n["draft_vocab_size"]) == (2048, 400)
    assert (n["aux_layer_ids"], p["aux_layer_ids"]) == (
        [1, 15, 28],
        "eagle_aux_hidden_state_layer_ids",
    )
    assert (n["rope_theta"], p["rope_theta"]) == (
        10000.0,
        "transformer_layer_config.rope_parameters.rope_theta",
    )
    assert n["rope_scaling"] == {"rope_theta": 10000.0, "rope_type": "default"}
    assert n["max_position_embeddings"] == 4096 and n["rms_norm_eps"] == 1e-5
    assert (n["target_hidden_size"], p["target_hidden_size"]) == (128, "default")  # null = absent
    assert n["norm_before_fc"] is True and n["norm_before_residual"] is True
    assert n["speculators_model_type"] == "eagle3"


def test_speculators_input_norm_without_norm_before_fc_is_not_expected(tmp_path, tiny_cfg):
    extra = [OutTensor("input_norm.weight", "BF16", (384,), b"\0" * 768)]
    mapping = write_renamed(
        tmp_path / "d", tiny_cfg, lambda n: n.replace("midlayer.", "layers.0."), extra=extra
    )
    r = inspect_json(run_cli, tmp_path / "d")
    assert r["dialect"]["name"] == "speculators"
    st = {t["name"]: t["status"] for t in r["tensors"]}
    assert st["input_norm.weight"] == "not expected by config"
    assert all(st[n] == "ok" for n in mapping)


# --- hand-renamed: prefixes and wrappers ------------------------------------------------------
def _sf(n):
    return n


def _sp(n):
    return n.replace("midlayer.", "layers.0.")


def _mo(n):
    return {
        "midlayer.input_layernorm.weight": "input_embeds_norm.weight",
        "lm_head.weight": "eagle_lm_head.weight",
    }.get(n, n.replace("midlayer.", "layers.0."))


def _mo_old(n):  # older ModelOpt: midlayer.* under eagle_module.
    return "eagle_module." + {
        "midlayer.input_layernorm.weight": "input_embeds_norm.weight",
        "lm_head.weight": "eagle_lm_head.weight",
    }.get(n, n)


def _hf(base):
    return lambda n: n if n == "lm_head.weight" else "model." + base(n)


RENAMED = [
    # id, rename, layout dialect, wrappers, evidence fragment
    ("modelopt-eagle_module", lambda n: "eagle_module." + _mo(n), "modelopt", [], "eagle_module."),
    ("modelopt-eagle_module-midlayer", _mo_old, "modelopt", [], "eagle_module."),
    (
        "training-draft_model-specforge",
        lambda n: "draft_model." + n,
        "specforge",
        ["training:draft_model."],
        "`draft_model.` (training)",
    ),
    (
        "training-module-specforge",
        lambda n: "module." + n,
        "specforge",
        ["training:module."],
        "`module.` (training)",
    ),
    (
        "training-module-speculators",
        lambda n: "module." + _sp(n),
        "speculators",
        ["training:module."],
        r"^layers\.0\.",
    ),
    (
        "training-draft_model-speculators",
        lambda n: "draft_model." + _sp(n),
        "speculators",
        ["training:draft_model."],
        "draft_model.",
    ),
    (
        "training-compiled-specforge",  # torch.compile's OptimizedModule holds it as _orig_mod
        lambda n: "_orig_mod." + n,
        "specforge",
        ["training:_orig_mod."],
        "`_orig_mod.` (training)",
    ),
    (
        "training-ddp-around-compiled-speculators",
        lambda n: "module._orig_mod." + _sp(n),
        "speculators",
        ["training:_orig_mod.", "training:module."],
        "`_orig_mod.` (training)",
    ),
    ("hf-model-layers0", _hf(_sp), "speculators", ["hf:model."], "`model.` (hf)"),
    ("hf-model-midlayer", _hf(_sf), "specforge", ["hf:model."], "`model.` (hf)"),
    (
        "module-then-hf",
        lambda n: "module." + _hf(_sp)(n),
        "speculators",
        ["hf:model.", "training:module."],
        "`module.` (training)",
    ),
]


@pytest.mark.parametrize(
    "rename,layout,wrappers,evidence", [r[1:] for r in RENAMED], ids=[r[0] for r in RENAMED]
)
def test_renamed_checkpoints(tmp_path, tiny_cfg, rename, layout, wrappers, evidence):
    mapping = write_renamed(tmp_path / "d", tiny_cfg, rename)
    r = inspect_json(run_cli, tmp_path / "d")
    assert r["dialect"]["name"] == layout
    assert sorted(r["dialect"]["wrappers"]) == sorted(wrappers)
    assert any(evidence in e for e in r["dialect"]["evidence"]), r["dialect"]["evidence"]
    assert _canon_map(r) == mapping  # every tensor to the right canonical name
    _assert_all_ok(r)
    assert r["looks_like_target"] is None


def test_round_trip_every_dialect_every_canonical_name():
    """from_canonical then to_canonical is the identity, for every layout and canonical name."""
    names = inventory.all_canonical_names()
    for d in dialects.bundled():
        if d.kind != "layout":
            continue
        for c in names:
            assert d.to_canonical(d.from_canonical(c)) == c, (d.name, c)


# --- mixed, unknown, duplicates, target-like --------------------------------------------------
def test_mixed_checkpoint_reports_foreign_names(tmp_path, tiny_cfg):
    foreign = {"midlayer.mlp.up_proj.weight", "midlayer.self_attn.v_proj.weight"}
    mapping = write_renamed(
        tmp_path / "d",
        tiny_cfg,
        lambda n: n.replace("midlayer.", "layers.0.") if n in foreign else n,
    )
    r = inspect_json(run_cli, tmp_path / "d")
    assert r["dialect"]["name"] == "specforge"
    assert r["other_dialect"] == {
        "layers.0.mlp.up_proj.weight": "speculators",
        "layers.0.self_attn.v_proj.weight": "speculators",
    }
    assert _canon_map(r) == mapping  # foreign names still map to their canonical names
    st = {t["name"]: t["status"] for t in r["tensors"]}
    assert st["layers.0.mlp.up_proj.weight"] == "other dialect (speculators)"
    assert st["midlayer.mlp.gate_proj.weight"] == "ok"
    assert r["missing"] == [m for m in r["missing"] if m["canonical"] == "embed_tokens.weight"]


def test_unknown_names_are_reported_never_dropped(tmp_path, tiny_cfg):
    extra = [
        OutTensor("fcs.0.weight", "BF16", (4, 4), b"\0" * 32),
        OutTensor("lm_head.bias", "BF16", (400,), b"\0" * 800),
        OutTensor("totally.unrelated", "F32", (3,), b"\0" * 12),
    ]
    write_renamed(tmp_path / "d", tiny_cfg, _sf, extra=extra)
    r = inspect_json(run_cli, tmp_path / "d")
    unknown = {"fcs.0.weight", "lm_head.bias", "totally.unrelated"}
    assert set(r["unknown"]) == unknown
    by = {t["name"]: t for t in r["tensors"]}
    for n in unknown:
        assert by[n]["canonical"] is None and by[n]["status"] == "unknown"
    assert by["totally.unrelated"]["shape"] == [3] and by["totally.unrelated"]["bytes"] == 12
    assert r["totals"]["tensors"] == len(canonical_tensors(tiny_cfg)) + 3
    text = run_cli("inspect", tmp_path / "d")
    assert text.exit_code == 0
    for n in unknown:
        assert f"unknown: {n}" in text.stdout


def test_unknown_names_from_canonicalize_directly():
    n = dialects.canonicalize(["midlayer.self_attn.q_proj.weight", "fc.weight", "weird.x"], {})
    assert n.dialect == "specforge"
    assert n.unknown == ["weird.x"] and n.canonical["weird.x"] is None
    assert set(n.canonical) == {"midlayer.self_attn.q_proj.weight", "fc.weight", "weird.x"}


def test_duplicate_canonical_names(tmp_path, tiny_cfg):
    t = next(t for t in canonical_tensors(tiny_cfg) if t.name == "midlayer.mlp.up_proj.weight")
    extra = [OutTensor("layers.0.mlp.up_proj.weight", t.dtype, t.shape, out_bytes(t))]
    write_renamed(tmp_path / "d", tiny_cfg, _sf, extra=extra)
    r = inspect_json(run_cli, tmp_path / "d")
    assert r["duplicates"] == {
        "midlayer.mlp.up_proj.weight": [
            "midlayer.mlp.up_proj.weight",
            "layers.0.mlp.up_proj.weight",
        ]
    } or sorted(r["duplicates"]["midlayer.mlp.up_proj.weight"]) == sorted(
        ["midlayer.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight"]
    )
    st = {t["name"]: t["status"] for t in r["tensors"]}
    assert st["midlayer.mlp.up_proj.weight"] == "duplicate"


def _target_tensors(layers=4, H=64, inter=128, V=512):
    out = [
        OutTensor("model.embed_tokens.weight", "BF16", (V, H), b"\0" * (2 * V * H)),
        OutTensor("model.norm.weight", "BF16", (H,), b"\0" * (2 * H)),
        OutTensor("lm_head.weight", "BF16", (V, H), b"\0" * (2 * V * H)),
    ]
    for i in range(layers):
        p = f"model.layers.{i}."
        for n, shape in (
            ("self_attn.q_proj.weight", (H, H)),
            ("self_attn.k_proj.weight", (H, H)),
            ("self_attn.v_proj.weight", (H, H)),
            ("self_attn.o_proj.weight", (H, H)),
            ("mlp.gate_proj.weight", (inter, H)),
            ("mlp.up_proj.weight", (inter, H)),
            ("mlp.down_proj.weight", (H, inter)),
            ("input_layernorm.weight", (H,)),
            ("post_attention_layernorm.weight", (H,)),
        ):
            numel = 1
            for s in shape:
                numel *= s
            out.append(OutTensor(p + n, "BF16", shape, b"\0" * (2 * numel)))
    return out


def test_target_model_passed_as_drafter(tmp_path):
    folder = tmp_path / "target"
    folder.mkdir()
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 512,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    from weightcheck.storage.writer import write_file

    write_file(str(folder / "model.safetensors"), _target_tensors())
    r = inspect_json(run_cli, folder)
    assert r["looks_like_target"] and "4 decoder layers" in r["looks_like_target"]
    assert "no fc.weight" in r["looks_like_target"]
    assert "hf:model." in r["dialect"]["wrappers"]
    # layers 1..3 read as decoder layers 1..3 (a multi-layer drafter names them so): every
    # tensor reported, none dropped
    later = [t for t in r["tensors"] if ".layers." in t["name"] and ".layers.0." not in t["name"]]
    assert len(later) == 27 and r["unknown"] == []
    assert all(t["canonical"] == t["name"][len("model.") :] for t in later)
    text = run_cli("inspect", folder)
    assert "this is a target model, not an EAGLE-3 drafter" in text.stdout


def test_a_drafter_does_not_look_like_a_target(make_drafter, tiny_cfg):
    for dia in ("specforge", "speculators"):
        r = inspect_json(run_cli, make_drafter(dia, cfg=tiny_cfg, dialect=dia))
        assert r["looks_like_target"] is None


# --- config normalization ---------------------------------------------------------------------
def _norm(cfg):
    return config_mod.normalize(cfg)


def test_dtype_vs_torch_dtype():
    a = _norm({"dtype": "bfloat16"})
    assert (a["dtype"], a.provenance["dtype"], a["dtype_key"]) == ("bfloat16", "dtype", "dtype")
    b = _norm({"torch_dtype": "float16"})
    assert (b["dtype"], b.provenance["dtype"], b["dtype_key"]) == (
        "float16",
        "torch_dtype",
        "torch_dtype",
    )
    c = _norm({"dtype": "bfloat16", "torch_dtype": "float32"})
    assert c["dtype"] == "bfloat16"  # transformers 5 spelling first
    d = _norm({"transformer_layer_config": {"torch_dtype": "float32"}})
    assert (d["dtype"], d.provenance["dtype"]) == (
        "float32",
        "transformer_layer_config.torch_dtype",
    )
    e = _norm({})
    assert e["dtype"] is None and e["dtype_key"] is None and e.provenance["dtype"] == "absent"


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_dtype_spelling_sets_expected_dtypes(make_drafter, tiny_cfg, key):
    cfg = {k: v for k, v in tiny_cfg.items() if k != "torch_dtype"}
    cfg[key] = "float16"
    r = inspect_json(run_cli, make_drafter(cfg=cfg))
    dts = {t["name"]: t["dtype"] for t in r["tensors"]}
    assert dts["fc.weight"] == "F16" and dts["d2t"] == "I64" and dts["t2d"] == "BOOL"
    assert r["config"]["normalized"]["dtype_key"] == key
    _assert_all_ok(r)


def test_rope_parameters_vs_rope_scaling_and_theta():
    old = _norm({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    assert (old["rope_theta"], old.provenance["rope_theta"]) == (500000.0, "rope_theta")
    assert old["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    assert old.provenance["rope_scaling"] == "rope_scaling"
    new = _norm({"rope_parameters": {"rope_theta": 500000, "rope_type": "llama3", "factor": 8.0}})
    assert (new["rope_theta"], new.provenance["rope_theta"]) == (
        500000.0,
        "rope_parameters.rope_theta",
    )
    assert isinstance(new["rope_theta"], float)  # an int theta is normalized to float
    assert new.provenance["rope_scaling"] == "rope_parameters"
    assert new["rope_scaling"]["rope_type"] == "llama3"
    # rope_scaling: null is absent, and rope_parameters is then used
    both = _norm(
        {"rope_scaling": None, "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}
    )
    assert both.provenance["rope_scaling"] == "rope_parameters" and both["rope_theta"] == 1e6
    assert _norm({}).provenance["rope_theta"] == "absent"


def test_aux_ids_nested_vs_top_level():
    nested = _norm({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58, 60]}})
    assert nested["aux_layer_ids"] == [2, 30, 58, 60]
    assert nested.provenance["aux_layer_ids"] == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert (nested["num_aux_hidden_states"], nested.provenance["num_aux_hidden_states"]) == (
        4,
        "default",
    )
    top = _norm({"eagle_aux_hidden_state_layer_ids": [1, 15]})
    assert (top["aux_layer_ids"], top.provenance["aux_layer_ids"]) == (
        [1, 15],
        "eagle_aux_hidden_state_layer_ids",
    )
    assert top["num_aux_hidden_states"] == 2
    both = _norm(
        {
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
            "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
        }
    )
    assert both["aux_layer_ids"] == [2, 30, 58]  # SGLang reads the nested one
    none = _norm({"eagle_aux_hidden_state_layer_ids": None})
    assert none["aux_layer_ids"] is None and none["num_aux_hidden_states"] == 3
    explicit = _norm({"num_aux_hidden_states": 2, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]})
    assert explicit["num_aux_hidden_states"] == 2


def test_four_aux_layers_widen_fc(make_drafter, tiny_cfg):
    cfg = json.loads(json.dumps(tiny_cfg))
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 20, 40, 58]
    r = inspect_json(run_cli, make_drafter(cfg=cfg))
    fc = next(t for t in r["tensors"] if t["canonical"] == "fc.weight")
    assert fc["shape"] == [128, 512] and fc["expected_shape"] == [128, 512]
    # the same file against a 3-aux config is a shape mismatch
    d = make_drafter("three", cfg=cfg)
    (d / "config.json").write_text(json.dumps(tiny_cfg))
    r = inspect_json(run_cli, d)
    fc = next(t for t in r["tensors"] if t["canonical"] == "fc.weight")
    assert fc["status"] == "shape != config [128, 384]"


def test_kimi_k25_text_config():
    cfg = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": {
            "model_type": "kimi_k2",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "num_hidden_layers": 61,
            "vocab_size": 163840,
            "rope_theta": 50000.0,
            "max_position_embeddings": 262144,
            "torch_dtype": "bfloat16",
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "rms_norm_eps": 1e-5,
        },
        "vision_config": {"hidden_size": 1152},
    }
    n = _norm(cfg)
    expect = {
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "num_attention_heads": 64,
        "num_hidden_layers": 61,
        "vocab_size": 163840,
        "rope_theta": 50000.0,
        "max_position_embeddings": 262144,
        "dtype": "bfloat16",
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }
    for k, v in expect.items():
        assert n[k] == v, k
        assert n.provenance[k].startswith("text_config."), (k, n.provenance[k])
    assert n["model_type"] == "kimi_k25"
    assert (n["head_dim"], n.provenance["head_dim"]) == (112, "default")  # 7168 // 64
    assert n["draft_vocab_size"] == 163840 and n["target_hidden_size"] == 7168


def test_head_dim_absent_defaults_to_hidden_over_heads(make_drafter, tiny_cfg):
    cfg = {k: v for k, v in tiny_cfg.items() if k != "head_dim"}
    cfg["num_key_value_heads"] = 2
    n = _norm(cfg)
    assert (n["head_dim"], n.provenance["head_dim"]) == (32, "default")
    r = inspect_json(run_cli, make_drafter(cfg=cfg))
    sh = {t["canonical"]: t["shape"] for t in r["tensors"]}
    assert sh["midlayer.self_attn.q_proj.weight"] == [128, 256]
    assert sh["midlayer.self_attn.k_proj.weight"] == [64, 256]
    _assert_all_ok(r)


def test_explicit_head_dim_with_nh_hd_not_hidden(make_drafter, tiny_cfg):
    cfg = dict(tiny_cfg, head_dim=48, num_key_value_heads=2)  # 4*48 = 192 != 128
    inv = inventory.expected(inventory.by_name("llama_eagle3"), _norm(cfg).symbols())
    assert inv.tensors["midlayer.self_attn.q_proj.weight"].shape == (192, 256)
    assert inv.tensors["midlayer.self_attn.k_proj.weight"].shape == (96, 256)
    assert inv.tensors["midlayer.self_attn.o_proj.weight"].shape == (128, 192)
    d = make_drafter(cfg=cfg)
    r = inspect_json(run_cli, d)
    _assert_all_ok(r)
    assert next(t for t in r["tensors"] if t["canonical"] == "midlayer.self_attn.o_proj.weight")[
        "shape"
    ] == [128, 192]
    # the same file read with head_dim removed (so hidden/heads = 32): q/k/v/o mismatch
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "head_dim"}))
    r = inspect_json(run_cli, d)
    bad = {t["canonical"]: t["status"] for t in r["tensors"] if t["status"] != "ok"}
    assert bad == {
        "midlayer.self_attn.q_proj.weight": "shape != config [128, 256]",
        "midlayer.self_attn.k_proj.weight": "shape != config [64, 256]",
        "midlayer.self_attn.v_proj.weight": "shape != config [64, 256]",
        "midlayer.self_attn.o_proj.weight": "shape != config [128, 128]",
    }


def test_draft_vocab_absent_means_full_vocab_and_no_maps(make_drafter, tiny_cfg):
    cfg = {k: v for k, v in tiny_cfg.items() if k != "draft_vocab_size"}
    n = _norm(cfg)
    assert (n["draft_vocab_size"], n.provenance["draft_vocab_size"]) == (2048, "default")
    inv = inventory.expected(inventory.by_name("llama_eagle3"), n.symbols())
    assert {"d2t", "t2d"} <= inv.not_applicable and "d2t" not in inv.tensors
    assert inv.tensors["lm_head.weight"].shape == (2048, 128)
    r = inspect_json(run_cli, make_drafter(cfg=cfg))
    names = {t["canonical"] for t in r["tensors"]}
    assert "d2t" not in names and "t2d" not in names
    assert [m["canonical"] for m in r["missing"]] == ["embed_tokens.weight"]
    _assert_all_ok(r)
    # with a draft vocab, the maps are required again
    cfg2 = dict(cfg, draft_vocab_size=400)
    d = make_drafter("v2", cfg=cfg)
    (d / "config.json").write_text(json.dumps(cfg2))
    r = inspect_json(run_cli, d)
    missing = {m["canonical"]: m["presence"] for m in r["missing"]}
    assert missing["d2t"] == "required" and missing["t2d"] == "optional"


@pytest.mark.parametrize("spelling", ["fc_norm", "use_aux_norm", "eagle_config.fc_norm"])
def test_fc_norm_expects_three_norms(make_drafter, tiny_cfg, spelling):
    cfg = json.loads(json.dumps(tiny_cfg))
    if spelling == "eagle_config.fc_norm":
        cfg["eagle_config"]["fc_norm"] = True
    else:
        cfg[spelling] = True
    n = _norm(cfg)
    assert n["fc_norm"] is True and n.provenance["fc_norm"] == spelling
    inv = inventory.expected(inventory.by_name("llama_eagle3"), n.symbols())
    for i in range(3):
        assert inv.tensors[f"fc_norm.{i}.weight"].shape == (128,)
    assert "fc_norm.3.weight" not in inv.tensors
    r = inspect_json(run_cli, make_drafter(cfg=cfg))
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= {t["canonical"] for t in r["tensors"]}
    _assert_all_ok(r)
    # one missing is reported as required
    d = make_drafter("less", cfg=cfg, skip=("fc_norm.2.weight",))
    r = inspect_json(run_cli, d)
    assert {
        "canonical": "fc_norm.2.weight",
        "presence": "required",
        "shape": [128],
    }.items() <= next(m for m in r["missing"] if m["canonical"] == "fc_norm.2.weight").items()


def test_fc_norm_absent_means_not_expected(make_drafter, tiny_cfg):
    cfg = dict(tiny_cfg, fc_norm=True)
    d = make_drafter(cfg=cfg)
    (d / "config.json").write_text(json.dumps(tiny_cfg))  # fc_norm absent: default false
    r = inspect_json(run_cli, d)
    st = {t["name"]: t["status"] for t in r["tensors"]}
    assert st["fc_norm.0.weight"] == "not expected by config"


# the MLA drafter of helpers.builders, with a rope base of its own and vLLM-style ids
MLA = {
    **MLA_CFG,
    "rope_theta": 50000.0,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
}


def test_mla_drafter(make_drafter):
    r = inspect_json(run_cli, make_drafter("mla", cfg=MLA))
    assert r["architecture"]["name"] == "deepseek_mla_eagle3"
    assert "Eagle3DeepseekV2ForCausalLM" in r["architecture"]["evidence"]
    assert r["dialect"]["name"] == "specforge"
    sh = {t["canonical"]: t["shape"] for t in r["tensors"]}
    assert sh["midlayer.self_attn.q_a_proj.weight"] == [96, 256]
    assert sh["midlayer.self_attn.q_a_layernorm.weight"] == [96]
    assert sh["midlayer.self_attn.q_b_proj.weight"] == [4 * (32 + 16), 96]
    assert sh["midlayer.self_attn.kv_a_proj_with_mqa.weight"] == [64 + 16, 256]
    assert sh["midlayer.self_attn.kv_a_layernorm.weight"] == [64]
    assert sh["midlayer.self_attn.kv_b_proj.weight"] == [4 * (32 + 32), 64]
    assert sh["midlayer.self_attn.o_proj.weight"] == [128, 4 * 32]
    assert "midlayer.self_attn.q_proj.weight" not in sh
    _assert_all_ok(r)
    n = r["config"]["normalized"]
    assert (
        n["q_lora_rank"],
        n["kv_lora_rank"],
        n["qk_nope_head_dim"],
        n["qk_rope_head_dim"],
        n["v_head_dim"],
    ) == (96, 64, 32, 16, 32)


def test_mla_tensors_win_over_a_llama_config(make_drafter):
    d = make_drafter("mla", cfg=MLA)
    (d / "config.json").write_text(json.dumps(dict(MLA, architectures=["LlamaForCausalLMEagle3"])))
    r = inspect_json(run_cli, d)
    assert r["architecture"]["name"] == "deepseek_mla_eagle3"
    assert "config says LlamaForCausalLMEagle3" in r["architecture"]["evidence"]
    # and with no architectures at all, the signature tensor decides
    (d / "config.json").write_text(
        json.dumps({k: v for k, v in MLA.items() if k != "architectures"})
    )
    assert inspect_json(run_cli, d)["architecture"]["name"] == "deepseek_mla_eagle3"


def test_mla_in_layers0_naming(tmp_path):
    mapping = write_renamed(tmp_path / "d", MLA, _sp)
    r = inspect_json(run_cli, tmp_path / "d")
    assert r["dialect"]["name"] == "speculators"
    assert _canon_map(r) == mapping
    assert r["architecture"]["name"] == "deepseek_mla_eagle3"
    _assert_all_ok(r)


# --- odd configs never crash ------------------------------------------------------------------
def test_zero_heads_is_a_config_problem_not_a_crash(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(
        json.dumps(
            {k: v for k, v in dict(tiny_cfg, num_attention_heads=0).items() if k != "head_dim"}
        )
    )
    r = run_cli("inspect", d, "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["config"]["normalized"]["head_dim"] is None
    assert any(p.startswith("head_dim:") for p in j["config"]["problems"])
    q = next(t for t in j["tensors"] if t["canonical"] == "midlayer.self_attn.q_proj.weight")
    assert q["expected_shape"] is None


def test_absurd_aux_count_is_not_expanded(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(
        json.dumps(dict(tiny_cfg, fc_norm=True, num_aux_hidden_states=10**12))
    )
    r = run_cli("inspect", d, "--json")
    assert r.exit_code == 0, r
    missing = [m["canonical"] for m in r.json["missing"]]
    assert not any(m.startswith("fc_norm.") and m != "fc_norm.{i}.weight" for m in missing)
    inv = inventory.expected(
        inventory.by_name("llama_eagle3"),
        _norm(dict(tiny_cfg, fc_norm=True, num_aux_hidden_states=10**12)).symbols(),
    )
    assert inv.tensors["fc_norm.{i}.weight"].problem
    assert len(inv.tensors) < 30


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"hidden_size": "128"}, "hidden_size"),
        ({"hidden_size": True}, "hidden_size"),
        ({"hidden_size": 128.0}, "hidden_size"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": {"a": 1}}}, "aux_layer_ids"),
        ({"torch_dtype": 16}, "dtype"),
        ({"rope_theta": "1e6"}, "rope_theta"),
        ({"fc_norm": "yes"}, "fc_norm"),
    ],
)
def test_wrongly_typed_config_values_are_problems(make_drafter, tiny_cfg, patch, field):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(json.dumps(dict(tiny_cfg, **patch)))
    r = run_cli("inspect", d, "--json")
    assert r.exit_code == 0, r
    assert any(p.startswith(f"{field}:") for p in r.json["config"]["problems"]), r.json["config"][
        "problems"
    ]


@pytest.mark.parametrize("arch", [[["nested"]], "LlamaForCausalLMEagle3", [{"a": 1}], [], None, 7])
def test_odd_architectures_values(make_drafter, tiny_cfg, arch):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(json.dumps(dict(tiny_cfg, architectures=arch)))
    r = run_cli("inspect", d, "--json")
    assert r.exit_code == 0, r
    assert r.json["dialect"]["name"] == "specforge"
    assert r.json["architecture"]["name"] == "llama_eagle3"  # from the tensors' signature


def test_defaults_over_unknown_fields_stay_absent():
    """A default naming a field that is itself unknown gives no value (not None marked 'default')."""
    n = _norm({"hidden_size": 128})
    for f in ("num_key_value_heads", "head_dim", "draft_vocab_size"):
        assert n[f] is None and n.provenance[f] == "absent", (f, n[f], n.provenance[f])
    assert (n["target_hidden_size"], n.provenance["target_hidden_size"]) == (128, "default")
    inv = inventory.expected(inventory.by_name("llama_eagle3"), n.symbols())
    q = inv.tensors["midlayer.self_attn.q_proj.weight"]
    assert q.shape is None and q.problem.startswith("shape unknown")
    assert inv.tensors["fc.weight"].shape == (128, 384)


def test_empty_config_inspects_without_crashing(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text("{}")
    r = inspect_json(run_cli, d)
    assert r["dialect"]["name"] == "specforge"
    assert r["architecture"]["name"] == "llama_eagle3"  # from the tensors
    assert all(t["expected_shape"] is None for t in r["tensors"] if t["canonical"] != "fc.weight")
