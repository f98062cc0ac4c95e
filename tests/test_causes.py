"""One cause, one finding (the served-view issue, item 7; the [[rule.WCnnn.explains]]
entries of mappings/rules.toml).

Each case is a real mistake at the byte level on the SpecForge fixture: check lists one root
finding with its consequences under it, never the consequences beside it, and exits as before.
"""

from __future__ import annotations

import copy
import struct

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import (
    consequences_of,
    fixture_variant,
    said,
)
from helpers.text import diagnostics

from weightcheck import mappings
from weightcheck.errors import WeightcheckError
from weightcheck.rules import causes
from weightcheck.rules.base import Finding
from weightcheck.storage.writer import OutTensor

SRC = PRODUCERS / "specforge-sglang"


def check(src, *args):
    r = run_cli("check", src, *args, "--json")
    assert r.exit_code in (0, 1), r
    return r.exit_code, r.json


def _fc_2h(ts):
    out = []
    for t in ts:
        if t.name == "fc.weight":
            h = t.shape[0]
            t = OutTensor(t.name, t.dtype, (h, 2 * h), t.data[: h * 2 * h * 2])
        out.append(t)
    return out


def _d2t_out_of_range(ts):
    out = []
    for t in ts:
        if t.name == "d2t":
            n = t.shape[0]
            t = OutTensor("d2t", "I64", t.shape, struct.pack(f"<{n}q", *[10**6] * n))
        out.append(t)
    return out


CASES = {
    # name: (config edit, tensor edit, engine, the one top-level code, {code explained: count})
    "fc-2h-wide": (None, _fc_2h, "sglang", "WC402", {"WC206": 1, "WC703": 1, "WC704": 1}),
    "32-layers": (
        lambda c: c.update(num_hidden_layers=32),
        None,
        "vllm",
        "WC406",
        {"WC704": None},  # every parameter of layers 1..31
    ),
    "head-missing": (
        None,
        lambda ts: [t for t in ts if t.name != "lm_head.weight"],
        "sglang",
        "WC302",
        {"WC704": 1},
    ),
    "draft-vocab-null-own-head": (
        lambda c: c.update(draft_vocab_size=None),
        None,
        "sglang",
        "WC301",
        {"WC304": 1, "WC309": 1, "WC703": 1},
    ),
    "tied-own-head": (
        lambda c: c.update(tie_word_embeddings=True),
        None,
        "sglang",
        "WC303",
        {"WC702": 1},
    ),
    "d2t-out-of-range": (None, _d2t_out_of_range, "sglang", "WC306", {"WC310": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_cause_is_one_finding(tmp_path, case):
    cfg_edit, tensors_edit, engine, root_code, explained = CASES[case]
    src = fixture_variant(tmp_path, case, cfg_edit, tensors_edit)
    code, r = check(src, "--engine", engine)
    assert code == 1
    errors = [f for f in r["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errors] == [root_code], [f["code"] for f in r["findings"]]
    assert r["summary"]["errors"] == 1
    (root,) = errors
    for c, n in explained.items():
        under = consequences_of(root, c)
        assert under and (n is None or len(under) == n), (c, root)
        assert not [f for f in r["findings"] if f["code"] == c]  # never beside the root
    if case == "32-layers":
        subjects = {f["subject"].split(".")[1] for f in consequences_of(root, "WC704")}
        assert subjects == {str(i) for i in range(1, 32)}
        assert "build 32 decoder layers" in said(root) or "builds 32" in said(root)


def test_the_table_shows_consequences_under_their_root(tmp_path):
    src = fixture_variant(tmp_path, "fc", tensors_edit=_fc_2h)
    r = run_cli("check", src, "--engine", "sglang")
    found = diagnostics(r.stdout)
    root = next(i for i, d in enumerate(found) if d.startswith("WC402"))
    assert found[root + 1].startswith("↳ WC206") and any(
        d.startswith("↳ WC703") for d in found[root:]
    )
    concise = run_cli("check", src, "--engine", "sglang", "--format", "concise").stdout
    assert (
        "(explains WC206, WC703, WC704)" in concise and "WC703 " not in concise.split("explains")[0]
    )


def test_many_consequences_of_one_code_are_one_row(tmp_path):
    src = fixture_variant(tmp_path, "l32", lambda c: c.update(num_hidden_layers=32))
    out = run_cli("check", src, "--engine", "sglang").stdout
    rows = [d for d in diagnostics(out) if d.startswith("↳ WC704")]
    # 31 layers at init, 9 parameters each: SGLang's later layers build input_layernorm but never
    # read it (sglang 0.5.23 models/llama_eagle3.py:97-105), so it is no loss
    # one row naming all 279 as nine tensor kinds over the layer range (rules/grouping.py)
    assert len(rows) == 1 and rows[0].count("layers.[1-31].") == 9, rows
    assert "more" not in rows[0]
    j = check(src, "--engine", "sglang")[1]
    assert len(consequences_of(j["findings"][0], "WC704")) == 279  # --json keeps each


def test_a_clean_drafter_has_no_consequences():
    code, r = check(SRC, "--engine", "sglang")
    assert code == 0 and all(f["consequences"] == [] for f in r["findings"])


# --- fold, on findings made here ----------------------------------------------------------------
def table_of(*entries) -> tuple:
    """A table of causes, in the order given: {"root", "explains", "subject"}."""
    return tuple(causes.Cause(e["root"], tuple(e["explains"]), e["subject"], "") for e in entries)


def F(code, sev="error", subject=None):
    return Finding(code, sev, f"{code} message", subject, code.lower())


def test_fold_same_subject_any_and_pattern():
    table = table_of(
        {"root": "WC206", "explains": ["WC703"], "subject": "same"},
        {"root": "WC306", "explains": ["WC310"], "subject": "any"},
        {"root": "WC406", "explains": ["WC704"], "subject": "^layers\\.[1-9]"},
    )
    fs = [
        F("WC206", subject="fc.weight"),
        F("WC703", subject="fc.weight"),
        F("WC703", subject="lm_head.weight"),  # another subject: stays
        F("WC306", subject="d2t"),
        F("WC310", subject="t2d"),
        F("WC406", "warning", "num_hidden_layers"),
        F("WC704", subject="layers.1.mlp.up_proj.weight"),
        F("WC704", subject="layers.0.mlp.up_proj.weight"),  # layer 0: not the layer count's
    ]
    out = causes.fold(fs, table)
    top = {(f.code, f.subject): f for f in out}
    assert set(top) == {
        ("WC206", "fc.weight"),
        ("WC703", "lm_head.weight"),
        ("WC306", "d2t"),
        ("WC406", "num_hidden_layers"),
        ("WC704", "layers.0.mlp.up_proj.weight"),
    }
    assert [c.subject for c in top["WC206", "fc.weight"].consequences] == ["fc.weight"]
    assert [c.code for c in top["WC306", "d2t"].consequences] == ["WC310"]
    # a warning root of an error consequence becomes an error: the exit status stays
    assert top["WC406", "num_hidden_layers"].severity == "error"


def test_fold_named_takes_what_the_root_message_names():
    """ "named": a consequence whose subject the root's message names, as a whole name (not
    fc.weight inside model.fc.weight, not a prefix of a longer name)."""
    table = table_of({"root": "WC211", "explains": ["WC206"], "subject": "named"})
    a, b = "midlayer.self_attn.kv_a_proj_with_mqa.weight", "midlayer.self_attn.kv_b_proj.weight"
    root = Finding("WC211", "error", f"{a} holds [256, 64] and {b} holds [80, 256]: swapped", a)
    fs = [
        root,
        F("WC206", subject=a),
        F("WC206", subject=b),
        F("WC206", subject="midlayer.self_attn.kv_b_proj"),  # a prefix of a named name: stays
        F("WC206", subject="fc.weight"),  # not named: stays
    ]
    out = causes.fold(fs, table)
    top = {(f.code, f.subject): f for f in out}
    assert [c.subject for c in top["WC211", a].consequences] == [a, b]
    assert ("WC206", "fc.weight") in top and ("WC206", "midlayer.self_attn.kv_b_proj") in top


def test_fold_nests_a_root_that_is_itself_explained():
    table = table_of(
        {"root": "WC206", "explains": ["WC703"], "subject": "same"},
        {"root": "WC402", "explains": ["WC206"], "subject": "same"},
    )
    out = causes.fold(
        [F("WC206", subject="fc"), F("WC402", subject="fc"), F("WC703", subject="fc")], table
    )
    assert [f.code for f in out] == ["WC402"]
    assert [f.code for f in out[0].consequences] == ["WC206"]
    assert [f.code for f in out[0].consequences[0].consequences] == ["WC703"]
    assert Finding.from_dict(out[0].as_dict()) == out[0]


def rules_with(code, explains, order=None) -> dict:
    """mappings/rules.toml as parsed, with ``explains`` as rule ``code``'s causes."""
    raw = copy.deepcopy(mappings.load("rules.toml"))
    raw["rule"][code]["explains"] = explains
    if order is not None:
        raw["cause_order"] = order
    return raw


@pytest.mark.parametrize(
    "code, explains, order, words",
    [
        (
            "WC206",
            [{"codes": ["WC703"], "subjekt": "same", "why": "w"}],
            None,
            "rule.WC206.explains[0].subjekt: unknown key; allowed: codes, why, subject",
        ),
        ("WC206", [{"codes": ["WC999"], "why": "w"}], None, "no rule 'WC999'"),
        ("WC206", [{"codes": [], "why": "w"}], None, "must list the codes it explains"),
        ("WC206", [{"codes": ["WC703"], "why": "w", "subject": "("}], None, "subject: not one of"),
        ("WC101", [{"codes": ["WC703"], "why": "w"}], None, "cause_order: does not name 'WC101'"),
        ("WC206", [], ["WC206"], "cause_order: 'WC206' is no rule with"),
    ],
)
def test_the_table_fails_loudly(code, explains, order, words):
    with pytest.raises(WeightcheckError) as e:
        causes.load(rules_with(code, explains, order), "mappings/rules.toml")
    assert words in str(e.value) and str(e.value).startswith("mappings/rules.toml: ")


def test_the_shipped_table_loads_and_each_root_page_says_what_it_explains():
    table = causes.table()
    assert table and {c.root for c in table} >= {"WC206", "WC301", "WC302", "WC402", "WC406"}
    r = run_cli("rule", "WC402")
    assert "Explains: WC206, WC703, WC704" in " ".join(r.stdout.split())
