"""The minimized drafters of the generative differential (tests/fixtures/generated/<id>/, written
by tests/engine/minimize.py; docs/differential.md "The generative differential"), in the default
suite: no side venv, the engine's or trainer's outcome is the one recorded in ``outcome.json``
when the fixture was minimized.

For each fixture, weightcheck's replay now must match that outcome: for an engine, ``check
--engine E --target target-llama`` has an error finding iff the engine crashed, refused, left a
parameter at init or fed other values than trained (the recorded consequences), and its facts
(tests/engine/differential.py) equal the recorded engine facts; for a trainer, the training gate
has an error of its own iff the trainer raised, and the parameters' origins agree. A fixture whose
remaining rows are all explained by an open class of tests/fixtures/generated/open.json (a class
another branch is fixing) is an expected failure naming the class; once fixed it passes, and
``test_open_classes_are_still_open`` asks for the class's entry to go.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import differential  # noqa: E402
import gen_differential as gd  # noqa: E402
import gen_judge  # noqa: E402
import gen_open  # noqa: E402
import generate  # noqa: E402
import minimize  # noqa: E402
import trainer_differential as tdiff  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "generated"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "outcome.json").is_file())


def outcome(case: str) -> dict:
    with open(FIXTURES / case / "outcome.json") as f:
        return json.load(f)


def build(case: str, root) -> str:
    """The fixture's drafter, built from its spec by tests/engine/generate.py; its files must be
    the ones recorded (a generator that builds something else needs the fixture recorded again:
    tests/engine/minimize.py)."""
    o = outcome(case)
    folder = generate.write(generate.build(o["spec"]), str(root))
    assert minimize._digests(folder) == o["files"], (
        f"{case}: tests/engine/generate.py no longer builds the drafter this fixture recorded"
    )
    return folder


def rows(case: str, root) -> list:
    """The rows of tests/engine/gen_differential.py for the fixture, against its recorded side."""
    o = outcome(case)
    side, rec = o["side"], o["recorded"]
    path = build(case, root)
    if side in gd.ENGINES:
        j = differential.replay(path, side)
        found = gen_judge.verdict_from(rec["consequences"], j, gen_judge.undecidable(o["truth"]))
        # the facts are the oracle's runner's (vLLM on CPU: V1), the verdict the default one's
        runner = {"runner": rec.get("runner", "V1" if side == "vllm" else None)}
        found += gen_judge.fact_rows(case, side, runner, j, ef=rec["facts"])
    else:
        j = gd.gate(path, side)
        trainer = {"raises": rec["raises"], "params": rec["params"] or {}}
        trainer.update(fraction=rec["fraction"] or 0.0, by_chance=rec.get("by_chance"))
        found = gen_judge.trainer_rows(trainer, j)
        if not found and not rec["raises"]:
            c = tdiff.Case(
                f"{side}/{case}", side, path, tdiff.TRAINING_CONFIG[side], gd.corpus.TARGET
            )
            for r in tdiff.compare(c, tdiff.replay(c), trainer):
                found.append(
                    dict(kind="fact disagree", fact=r.fact, replay=r.replay, engine=r.trainer)
                )
    out = [gd.GRow(case, side, **r) for r in found]
    for r in out:
        only = gen_judge.TRAINING_CODES if side in gd.TRAINERS else None
        r.open = gen_open.explain(r, j, None, gen_judge.undecidable(o["truth"]), only)
    return out


def test_there_are_fixtures():
    assert CASES, f"no fixture under {FIXTURES}"
    for case in CASES:
        o = outcome(case)
        assert o["side"] in gd.ENGINES + gd.TRAINERS, case
        assert isinstance(o["spec"]["devs"], list) and o["files"] and o["recorded"], case


@pytest.mark.parametrize("case", CASES)
def test_replay_matches_the_recorded_outcome(case, tmp_path_factory):
    found = rows(case, tmp_path_factory.mktemp("gen"))
    bad = [r for r in found if not r.open]
    assert not bad, "\n" + gd.table(bad)
    if found:
        classes = sorted({c for r in found for c in r.open})
        pytest.xfail(f"open class {', '.join(classes)} (tests/fixtures/generated/open.json)")


def test_open_classes_are_still_open(tmp_path_factory):
    """Each open class names its fixture, and the fixture still shows it (when the branch that
    fixes it has landed, the class's entry goes from open.json)."""
    for c in gen_open.classes():
        for key in ("id", "owner", "what", "sides", "kind", "fixture"):
            assert c.get(key), (c.get("id"), key)
        case = c["fixture"].rstrip("/").rsplit("/", 1)[-1]
        assert case in CASES, (c["id"], c["fixture"])
        shown = {k for r in rows(case, tmp_path_factory.mktemp("gen")) for k in r.open}
        assert c["id"] in shown, f"{c['id']} no longer shows on {case}: remove it from open.json"
