"""Each rule in one place: weightcheck/rules/ binds a function to its code once (``@rule("WC101")``)
and the function emits through the bound ``finding``; the rule's name, severity, summary, page and
the findings it explains are its entry of mappings/rules.toml (weightcheck/schema.py RulePage)."""

from __future__ import annotations

import ast
import copy
import re

import pytest
from conftest import ROOT

from weightcheck import mappings
from weightcheck.errors import WeightcheckError
from weightcheck.rules import RULES, _collect, _modules
from weightcheck.rules.base import page, rules_file

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
        assert (r.slug, r.severity, r.summary) == (p.name, p.severity, p.summary)
    assert sorted(rules_file().rule) == sorted(RULES)


def test_a_finding_carries_its_rule_s_code_name_and_severity():
    from weightcheck.rules.base import Context, Rule

    def fn(ctx, finding):
        yield finding("a message", "fc.weight")
        yield finding("another", severity="info")

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
