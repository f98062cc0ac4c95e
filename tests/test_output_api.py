"""Issue #14, item 9: a Python API for the gate. ``weightcheck.check`` (and inspect, compare,
convert) return typed results holding the very report ``--json`` prints; bad input raises
WeightcheckError; ``import weightcheck`` imports nothing heavy."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from conftest import PRODUCERS, ROOT, run_cli

import weightcheck
from weightcheck import cli, requests

SPEC_TRAIN = PRODUCERS / "speculators-train"


def test_check_returns_the_json_report_typed():
    r = weightcheck.check(SPEC_TRAIN, engine="sglang")
    assert isinstance(r, weightcheck.CheckResult)
    cli = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--json")
    assert r.to_dict() == cli.json and json.loads(r.to_json()) == cli.json
    assert r.ok is False and r.exit_status == cli.exit_code == 1
    assert all(isinstance(f, weightcheck.Finding) for f in r.findings)
    assert [f.as_dict() for f in r.findings] == cli.json["findings"]
    assert {f.code for f in r.errors} == {"WC701", "WC706"} <= r.codes
    assert all(f.severity == "warning" for f in r.warnings)
    assert r.conclusion == cli.json["conclusion"]


def test_check_options_match_the_cli(make_drafter):
    src = make_drafter("src")
    ref = make_drafter("ref")
    r = weightcheck.check(
        src, engine="vllm==0.33.0", target=PRODUCERS / "target-llama", training_config=ref
    )
    cli = run_cli(
        "check",
        src,
        "--engine",
        "vllm==0.33.0",
        "--target",
        PRODUCERS / "target-llama",
        "--training-config",
        ref,
        "--json",
    )
    assert r.to_dict() == cli.json


# what only the API has (a callable for progress; convert's gate switched off), and what only
# changes how the CLI draws a report
API_ONLY = {"progress", "check"}
DRAWING = {"fmt", "as_json", "explain", "verbose"}


@pytest.mark.parametrize(
    "command, request_class",
    [
        ("inspect", requests.InspectRequest),
        ("compare", requests.CompareRequest),
        ("check", requests.CheckRequest),
        ("convert", requests.ConvertRequest),
    ],
)
def test_each_option_is_a_field_of_the_commands_request(command, request_class):
    """Adding an option is its click option and its request field, nothing else: the CLI passes
    every option it parses to the API as the request's field of that name, and the API passes
    its keyword arguments to the request (an unknown one is a TypeError naming it)."""
    options = {p.name for p in cli.main.commands[command].params} - DRAWING
    fields = {f.name for f in dataclasses.fields(request_class)} - API_ONLY
    assert options == fields
    args = ["x"] * (2 if command in ("compare", "convert") else 1)
    required = {"to": "sglang"} if command == "convert" else {}
    with pytest.raises(TypeError, match="no_such_option"):
        getattr(weightcheck, command)(*args, **required, no_such_option=1)


def test_a_clean_drafter_passes_the_gate():
    r = weightcheck.check(PRODUCERS / "specforge-sglang")
    assert r.ok and r.exit_status == 0 and r.errors == ()


def test_inspect_and_compare(make_drafter, tiny_cfg):
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", tiny_cfg, seed=1, skip=("lm_head.weight",))
    i = weightcheck.inspect(a)
    assert i.to_dict() == run_cli("inspect", a, "--json").json
    assert i.dialect == "specforge" and i.architecture == "llama_eagle3" and len(i.tensors) == 15
    assert i.tensor_count == 15 and i.tensors[0].name == i.report["tensors"][0]["name"]
    assert i.config["hidden_size"] == 128 and i.looks_like_target is None
    c = weightcheck.compare(a, b)
    assert c.to_dict() == run_cli("compare", a, b, "--json").json
    assert c.verdict == "incompatible" and not c.ok and c.exit_status == 1 and c.reasons
    same = weightcheck.compare(a, a)
    assert same.verdict == "identical" and same.ok


def test_convert(make_drafter, tmp_path):
    src = make_drafter("src")
    plan = weightcheck.convert(src, tmp_path / "plan", to="sglang", dry_run=True)
    assert plan.dry_run and plan.written is None and not (tmp_path / "plan").exists()
    cli = run_cli("convert", src, tmp_path / "plan", "--to", "sglang", "--dry-run", "--json")
    assert plan.to_dict() == cli.json
    done = weightcheck.convert(src, tmp_path / "out", to="sglang", max_shard_size="300KB")
    assert not done.dry_run and done.written.tensors == 15
    assert done.files == tuple(done.written.files) and len(done.files) > 2
    sizes = []
    weightcheck.convert(src, tmp_path / "out", to="sglang", force=True, progress=sizes.append)
    assert sum(sizes) == sum(t["bytes"] for t in plan.report["tensors"])


def test_bad_input_raises_weightcheck_error(tmp_path, make_drafter):
    with pytest.raises(weightcheck.WeightcheckError) as e:
        weightcheck.check(tmp_path / "missing")
    assert e.value.where == str(tmp_path / "missing") and "path not found" in e.value.message
    with pytest.raises(weightcheck.WeightcheckError, match="unknown engine"):
        weightcheck.check(make_drafter("src"), engine="tensorrt")
    with pytest.raises(weightcheck.WeightcheckError, match="at least"):
        weightcheck.convert(make_drafter("s2"), tmp_path / "o", to="sglang", max_shard_size=0)


def test_import_weightcheck_is_cheap():
    code = (
        "import sys, json, weightcheck\n"
        "before = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'huggingface_hub', 'tabulate', 'click', 'numpy', 'safetensors') "
        "or m.startswith('weightcheck.'))\n"
        "weightcheck.check\n"
        "after = 'weightcheck.api' in sys.modules\n"
        "print(json.dumps([before, after]))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120
    )
    assert p.returncode == 0, p.stderr
    before, after = json.loads(p.stdout)
    assert before == [] and after is True
    assert "check" in dir(weightcheck) and "CheckResult" in weightcheck.__all__
    with pytest.raises(AttributeError):
        _ = weightcheck.no_such_name
