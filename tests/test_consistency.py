"""One fact, one answer (issue #21, docs/consistency.md): the cases each command answered
differently, one test each. The law over the whole corpus is tests/test_law.py."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from helpers.builders import (
    MLA_CFG,
    PRODUCERS,
    TARGET,
    by_code,
    check,
    codes,
    consequences_of,
    edit,
    mla_drafter,
    said,
    target_copy,
    tensor_map,
)

SF = PRODUCERS / "specforge-sglang"


def _ids(ids):
    def f(c):
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids

    return f


def _layers0(src):
    return {n: n.replace("midlayer.", "layers.0.") for n in tensor_map(src)}


# --- item 1: plain check contains every engine's own answer ----------------------------------------
def test_plain_check_says_what_check_engine_vllm_says():
    """SpecForge nests its ids in eagle_config, which vLLM's V2 runner does not read: `--engine vllm`
    warns (WC710), so plain check does too, and vLLM's line says so instead of "loads every
    parameter"."""
    _, vl = check(SF, "--engine", "vllm")
    assert codes(vl) == {"WC710"}
    code, plain = check(SF)
    assert code == 0 and "WC710" in codes(plain)
    (f,) = by_code(plain, "WC710")
    assert f["severity"] == "warning" and "vllm (V2 runner, the default)" in f["message"]
    line = plain["engines"]["vllm"]
    assert "loads every parameter" not in line["says"] and "WC710" in line["says"]
    assert line["findings"] == {"errors": 0, "warnings": 1, "codes": ["WC710"]}
    assert "loads every parameter" in plain["engines"]["sglang"]["says"]


def test_an_engine_that_cannot_build_the_config_is_said_in_plain_check(tmp_path):
    """A config SGLang's transformers cannot build (rope scaling without its factor, a Llama
    drafter): plain check does not print "All checks passed" beside SGLang's "fails at build"."""
    src = edit(
        SF,
        tmp_path / "x",
        cfg=lambda c: c.update(rope_scaling={"rope_type": "yarn"}, rope_parameters=None),
    )
    _, sg = check(src, "--engine", "sglang")
    assert not sg["engine"]["starts"] and any(f["severity"] == "error" for f in sg["findings"])
    code, plain = check(src)
    r = run_cli("check", src, "--format", "concise")
    assert not r.stdout.startswith("All checks passed")
    assert not plain["engines"]["sglang"]["starts"]
    for f in sg["findings"]:
        assert (f["code"], f["subject"]) in {(g["code"], g["subject"]) for g in plain["findings"]}
    assert code == (0 if plain["engines"]["vllm"]["findings"]["errors"] == 0 else 1)


# --- items 2 and 13: other captured layers are an error for that engine --------------------------
def test_other_captured_layers_with_the_target_known_are_an_error_for_that_engine(tmp_path):
    """ids [0, 2, 3] (SpecForge, SGLang's convention) only in eagle_config. vLLM's default (V2)
    runner reads none there and captures the target's default ids: on an 8-layer target [2, 4, 5],
    other layers than trained — an error with `--engine vllm`, a warning naming vLLM in plain
    check (SGLang serves it). On the 4-layer target those defaults collapse to two states and
    SGLang cannot reach id 3: both fail the first forward (WC712), plain check exits 1."""
    target8 = target_copy(tmp_path / "target8", num_hidden_layers=8)
    src = edit(SF, tmp_path / "x", cfg=_ids([0, 2, 3]))
    code, vl = check(src, "--engine", "vllm", "--target", target8)
    assert code == 1 and by_code(vl, "WC708")[0]["severity"] == "error"
    assert "trained on layers [0, 2, 3]" in by_code(vl, "WC708")[0]["message"]
    code, plain = check(src, "--target", target8)
    assert code == 0 and by_code(plain, "WC708")[0]["severity"] == "warning"
    code, plain = check(src, "--target", TARGET)
    assert code == 1 and {e for e in plain["engines"] if not plain["engines"][e]["serves"]} == {
        "sglang",
        "vllm",
    }
    assert by_code(plain, "WC712")[0]["severity"] == "error"


def test_other_captured_layers_are_a_warning_naming_the_engine_when_the_other_serves_it(tmp_path):
    """SpecForge's [0, 1, 2] on an 8-layer target: SGLang captures the trained layers, vLLM's
    default runner its defaults: in plain check a warning naming vLLM (SGLang serves it), exit 0;
    with --engine vllm an error."""
    target8 = target_copy(tmp_path / "target8", num_hidden_layers=8)
    code, plain = check(SF, "--target", target8)
    assert code == 0
    (f,) = by_code(plain, "WC708")
    assert f["severity"] == "warning" and f["message"].startswith("vllm (V2 runner, the default)")
    assert check(SF, "--engine", "vllm", "--target", target8)[0] == 1


# --- item 3: the training gate and compare answer the founding question alike -------------------
def _mla_config(tmp_path):
    p = tmp_path / "mla.json"
    p.write_text(json.dumps(MLA_CFG))
    return p


def test_a_llama_drafter_cannot_silently_initialize_an_mla_drafter(tmp_path, examples_out):
    k2 = examples_out / "kimi-k2-drafter"
    cfg = _mla_config(tmp_path)
    cmp = run_cli("compare", k2, mla_drafter(tmp_path / "mla"), "--json")
    assert cmp.json["verdict"] == "incompatible"
    code, rep = check(k2, "--training-config", cfg)
    assert code == 1
    (root,) = [f for f in by_code(rep, "WC905") if f["subject"] == "architectures"]
    assert root["severity"] == "error"
    assert "llama_eagle3" in said(root) and "deepseek_mla_eagle3" in said(root)
    assert "the attention block" in said(root) and "--allow-partial-init" in root["message"]
    # the tensors training starts from scratch and the ones it ignores follow from it
    assert consequences_of(root, "WC903") and consequences_of(root, "WC902")
    t = rep["training"]
    assert t["architecture"] == "deepseek_mla_eagle3" and t["src_architecture"] == "llama_eagle3"
    assert 0 < t["parameters_initialized"] < t["parameters"]
    assert t["fraction_initialized"] == pytest.approx(
        t["parameters_initialized"] / t["parameters"], abs=1e-6
    )
    assert "midlayer.self_attn.q_a_proj.weight" in t["from_scratch"]
    text = run_cli("check", k2, "--training-config", cfg).stdout
    assert f"{t['parameters_initialized']:,} of {t['parameters']:,} parameters" in text


def test_the_reverse_an_mla_drafter_into_a_llama_run(tmp_path, examples_out):
    mla = mla_drafter(tmp_path / "mla")
    code, rep = check(mla, "--training-config", examples_out / "kimi-k2-drafter" / "config.json")
    assert code == 1 and by_code(rep, "WC905")


def test_allow_partial_init_makes_it_a_warning(tmp_path, examples_out):
    k2 = examples_out / "kimi-k2-drafter"
    code, rep = check(k2, "--training-config", _mla_config(tmp_path), "--allow-partial-init")
    assert code == 0
    assert {f["severity"] for f in by_code(rep, "WC905")} == {"warning"}
    (share,) = by_code(rep, "WC906")
    assert "SRC initializes" in share["message"] and "from scratch" in said(share)
    assert rep["training"]["allow_partial_init"] is True
    r = run_cli("check", k2, "--allow-partial-init")
    assert r.exit_code == 2 and "--training-config" in r.stderr


def test_the_same_architecture_initializes_everything(tmp_path, examples_out):
    k2 = examples_out / "kimi-k2-drafter"
    code, rep = check(k2, "--training-config", k2 / "config.json")
    assert not by_code(rep, "WC905") and not by_code(rep, "WC906")
    assert rep["training"]["fraction_initialized"] == 1.0


# --- item 4: answers depend on facts, not tensor names --------------------------------------------
def test_one_wrong_intermediate_size_is_one_root_in_every_layout(tmp_path):
    """One wrong intermediate_size: one WC409 root naming the field, the shape findings (WC206)
    and whatever the engines make of them under it, the same in the midlayer.* and layers.0.* layouts (the engine's parameters are canonical
    names, the checkpoint's are not: the causes relate them through the canonical names)."""

    def shape(rep):
        return sorted(
            (f["code"], tuple(sorted(c["code"] for c in f.get("consequences", []))))
            for f in rep["findings"]
        )

    mid = edit(SF, tmp_path / "mid", cfg=lambda c: c.update(intermediate_size=256))
    l0 = edit(
        SF, tmp_path / "l0", cfg=lambda c: c.update(intermediate_size=256), rename=_layers0(SF)
    )
    for args in ([], ["--engine", "sglang"], ["--engine", "vllm"]):
        a, b = check(mid, *args)[1], check(l0, *args)[1]
        assert shape(a) == shape(b), args
        assert {f["code"] for f in a["findings"]} <= {"WC409", "WC710"}, a["findings"]
        (root,) = [f for f in a["findings"] if f["code"] == "WC409"]
        assert root["subject"] == "intermediate_size" and "hold 128" in root["message"]
        assert {c["code"] for c in root["consequences"]} == {"WC206"}


def test_the_aux_convention_comes_from_the_config_not_the_names(tmp_path):
    """A SpecForge config over layers.0.* names keeps its ids where SGLang reads them, in SGLang's
    convention: the same answer as in the midlayer layout."""
    mid = edit(SF, tmp_path / "mid", cfg=_ids([0, 2, 3]))
    l0 = edit(SF, tmp_path / "l0", cfg=_ids([0, 2, 3]), rename=_layers0(SF))
    for args in ([], ["--engine", "sglang"], ["--engine", "vllm"]):
        a = check(mid, "--target", TARGET, *args)[1]
        b = check(l0, "--target", TARGET, *args)[1]
        assert a["findings"], args
        assert [(f["code"], f["severity"], f["message"]) for f in a["findings"]] == [
            (f["code"], f["severity"], f["message"]) for f in b["findings"]
        ], args


def test_sglang_minus_one_is_the_embeddings(tmp_path):
    """SGLang's convention captures the input of layer k+1: id -1 is the embeddings' output, no
    WC403; below it is."""
    assert "WC403" not in codes(check(edit(SF, tmp_path / "a", cfg=_ids([-1, 1, 2])))[1])
    assert "WC403" in codes(check(edit(SF, tmp_path / "b", cfg=_ids([-2, 1, 2])))[1])


# --- item 8: version honesty ----------------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.11"])
def test_a_version_the_applicable_loader_was_not_read_for_is_refused(tmp_path, version):
    """SGLang's Llama loader was read for many releases, its MLA loader for 0.5.23 only: an MLA
    drafter with --engine sglang==0.5.11 is exit 2 naming the versions recorded, not a replay of
    0.5.23's loader under another name."""
    mla = mla_drafter(tmp_path / "mla")
    r = run_cli("check", mla, "--engine", f"sglang=={version}")
    assert r.exit_code == 2
    assert "sglang_mla.toml" in r.stderr and "0.5.23" in r.stderr and version in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert run_cli("check", mla, "--engine", "sglang==0.5.23").exit_code in (0, 1)
    # the Llama loader was read for it: replayed
    assert run_cli("check", SF, "--engine", f"sglang=={version}").exit_code in (0, 1)


# --- found by trying it as a new user ----------------------------------------------------------------
def test_ids_no_engine_id_can_express_are_a_gate_refusal_not_bad_input(tmp_path):
    """[1, 2, 4] on a 4-layer Llama target end at the layer count (the last layer's output):
    SGLang cannot capture it. convert --to sglang said so as unreadable input (exit 2); it keeps
    the ids and its gate refuses them as check OUT --engine sglang would (exit 1, WC712: the
    target's first forward captures two states for an fc built for three)."""
    src = edit(SF, tmp_path / "x", cfg=_ids([1, 2, 4]))
    r = run_cli("convert", src, tmp_path / "out", "--to", "sglang", "--target", TARGET, "--json")
    assert r.exit_code == 1 and r.json["refused"]
    (run,) = r.json["check"]["engines"]
    assert "WC712" in {f["code"] for f in run["findings"]}
    assert any("kept as they are" in n for n in r.json["notes"])
    # vLLM captures them: --to vllm converts
    assert (
        run_cli("convert", src, tmp_path / "v", "--to", "vllm", "--target", TARGET).exit_code == 0
    )


def test_layers_beyond_num_hidden_layers_are_one_wc406(tmp_path):
    """Two layers of weights under num_hidden_layers 1: one WC406, with what each engine does
    with layer 1 (SGLang drops it, vLLM refuses it) under it; each engine line counts as its own
    check --engine E lists (one error)."""
    tm = tensor_map(SF)
    from weightcheck.storage.writer import OutTensor

    layer1 = []
    for n, t in tm.items():
        if n.startswith("midlayer.") and "hidden_norm" not in n:
            shape = t.shape
            if "self_attn" in n and n.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
                shape = (t.shape[0], t.shape[1] // 2)  # layers >= 1 read H, not 2H
            size = 2
            for x in shape:
                size *= x
            layer1.append(
                OutTensor(n.replace("midlayer.", "layers.1."), t.dtype, shape, b"\1" * size)
            )
    src = edit(SF, tmp_path / "x", add=layer1)
    code, rep = check(src)
    assert code == 1
    assert [f["code"] for f in rep["findings"] if f["severity"] == "error"] == ["WC406"]
    (root,) = by_code(rep, "WC406")
    assert consequences_of(root, "WC702") or consequences_of(root, "WC703")
    for e in ("sglang", "vllm"):
        assert rep["engines"][e]["findings"]["errors"] == 1, rep["engines"][e]


def test_compare_says_which_config_requires_a_tensor_only_one_side_has(tmp_path):
    from helpers.builders import write_checkpoint

    tm = tensor_map(SF)
    from weightcheck.storage.writer import OutTensor

    extra = [
        OutTensor(n.replace("midlayer.", "layers.1."), t.dtype, t.shape, t.data)
        for n, t in tm.items()
        if n.startswith("midlayer.mlp.")
    ]
    cfg = json.loads((SF / "config.json").read_text())
    cfg["num_hidden_layers"] = 2
    two = write_checkpoint(tmp_path / "two", cfg, list(tm.values()) + extra)
    r = run_cli("compare", two, SF, "--json")
    said = " ".join(r.json["reasons"])
    assert "only in A (A's config requires it" in said and "missing in B" not in said
