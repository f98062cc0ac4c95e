"""Issue #14, item 1: ``convert --force`` replaces only what weightcheck wrote (or an empty folder),
and the leftovers of killed runs are removed by any later convert into the same folder and by
``weightcheck clean`` — never those of a process still alive."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import run_cli
from helpers.convert import TMP_MARK, convert, leftovers, refused, snapshot

import weightcheck


@pytest.fixture
def src(make_drafter):
    return make_drafter("src")


def _tree(folder) -> dict:
    """Every file and folder below ``folder`` with its bytes: what "nothing touched" compares."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder) + "/"] = None
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


def _users_folder(path):
    """The report's case: a folder holding notes.txt and a subfolder."""
    path.mkdir()
    (path / "notes.txt").write_text("my notes")
    (path / "runs").mkdir()
    (path / "runs" / "a.log").write_text("log")
    return path


def test_force_refuses_a_folder_weightcheck_did_not_write(tmp_path, src):
    out = _users_folder(tmp_path / "out")
    before = _tree(out)
    for args in ((), ("--force",)):
        msg = refused(src, out, "--to", "sglang", *args)
        assert "notes.txt" in msg and "weightcheck did not write" in msg and "--force" in msg
        assert _tree(out) == before  # nothing touched
    assert leftovers(tmp_path) == []


def test_force_refuses_a_weightcheck_folder_the_user_added_to(tmp_path, src):
    out = tmp_path / "out"
    convert(src, out, "--to", "sglang")
    (out / "notes.txt").write_text("mine")
    before = _tree(out)
    msg = refused(src, out, "--to", "sglang", "--force")
    assert "notes.txt" in msg
    assert _tree(out) == before


def test_force_refuses_safetensors_someone_else_wrote(tmp_path, src, make_drafter):
    other = make_drafter("other")  # the same file names, but no weightcheck mark in the metadata
    before = _tree(other)
    msg = refused(src, other, "--to", "sglang", "--force")
    assert "model.safetensors" in msg and "weightcheck_converted_to" in msg
    assert _tree(other) == before


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_force_refuses_a_file_or_a_link(tmp_path, src, kind):
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("data")
    else:
        target = _users_folder(tmp_path / "real")
        out.symlink_to(target)
    msg = refused(src, out, "--to", "sglang", "--force")
    assert ("is a file" if kind == "file" else "symbolic link") in msg
    assert out.is_symlink() if kind == "symlink" else out.read_text() == "data"
    if kind == "symlink":
        assert (tmp_path / "real" / "notes.txt").read_text() == "my notes"


def test_force_replaces_an_empty_folder_and_a_weightcheck_output(tmp_path, src):
    out = tmp_path / "out"
    out.mkdir()
    assert "pass --force" in refused(src, out, "--to", "sglang")
    convert(src, out, "--to", "sglang", "--force")
    first = snapshot(out)
    r = convert(src, out, "--to", "sglang", "--force", "--dtype", "fp32")  # weightcheck's own
    assert r["written"]["out"] == str(out)
    assert snapshot(out) != first
    convert(src, out, "--to", "sglang", "--force", "--max-shard-size", "300KB")
    names = sorted(os.listdir(out))
    assert "model.safetensors.index.json" in names and len(names) > 4
    convert(src, out, "--to", "sglang", "--force")  # a sharded weightcheck output is ours too
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"]
    assert leftovers(tmp_path) == []


def test_every_output_carries_the_mark(tmp_path, src):
    from weightcheck.storage.header import read_local_header

    out = tmp_path / "out"
    convert(src, out, "--to", "sglang", "--max-shard-size", "300KB")
    shards = [p for p in out.iterdir() if p.suffix == ".safetensors"]
    assert len(shards) > 1
    for p in shards:
        assert read_local_header(p).metadata["weightcheck_converted_to"] == "sglang"


# ---------------------------------------------------------------------------------------------
# leftovers of killed runs
def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # a process that has exited (and been reaped): its pid is free


def test_a_convert_to_another_out_removes_a_killed_runs_leftovers(tmp_path, src):
    dead = _dead_pid()
    killed = tmp_path / f".OTHER{TMP_MARK}{dead}"
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"partial")
    r = convert(src, tmp_path / "out", "--to", "sglang")
    assert not killed.exists()
    assert r["written"]["cleaned"] == [killed.name]
    assert leftovers(tmp_path) == []


def test_a_leftover_of_a_live_process_is_never_touched(tmp_path, src):
    live = subprocess.Popen(["sleep", "30"])
    try:
        mine = tmp_path / f".OTHER{TMP_MARK}{live.pid}"
        mine.mkdir()
        (mine / "model.safetensors").write_bytes(b"being written")
        convert(src, tmp_path / "out", "--to", "sglang")
        r = run_cli("clean", tmp_path, "--json")
        assert r.exit_code == 0, r
        assert mine.exists() and (mine / "model.safetensors").read_bytes() == b"being written"
        assert r.json["kept"] == [{"name": mine.name, "pid": live.pid}]
        assert r.json["removed"] == []
        text = run_cli("clean", tmp_path).stdout
        assert f"kept {mine.name} (process {live.pid} is still running)" in text
    finally:
        live.kill()
        live.wait()


def test_clean_removes_leftovers_and_restores_an_out_set_aside(tmp_path, src):
    dead = _dead_pid()
    convert(src, tmp_path / "A", "--to", "sglang")
    # a killed --force run: its new output unfinished, the old OUT "A" set aside, OUT missing
    os.rename(tmp_path / "A", tmp_path / f".A{TMP_MARK}old-{dead}")
    (tmp_path / f".A{TMP_MARK}{dead}").mkdir()
    (tmp_path / f".B{TMP_MARK}{dead}").mkdir()
    (tmp_path / "keep.txt").write_text("not a leftover")
    r = run_cli("clean", tmp_path, "--json")
    assert r.exit_code == 0, r
    assert r.json["schema"] == "weightcheck.clean/1"
    assert sorted(r.json["removed"]) == sorted(
        [f".A{TMP_MARK}old-{dead} (restored as A)", f".A{TMP_MARK}{dead}", f".B{TMP_MARK}{dead}"]
    )
    assert sorted(os.listdir(tmp_path)) == ["A", "keep.txt", "src"]
    assert sorted(os.listdir(tmp_path / "A")) == ["README.md", "config.json", "model.safetensors"]
    again = run_cli("clean", tmp_path)
    assert again.exit_code == 0 and again.stdout.strip() == f"nothing to clean in {tmp_path}"


def test_clean_defaults_to_the_current_folder_and_refuses_a_non_folder(tmp_path, monkeypatch):
    dead = _dead_pid()
    (tmp_path / f".X{TMP_MARK}{dead}").mkdir()
    monkeypatch.chdir(tmp_path)
    r = run_cli("clean")
    assert r.exit_code == 0 and f"removed .X{TMP_MARK}{dead}" in r.stdout
    assert os.listdir(tmp_path) == []
    (tmp_path / "f").write_text("x")
    bad = run_cli("clean", tmp_path / "f", "--json")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1
    assert json.loads(bad.stdout)["error"].endswith("not a folder")


def test_the_api_clean(tmp_path):
    dead = _dead_pid()
    (tmp_path / f".Y{TMP_MARK}{dead}").mkdir()
    r = weightcheck.clean(tmp_path)
    assert r.removed == (f".Y{TMP_MARK}{dead}",) and r.kept == ()
    assert r.to_dict()["folder"] == str(tmp_path)
