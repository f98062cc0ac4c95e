"""Issue #21, item 1: a config value of the wrong JSON type is an error (WC212), one finding per
field, in the user's words; nothing computes with the value (no shape rows, no rule about the
field, no engine parameter sized by it); plain `check`, `check --engine sglang|vllm` and
convert's gate give the same answer, and `convert` refuses."""

from __future__ import annotations

import json
import re

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import by_code, check, copy_fixture, edit

from weightcheck.model import config as config_mod

SRC = "specforge-sglang"
PRODUCERS_SF = PRODUCERS / SRC
# values no engine builds, as the issue lists them: (field, value, message)
BAD = [
    ("hidden_size", "64", 'hidden_size is a string ("64"), expected an integer'),
    ("num_hidden_layers", 1.5, "num_hidden_layers is a number (1.5), expected an integer"),
    ("intermediate_size", True, "intermediate_size is a boolean (true), expected an integer"),
    ("draft_vocab_size", [128], "draft_vocab_size is an array ([128]), expected an integer"),
    (
        "target_hidden_size",
        {"v": 64},
        'target_hidden_size is an object ({"v": 64}), expected an integer',
    ),
    (
        "eagle_config",
        3,
        "eagle_config is an integer (3), expected an object: the fields inside it cannot be read",
    ),
    ("architectures", [7], "architectures[0] is an integer (7), expected a string"),
]
# what leaked before: the evaluator's words, and rows computed from the bad value
INTERNALS = re.compile(r"arithmetic on an unknown value|is not known|shape unknown|in '")


def _bad(tmp_path, fld, value):
    def bad(c):
        # the ids where both engines read them: no aux-location warning beside the one fact
        c["eagle_aux_hidden_state_layer_ids"] = c["eagle_config"][
            "eagle_aux_hidden_state_layer_ids"
        ]
        c.update({fld: value})

    return edit(copy_fixture(SRC, tmp_path / "src"), tmp_path / "x", cfg=bad)


def _top(rep):
    return [(f["code"], f["severity"], f["subject"], f["message"]) for f in rep["findings"]]


@pytest.mark.parametrize("fld,value,message", BAD, ids=[b[0] for b in BAD])
def test_one_error_per_field_and_every_engine_agrees(tmp_path, fld, value, message):
    d = _bad(tmp_path, fld, value)
    code, rep = check(d)
    assert code == 1 and not rep["ok"]
    # the one finding, an error, in the user's words; nothing else computed from the value
    assert _top(rep) == [("WC212", "error", fld, message)], rep["findings"]
    assert not INTERNALS.search(json.dumps(rep["findings"]))
    # the engine lines say it does not start, on that field
    for e, s in rep["engines"].items():
        assert not s["starts"] and fld in s["says"], (e, s["says"])
    for engine in ("sglang", "vllm"):
        code_e, rep_e = check(d, "--engine", engine)
        assert code_e == 1
        wc212 = by_code(rep_e, "WC212")
        assert [(f["severity"], f["subject"], f["message"]) for f in wc212] == [
            ("error", fld, message)
        ]
        # the engine's own refusal is the same fact: under the root, not beside it
        assert "WC705" not in {f["code"] for f in rep_e["findings"]}
        assert {c["code"] for c in wc212[0]["consequences"]} <= {"WC705"}
        others = [f for f in rep_e["findings"] if f["code"] != "WC212"]
        assert all(f["code"] == "WC710" and f["severity"] == "warning" for f in others), others
        assert not INTERNALS.search(json.dumps(rep_e["findings"]))


def test_two_bad_fields_are_two_findings_and_nothing_else(tmp_path):
    def two(c):
        c.update(hidden_size="64", rms_norm_eps="1e-5")

    d = edit(copy_fixture(SRC, tmp_path / "src"), tmp_path / "x", cfg=two)
    code, rep = check(d)
    assert code == 1
    assert [(f["code"], f["subject"]) for f in rep["findings"]] == [
        ("WC212", "hidden_size"),
        ("WC212", "rms_norm_eps"),
    ]


def test_a_later_architectures_item_is_a_warning(tmp_path):
    """Engines pick the class from architectures[0]: a later item of another type stands out
    (WC207, a warning) but is no reason the config cannot be built."""
    d = _bad(tmp_path, "architectures", ["LlamaForCausalLMEagle3", 7])
    code, rep = check(d)
    assert code == 0 and not by_code(rep, "WC212")
    (f,) = by_code(rep, "WC207")
    assert f["message"] == "config architectures[1] is an integer (7), expected a string"


def test_a_missing_field_stays_a_warning(tmp_path):
    """WC207 (a field absent) is untouched: a warning, not WC212. The engines are another matter:
    both build transformers' LlamaConfig default, 11008, so SGLang pads the 128-row MLP (WC714)
    and vLLM's narrow fails (the generative differential, docs/differential.md R20)."""
    d = edit(
        copy_fixture(SRC, tmp_path / "src"),
        tmp_path / "x",
        cfg=lambda c: c.pop("intermediate_size"),
    )
    code, rep = check(d)
    assert by_code(rep, "WC207") and not by_code(rep, "WC212")
    assert all(f["severity"] == "warning" for f in by_code(rep, "WC207"))
    assert code == 1 and by_code(rep, "WC714")


def test_a_speculators_nested_field(tmp_path):
    src = copy_fixture("speculators-train", tmp_path / "src")

    def nested(c):
        c["transformer_layer_config"]["hidden_size"] = "64"

    d = edit(src, tmp_path / "x", cfg=nested)
    for args in ((), ("--engine", "vllm")):
        code, rep = check(d, *args)
        assert code == 1
        (f,) = by_code(rep, "WC212")
        assert f["message"] == (
            'transformer_layer_config.hidden_size is a string ("64"), expected an integer'
        )
        assert not by_code(rep, "WC207") and not by_code(rep, "WC704")


@pytest.mark.parametrize("to", ["sglang", "vllm"])
def test_convert_refuses(tmp_path, to):
    d = _bad(tmp_path, "hidden_size", "64")
    out = tmp_path / "out"
    r = run_cli("convert", d, out, "--to", to, "--target", "tests/fixtures/producers/target-llama")
    assert r.exit_code == 1, r
    assert "WC212" in r.stdout and 'hidden_size is a string ("64"), expected an integer' in r.stdout
    assert "refused" in r.stdout and not out.exists()


def test_nothing_computes_with_the_value():
    """The normalized config: the field is invalid, and a default that reads it is not computed
    from the default of an absent field either (head_dim = hidden_size // heads)."""
    n = config_mod.normalize({"hidden_size": "64", "num_attention_heads": 2})
    assert n.values["hidden_size"] is None and n.provenance["hidden_size"] == "invalid"
    assert n.values["head_dim"] is None and n.values["target_hidden_size"] is None
    assert n.unknown_because["head_dim"] == n.unknown_because["target_hidden_size"] == "hidden_size"
    assert n.mistyped == {"hidden_size"}
    # aux ids of the wrong type do not fall back to the default of 3 aux states
    n = config_mod.normalize({"eagle_aux_hidden_state_layer_ids": "0,1,2"})
    assert n.values["num_aux_hidden_states"] is None
    assert n.unknown_because["num_aux_hidden_states"] == "aux_layer_ids"


WRONG_VALUES = ("1e6", True, [3], {"v": 1}, 1.5)


@pytest.mark.stress
def test_no_config_field_of_any_wrong_type_crashes_a_command(tmp_path):
    """Every field weightcheck reads (mappings/config.toml), at every path it is read from, given
    a value of another JSON type: check (plain, each engine, with the target), convert and
    compare answer — findings, a refusal or one line — and never crash (the new-user trial found
    WC405 comparing a string rope_theta and convert concatenating string aux ids)."""
    import stress
    from helpers.builders import TARGET

    paths = sorted({p for spec in config_mod.field_specs() for p in spec.paths})
    # every path with every wrong type under -m stress; by default every path once, the types
    # taking turns (a fixed rotation: the same cases on every run)
    cases = [
        (path, value)
        for k, path in enumerate(paths)
        for j, value in enumerate(WRONG_VALUES)
        if stress.FULL or j == k % len(WRONG_VALUES)
    ]
    for i, (path, value) in enumerate(cases):

        def put(c, path=path, value=value):
            node = c
            *head, last = path.split(".")
            for k in head:
                if not isinstance(node.get(k), dict):
                    node[k] = {}
                node = node[k]
            node[last] = value

        d = edit(copy_fixture(SRC, tmp_path / f"s{i}"), tmp_path / f"x{i}", cfg=put)
        for args in ([], ["--engine", "sglang"], ["--engine", "vllm"], ["--target", TARGET]):
            r = run_cli("check", d, *args, "--json")
            assert r.exit_code in (0, 1, 2) and "internal error" not in r.stderr, (path, args)
        r = run_cli("convert", d, tmp_path / f"o{i}", "--to", "vllm", "--dry-run")
        assert "internal error" not in r.stderr, (path, r.stderr)
        r = run_cli("compare", d, PRODUCERS_SF)
        assert "internal error" not in r.stderr, (path, r.stderr)


def test_aux_ids_that_are_no_integers_are_one_wc212_and_convert_refuses(tmp_path):
    """The new-user trial: ids ["2", "30", "58"] made convert --to vllm crash (TypeError); now one
    WC212 for the field (each id is captured: one that is no integer makes the list no value),
    and convert refuses with check's findings on SRC, exit 1."""

    def strings(c):
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ["0", "1", "2"]

    d = edit(copy_fixture(SRC, tmp_path / "src"), tmp_path / "x", cfg=strings)
    code, rep = check(d)
    (f,) = by_code(rep, "WC212")
    assert code == 1 and "[0] is a string" in f["message"] and "2 more" in f["message"]
    assert "WC403" not in {x["code"] for x in rep["findings"]}
    for to in ("sglang", "vllm", "speculators"):
        r = run_cli("convert", d, tmp_path / f"out-{to}", "--to", to)
        assert r.exit_code == 1 and "internal error" not in r.stderr, (to, r.stderr)
        assert not (tmp_path / f"out-{to}").exists()


def test_an_engine_refusing_a_config_item_that_reads_a_mistyped_field_is_under_wc212(
    tmp_path, examples_out
):
    """SGLang refuses its `rope` config item when rope_theta is a string (WC705, subject `rope`):
    the same fact as WC212 on rope_theta, listed under it (names_root in [[rule.WC212.explains]] of mappings/rules.toml)."""
    # a transformers 4 config (rope_theta at the top level, as the K2 drafter's), which SGLang reads
    d = edit(
        examples_out / "kimi-k2-drafter",
        tmp_path / "x",
        cfg=lambda c: c.update(rope_theta="1e6"),
    )
    for args in ([], ["--engine", "sglang"]):
        _, rep = check(d, *args)
        assert "WC705" not in {f["code"] for f in rep["findings"]}, (args, rep["findings"])
        (root,) = by_code(rep, "WC212")
        assert root["subject"] == "rope_theta"
        assert [c["code"] for c in root["consequences"]] == ["WC705"]
