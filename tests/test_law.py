"""The consistency law (tests/law.py, docs/consistency.md) over the differential corpus.

The default suite runs it on a fixed-seed sample of the corpus (every base and axis represented
by at least one variant, plus the variants each "Why" item of issue #21 was seen on); the
``engine`` group, beside the oracles, on every variant. 0 violations is the law.
"""

from __future__ import annotations

import os
import random
import sys

import law
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
import corpus  # noqa: E402

SEED = 21  # issue #21
SAMPLE = 24  # plus the pinned ones
# the variants the items were seen on (layouts, aux-id boundaries, wrong types, MLA, layers)
PINNED = (
    "sf.asis",
    "st.asis",
    "mo.asis",
    "sf.relayout",
    "sf.aux.n123",
    "sf.aux.top012",
    "sf.arch.mla",
    "sf.vd.string",
    "sf.extra.layer1",
    "sf.aux.no_aux",
    "sf.flag.bias_on_missing",
    "mm.asis",
    "mt.swap.kv_a_kv_b",
)


def _base(x) -> str | None:
    folder = corpus.ALL_BASES.get(x.base)
    return os.path.join(corpus.PRODUCERS, folder) if folder else None


def _run(x, tmp_path) -> list[str]:
    src = corpus.write(x, str(tmp_path / x.id))
    return law.law(src, base=_base(x), target=corpus.TARGET, tmp=str(tmp_path))


def _sample() -> list:
    vs = corpus.variants()
    by_id = {x.id: x for x in vs}
    pinned = [by_id[i] for i in PINNED if i in by_id]
    rest = [x for x in vs if x.id not in PINNED]
    return pinned + random.Random(SEED).sample(rest, SAMPLE)


@pytest.mark.parametrize("x", _sample(), ids=lambda x: x.id)
def test_the_law_holds_on_a_sample(x, tmp_path):
    assert _run(x, tmp_path) == []


@pytest.mark.engine
def test_the_law_holds_on_the_whole_corpus(tmp_path):
    vs = corpus.variants()
    assert len(vs) >= 400
    violations = {}
    for x in vs:
        bad = _run(x, tmp_path)
        if bad:
            violations[x.id] = bad
    assert violations == {}, f"{len(violations)} of {len(vs)} variants break the law"


def test_the_law_can_fail(tmp_path):
    """Each clause finds what it is for: a report that breaks it by hand is caught."""
    plain = {"findings": [{"code": "WC206", "severity": "error", "consequences": []}]}
    other = {"findings": [{"code": "WC206", "severity": "error", "consequences": []}]}
    skip = frozenset()
    assert law.signature(plain, skip) == law.signature(other, skip)
    other["findings"].append({"code": "WC704", "severity": "error", "consequences": []})
    assert law.signature(plain, skip) != law.signature(other, skip)
    assert "WC708" in law.layout_specific() and "WC206" not in law.layout_specific()
    nested = [{"code": "A", "consequences": [{"code": "B", "consequences": []}]}]
    assert [f["code"] for f in law.flat(nested)] == ["A", "B"]


def test_docs_list_the_layout_specific_codes():
    """docs/consistency.md's table of layout-specific codes is the rule data's."""
    import re

    text = (law.ROOT_DIR / "docs" / "consistency.md").read_text()
    section = text.split("## Layout-specific codes", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| (WC\d{3}) \|", section, re.M))
    assert listed == set(law.layout_specific())
