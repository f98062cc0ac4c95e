"""``check SRC --engine E --live`` without an engine in this interpreter (the default suite): the
usage errors, the one-line exit-2 error naming what to install, header-level check staying
torch-free, and the live-vs-replay comparison (WC713) on constructed live results. The live runs
themselves, with each engine installed: tests/test_engine_live.py (marker ``engine``)."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import PRODUCERS, ROOT, run_cli, run_subprocess

from weightcheck.engines import live as live_mod
from weightcheck.engines import live_compare
from weightcheck.engines import view as view_mod
from weightcheck.engines.replay_types import Failure, ParamState
from weightcheck.model.drafter import load_drafter
from weightcheck.reports.base import typed
from weightcheck.reports.check import LiveReport

SRC = PRODUCERS / "specforge-sglang"


def _absent(engine: str):
    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is importable here: the not-installed path cannot be exercised")


def test_live_needs_an_engine():
    r = run_cli("check", SRC, "--live")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--live" in lines[0] and "--engine" in lines[0], r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_engine_not_importable_is_one_line_exit_2(engine):
    _absent(engine)
    r = run_cli("check", SRC, "--engine", engine, "--live")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("weightcheck: error: ")
    assert engine in lines[0] and live_mod.INSTALL[engine] in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_engine_not_importable_json():
    _absent("sglang")
    r = run_cli("check", SRC, "--engine", "sglang", "--live", "--format", "json")
    assert r.exit_code == 2
    rep = json.loads(r.stdout)
    assert live_mod.INSTALL["sglang"] in rep["error"]


def test_an_engine_that_does_not_import_is_one_line_exit_2(tmp_path):
    """An installed engine whose loading modules do not import (here: a package named sglang with
    nothing in it, first on the path): exit 2, one line, no traceback."""
    pytest.importorskip("torch")
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = run_subprocess("check", SRC, "--engine", "sglang", "--live", env=env)
    assert r.exit_code == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not import" in lines[0], r.stderr
    assert "sglang.srt" in lines[0] and "Traceback" not in r.stderr and r.stdout == ""


# a fresh interpreter: which modules a command imported
_PROBE = (
    "import sys, json\nfrom weightcheck.cli import main\n"
    "try:\n    main(sys.argv[1:], prog_name='weightcheck')\n"
    "except SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
    "{'torch', 'sglang', 'vllm'})))"
)


def _imports(*args) -> tuple[list, str]:
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
    )
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.mark.parametrize(
    "args", [(), ("--engine", "sglang", "--explain"), ("--engine", "vllm", "--format", "json")]
)
def test_check_without_live_imports_no_torch(args):
    mods, err = _imports("check", SRC, *args)
    assert mods == [], (mods, err)
    assert "exit 0" in err


def test_live_not_importable_imports_nothing_either():
    _absent("sglang")
    mods, err = _imports("check", SRC, "--engine", "sglang", "--live")
    assert "exit 2" in err
    assert mods == [], (mods, err)


# --- the comparison, on live results made from the replay ----------------------------------------


def _replay(src=SRC, engine="sglang"):
    d = load_drafter(str(src))
    return d, view_mod.view(d, engine)


def _as_live(replay) -> live_mod.LiveView:
    """A live result saying what the replay says (what the engine's loader would show when the
    replay is right): each tensor's fate, and which parameters the checkpoint loads."""
    return live_mod.LiveView(
        engine=replay.engine,
        version=replay.version,
        architecture="LlamaForCausalLMEagle3",
        landings=[copy.copy(x) for x in replay.landings],
        params=[
            dataclasses.replace(p, param=p.param.split(" ")[0], sources=list(p.sources))
            for p in replay.params
        ],
    )


def test_live_saying_what_the_replay_says_agrees():
    _, rv = _replay()
    lv = _as_live(rv)
    assert live_compare.disagreements(lv, rv) == []
    r = live_compare.report(lv, rv)
    assert r["agrees"] and r["replay_version"] == rv.version


def test_a_tensor_live_drops_is_a_disagreement():
    _, rv = _replay()
    lv = _as_live(rv)
    name = "midlayer.mlp.down_proj.weight"
    x = next(x for x in lv.landings if x.name == name)
    x.fate, x.param = "dropped", None
    got = live_compare.disagreements(lv, rv)
    assert [(g.get("tensor"), g["live"], g["replay"]) for g in got] == [(name, "dropped", "loaded")]


def test_skipped_and_dropped_are_the_same_to_live():
    """t2d: the replay says skipped (the loader's `continue`), live sees a name that writes
    nothing: the same observable fate."""
    _, rv = _replay()
    lv = _as_live(rv)
    t2d = next(x for x in lv.landings if x.name == "t2d")
    assert next(x for x in rv.landings if x.name == "t2d").fate == "skipped"
    t2d.fate = "dropped"
    assert live_compare.disagreements(lv, rv) == []


def test_a_tensor_written_elsewhere_is_a_disagreement():
    _, rv = _replay()
    lv = _as_live(rv)
    x = next(x for x in lv.landings if x.name == "norm.weight")
    x.param = "model.layers.0.hidden_norm.weight"
    got = live_compare.disagreements(lv, rv)
    assert len(got) == 1 and got[0]["tensor"] == "norm.weight"
    assert "model.layers.0.hidden_norm.weight" in got[0]["says"]


def test_a_parameter_live_leaves_at_init_is_a_disagreement():
    _, rv = _replay()
    lv = _as_live(rv)
    p = next(p for p in lv.params if p.param == "model.norm.weight")
    p.state, p.sources = "random", []
    got = live_compare.disagreements(lv, rv)
    assert [g.get("param") for g in got] == ["model.norm.weight"]


def test_a_live_failure_before_loading_is_a_disagreement_and_hides_nothing():
    _, rv = _replay()
    lv = _as_live(rv)
    lv.failure = Failure("build", "RuntimeError: boom")
    for x in lv.landings:
        x.fate = "unknown"
    got = live_compare.disagreements(lv, rv)
    assert len(got) == 1 and got[0]["stage"] == "build" and "boom" in got[0]["says"]


def test_annotate_says_the_bind_rule_is_the_replays():
    """A parameter nothing loaded that the replay's bind rule gives the target's (SGLang's
    embedding): from_target, saying the rule is the replay's; one the replay leaves at init
    stays random."""
    _, rv = _replay()
    lv = _as_live(rv)
    for p in lv.params:
        if p.param in ("model.embed_tokens.weight", "lm_head.weight"):
            p.state, p.sources = "random", []
    live_compare.annotate(lv, rv)
    by = {p.param: p for p in lv.params}
    assert by["model.embed_tokens.weight"].state == "from_target"
    assert "replay" in by["model.embed_tokens.weight"].note
    assert by["lm_head.weight"].state == "random"


def test_wc713_names_each_disagreement():
    from weightcheck.rules import RULES
    from weightcheck.rules.base import Context

    d, rv = _replay()
    lv = _as_live(rv)
    x = next(x for x in lv.landings if x.name == "fc.weight")
    x.fate, x.why = "error", "AssertionError: shapes"
    ctx = Context(drafter=d, rules=RULES, engine="sglang", engine_view=rv)
    ctx.live = live_compare.report(lv, rv)
    found = list(RULES["WC713"](ctx))
    assert [f.subject for f in found] == ["fc.weight"]
    assert found[0].severity == "warning" and "AssertionError" in found[0].detail


def test_live_table_renders_with_the_explain_table_code():
    from weightcheck.output import Output
    from weightcheck.output.check import live_blocks
    from weightcheck.output.drawing import draw

    _, rv = _replay()
    lv = _as_live(rv)
    x = next(x for x in lv.landings if x.name == "norm.weight")
    x.fate, x.param = "dropped", None
    text = draw(live_blocks(typed(LiveReport, live_compare.report(lv, rv))), Output.to("text"))
    assert "norm.weight" in text and "dropped" in text
    assert "disagree on 1 point" in text


def test_a_parameter_only_live_loads_is_a_disagreement():
    """The replay of an older module tree (sglang <= 0.5.11: model.midlayer.*) has no parameter
    the installed engine loads (model.layers.0.*): said once per such parameter."""
    _, rv = _replay()
    lv = _as_live(rv)
    lv.params.append(ParamState("model.layers.9.extra.weight", "", True, "loaded", ["norm.weight"]))
    got = live_compare.disagreements(lv, rv)
    assert [(g.get("param"), g["live"], g["replay"]) for g in got] == [
        ("model.layers.9.extra.weight", "loaded", None)
    ]


def test_markdown_lists_the_disagreements():
    from weightcheck.output import Output
    from weightcheck.output.check import live_blocks
    from weightcheck.output.drawing import draw

    _, rv = _replay()
    lv = _as_live(rv)
    x = next(x for x in lv.landings if x.name == "norm.weight")
    x.fate, x.param = "dropped", None
    text = draw(live_blocks(typed(LiveReport, live_compare.report(lv, rv))), Output.to("markdown"))
    assert "\n- norm.weight: live dropped" in text
