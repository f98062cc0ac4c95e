"""A wrong config value or a wrong tensor (weightcheck/model/held.py, rule WC409, WC206's advice).

A shape that contradicts the config is one of two mistakes, and the advice must not loop: a size
field copied from another model is one WC409 naming the field and the value every tensor it sizes
holds (following it gives back the trained drafter); a tensor exported with other rows is a WC206
that says to re-export the tensor, never to correct a config that every other tensor agrees with.
The randomized trials run a fixed sample by default and every case under ``-m stress``.
"""

from __future__ import annotations

import json
import random

import pytest
import synth
from conftest import PRODUCERS
from helpers import hurried
from helpers.builders import by_code, check, consequences_of, edit, read_config, said

from weightcheck.model import config as config_mod
from weightcheck.storage.writer import OutTensor

SF = PRODUCERS / "specforge-sglang"  # H 64, I 128, 2 heads of 32, 1 KV head, 3 aux layers
SPEC = PRODUCERS / "speculators-train"  # the layer's fields under transformer_layer_config


def _answer(src, *args) -> tuple[int, list]:
    code, rep = check(src, *args)
    return code, rep["findings"]


def _held(f: dict) -> int:
    return int(f["message"].split("the weights hold ")[1].split(";")[0])


def _shape_findings(rep: dict) -> list[dict]:
    """Every WC206, at any depth."""
    out = by_code(rep, "WC206")
    for f in rep["findings"]:
        out += consequences_of(f, "WC206")
    return out


def _rows(name: str, extra: int, axis: int = 0):
    """Tensor edit: ``extra`` more rows (axis 0) or columns (axis 1) of random bf16 values."""

    def f(m):
        t = m[name]
        shape = list(t.shape)
        shape[axis] += extra
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        m[name] = OutTensor(name, t.dtype, tuple(shape), synth.random_data("BF16", n * 2, 7))

    return f


def test_a_wrong_hidden_size_is_one_finding_naming_it(tmp_path):
    """hidden_size 96 beside weights of 64: every tensor contradicts it (13 of them, fc's width
    through target_hidden_size's default): one WC409, every shape finding and fc's width check
    under it, and its fix restores the drafter."""
    src = edit(SF, tmp_path / "x", cfg=lambda c: c.update(hidden_size=96))
    code, rep = check(src, "--engine", "sglang")
    assert code == 1
    (root,) = rep["findings"]
    assert root["code"] == "WC409" and root["subject"] == "hidden_size"
    assert root["message"].startswith("hidden_size is 96 but the weights hold 64")
    assert root["fix"] == 'set "hidden_size": 64 in config.json'
    shapes = _shape_findings(rep)
    assert len(shapes) >= 10 and all("hidden_size is wrong" in f["message"] for f in shapes)
    assert not consequences_of(root, "WC402"), "fc's width is WC409's fact, not fc's"
    fixed = edit(src, tmp_path / "y", cfg=lambda c: c.update(hidden_size=64))
    assert _answer(fixed, "--engine", "sglang") == _answer(SF, "--engine", "sglang")


def test_two_wrong_fields_are_two_findings(tmp_path):
    src = edit(SF, tmp_path / "x", cfg=lambda c: c.update(hidden_size=96, intermediate_size=200))
    _, rep = check(src)
    roots = {f["subject"]: _held(f) for f in by_code(rep, "WC409")}
    assert roots == {"hidden_size": 64, "intermediate_size": 128}
    assert not [f for f in rep["findings"] if f["code"] == "WC206"], "all explained"


def test_a_tensor_with_extra_rows_is_re_exported_not_configured(tmp_path):
    """down_proj with 4 extra rows: no config value gives it beside gate/up and the norms, so the
    advice is to re-export the tensor (it used to be "correct the config": changing hidden_size
    would have broken every other tensor)."""
    src = edit(SF, tmp_path / "x", tensors=_rows("midlayer.mlp.down_proj.weight", 4))
    code, rep = check(src, "--engine", "vllm")
    assert code == 1 and not by_code(rep, "WC409")
    (f,) = _shape_findings(rep)
    assert f["message"].endswith("the tensor is wrong: re-export it")
    assert "the tensor, not the config, is wrong" in said(f)


def test_a_fused_tensor_with_extra_rows_is_re_exported(tmp_path):
    src = hurried.fused(tmp_path / "x", which=("midlayer.self_attn.qkv_proj.weight",), extra_rows=4)
    _, rep = check(src, "--engine", "sglang")
    (f,) = _shape_findings(rep)
    assert "qkv_proj" in f["subject"] and f["message"].endswith("re-export it")
    (narrowed,) = consequences_of(f, "WC714")
    assert narrowed["message"].endswith("the tensor is wrong: re-export it")


def test_fc_width_alone_cannot_say_which_field(tmp_path):
    """num_aux_hidden_states 2 beside fc's 3 x 64 columns: target_hidden_size 96 or 3 aux layers
    would each fit, and only fc says so: no field is named, WC402 keeps its aux-layer guess."""
    src = edit(SF, tmp_path / "x", cfg=lambda c: c.update(num_aux_hidden_states=2))
    _, rep = check(src)
    assert not by_code(rep, "WC409")
    (width,) = [f for f in by_code(rep, "WC402") if "reads" in f["message"]]
    assert "as many as 3 aux layers" in said(width)
    (f,) = consequences_of(width, "WC206")
    assert f["message"].endswith("correct the config or the tensor")


def test_a_speculators_config_is_fixed_inside_its_layer_config(tmp_path):
    def cfg(c):
        c["transformer_layer_config"]["intermediate_size"] = 256

    _, rep = check(edit(SPEC, tmp_path / "x", cfg=cfg))
    (root,) = by_code(rep, "WC409")
    assert root["subject"] == "intermediate_size" and _held(root) == 128
    assert root["fix"] == "set transformer_layer_config.intermediate_size to 128 in config.json"


def test_an_absent_head_dim_follows_its_default(tmp_path):
    """head_dim absent (hidden_size // heads): 96 written instead of 64 makes it 48, and every
    projection contradicts hidden_size, through the default too."""

    def cfg(c):
        del c["head_dim"]
        c["hidden_size"] = 96

    _, rep = check(edit(SF, tmp_path / "x", cfg=cfg))
    (root,) = by_code(rep, "WC409")
    assert root["subject"] == "hidden_size" and _held(root) == 64


def test_heads_the_shapes_cannot_tell_apart_are_not_guessed(tmp_path):
    """head_dim absent and 4 heads written instead of 2: q and o still fit (4 x 16 = 2 x 32), k
    and v do not; 2 heads of 32 or 2 KV heads of 16 give the same shapes, so no field is named
    and the advice is to correct the config, naming both."""

    def cfg(c):
        del c["head_dim"]
        c["num_attention_heads"] = 4

    _, rep = check(edit(SF, tmp_path / "x", cfg=cfg))
    assert not by_code(rep, "WC409")
    shapes = _shape_findings(rep)
    assert shapes and all(f["message"].endswith("; correct the config") for f in shapes)
    assert all(
        "num_attention_heads 2" in said(f) and "num_key_value_heads 2" in said(f) for f in shapes
    )


SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "head_dim")
TENSORS_2D = (
    "fc.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
)


@pytest.mark.stress
def test_random_wrong_values_and_wrong_tensors_never_get_looping_advice(tmp_path):
    """Randomized (seed 409): a size field set to another value, or one tensor given extra rows
    or columns. A WC409 only ever names the value the weights were trained with (following it
    restores the drafter's answer); with the config right, no finding names a config field and no
    shape finding says to correct the config alone."""
    import stress

    rng = random.Random(409)
    clean = _answer(SF)
    base = config_mod.normalize(read_config(SF)).values
    for i in range(stress.count(60, 10)):
        d = tmp_path / f"t{i}"
        if i % 2 == 0:
            name = SIZE_FIELDS[rng.randrange(len(SIZE_FIELDS))]
            value = rng.choice([v for v in range(1, 4 * base[name] + 1) if v != base[name]])
            src = edit(SF, d, cfg=lambda c, n=name, v=value: c.update({n: v}))
            _, rep = check(src)
            for root in by_code(rep, "WC409"):
                assert _held(root) == base[root["subject"]], (name, value, root)
            for f in _shape_findings(rep):
                assert "re-export" not in f["message"], (name, value, f)
            if by_code(rep, "WC409"):
                fixed = edit(src, tmp_path / f"f{i}", cfg=lambda c, n=name: c.update({n: base[n]}))
                assert _answer(fixed) == clean
        else:
            name = TENSORS_2D[rng.randrange(len(TENSORS_2D))]
            extra, axis = rng.randint(1, 64), rng.randint(0, 1)
            _, rep = check(edit(SF, d, tensors=_rows(name, extra, axis)))
            assert not by_code(rep, "WC409"), (name, extra, axis, json.dumps(rep)[:400])
            for f in _shape_findings(rep):
                assert not f["message"].endswith("; correct the config"), (name, extra, axis, f)


def test_compare_says_a_config_mistake_is_one(tmp_path):
    """compare of the fixture and a copy whose hidden_size is wrong: the same bytes, configs that
    differ; the first reason says A's config contradicts its own weights, and that corrected it
    agrees on both differing fields (target_hidden_size follows hidden_size)."""
    from conftest import run_cli

    src = edit(SF, tmp_path / "x", cfg=lambda c: c.update(hidden_size=96))
    r = run_cli("compare", src, SF, "--json")
    rep = json.loads(r.stdout)
    assert r.exit_code == 1 and rep["verdict"] == "incompatible"
    first = rep["reasons"][0]
    assert first.startswith(
        "A's config contradicts its own weights (hidden_size is 96, they hold 64"
    )
    assert first.endswith("corrected, it agrees on hidden_size, target_hidden_size")
    r = run_cli("compare", SF, src, "--json")
    assert json.loads(r.stdout)["reasons"][0].startswith("B's config contradicts its own weights")


def test_the_training_gate_weighs_src_as_its_weights_hold_it(tmp_path):
    """SpecForge loads SRC's tensors by name into the training config's module and never reads
    SRC's config: a wrong hidden_size in SRC's config is WC409 (fix the config before serving),
    not another architecture than the training config's (no WC905) when the weights are that
    architecture; against a training config of another width, WC905 gives the weights' value."""
    src = edit(SF, tmp_path / "x", cfg=lambda c: c.update(hidden_size=96))
    _, rep = check(src, "--training-config", SF / "config.json")
    assert by_code(rep, "WC409") and not by_code(rep, "WC905")
    assert rep["training"]["fraction_initialized"] == 1.0
    wide = edit(SF, tmp_path / "wide", cfg=lambda c: c.update(hidden_size=128))
    _, rep = check(src, "--training-config", wide / "config.json")
    (f,) = [f for f in by_code(rep, "WC905") if f["subject"] == "hidden_size"]
    assert said(f).split("\n")[1].startswith("64 in SRC's weights (its config says 96: WC409)")


def test_compare_tables_what_the_weights_hold(tmp_path):
    from conftest import run_cli

    src = edit(SF, tmp_path / "x", cfg=lambda c: c.update(hidden_size=96))
    rep = json.loads(run_cli("compare", src, SF, "--json").stdout)
    diffs = {d["field"]: d for d in rep["config_differences"]}
    assert diffs["hidden_size"]["a_weights"] == 64 and "b_weights" not in diffs["hidden_size"]
    assert diffs["target_hidden_size"]["a_weights"] == 64  # its default follows hidden_size
    text = run_cli("compare", src, SF).stdout
    assert "96 (weights: 64)" in text
