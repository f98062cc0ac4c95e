"""Aux capture per target family and runner, proven by the engines' own code (issue #31 Why 3).

tests/engine/capture_oracle.py runs, in each engine's side venv, the runner code that reads the
aux ids from the draft config (SGLang's one runner; vLLM's V1 and V2) and the target family's own
forward loop (Llama; DeepSeek-V3 / Kimi-K2), with the decoder layers replaced by tagging stubs,
and reports which layer's output fills each aux slot, or the exception the forward raises. The
replay (weightcheck/engines/view.py aux_layers: where each runner reads; weightcheck/engines/
aux.py target_forward: what the family's forward does) must say the same for every case of a
grid: three families, five layer counts, ids at the layer-count boundaries, unsorted, repeated,
negative and absent, written in eagle_config, at the top level, or both.

Marker ``engine`` (side venvs; deselected by default):
``python -m pytest -m engine tests/test_engine_capture.py``.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import PRODUCERS, ROOT

from weightcheck.engines import aux
from weightcheck.engines.data import load, newest
from weightcheck.engines.view import aux_layers

pytestmark = pytest.mark.engine

sys.path.insert(0, str(ROOT / "tests" / "engine"))
import capture_oracle  # noqa: E402

BASE = json.loads((PRODUCERS / "specforge-sglang" / "config.json").read_text())
FAMILIES = ["llama", "deepseek_v3", "kimi_k2"]
LAYERS = [4, 8, 32, 61, 62]


def _id_sets(L: int) -> list:
    return [
        [0, 1, 2],
        [1, 2, 3],
        [2, L // 2, L - 3],  # the engines' defaults, written
        [1, L // 2, L - 1],  # the last layer's input (SGLang's convention of its output)
        [2, L // 2, L],  # ends at the layer count: the last layer's output
        [1, L // 2 - 1, L - 4],  # a first id of 1 (SGLang's DeepSeek shift)
        [L - 3, 2, L // 2],  # unsorted
        [1, 1, 2],  # a repeat
        [-1, 1, 2],  # negative
        [0, L // 2, L],
    ]


def _config(ids, where: str) -> dict:
    cfg = json.loads(json.dumps(BASE))
    cfg["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        return cfg
    if where in ("eagle_config", "both"):
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    if where in ("top", "both"):
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    if where == "both-differ":  # two lists: which one each runner reads
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
        cfg["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in ids]
    return cfg


def cases() -> list:
    out = []
    for fam in FAMILIES:
        for L in LAYERS:
            out.append({"family": fam, "num_layers": L, "config": _config(None, "")})
            for ids in _id_sets(L):
                for where in ("eagle_config", "top", "both", "both-differ"):
                    out.append({"family": fam, "num_layers": L, "config": _config(ids, where)})
    return out


def replay(case: dict) -> dict:
    """The replay's answer for a case, per engine and runner, in the oracle's terms."""
    out = {}
    for engine in ("sglang", "vllm"):
        v = aux_layers(load(engine), case["config"], None, engine)
        for r in v["runners"]:
            key = engine if engine == "sglang" else f"vllm-{r['name']}"
            f = aux.target_forward(
                r["ids"], engine, newest(load(engine)), case["family"], case["num_layers"]
            )
            out[key] = {"ids": r["ids"], "slots": f["slots"], "raises": f["raises"] is not None}
    return out


@pytest.fixture(scope="module")
def answers():
    from helpers.engine import side_python

    for engine in ("sglang", "vllm"):
        side_python(engine)  # skips, naming the venv, when one is absent
    cs = cases()
    return cs, capture_oracle.run(cs)


def test_the_replay_captures_what_the_engines_forward_captures(answers):
    cs, got = answers
    assert len(cs) > 500
    wrong = []
    for case, oracle in zip(cs, got):
        want = replay(case)
        assert set(oracle) == {"sglang", "vllm-V1", "vllm-V2"}, oracle
        for key, o in oracle.items():
            assert o.get("stage") != "config", (case, key, o)  # the config itself is read
            w = want[key]
            ids = list(o["ids"]) if o["ids"] is not None else None
            said = (ids, o["error"] is not None)
            if o["slots"] is not None:  # a forward that raised may not have filled any
                said += ([s for s in o["slots"] if s is not None],)
            if said != (w["ids"], w["raises"], w["slots"])[: len(said)]:
                ids_ = aux.written_ids(case["config"])
                wrong.append((case["family"], case["num_layers"], key, ids_, o, w))
    kinds = sorted({(f, k, str(o["error"])[:40]) for f, _, k, _, o, _ in wrong})
    assert not wrong, f"{len(wrong)} disagreement(s) {kinds}; first: {wrong[0]}"


def test_the_issue_cases(answers):
    """The cases issue #31 names, as the engines' own code answers them."""
    cs, got = answers
    by = {
        (c["family"], c["num_layers"], json.dumps(c["config"], sort_keys=True)): g
        for c, g in zip(cs, got)
    }

    def at(fam, L, ids, where):
        return by[(fam, L, json.dumps(_config(ids, where), sort_keys=True))]

    # SpecForge ids in eagle_config, a 32-layer Llama target: V1 reads them (outputs 0, 14, 27),
    # V2 reads none and takes the target's default (2, 16, 29): outputs 1, 15, 28 = the trained
    a = at("llama", 32, [2, 16, 29], "eagle_config")
    assert a["vllm-V1"]["slots"] == [1, 15, 28] and a["vllm-V1"]["ids"] == [2, 16, 29]
    assert a["vllm-V2"]["ids"] is None and a["vllm-V2"]["slots"] == [1, 15, 28]
    assert at("llama", 32, [1, 15, 28], "eagle_config")["vllm-V1"]["slots"] == [0, 14, 27]
    # ids ending at 61 for a 61-layer Kimi-K2 target in SGLang: the DeepSeek forward captures at
    # layer entry only, id 61 never; the packed buffer keeps a slot unwritten and its finalize
    # raises (0.5.23) — not a silent pass
    k = at("kimi_k2", 61, [2, 30, 61], "eagle_config")["sglang"]
    assert k["slots"] == [1, 29, None] and "captured 2 of 3" in k["error"]
    # vLLM's DeepSeek forward raises on id 0 (the residual is None before layer 0)
    z = at("kimi_k2", 61, [0, 30, 61], "top")
    assert "TypeError" in z["vllm-V2"]["error"] and "TypeError" in z["vllm-V1"]["error"]
    # the same ids on a Llama target: vLLM captures the embedding and the last layer's output
    assert at("llama", 61, [0, 30, 61], "top")["vllm-V2"]["slots"] == [-1, 29, 60]


def test_the_oracle_interface_for_the_generative_differential(answers):
    """run(cases) -> per case {"sglang", "vllm-V1", "vllm-V2"} -> {ids, slots, error}: what
    tests/engine/generate.py calls per drafter."""
    cs, got = answers
    assert len(got) == len(cs)
    for g in got:
        for r in g.values():
            assert set(r) >= {"ids", "slots", "error"}
