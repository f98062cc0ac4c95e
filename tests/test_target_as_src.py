"""Issue #21, item 3: a target model given as SRC. "This is a target model, not a drafter" is
decided once (model/drafter.py, ``Drafter.looks_like_target``) and is the one answer: check's only
finding (WC203, no WC101/WC104/WC401/WC7xx judging it as a drafter, no convert advice), in the
engine lines' own words; check and convert agree (exit 1 with that finding: the files read fine,
the gate refuses); compare says which side is a target and gives no convert advice."""

from __future__ import annotations

import json

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import TARGET, check, said
from helpers.text import unwrapped

DRAFTER = PRODUCERS / "specforge-sglang"
ONE = "this is a target model, not an EAGLE-3 drafter: 4 decoder layers (layers.0..3) and no fc.weight"


@pytest.mark.parametrize("engine", [None, "sglang", "vllm"])
def test_check_gives_one_finding_that_agrees_with_the_engine_lines(engine):
    code, rep = check(TARGET, *(("--engine", engine) if engine else ()))
    assert code == 1
    (f,) = rep["findings"]
    assert f["code"] == "WC203" and f["severity"] == "error" and not f["consequences"]
    # the fact in the first line, the reason and where each engine stops in the detail
    assert f["message"].startswith("this is a target model, not an EAGLE-3 drafter")
    assert f["detail"].startswith(ONE)
    assert f["fix"] is None and "weightcheck convert" not in said(f)
    # where each engine stops, as its engine line says it
    views = rep["engines"] if engine is None else {engine: None}
    for e in views:
        assert f"{e} fails at " in said(f)
    if engine is None:
        for e, s in rep["engines"].items():
            assert not s["starts"]
            stage = s["says"].removeprefix("fails at ").split(":")[0]  # "build on draft_vocab_size"
            assert f"{e} fails at {stage}" in f["detail"], (e, s["says"])


@pytest.mark.parametrize("to", ["sglang", "vllm", "speculators"])
def test_convert_refuses_like_check(tmp_path, to):
    out = tmp_path / "out"
    r = run_cli("convert", TARGET, out, "--to", to)
    assert r.exit_code == 1, r  # like check: refused with the finding, not unreadable input (2)
    flat = unwrapped(r.stdout)
    assert "WC203" in flat and "this is a target model, not an EAGLE-3 drafter" in flat
    assert "on the source" in flat and "refused: SRC is a target model" in flat
    assert not out.exists() and not r.stderr.strip()
    j = run_cli("convert", TARGET, out, "--to", to, "--json", "--allow-errors")
    assert j.exit_code == 1 and j.json["refused"] and not out.exists()
    assert {f["code"] for e in j.json["check"]["engines"] for f in e["findings"]} == {"WC203"}


@pytest.mark.parametrize("side", ["A", "B"])
def test_compare_says_which_side_and_gives_no_convert_advice(side):
    a, b = (TARGET, DRAFTER) if side == "A" else (DRAFTER, TARGET)
    r = run_cli("compare", a, b, "--json")
    assert r.exit_code == 1
    assert (
        f"{side} is a target model, not an EAGLE-3 drafter: 4 decoder layers"
        in r.json["reasons"][0]
    )
    meaning = r.json["vocab"]["meaning"]
    assert meaning.startswith(f"{side} is a target model, not a drafter")
    assert "--vocab-from" not in json.dumps(r.json) and "weightcheck convert" not in json.dumps(
        r.json
    )
    assert "--vocab-from" not in run_cli("compare", a, b).stdout
