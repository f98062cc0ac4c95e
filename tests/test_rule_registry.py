"""Each rule in one place: weightcheck/rules/ binds a function to its code once (``@rule("WC101")``)
and the function emits through the bound ``finding``; the rule's name, consequence (its severity),
summary, page and the findings it explains are its entry of mappings/rules.toml
(weightcheck/schema.py RulePage). A severity is decided by one function of the consequence
(rules/base.py severity_of): no rule module names a severity."""

from __future__ import annotations

import ast
import copy
import re

import pytest
from conftest import ROOT

from weightcheck import mappings
from weightcheck.errors import WeightcheckError
from weightcheck.rules import RULES, _collect, _modules
from weightcheck.rules.base import MEANS, page, rules_file, severity_of
from weightcheck.schema import RulesFile

RULE_MODULES = sorted(p for p in (ROOT / "weightcheck" / "rules").glob("*.py"))


def test_a_code_is_written_once_in_the_code():
    """No ``WCnnn`` literal in the rule modules but the decorator's: the code is bound once."""
    seen = []
    for path in RULE_MODULES:
        tree = ast.parse(path.read_text())
        bound = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "rule":
                        bound.add(id(d.args[0]))
                        seen.append(d.args[0].value)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"WC\d{3}", node.value) and path.name not in ("apply.py",):
                    assert id(node) in bound, f"{path.name}:{node.lineno}: {node.value}"
    assert sorted(seen) == sorted(RULES)


def test_every_rule_is_its_entry():
    for code, r in RULES.items():
        p = page(code)
        assert (r.slug, r.summary) == (p.name, p.summary)
        assert r.severity == severity_of(p.consequence.kind)  # its consequence's, nothing else
    assert sorted(rules_file().rule) == sorted(RULES)


def test_severity_is_the_consequence():
    """The one table: crash, untrained, misfed are errors; conditional a warning; unchanged
    info (docs/rules.md states it)."""
    assert {k: severity_of(k) for k in MEANS} == {
        "crash": "error",
        "untrained": "error",
        "misfed": "error",
        "conditional": "warning",
        "unchanged": "info",
    }
    # every rule's page says what the engine does, and each case names when it applies
    for code in RULES:
        c = page(code).consequence
        assert c.says.strip() and all(x.when.strip() for x in c.case), code


def test_no_rule_module_names_a_severity():
    """A rule passes a consequence (``consequence=CONDITIONAL``), never ``severity=``: the
    severity is decided by severity_of alone. (apply.py's law and causes.py's fold carry a
    severity the rules gave, the law's through severity_of: they bind no rule.)"""
    for path in RULE_MODULES:
        if "@rule(" not in path.read_text():
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "severity":
                raise AssertionError(f"{path.name}:{node.value.lineno}: severity= in a rule")


def test_a_rule_without_a_consequence_is_refused(tmp_path):
    """[rule.WCnnn.consequence] is required: a rules file without it does not load."""
    text = (ROOT / "mappings" / "rules.toml").read_text()
    start = text.index("[rule.WC101.consequence]")
    end = text.index("[rule.WC102]")
    broken = text[:start] + text[end:]
    import tomllib

    with pytest.raises(WeightcheckError) as e:
        mappings.build(RulesFile, tomllib.loads(broken), "mappings/rules.toml")
    assert "rule.WC101.consequence" in str(e.value)
    with pytest.raises(WeightcheckError) as e:
        bad = text.replace('kind = "untrained"', 'kind = "fatal"', 1)
        mappings.build(RulesFile, tomllib.loads(bad), "mappings/rules.toml")
    assert "rule.WC101.consequence.kind" in str(e.value)


def test_a_finding_carries_its_rule_s_code_name_and_severity():
    from weightcheck.rules.base import Context, Rule

    def fn(ctx, finding):
        yield finding("a message", "fc.weight")
        yield finding("another", consequence="unchanged")

    ctx = Context(drafter=None, rules=RULES)
    a, b = Rule("WC206", "", fn)(ctx)
    assert (a.code, a.rule, a.severity, a.subject) == (
        "WC206",
        page("WC206").name,
        "error",
        "fc.weight",
    )
    assert (b.code, b.severity) == ("WC206", "info")


@pytest.mark.parametrize("change", ["extra", "missing"])
def test_a_page_without_a_rule_or_a_rule_without_a_page_is_an_error(monkeypatch, change):
    data = copy.deepcopy(rules_file())
    pages = dict(data.rule)
    if change == "extra":
        pages["WC999"] = pages["WC101"]
    else:
        del pages["WC101"]
    object.__setattr__(data, "rule", pages)  # a frozen dataclass: this copy only
    mappings.forget()
    monkeypatch.setattr("weightcheck.rules.rules_file", lambda: data)
    with pytest.raises(WeightcheckError) as e:
        _collect(_modules())
    assert str(e.value).startswith("mappings/rules.toml: rule.WC")
    mappings.forget()
