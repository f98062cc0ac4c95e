"""Issue #14, item 8: the small items, each fixed — --training-config FOLDER, --max-shard-size 0, a
missing parent of OUT, a target seen as a target, "renamed" only when a name changed, no path of
the writer's machine in OUT's metadata, a local --target never written as the verifier's name."""

from __future__ import annotations

import errno
import json
import os

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import read_config
from helpers.convert import convert, header, leftovers, llama_target, refused
from test_target import kimi_k25_target

from weightcheck.commands.convert import produce

TARGET = PRODUCERS / "target-llama"


# --- --training-config FOLDER -----------------------------------------------------------------
def test_training_config_may_be_a_folder(make_drafter):
    src = make_drafter("src")
    ref = make_drafter("ref")
    by_file = run_cli("check", src, "--training-config", ref / "config.json", "--json")
    by_folder = run_cli("check", src, "--training-config", ref, "--json")
    assert by_folder.exit_code == by_file.exit_code == 0, by_folder
    assert by_folder.json["findings"] == by_file.json["findings"]


def test_training_config_folder_without_config(make_drafter, tmp_path):
    src = make_drafter("src")
    (tmp_path / "empty").mkdir()
    r = run_cli("check", src, "--training-config", tmp_path / "empty")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "without config.json" in r.stderr and str(tmp_path / "empty") in r.stderr


# --- --max-shard-size -------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["0", "0B", "0GB", "0.1"])
def test_max_shard_size_must_hold_a_byte(make_drafter, tmp_path, size):
    msg = refused(make_drafter("src"), tmp_path / "out", "--to", "sglang", "--max-shard-size", size)
    assert "--max-shard-size" in msg and "at least one byte" in msg
    assert leftovers(tmp_path) == [] and not (tmp_path / "out").exists()


# --- a missing parent of OUT ------------------------------------------------------------------
def test_missing_parents_of_out_are_made(make_drafter, tmp_path):
    out = tmp_path / "a" / "b" / "out"
    r = convert(make_drafter("src"), out, "--to", "sglang")
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"]
    assert r["written"]["out"] == str(out)


def test_a_failed_write_removes_the_parents_it_made(make_drafter, tmp_path, monkeypatch):
    src = make_drafter("src")

    def full(*a):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(produce, "copy_range", full)
    msg = refused(src, tmp_path / "a" / "b" / "out", "--to", "sglang")
    assert "No space left" in msg
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_parent_that_is_a_file_is_refused(make_drafter, tmp_path):
    (tmp_path / "file").write_text("x")
    msg = refused(make_drafter("src"), tmp_path / "file" / "out", "--to", "sglang")
    assert "is not a folder" in msg


# --- a target model passed as SRC -------------------------------------------------------------
def test_a_target_has_no_drafter_dialect(tmp_path):
    kimi_k25_target(tmp_path / "k25")
    j = run_cli("inspect", tmp_path / "k25", "--json").json
    assert j["dialect"]["name"] is None
    assert j["dialect"]["evidence"] and "target model" in j["dialect"]["evidence"][0]
    assert "KimiK25ForConditionalGeneration" in j["looks_like_target"]
    assert "61 layers" in j["looks_like_target"]
    text = run_cli("inspect", tmp_path / "k25").stdout
    assert any(line.startswith("dialect       - (no drafter dialect") for line in text.splitlines())
    codes = {f["code"] for f in run_cli("check", tmp_path / "k25", "--json").json["findings"]}
    assert "WC203" in codes and "WC202" not in codes


def test_a_drafter_with_a_target_class_is_still_a_drafter(make_drafter, tiny_cfg):
    """WC401's case: the drafter's tensors (fc) say drafter, whatever architectures says."""
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(json.dumps(dict(tiny_cfg, architectures=["LlamaForCausalLM"])))
    j = run_cli("inspect", d, "--json").json
    assert j["looks_like_target"] is None and j["dialect"]["name"] == "specforge"


# --- "renamed" ---------------------------------------------------------------------------------
def test_renamed_only_when_a_name_changed(make_drafter, tmp_path):
    src = make_drafter("src")  # a SpecForge drafter: already in SGLang's names
    r = run_cli("convert", src, tmp_path / "out", "--to", "sglang")
    (wrote,) = [line for line in r.stdout.splitlines() if line.startswith("wrote ")]
    assert "; 15 copied as they were)" in wrote and "renamed" not in wrote


# --- no path of the writer's machine ----------------------------------------------------------
def test_metadata_names_a_local_source_by_its_folder(make_drafter, tmp_path):
    src = make_drafter("my-drafter")
    convert(src, tmp_path / "out", "--to", "sglang")
    _, meta = header(tmp_path / "out" / "model.safetensors")
    assert meta["weightcheck_source"] == "my-drafter"
    assert str(tmp_path) not in json.dumps(meta)


def test_metadata_names_a_file_source_by_folder_and_file(make_drafter, tmp_path):
    src = make_drafter("my-drafter")
    convert(src / "model.safetensors", tmp_path / "out", "--to", "sglang")
    _, meta = header(tmp_path / "out" / "model.safetensors")
    assert meta["weightcheck_source"] == "my-drafter/model.safetensors"


def test_a_relative_source_is_named_by_its_folder_too(make_drafter, tmp_path, monkeypatch):
    make_drafter("rel")
    monkeypatch.chdir(tmp_path)
    convert("rel", "out", "--to", "sglang")
    _, meta = header(tmp_path / "out" / "model.safetensors")
    assert meta["weightcheck_source"] == "rel"
    monkeypatch.chdir(tmp_path / "rel")
    convert(".", tmp_path / "out2", "--to", "sglang")
    _, meta = header(tmp_path / "out2" / "model.safetensors")
    assert meta["weightcheck_source"] == "rel"


def test_no_file_of_out_names_the_writers_folder(make_drafter, tmp_path):
    src = make_drafter("src")
    out = tmp_path / "out"
    convert(src, out, "--to", "speculators", "--target", llama_target())
    for p in out.iterdir():
        assert str(tmp_path).encode() not in p.read_bytes(), p.name


# --- the speculators verifier -----------------------------------------------------------------
def _verifier(out):
    return read_config(out)["speculators_config"]["verifier"]


def test_a_local_target_is_not_written_as_the_verifier(make_drafter, tmp_path, monkeypatch):
    src = make_drafter("src")
    target = llama_target()  # make_drafter's geometry: convert is gated by check against it
    monkeypatch.chdir(target.parent)
    r = convert(src, tmp_path / "out", "--to", "speculators", "--target", target.name)
    v = _verifier(tmp_path / "out")
    assert v["name_or_path"] is None
    assert v["architectures"] == ["LlamaForCausalLM"]  # the family still travels
    assert any("not a Hub id" in n for n in r["notes"])


def test_verifier_is_written_as_given(make_drafter, tmp_path):
    """issue #23: --verifier ID_OR_PATH goes into verifier.name_or_path as given (without it and
    without a Hub --target the field is null, and speculators 0.9.0's from_pretrained fails)."""
    src = make_drafter("src")
    r = convert(src, tmp_path / "out", "--to", "speculators", "--verifier", "moonshotai/Kimi-K2")
    assert _verifier(tmp_path / "out")["name_or_path"] == "moonshotai/Kimi-K2"
    assert "verifier.name_or_path: moonshotai/Kimi-K2 (--verifier)" in r["notes"]
    # a path too, as given, over a local --target's null
    convert(
        src,
        tmp_path / "out2",
        "--to",
        "speculators",
        "--target",
        llama_target(),
        "--verifier",
        "/models/llama",
    )
    assert _verifier(tmp_path / "out2")["name_or_path"] == "/models/llama"


def test_a_null_verifier_says_what_fails_on_it(make_drafter, tmp_path):
    r = convert(make_drafter("src"), tmp_path / "out", "--to", "speculators")
    assert _verifier(tmp_path / "out")["name_or_path"] is None
    said = [n for n in r["notes"] if n.startswith("verifier.name_or_path left empty")]
    assert len(said) == 1 and "speculators 0.9.0" in said[0] and "--verifier" in said[0], r["notes"]


@pytest.mark.parametrize("to", ["sglang", "vllm"])
def test_verifier_only_for_speculators(make_drafter, tmp_path, to):
    err = refused(make_drafter("src"), tmp_path / "out", "--to", to, "--verifier", "x/y")
    assert "--verifier" in err and "--to speculators" in err
    assert not (tmp_path / "out").exists()


def test_a_local_target_naming_its_hub_id_gives_that_id(make_drafter, tmp_path):
    import shutil

    t = tmp_path / "target"
    shutil.copytree(llama_target(), t)
    cfg = json.loads((t / "config.json").read_text())
    (t / "config.json").write_text(json.dumps(dict(cfg, _name_or_path="meta-llama/Llama-3.1-8B")))
    convert(make_drafter("src"), tmp_path / "out", "--to", "speculators", "--target", t)
    assert _verifier(tmp_path / "out")["name_or_path"] == "meta-llama/Llama-3.1-8B"
