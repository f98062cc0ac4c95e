"""The differential test: weightcheck's replay of SGLang's and vLLM's drafter loaders against the
engines' own loaders, over a generated corpus of drafter variants (docs/differential.md).

Opt-in group (marker ``engine``; setup.cfg deselects it by default):
``python -m pytest -m engine tests/test_engine_differential.py``. The engines run in their side
venvs (tests/engine/setup_sglang_venv.sh, setup_vllm_venv.sh; WEIGHTCHECK_SGLANG_PYTHON /
WEIGHTCHECK_VLLM_PYTHON or ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/<engine>/bin/python);
an engine whose interpreter is absent has its tests skipped, with the reason.
WEIGHTCHECK_DIFFERENTIAL_REPORT=FILE keeps every row, replay and oracle record (JSON).

The corpus is tests/engine/corpus.py (>= 450 variants over every axis below); the comparison is
tests/engine/differential.py (one oracle subprocess per engine for the whole corpus, the replay
in-process through ``weightcheck check --engine E --explain --json``).
"""

from __future__ import annotations

import hashlib
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
import differential  # noqa: E402

MIN_VARIANTS = 450
# every axis of the issue, and at least this many variants each
MIN_PER_AXIS = {
    "dialect": 14,  # every producer fixture as written and re-laid-out, + dialect x defect
    "wrapper": 10,  # model., draft_model., module., eagle_module., HF-style
    "missing": 15,
    "extra": 10,
    "typo": 10,
    "duplicate": 8,
    "draft_vocab_size": 10,  # absent, null, wrong
    "tie_word_embeddings": 8,
    "num_hidden_layers": 6,
    "architectures": 12,  # every spelling
    "aux_ids": 20,  # nested, top level, both, none, null, count, order, range
    "dtype": 12,  # fp32 / fp16 / bf16 config x tensors, key spellings
    "config_flags": 8,
    "combination": 40,  # a dialect and a defect together
    "hidden_size": 8,  # narrower than the target, own embedding, both layouts (issue #21)
    "json_type": 12,  # six wrong-typed config values x a SpecForge and a speculators base
    "target_src": 2,  # the target itself, with and without model.
}


def _skip_reason(engine: str) -> str:
    return (
        f"no {engine} interpreter: {differential.engine_python(engine)} is absent (run "
        f"`bash tests/engine/{differential.SETUP[engine]}` or set "
        f"{differential.ENV_PYTHON[engine]})"
    )


# --- the corpus itself (no engine needed) ----------------------------------------------------------


def test_corpus_size_and_axes():
    vs = corpus.variants()
    counts = corpus.axis_counts(vs)
    print(f"\n{len(vs)} variants; per axis: {counts}")
    assert len(vs) >= MIN_VARIANTS, len(vs)
    assert set(counts) == set(MIN_PER_AXIS), counts
    low = {a: (counts[a], n) for a, n in MIN_PER_AXIS.items() if counts[a] < n}
    assert not low, low
    ids = [v.id for v in vs]
    assert len(set(ids)) == len(ids)
    for v in vs:
        assert v.description and v.axes, v.id
        # <base>.<axis>.<detail>, or a group's <group>.<base>.<detail> (ml.sf.2)
        assert v.id.startswith(v.base + ".") or v.id.split(".")[1] == v.base, v.id
    # every producer fixture is a base, and every dialect is exercised with a defect
    assert {v.base for v in vs} == set(corpus.ALL_BASES)
    assert {v.base for v in vs if "combination" in v.axes} == set(corpus.ALL_BASES)


MIN_MLA_VARIANTS = 40


def test_corpus_has_mla_variants():
    """The MLA drafters (Eagle3DeepseekV2ForCausalLM) have their own variants, from both
    published layouts, over the defects the two engines treat differently."""
    mla = [v for v in corpus.variants() if corpus.is_mla(v)]
    assert len(mla) >= MIN_MLA_VARIANTS, len(mla)
    assert {v.base for v in mla} == set(corpus.MLA_BASES)
    ids = {v.id for v in mla}
    for b in corpus.MLA_BASES:  # the cases issue #16 item 4 names, for each layout
        for tag in (
            "asis",
            "relayout",
            "typo.down",
            "miss.q_a_proj",
            "miss.kv_a_proj_with_mqa",
            "wrap.model",
            "wrap.eagle_module",
            "extra.fc_bias",
            "extra.layer1",
            "miss.lm_head",
            "cfg.kv_rank64",
            "swap.kv_a_kv_b",
            "q_proj",
            "fused.sglang",
            "nl2",
        ):
            assert f"{b}.{tag}" in ids, f"{b}.{tag}"
    assert {"mm.vd.d2t_full", "mm.vd.pruned", "mt.vd.absent"} <= ids
    for v in mla:
        if v.config is not None and v.id.endswith(".asis"):
            assert v.config["architectures"] == [corpus.MLA_ARCHITECTURE]


def test_corpus_has_consistency_variants():
    """Issue #21's cases: narrower drafters in both layouts (and a wrong-vocab embedding), six
    wrong JSON types on two bases, the target as SRC, and every aux-id boundary of the 4-layer
    target in eagle_config / top level / both, in both layouts."""
    vs = {v.id: v for v in corpus.consistency_variants()}
    for vid in ("sf.narrow.32", "sf.narrow.32.l0", "sf.narrow.32.embed_v256", "tg.asis"):
        assert vid in vs, vid
    nar = vs["sf.narrow.32.l0"]
    shapes = {t.name: t.shape for _, ts in nar.files for t in ts}
    assert shapes["embed_tokens.weight"] == (corpus.V, 32)
    assert shapes["fc.weight"] == (32, 3 * corpus.H)
    assert "layers.0.hidden_norm.weight" in shapes
    assert nar.config["hidden_size"] == 32 and nar.config["target_hidden_size"] == corpus.H
    for b in ("sf", "st"):
        assert len([i for i in vs if i.startswith(f"{b}.jtype.")]) == 6, b
    assert vs["st.jtype.hidden_str"].config["transformer_layer_config"]["hidden_size"] == "64"
    assert "model.embed_tokens.weight" in vs["tg.asis"].tensor_names
    assert "embed_tokens.weight" in vs["tg.nomodel"].tensor_names
    L = 4  # target-llama's layers
    ids_seen = []
    for place in ("nested", "top", "both"):
        for lay in ("", ".l0"):
            got = [
                v
                for i, v in vs.items()
                if i.startswith("sf.auxb.") and i.endswith(place + lay) and ".diff." not in i
            ]
            ids = [
                (v.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
                or v.config.get("eagle_aux_hidden_state_layer_ids")
                for v in got
            ]
            ids_seen.append(sorted(map(tuple, ids)))
            assert any(i[-1] == L for i in ids) and any(i[-1] == L - 1 for i in ids)
            assert any(-1 in i for i in ids) and any(max(i) > L for i in ids)
            assert any(list(i) != sorted(i) for i in ids)
            assert any(len(set(i)) < len(i) for i in ids)
    assert all(s == ids_seen[0] for s in ids_seen)  # the same ids everywhere


def test_corpus_is_deterministic():
    def digest():
        h = hashlib.sha256()
        for v in corpus.variants():
            h.update(json.dumps([v.id, v.config], sort_keys=True).encode())
            for fname, ts in v.files:
                h.update(fname.encode())
                for t in ts:
                    h.update(f"{t.name}{t.dtype}{t.shape}".encode())
                    h.update(t.data)
        return h.hexdigest()

    corpus._CACHE.clear()
    a = digest()
    corpus._CACHE.clear()
    assert digest() == a


def test_corpus_covers_every_architectures_spelling():
    archs = set()
    for v in corpus.variants():
        if v.config is not None:
            a = v.config.get("architectures", "<absent>")
            archs.add(json.dumps(a))
    for spelling in (
        "LlamaForCausalLMEagle3",
        "Eagle3LlamaForCausalLM",
        "LlamaForCausalLMEagle",
        "Eagle3DraftModel",
        "Eagle3Speculator",
        "LlamaForCausalLM",
    ):
        assert json.dumps([spelling]) in archs, spelling
    assert {'"<absent>"', "[]", "null"} <= archs


# --- the differential run --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    engines = tuple(e for e in differential.ENGINES if differential.have_engine(e))
    if not engines:
        pytest.skip("; ".join(_skip_reason(e) for e in differential.ENGINES))
    out = tmp_path_factory.mktemp("differential")
    rep = differential.run(str(out), engines, keep=True)
    print("\n" + differential.summary(rep))
    path = os.environ.get("WEIGHTCHECK_DIFFERENTIAL_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(
                {
                    "seconds": rep.seconds,
                    "rows": [r.as_dict() for r in rep.rows],
                    "pending": {f"{e}/{i}": why for (e, i), why in rep.pending.items()},
                    "records": {f"{e}/{i}": r for (e, i), r in rep.records.items()},
                    "replays": {f"{e}/{i}": r for (e, i), r in rep.replays.items()},
                },
                f,
                indent=1,
            )
    return rep


def _rows(report, engine, category):
    if engine not in report.engines:
        pytest.skip(_skip_reason(engine))
    return [r for r in report.rows if r.engine == engine and r.category == category]


@pytest.mark.parametrize("engine", differential.ENGINES)
def test_every_variant_has_an_engine_record(report, engine):
    """A sanity check on the oracle run: one record per variant, and the corpus really splits
    into drafters that start and drafters that fail (a broken oracle fails everything alike)."""
    if engine not in report.engines:
        pytest.skip(_skip_reason(engine))
    recs = [report.records[(engine, v.id)] for v in report.variants]
    assert len(recs) == len(report.variants)
    started = sum(r["started"] for r in recs)
    assert started >= len(recs) // 2, started
    assert len(recs) - started >= 20, started


@pytest.mark.parametrize("engine", differential.ENGINES)
def test_mla_variants_have_engine_records(report, engine):
    """Whether or not the replay knows the MLA loader, the engine loaded every MLA variant
    through its own code: both fixtures as written start with every key loaded or (t2d) dropped,
    and the variants split into starting and failing ones."""
    if engine not in report.engines:
        pytest.skip(_skip_reason(engine))
    mla = [v for v in report.variants if corpus.is_mla(v)]
    recs = {v.id: report.records[(engine, v.id)] for v in mla}
    for b in corpus.MLA_BASES:
        r = recs[f"{b}.asis"]
        assert r["started"], (b, r["stage"], r["error"])
        assert r["architecture"] == corpus.MLA_ARCHITECTURE
        fates = {k: e["fate"] for k, e in r["keys"].items()}
        assert {f for k, f in fates.items() if k != "t2d"} == {"loaded"}, fates
    started = sum(r["started"] for r in recs.values())
    assert 0 < started < len(recs), started


@pytest.mark.parametrize("engine", differential.ENGINES)
def test_mla_variants_are_compared(report, engine):
    """The MLA variants against weightcheck's replay of the MLA loader: skipped (with the reason)
    while this checkout's weightcheck does not replay Eagle3DeepseekV2ForCausalLM; then no
    disagreement and no unmodelled fact for any of them."""
    if engine not in report.engines:
        pytest.skip(_skip_reason(engine))
    pending = [i for (e, i) in report.pending if e == engine]
    if pending:
        pytest.skip(f"{differential.MLA_PENDING} ({engine}: {len(pending)} MLA variants)")
    mla = {v.id for v in report.variants if corpus.is_mla(v)}
    assert all((engine, i) in report.replays for i in mla)
    rows = [r for r in report.rows if r.engine == engine and r.variant in mla]
    assert not rows, f"{len(rows)} MLA row(s) ({engine}):\n" + differential.table(rows)


@pytest.mark.parametrize("engine", differential.ENGINES)
def test_replay_agrees_with_the_engine(report, engine):
    """Zero disagreements: for every variant, the replay and the engine's own loader agree on
    whether the engine starts, each tensor's fate, each parameter's final state, the draft
    vocabulary, the aux ids and captured layers, and head tying."""
    rows = _rows(report, engine, differential.DISAGREE)
    assert not rows, f"{len(rows)} disagreement(s) with {engine}:\n" + differential.table(rows)


@pytest.mark.parametrize("engine", differential.ENGINES)
def test_replay_models_every_fact(report, engine):
    """Facts the engine has and the replay has no notion of at all (the built dtype, parameters
    it does not list, which duplicate wins, drafters it cannot view)."""
    rows = _rows(report, engine, differential.NOT_MODELED)
    assert not rows, f"{len(rows)} fact(s) the replay does not model ({engine}):\n" + (
        differential.table(rows)
    )
