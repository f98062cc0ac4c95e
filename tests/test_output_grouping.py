"""Issue #14, item 5: say it once. Near-identical findings of one code are shown as one finding
listing what varies; each compare mismatch is listed once; a config taken whole from --config-from
is one line, not one per field. ``--json`` and the API keep every finding."""

from __future__ import annotations

import json

import synth
from conftest import K2, load_config, run_cli
from helpers.builders import read_tensors, write_sharded

from weightcheck.rules.base import Finding
from weightcheck.rules.grouping import group


def _f(code, message, subject=None, severity="error"):
    return Finding(code, severity, message, subject, "r")


def test_group_merges_findings_that_differ_in_one_word():
    fs = [_f("WC101", f"{n}: no dialect explains this name", n) for n in ("a.x", "b.y", "c.z")]
    fs.append(_f("WC206", "a.x: shape [1], config implies [2]", "a.x"))
    out = group(fs)
    assert len(out) == 2
    assert out[0].finding.message == "{a.x, b.y, c.z}: no dialect explains this name"
    assert out[0].count == 3 and out[0].subjects == ("a.x", "b.y", "c.z")
    assert out[0].finding.subject is None  # the subjects vary: the message names them
    assert out[1].count == 1 and out[1].finding.message == fs[3].message


def test_group_keeps_findings_whose_details_differ():
    fs = [
        _f(
            "WC901",
            "fc.weight: [128, 384] here, the training config builds [256, 768]",
            "fc.weight",
        ),
        _f(
            "WC901",
            "lm_head.weight: [400, 128] here, the training config builds [300, 256]",
            "lm_head.weight",
        ),
    ]
    assert [g.count for g in group(fs)] == [1, 1]
    # another code or severity is never merged
    fs = [_f("WC101", "a: x"), _f("WC102", "b: x"), _f("WC101", "c: x", severity="warning")]
    assert [g.count for g in group(fs)] == [1, 1, 1]


def test_group_keeps_a_common_subject_and_lists_the_varying_word():
    fs = [
        _f(
            "WC210",
            f"index.json maps {n} to model-1.safetensors, but it is in model-2.safetensors",
            "index.json",
        )
        for n in ("a", "b")
    ]
    (g,) = group(fs)
    assert g.finding.subject == "index.json" and g.count == 2
    assert g.finding.message == (
        "index.json maps {a, b} to model-1.safetensors, but it is in model-2.safetensors"
    )


def test_a_grouped_finding_keeps_each_different_detail_once():
    fs = [
        Finding("WC101", "error", f"{n}: no dialect explains this name", n, detail=d)
        for n, d in (("a", "seen in x"), ("b", "seen in y"), ("c", "seen in x"))
    ]
    (g,) = group(fs)
    assert g.count == 3 and g.finding.detail == "seen in x\nseen in y"


def test_a_shuffled_index_is_one_wc210_line(tmp_path):
    cfg = synth.scaled_config(load_config(K2))
    clean = tmp_path / "clean"
    synth.write_drafter(str(clean), cfg)
    tensors = read_tensors(clean)
    # 7 of shard 1's 8 tensors: the index still names shard 1, so the engines open it and every
    # tensor loads (all 8 would leave shard 1 unopened: index-unread-file, the tensors missing)
    first = [t.name for t in tensors[:7]]

    def lie(weight_map):  # the index says shard 2 for 7 tensors of shard 1
        for n in first:
            weight_map[n] = "model-00002-of-00002.safetensors"

    src = write_sharded(tmp_path / "sharded", cfg, tensors, 8, weight_map_edit=lie)
    j = run_cli("check", src, "--json").json
    wc210 = [f for f in j["findings"] if f["code"] == "WC210"]
    assert len(wc210) == 7  # JSON keeps every finding: one a tensor
    text = run_cli("check", src).stdout
    rows = [line for line in text.splitlines() if line.startswith("WC210")]
    assert len(rows) == 1, text  # the 7 as one finding
    flat = " ".join(text.split())
    (listed,) = [line for line in flat.split("WC210 ")[1:] if "to the wrong shard" in line]
    assert all(n in listed and f"'{n}" not in listed for n in first)  # no Python repr
    for fmt in ("concise", "github"):
        out = run_cli("check", src, "--format", fmt).stdout
        # finding lines (each engine's verdict line lists the codes its own run gives, too)
        lines = [line for line in out.splitlines() if " WC210 " in line or "title=WC210" in line]
        assert len(lines) == 1, (fmt, out)


def test_compare_lists_each_mismatch_once(make_drafter, tiny_cfg, tmp_path):
    a = make_drafter("a", tiny_cfg, seed=1)
    b_cfg = synth.scaled_config(load_config(K2), hidden=256)
    b = make_drafter("b", b_cfg, seed=1)
    j = run_cli("compare", a, b, "--json").json
    assert j["shape_mismatches"] and j["config_differences"]
    text = run_cli("compare", a, b).stdout
    for m in j["shape_mismatches"]:
        # the tensor's name: once in the shape table, not again among the reasons
        assert sum(line.split()[:1] == [m["canonical"]] for line in text.splitlines()) == 1
        assert f"{m['canonical']}: shape" not in text
    assert f"{len(j['shape_mismatches'])} tensor shape(s) differ (table below)" in text
    for d in j["config_differences"]:
        assert f"config {d['field']}:" not in text  # in the config table only


def test_compare_dtype_mismatch_once(make_drafter, tiny_cfg, tmp_path):
    a = make_drafter("a", tiny_cfg, seed=1)
    b_cfg = dict(tiny_cfg, torch_dtype="float32")
    b = make_drafter("b", b_cfg, seed=1)
    j = run_cli("compare", a, b, "--json").json
    assert j["dtype_mismatches"]
    text = run_cli("compare", a, b).stdout
    assert "dtype BF16 in A" not in text
    assert f"{len(j['dtype_mismatches'])} tensor dtype(s) differ (table below)" in text


def test_config_from_a_folder_without_config_is_one_line(tmp_path, make_drafter):
    src = make_drafter("src")
    (src / "config.json").unlink()
    ref = make_drafter("ref")
    r = run_cli(
        "convert", src, tmp_path / "out", "--to", "sglang", "--config-from", ref, "--dry-run"
    )
    assert r.exit_code == 0, r
    changes = [line for line in r.stdout.splitlines() if line.startswith("config: ")]
    assert len(changes) == 1 and "SRC has no config.json: every field is" in changes[0]
    assert "None ->" not in r.stdout
    plan = json.loads(
        run_cli(
            "convert",
            src,
            tmp_path / "out",
            "--to",
            "sglang",
            "--config-from",
            ref,
            "--dry-run",
            "--json",
        ).stdout
    )
    assert len(plan["config_changes"]) == 1


def test_names_that_differ_in_a_layer_number_are_said_as_ranges():
    """A config naming 40 layers over a one-layer checkpoint (yuhuili/EAGLE3-Vicuna1.3-13B's
    num_hidden_layers) leaves 351 tensors at init: one entry per tensor kind, its layers as
    ranges, not 50 names and '… 301 more'. Fewer than three of a kind stay as they are."""
    kinds = ("self_attn.q_proj.weight", "mlp.up_proj.weight")
    layers = [*range(1, 40), 41, 43, 44]
    names = [f"layers.{i}.{k}" for k in kinds for i in layers] + ["midlayer.fc.weight"]
    names += ["layers.7.hidden_norm.weight", "layers.9.hidden_norm.weight"]
    fs = [_f("WC704", f"{n}: vllm loads nothing into it", n) for n in names]
    (g,) = group(fs)
    assert g.count == len(names)
    assert g.finding.message == (
        "{layers.[1-39,41,43-44].self_attn.q_proj.weight, layers.[1-39,41,43-44].mlp.up_proj.weight,"
        " midlayer.fc.weight, layers.7.hidden_norm.weight, layers.9.hidden_norm.weight}: vllm loads"
        " nothing into it"
    )
