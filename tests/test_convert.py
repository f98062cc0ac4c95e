"""`weightcheck convert`: round trips, layouts, aux-id conventions, refusals, safety.

Every output is checked from the outside: tensors re-read with safetensors.safe_open, configs as
JSON, and the project's own `compare` and `check` commands (docs/engines.md is the reference for
which target layers each engine captures).
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
import synth
from conftest import K25, PRODUCERS, ROOT, load_config, run_cli
from helpers.builders import read_config
from helpers.convert import (
    ENGINE_OF,
    TARGET,
    TRAINED_WITH,
    aux_ids,
    captured,
    check,
    compare,
    convert,
    errors_of,
    fixture_target,
    header,
    leftovers,
    llama_target,
    refused,
    repo_files,
    snapshot,
    tensor_bytes,
    torch_tensors,
    weight_files,
    with_aux_ids,
    write_target,
)

import weightcheck
from weightcheck.commands.convert import produce
from weightcheck.storage import verify as verify_mod

DESTS = ("sglang", "vllm", "speculators")
FIXTURES = (
    "specforge-sglang",
    "specforge-hf",
    "modelopt",
    "modelopt-default-aux",
    "modelopt-fullvocab-fp32",
    "speculators-train",
    "speculators-convert",
)


def llama_cfg(**kw):
    """The Kimi-K2.5 SpecForge config scaled down: model_type llama, ids [2, 30, 58]."""
    return synth.scaled_config(load_config(K25), **kw)


@pytest.fixture
def deepseek_target(tmp_path):
    """A Kimi-K2-like target (DeepSeek-V3 layout, 61 layers) as far as convert and check read it."""
    return write_target(
        tmp_path / "target-deepseek", "deepseek_v3", 61, architecture="DeepseekV3ForCausalLM"
    )


@pytest.fixture
def llama61_target(tmp_path):
    """A Llama target deep enough for ids [2, 30, 58]."""
    return write_target(tmp_path / "target-llama61", "llama", 61)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from hubserver import HubServer, patch_hf_hub

    with HubServer() as server:
        patch_hf_hub(monkeypatch, server.url, tmp_path / "hf_home")
        yield server


# doc-derived capture rules (docs/engines.md §3: 0-based target layer whose OUTPUT each id captures)
def sglang_captures(ids, family):
    if family == "llama":
        return list(ids)
    return [k if ids[0] == 1 else k - 1 for k in ids]  # DeepSeek-V2/V3 heuristic, SGLang >= 0.5.13


def vllm_captures(ids, family):
    return [k - 1 for k in ids]  # Llama and DeepSeek alike


def assert_round_trip(src, back, mid=None):
    """``back`` holds SRC's tensors byte for byte, and compare agrees (identical, same aux ids)."""
    a, b = tensor_bytes(src), tensor_bytes(back)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], f"{name} changed in the round trip"
    c = compare(src, back)
    assert c["verdict"] == "identical", c["reasons"]
    assert c["reasons"] == [] and c["bytes"]["different"] == 0 and c["bytes"]["not_compared"] == 0
    assert not any(d["field"] == "aux_layer_ids" for d in c["config_differences"])
    assert aux_ids(read_config(back)) == aux_ids(read_config(src))
    if mid is not None:  # the intermediate step holds the same bytes under the other names
        assert tensor_bytes(mid) == a
        assert compare(src, mid)["verdict"] == "identical"


# =============================================================================================
# 1. round trips
@pytest.mark.parametrize("via", ["speculators", "vllm"])
def test_round_trip_llama_family_synthetic(tmp_path, make_drafter, via):
    src = make_drafter("src", llama_cfg(), include_embed=True, seed=3)
    before = snapshot(src)
    mid, back = tmp_path / "mid", tmp_path / "back"
    r1 = convert(src, mid, "--to", via, "--target", llama_target())
    assert aux_ids(read_config(mid)) == [3, 31, 59]  # vLLM convention for a Llama target
    assert all(t["how"] == "copy" for t in r1["tensors"])
    r2 = convert(mid, back, "--to", "sglang")
    assert read_config(back)["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert any("[3, 31, 59]" in c and "[2, 30, 58]" in c for c in r2["config_changes"])
    assert_round_trip(src, back, mid)
    assert snapshot(src) == before


@pytest.mark.parametrize("via", ["speculators", "vllm"])
def test_round_trip_kimi_synthetic_with_target(
    tmp_path, make_drafter, tiny_cfg, deepseek_target, via
):
    src = make_drafter("src", tiny_cfg, seed=4)
    mid, back = tmp_path / "mid", tmp_path / "back"
    convert(src, mid, "--to", via, "--target", deepseek_target)
    assert aux_ids(read_config(mid)) == [
        2,
        30,
        58,
    ]  # same layers on a DeepSeek target (docs/engines.md)
    convert(mid, back, "--to", "sglang", "--target", deepseek_target)
    assert_round_trip(src, back, mid)


def test_round_trip_kimi_via_vllm_without_target_keeps_family(tmp_path, make_drafter, tiny_cfg):
    # the flat vLLM config keeps model_type kimi_k2, so the way back knows the family
    src = make_drafter("src", tiny_cfg, seed=4)
    mid, back = tmp_path / "mid", tmp_path / "back"
    convert(src, mid, "--to", "vllm")
    assert read_config(mid)["model_type"] == "kimi_k2"
    convert(mid, back, "--to", "sglang")
    assert_round_trip(src, back, mid)


# the speculators layout cannot keep model_type (vLLM detects the format by its absence); the
# family travels as the verifier's architecture (mappings/engines/speculators.toml)
def test_round_trip_kimi_via_speculators_without_target(tmp_path, make_drafter, tiny_cfg):
    src = make_drafter("src", tiny_cfg, seed=4)
    mid, back = tmp_path / "mid", tmp_path / "back"
    convert(src, mid, "--to", "speculators")
    assert read_config(mid)["speculators_config"]["verifier"]["architectures"] == [
        "DeepseekV3ForCausalLM"
    ]
    convert(mid, back, "--to", "sglang")
    assert aux_ids(read_config(back)) == [2, 30, 58]


@pytest.mark.parametrize("via", ["speculators", "vllm"])
@pytest.mark.parametrize("fixture", ["specforge-sglang", "modelopt"])
def test_round_trip_producer_fixtures(tmp_path, fixture, via):
    src = PRODUCERS / fixture
    before = snapshot(src)
    mid, back = tmp_path / "mid", tmp_path / "back"
    convert(src, mid, "--to", via, "--target", TARGET)
    assert aux_ids(read_config(mid)) == [1, 2, 3]  # the fixtures capture outputs of layers 0, 1, 2
    convert(mid, back, "--to", "sglang", "--target", TARGET)
    assert_round_trip(src, back, mid)
    for d in (mid, back):
        assert captured(d, ENGINE_OF[via] if d == mid else "sglang", TARGET) == [0, 1, 2]
    assert snapshot(src) == before


# =============================================================================================
# 2 + 3. every producer fixture to every destination: compare, check, layout
CASES = [(f, to) for f in FIXTURES for to in DESTS if (f, to) != ("speculators-train", "sglang")]


@pytest.mark.parametrize("fixture, to", CASES)
def test_every_fixture_to_every_destination(tmp_path, fixture, to):
    src = PRODUCERS / fixture
    before = snapshot(src)
    out = tmp_path / "out"
    r = convert(src, out, "--to", to, "--target", fixture_target())
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    # the same tensors, the same bytes
    c = compare(src, out)
    assert c["verdict"] == "identical", c["reasons"]
    assert c["only_in_a"] == [] and c["only_in_b"] == [] and c["bytes"]["different"] == 0
    assert tensor_bytes(src) == tensor_bytes(out)
    assert {t["how"] for t in r["tensors"]} == {"copy"}
    # the engine that reads this layout loads it without an error, with and without the target
    engine = ENGINE_OF[to]
    assert errors_of(check(out, engine)) == []
    rep = check(out, engine, TARGET)
    if fixture == "speculators-convert":
        # its aux ids were lost (README): for the 4-layer target the engine's default ids collapse
        # to 2 captured states for an fc built for 3, and the first forward fails (WC712; the
        # vLLM oracle's sc.asis captures [0, 1]: docs/differential.md R22)
        assert {code for code, _ in errors_of(rep)} == {"WC712"}, errors_of(rep)
    else:
        assert rep["ok"], errors_of(rep)
    # ... and captures the layers the producer trained on
    assert rep["engine"]["aux_layers"]["captures_output_of_layers"] == captured(
        src, TRAINED_WITH[fixture], TARGET
    )
    # names and config in the destination layout
    names = set(header(out / "model.safetensors")[0])
    layer = "midlayer." if to == "sglang" else "layers.0."
    assert any(n.startswith(layer) for n in names)
    assert not any(n.startswith("layers.0." if to == "sglang" else "midlayer.") for n in names)
    cfg = read_config(out)
    src_ids = aux_ids(read_config(src))
    if to == "speculators":
        assert cfg["architectures"] == ["Eagle3Speculator"]
        assert cfg["speculators_model_type"] == "eagle3"
        assert "model_type" not in cfg  # how vLLM recognises a speculators config
        layer_cfg = cfg["transformer_layer_config"]
        assert layer_cfg["model_type"] == "llama" and layer_cfg["hidden_size"] == 64
        assert isinstance(
            cfg["norm_before_residual"], bool
        )  # explicit: vLLM assumes true if absent
        assert cfg["speculators_config"]["algorithm"] == "eagle3"
        assert "eagle_config" not in cfg
    else:
        assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
        assert "transformer_layer_config" not in cfg and "speculators_config" not in cfg
        assert "speculators_model_type" not in cfg
        assert cfg["draft_vocab_size"] in (128, 512)  # SGLang reads it as an attribute
    if to == "sglang":
        assert "norm_before_residual" not in cfg
        assert "eagle_aux_hidden_state_layer_ids" not in cfg
        if src_ids is not None:
            assert isinstance(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"], list)
    elif src_ids is not None:
        assert isinstance(cfg["eagle_aux_hidden_state_layer_ids"], list)
        assert "eagle_aux_hidden_state_layer_ids" not in (cfg.get("eagle_config") or {})
    # the model card names the source
    card = (out / "README.md").read_text()
    assert pathlib.Path(src).name in card and str(src) not in card and f"{to} layout" in card
    assert snapshot(src) == before


@pytest.mark.parametrize("to", ["sglang", "vllm"])
def test_draft_vocab_size_written_when_the_source_omits_it(tmp_path, make_drafter, to):
    cfg = llama_cfg()
    del cfg["draft_vocab_size"]  # full-vocab drafter: the head has vocab_size rows
    src = make_drafter("src", cfg)
    assert tensor_bytes(src)["lm_head.weight"][1] == (2048, 128)
    convert(src, tmp_path / "out", "--to", to, "--target", llama_target())
    assert read_config(tmp_path / "out")["draft_vocab_size"] == 2048
    assert check(tmp_path / "out", to)["ok"]


def test_speculators_layout_keeps_sliding_window(tmp_path):
    # speculators train drafters use sliding-window attention: the layer config must keep it
    src = PRODUCERS / "speculators-train"
    out = tmp_path / "out"
    convert(src, out, "--to", "speculators", "--target", fixture_target())
    layer = read_config(out)["transformer_layer_config"]
    want = read_config(src)["transformer_layer_config"]
    for k in ("layer_types", "sliding_window", "use_sliding_window"):
        assert layer[k] == want[k], k
    assert read_config(out)["norm_before_residual"] is True


# the last target layer each engine captures among the trained ones (TARGET has 4 layers): id L in
# vLLM's convention (the output of layer L-1); in SGLang id L-2 (the output of layer L-2), because
# SGLang captures at the input of layer k+1 and layer L does not exist: id L-1 captures nothing
# (sglang 0.5.23 models/llama.py:929-941, :485-494; the SGLang oracle, corpus variant
# sf.aux.n234: ids [2, 3, 4] capture [2]). A ModelOpt drafter converted to vllm keeps its
# eagle_config keys and gets its ids at the top level; check's WC403 once read those in SGLang's
# convention and refused the id of the last layer in our own output.
LAST_LAYER_IDS = {"sglang": [0, 1, 2], "vllm": [1, 2, 4]}
LAST_LAYERS = {"sglang": [0, 1, 2], "vllm": [0, 1, 3]}


@pytest.mark.parametrize(
    "fixture, to",
    [(f, to) for f, to in CASES if f in ("specforge-sglang", "modelopt", "speculators-train")],
)
def test_the_targets_last_layer_survives_every_conversion(tmp_path, fixture, to):
    src = tmp_path / "src"
    shutil.copytree(PRODUCERS / fixture, src)
    cfg = read_config(src)
    ids = LAST_LAYER_IDS[TRAINED_WITH[fixture]]
    if isinstance(cfg.get("eagle_config"), dict):
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    else:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (src / "config.json").write_text(json.dumps(cfg))
    trained = captured(src, TRAINED_WITH[fixture], TARGET)
    assert trained == LAST_LAYERS[TRAINED_WITH[fixture]]
    assert check(src, TRAINED_WITH[fixture], TARGET)["ok"]
    out = tmp_path / "out"
    convert(src, out, "--to", to, "--target", str(TARGET))
    rep = check(out, ENGINE_OF[to], TARGET)
    assert rep["ok"], errors_of(rep)
    assert rep["engine"]["aux_layers"]["captures_output_of_layers"] == trained


# =============================================================================================
# 3. file format
def test_single_file_with_provenance_metadata(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg(), include_embed=True)
    out = tmp_path / "out"
    convert(src, out, "--to", "vllm", "--target", llama_target())
    assert [p.name for p in weight_files(out)] == ["model.safetensors"]
    assert not (out / "model.safetensors.index.json").exists()
    tensors, meta = header(out / "model.safetensors")
    assert meta["format"] == "pt"
    assert meta["weightcheck_source"] == src.name  # the folder's name, no path of this machine
    assert meta["weightcheck_version"] == weightcheck.__version__
    assert "weightcheck_source_revision" in meta
    # tensors back to back, no holes, nothing after the last one
    spans = sorted(t["data_offsets"] for t in tensors.values())
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    hlen = 8 + int.from_bytes((out / "model.safetensors").read_bytes()[:8], "little")
    assert os.path.getsize(out / "model.safetensors") == hlen + spans[-1][1]


def test_sharded_output_like_transformers(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg(), include_embed=True)
    out = tmp_path / "out"
    limit = 300_000
    r = convert(src, out, "--to", "sglang", "--max-shard-size", "300KB")
    shards = weight_files(out)
    n = len(shards)
    assert n > 1
    assert [p.name for p in shards] == [
        f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)
    ]
    assert not (out / "model.safetensors").exists()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    total, where, alone = 0, {}, False
    for p in shards:
        tensors, meta = header(p)
        assert meta["format"] == "pt" and meta["weightcheck_source"] == src.name
        sizes = [t["data_offsets"][1] - t["data_offsets"][0] for t in tensors.values()]
        assert sum(sizes) <= limit or len(sizes) == 1, (p.name, sizes)
        alone |= sizes[0] > limit  # embed_tokens (512 KB) gets a shard of its own
        total += sum(sizes)
        where.update({k: p.name for k in tensors})
    assert index["metadata"]["total_size"] == total
    assert index["weight_map"] == where
    assert alone
    assert set(where) == set(tensor_bytes(src, canonical=False))
    assert r["written"]["files"] == [p.name for p in shards] + ["model.safetensors.index.json"]
    assert r["written"]["tensors"] == len(where) and r["written"]["bytes"] == total
    assert_round_trip(src, out)
    assert check(out, "sglang")["ok"]
    # a sharded source converts like any other
    again = tmp_path / "again"
    convert(out, again, "--to", "vllm", "--target", llama_target())
    assert [p.name for p in weight_files(again)] == ["model.safetensors"]
    assert tensor_bytes(again) == tensor_bytes(src)


def test_hub_source_provenance(tmp_path, hub, make_drafter):
    src = make_drafter("src", llama_cfg())
    sha = hub.add_repo("org/drafter", repo_files(src))
    out = tmp_path / "out"
    convert("org/drafter", out, "--to", "vllm", "--target", llama_target())
    _, meta = header(out / "model.safetensors")
    assert meta["weightcheck_source"] == "org/drafter"
    assert meta["weightcheck_source_revision"] == sha
    card = (out / "README.md").read_text()
    assert "org/drafter" in card and sha in card
    assert tensor_bytes(out) == tensor_bytes(src)


# =============================================================================================
# 4. aux-id conventions
def test_aux_ids_llama_target_both_ways(tmp_path, make_drafter, llama61_target):
    src = make_drafter("src", llama_cfg())
    vl, sp, back = tmp_path / "vllm", tmp_path / "spec", tmp_path / "back"
    r = convert(src, vl, "--to", "vllm", "--target", llama61_target)
    assert read_config(vl)["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    line = next(c for c in r["config_changes"] if c.startswith("aux layer ids"))
    assert "[2, 30, 58]" in line and "[3, 31, 59]" in line and "llama" in line
    assert llama61_target.name in line and str(llama61_target) not in line
    convert(src, sp, "--to", "speculators", "--target", llama61_target)
    assert read_config(sp)["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    # the engines capture the same layers: SGLang k, vLLM k-1
    want = sglang_captures([2, 30, 58], "llama")
    assert want == vllm_captures([3, 31, 59], "llama") == [2, 30, 58]
    assert captured(src, "sglang", llama61_target) == want
    assert captured(vl, "vllm", llama61_target) == want
    assert captured(sp, "vllm", llama61_target) == want
    r = convert(vl, back, "--to", "sglang", "--target", llama61_target)
    assert read_config(back)["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert any("[3, 31, 59]" in c and "[2, 30, 58]" in c for c in r["config_changes"])


def test_aux_ids_without_target_are_refused_when_the_family_matters(tmp_path, make_drafter):
    """A SpecForge K2.5 drafter says model_type llama (its own layer type, not the target's): the
    ids [2, 30, 58] mean other layers in vLLM for a Llama target than for a Kimi one, so convert
    never guesses: exit 2, nothing written, the option that settles it named."""
    src = make_drafter("src", llama_cfg())
    out = tmp_path / "out"
    msg = refused(src, out, "--to", "vllm")
    assert "--target" in msg and "[3, 31, 59]" in msg and "[2, 30, 58]" in msg, msg
    assert not out.exists() and not leftovers(tmp_path)
    # a target named by another option settles it too
    r = convert(src, out, "--to", "vllm", "--embeddings", f"from={llama_target()}", "--dry-run")
    assert aux_ids(r["config"]) == [3, 31, 59]


def test_aux_ids_same_for_every_family_need_no_target(tmp_path, make_drafter):
    """[1, 29, 57] in SGLang's convention is [2, 30, 58] in vLLM's for Llama and DeepSeek/Kimi
    targets alike: no target needed, and the output says why."""
    src = make_drafter("src", with_aux_ids(llama_cfg(), [1, 29, 57]))
    r = convert(src, tmp_path / "out", "--to", "vllm")
    assert read_config(tmp_path / "out")["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    line = next(c for c in r["config_changes"] if c.startswith("aux layer ids"))
    assert "every target family" in line


def test_aux_ids_kimi_drafter_config(tmp_path, make_drafter, tiny_cfg, deepseek_target):
    # the drafter's own config says kimi_k2: DeepSeek-V3 layout (docs/formats.md §1)
    assert tiny_cfg["model_type"] == "kimi_k2"
    src = make_drafter("src", tiny_cfg)
    out = tmp_path / "out"
    r = convert(src, out, "--to", "vllm")
    assert read_config(out)["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    line = next(c for c in r["config_changes"] if c.startswith("aux layer ids"))
    assert "kept" in line and "kimi_k2" in line
    assert (
        sglang_captures([2, 30, 58], "deepseek")
        == vllm_captures([2, 30, 58], "deepseek")
        == [1, 29, 57]
    )
    assert captured(out, "vllm", deepseek_target) == [1, 29, 57]


@pytest.mark.parametrize(
    "sglang_ids, vllm_ids",
    [
        ([2, 30, 58], [2, 30, 58]),  # SGLang: first id != 1 -> k-1; vLLM: k-1
        ([1, 29, 57], [2, 30, 58]),  # SGLang's heuristic: first id == 1 -> k
        ([3, 31, 59], [3, 31, 59]),
    ],
)
def test_aux_ids_deepseek_target(tmp_path, make_drafter, deepseek_target, sglang_ids, vllm_ids):
    src = make_drafter(
        "src", with_aux_ids(llama_cfg(), sglang_ids)
    )  # model_type llama: --target decides
    out, back = tmp_path / "out", tmp_path / "back"
    r = convert(src, out, "--to", "vllm", "--target", deepseek_target)
    assert read_config(out)["eagle_aux_hidden_state_layer_ids"] == vllm_ids
    assert sglang_captures(sglang_ids, "deepseek") == vllm_captures(vllm_ids, "deepseek")
    assert captured(out, "vllm", deepseek_target) == sglang_captures(sglang_ids, "deepseek")
    line = next(c for c in r["config_changes"] if c.startswith("aux layer ids"))
    assert "deepseek_v3" in line and deepseek_target.name in line and str(sglang_ids) in line
    # without the target: refused where the families disagree, never guessed
    r = run_cli("convert", src, tmp_path / "nt", "--to", "vllm", "--dry-run", "--json")
    if sglang_ids[0] == 1:  # [1, 29, 57]: [2, 30, 58] for Llama and DeepSeek targets alike
        assert r.exit_code == 0 and aux_ids(r.json["config"]) == vllm_ids
    else:
        assert r.exit_code == 2 and "--target" in r.stderr, r
    # and back: ids that make SGLang capture the same layers
    convert(out, back, "--to", "sglang", "--target", deepseek_target)
    ids_back = aux_ids(read_config(back))
    assert sglang_captures(ids_back, "deepseek") == sglang_captures(sglang_ids, "deepseek")


# =============================================================================================
# 5. refusals and --config-from
def test_refuses_norm_before_residual_to_sglang(tmp_path):
    src = PRODUCERS / "speculators-train"
    assert read_config(src)["norm_before_residual"] is True
    msg = refused(src, tmp_path / "out", "--to", "sglang")
    assert "norm_before_residual" in msg and "SGLang" in msg
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    # vLLM has the option: converted, and the flag is kept
    convert(src, tmp_path / "v", "--to", "vllm", "--target", fixture_target())
    assert read_config(tmp_path / "v")["norm_before_residual"] is True


def test_out_exists_needs_force(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg())
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    msg = refused(src, out, "--to", "vllm", "--target", llama_target())
    assert "exists" in msg and "--force" in msg
    assert sorted(os.listdir(out)) == ["keep.txt"] and leftovers(tmp_path) == []
    # --force replaces only what weightcheck wrote: a folder holding keep.txt is not (issue #14)
    msg = refused(src, out, "--to", "vllm", "--target", llama_target(), "--force")
    assert "keep.txt" in msg and "weightcheck did not write" in msg
    assert sorted(os.listdir(out)) == ["keep.txt"] and leftovers(tmp_path) == []
    (out / "keep.txt").unlink()
    convert(
        src, out, "--to", "vllm", "--target", llama_target(), "--force"
    )  # an empty folder holds nothing of the user's
    assert "pass --force" in refused(
        src, out, "--to", "vllm", "--target", llama_target()
    )  # OUT is weightcheck's now ...
    convert(
        src, out, "--to", "vllm", "--target", llama_target(), "--force"
    )  # ... and --force replaces it
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"]
    assert compare(src, out)["verdict"] == "identical"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["src", "inside", "file"])
@pytest.mark.parametrize("force", [False, True])
def test_out_in_src_refused(tmp_path, make_drafter, where, force):
    src = make_drafter("src", llama_cfg())
    before = snapshot(src)
    out = {"src": src, "inside": src / "converted", "file": src / "model.safetensors"}[where]
    msg = refused(
        src, out, "--to", "vllm", "--target", llama_target(), *(["--force"] if force else [])
    )
    assert "SRC" in msg and "refused" in msg
    assert snapshot(src) == before
    assert sorted(os.listdir(src)) == ["config.json", "model.safetensors"]
    assert leftovers(tmp_path) == []


def test_config_from_incompatible_refused(tmp_path, make_drafter, tiny_cfg):
    src = make_drafter("src", tiny_cfg)
    ref = make_drafter("ref", synth.scaled_config(load_config(K25), hidden=256))
    c = compare(src, ref)
    assert c["verdict"] == "incompatible" and c["reasons"]
    msg = refused(src, tmp_path / "out", "--to", "sglang", "--config-from", ref)
    assert "--config-from refused" in msg and "incompatible" in msg
    for reason in c["reasons"]:
        assert reason in msg
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("to", ["sglang", "speculators"])
def test_config_from_compatible_founding_case(tmp_path, make_drafter, tiny_cfg, to):
    # K2-shaped weights under the K2.5 config (both scaled down alike)
    src = make_drafter("src", tiny_cfg, seed=1)
    ref_cfg = synth.scaled_config(load_config(K25))
    ref = make_drafter("ref", ref_cfg, seed=2)
    assert compare(src, ref)["verdict"] == "compatible"
    out = tmp_path / "out"
    r = convert(src, out, "--to", to, "--target", llama_target(), "--config-from", ref)
    # named by its folder only: the notes go into the model card (#21)
    assert any(ref.name in n and str(ref) not in n and "compatible" in n for n in r["notes"])
    cfg = read_config(out)
    if to == "sglang":  # REF's config, key for key (dtype also spelled torch_dtype)
        for k, v in ref_cfg.items():
            assert cfg[k] == v, k
        # and weightcheck's mark (--force replaces only a config.json carrying it)
        assert set(cfg) - set(ref_cfg) <= {"torch_dtype", "dtype", "weightcheck_converted_to"}
        assert cfg["model_type"] == "llama" and cfg["mlp_bias"] is False  # REF's, not SRC's
    else:
        layer = cfg["transformer_layer_config"]
        for k in (
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "head_dim",
            "vocab_size",
            "rope_theta",
            "max_position_embeddings",
            "mlp_bias",
        ):
            assert layer[k] == ref_cfg[k], k
        assert cfg["draft_vocab_size"] == ref_cfg["draft_vocab_size"]
    # SRC's weights, not REF's
    sb, rb, ob = tensor_bytes(src), tensor_bytes(ref), tensor_bytes(out)
    assert ob == sb
    assert any(sb[k][2] != rb[k][2] for k in sb if k in rb)
    assert compare(src, out)["verdict"] == "identical"
    assert check(out, ENGINE_OF[to])["ok"]


def test_read_only_destination_refused(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg())
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    immutable = False
    try:
        if os.access(parent, os.W_OK):  # root ignores modes: make the folder immutable instead
            immutable = (
                subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode == 0
            )
            if not immutable:
                pytest.skip("cannot make a read-only folder here (root without chattr)")
        msg = refused(src, parent / "out", "--to", "vllm", "--target", llama_target())
        assert "cannot write" in msg or "permission" in msg.lower()
        assert os.listdir(parent) == []
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(parent)], check=True)
        parent.chmod(0o755)


def test_unknown_names_need_a_mapping(tmp_path):
    from weightcheck.storage.writer import write_file

    cfg = llama_cfg()
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(cfg))
    tensors = synth.drafter_tensors(cfg, seed=7)
    for t in tensors:
        t.name = (
            "out_norm.weight" if t.name == "norm.weight" else t.name.replace("midlayer.", "block0.")
        )
    write_file(str(src / "model.safetensors"), tensors, {"format": "pt"})
    msg = refused(src, tmp_path / "out", "--to", "sglang")
    assert "--mapping" in msg and "block0." in msg
    assert not (tmp_path / "out").exists()
    mapping = tmp_path / "mine.toml"
    mapping.write_text(
        '[dialect]\nname = "mytrainer"\nkind = "layout"\ndescription = "block0.* layer"\n\n'
        "[detect]\ntensor_patterns = ['^block0\\\\.']\n\n"
        '[[rename]]\nprefix = "block0."\nto = "midlayer."\n\n'
        '[[rename]]\nexact = "out_norm.weight"\nto = "norm.weight"\n'
    )
    r = convert(src, tmp_path / "out", "--to", "sglang", "--mapping", mapping)
    assert r["source_dialect"] == "mytrainer"
    got = tensor_bytes(tmp_path / "out", canonical=False)
    raw = {t.name: t for t in tensors}
    assert "norm.weight" in got and "midlayer.self_attn.q_proj.weight" in got
    assert got["norm.weight"][2] == synth_bytes(raw["out_norm.weight"])
    assert got["fc.weight"][2] == synth_bytes(raw["fc.weight"])
    assert check(tmp_path / "out", "sglang")["ok"]


def synth_bytes(t) -> bytes:
    if isinstance(t.data, bytes):
        return t.data
    buf = bytearray()
    t.data(buf.extend)
    return bytes(buf)


def test_embeddings_from_target_of_another_width_refused(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg())  # hidden 128; target-llama is 64 wide
    msg = refused(src, tmp_path / "out", "--to", "vllm", "--embeddings", f"from={TARGET}")
    assert "64" in msg and "128" in msg
    assert not (tmp_path / "out").exists()


# =============================================================================================
# 6. --dry-run
def test_dry_run_text(tmp_path):
    src = PRODUCERS / "modelopt"
    out = tmp_path / "out"
    r = run_cli(
        "convert",
        src,
        out,
        "--to",
        "speculators",
        "--target",
        fixture_target(),
        "--dry-run",
        "--max-shard-size",
        "50KB",
        env={"COLUMNS": "200"},  # a row per tensor
    )
    assert r.exit_code == 0, r
    assert not out.exists() and os.listdir(tmp_path) == []
    lines = r.stdout.splitlines()
    names = header(src / "model.safetensors")[0]
    for name, t in names.items():
        row = next(line for line in lines if line.split()[:1] == [name])
        cols = row.split()
        assert cols[1] == "="  # speculators names = ModelOpt names
        assert cols[2].startswith("model-0000") and cols[2].endswith("-of-00003.safetensors")
        assert cols[3] == t["dtype"] and cols[-1] == "copy"
    assert any(
        line.startswith("config: aux layer ids [0, 1, 2]") and "[1, 2, 3]" in line for line in lines
    )
    assert "nothing written" in r.stdout


def test_dry_run_json(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg(), include_embed=True)
    out = tmp_path / "out"
    j = convert(
        src,
        out,
        "--to",
        "vllm",
        "--target",
        llama_target(),
        "--dry-run",
        "--dtype",
        "fp32",
        "--embeddings",
        "drop",
    )
    assert not out.exists() and leftovers(tmp_path) == []
    assert "written" not in j and j["schema"] == "weightcheck.convert/1"
    src_names = set(tensor_bytes(src, canonical=False)) - {"embed_tokens.weight"}
    assert {t["source"] for t in j["tensors"]} == src_names
    for t in j["tensors"]:
        assert t["shard"] == "model.safetensors" and t["output"] == t["source"].replace(
            "midlayer.", "layers.0."
        )
        if t["source_dtype"] == "BF16":
            assert t["dtype"] == "F32" and t["how"] == "cast"
        else:
            assert t["dtype"] == t["source_dtype"] and t["how"] == "copy"
    assert any("[3, 31, 59]" in c for c in j["config_changes"])
    assert any("dropped" in n for n in j["notes"])
    assert j["config"]["dtype"] == "float32"


# =============================================================================================
# 7. casts, embeddings, lm_head
@pytest.mark.parametrize(
    "flag, dtype", [("fp32", "float32"), ("fp16", "float16"), ("float32", "float32")]
)
def test_dtype_cast(tmp_path, make_drafter, flag, dtype):
    import torch

    src = make_drafter("src", llama_cfg(), include_embed=True)
    out = tmp_path / "out"
    convert(src, out, "--to", "sglang", "--dtype", flag)
    a, b = torch_tensors(src), torch_tensors(out)
    assert a.keys() == b.keys()
    for k, v in a.items():
        if v.is_floating_point():
            assert b[k].dtype == getattr(torch, dtype), k
            assert torch.equal(b[k], v.to(b[k].dtype)), k
        else:  # d2t / t2d are not cast
            assert b[k].dtype == v.dtype and torch.equal(b[k], v), k
    assert read_config(out)["dtype"] == read_config(out)["torch_dtype"] == dtype
    c = compare(src, out, "--values")
    assert c["verdict"] == "compatible" and c["reasons"] == []
    if flag == "fp32":  # an exact widening
        assert all(v["max_abs_diff"] == 0.0 for v in c["values"].values())
    assert check(out, "sglang")["ok"]


def test_an_unknown_dtype_is_a_usage_error(tmp_path):
    """The CLI's choice list is the API's too: 'half' (torch's alias) is neither spelling."""
    from weightcheck import api
    from weightcheck.errors import UsageError

    src = PRODUCERS / "specforge-sglang"
    with pytest.raises(UsageError, match=r"--dtype 'half': choose one of bf16, bfloat16, fp16"):
        api.convert(src, tmp_path / "out", to="sglang", dtype="half")
    assert not (tmp_path / "out").exists()
    said = refused(src, tmp_path / "out", "--to", "sglang", "--dtype", "half")
    assert "'half' is not one of 'bf16', 'bfloat16', 'fp16', 'float16', 'fp32', 'float32'" in said


def test_a_cast_that_makes_a_value_inf_is_refused(tmp_path):
    """bf16 reaches 3.4e38, float16 65504: a norm weight of 1e5 cast to fp16 is inf, and the
    served model computes with it. The cast is refused (nothing written), naming the tensor and
    the value; fp32, which holds it, converts; a value within float16's range converts."""
    import torch
    from safetensors.torch import load_file, save_file

    name = "midlayer.post_attention_layernorm.weight"

    def with_value(folder, v):
        shutil.copytree(PRODUCERS / "specforge-sglang", folder)
        t = load_file(folder / "model.safetensors")
        t[name] = t[name].clone()
        t[name][3] = v
        save_file(t, folder / "model.safetensors")
        return folder

    src = with_value(tmp_path / "big", 1e5)
    said = refused(src, tmp_path / "out", "--to", "sglang", "--dtype", "fp16")
    assert f"{name} holds 99840, beyond float16's largest 65504" in said and str(src) in said
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    convert(src, tmp_path / "wide", "--to", "sglang", "--dtype", "fp32")
    assert load_file(tmp_path / "wide" / "model.safetensors")[name][3].item() == 99840.0
    ok = with_value(tmp_path / "edge", 65280.0)  # bf16 near float16's end: exact in both
    convert(ok, tmp_path / "half", "--to", "sglang", "--dtype", "fp16")
    got = load_file(tmp_path / "half" / "model.safetensors")[name]
    assert got.dtype == torch.float16 and got[3].item() == 65280.0


def test_embeddings_drop(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg(), include_embed=True)
    out = tmp_path / "out"
    r = convert(src, out, "--to", "vllm", "--target", llama_target(), "--embeddings", "drop")
    got, want = tensor_bytes(out), tensor_bytes(src)
    assert "embed_tokens.weight" not in got and "embed_tokens.weight" in want
    assert got == {k: v for k, v in want.items() if k != "embed_tokens.weight"}
    assert any("dropped" in n for n in r["notes"])
    assert check(out, "vllm")["ok"]


def test_embeddings_from_local_target(tmp_path):
    src = PRODUCERS / "specforge-sglang"  # SpecForge's export has no embed_tokens
    out = tmp_path / "out"
    r = convert(src, out, "--to", "vllm", "--embeddings", f"from={TARGET}")
    item = next(t for t in r["tensors"] if t["output"] == "embed_tokens.weight")
    assert item["how"] == "embed-from-target" and item["source"] == "model.embed_tokens.weight"
    got = tensor_bytes(out)
    assert (
        got["embed_tokens.weight"]
        == tensor_bytes(TARGET, canonical=False)["model.embed_tokens.weight"]
    )
    assert {k: v for k, v in got.items() if k != "embed_tokens.weight"} == tensor_bytes(src)
    rep = check(out, "vllm", TARGET)
    assert rep["ok"], errors_of(rep)


def test_embeddings_from_hub_target_reads_only_that_tensor(tmp_path, hub):
    hub.add_repo("org/target", repo_files(TARGET))
    out = tmp_path / "out"
    convert(
        PRODUCERS / "specforge-sglang", out, "--to", "sglang", "--embeddings", "from=org/target"
    )
    want = tensor_bytes(TARGET, canonical=False)["model.embed_tokens.weight"]
    assert tensor_bytes(out)["embed_tokens.weight"] == want
    emb = len(want[2])
    fetched = hub.bytes_by_file[("org/target", "model.safetensors")]
    size = os.path.getsize(TARGET / "model.safetensors")
    assert emb <= fetched <= emb + 8192, (fetched, emb)  # the tensor's range plus a header read
    assert fetched < size / 4
    _, meta = header(out / "model.safetensors")
    assert meta["weightcheck_source"] == "specforge-sglang"


def test_lm_head_from_target_gathers_d2t_rows(tmp_path):
    import torch

    cfg = read_config(PRODUCERS / "specforge-sglang")
    src = tmp_path / "src"
    synth.write_drafter(str(src), cfg, skip=("lm_head.weight",), seed=3)
    out = tmp_path / "out"
    r = convert(src, out, "--to", "sglang", "--lm-head-from", TARGET)
    item = next(t for t in r["tensors"] if t["output"] == "lm_head.weight")
    assert item["how"] == "head-from-target" and item["shape"] == [128, 64]
    d2t = torch_tensors(src)["d2t"]
    head = torch_tensors(TARGET, canonical=False)["lm_head.weight"]
    rows = torch_tensors(out)["lm_head.weight"]
    ids = torch.arange(128) + d2t
    assert ids.unique().numel() == 128 and not torch.equal(ids, torch.arange(128))
    assert torch.equal(rows, head[ids])
    assert rows.dtype == head.dtype
    rep = check(out, "sglang", TARGET)
    assert rep["ok"], errors_of(rep)
    # a drafter that has its own head is not given another
    msg = refused(
        PRODUCERS / "specforge-sglang", tmp_path / "x", "--to", "sglang", "--lm-head-from", TARGET
    )
    assert "already has an lm_head" in msg


# =============================================================================================
# 8. SRC untouched, nothing left behind, interruptions
@pytest.mark.parametrize("to", DESTS)
def test_source_files_untouched_including_symlinked_run(tmp_path, to):
    src = PRODUCERS / "specforge-run" / "tiny-latest"  # a symlink to tiny-step2
    assert src.is_symlink()
    before = snapshot(src.parent)
    out = tmp_path / "out"
    convert(
        src,
        out,
        "--to",
        to,
        "--target",
        fixture_target(),
        "--config-from",
        PRODUCERS / "specforge-sglang",
    )
    assert snapshot(src.parent) == before
    assert leftovers(tmp_path) == [] and leftovers(src.parent) == []


def _prepare(tmp_path, make_drafter):
    src = make_drafter("src", llama_cfg(), include_embed=True)
    return src, snapshot(src), tmp_path / "out"


def test_injected_verify_failure_leaves_nothing(tmp_path, make_drafter, monkeypatch):
    src, before, out = _prepare(tmp_path, make_drafter)

    def boom(path, written_header, expected):
        assert os.path.getsize(path) > len(written_header)  # the shard was written
        raise RuntimeError("injected failure")

    monkeypatch.setattr(verify_mod, "reopen", boom)
    r = run_cli("convert", src, out, "--to", "vllm", "--target", llama_target())
    assert r.exit_code == 2 and "injected failure" in r.stderr
    assert not out.exists() and leftovers(tmp_path) == []
    assert snapshot(src) == before


def test_corrupted_copy_fails_verification(tmp_path, make_drafter, monkeypatch):
    src, before, out = _prepare(tmp_path, make_drafter)
    real = produce.copy_range

    def corrupt(src_path, src_off, n, out_fd, out_off):
        real(src_path, src_off, n, out_fd, out_off)
        if n > 4096:
            os.pwrite(out_fd, b"\x7f" * 16, out_off + n // 2)

    monkeypatch.setattr(produce, "copy_range", corrupt)
    msg = refused(src, out, "--to", "vllm", "--target", llama_target())
    assert "verification failed" in msg and "differs from its source" in msg
    assert not out.exists() and leftovers(tmp_path) == []
    assert snapshot(src) == before


def test_disk_full_leaves_nothing_and_keeps_old_out(tmp_path, make_drafter, monkeypatch):
    src, before, out = _prepare(tmp_path, make_drafter)
    convert(src, out, "--to", "sglang")  # an OUT --force may replace: one weightcheck wrote
    old = snapshot(out)

    def full(*a):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(produce, "copy_range", full)
    msg = refused(src, out, "--to", "vllm", "--target", llama_target(), "--force")
    assert "cannot write" in msg and "No space left" in msg
    assert snapshot(out) == old  # the old OUT is still there, untouched
    assert leftovers(tmp_path) == [] and snapshot(src) == before


def test_refusal_leaves_nothing(tmp_path, make_drafter):
    src, before, out = _prepare(tmp_path, make_drafter)
    ref = make_drafter("ref", synth.scaled_config(load_config(K25), hidden=256))
    refused(src, out, "--to", "vllm", "--target", llama_target(), "--config-from", ref)
    assert sorted(os.listdir(tmp_path)) == ["ref", "src"]
    assert snapshot(src) == before


def test_stale_tmp_removed_live_one_kept(tmp_path, make_drafter):
    src, _, out = _prepare(tmp_path, make_drafter)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.weightcheck-tmp-{dead.pid}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    live_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".out.weightcheck-tmp-{live_proc.pid}"
        live.mkdir()
        convert(src, out, "--to", "vllm", "--target", llama_target())
        assert not stale.exists()
        assert live.exists()  # another convert may be running: not ours to remove
        assert compare(src, out)["verdict"] == "identical"
    finally:
        live_proc.kill()
        live_proc.wait()
    shutil.rmtree(live)
    assert leftovers(tmp_path) == []


def test_sigterm_removes_tmp(tmp_path):
    cfg = llama_cfg(
        hidden=1024, intermediate=4096, heads=8, head_dim=128, vocab=65536, draft_vocab=32000
    )
    src = tmp_path / "src"
    synth.write_drafter(str(src), cfg, include_embed=True)
    assert os.path.getsize(src / "model.safetensors") > 200_000_000
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in src.iterdir()}
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "weightcheck",
            "convert",
            str(src),
            str(out),
            "--to",
            "vllm",
            "--target",
            str(llama_target(1024, 65536)),
        ],
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sent = False
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if leftovers(work):
            p.send_signal(signal.SIGTERM)
            sent = True
            break
        time.sleep(0.001)
    _, err = p.communicate(timeout=60)
    assert sent, f"the temporary folder never appeared (exit {p.returncode}: {err})"
    assert p.returncode != 0
    assert "interrupted" in err and "Traceback" not in err
    assert not out.exists() and leftovers(work) == []
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in src.iterdir()} == before
    shutil.rmtree(src)  # 250 MB: do not keep it in pytest's retained tmp folders


# =============================================================================================
# 9. no torch for a rename
_PROBE = (
    "import sys, json\nfrom weightcheck.cli import main\n"
    "try:\n    main(sys.argv[1:], prog_name='weightcheck')\n"
    "except SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
    "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))))"
)


@pytest.mark.parametrize("extra, torch_expected", [((), False), (("--dtype", "fp32"), True)])
def test_rename_does_not_import_torch(tmp_path, extra, torch_expected):
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            "convert",
            str(PRODUCERS / "modelopt"),
            str(out),
            "--to",
            "sglang",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
    )
    assert p.returncode == 0 and "exit" not in p.stderr, p.stderr
    mods = json.loads(p.stdout.strip().splitlines()[-1])
    assert (out / "model.safetensors").exists()
    assert bool(mods) is torch_expected, mods


# =============================================================================================
# 10. pickled training state
@pytest.mark.parametrize("to", DESTS)
def test_pickled_training_state_matches_export(tmp_path, to):
    src = PRODUCERS / "specforge-run" / "tiny-step2"
    export = PRODUCERS / "specforge-sglang"
    out = tmp_path / "out"
    r = convert(src, out, "--to", to, "--target", fixture_target(), "--config-from", export)
    assert {t["how"] for t in r["tensors"]} == {"pickle"}
    assert tensor_bytes(out) == tensor_bytes(export)
    c = compare(export, out)
    assert c["verdict"] == "identical", c["reasons"]
    assert check(out, ENGINE_OF[to], TARGET)["ok"]
    assert aux_ids(read_config(out)) == ([0, 1, 2] if to == "sglang" else [1, 2, 3])


def test_pickled_training_state_needs_a_config(tmp_path):
    msg = refused(PRODUCERS / "specforge-run" / "tiny-step2", tmp_path / "out", "--to", "sglang")
    assert "--config-from" in msg
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_mla_drafter_is_refused_by_the_speculators_format(tmp_path):
    """The speculators format holds Llama EAGLE-3 drafters (Eagle3Speculator): an MLA drafter is
    refused with one line, not written under a Llama architecture (--to sglang / vllm convert it:
    tests/test_mla.py)."""
    from helpers.builders import mla_drafter

    src = mla_drafter(tmp_path / "mla")
    r = run_cli("convert", src, tmp_path / "out", "--to", "speculators")
    assert r.exit_code == 2 and "deepseek_mla_eagle3" in r.stderr and "llama_eagle3" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
