"""The trainer differential: weightcheck's replay of SpecForge 0.2.0's and speculators 0.9.0's
fine-tune initialization (``weightcheck.trainers.replay_training``) against the trainers' own
code, run in their side venvs (docs/trainers-oracle.md).

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_trainer_differential.py``. The trainers run in their side
venvs (tests/engine/setup_specforge_venv.sh, setup_speculators_venv.sh;
WEIGHTCHECK_SPECFORGE_PYTHON / WEIGHTCHECK_SPECULATORS_PYTHON or
${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/<trainer>/bin/python); a trainer whose
interpreter is absent has its tests skipped, with the reason, and so is the comparison while this
checkout has no ``weightcheck.trainers``. WEIGHTCHECK_TRAINER_DIFFERENTIAL_REPORT=FILE keeps every
case, replay and oracle record (JSON).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.engine

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import corpus  # noqa: E402
import trainer_differential as td  # noqa: E402

PRODUCERS = ROOT / "tests" / "fixtures" / "producers"
MIN_LLAMA_VARIANTS = 400


def _need(trainer: str) -> None:
    if not td.have_trainer(trainer):
        pytest.skip(td.skip_reason(trainer))


def _need_replay() -> None:
    if importlib.util.find_spec("weightcheck.trainers") is None:
        pytest.skip(
            "weightcheck.trainers is not in this checkout (the replay of the trainers, issue #23 "
            "item 1): nothing to compare the trainers' own code with"
        )


def _oracle(trainer: str, tmp_path, jobs: list[dict]) -> dict:
    """Run one trainer's oracle on ``jobs``: id -> record."""
    import subprocess

    jf = tmp_path / f"{trainer}.jobs.jsonl"
    jf.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    out = tmp_path / f"{trainer}.jsonl"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [td.trainer_python(trainer), str(ENGINE_DIR / td.ORACLES[trainer])]
        + ["--jobs", str(jf), "--jsonl", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    recs = {}
    for line in out.read_text().splitlines():
        r = json.loads(line)
        recs[r["id"]] = r
    assert len(recs) == len(jobs)
    return recs


def _job(i, drafter, trainer, vocab_map=None):
    return {
        "id": i,
        "drafter": str(drafter),
        "training_config": td.TRAINING_CONFIG[trainer],
        "target": corpus.TARGET,
        "vocab_map": vocab_map,
    }


# --- the cases themselves (no trainer needed) -------------------------------------------------------


def test_cases_cover_the_corpus_and_the_issue(tmp_path, monkeypatch):
    """Every Llama variant of the corpus is a case for each trainer; MLA variants are not (neither
    trainer's eagle3 path builds that architecture); the vocab-map cases exist."""
    monkeypatch.setattr(td, "trainer_written", lambda t, out: [])
    vs = td.llama_variants()
    assert len(vs) >= MIN_LLAMA_VARIANTS, len(vs)
    assert not [v for v in vs if corpus.is_mla(v)]
    assert len(vs) == len([v for v in corpus.variants() if not corpus.is_mla(v)])
    cs = td.cases(str(tmp_path), only={v.id for v in vs[:3]} | set(td.WITH_MAP))
    ids = {c.id for c in cs}
    for t in td.TRAINERS:
        for vid in td.WITH_MAP:
            assert f"{t}/{vid}" in ids and f"{t}/{vid}+map" in ids
    assert all(c.training_config == td.TRAINING_CONFIG[c.trainer] for c in cs)


def test_compare_reads_raises_params_and_fraction():
    """The comparison says every kind of disagreement (so a 0 is a real 0)."""
    c = td.Case("specforge/x", "specforge", "d", "cfg", "t")
    same = {"raises": None, "params": {"a": "src", "b": "init"}, "fraction": 0.5}
    assert td.compare(c, same, dict(same)) == []
    rows = td.compare(c, same, {"raises": "ValueError: no", "params": {}, "fraction": 0.0})
    assert [r.fact for r in rows] == ["raises"]
    assert (
        td.compare(c, {**same, "raises": "x"}, {"raises": "y", "params": {}, "fraction": 0}) == []
    )
    other = {"raises": None, "params": {"a": "target", "c": "src"}, "fraction": 0.25}
    facts = {r.fact for r in td.compare(c, same, other)}
    assert facts == {"param a", "param b", "param c", "fraction"}
    assert td.compare(c, same, {"oracle_error": "boom"})[0].fact == "oracle"


# --- the oracles alone (each trainer's venv) ---------------------------------------------------------


def test_specforge_oracle_on_the_issue_cases(tmp_path):
    """SpecForge's own code on the drafters issue #23 names: an exact export loads (SRC all but
    the target embedding and the data's d2t/t2d); a speculators layout and a ModelOpt layout
    raise (no renaming); the run folder and its step folder load as the export does."""
    _need("specforge")
    jobs = [
        _job("export", PRODUCERS / "specforge-sglang", "specforge"),
        _job("layers0", PRODUCERS / "speculators-train", "specforge"),
        _job("modelopt", PRODUCERS / "modelopt", "specforge"),
        _job("run", PRODUCERS / "specforge-run", "specforge"),
        _job("step", PRODUCERS / "specforge-run" / "tiny-step2", "specforge"),
    ]
    r = _oracle("specforge", tmp_path, jobs)
    ex = r["export"]
    assert ex["raises"] is None and ex["trainer"] == "specforge" and ex["version"] == "0.2.0"
    assert ex["params"]["embed_tokens.weight"] == "target"
    assert ex["params"]["d2t"] == ex["params"]["t2d"] == "data"
    assert ex["params"]["fc.weight"] == ex["params"]["midlayer.self_attn.q_proj.weight"] == "src"
    assert ex["fraction"] == 1.0 and ex["doubts"] == {}  # all SRC could fill: SpecForge raises else
    assert "midlayer." in r["layers0"]["raises"] and r["layers0"]["params"] == {}
    assert r["modelopt"]["raises"]
    for k in ("run", "step"):
        assert r[k]["raises"] is None and r[k]["params"] == ex["params"], k


def test_speculators_oracle_on_the_issue_cases(tmp_path):
    """speculators' own loader: its own checkpoint loads from SRC (the verifier's head and norm
    from the target); renamed to midlayer.* it still loads, its decoder layer never written; a
    SpecForge export and a null verifier raise."""
    _need("speculators")
    written = tmp_path / "written"
    td.trainer_written("speculators", str(written))
    (relayout,) = [v for v in corpus.variants() if v.id == "st.relayout"]
    corpus.write(relayout, str(tmp_path / "st.relayout"))
    jobs = [
        _job("train", PRODUCERS / "speculators-train", "speculators"),
        _job("saved", written / "speculators-save_pretrained", "speculators"),
        _job("noverifier", written / "speculators-save_pretrained-noverifier", "speculators"),
        _job("specforge", PRODUCERS / "specforge-sglang", "speculators"),
        _job("relayout", tmp_path / "st.relayout", "speculators"),
    ]
    r = _oracle("speculators", tmp_path, jobs)
    tr = r["train"]
    assert tr["raises"] is None and tr["version"] == "0.9.0"
    assert tr["params"]["layers.0.self_attn.q_proj.weight"] == "src"
    assert tr["params"]["verifier_lm_head.weight"] == "target"
    assert r["saved"]["raises"] is None and r["saved"]["params"] == tr["params"]
    assert r["noverifier"]["raises"] and r["specforge"]["raises"]
    rl = r["relayout"]
    assert rl["raises"] is None and 0 < rl["fraction"] < 1, rl
    assert rl["params"]["layers.0.self_attn.q_proj.weight"] == "init"
    assert (
        rl["params"]["fc.weight"] == "src"
        and "midlayer.self_attn.q_proj.weight" not in rl["params"]
    )


# --- the comparison -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report():
    _need_replay()
    trainers = [t for t in td.TRAINERS if td.have_trainer(t)]
    if not trainers:
        pytest.skip("; ".join(td.skip_reason(t) for t in td.TRAINERS))
    rep = td.run(trainers=trainers)
    out = os.environ.get("WEIGHTCHECK_TRAINER_DIFFERENTIAL_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(td.report_json(rep), f, indent=1)
    return rep


@pytest.mark.parametrize("trainer", td.TRAINERS)
def test_no_disagreements(report, trainer):
    if not td.have_trainer(trainer):
        pytest.skip(td.skip_reason(trainer))
    cs = [c for c in report.cases if c.trainer == trainer]
    assert len(cs) >= MIN_LLAMA_VARIANTS
    rows = [r for r in report.rows if r.case.startswith(trainer + "/")]
    assert not rows, f"{len(rows)} disagreements:\n" + td.table(rows)


def test_both_outcomes_occur(report):
    """The corpus exercises both answers on each trainer: some cases load, some raise (a
    comparison where everything raised would prove little)."""
    for t in {c.trainer for c in report.cases}:
        recs = [report.records[c.id] for c in report.cases if c.trainer == t]
        assert any(r["raises"] is None for r in recs) and any(r["raises"] for r in recs), t


# --- fused projections (docs/differential.md R34) -----------------------------------------------------


def test_fused_drafters_in_the_trainers_and_the_commands_printed_for_them(tmp_path):
    """qkv_proj / gate_up_proj (tests/helpers/hurried.py fused*) in each trainer's own code: the
    replay says what the trainer does (SpecForge raises: the parts stay missing; speculators
    loads SRC and leaves the parts at init), and the command check prints for it
    (WC908 / WC903), run as printed, writes a drafter the trainer initializes completely."""
    _need_replay()
    import shlex

    from conftest import run_cli
    from helpers import hurried

    from weightcheck import api

    trainers = [t for t in td.TRAINERS if td.have_trainer(t)]
    if not trainers:
        pytest.skip("; ".join(td.skip_reason(t) for t in td.TRAINERS))
    qkv, gate_up = hurried.FUSED
    srcs = {
        k: hurried.BUILDERS[k](tmp_path / k)
        for k in ("fused", "fused-qkv", "fused-gate-up", "fused-speculators")
    }
    srcs["fused-qkv-speculators"] = hurried.fused(
        tmp_path / "fqs", which=(qkv,), src=hurried.SPECULATORS, prefix="layers.0."
    )
    cases, printed = [], {}
    for t in trainers:
        for k, src in srcs.items():
            cases.append(td.Case(f"{t}/{k}", t, str(src), td.TRAINING_CONFIG[t], corpus.TARGET))
            rep = api.check(str(src), training_config=td.TRAINING_CONFIG[t], target=corpus.TARGET)
            fixes = {
                f["fix"]
                for f in rep.report["findings"]
                if f["code"] in ("WC903", "WC908") and f["fix"]
            }
            if not fixes:  # SpecForge and a speculators layout: input_norm has no place there
                assert (t, k) in {
                    ("specforge", "fused-speculators"),
                    ("specforge", "fused-qkv-speculators"),
                }
                continue
            (fix,) = fixes
            out = tmp_path / "out" / t / k
            subst = {"SRC": str(src), "OUT": str(out), "TARGET": corpus.TARGET}
            words = [subst.get(w, w) for w in shlex.split(fix)]
            assert run_cli(*words[1:]).exit_code == 0, fix
            printed[(t, k)] = fix
            cases.append(td.Case(f"{t}/{k}+fix", t, str(out), td.TRAINING_CONFIG[t], corpus.TARGET))
    recs = {}
    for t in trainers:
        jobs = [c.job() for c in cases if c.trainer == t]
        (tmp_path / t).mkdir()
        recs.update(_oracle(t, tmp_path / t, jobs))
    rows = [row for c in cases for row in td.compare(c, td.replay(c), recs[c.id])]
    assert not rows, td.table(rows)
    parts = {n: [p.rsplit(".", 2)[-2] for p in ps] for n, ps in hurried.FUSED.items()}
    for c in cases:
        rec, k = recs[c.id], c.id.split("/", 1)[1]
        if k.endswith("+fix"):  # the printed command's output: every part from SRC
            assert rec["raises"] is None, (c.id, rec["raises"])
            chance = rec.get("by_chance") or {}  # an absent embedding: init or the target's
            left = [n for n, o in rec["params"].items() if o == "init" and n not in chance]
            assert not left, (c.id, left)
            assert rec["fraction"] == 1.0 or chance, (c.id, rec["fraction"])
            continue
        if c.trainer == "specforge":
            assert "is missing draft weights required" in rec["raises"], (c.id, rec["raises"])
        elif k.endswith("speculators"):  # loads; the fused tensor's parts at init
            held = [qkv] if "qkv" in k else [qkv, gate_up]
            for n in held:
                for p in parts[n]:
                    (name,) = [x for x in rec["params"] if x.endswith(f".{p}.weight")]
                    assert rec["params"][name] == "init", (c.id, name)
            assert 0 < rec["fraction"] < 1
        else:  # a SpecForge-layout config: speculators refuses it first
            assert "non-speculator model config" in rec["raises"], rec["raises"]
    assert {k for _, k in printed} >= {"fused", "fused-qkv", "fused-gate-up", "fused-speculators"}
