"""Drafters a hurried user makes, through inspect, check and convert (issue #31 Why 1 and 6): an
old export carrying a non-parameter buffer, a half-converted drafter with SGLang's legacy norm
names. Only the command line: each test here fails on a tree that does not know the name table
(mappings/names.toml) for what it does, not for what it imports."""

from __future__ import annotations

import json
import shutil

import synth
from conftest import PRODUCERS, run_cli
from helpers.builders import said

from weightcheck.model.drafter import load_drafter
from weightcheck.storage.writer import OutTensor, write_file

SPECFORGE = PRODUCERS / "specforge-sglang"
ENGINES = ("sglang", "vllm")


def _with_extra(tmp_path, name, extra, cfg_edit=None, src=SPECFORGE):
    out = tmp_path / name
    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    if cfg_edit:
        cfg_edit(cfg)
    (out / "config.json").write_text(json.dumps(cfg))
    tensors = synth.drafter_tensors(cfg)
    write_file(str(out / "model.safetensors"), tensors + extra(tensors), {"format": "pt"})
    return out


def test_an_old_export_with_inv_freq_checks_out_and_converts(tmp_path):
    """Issue #31 Why 1: an older export's midlayer.self_attn.rotary_emb.inv_freq was WC101 + WC702
    errors and convert refused the drafter ("no dialect explains ... add a dialect file"). Both
    engines drop it and every parameter loads: one info finding (WC105), exit 0, inspect names it
    a buffer, convert leaves it out and says so."""
    buf = "midlayer.self_attn.rotary_emb.inv_freq"
    src = _with_extra(tmp_path, "old", lambda ts: [OutTensor(buf, "F32", (16,), b"\0" * 64)])
    r = run_cli("check", src, "--json")
    assert r.exit_code == 0, r
    found = {(f["code"], f["severity"]) for f in r.json["findings"] if f["subject"] == buf}
    assert found == {("WC105", "info")}, r.json["findings"]
    for engine in ENGINES:
        r = run_cli("check", src, "--engine", engine, "--json")
        assert r.exit_code == 0 and not [
            f for f in r.json["findings"] if f["subject"] == buf and f["severity"] != "info"
        ], (engine, r.json["findings"])
    i = run_cli("inspect", src, "--json").json
    (row,) = [t for t in i["tensors"] if t["name"] == buf]
    assert row["status"].startswith("buffer") and buf not in i["unknown"]
    c = run_cli("convert", src, tmp_path / "out", "--to", "sglang", "--json")
    assert c.exit_code == 0, c
    assert any(buf in n and "non-parameter buffer" in n for n in c.json["notes"]), c.json["notes"]
    assert buf not in load_drafter(str(tmp_path / "out")).source.tensors


def test_a_half_converted_drafter_with_legacy_norm_names(tmp_path):
    """Issue #31 Why 6: aux_norm_low/mid/high (renamed to fc_norm.0/1/2 by SGLang's loader) were
    unnamed in inspect, "no dialect explains this name" in check, refused by convert. Now: named,
    SGLang loads them (no finding under --engine sglang), vLLM's refusal names the legacy spelling,
    and convert writes fc_norm.{i} for either engine."""

    def legacy(ts):
        for t in ts:
            for i, k in enumerate(("low", "mid", "high")):
                if t.name == f"fc_norm.{i}.weight":
                    t.name = f"aux_norm_{k}.weight"
        return []

    src = _with_extra(tmp_path, "half", legacy, lambda c: c.update(fc_norm=True))
    i = run_cli("inspect", src, "--json").json
    assert not i["unknown"], i["unknown"]
    rows = {t["name"]: t["canonical"] for t in i["tensors"]}
    assert rows["aux_norm_low.weight"] == "fc_norm.0.weight"
    sg = run_cli("check", src, "--engine", "sglang", "--json")
    assert sg.exit_code == 0 and not [f for f in sg.json["findings"] if f["severity"] == "error"], (
        sg.json
    )
    vl = run_cli("check", src, "--engine", "vllm", "--json")
    assert vl.exit_code == 1
    wc703 = [f for f in vl.json["findings"] if f["code"] == "WC703"]
    assert wc703 and "legacy spelling of fc_norm.0" in said(wc703[0]), vl.json["findings"]
    assert "WC101" not in {f["code"] for f in vl.json["findings"]}
    for engine in ENGINES:
        out = tmp_path / f"out-{engine}"
        c = run_cli("convert", src, out, "--to", engine, "--target", PRODUCERS / "target-llama")
        assert c.exit_code == 0, c
        assert {"fc_norm.0.weight", "fc_norm.2.weight"} <= {
            t.canonical for t in load_drafter(str(out)).tensors
        }
        assert run_cli("check", out, "--engine", engine).exit_code == 0


def test_a_hand_edited_index_with_a_stale_total_size(tmp_path):
    """Issue #31 Why 1: a shard index whose metadata.total_size is stale (a hand-edited export)
    was a WC210 error, exit 1, while both engine lines said "starts": no engine reads total_size
    (both choose the files by weight_map), so it is info and the check exits 0."""
    from helpers.builders import read_tensors, write_sharded

    cfg = json.loads((SPECFORGE / "config.json").read_text())
    ts = read_tensors(SPECFORGE)
    src = write_sharded(tmp_path / "sharded", cfg, ts, 5, total_size_delta=1000)
    r = run_cli("check", src, "--json")
    (f,) = [f for f in r.json["findings"] if f["code"] == "WC210"]
    assert f["severity"] == "info" and "no engine reads total_size" in f["message"]
    assert r.exit_code == 0 and all(e["starts"] for e in r.json["engines"].values())
