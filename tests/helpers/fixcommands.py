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

from conftest import PRODUCERS, run_cli

from weightcheck import api
from weightcheck.errors import WeightcheckError

# the options a fix is printed under: plain check, with the target, with each engine, and the
# pre-training gate against a SpecForge run and a speculators run (each trainer's refusals, and
# what it leaves at init, print commands too)
OPTIONS = (
    (),
    ("--target", "TARGET"),
    ("--engine", "sglang"),
    ("--engine", "vllm"),
    ("--training-config", "SPECFORGE"),
    ("--training-config", "SPECULATORS"),
)
TRAINING_CONFIGS = {
    "SPECFORGE": str(PRODUCERS / "specforge-sglang" / "config.json"),
    "SPECULATORS": str(PRODUCERS / "speculators-train" / "config.json"),
}
_COMMAND = re.compile(r"`(weightcheck convert [^`]+)`")


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


def flat_with_roots(findings, roots: tuple = ()):
    """(finding, the codes of the roots it is listed under, outermost first) of every finding."""
    for f in findings:
        yield f, roots
        yield from flat_with_roots(f.get("consequences", []), (*roots, f["code"]))


def printed(finding: dict) -> list[str]:
    """The fix commands a finding prints: its ``fix`` and every backticked ``weightcheck
    convert ...`` of its message and detail (``weightcheck inspect``/``compare`` it may name are
    for looking, not fixing)."""
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
    if "--training-config" in options:
        kw["training_config"] = TRAINING_CONFIGS[options[options.index("--training-config") + 1]]
    if "--engine" in options:
        kw["engine"] = options[options.index("--engine") + 1]
    try:
        return api.check(path, **kw).report
    except WeightcheckError:
        return None


def commands(d: Drafter) -> dict[str, tuple[str, tuple, str, tuple]]:
    """command -> (the code it is printed for, the options of the check that printed it, what
    that finding says, the codes of the roots that finding is listed under)."""
    out: dict[str, tuple[str, tuple, str, tuple]] = {}
    for options in OPTIONS:
        rep = _check(d.path, options, d.target)
        if rep is None:
            continue
        for f, roots in flat_with_roots(rep["findings"]):
            for c in printed(f):
                out.setdefault(c, (f["code"], options, _said(f), roots))
    return out


def _said(f: dict) -> str:
    return f["message"] + "\n" + (f.get("detail") or "")


def run_one(
    d: Drafter, command: str, code: str, options: tuple, out: str, said: str = "", roots=()
) -> str | None:
    """Run one printed command on ``d`` (printed for a finding of ``code`` that says ``said``,
    listed under the findings of ``roots``); a violation line, or None when the promise holds: it
    succeeds and check OUT no longer says that finding (another finding of the code, a different
    fact, may remain), or it is refused for another fact than its code's and its roots' (a
    command refused for the very cause its finding is listed under can never work either)."""
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
        again = [f for f in flat(rep["findings"]) if f["code"] == code]
        if any(_said(f) == said for f in again):
            return f"{where}: it succeeds, and check OUT still gives the same {code}"
        return None
    if done.exit_code == 1:  # the gate refuses: the errors it refuses with are its reasons
        gate = done.json.get("check") or {}
        reasons = {
            f["code"]
            for e in gate.get("engines", [])
            for f in flat(e["findings"])
            if f["severity"] == "error"
        }
        if code in reasons:
            return f"{where}: it refuses with the same {code} (the advice loops)"
        root = next((r for r in roots if r in reasons), None)
        if root is not None:
            return f"{where}: it refuses with {root}, the cause {code} is listed under"
        return None
    # refused before the gate (exit 2): the one line must name another fact than the fixed one
    why = done.stderr.strip().removeprefix("weightcheck: error: ")
    why = why.split(": ", 1)[-1] if why.startswith(d.path) else why  # the line names SRC first
    other = next((c for pat, c in REFUSALS if re.search(pat, why)), None)
    if other is None:
        return f"{where}: exit {done.exit_code}, a refusal this harness cannot place: {why}"
    if other == code:
        return f"{where}: it refuses with the fact it fixes ({code}): {why}"
    if other in roots:
        return f"{where}: it refuses with {other}, the cause {code} is listed under: {why}"
    return None


# convert's refusals before its gate (exit 2), each the fact of a check rule: a fix refused for
# one of these fails for another reason than the one it fixes, unless it is that rule's own fix
REFUSALS = (
    (r"tensor name\(s\) no dialect explains", "WC101"),
    (r" is given (twice|\d+ times) \(", "WC103"),
    (r" is in \d+ weight files \(.*the copies differ", "WC210"),
    (r"^cannot convert to \w+: ", "WC706"),
    (r"holds \w+ drafters only", "WC701"),
    (r"no config\.json", "WC201"),
)


def violations(drafters, tmp: str) -> tuple[list[str], int]:
    """Every printed fix command of every drafter, run as printed: (violations, commands run)."""
    bad, n = [], 0
    for d in drafters:
        for i, (command, (code, options, said, roots)) in enumerate(sorted(commands(d).items())):
            out = os.path.join(tmp, f"{d.id}-fix{i}")
            n += 1
            v = run_one(d, command, code, options, out, said, roots)
            if v is not None:
                bad.append(v)
    return bad, n
