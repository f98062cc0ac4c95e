"""The consistency law (docs/consistency.md): one fact, one answer, whatever command asks.

For one drafter folder, each clause runs weightcheck's own commands (in-process, through the API
and the CLI runner) and returns its violations as lines, ``[]`` when the law holds:

  A  plain ``check`` contains ``check --engine E``: every error or warning E's run gives is in
     plain check (as the error it is when no engine serves the drafter without one, else at least
     a warning naming E), and E's line never says "loads every parameter" where E's run finds
     something;
  B  ``convert --to L``'s gate is ``check OUT --engine E`` for each engine E that reads L (same
     codes, same severities);
  C  the same drafter in every layout convert writes gets the same codes, grouping and counts,
     but for the codes the rule data marks layout-specific (``layout_specific`` in
     mappings/rules.toml);
  D  ``compare A B`` incompatible on an architecture field (or the architectures differ) means
     ``check A --training-config B`` names it (WC905): a training error, unless the trainer B
     belongs to loads A all the same (replayed: it raises on nothing), then a warning naming that
     trainer and no training error; and a training error means such a difference or a tensor
     whose shape differs (A contradicting its own config); a field whose value in A's config
     A's own weights contradict, holding B's (compare's ``a_weights``), is A's config mistake:
     the gate names it with WC409, not WC905 (the trainers load A's tensors by name);
  E  with ``--target``, an engine that fails to build or leaves a parameter random is an error
     for that engine, and so are other captured layers than trained (WC708) or another count
     (WC712);
  F  every output format carries every finding and verdict ``--format json`` carries.

A violation is a bug to fix where the fact is decided, never here. tests/test_law.py runs the law
on a fixed sample of the differential corpus (tests/engine/corpus.py) in the default suite and on
all of it under the ``engine`` marker.
"""

from __future__ import annotations

import os
import pathlib
import re
import tempfile

from conftest import run_cli

from weightcheck import api
from weightcheck.errors import WeightcheckError

ROOT_DIR = pathlib.Path(__file__).resolve().parent.parent
ENGINES = ("sglang", "vllm")
LAYOUTS = ("sglang", "vllm", "speculators")
SERIOUS = ("error", "warning")


def flat(findings) -> list[dict]:
    """Every finding of a report, consequences included (as dicts)."""
    out = []

    def walk(fs):
        for f in fs:
            out.append(f)
            walk(f.get("consequences", []))

    walk(findings)
    return out


def _report(src, **kw) -> dict | None:
    try:
        return api.check(str(src), **kw).report
    except WeightcheckError:
        return None  # a source no command reads (exit 2): nothing to compare


def layout_specific() -> frozenset[str]:
    """The codes the rule data marks as depending on the layout (mappings/rules.toml)."""
    from weightcheck.commands.rule import pages

    return frozenset(p["code"] for p in pages() if p["layout_specific"])


# --- A ------------------------------------------------------------------------------------------
def plain_contains_engines(src, target=None) -> list[str]:
    plain = _report(src, target=target)
    if plain is None:
        return []
    runs = {e: _report(src, engine=e, target=target) for e in ENGINES}
    runs = {e: r for e, r in runs.items() if r is not None}
    clean = {
        e: not any(f["severity"] == "error" for f in flat(r["findings"])) for e, r in runs.items()
    }
    have = flat(plain["findings"])
    bad = []
    for e, r in runs.items():
        others_clean = any(c for o, c in clean.items() if o != e)
        serious = [f for f in flat(r["findings"]) if f["severity"] in SERIOUS]
        for f in serious:
            same = [g for g in have if g["code"] == f["code"] and g["subject"] == f["subject"]]
            if not same:
                bad.append(
                    f"A {e}: {f['code']} {f['subject']} ({f['severity']}) not in plain check"
                )
                continue
            if f["severity"] == "error":
                ok = any(g["severity"] == "error" for g in same) or (
                    others_clean
                    and any(g["severity"] == "warning" and _names(g["message"], e) for g in same)
                )
                if not ok:
                    bad.append(
                        f"A {e}: {f['code']} {f['subject']} is an error there, plain check says "
                        f"{[g['severity'] for g in same]} (another engine clean: {others_clean})"
                    )
        line = (plain.get("engines") or {}).get(e)
        if line is not None and serious and "loads every parameter" in line["says"]:
            bad.append(
                f"A {e}: the engine line says {line['says']!r} beside {len(serious)} finding(s)"
            )
    return bad


def _names(message: str, engine: str) -> bool:
    return re.search(rf"(?<!\w){engine}(?!\w)", message, re.IGNORECASE) is not None


# --- B and C ------------------------------------------------------------------------------------
def _key(f) -> tuple:
    return (f["code"], f["severity"])


def convert_all(src, tmp, target=None) -> dict[str, tuple[str, dict]]:
    """layout -> (OUT, convert's report), for every layout convert writes SRC in (gate errors
    written anyway, so the output can be checked: --allow-errors)."""
    out = {}
    for layout in LAYOUTS:
        dst = os.path.join(tmp, f"out-{layout}")
        try:
            r = api.convert(
                str(src),
                dst,
                to=layout,
                target=None if target is None else str(target),
                allow_errors=True,
            )
        except WeightcheckError:
            continue  # refused before the gate (exit 2): a layout that cannot hold it
        if os.path.isdir(dst):
            out[layout] = (dst, r.report)
    return out


def gate_is_check(outs: dict, target=None) -> list[str]:
    bad = []
    for layout, (dst, rep) in outs.items():
        for run in (rep.get("check") or {}).get("engines", []):
            e = run["engine"]
            checked = _report(dst, engine=e, target=target)
            if checked is None:
                bad.append(f"B {layout}/{e}: check OUT cannot read what convert wrote")
                continue
            g = sorted(_key(f) for f in flat(run["findings"]))
            c = sorted(_key(f) for f in flat(checked["findings"]))
            if g != c:
                bad.append(f"B {layout}/{e}: the gate says {g}, check OUT --engine {e} says {c}")
    return bad


def signature(report: dict, skip: frozenset) -> list:
    """Codes, grouping and counts: each top-level finding's code and the codes listed under it,
    sorted; the layout-specific codes left out. (Not the severity: whether another engine serves
    the drafter cleanly — which makes an engine's error a warning in plain check — can turn on a
    layout-specific finding.)"""
    sig = []
    for f in report["findings"]:
        if f["code"] in skip:
            continue
        under = sorted(c["code"] for c in flat(f.get("consequences", [])) if c["code"] not in skip)
        sig.append((f["code"], tuple(under)))
    return sorted(sig)


def same_in_every_layout(outs: dict, target=None) -> list[str]:
    """For each engine, its own run over every layout convert writes that it reads (its gate
    passed: a refused conversion writes nothing; the engine starts on it: a layout an engine
    cannot read at all — SGLang and the speculators format — hides its other facts): the same
    codes, grouping and counts but for the layout-specific codes."""
    skip = layout_specific()
    bad = []
    for e in ENGINES:
        sigs = {}
        for layout, (dst, rep) in outs.items():
            if rep.get("refused") or not (rep.get("check") or {}).get("ok", True):
                continue  # the gate refuses it (written here only with --allow-errors)
            checked = _report(dst, engine=e, target=target)
            if checked is not None and checked["engine"] and checked["engine"]["starts"]:
                sigs[layout] = signature(checked, skip)
        first = next(iter(sigs), None)
        for layout, sig in sigs.items():
            if sig != sigs[first]:
                bad.append(f"C {e}: {first} vs {layout}: {sigs[first]} != {sig}")
    return bad


# --- D ------------------------------------------------------------------------------------------
def compare_is_training(a, b) -> list[str]:
    """``compare A B`` incompatible on an architecture field (or the architectures) <=> the gate
    ``check A --training-config B`` names the difference (WC905): as a training error (WC9xx)
    when no trainer is replayed or the trainer B belongs to raises on A, as a warning naming that
    trainer when it loads A all the same (it fine-tunes one architecture from A: SpecForge the
    training config's, speculators A's own; the severity is the consequence, docs/rules.md)."""
    cfg = os.path.join(str(b), "config.json")
    if not os.path.isfile(cfg) or not os.path.isfile(os.path.join(str(a), "config.json")):
        return []
    try:
        cmp = api.compare(str(a), str(b)).report
        chk = api.check(str(a), training_config=cfg).report
    except WeightcheckError:
        return []

    def differ(key):
        x, y = cmp["a"][key], cmp["b"][key]
        return x is not None and y is not None and x != y

    # a field A's config gives otherwise than A's weights hold, where the weights agree with B
    # (compare's a_weights): A's config mistake, WC409's; the trainers weigh A by its weights
    def mistake(d):
        return "a_weights" in d and d["a_weights"] == d["b"]

    diffs = [
        d for d in cmp["config_differences"] if d["category"] == "architecture" and not mistake(d)
    ]
    mistakes = [
        d["field"]
        for d in cmp["config_differences"]
        if d["category"] == "architecture" and mistake(d)
    ]
    if mistakes and not any(f["code"] == "WC409" for f in flat(chk["findings"])):
        return [f"D compare: A's weights hold B's {mistakes}, the gate has no WC409"]
    arch = bool(diffs) or differ("architecture") or differ("config_architecture")
    # WC908 (the trainer's own loader raises) is layout-specific: the trainers load by their own
    # names, compare pairs by canonical name (docs/consistency.md)
    skip = layout_specific()
    training_error = any(
        f["code"].startswith("WC9") and f["severity"] == "error" and f["code"] not in skip
        for f in flat(chk["findings"])
    )
    trainer = (chk.get("training") or {}).get("trainer")
    loads = trainer is not None and not trainer["raises"]
    why = [d["field"] for d in diffs]
    if arch and loads:
        named = [
            f
            for f in flat(chk["findings"])
            if f["code"] == "WC905"
            and f["severity"] == "warning"
            and _names(f["message"], trainer["name"])
        ]
        if not named:
            return [
                f"D compare: incompatible on {why or 'the architectures'}; {trainer['name']} "
                "loads A all the same, and no WC905 warning names it"
            ]
        if training_error:
            return [f"D {trainer['name']} loads A all the same, the gate has a training error"]
        return []
    if arch and not training_error:
        return [f"D compare: incompatible on {why or 'the architectures'}; the gate: no error"]
    # the converse: a training error is an architecture difference, or a shape of a tensor A
    # holds that B's config builds otherwise (A contradicting its own config: WC901 alone)
    if training_error and not arch and not cmp["shape_mismatches"]:
        return ["D the gate has an error; compare finds no architecture or shape difference"]
    return []


# --- E ------------------------------------------------------------------------------------------
def target_errors(src, target) -> list[str]:
    bad = []
    for e in ENGINES:
        rep = _report(src, engine=e, target=target)
        if rep is None or rep["engine"] is None:
            continue
        eng = rep["engine"]
        errors = [f for f in flat(rep["findings"]) if f["severity"] == "error"]
        random = [
            p for p in eng["parameters"] if p["state"] == "random" and p.get("required", True)
        ]
        if not eng["starts"] and not errors:
            bad.append(f"E {e}: fails at {eng['fails']['stage']} but no error")
        if random and not errors:
            bad.append(f"E {e}: {random[0]['param']} stays random but no error")
        for f in flat(rep["findings"]):
            if f["code"] in ("WC708", "WC712") and f["severity"] != "error":
                bad.append(f"E {e}: {f['code']} is a {f['severity']} with the target known")
    return bad


# --- F ------------------------------------------------------------------------------------------
def formats_carry_json(src, target=None) -> list[str]:
    args = [str(src)] + ([] if target is None else ["--target", str(target)])
    j = run_cli("check", *args, "--format", "json")
    if j.exit_code == 2:
        return []
    import json

    rep = json.loads(j.stdout)
    codes = {f["code"] for f in flat(rep["findings"])}
    bad = []
    for fmt in ("text", "markdown", "concise", "github"):
        out = run_cli("check", *args, "--format", fmt, env={"COLUMNS": "200"}).stdout
        missing = sorted(c for c in codes if c not in out)
        if missing:
            bad.append(f"F check --format {fmt}: no {missing}")
        flat_out = " ".join(out.split())
        for e, line in (rep.get("engines") or {}).items():
            if f"{e} {line['version']}" not in flat_out and e not in flat_out:
                bad.append(f"F check --format {fmt}: no line for {e}")
            for code in (line.get("findings") or {}).get("codes", []):
                if code not in out:
                    bad.append(f"F check --format {fmt}: {e}'s verdict ({code}) missing")
        verdict = "error" if not rep["ok"] else None
        if verdict and "error" not in out.lower():
            bad.append(f"F check --format {fmt}: the verdict (errors) is not said")
    return bad


def law(src, base=None, target=None, tmp=None, clauses="ABCDEF") -> list[str]:
    """Every clause of the law on drafter folder ``src`` (``base``: a reference drafter for D;
    ``target``: the target for A/B/C/E/F)."""
    bad: list[str] = []
    if "A" in clauses:
        bad += plain_contains_engines(src)
        if target is not None:
            bad += plain_contains_engines(src, target)
    if "B" in clauses or "C" in clauses:
        with tempfile.TemporaryDirectory(dir=tmp) as d:
            outs = convert_all(src, d, target)
            if "B" in clauses:
                bad += gate_is_check(outs, target)
            if "C" in clauses:
                bad += same_in_every_layout(outs, target)
    if "D" in clauses and base is not None:
        bad += compare_is_training(src, base) + compare_is_training(base, src)
    if "E" in clauses and target is not None:
        bad += target_errors(src, target)
    if "F" in clauses:
        bad += formats_carry_json(src, target)
    return bad
