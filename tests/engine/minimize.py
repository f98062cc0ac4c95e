"""The minimizer of the generative differential: shrinks a drafter that shows a disagreement (a
row of tests/engine/gen_differential.py) to the smallest drafter that still shows it, and writes it
as a regression fixture, tests/fixtures/generated/<id>/outcome.json: the spec the generator builds
the drafter from (with the digests of its files), the truth, and the engine's or trainer's outcome
as its oracle recorded it (a few KB; tests/test_generated_fixtures.py builds the drafter again).

Delta debugging, batched: every round builds, for every drafter still shrinking, each candidate
that drops one deviation of its spec, runs all candidates of the round through one oracle process
per engine/trainer and the replay, and keeps, per drafter, the first candidate whose rows still
hold a row of the same *signature* (side, kind, and what kind of disagreement: the replay's
error codes for a false error, the engine's consequence class for a false pass, the fact and
both sides' values for a fact row). When no deviation can go (1-minimal), the same rounds strip
config keys and then tensors one at a time (kind ``strip`` of tests/engine/gen_kinds.py).

    python tests/engine/gen_differential.py --seed S --count N --minimize [--strip] --fixtures DIR
    python tests/engine/minimize.py --rerecord [NAME ...]   # run the fixtures' oracles again
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys

import differential
import gen_differential as gd
import gen_judge
import generate


def _consequence_class(text: str) -> str:
    m = re.match(r"fails at (\w+): (\w+)", text)
    if m:
        return f"fails at {m.group(1)}: {m.group(2)}"
    for word, cls in (
        (": init", "init"),
        (": partial", "init"),
        ("other values", "values"),
        ("not used", "unused"),
        ("captures", "capture"),
        ("head", "head"),
        ("d2t", "map"),
        ("stale copy", "stale"),
    ):
        if word in text:
            return cls
    return text[:40]


def signature(row) -> tuple:
    """What a smaller drafter must still show to count as the same disagreement."""
    if row.kind == "false error":
        codes = sorted(set(re.findall(r"\bWC\d{3}\b", row.replay))) or ["refused"]
        return (row.side, row.kind, ",".join(codes))
    if row.kind == "false pass":
        return (row.side, row.kind, _consequence_class(row.engine.split(" | ")[0]))
    fact = row.fact.split(" ")[0]
    return (
        row.side,
        row.kind,
        fact,
        _consequence_class(row.replay),
        _consequence_class(row.engine),
    )


def _shows(rep, cid: str, sig: tuple) -> bool:  # noqa: D103
    return any(signature(r) == sig for r in rep.rows if r.id == cid)


def _items(spec: dict, phase: str) -> list:
    """What can go: deviations (by index), or config keys and tensor roles (strip)."""
    if phase == "drop":
        return [("dev", i) for i, d in enumerate(spec["devs"]) if d["kind"] != "strip"]
    b = generate.build(spec)
    keys = []
    for k, v in (b.config or {}).items():
        if isinstance(v, dict):
            keys += [f"{k}.{x}" for x in v]
        keys.append(k)
    roles = sorted(set(b.truth["roles"].values()))
    return [("config", k) for k in keys] + [("tensors", r) for r in roles]


def _without(spec: dict, items: list) -> dict:
    s = copy.deepcopy(spec)
    gone = {i for w, i in items if w == "dev"}
    s["devs"] = [d for i, d in enumerate(s["devs"]) if i not in gone]
    extra = {"config": [i for w, i in items if w == "config"]}
    extra["tensors"] = [i for w, i in items if w == "tensors"]
    if extra["config"] or extra["tensors"]:
        old = next((d for d in s["devs"] if d["kind"] == "strip"), {"config": [], "tensors": []})
        s["devs"] = [d for d in s["devs"] if d["kind"] != "strip"]
        strip = {"kind": "strip"}
        for k in ("config", "tensors"):
            strip[k] = sorted(set(old[k]) | set(extra[k]))
        s["devs"] = generate.order(s["devs"] + [strip])
    return s


def _batch(targets: list[dict], cands: dict, say, tag: str) -> dict:
    """cands: target key -> [spec, ...]; returns target key -> [index of each that shows]."""
    specs, owner = [], {}
    for t in targets:
        for k, s in enumerate(cands.get(t["key"], ())):
            cid = f"{t['key']}-{tag}{k}"
            specs.append(dict(s, id=cid))
            owner[cid] = (t, k)
    if not specs:
        return {}
    sides = tuple(sorted({t["sig"][0] for t in targets if t["key"] in cands}))
    say(f"minimize {tag}: {len(specs)} candidates on {', '.join(sides)}")
    rep = gd.run_specs(specs, sides)
    out: dict = {}
    for s in specs:
        t, k = owner[s["id"]]
        if _shows(rep, s["id"], t["sig"]):
            out.setdefault(t["key"], []).append(k)
            t.setdefault("records", {})[k] = rep.records[(t["sig"][0], s["id"])]
    return out


def _sizes(n: int) -> list[int]:
    """How many of n removable items to try together, largest first (halving)."""
    out, m = [], n
    while m >= 1:
        out.append(m)
        m //= 2
    return sorted(set(out) | {max(1, n * 3 // 4)}, reverse=True)


def minimize(
    targets: list[dict], say=print, rounds: int = 6, phases=("drop", "strip")
) -> list[dict]:
    """``targets``: [{"key", "spec", "sig", "record"}]; each gets its smallest spec and the
    record of it. Per phase (drop deviations, then strip config keys and tensors): one batch
    tries every single removal, the next the largest prefix of the removable ones together."""
    for phase in phases:
        live = list(targets)
        for n in range(rounds):
            items = {t["key"]: _items(t["spec"], phase) for t in live}
            singles = {
                k: [_without(t["spec"], [it]) for it in items[k]]
                for k, t in ((t["key"], t) for t in live)
            }
            ok = _batch(live, singles, say, f"{phase}{n}a-")
            live = [t for t in live if ok.get(t["key"])]
            if not live:
                break
            removable = {t["key"]: [items[t["key"]][k] for k in ok[t["key"]]] for t in live}
            prefixes = {
                t["key"]: [
                    _without(t["spec"], removable[t["key"]][:m])
                    for m in _sizes(len(removable[t["key"]]))
                ]
                for t in live
            }
            singles_ok = {t["key"]: t.pop("records") for t in live}
            t_ok = _batch(live, prefixes, say, f"{phase}{n}b-")
            for t in live:
                key = t["key"]
                if t_ok.get(key):  # the largest prefix that still shows it
                    best = min(t_ok[key])
                    t["spec"] = dict(prefixes[key][best], id=key)
                    t["record"] = t.pop("records")[best]
                else:  # together they lose it: the first single removal
                    k = ok[key][0]
                    t["spec"] = dict(singles[key][k], id=key)
                    t["record"] = singles_ok[key][k]
    return targets


# --- fixtures ---------------------------------------------------------------------------------------

FIXTURES = os.path.join(os.path.dirname(gd.TESTS), "tests", "fixtures", "generated")


def slug(sig: tuple) -> str:
    text = "-".join(str(x) for x in sig)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _digests(folder: str) -> dict:
    import hashlib

    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def write_fixture(t: dict, root: str, name: str | None = None) -> str:
    """tests/fixtures/generated/<name>/outcome.json: the spec (tests/engine/generate.py builds the
    drafter from it, byte for byte: the digests of its files are kept to prove it), the truth,
    and the engine's or trainer's outcome as its oracle recorded it."""
    import tempfile

    side = t["sig"][0]
    name = name or slug(t["sig"])
    out = os.path.join(root, name)
    spec = {**t["spec"], "id": name}
    b = generate.build(spec)
    with tempfile.TemporaryDirectory() as tmp:
        folder = generate.write(b, tmp)
        digests = _digests(folder)
    rec = t["record"]
    if side in gd.ENGINES:
        side_rec = {
            "engine_version": rec.get("engine_version"),
            "runner": rec.get("runner"),
            "outcome": gd.outcome(side, rec, b.truth),
            "consequences": gen_judge.consequences(side, rec, b.truth),
            "facts": differential.engine_facts(rec, side),
        }
    else:
        side_rec = {k: rec.get(k) for k in ("raises", "params", "fraction", "by_chance")}
    outcome = {
        "id": name,
        "side": side,
        "signature": list(t["sig"]),
        "folder": b.folder,
        "spec": spec,
        "describe": generate.describe(spec),
        "files": digests,
        "truth": b.truth,
        "recorded": side_rec,
        "found_as": t.get("found_as"),
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "outcome.json"), "w") as f:
        json.dump(outcome, f, indent=1, sort_keys=True)
        f.write("\n")
    return out


def record_fixtures(items: list[dict], root: str, say=print) -> list[str]:
    """Fixtures of given specs, without shrinking: ``items`` [{"name", "side", "spec"}]; one
    oracle run per side for all of them."""
    specs = [dict(it["spec"], id=it["name"]) for it in items]
    sides = tuple(sorted({it["side"] for it in items}))
    rep = gd.run_specs(specs, sides, progress=say)
    out = []
    for it in items:
        sig = (it["side"], "recorded")
        t = {"spec": dict(it["spec"], id=it["name"]), "sig": sig}
        t["record"] = rep.records[(it["side"], it["name"])]
        out.append(write_fixture(t, root, it["name"]))
        rows = [r for r in rep.rows if r.id == it["name"] and r.side == it["side"]]
        say(f"{it['name']}: {len(rows)} row(s) {[(r.kind, r.open) for r in rows]}")
    return out


def minimize_report(
    rep, fixtures: str | None, progress=print, per_signature: int = 1, strip: bool = False
) -> list:
    """Every signature of rep's rows (unexplained ones, and each open class's): minimized, and
    written under ``fixtures`` when given."""
    specs = {s["id"]: s for s in rep.specs}
    seen: dict = {}
    targets = []
    for r in rep.rows:
        sig = signature(r)
        if seen.get(sig, 0) >= per_signature:
            continue
        seen[sig] = seen.get(sig, 0) + 1
        key = f"m-{len(targets):03d}"
        targets.append(
            {"key": key, "spec": dict(specs[r.id], id=key), "sig": sig, "found_as": r.id}
        )
        targets[-1]["record"] = rep.records[(r.side, r.id)]
    minimize(targets, say=progress, phases=("drop", "strip") if strip else ("drop",))
    for t in targets:
        progress(f"{t['found_as']} {t['sig']}: {generate.describe(t['spec'])}")
        if fixtures:
            progress("  -> " + write_fixture(t, fixtures))
    return targets


def rerecord(root: str, names=None, say=print) -> list[str]:
    """Run every fixture's spec (or those named) through its oracle again and write its
    outcome.json anew: after a change of the generator or of an engine version."""
    items = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name, "outcome.json")
        if os.path.isfile(p) and (not names or name in names):
            with open(p) as f:
                o = json.load(f)
            spec = {k: v for k, v in o["spec"].items() if k != "id"}
            items.append({"name": name, "side": o["side"], "spec": spec})
    return record_fixtures(items, root, say)


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--rerecord"]:
        rerecord(FIXTURES, set(argv[1:]))
        return 0
    return gd.main(argv + ["--minimize"])


if __name__ == "__main__":
    sys.exit(main())
