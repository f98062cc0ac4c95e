"""The open disagreement classes of the generative differential: disagreements between the
engines' (or trainers') own code and weightcheck that another branch is fixing. They are data,
tests/fixtures/generated/open.json (machine-readable: the lead hands each class on with its
minimized fixture); this module matches a row of tests/engine/gen_differential.py against them.

A class has ``id``, ``owner`` (the branch that fixes it), ``what``, ``sides`` (engines/trainers),
``kind`` (``false error``, ``false pass``, ``fact``), ``fixture`` and one of:

* ``replay_errors``: ``[{"code": "WC101", "subject": REGEX, "message": REGEX}, ...]`` — a false
  error is explained
  when every error finding of the replay matches a pattern of some open class of that side;
* ``engine``: REGEX — a false pass is explained when every consequence matches some open class;
* ``refusal``: REGEX — a false error where ``check`` refuses the input (exit 2);
* ``fact`` / ``fact_replay`` / ``fact_engine``: REGEXes over a fact row.

When a class is fixed, its entry goes (the fixture stays: the default suite then asserts that the
replay matches the engine on it).
"""

from __future__ import annotations

import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
OPEN = os.path.join(os.path.dirname(HERE), "fixtures", "generated", "open.json")


def classes() -> list[dict]:
    if not os.path.exists(OPEN):
        return []
    with open(OPEN) as f:
        return json.load(f)["classes"]


def _errors(j: dict) -> list[dict]:
    return [f for f in j.get("findings", []) if f.get("severity") == "error"]


def _hit(pattern: str | None, text) -> bool:
    return pattern is None or re.search(pattern, str(text or "")) is not None


def explain(row, j: dict, rec: dict, ignore: frozenset = frozenset(), only=None) -> list[str]:
    """The open classes that explain ``row`` (a GRow), or [] when it is a disagreement; errors of
    the codes in ``ignore`` (gen_judge.undecidable), or not matching the regex ``only`` (a
    trainer's row: the training gate's own codes), need no class."""
    cs = [c for c in classes() if row.side in c["sides"]]
    if row.kind.startswith("fact"):
        return [
            c["id"]
            for c in cs
            if c["kind"] == "fact"
            and c.get("fact")
            and _hit(c["fact"], row.fact)
            and _hit(c.get("fact_replay"), row.replay)
            and _hit(c.get("fact_engine"), row.engine)
        ]
    cs = [c for c in cs if c["kind"] == row.kind]
    if row.kind == "false error" and row.replay.startswith("check exits"):
        return [c["id"] for c in cs if c.get("refusal") and _hit(c["refusal"], row.replay)]
    if row.kind == "false error":
        used = set()
        for f in _errors(j):
            if f["code"] in ignore or (only is not None and not only.match(f["code"])):
                continue
            m = [
                c["id"]
                for c in cs
                for p in c.get("replay_errors", ())
                if f["code"] == p["code"]
                and _hit(p.get("subject"), f.get("subject"))
                and _hit(p.get("message"), f.get("message"))
            ]
            if not m:
                return []
            used.update(m)
        return sorted(used)
    if row.kind == "false pass":
        used = set()
        for cons in row.engine.split(" | "):
            m = [c["id"] for c in cs if c.get("engine") and _hit(c["engine"], cons)]
            if not m:
                return []
            used.update(m)
        return sorted(used)
    return []
