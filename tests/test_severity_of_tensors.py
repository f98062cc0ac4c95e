"""Severity = consequence (issue #31 What 1) for two tensor findings, by what the trainers and the
engines do with the tensor (docs/rules.md WC205, WC210):

* WC205, a canonical tensor the config's flag does not build (``fc_norm.*`` without ``fc_norm``,
  ``input_norm`` without ``norm_before_fc``, ``fc.bias`` without ``bias``): every trainer builds
  such a module only under its flag, uses it in its forward and saves only what it built, so the
  tensor was trained; the engines build no parameter for it and serve the drafter without it
  (SGLang drops it, vLLM drops it on purpose or stops at load): an error, the engines' findings
  listed under it. The vocabulary maps are no module: SpecForge's export and SafeAILab's EAGLE-3
  trainer write d2t/t2d whatever the widths, the identity when the draft vocabulary is the
  target's; SGLang then serves the same (info), vLLM refuses d2t (WC703, its own error).
* WC210, a tensor in two weight files: both engines load both files and keep the later file's
  copy. Equal values (in the dtype each engine builds): nothing served changes (info); values
  that differ: right only if the later copy is the trained one (a warning naming it), and convert
  refuses it as it refuses WC103's copies that differ.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from helpers.builders import (
    by_code,
    check,
    consequences_of,
    edit,
    read_tensors,
    said,
    with_value,
    write_sharded,
)

from weightcheck.storage.writer import OutTensor, write_file


def _bf16(name: str, n: int, value: float) -> OutTensor:
    return with_value(OutTensor(name, "BF16", (n,), b""), value)


def _add(make_drafter, tmp_path, cfg, extra, name="x"):
    return edit(make_drafter("clean", json.loads(json.dumps(cfg))), tmp_path / name, add=extra)


# ---------------------------------------------------------------------------------------------
# WC205
@pytest.mark.parametrize(
    "tensors, flag",
    [
        (lambda h: [_bf16(f"fc_norm.{i}.weight", h, 1.25) for i in range(3)], "fc_norm"),
        (lambda h: [_bf16("input_norm.weight", 3 * h, 1.5)], "norm_before_fc"),
        (lambda h: [_bf16("fc.bias", h, 0.125)], "bias"),
    ],
    ids=["fc_norm", "input_norm", "fc_bias"],
)
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_tensor_the_flag_does_not_build_is_an_error(
    tmp_path, make_drafter, tiny_cfg, tensors, flag, engine
):
    """A module the trainers build only under ``flag`` (so trained when saved), which the engine
    does not build: it serves the drafter without it, an error (misfed), exit 1; the engine's own
    finding (dropped: WC702, refused: WC703) is listed under WC205, one cause."""
    src = _add(make_drafter, tmp_path, tiny_cfg, tensors(tiny_cfg["hidden_size"]))
    exit_code, rep = check(src, "--engine", engine)
    roots = by_code(rep, "WC205")
    assert roots and all(f["severity"] == "error" for f in roots), roots
    assert all(
        flag in f["message"] and "set the flag it was trained with" in f["message"] for f in roots
    ), roots
    assert "so it was trained" in said(roots[0]), roots[0]
    under = [c for f in roots for c in consequences_of(f, "WC702") + consequences_of(f, "WC703")]
    assert under, rep["findings"]
    assert not by_code(rep, "WC702") and not by_code(rep, "WC703"), rep["findings"]
    assert exit_code == 1


def _full_vocab(tiny_cfg) -> dict:
    cfg = json.loads(json.dumps(tiny_cfg))
    cfg["draft_vocab_size"] = cfg["vocab_size"]
    return cfg


def _maps(v: int, d2t_values=None) -> list[OutTensor]:
    vals = d2t_values or [0] * v
    d2t = b"".join(int(x).to_bytes(8, "little", signed=True) for x in vals)
    return [OutTensor("d2t", "I64", (v,), d2t), OutTensor("t2d", "BOOL", (v,), b"\x01" * v)]


def test_an_identity_map_in_a_full_vocabulary_drafter_is_info_in_sglang(
    tmp_path, make_drafter, tiny_cfg
):
    """The trainers' map of a full vocabulary is the identity (SpecForge's export requires d2t
    and t2d whatever the widths); SGLang reads an all-zero d2t as the identity and skips t2d:
    nothing served changes (info, exit 0). vLLM builds no d2t parameter then and stops at load:
    an error there, under the same root."""
    cfg = _full_vocab(tiny_cfg)
    src = _add(make_drafter, tmp_path, cfg, _maps(cfg["vocab_size"]))
    exit_code, rep = check(src, "--engine", "sglang")
    roots = by_code(rep, "WC205")
    assert {f["subject"] for f in roots} == {"d2t", "t2d"}, rep["findings"]
    assert all(f["severity"] == "info" and "identity" in f["message"] for f in roots), roots
    assert "set the flag" not in " ".join(f["message"] for f in roots)
    assert exit_code == 0
    exit_code, rep = check(src, "--engine", "vllm")
    (root,) = [f for f in by_code(rep, "WC205") if f["subject"] == "d2t"]
    assert consequences_of(root, "WC703") and root["severity"] == "error", root
    assert exit_code == 1


def test_a_map_that_is_not_the_identity_in_a_full_vocabulary_drafter_is_a_warning(
    tmp_path, make_drafter, tiny_cfg
):
    """A d2t that moves ids with draft_vocab_size = vocab_size: SGLang remaps through it, right
    only if the drafter was trained with that map (a warning naming SGLang)."""
    cfg = _full_vocab(tiny_cfg)
    v = cfg["vocab_size"]
    src = _add(make_drafter, tmp_path, cfg, _maps(v, [1] * (v // 2) + [-1] * (v // 2)))
    _, rep = check(src, "--engine", "sglang")
    (root,) = [f for f in by_code(rep, "WC205") if f["subject"] == "d2t"]
    assert root["severity"] == "warning" and "SGLang" in root["message"], root


# ---------------------------------------------------------------------------------------------
# WC210: a tensor in two weight files
def _two_files(w_tmp, make_drafter, cfg, value):
    """A two-shard drafter whose first shard also holds norm.weight (the second shard's, the
    copy the engines keep), set to ``value`` (None: the same bytes)."""
    ts = read_tensors(make_drafter("clean", json.loads(json.dumps(cfg))))
    names = [t.name for t in ts]
    split = names.index("midlayer.mlp.down_proj.weight")
    keep = ts.pop(names.index("norm.weight"))
    ts.append(keep)  # norm.weight in the later shard
    folder = write_sharded(w_tmp, cfg, ts, split)
    first = folder / "model-00001-of-00002.safetensors"
    copy = keep if value is None else with_value(keep, value)
    write_file(
        str(first),
        [*ts[:split], OutTensor(keep.name, keep.dtype, keep.shape, copy.data)],
        {"format": "pt"},
    )
    return folder


def _dup(rep):
    return [f for f in by_code(rep, "WC210") if "two weight files" in f["message"]]


@pytest.mark.parametrize("options", [(), ("--engine", "sglang"), ("--engine", "vllm")])
def test_a_tensor_in_two_files_with_equal_values_is_info(tmp_path, make_drafter, tiny_cfg, options):
    src = _two_files(tmp_path / "x", make_drafter, tiny_cfg, None)
    exit_code, rep = check(src, *options)
    (f,) = _dup(rep)
    assert f["severity"] == "info", f
    assert f["message"].startswith("norm.weight is in two weight files with equal values"), f
    assert f["subject"].endswith("model.safetensors.index.json")
    assert exit_code == 0, rep["findings"]


@pytest.mark.parametrize("options", [(), ("--engine", "sglang"), ("--engine", "vllm")])
def test_a_tensor_in_two_files_with_values_that_differ_is_a_warning(
    tmp_path, make_drafter, tiny_cfg, options
):
    """The engines keep the later file's copy: right only if that one was trained; the warning
    names the file whose copy is served."""
    src = _two_files(tmp_path / "x", make_drafter, tiny_cfg, 3.0)
    exit_code, rep = check(src, *options)
    (f,) = _dup(rep)
    assert f["severity"] == "warning", f
    assert f["message"].startswith("norm.weight differs between two weight files"), f
    assert "serve model-00002-of-00002.safetensors's" in f["message"], f
    assert "later file" in said(f), f
    assert exit_code == 0, rep["findings"]


def test_convert_writes_equal_copies_once_and_refuses_copies_that_differ(
    tmp_path, make_drafter, tiny_cfg
):
    """convert as check: equal copies are one tensor in OUT (the copy the engines keep), copies
    that differ are refused (which one was trained is not in the checkpoint), as WC103's are."""
    src = _two_files(tmp_path / "same", make_drafter, tiny_cfg, None)
    r = run_cli("convert", src, tmp_path / "out", "--to", "sglang")
    assert r.exit_code == 0, r
    assert "norm.weight" in {t.name for t in read_tensors(tmp_path / "out")}
    src = _two_files(tmp_path / "other", make_drafter, tiny_cfg, 3.0)
    r = run_cli("convert", src, tmp_path / "out2", "--to", "sglang")
    assert r.exit_code == 2, r
    assert "norm.weight" in r.stderr and "differ" in r.stderr, r.stderr
    assert not (tmp_path / "out2").exists()
