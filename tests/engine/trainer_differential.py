"""The trainer differential: weightcheck's replay of how SpecForge 0.2.0 and speculators 0.9.0
initialize a fine-tune from a drafter (``weightcheck.trainers.replay_training``) against the
trainers' own code (tests/engine/specforge_oracle.py, speculators_oracle.py), case by case,
parameter by parameter (docs/trainers-oracle.md).

    python tests/engine/trainer_differential.py [--out DIR] [--report FILE.json] [--only ID ...]
                                                [--trainers specforge,speculators] [--table]

1. writes the Llama variants of the differential corpus (tests/engine/corpus.py: every variant
   but the MLA ones, whose architecture neither trainer's eagle3 path builds) and the drafters
   the trainers' own save functions write (tests/engine/trainer_written.py, run in each venv);
2. builds the cases: every drafter x each trainer, with that trainer's training config
   (SpecForge: the run's draft config tests/fixtures/producers/inputs/specforge-draft-config.json;
   speculators: the speculators-train fixture's config.json), the tiny Llama target, no
   vocabulary map; plus, for a few drafters, a run vocabulary map (a SpecForge mapping .pt of
   another map); plus the SpecForge run folder fixture (training_state.pt, no config.json) and
   its step folder;
3. runs one oracle subprocess per trainer for all its cases (both at once), and meanwhile the
   replay in-process;
4. compares, per case: ``raises`` (does the trainer refuse: both sides as booleans; the reasons
   are printed, not compared), then, when both load, ``param <name>`` for every name either
   side lists, and ``fraction`` (to 1e-6). A parameter the oracle lists under ``by_chance``
   (speculators: an absent embed_tokens/lm_head left as never-written memory, which the
   verifier's copy replaces only if it holds a NaN) agrees with either of its outcomes.

The interpreters: WEIGHTCHECK_SPECFORGE_PYTHON / WEIGHTCHECK_SPECULATORS_PYTHON, else
${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/<trainer>/bin/python
(tests/engine/setup_specforge_venv.sh, setup_speculators_venv.sh).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
for p in (HERE, TESTS, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

import corpus  # noqa: E402
from helpers.engine import SIDE_VENVS, read_oracle_records, side_python_path  # noqa: E402

TRAINERS = ("specforge", "speculators")
ORACLES = {"specforge": "specforge_oracle.py", "speculators": "speculators_oracle.py"}
PRODUCERS = corpus.PRODUCERS
TRAINING_CONFIG = {
    "specforge": os.path.join(PRODUCERS, "inputs", "specforge-draft-config.json"),
    "speculators": os.path.join(PRODUCERS, "speculators-train", "config.json"),
}
# drafters given with a run vocabulary map (another map than their own: WC311's case)
WITH_MAP = ("sf.asis", "sh.asis", "st.asis", "sc.asis", "sf.miss.d2t", "sf.vd.null")
ORACLE_TIMEOUT = 3600
RAISES = "raises"


def trainer_python(trainer: str) -> str:
    return side_python_path(trainer)


def have_trainer(trainer: str) -> bool:
    p = trainer_python(trainer)
    return os.path.isfile(p) and os.access(p, os.X_OK)


def skip_reason(trainer: str) -> str:
    var, what, script = SIDE_VENVS[trainer]
    return f"no {what} interpreter: {trainer_python(trainer)} is absent (run `bash {script}` or set {var})"


@dataclass
class Case:
    id: str  # <trainer>/<drafter id>[+map]
    trainer: str
    drafter: str
    training_config: str
    target: str
    vocab_map: str | None = None

    def job(self) -> dict:
        return {
            "id": self.id,
            "drafter": self.drafter,
            "training_config": self.training_config,
            "target": self.target,
            "vocab_map": self.vocab_map,
        }


@dataclass
class Row:
    case: str
    fact: str
    replay: str
    trainer: str


@dataclass
class Report:
    cases: list = field(default_factory=list)
    records: dict = field(default_factory=dict)  # case id -> oracle record
    replays: dict = field(default_factory=dict)  # case id -> replay dict
    rows: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    @property
    def disagreements(self) -> list:
        return self.rows


def llama_variants(only=None) -> list:
    return [v for v in corpus.variants() if not corpus.is_mla(v) and (not only or v.id in only)]


def write_vocab_map(path: str) -> str:
    """A SpecForge vocab-mapping file (``{"d2t", "t2d"}``) of a map no fixture has: the 128
    highest target ids. Written with torch (the project's own interpreter has it)."""
    import torch

    v, vd = 512, 128
    ids = torch.arange(v - vd, v, dtype=torch.long)
    d2t = ids - torch.arange(vd, dtype=torch.long)
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[ids] = True
    torch.save({"d2t": d2t, "t2d": t2d}, path)
    return path


def trainer_written(trainer: str, out: str) -> list[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [trainer_python(trainer), os.path.join(HERE, "trainer_written.py"), out],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if res.returncode != 0:
        raise RuntimeError(
            f"trainer_written.py in the {trainer} venv failed:\n{res.stderr[-3000:]}"
        )
    return [line for line in res.stdout.splitlines() if line.startswith(out)]


def cases(root: str, trainers=TRAINERS, only=None, reuse=False) -> list[Case]:
    """``reuse``: the corpus and trainer-written folders already under ``root`` are kept."""
    paths = {}
    for v in llama_variants(only):
        p = os.path.join(root, "corpus", v.id)
        paths[v.id] = p if reuse and os.path.isdir(p) else corpus.write(v, p)
    written = {}
    if not only:
        for t in trainers:
            wdir = os.path.join(root, "written")
            mine = [p for p in glob.glob(os.path.join(wdir, t + "-*")) if reuse]
            for p in sorted(mine) or trainer_written(t, wdir):
                written["written." + os.path.basename(p)] = p
        run_dir = os.path.join(PRODUCERS, "specforge-run")
        written["fixture.specforge-run"] = run_dir
        written["fixture.specforge-run.step"] = os.path.join(run_dir, "tiny-step2")
    vmap = write_vocab_map(os.path.join(root, "other-map.pt"))
    out = []
    for t in trainers:
        for vid, p in {**paths, **written}.items():
            out.append(Case(f"{t}/{vid}", t, p, TRAINING_CONFIG[t], corpus.TARGET))
            if vid in WITH_MAP:
                out.append(Case(f"{t}/{vid}+map", t, p, TRAINING_CONFIG[t], corpus.TARGET, vmap))
    return out


def start_oracle(trainer: str, cs: list[Case], tmp: str) -> tuple:
    jobs = os.path.join(tmp, f"{trainer}.jobs.jsonl")
    with open(jobs, "w") as f:
        for c in cs:
            f.write(json.dumps(c.job()) + "\n")
    jsonl = os.path.join(tmp, f"{trainer}.jsonl")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    err = open(jsonl + ".stderr", "w")
    proc = subprocess.Popen(
        [trainer_python(trainer), os.path.join(HERE, ORACLES[trainer]), "--jobs", jobs]
        + ["--jsonl", jsonl],
        stdout=subprocess.DEVNULL,
        stderr=err,
        env=env,
        cwd=tmp,
        start_new_session=True,
    )
    return proc, jsonl


def replay(c: Case) -> dict:
    """weightcheck's replay of the case, as a plain dict (``raises`` a string on bad input)."""
    from weightcheck.errors import WeightcheckError
    from weightcheck.trainers import replay_training

    try:
        r = replay_training(
            c.drafter,
            c.training_config,
            trainer=c.trainer,
            target=c.target,
            training_vocab=c.vocab_map,
        )
    except WeightcheckError as e:
        return {"raises": f"weightcheck: {e}", "params": {}, "fraction": 0.0, "bad_input": True}
    return {
        "trainer": r.trainer,
        "version": r.version,
        "raises": r.raises,
        "params": dict(r.params or {}),
        "fraction": float(r.fraction or 0.0),
    }


def compare(c: Case, rp: dict, rec: dict) -> list[Row]:
    if rec.get("oracle_error"):
        return [Row(c.id, "oracle", "-", f"oracle error: {rec['oracle_error']}")]
    rows = []
    r_raises, t_raises = rp["raises"] is not None, rec["raises"] is not None
    if r_raises != t_raises:
        rows.append(
            Row(
                c.id,
                RAISES,
                rp["raises"] or "loads",
                rec["raises"] or "loads",
            )
        )
        return rows
    if t_raises:
        return rows
    chance = rec.get("by_chance") or {}
    for name in sorted(set(rp["params"]) | set(rec["params"])):
        a, b = rp["params"].get(name, "absent"), rec["params"].get(name, "absent")
        if a != b and a not in chance.get(name, ()):
            rows.append(Row(c.id, f"param {name}", a, b))
    if abs(rp["fraction"] - rec["fraction"]) > 1e-6 and not chance:
        rows.append(Row(c.id, "fraction", f"{rp['fraction']:.6f}", f"{rec['fraction']:.6f}"))
    return rows


def run(
    out_dir=None,
    trainers=TRAINERS,
    only=None,
    keep=False,
    progress=None,
    replay_too=True,
    reuse=False,
) -> Report:
    """``replay_too=False``: the oracles only (what each trainer did; no comparison).
    ``reuse``: the cases and oracle records a previous run left in ``out_dir`` are used again
    when they cover every case (for working on the comparison without re-running trainers)."""
    say = progress or (lambda *_: None)
    tmp = out_dir or tempfile.mkdtemp(prefix="wc-trainer-differential-")
    os.makedirs(tmp, exist_ok=True)
    rep = Report()
    try:
        t0 = time.time()
        rep.cases = cases(tmp, trainers, only, reuse)
        rep.seconds["write"] = round(time.time() - t0, 2)
        say(f"{len(rep.cases)} cases written in {rep.seconds['write']} s")
        procs = {}
        for t in trainers:
            cs = [c for c in rep.cases if c.trainer == t]
            old = os.path.join(tmp, f"{t}.jsonl")
            if reuse and os.path.exists(old):
                with open(old) as f:
                    have = {json.loads(x)["id"] for x in f if x.startswith("{")}
                if have >= {c.id for c in cs}:
                    procs[t] = (None, old, len(cs), time.time())
                    continue
            procs[t] = (*start_oracle(t, cs, tmp), len(cs), time.time())
        t1 = time.time()
        for c in rep.cases if replay_too else ():
            rep.replays[c.id] = replay(c)
        rep.seconds["replay"] = round(time.time() - t1, 2)
        say(f"replay: {len(rep.cases)} cases in {rep.seconds['replay']} s")
        for t, (proc, jsonl, n, ts) in procs.items():
            rep.records.update(read_oracle_records(t, proc, jsonl, n, "id", ORACLE_TIMEOUT))
            rep.seconds[f"oracle_{t}"] = round(time.time() - ts, 2)
            say(f"{t} oracle: {n} cases, {rep.seconds[f'oracle_{t}']} s wall")
        for c in rep.cases if replay_too else ():
            rep.rows.extend(compare(c, rep.replays[c.id], rep.records[c.id]))
        rep.seconds["total"] = round(time.time() - t0, 2)
    finally:
        if not keep and out_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return rep


def table(rows: list[Row]) -> str:
    out = ["| case | fact | replay says | trainer says |", "|---|---|---|---|"]
    for r in rows:
        cells = [r.case, r.fact, r.replay[:200], r.trainer[:200]]
        out.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(out)


def outcomes(rep: Report) -> str:
    """What each trainer did, case by case (the oracle side only)."""
    out = [
        "| case | raises | params from SRC / target / init / data | fraction |",
        "|---|---|---|---|",
    ]
    for c in rep.cases:
        rec = rep.records[c.id]
        if rec.get("raises"):
            out.append(f"| {c.id} | {rec['raises'][:160]} | | |")
            continue
        counts = {k: 0 for k in ("src", "target", "init", "data")}
        for v in rec.get("params", {}).values():
            counts[v] = counts.get(v, 0) + 1
        out.append(
            f"| {c.id} | no | {counts['src']} / {counts['target']} / {counts['init']} / "
            f"{counts['data']} | {rec.get('fraction', 0):.4f} |"
        )
    return "\n".join(out)


def report_json(rep: Report) -> dict:
    return {
        "seconds": rep.seconds,
        "rows": [r.__dict__ for r in rep.rows],
        "cases": [
            {**c.__dict__, "replay": rep.replays.get(c.id), "oracle": rep.records.get(c.id)}
            for c in rep.cases
        ],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="keep the cases, jobs and oracle records in this folder")
    ap.add_argument("--report", help="write every case, replay and record here (JSON)")
    ap.add_argument("--only", nargs="*", help="only these corpus variant ids")
    ap.add_argument("--trainers", default=",".join(TRAINERS))
    ap.add_argument("--table", action="store_true", help="also print what each trainer did")
    ap.add_argument("--reuse", action="store_true", help="reuse --out's cases and records")
    ap.add_argument(
        "--oracles-only", action="store_true", help="run the trainers only, print what they did"
    )
    args = ap.parse_args(argv)
    trainers = [t for t in args.trainers.split(",") if t]
    missing = [t for t in trainers if not have_trainer(t)]
    if missing:
        print("\n".join(skip_reason(t) for t in missing), file=sys.stderr)
        return 2
    rep = run(
        args.out,
        trainers,
        args.only,
        keep=bool(args.out),
        progress=print,
        replay_too=not args.oracles_only,
        reuse=args.reuse,
    )
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report_json(rep), f, indent=1)
    print(f"{len(rep.cases)} cases, {len(rep.rows)} disagreements")
    if rep.rows:
        print(table(rep.rows))
    if args.table or args.oracles_only:
        print(outcomes(rep))
    return 1 if rep.rows else 0


if __name__ == "__main__":
    sys.exit(main())
