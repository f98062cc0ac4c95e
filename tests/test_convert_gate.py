"""convert is gated by check (the served-view issue, item 4; "Why" item 2).

Before a byte is written, the planned output goes through check's rules for each engine that
reads the layout (with --target: against it). What the weights decide convert sets and says so
(draft_vocab_size, num_hidden_layers, tie_word_embeddings); anything else check calls an error
refuses the conversion: exit 1, the findings printed, nothing written. Every output that is
written passes `check --engine` for the engines that read it.

Each case is the same kind of input as the issue's report: the SpecForge fixture with one thing
changed at the byte level (tests/helpers/builders.py).
"""

from __future__ import annotations

import json
import struct

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import fixture_variant
from helpers.convert import ENGINE_OF, check, fixture_target, leftovers

from weightcheck import api
from weightcheck.storage.writer import OutTensor

SRC = PRODUCERS / "specforge-sglang"  # hidden 64, draft vocab 128, vocab 512, own lm_head
LAYOUTS = ("sglang", "vllm", "speculators")


def replace(ts, name, new: OutTensor | None):
    return [(new if t.name == name else t) for t in ts if not (t.name == name and new is None)]


def convert_json(src, out, to, *args):
    r = run_cli("convert", src, out, "--to", to, "--target", fixture_target(), *args, "--json")
    assert r.exit_code in (0, 1), r
    return r.exit_code, r.json


def out_config(out) -> dict:
    cfg = json.loads((out / "config.json").read_text())
    return cfg.get("transformer_layer_config", cfg) | {
        k: v for k, v in cfg.items() if k == "draft_vocab_size"
    }


def engines_pass(out, to):
    """The written output passes check for the engine that reads it, against the target."""
    r = check(out, ENGINE_OF[to], fixture_target())
    assert r["ok"], [f["message"] for f in r["findings"] if f["severity"] == "error"]


# --- what the weights decide, convert sets --------------------------------------------------
FIXES = {
    # name: (config edit, field, value written, words of the reason)
    "wrong-draft-vocab": (
        lambda c: c.update(draft_vocab_size=200),
        "draft_vocab_size",
        128,
        "lm_head.weight has 128 rows",
    ),
    "draft-vocab-absent": (
        lambda c: c.pop("draft_vocab_size"),
        "draft_vocab_size",
        128,
        "has 128 rows",
    ),
    "draft-vocab-null": (
        lambda c: c.update(draft_vocab_size=None),
        "draft_vocab_size",
        128,
        "has 128 rows",
    ),
    "tied-with-own-head": (
        lambda c: c.update(tie_word_embeddings=True),
        "tie_word_embeddings",
        False,
        "SGLang would drop it",
    ),
    "32-layers-declared": (
        lambda c: c.update(num_hidden_layers=32),
        "num_hidden_layers",
        1,
        "one decoder layer is written",
    ),
    "layers-absent": (
        lambda c: c.pop("num_hidden_layers"),
        "num_hidden_layers",
        1,
        "default builds 32",
    ),
}


@pytest.mark.parametrize("to", LAYOUTS)
@pytest.mark.parametrize("case", sorted(FIXES))
def test_what_the_weights_decide_is_set_and_said(tmp_path, case, to):
    edit, field, value, reason = FIXES[case]
    src = fixture_variant(tmp_path, case, edit)
    out = tmp_path / "out"
    code, r = convert_json(src, out, to)
    assert code == 0 and not r["refused"], r["check"]
    assert out_config(out)[field] == value
    lines = [c for c in r["config_changes"] if c.startswith(f"{field}: ")]
    assert len(lines) == 1 and reason in lines[0], r["config_changes"]
    assert r["check"]["ok"] and [e["engine"] for e in r["check"]["engines"]] == [ENGINE_OF[to]]
    engines_pass(out, to)


def test_a_clean_source_changes_nothing_the_weights_decide(tmp_path):
    code, r = convert_json(SRC, tmp_path / "out", "sglang")
    assert code == 0
    assert not [c for c in r["config_changes"] if "from the weights" in c], r["config_changes"]


# --- what convert cannot set right refuses --------------------------------------------------
def _bad_d2t(ts):
    d2t = next(t for t in ts if t.name == "d2t")
    n = d2t.shape[0]
    return replace(
        ts, "d2t", OutTensor("d2t", "I64", d2t.shape, struct.pack(f"<{n}q", *[10**6] * n))
    )


def _fc_2h(ts):
    fc = next(t for t in ts if t.name == "fc.weight")
    h = fc.shape[0]
    return replace(
        ts, "fc.weight", OutTensor("fc.weight", fc.dtype, (h, 2 * h), fc.data[: h * 2 * h * 2])
    )


REFUSALS = {
    # name: (tensor edit, a code of the findings)
    "d2t-out-of-range": (_bad_d2t, "WC306"),
    "lm-head-missing": (lambda ts: replace(ts, "lm_head.weight", None), "WC302"),
    "fc-2h-wide": (_fc_2h, "WC402"),
}


@pytest.mark.parametrize("to", LAYOUTS)
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_an_output_check_rejects_is_refused_and_nothing_written(tmp_path, case, to):
    edit, code_expected = REFUSALS[case]
    src = fixture_variant(tmp_path, case, tensors_edit=edit)
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", to, "--target", fixture_target())
    assert r.exit_code == 1, r
    assert not out.exists() and leftovers(tmp_path) == []
    assert code_expected in r.stdout and "refused" in r.stdout and "nothing written" in r.stdout
    assert "every byte re-read and verified" not in r.stdout
    code, j = convert_json(src, tmp_path / "out2", to)
    assert code == 1 and j["refused"] and j["exit_status"] == 1 and j["check"]["ok"] is False
    assert code_expected in {f["code"] for e in j["check"]["engines"] for f in e["findings"]}
    assert not (tmp_path / "out2").exists()


def test_dry_run_reports_the_gate_and_exits_1_on_errors(tmp_path):
    src = fixture_variant(tmp_path, "bad", tensors_edit=_bad_d2t)
    r = run_cli("convert", src, tmp_path / "out", "--to", "sglang", "--dry-run")
    assert r.exit_code == 1 and "WC306" in r.stdout and "check --engine sglang" in r.stdout
    ok = run_cli("convert", SRC, tmp_path / "out", "--to", "sglang", "--dry-run")
    assert ok.exit_code == 0 and "on the output: passes" in ok.stdout
    assert not (tmp_path / "out").exists()


def test_allow_errors_writes_and_says_what_check_found(tmp_path):
    src = fixture_variant(tmp_path, "bad", tensors_edit=_bad_d2t)
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "sglang", "--allow-errors")
    assert r.exit_code == 0, r
    assert (out / "model.safetensors").exists() and "WC306" in r.stdout
    assert check(out, "sglang")["ok"] is False  # what was written is what the gate saw


def test_missing_head_taken_from_the_target_passes_the_gate(tmp_path):
    src = fixture_variant(
        tmp_path, "nohead", tensors_edit=lambda ts: replace(ts, "lm_head.weight", None)
    )
    out = tmp_path / "out"
    code, r = convert_json(src, out, "sglang", "--lm-head-from", fixture_target())
    assert code == 0 and r["check"]["ok"], r["check"]
    engines_pass(out, "sglang")


def test_the_gate_checks_against_the_target_given(tmp_path):
    """A drafter of another geometry than --target's: refused, naming the target mismatch."""
    from helpers.convert import llama_target

    r = run_cli("convert", SRC, tmp_path / "out", "--to", "sglang", "--target", llama_target())
    assert r.exit_code == 1 and "WC501" in r.stdout
    assert not (tmp_path / "out").exists()


def test_api_result_of_a_refusal(tmp_path):
    src = fixture_variant(tmp_path, "bad", tensors_edit=_bad_d2t)
    res = api.convert(src, tmp_path / "out", to="sglang")
    assert res.refused and res.exit_status == 1 and res.written is None and not res.dry_run
    assert "WC306" in {f.code for f in res.findings}
    assert not (tmp_path / "out").exists()
    skipped = api.convert(src, tmp_path / "out", to="sglang", check=False)
    assert skipped.report["check"] is None and skipped.exit_status == 0


def test_the_planned_drafter_is_what_check_reads_once_written(tmp_path):
    """The gate's drafter (planned, not written) and the written OUT read the same: names,
    dtypes, shapes, config, d2t — so the gate's answer is check's."""
    from weightcheck.commands.convert import gate, plan
    from weightcheck.model.drafter import load_drafter
    from weightcheck.model.target import load_target

    out = tmp_path / "out"
    d = load_drafter(str(SRC))
    t = load_target(str(fixture_target()))
    p = plan(d, "vllm", str(out), max_shard_size=40_000, target=t)
    planned = gate.planned_drafter(p)
    api.convert(SRC, out, to="vllm", max_shard_size=40_000, target=fixture_target())
    written = load_drafter(str(out))
    assert {k: (t.dtype, t.shape, t.file) for k, t in planned.source.tensors.items()} == {
        k: (t.dtype, tuple(t.shape), t.file) for k, t in written.source.tensors.items()
    }
    assert planned.normalized.values == written.normalized.values
    assert len(set(written.source.files)) > 1  # sharded: the file column compared across shards
    from weightcheck.sources.tensors import read_small

    d2t, _ = gate.vocab_maps(p)
    got = read_small(written.source, "d2t")
    assert d2t == list(struct.unpack(f"<{len(got) // 8}q", got))
