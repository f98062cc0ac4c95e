"""The differential test: weightcheck's replay of each engine's loader against the engine's own
loader, variant by variant, fact by fact (docs/differential.md).

    python tests/engine/differential.py [--out DIR] [--report FILE.json] [--only ID ...]
                                        [--engines sglang,vllm] [--records DIR]

1. writes the corpus (tests/engine/corpus.py) under DIR (a temporary folder by default);
2. starts one subprocess per engine oracle for the whole corpus (tests/engine/sglang_oracle.py
   in the SGLang side venv, tests/engine/vllm_oracle.py in the vLLM one; both run at once), with
   the interpreters found as the engine tests find them: WEIGHTCHECK_SGLANG_PYTHON /
   WEIGHTCHECK_VLLM_PYTHON, else ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/<engine>/bin/python;
3. meanwhile replays each variant in-process through the CLI's stable JSON interface
   (``weightcheck check SRC --engine E --target target-llama --explain --json``, click's runner);
4. normalizes both sides to one vocabulary of facts and prints one row per (variant, engine,
   fact) where they differ: ``replay says X, engine says Y``. A fact the replay has no notion of
   at all is its own category, "replay does not model F".

The facts, and how each side is read (the rules are also in docs/differential.md):

* ``starts`` — engine: the oracle's ``started`` (else ``fails at <stage>: <error>``). Replay: it
  does NOT start when a tensor's fate is ``error``, or a finding says the engine cannot read the
  config: WC701 (architectures[0] selects no EAGLE-3 loader), WC705 (a required config field is
  absent), WC706 on ``transformer_layer_config`` (a speculators config the engine cannot parse),
  WC201 (no config.json); otherwise it starts. Shape findings (WC206) are engine-independent
  and are not counted.
* ``key <name>`` — what became of each checkpoint tensor: ``loaded:<param>`` (the engine
  parameter, q/k/v and gate/up shards folded into the fused parameter; d2t -> ``hot_token_id`` in
  SGLang, ``draft_id_to_target_id`` in vLLM), ``dropped`` (silently, or skipped like t2d), or
  ``error`` (loading stops on it). Engine: the oracle's fate of each key, as the oracle records
  it (docs/engine-test.md, "keys"); a key whose fate is ``not_reached`` (the engine stopped
  before it got to it) is not compared.
* ``param <name>`` — each engine parameter's final state: ``loaded`` | ``partial`` | ``init`` |
  ``from_target``. Replay: ``random`` and ``optional-absent`` are ``init``; a fused parameter is
  ``partial`` when some of its shards are loaded and some not. Compared when the engine started.
  A parameter the replay does not list at all is "replay does not model".
* ``draft_vocab_size`` — the draft vocabulary the built model uses. Engine: the oracle's
  ``config.draft_vocab_size``; SGLang reports null for absent or null (it reads the config before
  the model is built), and builds V on null, so a null from a model that was built reads
  ``null``. Replay: its engine config value (a number, ``null`` when the config says null, the
  engine default when absent); for SGLang, a value not read from `draft_vocab_size` itself (the
  MLA drafter's getattr default) is ``null``. Compared when the engine built the model.
* ``dtype`` — the dtype the engine builds the draft in. The replay has no such fact.
* ``aux_ids`` — the ids the engine passes to the target. Engine: ``default`` when the oracle
  says ``config.aux_layer_ids_from: default``, else ``config.aux_layer_ids``, ``none`` when it
  captures nothing. Replay: ``aux_layers.ids``; none read -> ``default``.
* ``captured_layers`` — the target layers captured, in the order the drafter receives them:
  replay ``aux_layers.captures_output_of_layers``, engine ``config.captured_layers``; nothing
  captured is null on both sides. Compared as lists (order and repeats matter: fc's input slots
  follow them).
* ``tied_head`` — whether the draft head is the embedding module: engine, the built model has no
  ``lm_head.weight`` parameter; replay, its parameters have no ``lm_head.weight``.

MLA drafters (corpus.is_mla: the variants of tests/fixtures/producers/mla-*) are written and
loaded by both oracles like the others, but compared only when this checkout's weightcheck
replays the MLA loader (:func:`replay_knows_mla`); until then ``Report.pending`` lists them with
the reason, and no replay is run for them.

Library use: :func:`run` returns a :class:`Report`; tests/test_engine_differential.py asserts
that its ``disagreements`` list is empty.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import corpus  # noqa: E402

if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
import schema_check  # noqa: E402
from helpers.engine import read_oracle_records, side_python_path  # noqa: E402

ENGINES = ("sglang", "vllm")
ORACLES = {"sglang": "sglang_oracle.py", "vllm": "vllm_oracle.py"}
ENV_PYTHON = {"sglang": "WEIGHTCHECK_SGLANG_PYTHON", "vllm": "WEIGHTCHECK_VLLM_PYTHON"}
SETUP = {"sglang": "setup_sglang_venv.sh", "vllm": "setup_vllm_venv.sh"}
ORACLE_TIMEOUT = 1800
NOT_MODELED = "replay does not model"
DISAGREE = "disagree"
# replay findings that mean "the engine does not start" (see the module docstring)
FATAL_FINDINGS = {"WC701", "WC705", "WC201"}


def engine_python(engine: str) -> str:
    """The side venv's interpreter (may not exist: callers check): tests/helpers/engine.py's."""
    return side_python_path(engine)


def have_engine(engine: str) -> bool:
    p = engine_python(engine)
    return os.path.isfile(p) and os.access(p, os.X_OK)


@dataclass
class Row:
    variant: str
    engine: str
    fact: str
    replay: str
    engine_says: str
    category: str  # DISAGREE | NOT_MODELED

    def as_dict(self) -> dict:
        return dict(self.__dict__)


MLA_PENDING = f"replay of {corpus.MLA_ARCHITECTURE} not in this checkout"


def replay_knows_mla(engine: str) -> bool:
    """Whether this checkout's weightcheck replays the MLA drafter loader for ``engine``: the
    engine data say so (``weightcheck.engines.data.replays`` of the ``deepseek_mla_eagle3``
    inventory) or ``check --engine`` on the mla-modelopt fixture gives an engine view. Until then
    the MLA variants are written and loaded by the oracles but not compared."""
    try:
        from weightcheck.engines import data
        from weightcheck.model import inventory

        if data.replays(inventory.by_name("deepseek_mla_eagle3"), engine):
            return True
    except Exception:  # noqa: BLE001 - an older/newer API: fall back to asking the CLI
        pass
    j = replay(os.path.join(corpus.PRODUCERS, corpus.MLA_BASES["mm"]), engine)
    return bool(j.get("engine"))


@dataclass
class Report:
    variants: list
    engines: tuple
    rows: list = field(default_factory=list)
    # (engine, variant id) -> why it was not compared (MLA variants without a replay)
    pending: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)  # (engine, id) -> oracle record
    replays: dict = field(default_factory=dict)  # (engine, id) -> CLI JSON

    @property
    def disagreements(self) -> list:
        return self.rows

    def counts(self) -> dict:
        out: dict = {}
        for r in self.rows:
            k = (r.category, r.engine, r.fact.split(" ")[0])
            out[k] = out.get(k, 0) + 1
        return out


# --- running the two sides -------------------------------------------------------------------------


def start_oracle(engine: str, paths: list[str], jsonl: str, cwd: str) -> subprocess.Popen:
    cmd = [engine_python(engine), os.path.join(HERE, ORACLES[engine]), "--target", corpus.TARGET]
    if engine == "sglang":
        cmd.append("--details")  # key_order, writers, shards (the winners of duplicates)
    cmd += ["--jsonl", jsonl, *paths]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)  # the venv's own packages only
    err = open(jsonl + ".stderr", "w")
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd, start_new_session=True
    )


def replay(path: str, engine: str, strict: bool = True) -> dict:
    """``weightcheck check PATH --engine E --target target-llama --explain --json`` in-process.
    Its output must validate against its schema: an assertion, or with ``strict`` false the
    report with ``_schema_errors`` (the generative differential makes it a row and goes on)."""
    from click.testing import CliRunner

    from weightcheck.cli import main

    args = ["check", path, "--engine", engine, "--target", corpus.TARGET, "--explain", "--json"]
    r = CliRunner().invoke(main, args, catch_exceptions=True)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        err = getattr(r, "stderr", "") or repr(r.exception)
        return {"_cli_failed": r.exit_code, "_stderr": err.strip().splitlines()[-1:]}
    if strict:
        schema_check.validate(report)  # every --json output of the suite: its schema
    else:
        schema = schema_check.schema_for(report["schema"])
        found = schema_check.errors(report, schema, schema)
        if found:
            report["_schema_errors"] = found[:5]
    return report


# --- normalization ---------------------------------------------------------------------------------


def _base_param(p: str | None) -> str | None:
    return p.split("[")[0].split(" ")[0] if p else p


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v)


def replay_facts(j: dict, engine: str, runner: str | None = None) -> dict:
    """The replay's facts (see the module docstring); ``{"view": ...}`` when there is no view."""
    if "_cli_failed" in j:
        return {"view": f"check could not run (exit {j['_cli_failed']}: {j['_stderr']})"}
    if j.get("schema") == "weightcheck.error/1":
        return {"view": f"check could not run (exit {j.get('exit_status')}: {j.get('error')})"}
    e = j.get("engine")
    if not e:
        codes = [f["code"] for f in j.get("findings", [])]
        return {"view": f"no engine view (architecture {j.get('architecture')}, findings {codes})"}
    facts: dict = {}
    findings = j.get("findings", [])
    why = []
    for t in e["tensors"]:
        if t["fate"] == "error":
            why.append(f"{t['name']}: error")
    for f in findings:
        if f["code"] in FATAL_FINDINGS or (
            f["code"] == "WC706" and f.get("subject") == "transformer_layer_config"
        ):
            why.append(f["code"])
    facts["starts"] = "starts" if not why else "fails (" + ", ".join(why) + ")"
    if "starts" in e:  # the replay's own verdict (weightcheck/engines/view.py EngineView.facts)
        f = e.get("fails") or {}
        facts["starts"] = (
            "starts" if e["starts"] else f"fails at {f.get('stage')}: {f.get('why')}"[:200]
        )
    if "dtype" in e:
        facts["dtype"] = e["dtype"]
    facts["winners"] = {p["param"]: p["winner"] for p in e["parameters"] if p.get("winner")}

    d2t_params = {
        _base_param(p["param"]) for p in e["parameters"] if p["canonical"] == "d2t" and p["param"]
    }
    keys: dict = {}
    for t in e["tensors"]:
        fate = t["fate"]
        if fate == "loaded":
            val = "loaded:" + _base_param(t["param"])
        elif fate == "special":  # d2t consumed by special code: the map it becomes
            m = re.match(r"[A-Za-z_]\w*", t.get("why") or "")
            tok = m.group(0) if m else ""
            known = d2t_params | {"hot_token_id", "draft_id_to_target_id"}
            val = "loaded:" + tok if tok in known else "dropped"
        elif fate == "error":
            val = "error"
        elif fate in ("dropped", "skipped", "warned"):
            val = "dropped"
        elif fate == "unknown":  # the replay does not say (another class is built): skipped
            val = "unknown"
        else:  # a fate this comparison does not know: no fact (not a disagreement)
            continue
        prev = keys.get(t["name"])
        keys[t["name"]] = val if prev in (None, val) else f"{prev} | {val}"
    facts["keys"] = keys

    shards: dict = {}
    for p in e["parameters"]:
        name = _base_param(p["param"])
        if not name or name == "hot_token_id":  # SGLang's d2t: not a parameter (keys say it)
            continue
        st = {"random": "init", "optional-absent": "init"}.get(p["state"], p["state"])
        shards.setdefault(name, []).append(st)
    params = {}
    for name, states in shards.items():
        s = set(states)
        if len(s) == 1:
            params[name] = states[0]
        elif s <= {"loaded", "init"}:
            params[name] = "partial"
        else:
            params[name] = "/".join(sorted(s))
    facts["params"] = params
    facts["tied_head"] = e.get(
        "tied_head", not any(p["canonical"] == "lm_head.weight" for p in e["parameters"])
    )

    vd = e["config"].get("draft_vocab_size") or {}
    if "value" in vd and e.get("name") == "sglang" and vd.get("from") != "draft_vocab_size":
        # SGLang's oracle reads the config attribute before the model is built: unset (absent,
        # or null read as absent: the MLA drafter's getattr) is null there, whatever the replay's
        # engine default builds
        facts["draft_vocab_size"] = "null"
    elif "value" in vd:
        v = vd["value"]
        if v is None:
            facts["draft_vocab_size"] = (
                "null" if vd.get("from") == "draft_vocab_size" else f"none ({vd.get('from')})"
            )
        else:
            facts["draft_vocab_size"] = v
    aux = e.get("aux_layers") or {}
    ids = aux.get("ids")
    captured = e.get("captured_layers", aux.get("captures_output_of_layers"))
    # the runner the oracle ran (vLLM's CPU build: V1), when the replay's default is another
    for r in aux.get("runners") or []:
        if runner and r["name"] == runner:
            ids, captured = r["ids"], r.get("captures_output_of_layers")
    facts["aux_ids"] = "default" if ids is None else ids
    if aux.get("captures") is False:  # use_aux_hidden_state false
        facts["aux_ids"] = "none"
    # nothing captured is null, as in the oracles' records
    facts["captured_layers"] = captured or None
    return facts


# the slice of a fused parameter a checkpoint name fills: q/k/v, gate/up 0/1, and the MLA
# down-projection's halves by vLLM's shard ids (fused_qkv_a_proj: q_a_proj 0, kv_a_proj_with_mqa 1;
# SGLang's cat([q_a, kv_a]) pieces, recorded by its oracle as cat0/cat1, read the same)
_SHARD = {
    ".q_proj": "q",
    ".k_proj": "k",
    ".v_proj": "v",
    ".gate_proj": "0",
    ".up_proj": "1",
    ".q_a_proj": "0",
    ".kv_a_proj_with_mqa": "1",
}


def _shard(key: str) -> str:
    return next((s for sub, s in _SHARD.items() if sub in key), "")


def _winners(engine: str, rec: dict, order: list[str]) -> dict:
    """param[shard] -> the tensor that wrote it last, where two or more tensors wrote the same
    slice (e.g. midlayer.X and layers.0.X). SGLang: its writers list; vLLM: the last of its
    iterator order (it loads every collected tensor in that order)."""
    out = {}
    if engine == "sglang":
        shards = (rec.get("sglang") or {}).get("shards") or {}
        for p, ks in ((rec.get("sglang") or {}).get("writers") or {}).items():
            by: dict = {}
            for k in ks:
                if k is None:
                    continue
                by.setdefault(str(shards.get(k, "")).removeprefix("cat"), []).append(k)
            for sh, ks2 in by.items():
                if len(set(ks2)) > 1:
                    out[f"{p}[{sh}]" if sh else p] = ks2[-1]
        return out
    by = {}
    for k in order:
        for p in rec["keys"].get(k, {}).get("params") or []:
            by.setdefault((p, _shard(k)), []).append(k)
    for (p, sh), ks in by.items():
        if len(set(ks)) > 1:
            out[f"{p}[{sh}]" if sh else p] = ks[-1]
    return out


def engine_facts(rec: dict, engine: str) -> dict:
    facts: dict = {}
    if rec["started"]:
        facts["starts"] = "starts"
    else:
        facts["starts"] = f"fails at {rec['stage']}: {(rec['error'] or '')[:160]}"
    stage = rec["stage"]
    reached_load = rec["started"] or stage in ("load", "bind")
    built = reached_load and bool(rec["params"])
    details = rec.get("sglang") or {}
    if engine == "sglang":
        order = list(details.get("key_order") or rec["keys"])
    else:
        order = list(rec["keys"])
    if reached_load:
        keys = {}
        for k, e in rec["keys"].items():
            if e["fate"] == "not_reached":
                continue  # the engine stopped before it: not compared
            if e["fate"] == "error":
                keys[k] = "error"
            elif e["params"]:
                keys[k] = "loaded:" + " + ".join(sorted(set(e["params"])))
            else:
                keys[k] = "dropped"
        facts["keys"] = keys
    if rec["started"]:
        facts["params"] = {n: p["state"] for n, p in rec["params"].items()}
        facts["winners"] = _winners(engine, rec, order)
    if built:
        facts["tied_head"] = "lm_head.weight" not in rec["params"]
        cfg = rec.get("config") or {}
        vd = cfg.get("draft_vocab_size")
        facts["draft_vocab_size"] = "null" if vd is None else vd
        facts["dtype"] = cfg.get("dtype")
    cfg = rec.get("config") or {}
    # SGLang sets the capture at its config step (details: layers_to_capture, once it did);
    # vLLM at its bind step, so only a drafter that started has them
    capture_known = (
        details.get("layers_to_capture") is not None if engine == "sglang" else rec["started"]
    )
    if cfg and (capture_known or (engine == "sglang" and cfg.get("aux_layer_ids") is not None)):
        if cfg.get("aux_layer_ids_from") == "default":
            facts["aux_ids"] = "default"
        elif cfg.get("aux_layer_ids") is not None:
            facts["aux_ids"] = cfg["aux_layer_ids"]
        else:
            facts["aux_ids"] = "none"  # captures nothing
    if cfg and capture_known:
        facts["captured_layers"] = cfg.get("captured_layers")
    return facts


def compare(vid: str, engine: str, rf: dict, ef: dict) -> list[Row]:
    rows: list[Row] = []

    def add(fact, r, e, cat=DISAGREE):
        rows.append(Row(vid, engine, fact, _fmt(r), _fmt(e), cat))

    if "view" in rf:
        add("view", rf["view"], ef["starts"], NOT_MODELED)
        return rows
    if (rf["starts"] == "starts") != (ef["starts"] == "starts"):
        add("starts", rf["starts"], ef["starts"])
    if "keys" in ef:
        for k, ev in ef["keys"].items():
            rv = rf["keys"].get(k)
            if rv == "unknown":
                continue
            if rv is None:
                add(f"key {k}", "(no such tensor)", ev)
            elif rv != ev:
                add(f"key {k}", rv, ev)
    if "params" in ef:
        for p, ev in ef["params"].items():
            rv = rf["params"].get(p)
            if rv is None:
                add(f"param {p}", "-", ev, NOT_MODELED)
            elif rv != ev:
                add(f"param {p}", rv, ev)
        for p, rv in rf["params"].items():
            if p not in ef["params"]:
                add(f"param {p}", rv, "(no such parameter)")
    for p, k in (ef.get("winners") or {}).items():
        rv = (rf.get("winners") or {}).get(p)
        if "winners" not in rf:
            add(f"winner {p}", "-", k, NOT_MODELED)
        elif rv != k:
            add(f"winner {p}", rv or "-", k)
    for fact in ("tied_head", "draft_vocab_size", "aux_ids", "captured_layers"):
        if fact in ef and ef[fact] != rf.get(fact):
            add(fact, rf.get(fact), ef[fact])
    if "dtype" in ef and "dtype" not in rf:
        add("dtype", "-", ef["dtype"], NOT_MODELED)
    elif "dtype" in ef and rf["dtype"] != ef["dtype"]:
        add("dtype", rf["dtype"], ef["dtype"])
    return rows


# --- the whole run ---------------------------------------------------------------------------------


def run(
    out_dir: str | None = None,
    engines=ENGINES,
    only=None,
    keep: bool = False,
    progress=None,
    reuse: bool = False,
) -> Report:
    """``reuse``: take an oracle's records from OUT_DIR/<engine>.jsonl when a previous run left
    one record per variant there (for working on the comparison without re-running engines)."""
    say = progress or (lambda *_: None)
    vs = [v for v in corpus.variants() if not only or v.id in only]
    tmp = out_dir or tempfile.mkdtemp(prefix="wc-differential-")
    rep = Report(variants=vs, engines=tuple(engines))
    try:
        t0 = time.time()
        root = os.path.join(tmp, "corpus")
        paths = {v.id: corpus.write(v, os.path.join(root, v.id)) for v in vs}
        rep.seconds["write"] = round(time.time() - t0, 2)
        say(f"corpus: {len(vs)} variants in {rep.seconds['write']} s")
        procs = {}
        for e in engines:
            jsonl = os.path.join(tmp, f"{e}.jsonl")
            if reuse and os.path.exists(jsonl):
                with open(jsonl) as f:
                    old = {json.loads(x)["drafter"] for x in f if x.startswith("{")}
                if old >= set(paths.values()):
                    procs[e] = (None, jsonl, time.time())
                    continue
            if os.path.exists(jsonl):
                os.unlink(jsonl)
            procs[e] = (start_oracle(e, [paths[v.id] for v in vs], jsonl, tmp), jsonl, time.time())
        t1 = time.time()
        mla_ok = {e: replay_knows_mla(e) for e in engines} if any(map(corpus.is_mla, vs)) else {}
        for e in engines:
            for v in vs:
                if corpus.is_mla(v) and not mla_ok[e]:
                    rep.pending[(e, v.id)] = MLA_PENDING
                    continue
                rep.replays[(e, v.id)] = replay(paths[v.id], e)
        rep.seconds["replay"] = round(time.time() - t1, 2)
        say(f"replay: {len(vs) * len(engines)} checks in {rep.seconds['replay']} s")
        for e, (proc, jsonl, ts) in procs.items():
            recs = read_oracle_records(e, proc, jsonl, len(vs), "drafter", ORACLE_TIMEOUT)
            rep.seconds[f"oracle_{e}"] = round(time.time() - ts, 2)
            say(f"{e} oracle: {len(vs)} drafters, {rep.seconds[f'oracle_{e}']} s wall")
            for v in vs:
                rep.records[(e, v.id)] = recs[paths[v.id]]
        for v in vs:
            for e in engines:
                if (e, v.id) in rep.pending:
                    continue
                rf = replay_facts(rep.replays[(e, v.id)], e, rep.records[(e, v.id)].get("runner"))
                ef = engine_facts(rep.records[(e, v.id)], e)
                rep.rows.extend(compare(v.id, e, rf, ef))
        rep.seconds["total"] = round(time.time() - t0, 2)
    finally:
        if not keep and out_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return rep


def table(rows: list[Row], width: int = 70) -> str:
    def cut(s: str) -> str:
        s = s.replace("|", "/").replace("\n", " ")
        return s if len(s) <= width else s[: width - 1] + "…"

    lines = [
        "| category | variant | engine | fact | replay says | engine says |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(
        rows, key=lambda r: (r.category, r.fact.split(" ")[0], r.engine, r.variant, r.fact)
    ):
        lines.append(
            f"| {r.category} | {r.variant} | {r.engine} | {cut(r.fact)} | {cut(r.replay)} | {cut(r.engine_says)} |"
        )
    return "\n".join(lines)


def summary(rep: Report) -> str:
    lines = [f"{len(rep.variants)} variants x {len(rep.engines)} engines: {len(rep.rows)} rows"]
    if rep.pending:
        for e in rep.engines:
            n = sum(1 for (pe, _) in rep.pending if pe == e)
            if n:
                lines.append(f"  {n:5d}  not compared   {e:7s} ({MLA_PENDING})")
    for (cat, eng, kind), n in sorted(rep.counts().items()):
        lines.append(f"  {n:5d}  {cat:22s} {eng:7s} {kind}")
    lines.append(f"  seconds: {rep.seconds}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="keep the corpus and the oracle output in this folder")
    ap.add_argument("--report", help="write every row, replay and oracle record as JSON here")
    ap.add_argument("--only", nargs="*", help="variant ids")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--table", action="store_true", help="print the full table (markdown)")
    ap.add_argument(
        "--reuse", action="store_true", help="with --out: reuse the oracle records left there"
    )
    a = ap.parse_args(argv)
    engines = tuple(e for e in a.engines.split(",") if e)
    for e in engines:
        if not have_engine(e):
            print(
                f"no {e} interpreter: {engine_python(e)} is absent "
                f"(bash tests/engine/{SETUP[e]}, or set {ENV_PYTHON[e]})",
                file=sys.stderr,
            )
            return 2
    rep = run(
        a.out,
        engines,
        set(a.only) if a.only else None,
        keep=bool(a.out),
        progress=lambda m: print("#", m, file=sys.stderr),
        reuse=a.reuse,
    )
    print(summary(rep))
    if a.table:
        print(table(rep.rows))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(
                {
                    "seconds": rep.seconds,
                    "variants": [
                        {"id": v.id, "axes": v.axes, "description": v.description}
                        for v in rep.variants
                    ],
                    "rows": [r.as_dict() for r in rep.rows],
                    "pending": {f"{e}/{i}": why for (e, i), why in rep.pending.items()},
                    "records": {f"{e}/{i}": r for (e, i), r in rep.records.items()},
                    "replays": {f"{e}/{i}": r for (e, i), r in rep.replays.items()},
                },
                f,
                indent=1,
            )
    return 1 if rep.rows else 0


if __name__ == "__main__":
    sys.exit(main())
