"""The generative differential's capture judgement for vLLM (tests/engine/gen_judge.py,
docs/differential.md "The judgement"), on recorded dicts: no side venv.

The vLLM oracle runs on CPU, i.e. vLLM's V1 model runner; weightcheck's verdict follows vLLM's
default runner, V2. So the judge takes V2's capture from the capture oracle
(tests/engine/capture_oracle.py: the runner's own id reading and the target's own forward), and
checks that the capture oracle's V1 answer equals the layers the vLLM oracle itself saw captured.
The capture-oracle dicts below are what it answered for a 4-layer Llama target (vLLM 0.32.0).
"""

from __future__ import annotations

import sys

from conftest import ROOT

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import gen_judge  # noqa: E402

# eagle_config.layer_ids [1, 2, 3] on a 4-layer target: V2 reads them (outputs of layers 0-2),
# V1 does not and takes the target's defaults (2, 2, 1) -> {1, 2} (outputs of layers 0 and 1)
LAYER_IDS = {
    "vllm-V1": {"ids": None, "slots": [0, 1], "error": None, "layers_to_capture": [1, 2]},
    "vllm-V2": {
        "ids": [1, 2, 3],
        "slots": [0, 1, 2],
        "error": None,
        "layers_to_capture": [1, 2, 3],
    },
}
# no ids anywhere: both runners take the target's defaults
NO_IDS = {
    "vllm-V1": {"ids": None, "slots": [0, 1], "error": None, "layers_to_capture": [1, 2]},
    "vllm-V2": {"ids": None, "slots": [0, 1], "error": None, "layers_to_capture": [1, 2]},
}
# a config vLLM's own get_config refuses (the capture oracle's _each: stage config)
BAD = "StrictDataclassFieldValidationError: Validation error for field 'hidden_size'"
REFUSED = {
    "vllm-V1": {"ids": None, "slots": None, "error": BAD, "stage": "config"},
    "vllm-V2": {"ids": None, "slots": None, "error": BAD, "stage": "config"},
}


def record(captured, ids_from="config", co=None, started=True) -> dict:
    """A vLLM oracle record (the fields the judge reads; docs/engine-test.md's schema)."""
    rec = {
        "started": started,
        "stage": None if started else "config",
        "runner": "V1",
        "params": {},
        "keys": {},
        "config": {"captured_layers": captured, "aux_layer_ids_from": ids_from},
    }
    if co is not None:
        rec["capture_oracle"] = co
    return rec


def truth(trained, ids_written=True) -> dict:
    return {
        "trained_layers": trained,
        "ids_written": ids_written,
        "roles": {},
        "trained": [],
        "vd": 512,
    }


def test_the_verdict_follows_v2_from_the_capture_oracle():
    rec = record([0, 1], "default", LAYER_IDS)
    assert gen_judge.runner_capture("vllm", rec) == ([0, 1, 2], False, None)
    # trained on what V2 captures: right, although the CPU oracle (V1) captured two layers
    assert gen_judge.consequences("vllm", rec, truth([0, 1, 2])) == []
    # trained on V1's capture: V2 feeds another number of states
    cons = gen_judge.consequences("vllm", rec, truth([0, 1]))
    assert cons == ["captures [0, 1, 2], 2 states trained: the first forward fails on fc"]


def test_v2_default_ids_are_a_condition_when_the_drafter_names_none():
    rec = record([0, 1], "default", NO_IDS)
    assert gen_judge.runner_capture("vllm", rec) == ([0, 1], True, None)
    assert gen_judge.consequences("vllm", rec, truth([1, 0], ids_written=False)) == []
    # ids written (in a place no runner reads): the defaults are another capture
    cons = gen_judge.consequences("vllm", rec, truth([1, 0], ids_written=True))
    assert cons == ["captures the outputs of layers [0, 1], trained on [1, 0]"]


def test_without_a_capture_oracle_the_record_decides():
    rec = record([0, 1, 2], "config")
    assert gen_judge.runner_capture("vllm", rec) == ([0, 1, 2], False, None)
    # SGLang's oracle runs SGLang's own runner: its record is the capture, whatever is attached
    sg = record([1, 2], "default", LAYER_IDS)
    assert gen_judge.runner_capture("sglang", sg) == ([1, 2], True, None)


def test_v2_failures_are_consequences():
    broken = {**NO_IDS, "vllm-V2": {**NO_IDS["vllm-V2"], "error": "TypeError: x"}}
    got, _, failure = gen_judge.runner_capture("vllm", record([0, 1], "default", broken))
    assert got == [0, 1] and failure == "V2: the target's forward fails: TypeError: x"
    unwritten = {**NO_IDS, "vllm-V2": {"ids": [1, 9], "slots": [0, None], "error": None}}
    _, _, failure = gen_judge.runner_capture("vllm", record([0, 1], "config", unwritten))
    assert failure == "V2: aux slots [0, None] never written (garbage)"
    _, from_default, failure = gen_judge.runner_capture("vllm", record([0], "config", REFUSED))
    assert failure.startswith("V2: fails before the forward: StrictDataclass")
    assert from_default is False
    lost = {"error": "RuntimeError: capture oracle (vllm) failed"}
    assert gen_judge.runner_capture("vllm", record([0, 1], "config", lost)) == (
        None,
        False,
        "capture oracle: RuntimeError: capture oracle (vllm) failed",
    )
    cons = gen_judge.consequences("vllm", record([0, 1], "config", lost), truth([0, 1]))
    assert cons == ["capture oracle: RuntimeError: capture oracle (vllm) failed"]


def test_capture_oracle_v1_must_equal_the_vllm_oracles_capture():
    assert gen_judge.capture_oracle_rows("vllm", record([0, 1], "default", LAYER_IDS)) == []
    assert gen_judge.capture_oracle_rows("vllm", record(None, None, {**NO_IDS})) != []
    rows = gen_judge.capture_oracle_rows("vllm", record([0, 1, 2], "config", LAYER_IDS))
    assert rows == [
        dict(
            kind="oracle",
            fact="captured_layers (V1)",
            replay="capture oracle V1: [0, 1]",
            engine="vLLM oracle: [0, 1, 2]",
        )
    ]
    # nothing captured is null in the vLLM oracle's record and [] in the capture oracle's
    none = {"vllm-V1": {"ids": None, "slots": [], "error": None}, "vllm-V2": NO_IDS["vllm-V2"]}
    assert gen_judge.capture_oracle_rows("vllm", record(None, None, none)) == []


def test_capture_oracle_rows_when_it_could_not_answer():
    rows = gen_judge.capture_oracle_rows("vllm", record([0, 1], "default", REFUSED))
    assert [r["kind"] for r in rows] == ["oracle"] and BAD in rows[0]["replay"]
    lost = gen_judge.capture_oracle_rows("vllm", record([0, 1], "default", {"error": "boom"}))
    assert lost == [dict(kind="oracle", replay="-", engine="capture oracle: boom")]
    # vLLM never started (it refused the config too): nothing to compare
    assert gen_judge.capture_oracle_rows("vllm", record(None, None, REFUSED, False)) == []
    assert gen_judge.capture_oracle_rows("sglang", record([0, 1], "default", REFUSED)) == []


def test_a_gate_that_says_src_is_no_drafter_refuses_training():
    """Stress seed 131, g131-03495: a speculators drafter declared LlamaForCausalLM whose index
    leaves out the file holding fc, lm_head and the norms reads as a target model (WC203, the
    gate's only error); SpecForge raised on the draft weights it lacks, speculators on the
    config. WC203 is the gate's training verdict; WC7xx (serving) is not."""
    raised = {"raises": "ValueError: warm-start checkpoint ... is missing draft weights"}
    loaded = {"raises": None}
    target = {"findings": [{"code": "WC203", "severity": "error", "message": "a target model"}]}
    assert gen_judge.trainer_rows(raised, target) == []
    assert [r["kind"] for r in gen_judge.trainer_rows(loaded, target)] == ["false error"]
    serving = {"findings": [{"code": "WC704", "severity": "error", "message": "init"}]}
    assert [r["kind"] for r in gen_judge.trainer_rows(raised, serving)] == ["false pass"]
    assert gen_judge.trainer_rows(loaded, serving) == []


def test_a_t2d_never_written_loads_or_raises_by_chance():
    """Seed 31, g31-01887 (speculators-train without t2d): speculators takes the verifier's head
    rows at a t2d it never wrote — memory that, in one oracle process, may hold an earlier
    drafter's t2d, so it loaded there and raised alone. The replay's WC908 says so in its detail
    (messages carry what to do, details the evidence): the judge reads both, no false error."""
    detail = "t2d was never set (SRC has none under speculators' own names): load_verifier_..."
    wc908 = {"code": "WC908", "severity": "error", "detail": detail,
             "message": "speculators 0.9.0 raises at init; convert SRC first"}  # fmt: skip
    gate = {"findings": [wc908]}
    never = {"raises": None, "uninitialized": ["t2d", "verifier_lm_head.weight"]}
    assert gen_judge.trainer_rows(never, gate) == []
    written = {"raises": None, "uninitialized": []}  # t2d written and it loads: a false error
    assert [r["kind"] for r in gen_judge.trainer_rows(written, gate)] == ["false error"]
    other = {"findings": [{**wc908, "detail": "another reason"}]}
    assert [r["kind"] for r in gen_judge.trainer_rows(never, other)] == ["false error"]


def test_an_oracle_that_stops_writing_is_killed_not_waited_for(tmp_path):
    """helpers/engine.py read_oracle_records(stall=S): an oracle process that writes no record for
    S seconds (SGLang's CPU loader hung at one drafter of 2,000 on "Multi-thread loading shards
    0/1") is killed and the call raises with what it had (gen_differential starts it again for
    the drafters left), instead of stalling the run for its whole timeout."""
    import signal
    import subprocess

    import pytest
    from helpers.engine import read_oracle_records

    jsonl = tmp_path / "o.jsonl"
    (tmp_path / "o.jsonl.stderr").write_text("")
    jsonl.write_text('{"id": 0}\n{"id": 1}\n')  # two records, then nothing more: it hangs
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with pytest.raises(RuntimeError, match="2/3 records"):
        read_oracle_records("fake", proc, str(jsonl), 3, "id", timeout=3000, stall=1)
    assert proc.returncode == -signal.SIGKILL  # killed for the stall, not left to end its sleep
