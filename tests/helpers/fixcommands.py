"""Every printed fix command, run as printed (issue #31, Why 4 / What 5).

A finding that suggests a command carries it in ``fix`` and may show it in its message or detail
(``weightcheck convert SRC OUT ...``, SRC, OUT, TARGET and MAP standing for the user's paths).
:func:`violations` runs every such command over a list of drafters as a user would — the words
substituted, nothing else changed — and returns what breaks the promise, ``[]`` when it holds:

* the command succeeds (exit 0) and ``check OUT`` with the same options no longer gives the
  finding's code; or
* it fails for another reason than the one it fixes: a refusal (exit 1) whose findings do not
  include the fixed code, or a refusal before the gate (exit 2) that does not name the fixed code's
  own fact (its message is not the finding's).

A command that refuses with the code it was printed to fix loops: the user runs it, reads the same
finding, and runs it again. The drafters are anything with a folder: the producer fixtures, the
differential corpus (tests/engine/corpus.py), synth.py's drafters, the generated drafters of
tests/engine/generate.py (fed to :func:`violations` as a list).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from conftest import run_cli

from weightcheck import api
from weightcheck.errors import WeightcheckError

# the options a fix is printed under: plain check, with the target, with each engine
OPTIONS = ((), ("--target", "TARGET"), ("--engine", "sglang"), ("--engine", "vllm"))
_COMMAND = re.compile(r"`(weightcheck [^`]+)`")


@dataclass(frozen=True)
class Drafter:
    """One drafter the fix commands are run on: its folder, the target it is for, a short id."""

    id: str
    path: str
    target: str


def flat(findings):
    for f in findings:
        yield f
        yield from flat(f.get("consequences", []))


def printed(finding: dict) -> list[str]:
    """The commands a finding prints: its ``fix`` and every backticked ``weightcheck ...`` of its
    message and detail."""
    out = [finding["fix"]] if (finding.get("fix") or "").startswith("weightcheck ") else []
    for text in (finding.get("message") or "", finding.get("detail") or ""):
        out += [c for c in _COMMAND.findall(text) if c not in out]
    return out


def _words(command: str, subst: dict) -> list[str]:
    return [subst.get(w, w) for w in shlex.split(command)]


def _check(path: str, options: tuple, target: str) -> dict | None:
    kw = {}
    if "--target" in options:
        kw["target"] = target
    if "--engine" in options:
        kw["engine"] = options[options.index("--engine") + 1]
    try:
        return api.check(path, **kw).report
    except WeightcheckError:
        return None


def commands(d: Drafter) -> dict[str, tuple[str, tuple]]:
    """command -> (the code it is printed for, the options of the check that printed it)."""
    out: dict[str, tuple[str, tuple]] = {}
    for options in OPTIONS:
        rep = _check(d.path, options, d.target)
        if rep is None:
            continue
        for f in flat(rep["findings"]):
            for c in printed(f):
                out.setdefault(c, (f["code"], options))
    return out


def run_one(d: Drafter, command: str, code: str, options: tuple, out: str) -> str | None:
    """Run one printed command on ``d``; a violation line, or None when the promise holds."""
    subst = {"SRC": d.path, "OUT": out, "TARGET": d.target}
    words = _words(command, subst)
    if words[:2] != ["weightcheck", "convert"] or "OUT" not in shlex.split(command):
        return f"{d.id}: {code} prints {command!r}: not a convert SRC OUT command"
    done = run_cli(*words[1:], "--json")
    where = f"{d.id}: {code} prints `{command}`"
    if done.exit_code == 0:
        rep = _check(out, options, d.target)
        if rep is None:
            return f"{where}: it succeeds, and check cannot read what it wrote"
        again = {f["code"] for f in flat(rep["findings"])}
        if code in again:
            return f"{where}: it succeeds, and check OUT still gives {code}"
        return None
    if done.exit_code == 1:
        gate = done.json.get("check") or {}
        said = {f["code"] for e in gate.get("engines", []) for f in flat(e["findings"])}
        said = {c for c in said}
        if code in said:
            return f"{where}: it refuses with the same {code} (the advice loops)"
        return None
    return f"{where}: exit {done.exit_code}: {done.stderr.strip()[:300]}"


def violations(drafters, tmp: str) -> tuple[list[str], int]:
    """Every printed fix command of every drafter, run as printed: (violations, commands run)."""
    bad, n = [], 0
    for d in drafters:
        for i, (command, (code, options)) in enumerate(sorted(commands(d).items())):
            out = os.path.join(tmp, f"{d.id}-fix{i}")
            n += 1
            v = run_one(d, command, code, options, out)
            if v is not None:
                bad.append(v)
    return bad, n
