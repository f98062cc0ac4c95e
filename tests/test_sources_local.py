"""Every kind of local source: what is found, where each tensor's bytes are, and that the source
is never modified."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import run_cli
from helpers.bad_input import (
    canonical_tensors,
    inspect_json,
    out_bytes,
    torch_state_dict,
    tree_digest,
)
from helpers.builders import said

from weightcheck import sources
from weightcheck.storage.writer import OutTensor, write_file


def _expected(cfg):
    """{canonical name: (dtype, shape, nbytes)} of the synthetic drafter."""
    return {t.name: (t.dtype, list(t.shape), t.nbytes) for t in canonical_tensors(cfg)}


def _check_tensors(report, cfg, rename=lambda n: n):
    exp = _expected(cfg)
    got = {t["name"]: t for t in report["tensors"]}
    assert set(got) == {rename(n) for n in exp}
    for canon, (dtype, shape, nbytes) in exp.items():
        t = got[rename(canon)]
        assert t["canonical"] == canon
        assert (t["dtype"], t["shape"], t["bytes"]) == (dtype, shape, nbytes), canon
        assert t["status"] == "ok", t
    assert report["unknown"] == [] and report["other_dialect"] == {}
    assert report["totals"]["tensors"] == len(exp)
    assert report["totals"]["bytes"] == sum(v[2] for v in exp.values())


def _write_shards(folder, cfg, n_shards=2, drift=None, index_name="model.safetensors.index.json"):
    tensors = canonical_tensors(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    weight_map, total = {}, 0
    for i in range(n_shards):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = tensors[i::n_shards]
        write_file(
            str(folder / fname),
            [OutTensor(t.name, t.dtype, t.shape, out_bytes(t)) for t in part],
            {"format": "pt"},
        )
        for t in part:
            weight_map[t.name] = fname
            total += t.nbytes
    if drift:
        drift(weight_map)
    (folder / index_name).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )
    return weight_map


# --- safetensors ------------------------------------------------------------------------------
def test_folder_with_model_safetensors(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    r = inspect_json(run_cli, d)
    s = r["source"]
    assert (s["kind"], s["layout"]) == ("folder", "model.safetensors")
    assert s["location"] == str(d) and s["config_file"] == str(d / "config.json")
    assert [f["name"] for f in s["files"]] == ["model.safetensors"]
    assert s["files"][0]["format"] == "safetensors"
    assert s["files"][0]["size"] == (d / "model.safetensors").stat().st_size
    _check_tensors(r, tiny_cfg)
    assert r["notes"] == []


def test_byte_ranges_point_at_each_tensors_bytes(make_drafter, tiny_cfg):
    """TensorRecord.begin/end are absolute offsets in the file: reading them gives the tensor."""
    d = make_drafter(cfg=tiny_cfg)
    src = sources.open_source(str(d))
    blob = (d / "model.safetensors").read_bytes()
    for t in canonical_tensors(tiny_cfg):
        rec = src.tensors[t.name]
        assert rec.end - rec.begin == rec.nbytes == t.nbytes
        assert blob[rec.begin : rec.end] == out_bytes(t), t.name
    assert max(r.end for r in src.tensors.values()) == len(blob)


def test_sharded_safetensors(tmp_path, tiny_cfg):
    folder = tmp_path / "sharded"
    wm = _write_shards(folder, tiny_cfg)
    r = inspect_json(run_cli, folder)
    s = r["source"]
    assert s["layout"] == "sharded safetensors"
    assert s["index_file"] == str(folder / "model.safetensors.index.json")
    assert sorted(f["name"] for f in s["files"]) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    _check_tensors(r, tiny_cfg)
    assert {t["name"]: t["file"] for t in r["tensors"]} == wm
    assert r["notes"] == []  # index and headers agree


def test_sharded_shard_byte_ranges(tmp_path, tiny_cfg):
    folder = tmp_path / "sharded"
    _write_shards(folder, tiny_cfg)
    src = sources.open_source(str(folder))
    blobs = {f: (folder / f).read_bytes() for f in src.files}
    for t in canonical_tensors(tiny_cfg):
        rec = src.tensors[t.name]
        assert blobs[rec.file][rec.begin : rec.end] == out_bytes(t), t.name


def test_index_passed_as_the_path(tmp_path, tiny_cfg):
    folder = tmp_path / "sharded"
    _write_shards(folder, tiny_cfg)
    r = inspect_json(run_cli, folder / "model.safetensors.index.json")
    assert r["source"]["kind"] == "file"
    assert r["source"]["config_file"] == str(folder / "config.json")
    _check_tensors(r, tiny_cfg)


def test_index_drift_wrong_shard_is_a_note_not_an_error(tmp_path, tiny_cfg):
    folder = tmp_path / "drift"

    def drift(wm):  # fc.weight lives in shard 2 but the index says shard 1, or vice versa
        wm["fc.weight"] = (
            "model-00002-of-00002.safetensors"
            if wm["fc.weight"].startswith("model-00001")
            else "model-00001-of-00002.safetensors"
        )

    wm = _write_shards(folder, tiny_cfg, drift=drift)
    r = inspect_json(run_cli, folder)
    _check_tensors(r, tiny_cfg)  # still read from the shards' own headers
    notes = [n for n in r["notes"] if "index-wrong-shard" in n]
    assert len(notes) == 1, r["notes"]
    assert "maps fc.weight to" in notes[0] and wm["fc.weight"] in notes[0]
    fc = next(t for t in r["tensors"] if t["name"] == "fc.weight")
    assert fc["file"] != wm["fc.weight"] and fc["file"] in notes[0]
    # and the text output shows it too
    text = run_cli("inspect", folder)
    assert text.exit_code == 0 and "index-wrong-shard" in text.stdout


def test_index_drift_missing_unlisted_and_total_size(tmp_path, tiny_cfg):
    folder = tmp_path / "drift"

    def drift(wm):
        wm["ghost.weight"] = "model-00001-of-00002.safetensors"  # listed, held by no shard
        del wm["norm.weight"]  # held by a shard, not listed

    _write_shards(folder, tiny_cfg, drift=drift)
    idx = json.loads((folder / "model.safetensors.index.json").read_text())
    idx["metadata"]["total_size"] += 2
    (folder / "model.safetensors.index.json").write_text(json.dumps(idx))
    r = inspect_json(run_cli, folder)
    notes = "\n".join(r["notes"])
    assert "index-missing-tensor" in notes and "maps ghost.weight " in notes
    assert "index-unlisted-tensor" in notes and "holds norm.weight," in notes
    assert "index-total-size" in notes
    assert "norm.weight" in {t["name"] for t in r["tensors"]}
    assert "ghost.weight" not in {t["name"] for t in r["tensors"]}


def test_same_tensor_in_two_shards_keeps_the_later_file(tmp_path, tiny_cfg):
    folder = tmp_path / "dup"
    _write_shards(folder, tiny_cfg)
    # shard 2 also holds shard 1's first tensor
    t = canonical_tensors(tiny_cfg)[0]
    write_file(
        str(folder / "model-00002-of-00002.safetensors"),
        [OutTensor(t.name, t.dtype, t.shape, out_bytes(t))],
    )
    # both engines load it and keep the later file's copy (docs/differential.md R13): so does
    # weightcheck, and check says so (WC210)
    r = run_cli("inspect", folder, "--json")
    assert r.exit_code == 0, r
    (rec,) = [x for x in r.json["tensors"] if x["name"] == t.name]
    assert rec["file"] == "model-00002-of-00002.safetensors"
    # equal values: the same weights are served whichever copy stays (WC210, info; values that
    # differ are a warning: tests/test_severity_of_tensors.py)
    r = run_cli("check", folder, "--json")
    dup = [f for f in r.json["findings"] if f["code"] == "WC210" and "later file" in said(f)]
    assert dup and dup[0]["severity"] == "info", r.json["findings"]
    assert "equal values" in dup[0]["message"], dup


def test_single_safetensors_file_uses_config_beside_it(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    r = inspect_json(run_cli, d / "model.safetensors")
    s = r["source"]
    assert (s["kind"], s["layout"]) == ("file", "safetensors file")
    assert s["config_file"] == str(d / "config.json")
    assert r["config"]["normalized"]["hidden_size"] == 128
    assert r["config"]["normalized"]["draft_vocab_size"] == 400
    _check_tensors(r, tiny_cfg)
    assert not any("no config.json" in n for n in r["notes"])


def test_single_file_without_config(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").unlink()
    r = inspect_json(run_cli, d / "model.safetensors")
    assert r["source"]["config_file"] is None
    assert r["config"]["raw"] == {}
    assert any("no config.json" in n for n in r["notes"])
    assert len(r["tensors"]) == len(_expected(tiny_cfg))


def test_folder_with_other_safetensors_names(tmp_path, tiny_cfg):
    folder = tmp_path / "odd"
    _write_shards(folder, tiny_cfg)
    (folder / "model.safetensors.index.json").unlink()  # two *.safetensors, no index
    r = inspect_json(run_cli, folder)
    assert r["source"]["layout"] == "safetensors"
    assert len(r["source"]["files"]) == 2
    _check_tensors(r, tiny_cfg)


# --- pickles ----------------------------------------------------------------------------------
torch_needed = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="reading pickles needs torch"
)


@torch_needed
def test_pytorch_model_bin_folder(tmp_path, tiny_cfg):
    import torch

    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_cfg))
    torch.save(torch_state_dict(tiny_cfg), folder / "pytorch_model.bin")
    r = inspect_json(run_cli, folder)
    assert r["source"]["layout"] == "pytorch_model.bin"
    assert r["source"]["files"][0]["format"] == "pickle"
    _check_tensors(r, tiny_cfg)
    dtypes = {t["name"]: t["dtype"] for t in r["tensors"]}
    assert dtypes["d2t"] == "I64" and dtypes["t2d"] == "BOOL" and dtypes["fc.weight"] == "BF16"


@torch_needed
@pytest.mark.parametrize("fname", ["drafter.bin", "drafter.pt", "drafter.pth"])
def test_single_pickled_file(tmp_path, tiny_cfg, fname):
    import torch

    (tmp_path / "config.json").write_text(json.dumps(tiny_cfg))
    torch.save(torch_state_dict(tiny_cfg), tmp_path / fname)
    r = inspect_json(run_cli, tmp_path / fname)
    assert (r["source"]["kind"], r["source"]["layout"]) == ("file", "pickled file")
    assert r["source"]["config_file"] == str(tmp_path / "config.json")
    _check_tensors(r, tiny_cfg)


@torch_needed
def test_pickle_holding_state_dict_under_a_key(tmp_path, tiny_cfg):
    import torch

    torch.save({"state_dict": torch_state_dict(tiny_cfg), "epoch": 3}, tmp_path / "ckpt.pt")
    r = inspect_json(run_cli, tmp_path / "ckpt.pt")
    assert r["source"]["files"][0]["pickle_key"] == "state_dict"
    assert len(r["tensors"]) == len(_expected(tiny_cfg))


@torch_needed
def test_pickle_and_safetensors_agree(tmp_path, make_drafter, tiny_cfg):
    import torch

    d = make_drafter(cfg=tiny_cfg)
    torch.save(torch_state_dict(tiny_cfg), tmp_path / "same.pt")
    a = inspect_json(run_cli, d)
    b = inspect_json(run_cli, tmp_path / "same.pt")

    def key(r):
        return sorted(
            (t["name"], t["canonical"], t["dtype"], t["shape"], t["parameters"], t["bytes"])
            for t in r["tensors"]
        )

    assert key(a) == key(b)
    assert a["totals"] == b["totals"]


@torch_needed
def test_sharded_pytorch_model_bin(tmp_path, tiny_cfg):
    import torch

    folder = tmp_path / "binshards"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_cfg))
    sd = torch_state_dict(tiny_cfg)
    names = sorted(sd)
    wm = {}
    for i, part in enumerate((names[::2], names[1::2])):
        fname = f"pytorch_model-{i + 1:05d}-of-00002.bin"
        torch.save({n: sd[n] for n in part}, folder / fname)
        wm.update({n: fname for n in part})
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wm}))
    r = inspect_json(run_cli, folder)
    assert r["source"]["layout"] == "sharded pytorch_model.bin"
    assert sorted(f["name"] for f in r["source"]["files"]) == sorted(set(wm.values()))
    _check_tensors(r, tiny_cfg)
    assert {t["name"]: t["file"] for t in r["tensors"]} == wm
    assert r["notes"] == []


@torch_needed
def test_specforge_run_folder_training_state(tmp_path, tiny_cfg):
    import torch

    folder = tmp_path / "run" / "epoch_0_step_100"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(tiny_cfg))
    sd = torch_state_dict(tiny_cfg, rename=lambda n: "draft_model." + n)
    optim = {
        "state": {
            0: {"exp_avg": torch.zeros(7), "exp_avg_sq": torch.zeros(7), "step": torch.tensor(3.0)}
        },
        "param_groups": [{"lr": 1e-4, "params": [0]}],
    }
    torch.save(
        {"draft_state_dict": sd, "optimizer_state_dict": optim, "global_step": 100, "epoch": 0},
        folder / "training_state.pt",
    )
    r = inspect_json(run_cli, folder)
    assert r["source"]["layout"] == "SpecForge training_state.pt"
    assert r["source"]["files"][0]["pickle_key"] == "draft_state_dict"
    assert r["dialect"]["name"] == "specforge"
    assert "training:draft_model." in r["dialect"]["wrappers"]
    assert any("draft_model." in e for e in r["dialect"]["evidence"])
    _check_tensors(r, tiny_cfg, rename=lambda n: "draft_model." + n)
    # the optimizer's tensors are not the drafter's
    assert not any("exp_avg" in t["name"] or "state" in t["name"] for t in r["tensors"])


@torch_needed
def test_specforge_run_folder_root_hints_at_steps(tmp_path, tiny_cfg):
    import torch

    step = tmp_path / "run" / "epoch_0_step_100"
    step.mkdir(parents=True)
    torch.save({"draft_state_dict": torch_state_dict(tiny_cfg)}, step / "training_state.pt")
    r = run_cli("inspect", tmp_path / "run")
    assert r.exit_code == 2 and "epoch_0_step_100" in r.stderr


# --- the source is never modified -------------------------------------------------------------
def _make(kind, tmp_path, cfg):
    import synth

    folder = tmp_path / kind
    if kind == "model.safetensors":
        synth.write_drafter(str(folder), cfg)
        return folder
    if kind == "single-file":
        synth.write_drafter(str(folder), cfg)
        return folder / "model.safetensors"
    if kind == "sharded":
        _write_shards(folder, cfg)
        return folder
    if kind == "drift":
        _write_shards(
            folder,
            cfg,
            drift=lambda wm: wm.update(
                {
                    "norm.weight": "model-00002-of-00002.safetensors"
                    if wm["norm.weight"].startswith("model-00001")
                    else "model-00001-of-00002.safetensors"
                }
            ),
        )
        return folder
    import torch

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    if kind == "pytorch_model.bin":
        torch.save(torch_state_dict(cfg), folder / "pytorch_model.bin")
        return folder
    if kind == "training_state.pt":
        torch.save(
            {
                "draft_state_dict": torch_state_dict(cfg, rename=lambda n: "draft_model." + n),
                "optimizer_state_dict": {},
            },
            folder / "training_state.pt",
        )
        return folder
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "model.safetensors",
        "single-file",
        "sharded",
        "drift",
        "pytorch_model.bin",
        "training_state.pt",
    ],
)
def test_source_is_never_modified(tmp_path, tiny_cfg, kind):
    if kind in ("pytorch_model.bin", "training_state.pt"):
        pytest.importorskip("torch")
    target = _make(kind, tmp_path / "src", tiny_cfg)
    root = target if target.is_dir() else target.parent
    before = tree_digest(root)
    for args in ((), ("--json",), ("--format", "markdown")):
        r = run_cli("inspect", target, *args)
        assert r.exit_code == 0, r
    assert tree_digest(root) == before  # same files, same bytes, same mtimes, nothing added


# --- inspect output formats -------------------------------------------------------------------
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1}


def test_inspect_json_documented_keys(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    r = inspect_json(run_cli, d)
    for key in ("schema", "source", "dialect", "config", "tensors", "totals"):
        assert key in r, key
    assert r["schema"] == "weightcheck.inspect/1"
    assert {"spec", "kind", "location", "layout", "files", "config_file"} <= set(r["source"])
    assert {"name", "wrappers", "evidence"} <= set(r["dialect"])
    assert {"raw", "normalized", "provenance", "problems"} <= set(r["config"])
    assert r["config"]["raw"] == tiny_cfg
    total_params = total_bytes = 0
    for t in r["tensors"]:
        assert {"name", "canonical", "dtype", "shape", "parameters", "bytes"} <= set(t), t
        numel = 1
        for s in t["shape"]:
            numel *= s
        assert t["parameters"] == numel
        assert t["bytes"] == numel * DTYPE_BYTES[t["dtype"]]
        total_params += t["parameters"]
        total_bytes += t["bytes"]
    assert r["totals"] == {
        "tensors": len(r["tensors"]),
        "parameters": total_params,
        "bytes": total_bytes,
    }
    # the data buffer holds exactly the tensors' bytes
    from weightcheck.storage.header import read_local_header

    hdr = read_local_header(d / "model.safetensors")
    assert hdr.data_len == total_bytes


def test_inspect_default_table(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg, dialect="speculators")
    r = run_cli("inspect", d, env={"COLUMNS": "160"})  # wide enough for a row per tensor
    assert r.exit_code == 0 and r.stderr == "", r
    out = r.stdout
    lines = out.splitlines()
    header = next(ln for ln in lines if ln.lstrip().startswith("tensor "))
    for col in ("tensor", "canonical", "shape", "dtype", "bytes", "status"):
        assert col in header
    assert "|" not in header  # a plain table, not markdown
    for name, canon in {
        "layers.0.self_attn.q_proj.weight": "midlayer.self_attn.q_proj.weight",
        "fc.weight": "fc.weight",
    }.items():
        row = next(ln for ln in lines if ln.startswith(name + " "))
        assert canon in row and "ok" in row
    assert str(d) in out and "speculators" in out and "llama_eagle3" in out
    n = len(canonical_tensors(tiny_cfg))
    assert any(ln.startswith(f"{n} tensors, ") for ln in lines), out
    assert "missing (optional): embed_tokens.weight" in out
    assert "{" not in lines[0]  # not JSON


def test_inspect_markdown(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    r = run_cli("inspect", d, "--format", "markdown")
    assert r.exit_code == 0 and r.stderr == "", r
    lines = r.stdout.splitlines()
    assert lines[0] == f"## weightcheck inspect `{d}`"
    table = [ln for ln in lines if ln.startswith("|")]
    assert any(ln.startswith("| tensor") for ln in table)
    assert any(set(ln.replace("|", "").replace(":", "").replace(" ", "")) == {"-"} for ln in table)
    midlayer = [t.name for t in canonical_tensors(tiny_cfg) if t.name.startswith("midlayer.")]
    assert sum(ln.startswith("| midlayer.") for ln in table) == len(midlayer) == 10
    n = len(canonical_tensors(tiny_cfg))
    assert any(ln.startswith(f"{n} tensors, ") for ln in lines)


# --- safetensors sources never import torch ---------------------------------------------------
HARNESS = r"""
import runpy, sys
sys.argv = ["weightcheck", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("weightcheck", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
print("HARNESS", "torch" in sys.modules, code, file=sys.stderr)
"""


def _harness(*args):
    import subprocess
    import sys

    from conftest import ROOT

    p = subprocess.run(
        [sys.executable, "-c", HARNESS, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
    )
    last = p.stderr.strip().splitlines()[-1].split()
    assert last[0] == "HARNESS", p.stderr
    return last[1] == "True", int(last[2]), p


@pytest.mark.parametrize("fmt", [(), ("--json",), ("--format", "markdown")])
def test_safetensors_inspect_never_imports_torch(make_drafter, tiny_cfg, fmt):
    d = make_drafter(cfg=tiny_cfg)
    torch_loaded, code, p = _harness("inspect", d, *fmt)
    assert code == 0, p.stderr
    assert "fc.weight" in p.stdout
    assert not torch_loaded


def test_sharded_and_bad_safetensors_never_import_torch(tmp_path, tiny_cfg):
    _write_shards(tmp_path / "sharded", tiny_cfg)
    torch_loaded, code, p = _harness("inspect", tmp_path / "sharded")
    assert (torch_loaded, code) == (False, 0), p.stderr
    (tmp_path / "bad.safetensors").write_bytes(b"\x01\x02")
    torch_loaded, code, p = _harness("inspect", tmp_path / "bad.safetensors")
    assert (torch_loaded, code) == (False, 2), p.stderr


@torch_needed
def test_harness_does_see_torch_for_a_pickle(tmp_path, tiny_cfg):
    """Control: the same harness reports torch when inspecting a .bin, so the check can fail. A
    legacy (non-zip) pickle: a torch zip file is read without torch (sources/torchzip.py)."""
    import torch

    torch.save(
        torch_state_dict(tiny_cfg),
        tmp_path / "pytorch_model.bin",
        _use_new_zipfile_serialization=False,
    )
    torch_loaded, code, p = _harness("inspect", tmp_path)
    assert code == 0, p.stderr
    assert torch_loaded


def _imported_modules(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output (`import time: self | cumulative | name`)."""
    out = set()
    for ln in stderr.splitlines():
        if ln.startswith("import time:") and "|" in ln:
            out.add(ln.rsplit("|", 1)[1].strip())
    return out


def test_python_m_weightcheck_importtime(make_drafter, tmp_path, tiny_cfg):
    """`python -m weightcheck inspect` itself, watched by -X importtime (no harness involved)."""
    import subprocess
    import sys

    from conftest import ROOT

    d = make_drafter(cfg=tiny_cfg)
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "weightcheck", "inspect", str(d)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    mods = _imported_modules(p.stderr)
    assert "weightcheck.storage.header" in mods  # the parse worked
    assert not {m for m in mods if m == "torch" or m.startswith("torch.")}
    if importlib.util.find_spec("torch") is not None:  # control: a legacy .bin imports torch
        import torch

        torch.save(
            {"fc.weight": torch.zeros(2, 2)},
            tmp_path / "x.bin",
            _use_new_zipfile_serialization=False,
        )
        p = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "weightcheck",
                "inspect",
                str(tmp_path / "x.bin"),
            ],
            capture_output=True,
            text=True,
            cwd=str(ROOT),
            timeout=120,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert "torch" in _imported_modules(p.stderr)
