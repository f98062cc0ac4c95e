"""A fused tensor given beside its parts stored apart (``qkv_proj.weight`` and
``q_proj``/``k_proj``/``v_proj.weight``; ``gate_up_proj.weight`` and ``gate_proj``/``up_proj``):
both engines load both spellings into the fused parameter in load order, so each part's rows are
the copy loaded last — ``qkv_proj`` after ``q_proj`` and ``k_proj``, before ``v_proj``;
``gate_up_proj`` after ``gate_proj``, before ``up_proj`` (the SGLang and vLLM oracles:
docs/differential.md R34; tests/test_engine_hurried.py runs them). WC103 says it, one finding per
fused tensor, its severity the consequence's; convert writes one copy when they are equal and
refuses copies that differ.
"""

from __future__ import annotations

import pytest
from conftest import PRODUCERS, run_cli
from helpers import hurried
from helpers.builders import by_code, check, said

from weightcheck.model.drafter import load_drafter

TARGET = PRODUCERS / "target-llama"
QKV, GATE_UP = hurried.FUSED


def _wc103(src, *args):
    code, rep = check(src, *args)
    return code, by_code(rep, "WC103")


def test_the_engines_keep_each_part_from_the_copy_loaded_last(tmp_path):
    """Drafter.fused_copies / by_canonical: q and k from the fused tensor's rows, v from v_proj;
    gate from gate_up_proj's rows, up from up_proj (names sorted within a file)."""
    d = load_drafter(str(hurried.BUILDERS["both-differ"](tmp_path / "b")))
    copies = d.fused_copies()
    assert sorted(copies) == sorted(p for ps in hurried.FUSED.values() for p in ps)
    keep = d.by_canonical()
    fused_rows = {c for c, t in keep.items() if t.window is not None}
    assert fused_rows == {
        "midlayer.self_attn.q_proj.weight",
        "midlayer.self_attn.k_proj.weight",
        "midlayer.mlp.gate_proj.weight",
    }
    assert keep["midlayer.self_attn.v_proj.weight"].name == "midlayer.self_attn.v_proj.weight"


@pytest.mark.parametrize("engine", [None, "sglang", "vllm"])
def test_equal_copies_are_one_info_and_convert_keeps_one(tmp_path, engine):
    src = hurried.BUILDERS["both-qkv"](tmp_path / "b")
    opts = ("--engine", engine) if engine else ()
    code, hits = _wc103(src, *opts)
    (f,) = hits
    assert code == 0 and f["severity"] == "info" and f["subject"] == QKV
    assert "its parts stored apart too, with equal values" in f["message"]
    assert "q_proj from midlayer.self_attn.qkv_proj.weight's rows" in f["detail"]
    assert "v_proj from midlayer.self_attn.v_proj.weight" in f["detail"]
    assert f["fix"] and f["fix"].startswith("weightcheck convert SRC OUT --to ")
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "sglang")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "midlayer.self_attn.q_proj.weight left out: the same values as" in r.stdout
    assert not _wc103(out)[1]
    c = run_cli("compare", out, hurried.SPECFORGE, "--json").json
    assert c["verdict"] == "identical", c


@pytest.mark.parametrize(
    "kind,severity,words",
    [
        ("both-differ-q", "warning", "q_proj stored apart too, with other values; the engines keep its rows"),
        ("both-differ-v", "warning", "v_proj stored apart too, with other values; the engines keep the copy apart"),
        ("both-differ", "error", "3 parts stored apart too, with other values; the engines serve rows of each"),
    ],
)  # fmt: skip
def test_copies_that_differ(tmp_path, kind, severity, words):
    """Kept from one spelling: right only if it is the trained one (a warning naming it); rows of
    each kept: whichever was trained, some rows served are the other's (an error). convert
    refuses either way (which copy was trained is not in the checkpoint)."""
    src = hurried.BUILDERS[kind](tmp_path / kind)
    code, hits = _wc103(src, "--target", TARGET)
    assert hits and {f["severity"] for f in hits} == {severity}, hits
    assert any(words in f["message"] for f in hits), [f["message"] for f in hits]
    assert all(f["fix"] is None and "drop the other spelling" in said(f) for f in hits)
    assert code == (1 if severity == "error" else 0)
    r = run_cli("convert", src, tmp_path / "out", "--to", "sglang")
    assert r.exit_code == 2 and not (tmp_path / "out").exists()
    assert "the copies differ: drop the spelling that was not trained" in r.stderr


def test_a_fused_tensor_alone_is_no_duplicate(tmp_path):
    """The fused tensor without its parts, and the parts without it: WC103 says nothing."""
    for kind in ("fused", "fused-qkv"):
        assert not _wc103(hurried.BUILDERS[kind](tmp_path / kind))[1]
    assert not _wc103(hurried.SPECFORGE)[1]
