"""``check --live``'s comparison: where the installed engine's own loader (live.py) and the
replay (view.py) disagree, and the check report's ``live`` object."""

from __future__ import annotations

from weightcheck.engines.live import LiveView

# what a fate does, as both the replay and the live loader can see it (the engine tests compare
# with it too)
OBSERVED = {
    "loaded": "writes",
    "special": "writes",
    "skipped": "nothing",
    "dropped": "nothing",
    "warned": "nothing",
    "error": "error",
}


def _row(kind: str, subject, live, replay, says: str) -> dict:
    """One disagreement: what it is about (kind: tensor, param or stage), each side's word."""
    return {kind: subject, "live": live, "replay": replay, "says": says}


def _base(param: str | None) -> set:
    if not param:
        return set()
    return {p.strip().split("[")[0].split(" ")[0] for p in param.split(",") if p.strip()}


def disagreements(live: LiveView, replay) -> list[dict]:
    """Where the live loader and the replay (view.EngineView) differ: where it stops, per
    checkpoint tensor (what it does, and the parameter it writes) and per parameter (loaded by
    the checkpoint or not)."""
    out = _stage_disagreement(live, replay) + _tensor_disagreements(live, replay)
    rf = replay.failure
    # the parameters, when both load to the end (after a load error the keys say it)
    if live.failure is None and (rf is None or rf.stage != "load"):
        out += _param_disagreements(live, replay)
    return out


def _stage_disagreement(live: LiveView, replay) -> list[dict]:
    lf, rf = live.failure, replay.failure
    early = ("config", "build")  # before loading; bind is not run live
    if not ((lf is not None and lf.stage in early) or (rf is not None and rf.stage in early)):
        return []
    if (lf and lf.stage) == (rf and rf.stage):
        return []
    said_live = "loads" if lf is None else f"stops at {lf.stage}: {lf.why}"
    said_replay = "loads" if rf is None else f"stops at {rf.stage}: {rf.why}"
    says = f"live {said_live}; replay {said_replay}"
    return [_row("stage", (lf or rf).stage, said_live, said_replay, says)]


def _tensor_disagreements(live: LiveView, replay) -> list[dict]:
    out = []
    rep = {x.name: x for x in replay.landings}
    for x in live.landings:
        r = rep.get(x.name)
        if r is None or x.fate == "unknown" or r.fate == "unknown":
            continue
        a, b = OBSERVED.get(x.fate), OBSERVED.get(r.fate)
        if a != b:
            why_live = f" ({x.why})" if x.why else ""
            why_replay = f" ({r.why})" if r.why else ""
            says = f"{x.name}: live {x.fate}{why_live}, replay {r.fate}{why_replay}"
            out.append(_row("tensor", x.name, x.fate, r.fate, says))
        elif a == "writes" and _base(x.param) and _base(r.param):
            if not (_base(x.param) & _base(r.param)):
                says = f"{x.name}: live writes {x.param}, replay {r.param}"
                out.append(_row("tensor", x.name, x.param, r.param, says))
    return out


def _param_disagreements(live: LiveView, replay) -> list[dict]:
    out = []
    have = {p.param: p for p in live.params}
    for r in replay.params:
        p = have.get(r.param.split(" ")[0])
        written = bool(r.sources)
        if p is None and written:
            says = f"{r.param}: the replay loads it; the live model has no such parameter"
            out.append(_row("param", r.param, None, "loaded", says))
        elif p is not None and (p.state == "loaded") != written:
            did = "loaded" if p.state == "loaded" else "nothing loaded"
            fro = f" from {', '.join(r.sources)}" if r.sources else ""
            says = f"{r.param}: live {did}, replay {r.state}{fro}"
            out.append(_row("param", r.param, p.state, r.state, says))
    known = {r.param.split(" ")[0] for r in replay.params}
    for p in live.params:
        if p.state == "loaded" and p.param not in known:
            says = f"{p.param}: live loads it from {', '.join(p.sources)}; the replay has no such parameter"
            out.append(_row("param", p.param, "loaded", None, says))
    return out


def annotate(live: LiveView, replay) -> None:
    """A parameter nothing loaded that the engine takes from the target at bind (not run live):
    ``from_target``, the rule being the replay's; SGLang's own ``load_lm_head_from_target``
    decision is the engine's word for its head."""
    if replay is None:
        return
    rule = {p.param.split(" ")[0]: p for p in replay.params}
    for p in live.params:
        r = rule.get(p.param)
        if p.state != "random" or r is None:
            continue
        p.canonical = p.canonical or r.canonical
        p.required = r.required
        if r.state == "from_target":
            p.state = "from_target"
            p.note = "nothing loaded into it; bound to the target's (bind not run live: the replay's rule)"
        elif r.state == "optional-absent":
            p.state = "optional-absent"
            p.note = "nothing loaded into it; optional (the replay's word)"
    for p in live.params:
        if not p.canonical and p.param in rule:
            p.canonical = rule[p.param].canonical


def report(live: LiveView, replay) -> dict:
    """The check report's ``live`` object: the live run, the replay version beside it, and every
    disagreement between them."""
    annotate(live, replay)
    r = live.report()
    r["replay_version"] = getattr(replay, "version", None)
    r["disagreements"] = disagreements(live, replay) if replay is not None else []
    r["agrees"] = None if replay is None else not r["disagreements"]  # None: nothing to compare
    if replay is not None:  # what was compared: tensors both saw, parameters when both load
        rep = {x.name: x.fate for x in replay.landings}
        rf = replay.failure
        r["compared"] = {
            "tensors": sum(
                1
                for x in live.landings
                if x.fate != "unknown" and rep.get(x.name, "unknown") != "unknown"
            ),
            "parameters": live.failure is None and (rf is None or rf.stage != "load"),
        }
    return r
