"""Issue #21, item 2: the placeholder d2t — all zeros (draft id j is target id j) with a draft
vocabulary smaller than the target's — is what SpecForge writes before it builds the map from
data. It loads and runs, so it is a warning (WC312), said once; compare does not read it as a
real map and gives no re-index advice built on it; the one test is model/vocab.py's."""

from __future__ import annotations

from conftest import run_cli
from helpers.builders import by_code, check, copy_fixture, placeholder_drafter, read_config, said
from helpers.text import unwrapped

from weightcheck.model import vocab

SRC = "specforge-sglang"  # draft_vocab_size 128 of vocab_size 512


def test_check_warns_once_in_words(tmp_path):
    d = placeholder_drafter(copy_fixture(SRC, tmp_path / "src"), tmp_path / "x")
    vd, v = read_config(d)["draft_vocab_size"], read_config(d)["vocab_size"]
    code, rep = check(d)
    assert code == 0  # a warning: it loads and runs
    (f,) = by_code(rep, "WC312")
    assert f["severity"] == "warning" and f["subject"] == "d2t"
    assert (
        said(f)
        .split("\n")[1]
        .startswith(
            f"d2t is all zeros: draft token j is target token j, the first {vd:,} of {v:,} ids — "
            "the placeholder SpecForge writes before building the map from data"
        )
    )
    assert "almost certainly not trained on that map" in said(f)
    assert f["message"].startswith("d2t is the placeholder map")
    # (WC710: the fixture nests its ids, which vLLM's V2 runner does not read: not this test's)
    assert [x["code"] for x in rep["findings"] if x["code"] != "WC710"] == ["WC312"], rep[
        "findings"
    ]
    for engine in ("sglang", "vllm"):  # the same with an engine
        _, rep_e = check(d, "--engine", engine)
        assert len(by_code(rep_e, "WC312")) == 1


def test_a_real_map_and_no_d2t_are_quiet(tmp_path):
    _, rep = check(copy_fixture(SRC, tmp_path / "src"))
    assert not by_code(rep, "WC312")


def test_the_one_test():
    assert vocab.is_placeholder([0] * 4, 10)
    assert not vocab.is_placeholder([0] * 10, 10)  # a full-size zero d2t is the identity
    assert not vocab.is_placeholder([0, 0, 1, 0], 10)
    assert not vocab.is_placeholder([0] * 4, None)  # no vocabulary size: cannot tell
    assert not vocab.is_placeholder([], 10)
    m = vocab.from_offsets([0] * 4, 10, "x")
    assert m.placeholder and not m.identity
    assert not vocab.from_offsets([1, 1, 1, 1], 10, "x").placeholder


def test_compare_says_it_is_the_placeholder_and_gives_no_reindex_advice(tmp_path):
    real = copy_fixture(SRC, tmp_path / "src")
    ph = placeholder_drafter(real, tmp_path / "x")
    for a, b, who in ((ph, real, "A"), (real, ph, "B")):
        r = run_cli("compare", a, b, "--json")
        v = r.json["vocab"]
        assert v[f"{who.lower()}_placeholder"] and not v[f"{'ba'[who == 'B']}_placeholder"]
        assert v["meaning"].startswith(f"{who}'s d2t is the all-zero placeholder")
        assert "--vocab-from B` re-indexes" not in v["meaning"]
        text = unwrapped(run_cli("compare", a, b).stdout)
        assert f"({who}: d2t all zeros, the target's first ids" in text
    v = run_cli("compare", real, real, "--json").json["vocab"]
    assert not v["a_placeholder"] and not v["b_placeholder"]
