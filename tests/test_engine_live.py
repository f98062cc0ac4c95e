"""``check SRC --engine E --live`` run by each engine's side-venv interpreter: the engine's own
draft class built on the meta device and its own ``load_weights`` given header-shaped tensors.

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_engine_live.py``. The interpreters are the side venvs'
(tests/helpers/engine.py ``side_python``: WEIGHTCHECK_SGLANG_PYTHON / WEIGHTCHECK_VLLM_PYTHON,
else ``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/<engine>/bin/python``); without one its
tests are skipped. weightcheck runs there from this checkout (PYTHONPATH), with the one
dependency the side venvs lack (tabulate) copied from this interpreter's install into a
session temporary folder: nothing is installed into the side venvs and nothing is downloaded
(docs/engine-test.md "--live").

Each run is a real user's command line; the assertions are on its JSON report: what the live
loader did with each tensor, and that it agrees with the replay of mappings/engines/ (WC713
quiet), except where the replay is of another version than the one installed (asserted too).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import schema_check
from conftest import PRODUCERS, ROOT
from helpers.engine import PRODUCER_FIXTURES, read_st, side_python, variant

from weightcheck.engines.live_compare import OBSERVED

pytestmark = pytest.mark.engine

ENGINES = ["sglang", "vllm"]
BASE = PRODUCERS / "specforge-sglang"  # midlayer.* names, d2t and t2d
TIMEOUT = 600


@pytest.fixture(scope="session")
def overlay(tmp_path_factory) -> pathlib.Path:
    """A folder with this interpreter's tabulate (weightcheck's one dependency the side venvs
    lack), for the side interpreter's PYTHONPATH."""
    import tabulate

    d = tmp_path_factory.mktemp("live-overlay")
    src = pathlib.Path(tabulate.__file__)
    if src.name == "__init__.py":  # a package
        shutil.copytree(src.parent, d / "tabulate")
    else:  # a single module
        shutil.copy2(src, d / src.name)
    return d


def live(engine: str, src, overlay: pathlib.Path, *args, spec=None) -> tuple[int, dict, str]:
    """``python -m weightcheck check SRC --engine SPEC --live --format json [ARGS]`` in the
    engine's side venv (SPEC: the engine, or ``engine==VERSION`` for the replay): (exit status,
    report, stderr)."""
    py = side_python(engine)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(overlay)])
    cmd = [py, "-m", "weightcheck", "check", str(src), "--engine", spec or engine, "--live"]
    cmd += ["--format", "json", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=TIMEOUT)
    assert p.stdout.strip(), p.stderr[-3000:]
    schema_check.check_output(cmd, p.stdout)
    return p.returncode, json.loads(p.stdout), p.stderr


def fates(rep: dict) -> dict:
    return {t["name"]: t["fate"] for t in rep["live"]["tensors"]}


def params(rep: dict) -> dict:
    return {p["param"]: p for p in rep["live"]["parameters"]}


def codes(rep: dict) -> set:
    return {f["code"] for f in rep["findings"]}


def assert_agrees(rep: dict):
    """Live and replay agree (the report's own comparison, WC713 quiet), and, checked here
    independently of it, every tensor both saw does the same observable thing."""
    lv = rep["live"]
    assert lv["agrees"] and lv["disagreements"] == [], lv["disagreements"]
    assert "WC713" not in codes(rep)
    replay = {t["name"]: t["fate"] for t in rep["engine"]["tensors"]}
    assert set(replay) == set(fates(rep))
    for name, f in fates(rep).items():
        if f != "unknown" and replay[name] != "unknown":
            assert OBSERVED[f] == OBSERVED[replay[name]], (name, f, replay[name])


# --- the producers' drafters -------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fixture", PRODUCER_FIXTURES)
def test_producer_drafters_live_agree_with_the_replay(engine, fixture, overlay):
    code, rep, err = live(engine, PRODUCERS / fixture, overlay)
    lv = rep["live"]
    assert lv["engine"] == engine and lv["version"]
    assert code == (0 if rep["ok"] else 1), err[-2000:]
    assert_agrees(rep)
    replay_fails = rep["engine"]["fails"]
    if replay_fails is None or replay_fails["stage"] in ("load", "bind"):
        # the engine builds its draft class and runs load_weights over every name
        assert lv["architecture"] and lv["fails"] is None, lv["fails"]
        assert "unknown" not in fates(rep).values()
        loaded = [p for p in lv["parameters"] if p["state"] == "loaded"]
        assert loaded and all(p["sources"] for p in loaded)
        for t in lv["tensors"]:
            if t["fate"] == "loaded":
                assert t["param"], t
    else:  # the replay says it stops before loading; so does the engine
        assert lv["fails"] and lv["fails"]["stage"] == replay_fails["stage"], lv["fails"]


@pytest.mark.parametrize("fixture", ["specforge-sglang", "modelopt-fullvocab-fp32"])
def test_vllm_with_the_target(fixture, overlay):
    """With --target, vLLM's draft config is built beside the target's own config (no stand-in
    made from the drafter's): the same agreement, and the note about the stand-in is gone."""
    _, rep, _ = live("vllm", PRODUCERS / fixture, overlay, "--target", PRODUCERS / "target-llama")
    assert rep["target"] is not None
    assert_agrees(rep)
    assert rep["live"]["fails"] is None and rep["live"]["compared"]["parameters"]
    assert not any("made from the drafter" in n for n in rep["live"]["notes"])


def test_speculators_format_stops_sglang_at_config(overlay):
    """SGLang 0.5.23 reads no speculators config (the replay's WC706): its own ModelConfig
    stops on it before building anything."""
    _, rep, _ = live("sglang", PRODUCERS / "speculators-convert", overlay)
    assert rep["live"]["fails"]["stage"] == "config"
    assert set(fates(rep).values()) == {"unknown"}
    assert "WC706" in codes(rep)


# --- broken variants -----------------------------------------------------------------------------


def _shape_variant(tmp: pathlib.Path) -> pathlib.Path:
    _, _, info = read_st(BASE / "model.safetensors")
    rows, cols = info["fc.weight"]["shape"]
    wrong = [rows, cols // 3 * 2]
    return variant(
        BASE,
        tmp / "shape",
        drop=["fc.weight"],
        first={"fc.weight": ("BF16", wrong, b"\0" * (rows * wrong[1] * 2))},
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_typo_key(engine, tmp_path, overlay):
    typo = "midlayer.mlp.down_prj.weight"
    src = variant(BASE, tmp_path / "typo", rename={"midlayer.mlp.down_proj.weight": typo})
    code, rep, _ = live(engine, src, overlay)
    assert code == 1
    assert_agrees(rep)
    f = fates(rep)
    if engine == "sglang":  # written nowhere, said nowhere; its parameter stays at init
        assert f[typo] == "dropped" and rep["live"]["fails"] is None
        assert params(rep)["model.layers.0.mlp.down_proj.weight"]["state"] == "random"
    else:  # vLLM's AutoWeightsLoader raises on a name it has no parameter for
        assert f[typo] == "error"
        assert rep["live"]["fails"]["stage"] == "load"
        assert rep["live"]["fails"]["subject"] == typo
        assert "down_prj" in rep["live"]["fails"]["why"]


@pytest.mark.parametrize("engine", ENGINES)
def test_missing_lm_head(engine, tmp_path, overlay):
    src = variant(BASE, tmp_path / "nohead", drop=["lm_head.weight"])
    _, rep, _ = live(engine, src, overlay)
    assert_agrees(rep)
    assert rep["live"]["fails"] is None
    head = params(rep)["lm_head.weight"]
    assert head["sources"] == []  # nothing in the checkpoint writes it
    # SGLang builds its own head (draft_vocab_size is set) and nothing loads it; vLLM shares the
    # target's at bind when the checkpoint has none (the replay's rule: bind is not run live)
    assert head["state"] == ("random" if engine == "sglang" else "from_target")


@pytest.mark.parametrize("engine", ENGINES)
def test_wrong_shape_stops_the_load(engine, tmp_path, overlay):
    src = _shape_variant(tmp_path)
    code, rep, _ = live(engine, src, overlay)
    assert code == 1
    assert_agrees(rep)
    lv = rep["live"]
    assert fates(rep)["fc.weight"] == "error"
    assert lv["fails"]["stage"] == "load" and lv["fails"]["subject"] == "fc.weight"
    assert "AssertionError" in lv["fails"]["why"]
    f = fates(rep)
    # what was taken up before it loaded; nothing after it is called dropped: it is not reached
    assert "dropped" not in f.values() and "unknown" in f.values()
    if engine == "sglang":  # SGLang loads name by name, a file's names sorted
        assert {f[n] for n in f if n > "fc.weight"} == {"unknown"}
        assert {f[n] for n in f if n < "fc.weight"} <= {"loaded", "special"}


@pytest.mark.parametrize("engine", ENGINES)
def test_model_prefixed_names(engine, tmp_path, overlay):
    keep = {"d2t", "t2d", "lm_head.weight"}
    src = variant(BASE, tmp_path / "prefixed", rename=lambda n: n if n in keep else "model." + n)
    code, rep, _ = live(engine, src, overlay)
    assert_agrees(rep)
    f = fates(rep)
    if engine == "sglang":  # its loader takes `model.`-prefixed names as they are
        assert code == 0 and rep["live"]["fails"] is None
        assert f["model.midlayer.self_attn.q_proj.weight"] == "loaded"
        assert not [p for p, s in params(rep).items() if s["state"] == "random"]
    else:  # vLLM adds `model.` itself: model.model.* names no parameter, and it raises
        assert code == 1 and rep["live"]["fails"]["stage"] == "load"
        assert f[rep["live"]["fails"]["subject"]] == "error"
        assert rep["live"]["fails"]["subject"].startswith("model.")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_name_the_engine_warns_about(engine, tmp_path, overlay):
    """mask_hidden (vLLM's parallel-drafting buffer) in a drafter without parallel drafting: vLLM
    logs a warning and skips it (vllm 0.32.0 model_executor/models/llama_eagle3.py
    Eagle3LlamaForCausalLM.load_weights: `logger.warning("mask_hidden found in weights but model
    is not configured for parallel drafting. ...")`, then `continue`); SGLang has no such name and
    drops it without a word.

    Known disagreement, vLLM: the replay (mappings/engines/vllm.toml [[names.special]]
    "mask_hidden") calls it `special` whatever the config, its `becomes` saying "warned and
    skipped when parallel drafting is off"; live, the engine writes nothing and warns: WC713 on
    that one name, nothing else."""
    _, _, info = read_st(BASE / "model.safetensors")
    width = info["fc.weight"]["shape"][1]
    src = variant(
        BASE, tmp_path / "mask", add={"mask_hidden": ("BF16", [1, width], bytes(width * 2))}
    )
    _, rep, _ = live(engine, src, overlay)
    lv = rep["live"]
    assert lv["fails"] is None
    if engine == "sglang":
        assert fates(rep)["mask_hidden"] == "dropped" and lv["warnings"] == []
        assert_agrees(rep)
        return
    assert fates(rep)["mask_hidden"] == "warned"
    assert [w["key"] for w in lv["warnings"]] == ["mask_hidden"]
    assert "parallel drafting" in lv["warnings"][0]["message"]
    replay = {t["name"]: t for t in rep["engine"]["tensors"]}["mask_hidden"]
    assert replay["fate"] == "special" and "warned and skipped" in replay["why"]
    assert [(d.get("tensor"), d["live"], d["replay"]) for d in lv["disagreements"]] == [
        ("mask_hidden", "warned", "special")
    ]
    assert [f["subject"] for f in rep["findings"] if f["code"] == "WC713"] == ["mask_hidden"]


# --- WC713: the replay of another version than the one installed --------------------------------


def test_replay_of_an_older_sglang_disagrees_with_the_installed_one(overlay):
    """The replay of sglang 0.5.10 (module tree model.midlayer.*, mappings/engines/sglang.toml
    param_rename "sglang <= 0.5.11") against the installed 0.5.23 (model.layers.0.*): the
    layers.0.* names ModelOpt writes are dropped by the old loader, loaded by the new one."""
    code, rep, _ = live(
        "sglang", PRODUCERS / "modelopt-fullvocab-fp32", overlay, spec="sglang==0.5.10"
    )
    lv = rep["live"]
    if lv["version"] == "0.5.10":
        pytest.skip("the installed SGLang is the replayed version")
    assert lv["replay_version"] == "0.5.10"
    assert not lv["agrees"]
    said = {d["tensor"]: d for d in lv["disagreements"] if "tensor" in d}
    q = "layers.0.self_attn.q_proj.weight"
    assert (said[q]["live"], said[q]["replay"]) == ("loaded", "dropped")
    wc713 = [f for f in rep["findings"] if f["code"] == "WC713"]
    assert {f["subject"] for f in wc713} >= {q}
    assert all(f["severity"] == "warning" for f in wc713)


def test_text_output_shows_both_tables(overlay):
    py = side_python("sglang")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(overlay)])
    p = subprocess.run(
        [py, "-m", "weightcheck", "check", str(BASE), "--engine", "sglang", "--live", "--explain"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        timeout=TIMEOUT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    assert "replayed from mappings/engines/sglang.toml" in out
    assert "live: sglang" in out and "installed" in out
    n = len(read_st(BASE / "model.safetensors")[2])
    assert f"live and replay agree on the {n} tensor(s) both saw and on every parameter" in out
    # the key-by-key table twice: the replay's (with the name looked up, "(as d2t)") and the live
    # one (its parameters only)
    assert out.count("checkpoint tensor") == 2 and out.count("(as d2t)") == 1


# --- a Hub source: headers only ------------------------------------------------------------------


def test_hub_source_reads_headers_only(tmp_path, overlay, make_drafter):
    """SRC a Hub repo (the tests' Hub-compatible server, tests/hubserver.py): --live needs the
    config and the headers, like check, and reads no weight. vLLM's side venv only: SGLang's has
    huggingface_hub 1.x, below weightcheck's floor (2.2.0)."""
    import synth
    from conftest import K2, load_config
    from hubserver import HubServer, hf_env

    py = side_python("vllm")
    cfg = synth.scaled_config(
        load_config(K2), hidden=256, intermediate=1024, heads=8, head_dim=32, vocab=8192
    )
    d = make_drafter("big", cfg)
    size = (d / "model.safetensors").stat().st_size
    assert size > 1_000_000
    with HubServer() as hub:
        hub.add_repo("org/drafter", {p.name: p for p in d.iterdir() if p.is_file()})
        env = hf_env(hub, tmp_path / "hf_home")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(overlay)])
        cmd = [py, "-m", "weightcheck", "check", "org/drafter", "--engine", "vllm", "--live"]
        p = subprocess.run(
            [*cmd, "--format", "json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(ROOT),
            timeout=TIMEOUT,
        )
        served = hub.bytes_by_file[("org/drafter", "model.safetensors")]
    assert p.stdout.strip(), p.stderr[-3000:]
    rep = json.loads(p.stdout)
    assert rep["source"]["kind"] == "hub"
    assert_agrees(rep)
    assert rep["live"]["fails"] is None
    assert "loaded" in fates(rep).values()
    assert served <= 100_001 < size  # one ranged read of the header, not the file


# --- MLA drafters (Eagle3DeepseekV2ForCausalLM) -------------------------------------------------

MLA_FIXTURES = ["mla-modelopt", "mla-torchspec"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fixture", MLA_FIXTURES)
def test_mla_drafters_live_agree_with_the_replay(engine, fixture, overlay):
    """The engine's MLA class is built and loads every parameter; SGLang's concatenated q_a/kv_a
    write is the two checkpoint tensors' (shards 0 and 1, as the replay names them), and vLLM's
    MLA attention aliases (self_attn.mla_attn.*) are not parameters of their own."""
    code, rep, err = live(engine, PRODUCERS / fixture, overlay)
    assert code == 0, err[-2000:]
    assert_agrees(rep)
    lv = rep["live"]
    assert lv["fails"] is None and "Deepseek" in lv["architecture"]
    names = {p["param"] for p in lv["parameters"]}
    assert not any("mla_attn" in n for n in names)
    fused = (
        "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
        if engine == "sglang"
        else "model.layers.0.self_attn.fused_qkv_a_proj.weight"
    )
    assert {f"{fused}[0]", f"{fused}[1]"} <= names
    assert params(rep)[f"{fused}[0]"]["state"] == params(rep)[f"{fused}[1]"]["state"] == "loaded"


@pytest.mark.parametrize("engine", ENGINES)
def test_mla_lone_half(engine, tmp_path, overlay):
    """kv_a_proj_with_mqa missing: SGLang never concatenates, the lone q_a_proj writes nothing
    and says nothing; vLLM loads it into shard 0 (the replay says the same, asserted by the
    report's comparison)."""
    src = PRODUCERS / "mla-torchspec"
    kv = "midlayer.self_attn.kv_a_proj_with_mqa.weight"
    q = "midlayer.self_attn.q_a_proj.weight"
    out = variant(src, tmp_path / "lone", drop=[kv])
    code, rep, err = live(engine, out, overlay)
    assert code == 1, err[-2000:]
    assert_agrees(rep)
    assert fates(rep)[q] == ("dropped" if engine == "sglang" else "loaded")
