"""The judgement of the generative differential (docs/differential.md, "The generative
differential"): what an engine's own loader did with a generated drafter, as consequences, against
the drafter's truth (tests/engine/generate.py), and what weightcheck's replay said.

The rule (issue 31, "What to build" 1): ``check --engine E`` has an ERROR finding iff engine E
crashes or refuses the drafter, leaves a parameter at its initial value, or feeds the drafter other
values than it was trained on (another capture, another map or head, other values). A drafter the
engine loads with every parameter right gets no error (warnings and info allowed).

:func:`consequences` reads one oracle record (tests/engine/sglang_oracle.py, vllm_oracle.py: the
shared schema of docs/engine-test.md) with the truth; the capture is judged by the functions in
``CAPTURE_JUDGES`` (the default compares the layers the oracle saw captured on the Llama target
with the layers the drafter was trained on; a judge that knows another target family's capture
path, e.g. a capture oracle, is added with :func:`add_capture_judge`). :func:`replay_errors` reads
the replay's ``check --json``. For the trainers: the trainer raises iff the training gate
(``check --training-config``) has an error finding of its own (WC9xx).
"""

from __future__ import annotations

import inspect
import re
from typing import Callable

import differential

V = 512


def _slots(r: dict) -> list | None:
    return r.get("slots") or None


def runner_capture(engine: str, rec: dict) -> tuple:
    """(the layers captured in the order fc reads them, whether from the engine's default ids,
    the first forward's failure or None) for the runner the verdict follows: vLLM's default
    runner (V2) as the capture oracle answers it (tests/engine/capture_oracle.py, run by
    gen_differential for every drafter: V2's own id reading and the target's own forward), since
    the vLLM oracle runs on CPU, i.e. V1; every other engine's capture as its oracle saw it."""
    cfg = rec.get("config") or {}
    co = rec.get("capture_oracle")
    if engine != "vllm" or co is None:
        return cfg.get("captured_layers"), cfg.get("aux_layer_ids_from") == "default", None
    if "vllm-V2" not in co:
        return None, False, f"capture oracle: {co.get('error')}"
    v2 = co["vllm-V2"]
    slots = _slots(v2)
    if v2.get("stage") == "config":  # V2's id reading or setter raised before any forward
        return slots, False, f"V2: fails before the forward: {v2['error']}"[:240]
    if v2.get("error"):
        return slots, v2.get("ids") is None, f"V2: the target's forward fails: {v2['error']}"[:240]
    if slots and None in slots:
        return slots, v2.get("ids") is None, f"V2: aux slots {slots} never written (garbage)"
    return slots, v2.get("ids") is None, None


def capture_oracle_rows(engine: str, rec: dict) -> list[dict]:
    """The capture oracle's V1 answer against the vLLM oracle's own capture (both V1, one with
    the real target, one with tagging stubs): they must agree, or the V2 judgement built on the
    capture oracle is not to be trusted."""
    co = rec.get("capture_oracle")
    if engine != "vllm" or co is None or not rec.get("started"):
        return []
    if "vllm-V1" not in co:
        return [dict(kind="oracle", replay="-", engine=f"capture oracle: {co.get('error')}")]
    got = (rec.get("config") or {}).get("captured_layers")
    v1 = co["vllm-V1"]
    if v1.get("error") is None and _slots(v1) == got:
        return []
    return [
        dict(
            kind="oracle",
            fact="captured_layers (V1)",
            replay=f"capture oracle V1: {_slots(v1)} {v1.get('error') or ''}".strip(),
            engine=f"vLLM oracle: {got}",
        )
    ]


def _capture_default(engine: str, rec: dict, truth: dict) -> list[str]:
    """The layers the engine captured (the oracle's dummy forward on the real target; for vLLM,
    its default runner's capture: :func:`runner_capture`) against the layers the drafter was
    trained on, in the order fc reads them."""
    got, from_default, failure = runner_capture(engine, rec)
    want = truth["trained_layers"]
    if failure:
        return [failure]
    if got == want:
        return []
    if got is None or len(got) != len(want):
        return [f"captures {got}, {len(want)} states trained: the first forward fails on fc"]
    if truth.get("capture_known") is False:  # ids written by hand in another convention
        return []
    if from_default and not truth.get("ids_written", True):
        # the drafter names no ids: right only if it was trained on the engine's defaults, a
        # condition no reader of the checkpoint can settle (a warning must name it, not an error)
        return []
    return [f"captures the outputs of layers {got}, trained on {want}"]


CAPTURE_JUDGES: list[Callable] = [_capture_default]


def add_capture_judge(fn: Callable, replace_default: bool = True) -> None:
    """``fn(engine, record, truth) -> [consequence, ...]``: e.g. a capture oracle's verdict for a
    target family whose capture path the Llama target does not exercise."""
    if replace_default and _capture_default in CAPTURE_JUDGES:
        CAPTURE_JUDGES.remove(_capture_default)
    CAPTURE_JUDGES.append(fn)


def _head(rec: dict, truth: dict) -> list[str]:
    head = truth.get("head", "checkpoint")
    params = rec["params"]
    tied = "lm_head.weight" not in params
    state = (params.get("lm_head.weight") or {}).get("state")
    if head == "lost":
        return ["the drafter has no trained head for its pruned vocabulary"]
    if head == "target_head" and (tied or state != "from_target"):
        return [
            "head: trained with the target's head, served "
            + ("the embedding" if tied else str(state))
        ]
    if head == "target_embed" and not tied:
        return [f"head: trained tied to the embedding, served lm_head {state}"]
    return []


def _map(engine: str, rec: dict, truth: dict) -> list[str]:
    if truth.get("map_stale"):
        return ["d2t is not the map the head was trained with"]
    if truth["vd"] >= V:
        return []
    used = [
        k
        for k, e in rec["keys"].items()
        if {"hot_token_id", "draft_id_to_target_id"} & set(e.get("params") or [])
    ]
    if not used and "draft_id_to_target_id" not in rec["params"]:
        return [f"no d2t map for a {truth['vd']}-row head: draft ids read as target ids"]
    return []


# a consequence that makes the served drafter right only under a condition the checkpoint cannot
# settle: "conditional WCnnn ...": the replay must name it (a warning or an error of that code),
# and need not give an error for it
CONDITIONAL = "conditional "


def _loaded(rec: dict, key: str) -> bool:
    return (rec["keys"].get(key) or {}).get("fate") == "loaded"


def conditional(cons: list[str]) -> list[str]:
    return [c for c in cons if c.startswith(CONDITIONAL)]


def consequences(engine: str, rec: dict, truth: dict) -> list[str]:
    """What about this load makes the served drafter wrong; [] when every parameter is right."""
    if rec.get("oracle_error"):
        return [f"oracle error: {rec['oracle_error']}"]
    if not rec["started"]:
        return [f"fails at {rec['stage']}: {(rec.get('error') or '')[:160]}"]
    out = []
    if rec.get("draft_forward_error"):  # loads, then start-up's draft forward fails (vLLM)
        out.append(f"the draft's first forward fails: {rec['draft_forward_error'][:160]}")
    for name, p in sorted(rec["params"].items()):
        if p["state"] in ("init", "partial"):
            out.append(f"{name}: {p['state']}")
        elif p["state"] == "loaded" and p.get("equals_checkpoint") is False:
            out.append(f"{name}: other values than the checkpoint's")
    roles = truth["roles"]
    for key in truth["trained"]:
        fate = (rec["keys"].get(key) or {}).get("fate")
        if fate in ("dropped", "warned", "not_reached", None):
            out.append(f"{key}: trained, not used ({fate or 'never read'})")
    order = list(((rec.get("sglang") or {}).get("key_order")) or rec["keys"])
    winners = differential._winners(engine, rec, order)
    for key, role in sorted(roles.items()):
        # a copy with other values than the trained one, loaded too (a half-converted export):
        # the engine keeps the last loaded, and which copy was trained is not in the checkpoint,
        # so the served model is right only if the kept copy is the trained one: a condition the
        # report must name (WC103), not an error it must give (docs/rules.md, WC103)
        if role.startswith("stale:") and _loaded(rec, key):
            kept = [k for p, k in winners.items() if k == key]
            said = "the stale copy stays" if kept else "the trained copy stays"
            out.append(f"{CONDITIONAL}WC103 {key}: another copy of {role[6:]} loads too; {said}")
    out += _head(rec, truth) + _map(engine, rec, truth)
    for judge in CAPTURE_JUDGES:
        out += judge(engine, rec, truth)
    return out


# --- the replay's side -----------------------------------------------------------------------------


def replay_errors(j: dict) -> list[dict] | None:
    """The replay's error findings; None when check could not run (exit 2 / a crash)."""
    if "_cli_failed" in j or j.get("schema") == "weightcheck.error/1":
        return None
    return [f for f in j.get("findings", []) if f.get("severity") == "error"]


def replay_refusal(j: dict) -> str:
    if "_cli_failed" in j:
        return f"check exits {j['_cli_failed']}: {' '.join(j.get('_stderr') or [])}"[:200]
    return f"check exits {j.get('exit_status')}: {j.get('error')}"[:200]


def fmt_findings(fs: list[dict]) -> str:
    return "; ".join(f"{f['code']} {f.get('subject') or ''}: {f['message'][:90]}" for f in fs)


def verdict_rows(engine: str, rec: dict, truth: dict, j: dict) -> list[dict]:
    """One row when the replay's verdict and the engine's consequence disagree (the rule)."""
    return verdict_from(consequences(engine, rec, truth), j, undecidable(truth))


def undecidable(truth: dict) -> frozenset:
    """Codes whose error the truth can neither demand nor forbid: with aux ids written by hand in
    another convention, what the drafter was trained on is not in the checkpoint (the replay
    reads the ids at face value, WC708)."""
    return frozenset({"WC708"}) if truth.get("capture_known") is False else frozenset()


def verdict_from(cons: list[str], j: dict, ignore: frozenset = frozenset()) -> list[dict]:
    """The rule over the engine's consequences (recorded or judged now) and a replay; errors of
    the codes in ``ignore`` count for neither side."""
    errs = replay_errors(j)
    errs = errs if errs is None else [f for f in errs if f["code"] not in ignore]
    conds, cons = conditional(cons), [c for c in cons if not c.startswith(CONDITIONAL)]
    if errs is None:  # check refuses the input: an error verdict without findings
        if cons or conds:
            return []
        return [dict(kind="false error", replay=replay_refusal(j), engine="serves it right")]
    named = {f["code"] for f in _flat(j.get("findings", [])) if f["severity"] != "info"}
    unnamed = [c for c in conds if c[len(CONDITIONAL) :].split(" ", 1)[0] not in named]
    if unnamed:
        return [dict(kind="false pass", replay="no warning names it", engine=" | ".join(unnamed))]
    if cons and not errs:
        return [dict(kind="false pass", replay="no error", engine=" | ".join(cons))]
    if errs and not cons:
        return [dict(kind="false error", replay=fmt_findings(errs), engine="serves it right")]
    return []


def _flat(fs: list[dict]) -> list[dict]:
    out = []
    for f in fs:
        out += [f, *_flat(f.get("consequences", []))]
    return out


def fact_rows(vid: str, engine: str, rec: dict, j: dict, ef: dict | None = None) -> list[dict]:
    """The fact-level comparison of tests/engine/differential.py (which tensor lands where);
    ``ef``: the engine's facts as recorded (a fixture), else read from ``rec``."""
    rf = (
        differential.replay_facts(j, engine, rec.get("runner"))  # a replay that names runners
        if "runner" in inspect.signature(differential.replay_facts).parameters
        else differential.replay_facts(j, engine)
    )
    ef = ef if ef is not None else differential.engine_facts(rec, engine)
    rows = []
    for r in differential.compare(vid, engine, rf, ef):
        if r.fact == "view" and replay_errors(j) is None:
            continue  # check refused the input: the verdict row says so
        rows.append(
            dict(kind=f"fact {r.category}", fact=r.fact, replay=r.replay, engine=r.engine_says)
        )
    return rows


# --- the trainers ----------------------------------------------------------------------------------

# the training gate's own errors: WC9xx, and WC203 (SRC is a target model, not a drafter: no
# trainer warm-starts a drafter from it, and the gate says that root cause instead of the WC9xx
# rows a drafter would get; SpecForge raises on the draft weights it lacks, speculators on the
# config it cannot read as a speculator)
TRAINING_CODES = re.compile(r"^(WC9\d\d|WC203)$")


def gate_errors(j: dict) -> list[dict] | None:
    errs = replay_errors(j)
    return None if errs is None else [f for f in errs if TRAINING_CODES.match(f["code"])]


def trainer_rows(rec: dict, j: dict) -> list[dict]:
    """The trainer raises iff the training gate has an error finding of its own."""
    if rec.get("oracle_error"):
        return [dict(kind="oracle", replay="-", engine=f"oracle error: {rec['oracle_error']}")]
    raises = rec.get("raises")
    errs = gate_errors(j)
    if errs is None:
        return (
            [] if raises else [dict(kind="false error", replay=replay_refusal(j), engine="loads")]
        )
    if raises and not errs:
        return [
            dict(kind="false pass", replay="no training error", engine=f"raises: {raises}"[:240])
        ]
    if errs and not raises:
        if _t2d_by_chance(rec, errs):
            return []
        return [dict(kind="false error", replay=fmt_findings(errs), engine="loads")]
    return []


def t2d_by_chance(rec: dict, raises: str | None) -> bool:
    """The trainer loaded with a t2d it never wrote where the replay says it raises on it."""
    never = "t2d" in (rec.get("uninitialized") or [])
    return never and not rec.get("raises") and "t2d was never set" in (raises or "")


def _said(f: dict) -> str:
    """A finding's message and detail (the evidence, the trainer's code path, is the detail's)."""
    return f["message"] + "\n" + (f.get("detail") or "")


def _t2d_by_chance(rec: dict, errs: list[dict]) -> bool:
    """speculators with a t2d it never wrote (SRC has none under its names): load_verifier_weights
    takes the head's rows at whatever that memory holds, and raises or not by chance (in one
    oracle process, a freed t2d of an earlier drafter of the same size makes it load). The
    replay's "raises" is then no false error (docs/differential.md, limits)."""
    never = "t2d" in (rec.get("uninitialized") or [])
    said = [f for f in errs if f["code"] == "WC908" and "t2d was never set" in _said(f)]
    return never and bool(said) and len(said) == len(errs)
