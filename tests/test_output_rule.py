"""Issue #14, item 6: ``weightcheck rule CODE`` prints a rule's page (what, why, the report behind
it, the fix), ``rule --all`` lists them; the pages ship in the wheel (mappings/rules.toml) and
docs/rules.md is generated from them: ``weightcheck rule --all --format markdown``."""

from __future__ import annotations

import dataclasses
import fnmatch
import tomllib

import pytest
from conftest import ROOT, run_cli

import weightcheck
from weightcheck import schema
from weightcheck.rules import RULES


def test_every_rule_has_a_page_with_what_and_fix_and_no_page_without_a_rule():
    data = tomllib.loads((ROOT / "mappings" / "rules.toml").read_text())
    assert sorted(data["rule"]) == sorted(RULES)
    for code, page in data["rule"].items():
        assert page.get("what") and page.get("fix"), code
        assert set(page) <= {f.name for f in dataclasses.fields(schema.RulePage)}, code
    prefixes = [g["prefix"] for g in data["group"]]
    for code in RULES:  # every code is in exactly one group of docs/rules.md
        assert sum(code.startswith(p) for p in prefixes) == 1, code


def test_docs_rules_md_is_the_generated_document():
    r = run_cli("rule", "--all", "--format", "markdown")
    assert r.exit_code == 0
    assert (ROOT / "docs" / "rules.md").read_text() == r.stdout, (
        "docs/rules.md is generated: weightcheck rule --all --format markdown > docs/rules.md"
    )


def test_rules_toml_ships_as_package_data():
    """The wheel's package data is every *.toml below the package (pyproject.toml), mappings/ is
    linked in as weightcheck/_mappings, and the pages are read through the package, not docs/."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["*"]
    assert any(fnmatch.fnmatch("rules.toml", g) for g in globs)
    from weightcheck import mappings

    assert mappings.root().joinpath("rules.toml").is_file()


def test_rule_prints_the_page():
    r = run_cli("rule", "WC305")
    assert r.exit_code == 0, r
    out = r.stdout
    assert out.startswith("WC305 d2t-missing (error)\n")
    for part in ("What it checks:", "Severity:", "Why:", "Reported:", "Fix:", "Runs: always"):
        assert part in out, part
    assert "vllm PR #18909" in out
    assert run_cli("rule", "d2t-missing").stdout == out  # by name
    assert run_cli("rule", "wc305").stdout == out
    assert "Runs: with --engine" in run_cli("rule", "WC702").stdout


def test_rule_json_is_the_page():
    j = run_cli("rule", "WC404", "--json").json
    assert j["schema"] == "weightcheck.rule/1"
    assert (j["code"], j["name"], j["severity"]) == ("WC404", "attention-geometry", "error")
    assert j["severity_note"] == (
        "error; warning when `head_dim` is outside what the attention kernels serve"
    )
    # the consequence behind the severity, and the case's (mappings/rules.toml)
    assert j["consequence"] == "crash" and j["because"].startswith("error: the engine")
    assert "A warning when `head_dim`" in j["because"]
    assert j["fix"] and j["what"] and j["summary"] == RULES["WC404"].summary
    page = weightcheck.rule("WC404")  # the report the command prints, typed
    assert page.to_dict() == j and page.fix == page["fix"] == j["fix"]


@pytest.mark.parametrize("code", ["WC999", "WC1", "nonsense", ""])
def test_unknown_rule_exits_2(code):
    r = run_cli("rule", code, "--json") if code else run_cli("rule", "--json")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("weightcheck: error: ")
    assert r.json["exit_status"] == 2


def test_rule_all_lists_every_rule():
    r = run_cli("rule", "--all")
    assert r.exit_code == 0
    rows = [line.split()[:3] for line in r.stdout.splitlines()[2:] if line.startswith("WC")]
    assert [row[0] for row in rows] == list(RULES)
    assert all(row[1] == RULES[row[0]].slug and row[2] == RULES[row[0]].severity for row in rows)
    j = run_cli("rule", "--all", "--json").json
    assert j["schema"] == "weightcheck.rules/1" and [p["code"] for p in j["rules"]] == list(RULES)
    assert [p.to_dict() for p in weightcheck.rule_pages()] == j["rules"]
    assert run_cli("rule", "WC101", "--all").exit_code == 2  # one or the other


def test_an_unknown_code_names_the_registrys_range():
    """The range an unknown code's error gives is the registry's, not a list written by hand
    (it said WC101 ... WC906 while WC907 and WC908 existed)."""
    r = run_cli("rule", "WC999")
    assert r.exit_code == 2
    codes = list(RULES)
    assert f"({codes[0]} ... {codes[-1]})" in r.stderr and codes[-1] >= "WC908"
