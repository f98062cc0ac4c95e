"""``weightcheck eval`` against SpecForge 0.2.0's own forward and accuracy code (issue #25 proof).

Opt-in group (marker ``engine``): ``python -m pytest -m engine tests/test_eval_specforge.py``.
SpecForge runs in its side venv (``bash tests/engine/setup_specforge_eval_venv.sh``): the
interpreter named by WEIGHTCHECK_SPECFORGE_EVAL_PYTHON, else
``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/specforge-eval/bin/python``; without one the
test is skipped.

The same tiny drafter (SpecForge layout) and the same data (SpecForge's offline layout, written by
examples/make_eval_data.py with every chain step accepted part of the time), float32 on both
sides: SpecForge's ``Eagle3TrainStrategy.forward_loss`` over ``OnlineEagle3Model`` counts its
``acc_k`` (tests/engine/specforge_eval_oracle.py); weightcheck's ``trained_acc`` per step must
equal it within 1e-3, and the counted positions exactly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest
from conftest import CONFIGS, ROOT, run_cli

pytestmark = pytest.mark.engine
torch = pytest.importorskip("torch")

import synth  # noqa: E402

STEPS = 3


def _python() -> str:
    p = os.environ.get("WEIGHTCHECK_SPECFORGE_EVAL_PYTHON")
    if not p:
        venvs = os.environ.get("WEIGHTCHECK_VENVS") or os.path.expanduser(
            "~/.cache/weightcheck/venvs"
        )
        p = os.path.join(venvs, "specforge-eval", "bin", "python")
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        pytest.skip(
            f"no SpecForge eval interpreter: {p} is absent (run `bash "
            "tests/engine/setup_specforge_eval_venv.sh` or set WEIGHTCHECK_SPECFORGE_EVAL_PYTHON)"
        )
    return p


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-specforge")
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    cfg["torch_dtype"] = "float32"
    synth.write_drafter(str(root / "drafter"), cfg, seed=1)
    spec = importlib.util.spec_from_file_location(
        "make_eval_data", ROOT / "examples" / "make_eval_data.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    made = mod.write_eval_example(
        str(root / "drafter"), str(root / "data"), samples=6, seq=48, chain_steps=STEPS
    )
    return {"drafter": str(root / "drafter"), **made}


def _oracle(case, dtype="float32") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TORCH_COMPILE_DISABLE"] = "1"
    p = subprocess.run(
        [
            _python(),
            str(ROOT / "tests" / "engine" / "specforge_eval_oracle.py"),
            case["drafter"],
            case["target"],
            case["specforge"],
            str(STEPS),
            dtype,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_per_step_accuracy_equals_specforges_own(case):
    theirs = _oracle(case)
    r = run_cli(
        "eval",
        case["drafter"],
        "--hidden-states",
        case["specforge"],
        "--target",
        case["target"],
        "--steps",
        STEPS,
        "--dtype",
        "float32",
        "--json",
    )
    assert r.exit_code == 0, r
    ours = r.json["drafters"][0]["steps"]
    print("specforge acc_k", theirs["acc"], "weightcheck", [s["trained_acc"] for s in ours])
    for k in range(STEPS):
        assert ours[k]["trained_valid"] == theirs["denoms"][k], (k, ours[k], theirs)
        assert abs(ours[k]["trained_acc"] - theirs["acc"][k]) <= 1e-3, (k, ours[k], theirs)
    # the data was built so that every step is accepted part of the time: not a 0 == 0 proof
    assert all(a > 0.1 for a in theirs["acc"]), theirs
