"""Fused projections (``qkv_proj.weight``, ``gate_up_proj.weight``: docs/dialects.md "Fused
projections") before a training run: what SpecForge 0.2.0 and speculators 0.9.0 do with them, as
their own code does it (the trainer oracles: docs/differential.md R34; the oracle run itself is
tests/test_trainer_differential.py, marker ``engine``), and the commands weightcheck prints for
them, run as printed.

SpecForge's warm start loads by name and splits nothing: a fused tensor is a name its model lacks
and its parts stay missing, so it raises (WC908, the command ``convert --to sglang``).
speculators' loader drops the fused tensor and starts its parts from their init (WC903, an error:
SRC's trained rows are unused; the command ``convert --to speculators --verifier TARGET``).
"""

from __future__ import annotations

import shlex

import pytest
from conftest import PRODUCERS, run_cli
from helpers import fixcommands, hurried
from helpers.builders import by_code, check, said

from weightcheck.trainers import replay_training

TARGET = PRODUCERS / "target-llama"
SPECFORGE_RUN = fixcommands.TRAINING_CONFIGS["SPECFORGE"]
SPECULATORS_RUN = fixcommands.TRAINING_CONFIGS["SPECULATORS"]
QKV, GATE_UP = hurried.FUSED


def _run(command: str, src, out) -> None:
    """A printed fix command, as the user runs it."""
    subst = {"SRC": str(src), "OUT": str(out), "TARGET": str(TARGET)}
    words = [subst.get(w, w) for w in shlex.split(command)]
    assert words[:2] == ["weightcheck", "convert"], command
    r = run_cli(*words[1:])
    assert r.exit_code == 0, (command, r.stdout, r.stderr)


def _fused_qkv_speculators(out):
    return hurried.fused(out, which=(QKV,), src=hurried.SPECULATORS, prefix="layers.0.")


@pytest.mark.parametrize(
    "kind,fused",
    [("fused", (QKV, GATE_UP)), ("fused-qkv", (QKV,)), ("fused-gate-up", (GATE_UP,))],
)
def test_specforge_raises_on_a_fused_tensor_and_the_printed_command_fixes_it(tmp_path, kind, fused):
    src = hurried.BUILDERS[kind](tmp_path / kind)
    r = replay_training(src, SPECFORGE_RUN, target=TARGET)
    parts = [p for f in fused for p in hurried.FUSED[f]]
    missing = sorted(n for n in r.missing if n != "embed_tokens.weight")  # the target's
    assert r.kind == "fused" and missing == sorted(parts), (r.kind, r.missing)
    assert r.unsplit() == {f: list(hurried.FUSED[f]) for f in fused}
    assert "never splits a fused tensor" in r.raises and "model_loading.py" in r.cite
    code, rep = check(src, "--training-config", SPECFORGE_RUN, "--target", TARGET)
    (f,) = by_code(rep, "WC908")
    assert code == 1 and f["severity"] == "error"
    assert f["fix"] == "weightcheck convert SRC OUT --to sglang --target TARGET"
    # the detail says why: the fused names are not SpecForge's, and it never splits one
    for name in fused:
        assert name in f["detail"]
    assert "never splits a fused tensor" in f["detail"] and f"`{f['fix']}`" in f["detail"]
    assert rep["training"]["trainer"]["unsplit"] == {n: list(hurried.FUSED[n]) for n in fused}
    out = tmp_path / "out"
    _run(f["fix"], src, out)
    code, rep = check(out, "--training-config", SPECFORGE_RUN, "--target", TARGET)
    assert not by_code(rep, "WC908"), rep["findings"]
    done = replay_training(out, SPECFORGE_RUN, target=TARGET)
    assert done.raises is None and done.fraction == 1.0
    assert all(done.params[p] == "src" for p in parts)


@pytest.mark.parametrize(
    "build,fused",
    [
        (hurried.BUILDERS["fused-speculators"], (QKV, GATE_UP)),
        (_fused_qkv_speculators, (QKV,)),
    ],
)
def test_speculators_starts_a_fused_tensors_parts_from_scratch(tmp_path, build, fused):
    """speculators loads SRC, drops the fused tensor, and trains q/k/v (gate/up) from their init:
    an error (WC903's untrained case), with the command that writes the parts split."""
    src = build(tmp_path / "src")
    r = replay_training(src, SPECULATORS_RUN, target=TARGET)
    own = {f: [p.replace("midlayer.", "layers.0.") for p in hurried.FUSED[f]] for f in fused}
    assert r.raises is None and 0 < r.fraction < 1
    assert r.unsplit() == {f.replace("midlayer.", "layers.0."): ps for f, ps in own.items()}
    assert all(r.params[p] == "init" for ps in own.values() for p in ps)
    code, rep = check(src, "--training-config", SPECULATORS_RUN, "--target", TARGET)
    hits = by_code(rep, "WC903")
    assert code == 1 and sorted(f["subject"] for f in hits) == sorted(fused), hits
    command = "weightcheck convert SRC OUT --to speculators --verifier TARGET --target TARGET"
    for f in hits:
        assert f["severity"] == "error" and f["fix"] == command
        assert "never splits it: its parts start from scratch" in f["message"]
        assert "splits no fused tensor" in f["detail"] and f"`{command}`" in f["detail"]
        assert "speculators/model.py" in f["detail"]
    out = tmp_path / "out"
    _run(command, src, out)
    code, rep = check(out, "--training-config", SPECULATORS_RUN, "--target", TARGET)
    assert not by_code(rep, "WC903") and not by_code(rep, "WC908"), rep["findings"]
    done = replay_training(out, SPECULATORS_RUN, target=TARGET)
    assert done.raises is None and done.fraction == 1.0 and done.unsplit() == {}


def test_a_specforge_layout_fused_drafter_for_speculators(tmp_path):
    """speculators raises on the config first (no speculators config); the command it prints
    writes one and the parts split: its replay then loads every parameter from SRC."""
    src = hurried.BUILDERS["fused"](tmp_path / "fused")
    code, rep = check(src, "--training-config", SPECULATORS_RUN, "--target", TARGET)
    (f,) = by_code(rep, "WC908")
    assert "no speculators config" in said(f) and "--to speculators --verifier TARGET" in f["fix"]
    out = tmp_path / "out"
    _run(f["fix"], src, out)
    done = replay_training(out, SPECULATORS_RUN, target=TARGET)
    assert done.raises is None and done.unsplit() == {} and done.fraction == 1.0


def test_a_speculators_layout_fused_drafter_for_specforge(tmp_path):
    """SpecForge cannot hold input_norm (speculators' norm_before_fc) under any name; the fused
    tensors are not named among what has no place: their parts are SpecForge's."""
    src = hurried.BUILDERS["fused-speculators"](tmp_path / "src")
    r = replay_training(src, SPECFORGE_RUN, target=TARGET)
    assert r.raises and r.fix.startswith("its model has no place for input_norm.weight under")
    assert "qkv_proj" not in r.fix and "gate_up_proj" not in r.fix


def test_every_command_printed_for_a_fused_drafter_works(tmp_path):
    """tests/helpers/fixcommands.py over the fused drafters: each trainer's command (and the
    engines') succeeds and the finding it was printed for is gone; the trainers' commands are
    among them."""
    ids = ("fused", "fused-qkv", "fused-gate-up", "fused-speculators")
    ds = [fixcommands.Drafter(k, str(hurried.BUILDERS[k](tmp_path / k)), str(TARGET)) for k in ids]
    printed = {(d.id, code, c) for d in ds for c, (code, *_) in fixcommands.commands(d).items()}
    sf = "weightcheck convert SRC OUT --to sglang --target TARGET"
    sp = "weightcheck convert SRC OUT --to speculators --verifier TARGET --target TARGET"
    for k in ids[:3]:
        assert (k, "WC908", sf) in printed and (k, "WC908", sp) in printed, printed
    assert ("fused-speculators", "WC903", sp) in printed, printed
    bad, n = fixcommands.violations(ds, str(tmp_path / "out"))
    assert n >= 8 and bad == [], bad
