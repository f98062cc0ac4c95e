"""The JSON Schemas of the reports: generated from weightcheck/reports/, shipped in the package
(weightcheck/schemas/), and every ``--json`` output of the suite validates against its own
(conftest.run_cli -> schema_check.check_output)."""

from __future__ import annotations

import copy
import json

import pytest
import schema_check
from conftest import PRODUCERS, run_cli

from weightcheck import reports, schemagen


def test_the_shipped_schemas_are_the_generated_ones():
    shipped = {p.name: p.read_text() for p in schemagen.SCHEMAS.glob("*.json")}
    assert shipped == schemagen.generated(), "run: python -m weightcheck.schemagen"
    assert len(shipped) == len(reports.REPORTS)


def test_each_schema_names_its_report_and_requires_every_stable_key():
    s = json.loads((schemagen.SCHEMAS / "check.json").read_text())
    assert s["$id"] == "weightcheck.check/1" and s["additionalProperties"] is False
    assert {"schema", "ok", "source", "findings", "summary", "conclusion"} <= set(s["required"])
    assert "engines" in s["properties"] and "engines" not in s["required"]  # plain check only
    finding = s["$defs"]["Finding"]
    assert finding["properties"]["severity"] == {"enum": ["error", "warning", "info"]}


def test_a_report_that_breaks_its_schema_is_caught():
    good = run_cli("check", PRODUCERS / "speculators-train", "--engine", "sglang", "--json").json
    schema_check.validate(good)
    for broken in (
        {k: v for k, v in good.items() if k != "summary"},  # a key missing
        {**good, "extra": 1},  # a key no schema knows
        {**good, "ok": "yes"},  # a wrong type
    ):
        with pytest.raises(AssertionError):
            schema_check.validate(broken)
    bad = copy.deepcopy(good)
    bad["findings"][0]["severity"] = "fatal"  # a value outside its enum, nested
    with pytest.raises(AssertionError, match="fatal"):
        schema_check.validate(bad)


@pytest.mark.parametrize(
    "args",
    [
        ("rule", "WC305"),
        ("rule", "--all"),
        ("check", "/no/such/path"),
        ("inspect",),
    ],
)
def test_rule_and_error_outputs_validate(args):
    r = run_cli(*args, "--json")
    schema_check.validate(r.json)  # run_cli validated it too; said here for these kinds
    assert r.json["schema"].startswith("weightcheck.")


def test_compare_reasons_are_structured_differences(make_drafter, tiny_cfg):
    """The judge says each difference as data (kind, subject, A's and B's values) and its
    sentence; the JSON keeps the sentences, the text view counts what a table lists by kind
    (it no longer parses the sentences back)."""
    import weightcheck

    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", dict(tiny_cfg, hidden_size=96), seed=1, skip=("lm_head.weight",))
    c = weightcheck.compare(a, b)
    kinds = {d.kind for d in c.reasons}
    assert {"only", "config"} <= kinds and c.verdict == "incompatible"
    hidden = next(d for d in c.reasons if d.kind == "config" and d.subject == "hidden_size")
    assert (hidden.a, hidden.b) == (128, 96)
    lm = next(d for d in c.reasons if d.kind == "only")
    assert lm.subject == "lm_head.weight" and lm.a == "lm_head.weight" and lm.b is None
    assert c.to_dict()["reasons"] == [d.text for d in c.reasons]  # JSON: the sentences
    text = run_cli("compare", a, b).stdout
    assert "config field(s) differ (table below)" in text and hidden.text not in text
