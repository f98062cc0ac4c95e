"""The generative differential (docs/differential.md, "The generative differential"): generated
drafters (tests/engine/generate.py) judged by SGLang's and vLLM's own loaders and SpecForge's and
speculators' own init, beside weightcheck's ``check --engine E`` and training gate.

    python tests/engine/gen_differential.py --seed S --count N [--out DIR] [--reuse]
        [--engines sglang,vllm] [--trainers specforge,speculators] [--table] [--report FILE]
        [--minimize] [--fixtures tests/fixtures/generated]

Per drafter and engine, two kinds of rows (tests/engine/gen_judge.py):

* the verdict: ``false pass`` (the engine crashes, refuses, leaves a parameter at init or feeds
  other values than trained, and the replay has no error) or ``false error`` (the replay has an
  error, the engine serves the drafter right);
* the facts of tests/engine/differential.py (which tensor lands where, what is captured), for
  the runner the oracle ran (vLLM on CPU: V1);
* for vLLM, ``oracle`` when the capture oracle (tests/engine/capture_oracle.py, run for every
  drafter's config: the verdict takes V2's capture from it, V2 being vLLM's default runner)
  answers for V1 other layers than the vLLM oracle saw captured, or cannot answer.

Per drafter and trainer: the trainer raises iff the training gate has an error (WC9xx), and the
parameter facts of tests/engine/trainer_differential.py.

A row matched by an open class of tests/fixtures/generated/open.json (a disagreement another
branch fixes) is listed as ``open: <class>``; the others are the disagreements. ``--minimize``
shrinks every unexplained row (and one drafter per open class) to its smallest drafter and writes
it as a regression fixture (tests/engine/minimize.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
for _p in (HERE, TESTS, os.path.dirname(TESTS)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import corpus  # noqa: E402
import differential  # noqa: E402
import gen_judge  # noqa: E402
import gen_open  # noqa: E402
import generate  # noqa: E402
import trainer_differential as tdiff  # noqa: E402
from helpers.engine import read_oracle_records, side_env, side_python_path  # noqa: E402

ENGINES = ("sglang", "vllm")
TRAINERS = ("specforge", "speculators")
TIMEOUT = 5400
STALL = 600  # s without a new record: the oracle is killed and started again for the rest


@dataclass
class GRow:
    id: str
    side: str  # an engine or a trainer
    kind: str  # false pass | false error | fact disagree | fact replay does not model | ...
    replay: str
    engine: str
    fact: str = ""
    open: list = field(default_factory=list)  # the open classes that explain it

    def signature(self) -> tuple:
        return (self.side, self.kind, self.fact.split(" ")[0])


@dataclass
class Report:
    specs: list
    sides: tuple
    rows: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)  # (side, id) -> oracle record
    replays: dict = field(default_factory=dict)  # (side, id) -> replay JSON
    truths: dict = field(default_factory=dict)  # id -> truth
    paths: dict = field(default_factory=dict)  # id -> folder
    outcomes: dict = field(default_factory=dict)  # (side, id) -> "right" | "wrong" | "raises" ...

    @property
    def disagreements(self) -> list:
        return [r for r in self.rows if not r.open]

    @property
    def explained(self) -> list:
        return [r for r in self.rows if r.open]


def gate(path: str, trainer: str) -> dict:
    """``weightcheck check PATH --training-config C --target T --json`` in-process."""
    from click.testing import CliRunner

    from weightcheck.cli import main

    args = ["check", path, "--training-config", tdiff.TRAINING_CONFIG[trainer]]
    args += ["--target", corpus.TARGET, "--json"]
    r = CliRunner().invoke(main, args, catch_exceptions=True)
    try:
        return json.loads(r.stdout)
    except ValueError:
        err = getattr(r, "stderr", "") or repr(r.exception)
        return {"_cli_failed": r.exit_code, "_stderr": err.strip().splitlines()[-1:]}


def _start(sides, paths: dict, tmp: str, reuse: bool) -> dict:
    procs = {}
    ids = list(paths)
    for s in sides:
        jsonl = os.path.join(tmp, f"{s}.jsonl")
        if reuse and os.path.exists(jsonl):
            with open(jsonl) as f:
                n = sum(1 for x in f if x.startswith("{"))
            if n == len(ids):
                procs[s] = (None, jsonl, time.time())
                continue
        if os.path.exists(jsonl):
            os.unlink(jsonl)
        if s in ENGINES:
            proc = differential.start_oracle(s, [paths[i] for i in ids], jsonl, tmp)
        else:
            cases = [
                tdiff.Case(f"{s}/{i}", s, paths[i], tdiff.TRAINING_CONFIG[s], corpus.TARGET)
                for i in ids
            ]
            proc, jsonl = tdiff.start_oracle(s, cases, tmp)
        procs[s] = (proc, jsonl, time.time())
    return procs


def _records(s: str, proc, jsonl: str, paths: dict, tmp: str, tries: int = 3) -> dict:
    """id -> record. An oracle process that dies (the machine's memory is shared: the kernel may
    kill it) is started again for the drafters it had not done, at most ``tries`` times."""
    key = "drafter" if s in ENGINES else "id"
    name = (lambda i: paths[i]) if s in ENGINES else (lambda i: f"{s}/{i}")
    try:
        recs = read_oracle_records(s, proc, jsonl, len(paths), key, TIMEOUT, stall=STALL)
    except RuntimeError:
        if tries <= 1:
            raise
        recs = read_oracle_records(s, None, jsonl, len(paths), key, TIMEOUT)
        left = {i: p for i, p in paths.items() if name(i) not in recs}
        sub = os.path.join(tmp, f"retry{tries}")
        os.makedirs(sub, exist_ok=True)
        proc2, jsonl2, _ = _start((s,), left, sub, False)[s]
        more = _records(s, proc2, jsonl2, left, sub, tries - 1)
        return {i: (more[i] if i in left else recs[name(i)]) for i in paths}
    return {i: recs[name(i)] for i in paths}


def _target_case() -> dict:
    """The target the vLLM oracle loads (corpus.TARGET), as the capture oracle's case fields."""
    with open(os.path.join(corpus.TARGET, "config.json")) as f:
        t = json.load(f)
    family = "llama" if t.get("model_type") == "llama" else t.get("model_type")
    return {"family": family, "num_layers": t["num_hidden_layers"]}


def _drafter_config(path: str) -> dict | None:
    """The drafter's config.json as a dict, or None where vLLM cannot read one (no file, not
    JSON, not an object): vLLM then fails at config and no capture is judged."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def _start_capture(paths: dict, tmp: str):
    """The capture oracle (tests/engine/capture_oracle.py) for every drafter's config, one
    process in vLLM's venv, run while the replays run: where vLLM's V2 runner (the default on
    GPU, the one the replay's verdict follows) reads the ids and what the target's forward then
    captures. The vLLM oracle runs on CPU, i.e. the V1 runner; its capture is compared with the
    capture oracle's V1 answer (docs/differential.md, "The judgement")."""
    target = _target_case()
    ids, cases = [], []
    for i, p in paths.items():
        cfg = _drafter_config(p)
        if cfg is not None:
            ids.append(i)
            cases.append({**target, "config": cfg})
    base = os.path.join(tmp, "capture")
    env = dict(side_env(), TMPDIR=base + ".tmp")  # its config folders go with the run's folder
    os.makedirs(env["TMPDIR"], exist_ok=True)
    with open(base + ".cases.json", "w") as f:
        json.dump(cases, f)
    with open(base + ".cases.json") as cin, open(base + ".json", "w") as out:
        with open(base + ".stderr", "w") as err:
            proc = subprocess.Popen(
                [side_python_path("vllm"), os.path.join(HERE, "capture_oracle.py"), "vllm"],
                stdin=cin,
                stdout=out,
                stderr=err,
                env=env,
                cwd=HERE,
                start_new_session=True,
            )
    return proc, ids, base, time.time()


def _capture_results(capture, paths: dict) -> dict:
    """id -> the capture oracle's answer ({"vllm-V1": R, "vllm-V2": R}), or {"error": why} for
    every drafter when the process failed."""
    proc, ids, base, _ = capture
    try:
        rc = proc.wait(timeout=TIMEOUT)
    except Exception:  # noqa: BLE001 - a timeout: said as each drafter's oracle error
        proc.kill()
        rc = "timeout"
    try:
        with open(base + ".json") as f:
            out = json.load(f) if rc == 0 else None
    except ValueError:
        out = None
    if out is None or len(out) != len(ids):
        with open(base + ".stderr") as f:
            why = f"capture oracle (vllm) exit {rc}: {f.read()[-300:]}"
        return {i: {"error": why} for i in paths}
    return dict(zip(ids, out))


def _replay(s: str, path: str, i: str) -> dict:
    if s in ENGINES:
        return differential.replay(path, s, strict=False)
    c = tdiff.Case(f"{s}/{i}", s, path, tdiff.TRAINING_CONFIG[s], corpus.TARGET)
    return {"gate": gate(path, s), "facts": tdiff.replay(c)}


def judge(s: str, i: str, rec: dict, truth: dict, rp: dict) -> list[GRow]:
    if s in ENGINES:
        rows = gen_judge.verdict_rows(s, rec, truth, rp) + gen_judge.fact_rows(i, s, rec, rp)
        rows += gen_judge.capture_oracle_rows(s, rec)
        if rp.get("_schema_errors"):  # check's --json breaks its own schema: a defect, whatever
            rows.append(
                dict(kind="schema", replay="; ".join(rp["_schema_errors"])[:300], engine="-")
            )
    else:
        rows = gen_judge.trainer_rows(rec, rp["gate"])
        chance = gen_judge.t2d_by_chance(rec, rp["facts"].get("raises"))
        if not rows and not chance and not rec.get("raises") and not rec.get("oracle_error"):
            c = tdiff.Case(f"{s}/{i}", s, "", "", "")
            for r in tdiff.compare(c, rp["facts"], rec):
                rows.append(
                    dict(kind="fact disagree", fact=r.fact, replay=r.replay, engine=r.trainer)
                )
    out = [GRow(i, s, **r) for r in rows]
    for r in out:
        only = gen_judge.TRAINING_CODES if s in TRAINERS else None
        r.open = gen_open.explain(r, rp.get("gate", rp), rec, gen_judge.undecidable(truth), only)
    return out


def outcome(s: str, rec: dict, truth: dict) -> str:
    if s in TRAINERS:
        return "raises" if rec.get("raises") else "loads"
    if not rec.get("started"):
        return f"fails at {rec.get('stage')}"
    cons = gen_judge.consequences(s, rec, truth)
    if cons and len(gen_judge.conditional(cons)) == len(cons):
        return "right only under a condition"
    return "wrong" if cons else "right"


def run_specs(specs, sides, out_dir=None, reuse=False, keep=False, progress=None) -> Report:
    say = progress or (lambda *_: None)
    tmp = out_dir or tempfile.mkdtemp(prefix="wc-gen-differential-")
    os.makedirs(tmp, exist_ok=True)
    rep = Report(specs=specs, sides=tuple(sides))
    procs: dict = {}
    capture = None
    try:
        t0 = time.time()
        root = os.path.join(tmp, "drafters")
        for s in specs:
            b = generate.build(s)
            rep.truths[s["id"]] = b.truth
            folder = os.path.join(root, s["id"], b.folder)
            rep.paths[s["id"]] = (
                folder if reuse and os.path.isdir(folder) else generate.write(b, root)
            )
        rep.seconds["write"] = round(time.time() - t0, 2)
        say(f"{len(specs)} drafters written in {rep.seconds['write']} s")
        procs = _start(sides, rep.paths, tmp, reuse)
        capture = _start_capture(rep.paths, tmp) if "vllm" in sides else None
        t1 = time.time()
        for s in sides:
            for i, p in rep.paths.items():
                rep.replays[(s, i)] = _replay(s, p, i)
        rep.seconds["replay"] = round(time.time() - t1, 2)
        say(f"replay: {len(specs) * len(sides)} in {rep.seconds['replay']} s")
        for s, (proc, jsonl, ts) in procs.items():
            for i, r in _records(s, proc, jsonl, rep.paths, tmp).items():
                rep.records[(s, i)] = r
            rep.seconds[f"oracle_{s}"] = round(time.time() - ts, 2)
            say(f"{s} oracle: {len(specs)} drafters, {rep.seconds[f'oracle_{s}']} s wall")
        if capture is not None:
            for i, r in _capture_results(capture, rep.paths).items():
                rep.records[("vllm", i)]["capture_oracle"] = r
            rep.seconds["capture_oracle"] = round(time.time() - capture[3], 2)
        for s in sides:
            for i in rep.paths:
                rec, truth = rep.records[(s, i)], rep.truths[i]
                rep.outcomes[(s, i)] = outcome(s, rec, truth)
                rep.rows.extend(judge(s, i, rec, truth, rep.replays[(s, i)]))
        rep.seconds["total"] = round(time.time() - t0, 2)
    finally:
        _stop(procs, capture)
        if not keep and out_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return rep


def _stop(procs: dict, capture) -> None:
    """The oracle processes this run started, ended if still running (a run that fails midway
    leaves none behind)."""
    for proc, _, _ in procs.values():
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    if capture is not None and capture[0].poll() is None:
        capture[0].kill()
        capture[0].wait()


def run(seed: int, count: int, sides=ENGINES + TRAINERS, start_at: int = 0, **kw) -> Report:
    return run_specs(generate.specs(seed, count, start_at), sides, **kw)


# --- output -----------------------------------------------------------------------------------------


def summary(rep: Report) -> str:
    lines = [
        f"{len(rep.specs)} drafters x {len(rep.sides)} sides: {len(rep.disagreements)} "
        f"disagreements, {len(rep.explained)} rows of open classes"
    ]
    for s in rep.sides:
        counts: dict = {}
        for (side, _), o in rep.outcomes.items():
            if side == s:
                counts[o] = counts.get(o, 0) + 1
        lines.append(f"  {s:12s} {dict(sorted(counts.items()))}")
    per: dict = {}
    for r in rep.rows:
        k = (", ".join(r.open) or "DISAGREE", r.side, r.kind)
        per[k] = per.get(k, 0) + 1
    for (cls, side, kind), n in sorted(per.items()):
        lines.append(f"  {n:5d}  {cls:34s} {side:12s} {kind}")
    lines.append(f"  seconds: {rep.seconds}")
    return "\n".join(lines)


def table(rows: list, width: int = 90) -> str:
    def cut(s) -> str:
        s = str(s).replace("|", "/").replace("\n", " ")
        return s if len(s) <= width else s[: width - 1] + "…"

    out = [
        "| drafter | side | kind | fact | replay says | engine says | open class |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (bool(r.open), r.side, r.kind, r.id)):
        out.append(
            f"| {r.id} | {r.side} | {r.kind} | {cut(r.fact)} | {cut(r.replay)} | "
            f"{cut(r.engine)} | {', '.join(r.open)} |"
        )
    return "\n".join(out)


def report_json(rep: Report) -> dict:
    return {
        "seconds": rep.seconds,
        "rows": [asdict(r) for r in rep.rows],
        "drafters": {
            s["id"]: {
                "spec": s,
                "describe": generate.describe(s),
                "outcomes": {side: rep.outcomes.get((side, s["id"])) for side in rep.sides},
            }
            for s in rep.specs
        },
        "records": {f"{s}/{i}": r for (s, i), r in rep.records.items()},
        "replays": {f"{s}/{i}": r for (s, i), r in rep.replays.items()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="drafter ids (of --seed)")
    ap.add_argument("--out", help="keep the drafters and the oracles' records in this folder")
    ap.add_argument("--reuse", action="store_true", help="with --out: reuse records left there")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--trainers", default=",".join(TRAINERS))
    ap.add_argument("--table", action="store_true", help="print every row (markdown)")
    ap.add_argument("--report", help="write rows, specs, records and replays here (JSON)")
    ap.add_argument("--minimize", action="store_true", help="shrink the disagreements")
    ap.add_argument("--fixtures", help="with --minimize: write the fixtures under this folder")
    ap.add_argument(
        "--strip", action="store_true", help="with --minimize: strip config keys and tensors too"
    )
    a = ap.parse_args(argv)
    sides = tuple(x for x in (a.engines + "," + a.trainers).split(",") if x)
    for s in sides:
        if not os.access(
            differential.engine_python(s) if s in ENGINES else tdiff.trainer_python(s), os.X_OK
        ):
            print(f"no {s} interpreter (docs/engine-test.md)", file=sys.stderr)
            return 2
    specs = generate.specs(a.seed, a.count, a.start)
    if a.only:
        specs = [s for s in specs if s["id"] in a.only]
    say = lambda m: print("#", m, file=sys.stderr)  # noqa: E731
    rep = run_specs(specs, sides, a.out, a.reuse, keep=bool(a.out), progress=say)
    print(summary(rep))
    if a.table:
        print(table(rep.rows))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report_json(rep), f, indent=1, default=str)
    if a.minimize:
        import minimize

        minimize.minimize_report(rep, a.fixtures, progress=say, strip=a.strip)
    return 1 if rep.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
