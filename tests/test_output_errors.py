"""Issue #14, item 2: errors as data. A run that exits 2 with ``--json`` prints one JSON object on
stdout (``error``, ``file``) beside its one stderr line, so ``jq`` in CI never reads nothing;
``--json`` with another ``--format`` is a usage error; usage errors are one line too."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

PREFIX = "weightcheck: error: "


def _error_object(r, command):
    assert r.exit_code == 2, r
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), r.stderr
    obj = json.loads(r.stdout)  # one object, nothing else on stdout
    assert obj["schema"] == "weightcheck.error/1" and obj["exit_status"] == 2
    assert obj["command"] == command
    assert isinstance(obj["error"], str) and obj["error"] == lines[0][len(PREFIX) :]
    return obj


@pytest.mark.parametrize("how", [["--json"], ["--format", "json"], ["--format=json"]])
@pytest.mark.parametrize(
    "command, args",
    [
        ("inspect", ["{missing}"]),
        ("check", ["{missing}"]),
        ("compare", ["{src}", "{missing}"]),
        ("convert", ["{missing}", "{out}", "--to", "vllm"]),
    ],
)
def test_exit_2_prints_the_error_as_json(tmp_path, make_drafter, command, args, how):
    src = make_drafter("src")
    missing = tmp_path / "no-such-drafter"
    args = [a.format(src=src, missing=missing, out=tmp_path / "out") for a in args]
    obj = _error_object(run_cli(command, *args, *how), command)
    assert obj["file"] == str(missing) and "path not found" in obj["error"]


def test_the_file_concerned_is_named(tmp_path, make_drafter):
    src = make_drafter("src")
    (src / "config.json").write_text("{not json")
    obj = _error_object(run_cli("inspect", src, "--json"), "inspect")
    assert obj["file"].endswith("config.json") and "not valid JSON" in obj["error"]


def test_a_refused_convert_is_data_too(tmp_path, make_drafter):
    src = make_drafter("src")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    obj = _error_object(
        run_cli("convert", src, out, "--to", "vllm", "--force", "--json"), "convert"
    )
    assert obj["file"] == str(out) and "notes.txt" in obj["error"]


@pytest.mark.parametrize(
    "args",
    [
        ["check", "{src}", "--json", "--format", "markdown"],
        ["check", "{src}", "--format", "markdown", "--json"],
        ["inspect", "{src}", "--json", "--format", "text"],
    ],
)
def test_two_formats_are_a_usage_error(make_drafter, args):
    src = make_drafter("src")
    r = run_cli(*[a.format(src=src) for a in args])
    obj = _error_object(r, args[0])  # --json asked: the usage error is JSON as well
    assert "two output formats" in obj["error"] and obj["file"] is None


def test_json_and_the_same_format_twice_is_fine(make_drafter):
    src = make_drafter("src")
    r = run_cli("inspect", src, "--json", "--format", "json")
    assert r.exit_code == 0 and r.json["schema"] == "weightcheck.inspect/1"


@pytest.mark.parametrize(
    "args, text",
    [
        (["check", "{src}", "--no-such-option"], "No such option"),
        (["check"], "Missing argument"),
        (["check", "{src}", "--format", "yaml"], "'yaml' is not one of"),
        (["inspect", "{src}", "--format", "concise"], "'concise' is not one of"),
        (["convert", "{src}", "{src}-out"], "Missing option '--to'"),
        (["rule"], "give a rule CODE"),
        (["check", "{src}", "--markdown"], "No such option '--markdown'"),  # --format markdown
    ],
)
def test_usage_errors_are_one_line(make_drafter, args, text):
    src = make_drafter("src")
    args = [a.format(src=src) for a in args]
    r = run_cli(*args)
    assert r.exit_code == 2, r
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(PREFIX), r.stderr
    assert text in r.stderr and "Usage:" not in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""  # text output: stderr has it all
    with_json = run_cli(*args, "--json")
    if "--format" not in args:
        _error_object(with_json, args[0])


def test_github_format_annotates_an_error(tmp_path):
    r = run_cli("check", tmp_path / "nothing", "--format", "github")
    assert r.exit_code == 2
    (line,) = r.stdout.splitlines()
    assert line.startswith("::error title=weightcheck%3A could not check::") and "nothing" in line
