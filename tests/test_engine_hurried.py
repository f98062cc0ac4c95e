"""The hurried user's drafters (tests/helpers/hurried.py) through the engines' own loaders: what
SGLang 0.5.23 and vLLM 0.32.0 do with each is what ``check --engine E --target target-llama``
must say (docs/differential.md: the same comparison as the corpus's).

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_engine_hurried.py``. One oracle subprocess per engine
(tests/engine/sglang_oracle.py, vllm_oracle.py, in the side venvs) loads every drafter; an
engine whose interpreter is absent has its tests skipped, with the reason. About a minute here.
"""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT
from helpers import hurried
from helpers.engine import read_oracle_records, side_python

pytestmark = pytest.mark.engine

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import differential  # noqa: E402

ENGINES = ("sglang", "vllm")


def _drafters(root) -> dict[str, str]:
    out = {k: str(p) for k, p in hurried.all_of(root / "hurried").items()}
    for kind in hurried.ROPE_SCALING:  # a short draft context with the target's scaling copied in
        out[f"rope-{kind}"] = str(hurried.rope_scaled(root / "rope" / kind, kind))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """engine -> (drafter id -> (oracle record, the replay's JSON)); an engine without its side
    venv is absent (its tests skip)."""
    root = tmp_path_factory.mktemp("hurried-oracles")
    paths = _drafters(root)
    procs = {}
    for e in ENGINES:
        if differential.have_engine(e):
            jsonl = str(root / f"{e}.jsonl")
            procs[e] = (differential.start_oracle(e, list(paths.values()), jsonl, str(root)), jsonl)
    out = {}
    for e, (proc, jsonl) in procs.items():
        recs = read_oracle_records(e, proc, jsonl, len(paths), "drafter", 1200)
        out[e] = {k: (recs[p], differential.replay(p, e)) for k, p in paths.items()}
    return out


@pytest.fixture(params=ENGINES)
def engine(request, runs):
    if request.param not in runs:
        side_python(request.param)  # skips, naming what to run
    return request.param


# (engine, drafter) -> why the replay and the oracle still differ there: open, named, and the test
# fails when one is fixed (remove it here) as much as when another appears
OPEN: dict = {}
# closed (docs/differential.md R22): intermediate-0 in SGLang (the oracle's own row diff reshaped
# a 0-element tensor and raised; SGLang starts) and in vLLM (a 0-element parameter its weight
# loader was called for is loaded, as vLLM counts it: the oracles said init); nested-bin in vLLM
# (the oracle now knows the untaggable dict entry it stops on: state_dict, error)


def test_the_replay_says_what_the_engine_does_with_every_hurried_drafter(runs, engine):
    rows = []
    for k, (rec, rep) in runs[engine].items():
        rf = differential.replay_facts(rep, engine, rec.get("runner"))
        ef = differential.engine_facts(rec, engine)
        rows += [r for r in differential.compare(k, engine, rf, ef) if r.category == "disagree"]
    said = "\n".join(f"{r.variant} {r.fact}: {r.replay} / {r.engine_says}" for r in rows)
    assert {r.variant for r in rows} == {d for e, d in OPEN if e == engine}, said


def test_a_gelu_config_fails_at_build(runs, engine):
    rec, rep = runs[engine]["gelu"]
    assert (rec["started"], rec["stage"]) == (False, "build")
    assert "Unsupported activation: gelu" in rec["error"]
    assert rep["engine"]["fails"]["stage"] == "build"


def test_a_short_draft_context_stops_sglang_only(runs, engine):
    rec, rep = runs[engine]["short-context"]
    if engine == "sglang":
        assert (rec["started"], rec["stage"]) == (False, "build")
        assert (
            "context_length (256) is greater than the derived context_length (128)"
            in (rec["error"])
        )
        assert rep["engine"]["fails"]["subject"] == "max_position_embeddings"
    else:  # vLLM caps the draft's own max length and starts
        assert rec["started"] and rep["engine"]["fails"] is None


@pytest.mark.parametrize("kind", sorted(hurried.ROPE_SCALING))
def test_rope_scaling_in_the_draft_context_length(runs, engine, kind):
    """SGLang's get_context_length: x factor for linear, x1 for llama3 and yarn."""
    rec, rep = runs[engine][f"rope-{kind}"]
    assert rec["started"] == (engine == "vllm" or kind == "linear"), rec["error"]
    assert (rep["engine"]["fails"] is None) == rec["started"]


def test_fused_projections_load_whole_in_both_engines(runs, engine):
    """qkv_proj / gate_up_proj under their own names: no stacked sub-name matches them, the fused
    parameter's weight loader splits them (mappings/architectures/llama_eagle3.toml [[fused]])."""
    rec, rep = runs[engine]["fused"]
    assert rec["started"], rec["error"]
    for key in hurried.FUSED:
        assert rec["keys"][key]["fate"] == "loaded"
        param = "model." + key.replace("midlayer.", "layers.0.")
        assert rec["params"][param]["equals_checkpoint"] is True
    codes = {f["code"] for f in rep["findings"]}
    assert not codes & {"WC101", "WC204", "WC205", "WC206"}, codes


def test_a_fused_tensor_of_another_shape(runs, engine):
    """Longer: both engines split its leading rows and start (the values are not the trained
    ones: WC206); shorter: the split runs past its rows and the load stops."""
    rec, rep = runs[engine]["fused-qkv-long"]
    assert rec["started"] and rec["params"]["model.layers.0.self_attn.qkv_proj.weight"][
        "equals_checkpoint"] is False  # fmt: skip
    assert "WC206" in {f["code"] for f in rep["findings"]}
    rec, rep = runs[engine]["fused-qkv-short"]
    assert (rec["started"], rec["stage"]) == (False, "load")
    assert rec["keys"]["midlayer.self_attn.qkv_proj.weight"]["fate"] == "error"
    assert rep["engine"]["starts"] is False


BOTH = {  # a fused tensor beside its parts (tests/helpers/hurried.py both_spellings): WC103's say
    "both-qkv": "info",
    "both-gate-up": "info",
    "both-differ": "error",
    "both-differ-q": "warning",
    "both-differ-v": "warning",
}


@pytest.mark.parametrize("kind", sorted(BOTH))
def test_a_fused_tensor_beside_its_parts(runs, engine, kind):
    """Both engines load every copy into the fused parameter, the fused tensor whole and each
    part into its rows, in load order (names sorted within a file): the oracle's replay of the
    writes in that order equals the parameter, so each part's rows are the copy loaded last (q, k
    from qkv_proj; v from v_proj; gate from gate_up_proj; up from up_proj). WC103 says so with
    the severity of what is served (docs/differential.md R34)."""
    rec, rep = runs[engine][kind]
    assert rec["started"], rec["error"]
    for key, v in rec["keys"].items():
        if "_proj." in key:
            assert v["fate"] == "loaded", (key, v)
    for key in hurried.FUSED:
        param = "model." + key.replace("midlayer.", "layers.0.")
        assert rec["params"][param]["equals_checkpoint"] is True, (param, rec["params"][param])
    if engine == "sglang":  # the writes' order (its --details): the fused tensor between parts
        w = rec["sglang"]["writers"]["model.layers.0.self_attn.qkv_proj.weight"]
        want = ["k_proj", "q_proj", "qkv_proj", "v_proj"] if "gate-up" not in kind else None
        if want:
            assert [k.split(".")[-2] for k in w] == want, w
    sev = {f["severity"] for f in rep["findings"] if f["code"] == "WC103"}
    assert sev == {BOTH[kind]}, rep["findings"]
