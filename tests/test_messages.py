"""Every finding over the corpus: a first line that fits, and a severity its rule's page names.

* Messages in two parts (issue #32 item 1): ``message`` is one line of at most 120 characters,
  what is wrong and what to do; the evidence, the engine's code path and the long command are in
  ``detail``.
* Severity is the consequence (issue #31 What 1): a finding's severity is decided by
  rules/base.py ``severity_of`` from its rule's consequence or one of the cases its page names
  ([rule.WCnnn.consequence] in mappings/rules.toml), or by the law's merge in plain check (a
  warning naming the engine it holds for). Over the corpus, every finding of ``check --engine E``
  that explains nothing has one of the severities its page names.

The corpus: the producer fixtures, the differential corpus (tests/engine/corpus.py), synth.py's
drafters and the hurried user's (tests/helpers/hurried.py), each under plain check, ``--target``,
``--engine E`` for both engines and the SpecForge and speculators training gates; the differential corpus sampled
in the default run as test_fix_commands samples it (``STEP``), all of it under ``-m stress``.
"""

from __future__ import annotations

import re

import pytest
from conftest import PRODUCERS, run_cli
from helpers.fixcommands import _check, flat
from test_fix_commands import CHUNKS, corpus_drafters

from weightcheck.commands.rule import pages
from weightcheck.rules import severity_of

WIDTH = 120
# the aux capture rules are rewritten with the capture facts (issue #31 What 3, another branch):
# their two-part messages come with that work
LATER = frozenset({"WC706", "WC707", "WC708", "WC709", "WC710"})
OPTIONS = (
    (),
    ("--target", "TARGET"),
    ("--engine", "sglang"),
    ("--engine", "vllm"),
    ("--engine", "vllm", "--target", "TARGET"),
    ("--training-config", "SPECFORGE"),
    ("--training-config", "SPECULATORS"),
)


UNAGREED = re.compile(r"\b(sglang|vllm)( and (sglang|vllm))? [a-z]+\(s\)")


def _severities() -> dict[str, set[str]]:
    """code -> the severities its page names: its consequence's and each case's."""
    from weightcheck.rules.base import page

    out = {}
    for p in pages():
        c = page(p.code).consequence
        out[p.code] = {severity_of(c.kind), *(severity_of(x.kind) for x in c.case)}
    return out


def _reports(ds):
    for d in ds:
        for options in OPTIONS:
            rep = _check(d.path, options, d.target)
            if rep is not None:
                yield d, options, rep


@pytest.mark.stress
@pytest.mark.parametrize("part", range(CHUNKS))
def test_every_message_fits_and_every_severity_is_its_page_s(tmp_path, part):
    allowed = _severities()
    long, wrong = [], []
    n = 0
    for d, options, rep in _reports(corpus_drafters(tmp_path, part)):
        for f in flat(rep["findings"]):
            n += 1
            where = f"{d.id} {' '.join(options)}: {f['code']}"
            m = f["message"]
            if f["code"] not in LATER and (len(m) > WIDTH or "\n" in m):
                long.append(f"{where} ({len(m)}): {m}")
            # a verb agrees with the engines it follows ('sglang ties', 'sglang and vllm fail')
            for said in (m, f.get("detail") or ""):
                if UNAGREED.search(said):
                    long.append(f"{where}: a verb written as 'verb(s)': {said}")
            # plain check's merge may make any error a warning naming an engine; a root takes
            # its worst consequence's severity (rules/causes.py)
            if "--engine" in options and not f["consequences"]:
                if f["severity"] not in allowed[f["code"]]:
                    wrong.append(f"{where} is a {f['severity']}")
    assert n > 0
    assert long == [], f"{len(long)} messages over {WIDTH} characters:\n" + "\n".join(long[:40])
    assert wrong == [], "severities no page names:\n" + "\n".join(sorted(set(wrong))[:40])


def test_a_verb_agrees_with_the_engines_it_follows(tmp_path):
    """One engine: 'sglang selects', 'sglang ties'; never 'select(s)' (hand-made drafters: vLLM's
    class name in architectures, a tied head with a reduced draft vocabulary)."""
    from helpers.builders import edit

    src = PRODUCERS / "specforge-hf"
    arch = edit(
        src, tmp_path / "arch", cfg=lambda c: c.update(architectures=["Eagle3LlamaForCausalLM"])
    )
    tied = edit(src, tmp_path / "tied", cfg=lambda c: c.update(tie_word_embeddings=True))
    said = []
    for path in (arch, tied):
        for f in flat(run_cli("check", path, "--json").json["findings"]):
            said += [f["message"], f.get("detail") or ""]
    text = "\n".join(said)
    assert "sglang selects no EAGLE-3 loader" in text and "sglang ties the head" in text, text
    assert not UNAGREED.search(text), text
