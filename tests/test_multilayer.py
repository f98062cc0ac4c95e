"""Multi-layer drafters (num_hidden_layers > 1): layer 0 as ``midlayer.*`` or ``layers.0.*``, layer
i >= 1 as ``layers.i.*`` (docs/formats.md, "Multi-layer drafters").

The drafters are the differential corpus's ``ml.*`` variants (tests/engine/corpus.py,
multilayer_variants()), the ones the engines' own loaders were run on (docs/differential.md): what
the replay says here is what SGLang 0.5.23 and vLLM 0.32.0 did with them. Engine facts cited:
  * both build num_hidden_layers layers; layer 0's q/k/v read 2H, later layers' H (sglang
    models/llama_eagle3.py:62-64,198-204; vllm models/llama_eagle3.py:80-82,198-207);
  * later layers read their input through hidden_norm in SGLang (input_layernorm unread) and
    through input_layernorm in vLLM (hidden_norm unread) (sglang :97-105; vllm :131-138);
  * SGLang's MLA drafter builds exactly one layer (kimi_k25_eagle3.py:243-244); vLLM's N.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import run_cli
from helpers.builders import TARGET, by_code, check, codes, read_config, said, tensor_map
from law import flat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "engine"))

import corpus  # noqa: E402

VARIANTS = {v.id: v for v in corpus.variants()}
LAYER1 = [
    "layers.1.self_attn.q_proj.weight",
    "layers.1.self_attn.k_proj.weight",
    "layers.1.self_attn.v_proj.weight",
    "layers.1.self_attn.o_proj.weight",
    "layers.1.mlp.gate_proj.weight",
    "layers.1.mlp.up_proj.weight",
    "layers.1.mlp.down_proj.weight",
    "layers.1.input_layernorm.weight",
    "layers.1.post_attention_layernorm.weight",
]


@pytest.fixture(scope="module")
def drafter(tmp_path_factory):
    root = tmp_path_factory.mktemp("ml")

    def get(vid: str):
        path = root / vid
        if not path.is_dir():
            corpus.write(VARIANTS[vid], str(path))
        return path

    return get


def inspect_json(path) -> dict:
    r = run_cli("inspect", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def engine_view(path, engine: str) -> dict:
    code, rep = check(path, "--engine", engine, "--target", TARGET)
    assert code in (0, 1)
    return rep["engine"]


def state(view: dict, param: str) -> str:
    return next(p["state"] for p in view["parameters"] if p["param"] == param)


# --- the canonical model: every layer explained, in every layout -----------------------------------
@pytest.mark.parametrize("vid", ["ml.sf.2", "ml.sf.2.layers0", "ml.mo.2", "ml.sc.2.nohn"])
def test_inspect_reads_every_layer(drafter, vid):
    r = inspect_json(drafter(vid))
    assert r["unknown"] == [] and r["other_dialect"] in ({}, [], None)
    canon = {t["canonical"] for t in r["tensors"]}
    assert "midlayer.self_attn.q_proj.weight" in canon  # layer 0, whatever its spelling
    assert set(LAYER1) <= canon
    by = {t["canonical"]: t for t in r["tensors"]}
    # layer 0 reads [embedding ; hidden] (2H), layer 1 the previous layer's output (H)
    assert by["midlayer.self_attn.q_proj.weight"]["shape"] == [64, 128]
    assert by["layers.1.self_attn.q_proj.weight"]["shape"] == [64, 64]
    assert [m for m in r["missing"] if m["presence"] == "required"] == []


@pytest.mark.parametrize("vid", ["ml.sf.2", "ml.sf.3", "ml.sf.2.layers0", "ml.mo.2"])
def test_plain_check_is_clean(drafter, vid):
    """No WC101 on layer-1 names, no WC406, no WC205: a 2- or 3-layer drafter whose count matches
    its config is fine; both engines load every parameter."""
    code, rep = check(drafter(vid), "--target", TARGET)
    assert code == 0, [(f["code"], f["message"]) for f in rep["findings"]]
    assert not codes(rep) & {"WC101", "WC205", "WC406", "WC204", "WC206"}
    for e in rep["engines"].values():
        assert e["starts"] and e["layers"] == VARIANTS[vid].config["num_hidden_layers"]
        assert not e["left_at_init"] and not e["dropped"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_engine_loads_layer_1(drafter, engine):
    v = engine_view(drafter("ml.sf.2"), engine)
    assert v["starts"] and v["layers"] == 2
    fates = {t["name"]: t["fate"] for t in v["tensors"]}
    assert all(fates[n] == "loaded" for n in LAYER1 + ["layers.1.hidden_norm.weight"])


def test_speculators_plain_later_layer(drafter):
    """speculators' layer 1 has no hidden_norm: vLLM never reads it (fine); SGLang reads it and
    keeps its init, and never reads the trained input_layernorm: convert --to sglang refuses."""
    path = drafter("ml.sc.2.nohn")
    v = engine_view(path, "vllm")
    assert v["starts"] and state(v, "model.layers.1.hidden_norm.weight") == "optional-absent"
    assert state(v, "model.layers.1.input_layernorm.weight") == "loaded"
    code, rep = check(path, "--target", TARGET)
    assert "WC406" not in codes(rep) and "WC204" not in codes(rep)
    out = path.parent / "sc2-sglang"
    r = run_cli("convert", path, out, "--to", "sglang", "--target", TARGET, "--json")
    assert r.exit_code != 0 and not out.exists()
    gate = json.dumps([said(f) for e in r.json["check"]["engines"] for f in flat(e["findings"])])
    assert "model.layers.1.hidden_norm.weight" in gate and "never read" in gate


# --- WC406: the layer count against the layers the weights hold -----------------------------------
def test_wc406_fewer_layers_than_weights(drafter):
    code, rep = check(drafter("ml.sf.1.held2"), "--target", TARGET)
    (f,) = by_code(rep, "WC406")
    assert f["severity"] == "error" and code == 1
    assert "num_hidden_layers is 1 but the weights hold 2 decoder layers" in f["message"]
    assert "no parameter for the tensors of layer 1" in said(f)
    assert "set it to 2" in f["message"]
    assert "WC101" not in codes(rep)


def test_wc406_one_layer_held(tmp_path):
    """The single-layer case keeps its wording: the weights hold one layer, the engines build 2."""
    from helpers.builders import copy_fixture

    src = copy_fixture("specforge-sglang", tmp_path / "sf")
    cfg = read_config(src)
    cfg["num_hidden_layers"] = 3
    (src / "config.json").write_text(json.dumps(cfg))
    _, rep = check(src, "--target", TARGET)
    (f,) = by_code(rep, "WC406")
    assert "the weights hold one decoder layer" in f["message"]
    assert "build 3 decoder layers and leave all but one at init" in said(f)


def test_gap_is_missing_tensors_not_wc406(drafter):
    """num_hidden_layers 3 with layers 0 and 2: layer 1's tensors are missing (WC204), the count
    is right."""
    _, rep = check(drafter("ml.sf.3.gap"), "--target", TARGET)
    assert "WC406" not in codes(rep)
    missing = {s for f in by_code(rep, "WC204") for s in f.get("subjects") or [f["subject"]]}
    assert "layers.1.mlp.down_proj.weight" in missing
    assert not any(s.startswith("layers.2.") for s in missing)


def test_layer_1_shape_is_h_wide(drafter):
    """Layer 1's q/k/v written 2H wide like layer 0: WC206 from the inventory, and both engines'
    weight loaders assert."""
    code, rep = check(drafter("ml.sf.2.l1_2h"), "--target", TARGET)
    bad = {s for f in by_code(rep, "WC206") for s in f.get("subjects") or [f["subject"]]}
    assert "layers.1.self_attn.q_proj.weight" in bad
    assert not any(s.startswith("midlayer.") for s in bad)
    for e in rep["engines"].values():
        assert not e["starts"] and e["says"].startswith("fails at load on layers.1.self_attn")


# --- convert: every layer, every layout, byte-exact ------------------------------------------------
@pytest.mark.parametrize("to", ["sglang", "vllm", "speculators"])
@pytest.mark.parametrize("vid", ["ml.sf.3", "ml.mo.2"])
def test_convert_keeps_every_layer(drafter, tmp_path, vid, to):
    src = drafter(vid)
    out = tmp_path / to
    r = run_cli("convert", src, out, "--to", to, "--target", TARGET)
    assert r.exit_code == 0, r.stdout + r.stderr
    n = VARIANTS[vid].config["num_hidden_layers"]
    cfg = read_config(out)
    assert cfg.get("transformer_layer_config", cfg)["num_hidden_layers"] == n
    names = set(tensor_map(out))
    for i in range(1, n):
        assert f"layers.{i}.self_attn.q_proj.weight" in names
    r = run_cli("compare", src, out)
    assert "verdict: IDENTICAL" in r.stdout


def test_round_trip_is_byte_exact(drafter, tmp_path):
    src = drafter("ml.sf.2")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for s, o, to in ((src, a, "speculators"), (a, b, "vllm"), (b, c, "sglang")):
        r = run_cli("convert", s, o, "--to", to, "--target", TARGET)
        assert r.exit_code == 0, r.stdout + r.stderr
    before, after = tensor_map(src), tensor_map(c)
    assert set(before) == set(after)
    assert all(before[k].data == after[k].data for k in before)


def test_convert_sets_num_hidden_layers_from_the_weights(drafter, tmp_path):
    """Source says 1, the weights hold 2: convert writes 2 and says why."""
    out = tmp_path / "o"
    r = run_cli("convert", drafter("ml.sf.1.held2"), out, "--to", "vllm", "--target", TARGET)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert read_config(out)["num_hidden_layers"] == 2
    assert "2 decoder layers are written" in r.stdout + r.stderr


def test_mla_two_layers(drafter, tmp_path):
    """vLLM builds both layers of an MLA drafter; SGLang's MLA drafter refuses more than one, and
    convert --to sglang says so."""
    path = drafter("ml.mm.2")
    v = engine_view(path, "vllm")
    assert v["starts"] and v["layers"] == 2
    s = engine_view(path, "sglang")
    assert not s["starts"] and "only supports 1 layer" in s["fails"]["why"]
    r = run_cli("convert", path, tmp_path / "o", "--to", "sglang", "--target", TARGET, "--json")
    gate = json.dumps([said(f) for e in r.json["check"]["engines"] for f in flat(e["findings"])])
    assert r.exit_code != 0 and "only supports 1 layer" in gate
    r = run_cli("convert", path, tmp_path / "v", "--to", "vllm", "--target", TARGET)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert read_config(tmp_path / "v")["num_hidden_layers"] == 2


def test_training_gate_counts_the_training_configs_layers(drafter):
    """--training-config: the architecture it builds has its own num_hidden_layers. A one-layer
    SRC into a 2-layer training run re-initializes layer 1 (WC902); a 2-layer SRC into a
    one-layer run leaves layer 1 unread (WC903). Another layer count is another architecture
    (WC905, as compare says): both are listed under it."""

    def every(rep, code):
        out = []

        def walk(fs):
            for f in fs:
                if f["code"] == code:
                    out.append(f)
                walk(f.get("consequences", []))

        walk(rep["findings"])
        return out

    one = corpus.PRODUCERS + "/specforge-sglang"
    two = drafter("ml.sf.2")
    _, rep = check(one, "--training-config", str(two / "config.json"))
    assert [f["subject"] for f in by_code(rep, "WC905")] == ["num_hidden_layers"]
    reinit = {s for f in every(rep, "WC902") for s in f.get("subjects") or [f["subject"]]}
    assert "layers.1.mlp.down_proj.weight" in reinit
    _, rep = check(two, "--training-config", one + "/config.json")
    unread = {s for f in every(rep, "WC903") for s in f.get("subjects") or [f["subject"]]}
    assert "layers.1.mlp.down_proj.weight" in unread and "WC902" not in {
        f["code"] for f in every(rep, "WC902") if f["subject"] != "embed_tokens.weight"
    }
