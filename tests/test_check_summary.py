"""Issue #31, item 4: the summary tells the truth. Plain check passes when some engine serves the
drafter (the union policy, docs/consistency.md): its last line then names each engine's verdict
and the ``--engine`` that gates on the failing one, and never says the drafter checks out while
an engine's own run finds an error — with ``--target`` too, where an engine captures other layers
than the drafter was trained on. The exit status follows the policy; each engine's line is that
engine's own run."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import PRODUCERS, ROOT, run_cli
from helpers.builders import target_copy
from helpers.text import unwrapped

from weightcheck import api
from weightcheck.commands.check import ALL_CLEAR

sys.path.insert(0, str(ROOT / "tests" / "engine"))
import corpus  # noqa: E402

TARGET = corpus.TARGET
# sglang refuses a Llama target class in architectures (WC401, WC701); vLLM serves it
SGLANG_FAILS = "sf.x.llama"
# vLLM does not strip the wrapper prefix of an embedding SGLang's loader renames (WC104)
VLLM_FAILS = "sh.wrap.embed"
SAMPLE = sorted(x.id for x in corpus.variants())[::12] + [SGLANG_FAILS, VLLM_FAILS, "mo.asis"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    return corpus.build(str(tmp_path_factory.mktemp("summary")), only=set(SAMPLE))


def test_one_engine_failing_is_named_and_gated_on(built):
    r = api.check(built[VLLM_FAILS])
    assert r.ok and r.exit_status == 0  # sglang serves it: the union policy passes it
    assert not r.engines["vllm"].serves and r.engines["sglang"].serves
    assert r.conclusion.startswith("serves in sglang 0.5.23; fails in vllm 0.33.0 (WC104")
    assert r.conclusion.endswith(" — use --engine vllm to gate on it")
    assert "check out" not in r.conclusion
    assert api.check(built[VLLM_FAILS], engine="vllm").exit_status == 1  # the gate it names
    for fmt in ("text", "markdown", "concise", "github"):
        out = run_cli("check", built[VLLM_FAILS], "--format", fmt)
        assert out.exit_code == 0 and r.conclusion in unwrapped(out.stdout), fmt
    r = api.check(built[SGLANG_FAILS])
    assert r.ok and r.conclusion.startswith("fails in sglang 0.5.23 (WC401, WC701); serves in")


def test_with_the_target_a_wrong_capture_is_named(built, tmp_path):
    """ModelOpt's ids, only in eagle_config: vLLM's default (V2) runner reads none there and
    captures the target's default layers, other layers than trained (WC708) once the target is
    known; plain check names it, never 'check out'. An 8-layer target: on the 4-layer one the
    default ids [2, 2, 1] collapse and the first forward fails (WC712, another finding)."""
    plain = api.check(built["mo.asis"])
    assert plain.conclusion == ALL_CLEAR and plain.engines["vllm"].serves
    r = api.check(built["mo.asis"], target=str(target_copy(tmp_path / "t8", num_hidden_layers=8)))
    assert not r.engines["vllm"].serves and "WC708" in r.engines["vllm"].findings.codes
    assert "fails in vllm 0.33.0 (WC708" in r.conclusion and "check out" not in r.conclusion
    assert r.conclusion.endswith("use --engine vllm to gate on it")


def test_every_engine_failing_is_exit_1():
    r = api.check(PRODUCERS / "target-llama")  # a target model: no engine serves it
    assert not r.ok and r.exit_status == 1
    assert "check out" not in r.conclusion and r.conclusion.startswith("1 error(s)")


@pytest.mark.parametrize("target", [None, TARGET], ids=["plain", "target"])
def test_the_summary_and_the_exit_status_follow_each_engines_own_run(built, target):
    """Over a sample of the corpus: each engine line is its own run's verdict; the conclusion
    says 'check out' only when every engine serves and nothing is an error; where some engine
    serves and another fails it names both and the gate; the exit status is the union policy's
    (0 unless some finding is an error)."""
    for vid in SAMPLE:
        r = api.check(built[vid], **({"target": target} if target else {}))
        lines = r.engines or {}
        for e, line in lines.items():
            own = api.check(built[vid], engine=e, **({"target": target} if target else {}))
            assert line.serves == own.ok, (vid, e)
        failing = [e for e, line in lines.items() if not line.serves]
        assert (r.conclusion == ALL_CLEAR) == (not failing and r.summary.errors == 0), vid
        if failing and len(failing) < len(lines):
            for e in lines:
                said = "fails" if e in failing else "serves"
                assert f"{said} in {e} {lines[e].version}" in r.conclusion, (vid, r.conclusion)
            assert "use --engine " + failing[0] in r.conclusion
        assert r.exit_status == (1 if r.summary.errors else 0) == (0 if r.ok else 1), vid
        assert os.path.isdir(built[vid])
