"""The generative judge counts vLLM's start-up draft forward (tests/engine/vllm_oracle.py runs the
drafter's dummy_run after the load, as vLLM's GPU worker does while profiling memory): a drafter
whose every weight loads but whose first draft forward raises is not served right."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "engine"))
import gen_judge  # noqa: E402

# the minimized fixture of a speculators config with rms_norm_eps "1e-05": its truth, and the vLLM
# oracle's record of it (every weight loaded, the right layers captured)
CASE = json.loads(
    (
        ROOT / "tests/fixtures/generated/vllm-speculators-value-types-verdict/outcome.json"
    ).read_text()
)
TRUTH = CASE["truth"]


def _rec(**extra) -> dict:
    keys = {k: {"fate": v.split(":")[0]} for k, v in CASE["recorded"]["facts"]["keys"].items()}
    cfg = {"captured_layers": CASE["recorded"]["facts"]["captured_layers"]}
    return {"started": True, "params": {}, "keys": keys, "config": cfg, **extra}


def test_a_failing_draft_forward_is_a_consequence():
    err = (
        "RuntimeError: vllm_ir::rms_norm() Expected a value of type 'float' for argument 'epsilon'"
    )
    cons = gen_judge.consequences("vllm", _rec(draft_forward_error=err), TRUTH)
    assert any(c.startswith("the draft's first forward fails: RuntimeError") for c in cons), cons
    assert not gen_judge.conditional(cons)  # a crash, never a condition


def test_a_draft_forward_that_runs_adds_nothing():
    cons = gen_judge.consequences("vllm", _rec(draft_forward_error=None), TRUTH)
    assert not [c for c in cons if "draft's first forward" in c], cons
